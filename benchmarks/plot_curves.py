"""Plot learning curves (charts/episodic_return) from TensorBoard runs to a PNG: for each labelled group
of runs, the mean over its runs and their spread (min to max) on a common grid of environment steps.
Runs of different environments (the run folder's name starts with the env id) go to separate panels.
A run is a run folder or a grid.py record (benchmarks/records/*.json: its curve is the mean return of
its episodes in 100 slices, so it is drawn as it is, without the running mean; a record without a curve, one
transcribed from a table, is drawn as its final figure, the mean of its last 100 episodes, at its last step, or
left out with a note where it has none). --env keeps some panels only; --hline ENV=VALUE:LABEL draws a reference
level in one panel.

    python benchmarks/plot_curves.py runs/HalfCheetah-v4__ppo_continuous__* --out docs/halfcheetah.png
    python benchmarks/plot_curves.py --group "clip 0.2=evidence/runs/*__table1-clip-0.2__*" \\
        --group "no clipping=evidence/runs/*__table1-none__*" --out table1.png      # a panel per env
    python benchmarks/plot_curves.py --group "defaults=benchmarks/records/*__atari-default__*.json" --out atari.png
    python benchmarks/plot_curves.py --group "defaults=benchmarks/records/*__mujoco-default__*.json" \\
        --env Swimmer-v4 --hline "Swimmer-v4=111.2:ppo2" --out swimmer.png   # one panel, a reference level
"""

import argparse
import glob
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

GRID_POINTS = 100  # points on the common step grid
SMOOTH_EPISODES = 10  # episodes in the running mean of each run's curve
PANEL_COLUMNS = 3  # panels per row when there are several environments
PANEL_SIZE = (5.0, 3.6)  # inches per panel
RETURN_TAG = "charts/episodic_return"  # the one curve a record keeps


def is_record(path: str) -> bool:
    return path.endswith(".json") and os.path.isfile(path)


def record_curve(path: str) -> list | None:
    with open(path) as f:
        return json.load(f).get("curve")


def record_final(path: str) -> tuple[float, float] | None:
    """(last step, mean return of the last 100 episodes) of a record, None where it has not both."""
    with open(path) as f:
        record = json.load(f)
    if record.get("steps") is None or record.get("last_100") is None:
        return None
    return float(record["steps"]), float(record["last_100"])


def load_curve(run_dir: str, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, running mean of the last SMOOTH_EPISODES values) of one run's scalar; a record's curve as it is."""
    if is_record(run_dir):
        curve = record_curve(run_dir)
        if tag != RETURN_TAG or not curve:
            sys.exit(f"error: the record {run_dir} has no {tag!r} curve (records keep the episodic return only)")
        steps, values = np.array(curve, dtype=float).T
        return steps, values
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag) if tag in acc.Tags()["scalars"] else []
    if not events:
        sys.exit(f"error: {run_dir} has no {tag!r} scalars")
    steps = np.array([e.step for e in events], dtype=float)
    values = np.array([e.value for e in events])
    kernel = np.ones(min(SMOOTH_EPISODES, len(values))) / min(SMOOTH_EPISODES, len(values))
    return steps[len(kernel) - 1 :], np.convolve(values, kernel, mode="valid")


def env_of(run_dir: str) -> str:
    """The env id that starts the name of a run folder ({env}__{exp}__{seed}__{time}) or a record."""
    return os.path.basename(os.path.normpath(run_dir)).split("__")[0]


def mean_and_spread(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The runs on a common step grid (where all of them have data): (grid, values of shape (runs, points))."""
    start, end = max(steps[0] for steps, _ in curves), min(steps[-1] for steps, _ in curves)
    if start > end:
        sys.exit("error: the runs' step ranges do not overlap")
    grid = np.linspace(start, end, GRID_POINTS)
    return grid, np.stack([np.interp(grid, steps, values) for steps, values in curves])


def parse_groups(positional: list[str], specs: list[str], finished: bool) -> dict[str, list[str]]:
    """{label: run folders and records}: the positional runs as one unlabelled group, each --group LABEL=GLOB
    as one; with finished, only the runs that wrote summary.json (a record is a finished run)."""
    groups = {"": positional} if positional else {}
    for spec in specs:
        label, sep, pattern = spec.partition("=")
        if not sep or not label:
            sys.exit(f"error: --group needs LABEL=GLOB, got {spec!r}")
        groups[label] = sorted(path for path in glob.glob(pattern) if os.path.isdir(path) or is_record(path))
    if finished:
        groups = {
            k: [r for r in runs if is_record(r) or os.path.exists(os.path.join(r, "summary.json"))]
            for k, runs in groups.items()
        }
    for runs in groups.values():
        for r in [r for r in runs if is_record(r) and not record_curve(r) and not record_final(r)]:
            print(f"left out {r}: a record without a curve or a final figure", file=sys.stderr)
            runs.remove(r)
    if not groups:
        sys.exit("error: give run folders or at least one --group LABEL=GLOB")
    for label in [label for label, runs in groups.items() if not runs]:
        print(f"left out group {label!r}: no runs yet (run folders, or records)", file=sys.stderr)
    if not any(groups.values()):
        sys.exit("error: no runs in any group (run folders, or records with a curve or a final figure)")
    return groups


