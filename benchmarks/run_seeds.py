"""Run one config of a training script over several seeds and print each seed's final return (mean of
its last 10 episodes, from summary.json) and steps per second. --parallel K runs K seeds at once, the
machine's cores split between them (OMP_NUM_THREADS = cores // K each): the usual way to fill a
many-core machine for a sweep.

    python benchmarks/run_seeds.py --script ppo_continuous.py --seeds 1 2 3 -- --env-id HalfCheetah-v4
    python benchmarks/run_seeds.py --script ppo_continuous.py --seeds 1 2 3 4 --parallel 2 -- --env-id Hopper-v4
    python benchmarks/plot_curves.py runs/HalfCheetah-v4__ppo_continuous__* --out docs/halfcheetah.png
"""

import argparse
import glob
import json
import os
import subprocess
import sys

import numpy as np


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_continuous.py")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--parallel", type=int, default=1, help="seeds run at once")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("script_args", nargs="*", help="flags passed to the script (after --)")
    args = parser.parse_args()
    if args.parallel < 1:
        parser.error("--parallel must be positive")
    threads = max(1, usable_cores() // args.parallel)
    env = os.environ | {"OMP_NUM_THREADS": str(threads)} if args.parallel > 1 else None
    results = {}
    pending = list(args.seeds)
    running: dict[int, tuple[subprocess.Popen, set[str]]] = {}
    while pending or running:
        while pending and len(running) < args.parallel:
            seed = pending.pop(0)
            before = set(glob.glob(os.path.join(args.runs_dir, "*")))
            cmd = [sys.executable, args.script, "--seed", str(seed), *args.script_args]
            print("$", " ".join(cmd), f"(OMP_NUM_THREADS={threads})" if env else "", flush=True)
            running[seed] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env), before)
        seed = next(iter(running))  # the oldest; its run folder is found by its seed
        proc, before = running.pop(seed)
        if proc.wait() != 0:
            sys.exit(f"seed {seed} failed with exit code {proc.returncode}")
        results[seed] = before
    finals, sps = [], []
    for seed in args.seeds:
        runs = [r for r in glob.glob(os.path.join(args.runs_dir, f"*__{seed}__*")) if r not in results[seed]]
        with open(os.path.join(sorted(runs)[-1], "summary.json")) as f:
            summary = json.load(f)
        finals.append(summary["mean_return_last_10"])
        sps.append(summary["sps"])
        print(f"seed {seed}: final return {finals[-1]:.1f}, {sps[-1]:.0f} SPS, {sorted(runs)[-1]}", flush=True)
    print(
        f"final return {np.mean(finals):.1f} +- {np.std(finals):.1f} over {len(finals)} seeds "
        f"(per seed: {', '.join(f'{x:.1f}' for x in finals)}); median SPS {np.median(sps):.0f}"
    )


if __name__ == "__main__":
    main()
