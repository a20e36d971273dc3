"""A scripted model's tool call as Hermes-format text (`<tool_call>` JSON `</tool_call>`), the format the
`hermes` parser reads: what the tests' scripted models reply."""

from __future__ import annotations

import json
from typing import Any


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
