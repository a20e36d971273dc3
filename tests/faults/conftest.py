"""The fault-injection suite: every test here is marked `faults` and reports what it injected.

Tests record each episode they end with ``fault_report.sample(fault, trajectory)``. At the end of
the run a table lists every fault tried, whether the test survived it (passed), and how many
samples ended aborted (an infrastructure failure: no reward) or completed (a model outcome).
Run only this suite with ``pytest -m faults``.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from openreward_rl.loop.trajectory import Trajectory

HERE = Path(__file__).resolve().parent


def _in_suite(path: str | Path) -> bool:
    return HERE in Path(path).resolve().parents


@attrs.define
class FaultRow:
    faults: list[str] = attrs.Factory(list)
    outcome: str = "not run"
    aborted: int = 0
    completed: int = 0


@attrs.define
class FaultReport:
    """What one test injected and what became of its samples."""

    row: FaultRow

    def sample(self, fault: str, trajectory: Trajectory) -> Trajectory:
        if fault not in self.row.faults:
            self.row.faults.append(fault)
        if trajectory.stop_reason.is_infrastructure_failure:
            self.row.aborted += 1
        else:
            self.row.completed += 1
        return trajectory


@attrs.define(eq=False)
class FaultTable:
    """A pytest plugin: one row per test of this suite, printed at the end of the run."""

    prefix: str  # node ids of this suite start with it
    rows: dict[str, FaultRow] = attrs.Factory(dict)

    def row(self, nodeid: str) -> FaultRow:
        return self.rows.setdefault(nodeid, FaultRow())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.nodeid.startswith(self.prefix):
            return
        row = self.row(report.nodeid)
        if report.outcome == "failed":
            row.outcome = "FAILED"
        elif report.outcome == "skipped":
            row.outcome = "skipped"
        elif report.when == "call" and row.outcome == "not run":
            row.outcome = "survived"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        rows = [(nodeid, r) for nodeid, r in self.rows.items() if r.outcome != "not run"]
        if not rows:
            return
        labels = [", ".join(r.faults) or nodeid.split("::")[-1] for nodeid, r in rows]
        width = max(len("fault"), *(len(label) for label in labels))
        write = terminalreporter.write_line
        terminalreporter.section("fault injection")
        write(f"{'fault':<{width}}  {'result':<8}  {'aborted':>7}  {'completed':>9}")
        for label, (_, row) in zip(labels, rows):
            write(f"{label:<{width}}  {row.outcome:<8}  {row.aborted:>7}  {row.completed:>9}")
        write(
            f"faults tried: {len(rows)}, survived: {sum(r.outcome == 'survived' for _, r in rows)}, "
            f"samples aborted: {sum(r.aborted for _, r in rows)}, samples completed: {sum(r.completed for _, r in rows)}"
        )


_TABLE = pytest.StashKey[FaultTable]()


def pytest_configure(config: pytest.Config) -> None:
    try:
        prefix = HERE.relative_to(config.rootpath).as_posix() + "/"
    except ValueError:
        prefix = ""
    table = FaultTable(prefix)
    config.stash[_TABLE] = table
    config.pluginmanager.register(table, "openreward-rl-fault-table")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _in_suite(item.path):
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> FaultReport:
    return FaultReport(request.config.stash[_TABLE].row(request.node.nodeid))
