"""The dynamic filter as Slime's and Miles' own filter readers call it, with both trainers importable.

Miles' agent path itself (`openreward_rl.backends.miles_agent`) is tested through Miles' real session server and
agentic generate in tests/test_miles_agent_source.py."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from doubles import miles_double, slime_double


def _framework_sample(cls: type, module: str) -> type:
    """The double's Sample class as the trainer's own (`<module>.Sample`), which is what the filter reads."""
    return type("Sample", (cls,), {"__module__": module})


@pytest.mark.parametrize("caller", ["miles", "slime"])
def test_dynamic_filter_answers_the_caller_when_both_trainers_import(caller: str, monkeypatch) -> None:
    """Slime and Miles both importable (their filter_hub/base_types doubles in sys.modules, slime's first):
    each trainer reads the answer with its own `call_dynamic_filter`, which takes any other class as a
    truthy keep. A zero-spread group must be dropped for both, a spread one kept."""
    from openreward_rl.backends import filters

    doubles = {"slime": slime_double, "miles": miles_double}
    for name, double in doubles.items():  # the order slime, miles is the order the old lookup tried
        for package in (name, f"{name}.rollout", f"{name}.rollout.filter_hub"):
            monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
        base_types = types.ModuleType(f"{name}.rollout.filter_hub.base_types")
        base_types.DynamicFilterOutput, base_types.call_dynamic_filter = (
            double.DynamicFilterOutput,
            double.call_dynamic_filter,
        )
        monkeypatch.setitem(sys.modules, base_types.__name__, base_types)
    double = doubles[caller]
    cls = _framework_sample(double.Sample, f"{caller}.utils.types")
    args = SimpleNamespace(reward_key=None)
    flat = [
        cls(index=0, reward=1.0, status=cls.Status.COMPLETED),
        cls(index=1, reward=1.0, status=cls.Status.COMPLETED),
    ]
    verdict = double.call_dynamic_filter(filters.keep_informative_groups, args, flat)
    assert type(verdict) is double.DynamicFilterOutput and verdict.keep is False and verdict.reason == "zero_std_1.0"
    flat[1].reward = 0.0
    assert double.call_dynamic_filter(filters.keep_informative_groups, args, flat).keep is True
    fanned = [
        [cls(index=0, rollout_id=0, reward=0.5, status=cls.Status.COMPLETED)],
        [cls(index=1, rollout_id=1, reward=0.5, status=cls.Status.COMPLETED)],
    ]
    assert double.call_dynamic_filter(filters.keep_informative_groups, args, fanned).keep is False
    # a Sample class of neither trainer: a plain bool, which both read correctly
    assert (
        filters.keep_informative_groups(args, [double.Sample(index=0, reward=1.0), double.Sample(index=1, reward=1.0)])
        is False
    )
