"""Run one config of a training script over several seeds, one after another, and print each seed's
final return (mean of its last 10 episodes, from summary.json) and steps per second.

    python benchmarks/run_seeds.py --script ppo_continuous.py --seeds 1 2 3 -- --env-id HalfCheetah-v4
    python benchmarks/plot_curves.py runs/HalfCheetah-v4__ppo_continuous__* --out docs/halfcheetah.png
"""

import argparse
import glob
import json
import os
import subprocess
import sys

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_continuous.py")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("script_args", nargs="*", help="flags passed to the script (after --)")
    args = parser.parse_args()
    finals, sps = [], []
    for seed in args.seeds:
        before = set(glob.glob(os.path.join(args.runs_dir, "*")))
        cmd = [sys.executable, args.script, "--seed", str(seed), *args.script_args]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        (run,) = set(glob.glob(os.path.join(args.runs_dir, "*"))) - before
        with open(os.path.join(run, "summary.json")) as f:
            summary = json.load(f)
        finals.append(summary["mean_return_last_10"])
        sps.append(summary["sps"])
        print(f"seed {seed}: final return {finals[-1]:.1f}, {sps[-1]:.0f} SPS, {run}", flush=True)
    print(
        f"final return {np.mean(finals):.1f} +- {np.std(finals):.1f} over {len(finals)} seeds "
        f"(per seed: {', '.join(f'{x:.1f}' for x in finals)}); median SPS {np.median(sps):.0f}"
    )


if __name__ == "__main__":
    main()
