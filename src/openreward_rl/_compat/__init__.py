"""The one home of every touch of another library's private names or process-wide state.

Nothing outside this package imports a private module of another library, or reads or writes a private
attribute of another library's object (tests/test_private_names.py says so). One module per library:

| module | library | what | scope |
|---|---|---|---|
| `openreward` | openreward (the SDK) | SSE parser fix; pooled environments API; session calls, pings, death; terminal tool cache | SSE parser: process-wide; the rest: one client or session |
| `aiohttp` | aiohttp | the tool call's wait for its answer's head; draining; proxy/netrc settings | the pooled transport's responses |
| `sse_starlette` | sse-starlette | its shutdown event, one per event loop | process-wide |
| `structlog` | structlog | secrets masked in `PrintLogger` lines | process-wide |
| `transformers` | transformers | model name, continuous batching cache dtype, tokenizer backends, attention kind | one object |
| `trl` | trl | the GRPO trainer's generate-and-score step, extended; the fused LM head's tokens per tile | one subclass; one trainer's training |
| `trainers` | Slime, Miles | the rollout's singleton `GenerateState` (no gate: shape checked at each read) | read only |
| `renderers` | renderers | a renderer config's chat-template fields | read only |

Each module but `trainers` has a `GATE`: the library's supported versions and the internals the module relies on; it fails
(`CompatError`) naming the library, its version and the internal that moved, instead of an `AttributeError`
deep inside an episode. Process-wide patches are installed by `install()` (idempotent; the CLI commands,
the Slime/Miles hooks, the TRL adapter and `env.open_session` call it) and undone by `uninstall()`;
`installed()` is a context manager doing both. The structlog patch needs the project's redaction, so
`redaction.install_log_redaction()` installs it (`uninstall()` undoes it too). The upstream-ready write-up of
each SDK fix is docs/upstream.md.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from openreward_rl._compat._gate import CompatError, Gate, Internal

__all__ = ["CompatError", "Gate", "Internal", "install", "uninstall", "installed", "is_installed", "gates"]

_lock = threading.Lock()
_installed = False


def install() -> None:
    """Check the SDK's internals and install the process-wide patches (idempotent, cheap once done)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from openreward_rl._compat import sse_starlette
        from openreward_rl._compat.aiohttp import GATE as AIOHTTP
        from openreward_rl._compat.openreward import check, sse

        check()
        AIOHTTP.check()
        sse.install()
        sse_starlette.install()
        _installed = True


def uninstall() -> None:
    """Put every patched library back as it was (idempotent)."""
    global _installed
    with _lock:
        from openreward_rl._compat import sse_starlette, structlog
        from openreward_rl._compat.openreward import sse

        sse.uninstall()
        sse_starlette.uninstall()
        structlog.uninstall()
        _installed = False


def is_installed() -> bool:
    return _installed


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """The process-wide patches for the block; undone after it unless they were installed before it."""
    before = _installed
    install()
    try:
        yield
    finally:
        if not before:
            uninstall()


def gates() -> dict[str, Gate]:
    """Every compat module's gate, by module (importing a module imports no patched library)."""
    from openreward_rl._compat import aiohttp, openreward, renderers, sse_starlette, structlog, transformers, trl

    return {
        module.__name__.rsplit(".", 1)[1]: module.GATE
        for module in (openreward, aiohttp, sse_starlette, structlog, transformers, trl, renderers)
    }