def parse_hline(spec: str) -> tuple[str, float, str]:
    """(env or "" for every panel, value, label) of --hline [ENV=]VALUE[:LABEL]."""
    head, _, label = spec.partition(":")
    panel, _, value = head.rpartition("=")
    try:
        return panel, float(value), label
    except ValueError:
        sys.exit(f"error: --hline needs [ENV=]VALUE[:LABEL], got {spec!r}")


def check_out(path: str, flag: str = "--out") -> None:
    """One line and exit where the picture could not be written: no such folder, or a format matplotlib lacks (a
    name without a suffix is a PNG)."""
    folder, kind = os.path.dirname(os.path.abspath(path)), os.path.splitext(path)[1].lstrip(".").lower()
    if not os.path.isdir(folder):
        sys.exit(f"error: {flag} {path}: there is no folder {folder}")
    if kind and kind not in FigureCanvasAgg.get_supported_filetypes():
        sys.exit(f"error: {flag} {path}: matplotlib writes no .{kind} (png, svg, pdf, ...)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="run folders or records, one unlabelled group")
    parser.add_argument("--group", action="append", default=[], help="LABEL=GLOB: a labelled group of runs or records")
    parser.add_argument("--finished", action="store_true", help="leave out runs still going (no summary.json)")
    parser.add_argument("--tag", default=RETURN_TAG)
    parser.add_argument("--out", default="curves.png")
    parser.add_argument("--title", default=None, help="the figure's title (default: the env id of each panel)")
    parser.add_argument("--env", action="append", default=[], help="draw this env's panel only (repeatable)")
    parser.add_argument(
        "--hline", action="append", default=[], help="a reference level: VALUE[:LABEL] in every panel, ENV=... in one"
    )
    args = parser.parse_args()
    check_out(args.out)
    groups = parse_groups(args.runs, args.group, args.finished)
    if args.env:
        groups = {k: [r for r in runs if env_of(r) in args.env] for k, runs in groups.items()}
    envs = sorted({env_of(r) for runs in groups.values() for r in runs})
    if not envs:
        sys.exit(f"error: no runs of {', '.join(args.env)}")
    columns = min(PANEL_COLUMNS, len(envs))
    rows = math.ceil(len(envs) / columns)
    hlines = [parse_hline(spec) for spec in args.hline]
    hline_labels = list(dict.fromkeys(label for _, _, label in hlines))
    fig, axes = plt.subplots(rows, columns, figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        for color, (label, runs) in enumerate(groups.items()):
            name = f"{label}: " if label else ""
            finals = [record_final(r) for r in runs if env_of(r) == env and is_record(r) and not record_curve(r)]
            if finals:  # records that kept no curve: their last 100 episodes' mean, min to max, at the last step
                steps, values = np.array(finals).T
                ax.errorbar(
                    steps.mean(),
                    values.mean(),
                    yerr=[[values.mean() - values.min()], [values.max() - values.mean()]],
                    color=f"C{color}",
                    marker="o",
                    capsize=3,
                    label=f"{name}last 100 episodes of {len(finals)} run(s), no curve kept",
                )
                print(f"{env} {label or 'runs'}: last 100 episodes, mean {values.mean():.1f} of {len(finals)} runs")
            env_runs = [r for r in runs if env_of(r) == env and not (is_record(r) and not record_curve(r))]
            if not env_runs:
                continue
            grid, ys = mean_and_spread([load_curve(r, args.tag) for r in env_runs])
            count = f"mean of {len(env_runs)} runs" if len(env_runs) > 1 else "one run"
            ax.plot(grid, ys.mean(0), color=f"C{color}", label=f"{name}{count}")
            if len(env_runs) > 1:
                ax.fill_between(grid, ys.min(0), ys.max(0), color=f"C{color}", alpha=0.2)
            final = f"final mean {ys.mean(0)[-1]:.1f} (min {ys.min(0)[-1]:.1f}, max {ys.max(0)[-1]:.1f})"
            print(f"{env} {label or 'runs'}: {final}")
        for panel, value, label in hlines:
            if panel and panel != env:
                continue
            color = f"C{len(groups) + hline_labels.index(label)}"  # one color per label across panels
            ax.axhline(value, color=color, linestyle="--", linewidth=1, label=label or None)
        ax.set_xlim(left=0)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(args.tag)
        ax.set_title(args.title if args.title and len(envs) == 1 else env)
        ax.legend(fontsize="small")
    for ax in axes.flat[len(envs) :]:
        ax.set_visible(False)
    if args.title and len(envs) > 1:
        fig.suptitle(args.title)
    fig.tight_layout()
    out = args.out if os.path.splitext(args.out)[1] else f"{args.out}.png"  # what matplotlib would name it
    fig.savefig(out, dpi=120)
    print(f"wrote {out}: {len(envs)} panel(s), {len(groups)} group(s), shaded: min to max over runs")


if __name__ == "__main__":
    main()
