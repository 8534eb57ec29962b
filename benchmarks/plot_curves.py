"""Plot learning curves (charts/episodic_return) from TensorBoard runs: the mean over runs and its
spread (min to max), on a common grid of environment steps, to a PNG.

    python benchmarks/plot_curves.py runs/HalfCheetah-v4__ppo_continuous__* --out docs/halfcheetah.png
"""

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

GRID_POINTS = 100  # points on the common step grid
SMOOTH_EPISODES = 10  # episodes in the running mean of each run's curve


def load_curve(run_dir: str, tag: str) -> tuple[np.ndarray, np.ndarray]:
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag)
    steps = np.array([e.step for e in events], dtype=float)
    values = np.array([e.value for e in events])
    kernel = np.ones(min(SMOOTH_EPISODES, len(values))) / min(SMOOTH_EPISODES, len(values))
    return steps[len(kernel) - 1 :], np.convolve(values, kernel, mode="valid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--tag", default="charts/episodic_return")
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--title", default=None)
    parser.add_argument("--hline", action="append", default=[], help="a reference level to draw, VALUE or VALUE:LABEL")
    args = parser.parse_args()
    curves = [load_curve(r, args.tag) for r in args.runs]
    end = min(steps[-1] for steps, _ in curves)
    grid = np.linspace(max(steps[0] for steps, _ in curves), end, GRID_POINTS)
    ys = np.stack([np.interp(grid, steps, values) for steps, values in curves])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(grid, ys.mean(0), label=f"mean of {len(curves)} runs" if len(curves) > 1 else "one run")
    if len(curves) > 1:
        ax.fill_between(grid, ys.min(0), ys.max(0), alpha=0.25, label="min to max")
    for i, spec in enumerate(args.hline):
        value, _, label = spec.partition(":")
        ax.axhline(float(value), color=f"C{i + 1}", linestyle="--", linewidth=1, label=label or None)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(args.tag)
    ax.set_title(args.title or args.runs[0].split("/")[-1].split("__")[0])
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}: final mean {ys.mean(0)[-1]:.1f} (min {ys.min(0)[-1]:.1f}, max {ys.max(0)[-1]:.1f})")


if __name__ == "__main__":
    main()
