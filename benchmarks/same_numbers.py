"""Do two commits compute the same numbers? Runs short fixed-seed runs of every script in this checkout
and in a given commit (a temporary git worktree), and compares every TensorBoard scalar but the speed.

    python benchmarks/same_numbers.py --against main~3          # all cases
    python benchmarks/same_numbers.py --against HEAD --cases continuous gridworld

Prints one line per case: "same" with the number of values compared, or the first tag and step that differ.
A refactor, or a speed change meant to be exact, must print "same" for every case.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parent.parent
IGNORED_TAGS = ("charts/SPS",)  # wall-clock speed differs from run to run
RUN_TIMEOUT_S = 1800  # a case runs in a minute or two: far past that, it hangs
SHORT = ["--total-timesteps", "4096", "--num-steps", "512", "--eval-episodes", "1", "--env-id", "Hopper-v4"]
CASES = {
    "continuous": [sys.executable, "ppo_continuous.py", *SHORT, "--num-envs", "2"],
    "continuous-variants": [
        *[sys.executable, "ppo_continuous.py", *SHORT],
        *["--objective", "kl-adaptive", "--clip-vloss", "--anneal-clip", "--target-kl", "0.01", "--seed", "4"],
    ],
    "atari": [sys.executable, "ppo_atari.py", "--total-timesteps", "1024", "--num-envs", "2", "--eval-episodes", "1"],
    "gridworld": [sys.executable, "ppo_gridworld.py"],
    "torchrun": [
        *[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
        *["ppo_continuous.py", *SHORT],
    ],
}


def run_scalars(checkout: Path, command: list[str]) -> dict[str, list[tuple[int, float]]]:
    """Run command in a scratch folder holding checkout's scripts; every scalar but the ignored ones."""
    with tempfile.TemporaryDirectory() as tmp:
        for script in checkout.glob("ppo_*.py"):
            shutil.copy(script, tmp)
        env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
        shown = " ".join(command[next(i for i, word in enumerate(command) if word.endswith(".py")) :])  # the script
        try:
            done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            sys.exit(f"error: {shown} ran past {RUN_TIMEOUT_S} s in {checkout}")
        if done.returncode != 0:
            sys.exit(f"error: {shown} failed in {checkout}:\n{done.stderr[-2000:]}")
        (run_dir,) = (Path(tmp) / "runs").iterdir()
        acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        acc.Reload()
        return {
            tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]
            if tag not in IGNORED_TAGS
        }


def first_difference(a: dict, b: dict) -> str | None:
    if sorted(a) != sorted(b):
        return f"tags differ: {sorted(set(a) ^ set(b))}"
    for tag in sorted(a):
        if len(a[tag]) != len(b[tag]):
            return f"{tag}: {len(a[tag])} values against {len(b[tag])}"
        for (step_a, x), (step_b, y) in zip(a[tag], b[tag]):
            if step_a != step_b or not (x == y or (x != x and y != y)):  # NaN equals NaN here
                return f"{tag} at step {step_a}: {x!r} against {y!r} (step {step_b})"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the git commit to compare this checkout with")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        added = subprocess.run(
            ["git", "worktree", "add", "--detach", str(other), args.against], cwd=ROOT, capture_output=True, text=True
        )
        if added.returncode != 0:  # git's own reason, on the same line
            sys.exit(f"error: cannot check out {args.against}: {' '.join(added.stderr.split())}")
        try:
            failures = 0
            for case in args.cases:
                ours, theirs = run_scalars(ROOT, CASES[case]), run_scalars(other, CASES[case])
                difference = first_difference(ours, theirs)
                values = sum(len(v) for v in ours.values())
                print(f"{case:20s} {'same: ' + str(values) + ' values' if difference is None else difference}")
                failures += difference is not None
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
