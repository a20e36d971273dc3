"""Serve OpenReward SDK environment classes on 127.0.0.1, in this process or in a child process.

An environment class is named by a spec, ``"path/to/file.py:ClassName"`` or ``"package.module:ClassName"``.
One server can host several classes; the first is the default, and every class is reachable by its
*variant*, the lowercased ``Environment.name()`` (the SDK's route prefix). Use
:meth:`LocalEnvServer.environment` to get a client handle with the right ``base_url`` and ``variant``:
a local server ignores the environment name, and without a variant every call on a multi-environment
server silently goes to the first class.

In-process mode runs uvicorn in a daemon thread (cheap; for test fixtures, and `train`/`eval --serve`); while it
runs, the SDK's server loggers write to a log file (`LocalEnvServer.log_file`), with one line on stderr per
distinct failure of the environment's code instead of its traceback (`env.server_log`). Subprocess mode runs
``python -m openreward_rl.env.local_server SPEC... --port N`` (for fault tests: :meth:`LocalEnvServer.kill`
hard-kills it).

>>> with serve_environments(["examples/environments/math_env.py:MathEnv"]) as server:
...     server.base_url.startswith("http://127.0.0.1:"), server.variant_for("MathEnv")
(True, 'mathenv')
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import signal
import socket
import subprocess as _subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import anyio
import attrs
import uvicorn
from openreward.environments import Environment, Server

import openreward_rl._compat as _compat
from openreward_rl._registry import FILE_MODULE_PREFIX, import_file, import_plugin
from openreward_rl.env.server_log import release_server_logs, route_server_logs
from openreward_rl.errors import ConfigError, EnvError, boundary

if TYPE_CHECKING:
    from openreward import AsyncOpenReward
    from openreward.api.environments.client import AsyncEnvironment

__all__ = [
    "load_environment_class",
    "check_servable",
    "import_file",
    "class_spec",
    "variant_name",
    "LocalEnvServer",
    "serve_environments",
    "loopback_environ",
    "EnvServerStartError",
    "main",
]

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
# Seconds uvicorn waits for open requests (e.g. a hanging tool call) before closing them on stop.
GRACEFUL_SHUTDOWN_S = 3

EnvSpec = str | type[Environment]


class EnvServerStartError(EnvError, RuntimeError):
    """The local environment server did not come up (bad spec, crashed child, or no /health in time)."""


def load_environment_class(spec: str) -> type[Environment]:
    """Import the `Environment` subclass named by ``"file.py:Class"`` or ``"package.module:Class"``.

    A file is imported once per process under a name derived from its absolute path, so loading
    the same spec twice gives the same class.

    >>> load_environment_class("examples/environments/whodunit.py:WhoDunIt").name()
    'WhoDunIt'
    >>> load_environment_class("examples/environments/whodunit.py")
    Traceback (most recent call last):
    ...
    openreward_rl.errors.ConfigError: environment spec 'examples/environments/whodunit.py' must look like 'path/to/file.py:ClassName' or 'package.module:ClassName'
    """
    location, sep, class_name = spec.rpartition(":")
    if not sep or not location or not class_name.isidentifier():
        raise ConfigError(
            f"environment spec {spec!r} must look like 'path/to/file.py:ClassName' or 'package.module:ClassName'"
        )
    try:
        module = import_plugin(location)
    except ValueError as error:
        raise ConfigError(f"environment spec {spec!r}: {error}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"environment spec {spec!r}: {location!r} has no attribute {class_name!r}")
    if not (inspect.isclass(cls) and issubclass(cls, Environment)):
        raise ConfigError(f"environment spec {spec!r}: {class_name} is {cls!r}, not an openreward Environment subclass")
    return cls


def check_servable(classes: Sequence[type[Environment]]) -> None:
    """`ConfigError` naming the classes and the SDK's reason unless its `Server` accepts them (each has a
    tool, no terminal tool is concurrent, names differ, ...): what serving them would fail on, checked
    without taking a port, so a command can refuse them before it loads a model."""
    if classes:
        with boundary(ConfigError, f"cannot serve {', '.join(cls.__name__ for cls in classes)}"):
            Server(list(classes))


def class_spec(cls: type[Environment]) -> str:
    """A spec that re-imports `cls` in another process: by module name, or by file for file-loaded classes.

    >>> from openreward.environments import Environment
    >>> class_spec(Environment)
    'openreward.environments.environment:Environment'
    """
    module = sys.modules.get(cls.__module__)
    if "<locals>" in cls.__qualname__ or module is None:
        raise ConfigError(f"{cls.__qualname__} is not importable from another process (define it at module level)")
    if cls.__module__.startswith(FILE_MODULE_PREFIX) or cls.__module__ == "__main__":
        file = getattr(module, "__file__", None)
        if file is None:
            raise ConfigError(f"{cls.__qualname__} lives in {cls.__module__!r}, which has no file to re-import")
        return f"{file}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def variant_name(cls_or_name: type[Environment] | str) -> str:
    """The route prefix a server gives an environment class: its lowercased ``name()``.

    >>> variant_name("WhoDunIt")
    'whodunit'
    """
    name = cls_or_name if isinstance(cls_or_name, str) else cls_or_name.name()
    return name.lower()


def loopback_environ(base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `base` (default ``os.environ``) with the update check off and loopback exempt from proxies."""
    env = dict(os.environ if base is None else base)
    env["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
    for key in ("NO_PROXY", "no_proxy"):
        entries = [e for e in env.get(key, "").split(",") if e.strip()]
        env[key] = ",".join(dict.fromkeys([*entries, LOOPBACK, "localhost"]))
    return env


def _free_loopback_socket() -> socket.socket:
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP, and
    # without it every answer on a kept-alive connection waited ~40 ms for the client's delayed ACK (Nagle)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))
    return sock


def _child_import_path(pythonpath: str) -> list[str]:
    """PYTHONPATH for a child that can import what this process imports: this package and the
    directories added to ``sys.path`` at run time (a test directory, a checkout on PYTHONPATH).
    The interpreter's own directories are left out; the child gets those anyway."""
    own = (Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve())
    entries = [str(Path(__file__).resolve().parents[1])]
    for entry in [*sys.path, *pythonpath.split(os.pathsep)]:
        if not entry:
            continue
        path = Path(entry).resolve()
        if path.is_dir() and not any(path.is_relative_to(prefix) for prefix in own):
            entries.append(str(path))
    return list(dict.fromkeys(entries))


def _uvicorn_config(app: Any, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=LOOPBACK,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=60,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


def _class_tuple(classes: Iterable[type[Environment]]) -> tuple[type[Environment], ...]:
    return tuple(classes)  # a typed converter: mypy's attrs plugin cannot bind a generic one such as `tuple`


@attrs.define(eq=False)
class LocalEnvServer:
    """A running (or runnable) local environment server; use :func:`serve_environments` to make one.

    `classes` are the served classes in route order (the first is the default). `specs` are the
    importable names the subprocess mode passes to its child.
    """

    classes: tuple[type[Environment], ...] = attrs.field(converter=_class_tuple)
    mode: Literal["thread", "subprocess"] = attrs.field(
        default="thread", validator=attrs.validators.in_(("thread", "subprocess"))
    )
    log_level: str = "warning"
    start_timeout_s: float = START_TIMEOUT_S
    port: int | None = attrs.field(default=None, init=False)
    _uvicorn: uvicorn.Server | None = attrs.field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = attrs.field(default=None, init=False, repr=False)
    _process: _subprocess.Popen[bytes] | None = attrs.field(default=None, init=False, repr=False)
    _log: IO[bytes] | None = attrs.field(default=None, init=False, repr=False)
    _final_logs: str = attrs.field(default="", init=False, repr=False)
    log_file: str | None = attrs.field(
        default=None, init=False
    )  # in-process mode: where the SDK's server loggers write
    _routes_logs: bool = attrs.field(default=False, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.classes:
            raise ValueError("LocalEnvServer needs at least one environment class")
        check_servable(self.classes)  # tools, splits, prompt and duplicate names, before any port is taken

    @property
    def specs(self) -> tuple[str, ...]:
        return tuple(class_spec(cls) for cls in self.classes)

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The child's process id in subprocess mode, else None."""
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        """The child's exit status once it has ended (negative: killed by that signal), else None."""
        return None if self._process is None else self._process.poll()

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._thread is not None and self._thread.is_alive()

    def variant_for(self, cls_or_name: type[Environment] | str) -> str:
        """The variant that routes to `cls_or_name` on this server; ValueError if it is not served here."""
        variant = variant_name(cls_or_name)
        served = [variant_name(cls) for cls in self.classes]
        if variant not in served:
            raise ValueError(f"environment {cls_or_name!r} is not served here; served variants: {served}")
        return variant

    def environment(self, client: AsyncOpenReward, cls_or_name: type[Environment] | str) -> AsyncEnvironment:
        """A client handle for one served class, with this server's ``base_url`` and the class's variant."""
        variant = self.variant_for(cls_or_name)
        return client.environments.get(variant, variant=variant, base_url=self.base_url)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> LocalEnvServer:
        """Start serving and block until the server answers (at most ``start_timeout_s``)."""
        if self.running:
            raise RuntimeError(f"already serving on {self.base_url}")
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_subprocess()
        return self

    def stop(self) -> None:
        """Shut down gracefully: uvicorn finishes or cancels open requests and deletes live sessions.

        A child stopped this way exits with status ``-SIGTERM``: uvicorn re-raises the signal after
        its graceful shutdown."""
        if self._uvicorn is not None and self._thread is not None:
            self._uvicorn.should_exit = True
            self._thread.join(STOP_TIMEOUT_S + GRACEFUL_SHUTDOWN_S)
            if self._thread.is_alive():
                self._uvicorn.force_exit = True
                self._thread.join(STOP_TIMEOUT_S)
            self._thread = None
            self._uvicorn = None
        if self._routes_logs:
            release_server_logs()
            self._routes_logs = False
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
                try:
                    self._process.wait(STOP_TIMEOUT_S + GRACEFUL_SHUTDOWN_S)
                except _subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            self._close_log()

    def kill(self) -> None:
        """Hard-kill the child process (SIGKILL), as a crash would. Subprocess mode only."""
        if self._process is None:
            raise RuntimeError("kill() needs a server started with subprocess=True")
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._close_log()

    def logs(self) -> str:
        """What the child wrote to stdout/stderr (subprocess mode): so far, or all of it once it ended."""
        if self._log is None:
            return self._final_logs
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")

    def __enter__(self) -> LocalEnvServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> LocalEnvServer:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await anyio.to_thread.run_sync(self.stop)

    def _start_thread(self) -> None:
        sock = _free_loopback_socket()
        self.port = sock.getsockname()[1]
        app = Server(list(self.classes)).app
        _compat.install()  # sse-starlette's shutdown event, one per loop: servers on other loops in this process (`_compat.sse_starlette`)
        self._uvicorn = uvicorn.Server(_uvicorn_config(app, self.port, self.log_level))
        self.log_file, self._routes_logs = route_server_logs().path, True
        failure: list[BaseException] = []

        def serve() -> None:
            try:
                self._uvicorn.run(sockets=[sock])  # type: ignore[union-attr]
            except BaseException as exc:  # reported by start(); a thread cannot raise to its creator
                failure.append(exc)
            finally:
                sock.close()

        self._thread = threading.Thread(target=serve, name=f"openreward-env-server-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                reason = repr(failure[0]) if failure else f"not started after {self.start_timeout_s:g} s"
                raise EnvServerStartError(f"in-process environment server failed to start: {reason}")
            time.sleep(0.01)

    def _start_subprocess(self) -> None:
        with contextlib.closing(_free_loopback_socket()) as sock:
            self.port = sock.getsockname()[1]
        command = [
            sys.executable,
            "-m",
            "openreward_rl.env.local_server",
            *self.specs,
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
        ]
        env = loopback_environ()
        env["PYTHONPATH"] = os.pathsep.join(_child_import_path(env.get("PYTHONPATH", "")))
        self._log = tempfile.NamedTemporaryFile(prefix="openreward-env-server-", suffix=".log")
        self._process = _subprocess.Popen(
            command, env=env, stdin=_subprocess.DEVNULL, stdout=self._log, stderr=_subprocess.STDOUT
        )
        deadline = time.monotonic() + self.start_timeout_s
        while not self._healthy():
            if self._process.poll() is not None or time.monotonic() > deadline:
                logs = self.logs()
                self.stop()
                state = (
                    f"exited with status {self._process.returncode}"
                    if self._process.poll() is not None
                    else f"no healthy /health after {self.start_timeout_s:g} s"
                )
                raise EnvServerStartError(f"environment server {command} {state}; its output:\n{logs[-4000:]}")
            time.sleep(0.05)

    def _healthy(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
        try:
            with opener.open(f"{self.base_url}/health", timeout=1.0) as response:
                return json.loads(response.read()) == {"status": "ok"}
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _close_log(self) -> None:
        if self._log is not None:
            self._final_logs = self.logs()
            self._log.close()
            self._log = None


def serve_environments(
    specs_or_classes: Sequence[EnvSpec] | EnvSpec,
    *,
    subprocess: bool = False,
    log_level: str = "warning",
    start_timeout_s: float = START_TIMEOUT_S,
) -> LocalEnvServer:
    """Make a server for the given classes or specs; start it with ``with``/``async with`` or ``.start()``.

    The first class is the server's default route. Subprocess mode needs classes the child can
    import (module-level classes, or specs).
    """
    items = [specs_or_classes] if isinstance(specs_or_classes, (str, type)) else list(specs_or_classes)
    classes = [load_environment_class(item) if isinstance(item, str) else item for item in items]
    server = LocalEnvServer(
        classes, mode="subprocess" if subprocess else "thread", log_level=log_level, start_timeout_s=start_timeout_s
    )
    if subprocess:
        server.specs  # noqa: B018 - fail now, not in the child, when a class cannot be re-imported
    return server


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: serve environment classes on 127.0.0.1 until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m openreward_rl.env.local_server",
        description=(
            "Serve OpenReward environment classes on 127.0.0.1. The first class is the default route; "
            "reach the others with variant=<lowercased class name>."
        ),
        epilog="example: python -m openreward_rl.env.local_server examples/environments/whodunit.py:WhoDunIt "
        "examples/environments/math_env.py:MathEnv --port 8080",
    )
    parser.add_argument(
        "specs",
        nargs="+",
        metavar="SPEC",
        help="environment class as path/to/file.py:ClassName or package.module:ClassName",
    )
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1 to listen on")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="uvicorn log level (default: info)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    try:
        classes = [load_environment_class(spec) for spec in args.specs]
        app = Server(classes).app
    except (ValueError, TypeError) as exc:
        parser.error(str(exc))
    print(f"serving {[variant_name(cls) for cls in classes]} on http://{LOOPBACK}:{args.port}", flush=True)
    uvicorn.Server(_uvicorn_config(app, args.port, args.log_level)).run()


if __name__ == "__main__":
    main()
