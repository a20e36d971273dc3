"""`openreward_rl._compat`: each library's version gate passes on the installed versions (openreward 0.1.167 is
both the floor and the newest the index serves) and fails naming the library, its version and the internal
that moved; the process-wide patches are installed by `install()` and undone by `uninstall()`."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
import structlog
from openreward.api._session import http as sdk_http
from openreward.api._session import session as sdk_session
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from sse_starlette.sse import AppStatus

import openreward_rl._compat as compat
from openreward_rl._compat import CompatError, Gate
from openreward_rl._compat import structlog as compat_structlog
from openreward_rl._compat.openreward import sse
from openreward_rl.redaction import install_log_redaction, register_secrets


@pytest.fixture
def uninstalled() -> Iterator[None]:
    """The process as before any patch; afterwards as the test found it."""
    before, printing = compat.is_installed(), compat_structlog.installed()
    compat.uninstall()
    yield
    compat.uninstall()
    if before:
        compat.install()
    if printing:
        install_log_redaction()


@pytest.mark.parametrize("module", sorted(compat.gates()))
def test_every_gate_passes_on_the_installed_library(module: str) -> None:
    gate = compat.gates()[module]
    fresh = Gate(gate.distribution, gate.supported, gate.internals)
    fresh.check()


def test_the_installed_openreward_is_in_the_supported_range() -> None:
    """The gate's range is pyproject.toml's; the installed SDK (0.1.167 when written: the floor, and the newest
    the index serves) is in it."""
    gate = compat.gates()["openreward"]
    requirements = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    assert f"openreward{gate.supported}" in requirements
    assert Version(version("openreward")) in SpecifierSet(gate.supported)


def test_a_moved_internal_is_named_with_the_library_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = compat.gates()["openreward"]
    monkeypatch.delattr(sdk_session.BaseAsyncSession, "_run_or_die")
    with pytest.raises(CompatError) as raised:
        Gate(gate.distribution, gate.supported, gate.internals).check()
    message = str(raised.value)
    assert f"openreward {version('openreward')}" in message
    assert "openreward.api._session.session.BaseAsyncSession._run_or_die" in message


def test_a_moved_sse_parser_is_named(uninstalled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = compat.gates()["openreward"]
    monkeypatch.delattr(sdk_http, "_parse_sse_events")
    with pytest.raises(
        CompatError, match=r"openreward 0\.1\.167 moved or changed openreward\.api\._session\.http\._parse_sse_events"
    ):
        Gate(gate.distribution, gate.supported, gate.internals).check()


def test_a_version_outside_the_range_is_refused_by_name() -> None:
    gate = compat.gates()["openreward"]
    with pytest.raises(
        CompatError, match=r"openreward 0\.1\.167 is outside the versions openreward_rl supports \(>=0\.2\)"
    ):
        Gate(gate.distribution, ">=0.2", gate.internals).check()


def test_a_missing_library_is_named() -> None:
    with pytest.raises(CompatError, match="no-such-library-xyz is not installed"):
        Gate("no-such-library-xyz", ">=1", list).check()


def test_install_patches_and_uninstall_restores(uninstalled: None) -> None:
    sdk_parser, exit_event = sdk_http._parse_sse_events, AppStatus.should_exit_event
    assert not sse.installed()
    compat.install()
    assert compat.is_installed() and sse.installed()
    assert sdk_http._parse_sse_events is sse.sdk_parser_for
    assert type(AppStatus.should_exit_event).__name__ == "ExitEventPerLoop"
    compat.install()  # idempotent
    compat.uninstall()
    assert sdk_http._parse_sse_events is sdk_parser and AppStatus.should_exit_event is exit_event
    assert not compat.is_installed()
    compat.uninstall()  # idempotent
    assert sdk_http._parse_sse_events is sdk_parser


def test_installed_undoes_only_what_it_installed(uninstalled: None) -> None:
    sdk_parser = sdk_http._parse_sse_events
    with compat.installed():
        assert sdk_http._parse_sse_events is sse.sdk_parser_for
    assert sdk_http._parse_sse_events is sdk_parser
    compat.install()
    with compat.installed():
        pass
    assert sdk_http._parse_sse_events is sse.sdk_parser_for  # installed before the block: kept


def test_structlog_print_redaction_is_undone(uninstalled: None, capsys: pytest.CaptureFixture[str]) -> None:
    original = structlog.PrintLogger.msg
    secret = "sk-compat-test-0123456789"
    register_secrets([secret])
    install_log_redaction()
    assert structlog.PrintLogger.msg is not original
    structlog.PrintLogger().info(f"key {secret}")
    assert secret not in capsys.readouterr().out
    compat.uninstall()
    assert all(getattr(structlog.PrintLogger, name) is original for name in compat_structlog.PRINT_LOGGER_METHODS)
    install_log_redaction()  # installs it again (the record factory stays as it was)
    assert compat_structlog.installed()
