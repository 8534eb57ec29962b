"""Throughput of a training script on 1 process and on N processes under torchrun, one thread each,
at the script's defaults: the global steps per second from summary.json, and the speed-up.

    python benchmarks/scaling.py --script ppo_continuous.py --nproc 2 --iterations 20
    python benchmarks/scaling.py --script ppo_atari.py --nproc 2 --iterations 20

Every process runs its own --num-envs environments, so N processes make a global batch N times the
single process's: the same number of iterations is N times the steps. Run it on a quiet machine.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # one thread per process, so that N processes use N cores


def run_sps(script: str, nproc: int, steps: int, extra: list[str], env: dict) -> float:
    """Global SPS of one run of `steps` steps on nproc processes (plain python for one)."""
    launcher = [sys.executable] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launcher += [] if nproc == 1 else [f"--nproc-per-node={nproc}"]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*launcher, script, "--total-timesteps", str(steps), "--eval-episodes", "0", *extra]
        subprocess.run(cmd, cwd=tmp, check=True, capture_output=True, env=os.environ | env)
        (run,) = os.listdir(os.path.join(tmp, "runs"))
        with open(os.path.join(tmp, "runs", run, "summary.json")) as f:
            return json.load(f)["sps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_continuous.py")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("script_args", nargs="*", help="extra flags for the script (after --)")
    args = parser.parse_args()
    script = os.path.join(ROOT, args.script)
    sys.path.insert(0, ROOT)
    module = __import__(args.script.removesuffix(".py"))
    local_batch = module.Args().num_envs * module.Args().num_steps
    results = {}
    for nproc in sorted({1, args.nproc}):
        steps = args.iterations * nproc * local_batch
        results[nproc] = [run_sps(script, nproc, steps, args.script_args, ONE_THREAD) for _ in range(args.runs)]
        sps = results[nproc]
        print(f"{args.script}, {nproc} process(es), one thread each: median {np.median(sps):.0f} SPS ({sps})")
    if args.nproc > 1:
        speedup = np.median(results[args.nproc]) / np.median(results[1])
        print(f"speed-up {speedup:.2f}x on {args.nproc} processes, scaling efficiency {speedup / args.nproc:.0%}")


if __name__ == "__main__":
    main()
