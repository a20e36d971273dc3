"""Compare learning curves by advantage estimator: several `learning_curve.py` result files in, one table and one plot out.

    python benchmarks/compare_curves.py runs/gpu_*.json --out docs/credit_curve_h100

Reads every run of every file, groups the runs by `estimator`, and prints per estimator and evaluation
step the mean reward over seeds (with the lowest and highest seed), then per estimator: the mean over
all evaluation points after step 0 (area under the curve, per step), the final mean, and how many
seeds ended below `--stuck` (default: two thirds of the best final reward seen). Writes `<out>.json`
(the runs, merged) and `<out>.png` (each seed thin, each estimator's mean thick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from learning_curve import save_plot


def load_runs(paths: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The first file's header (environment, model, device, settings) and every run of every file."""
    header: dict[str, Any] = {}
    runs: list[dict[str, Any]] = []
    for path in paths:
        results = json.loads(Path(path).read_text())
        if not header:
            header = {k: v for k, v in results.items() if k != "runs"}
        runs.extend(results["runs"])
    if not runs:
        raise SystemExit("no runs in the given files")
    return header, runs


def by_estimator(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Runs by estimator (and by TRL's resampling rounds, where a run used any)."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        resample = run.get("resample_zero_spread")
        grouped[str(run.get("estimator")) + (f" resample {resample}" if resample else "")].append(run)
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in grouped.items()}


def summary(grouped: dict[str, list[dict[str, Any]]], stuck: float | None) -> dict[str, dict[str, Any]]:
    """Per estimator: the mean curve, the mean after step 0, the final mean and the stuck seeds."""
    finals = [run["curve"][-1]["reward_mean"] for runs in grouped.values() for run in runs]
    threshold = stuck if stuck is not None else 2 / 3 * max(finals)
    out = {}
    for estimator, runs in grouped.items():
        steps = [p["step"] for p in runs[0]["curve"]]
        curve = []
        for i, step in enumerate(steps):
            values = [run["curve"][i]["reward_mean"] for run in runs if i < len(run["curve"])]
            curve.append(
                {
                    "step": step,
                    "mean": statistics.fmean(values),
                    "min": min(values),
                    "max": max(values),
                    "seeds": len(values),
                }
            )
        later = [run["curve"][i]["reward_mean"] for run in runs for i in range(1, len(run["curve"]))]
        out[estimator] = {
            "seeds": [run["seed"] for run in runs],
            "curve": curve,
            "mean_after_step_0": statistics.fmean(later) if later else float("nan"),
            "final_mean": statistics.fmean(run["curve"][-1]["reward_mean"] for run in runs),
            "stuck": sum(run["curve"][-1]["reward_mean"] < threshold for run in runs),
            "stuck_below": round(threshold, 3),
        }
    return out


def plot(
    header: dict[str, Any], grouped: dict[str, list[dict[str, Any]]], table: dict[str, dict[str, Any]], path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for estimator, runs in grouped.items():
        colour = {"episode": "tab:blue", "turn": "tab:orange", "mix": "tab:green"}.get(estimator)
        for run in runs:
            ax.plot(
                [p["step"] for p in run["curve"]],
                [p["reward_mean"] for p in run["curve"]],
                color=colour,
                alpha=0.25,
                linewidth=0.8,
            )
        mean = table[estimator]["curve"]
        ax.plot(
            [p["step"] for p in mean],
            [p["mean"] for p in mean],
            color=colour,
            linewidth=2.2,
            marker="o",
            label=f"{estimator} (mean of {len(runs)} seeds)",
        )
    baseline = header.get("constant_baseline")
    if baseline:
        ax.axhline(baseline[1], color="grey", linestyle="--", label=f'constant "{baseline[0]}" ({baseline[1]:.2f})')
    ax.set_xlabel("GRPO step")
    ax.set_ylabel(f"{header.get('eval_split', 'test')} reward")
    ax.set_title(f"{header.get('environment')}: {header.get('model')} ({header.get('device')})")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", help="learning_curve.py result files (.json)")
    parser.add_argument(
        "--out", default="credit_curve", help="output prefix: <out>.json and <out>.png (default ./credit_curve)"
    )
    parser.add_argument(
        "--stuck", type=float, default=None, help="a seed whose final reward is below this is counted as stuck"
    )
    parser.add_argument(
        "--device-label",
        default=None,
        help="how to name the device in the plot and the merged file (default: the files' own)",
    )
    args = parser.parse_args(argv)
    header, runs = load_runs(args.results)
    if args.device_label:
        header["device"] = args.device_label
    grouped = by_estimator(runs)
    table = summary(grouped, args.stuck)
    steps = [p["step"] for p in next(iter(table.values()))["curve"]]
    print("step  " + "  ".join(f"{e + ' (mean [min, max])':<26}" for e in table))
    for i, step in enumerate(steps):
        cells = [
            f"{t['curve'][i]['mean']:.3f} [{t['curve'][i]['min']:.2f}, {t['curve'][i]['max']:.2f}]"
            if i < len(t["curve"])
            else "-"
            for t in table.values()
        ]
        print(f"{step:>4}  " + "  ".join(f"{c:<26}" for c in cells))
    for estimator, t in table.items():
        print(
            f"{estimator}: seeds {t['seeds']}, mean after step 0 {t['mean_after_step_0']:.3f}, final {t['final_mean']:.3f}, "
            f"stuck below {t['stuck_below']}: {t['stuck']} of {len(t['seeds'])}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({**header, "summary": table, "runs": runs}, indent=2))
    save_plot(lambda png: plot(header, grouped, table, png), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
