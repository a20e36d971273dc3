"""SecretKeeper: an environment that needs secrets and handles them carelessly, for the leak tests.

| tool        | behaviour                                                                  |
|-------------|----------------------------------------------------------------------------|
| `use_key`   | checks both secrets arrived; reward 1.0, finished; never shows them         |
| `fail_auth` | raises with the API key in the message (a careless environment's traceback) |
| `echo_key`  | returns the key as tool output: the model-visible case                     |
| `fail_all`  | raises quoting its secrets and every known key of its process's environment |
"""

from __future__ import annotations

import os

from openreward.environments import Environment, TextBlock, ToolOutput, tool

# The keys a run's process knows of: served in-process (`eval --serve`), the environment sees them too.
KNOWN_KEY_VARIABLES = ("OPENREWARD_API_KEY", "WANDB_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


class SecretKeeper(Environment):
    def __init__(self, task_spec: dict = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 - the SDK's signature
        super().__init__(task_spec, secrets)
        self.secrets = dict(secrets)

    @classmethod
    def list_splits(cls) -> list[str]:
        return ["train"]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"id": "secret-0"}]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text="Call use_key.")]

    @tool
    def use_key(self) -> ToolOutput:
        """Use the configured secrets without showing them."""
        have = sorted(k for k, v in self.secrets.items() if v)
        return ToolOutput(
            blocks=[TextBlock(text=f"authorized with {', '.join(have)}")],
            reward=1.0,
            finished=True,
            metadata={"keys": have},
        )

    @tool
    def fail_auth(self) -> ToolOutput:
        """Fail, quoting the key (what a careless environment does)."""
        raise RuntimeError(f"upstream rejected api key {self.secrets.get('openai_api_key')!s}")

    @tool
    def echo_key(self) -> ToolOutput:
        """Show the key to the model."""
        return ToolOutput(blocks=[TextBlock(text=f"your key is {self.secrets.get('openai_api_key')}")])

    @tool
    def fail_all(self) -> ToolOutput:
        """Fail, quoting every secret this environment and its process hold."""
        held = [*self.secrets.values(), *(os.environ.get(name, "") for name in KNOWN_KEY_VARIABLES)]
        raise RuntimeError(f"upstream rejected keys {' '.join(held)}")
