"""The runs behind the README's results tables, as named grids, run K at a time and resumed where cut.

    python benchmarks/evidence.py run table1 details --parallel 2     # the PPO paper's Table 1, the ablations
    python benchmarks/evidence.py run mujoco atari --parallel 2       # the results table: 5 MuJoCo envs, 3 games
    python benchmarks/evidence.py status                              # which runs are done, cut or missing
    python benchmarks/tables.py                                       # every table, from the run folders

Every run lives in evidence/runs/{env}__{grid}-{variant}__{seed}__{time}/ (TensorBoard log, checkpoint,
summary.json, eval.json), its console output in evidence/logs/. A run with summary.json is done and
skipped; a run with only a checkpoint is resumed from it (each run saves every SAVE_EVERY iterations),
so `run` can be started again after any stop.

Grids:
  mujoco   HalfCheetah, Hopper, Walker2d, Ant, Humanoid (v4), seeds 1-3, 1M steps, the defaults
  atari    Breakout, Pong, BeamRider (NoFrameskip-v4), seed 1, 1M steps (4M frames), the defaults
  table1   the PPO paper's Table 1 at small scale: clip 0.1/0.2/0.3, kl-adaptive (d_targ 0.01),
           kl-fixed (beta 1), none; HalfCheetah, Hopper, Walker2d (v4), seeds 1-2, 300k steps
  details  this project's departures from CleanRL, one at a time, same envs, seeds and budget
           (the defaults are table1's clip 0.2 runs)

The `details` variants that are no flag (the initial std, gymnasium's reward normalization) are run by
importing ppo_continuous.py and changing that one thing before main, as the VARIANT_PATCHES say.
"""

import argparse
import glob
import os
import subprocess
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "evidence")
SAVE_EVERY = 10  # iterations between checkpoints: a cut run loses at most this much
POLL_S = 2.0  # seconds between looks at the running processes
MUJOCO_ENVS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4")
ATARI_ENVS = ("BreakoutNoFrameskip-v4", "PongNoFrameskip-v4", "BeamRiderNoFrameskip-v4")
SMALL_ENVS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4")  # table1 and details
SMALL_STEPS = 300_000
FULL_STEPS = 1_000_000

TABLE1_VARIANTS = {
    "clip-0.1": ["--clip-coef", "0.1"],
    "clip-0.2": ["--clip-coef", "0.2"],
    "clip-0.3": ["--clip-coef", "0.3"],
    "kl-adaptive": ["--objective", "kl-adaptive", "--kl-target", "0.01", "--kl-beta", "1.0"],
    "kl-fixed": ["--objective", "kl-fixed", "--kl-beta", "1.0"],
    "none": ["--objective", "none"],
}
DETAILS_VARIANTS = {
    "init-std-1.0": [],
    "clip-vloss": ["--clip-vloss"],
    "no-bootstrap-truncation": ["--no-bootstrap-truncation"],
    "gymnasium-reward-norm": [],
}
# Python run before ppo_continuous.main for the variants that are no flag; the script itself is unchanged.
VARIANT_PATCHES = {
    "init-std-1.0": "m.INIT_STD = 1.0",
    "gymnasium-reward-norm": "m.ScaleReward = m.gym.wrappers.vector.NormalizeReward",  # called (envs, gamma=)
}


@dataclass(frozen=True)
class Run:
    grid: str
    variant: str
    env_id: str
    seed: int
    steps: int
    flags: tuple[str, ...]

    @property
    def script(self) -> str:
        return "ppo_atari.py" if "NoFrameskip" in self.env_id else "ppo_continuous.py"

    @property
    def exp_name(self) -> str:
        return f"{self.grid}-{self.variant}"

    def folders(self, runs_dir: str) -> list[str]:
        return sorted(glob.glob(os.path.join(runs_dir, f"{self.env_id}__{self.exp_name}__{self.seed}__*")))

    def state(self, runs_dir: str) -> tuple[str, str | None]:
        """('done' | 'cut' | 'missing', its folder)."""
        for folder in reversed(self.folders(runs_dir)):
            if os.path.exists(os.path.join(folder, "summary.json")):
                return "done", folder
        for folder in reversed(self.folders(runs_dir)):
            if os.path.exists(os.path.join(folder, "checkpoint.pt")):
                return "cut", folder
        return "missing", None

    def command(self, runs_dir: str) -> list[str]:
        state, folder = self.state(runs_dir)
        if state == "cut":
            args = ["--resume", os.path.join(folder, "checkpoint.pt")]
        else:
            args = ["--env-id", self.env_id, "--seed", str(self.seed), "--total-timesteps", str(self.steps)]
            args += ["--exp-name", self.exp_name, "--save-every", str(SAVE_EVERY), *self.flags]
            if self.script == "ppo_continuous.py":
                args.append("--no-cuda")  # its 64-64 MLPs run faster on one CPU thread than through a GPU
        patch = VARIANT_PATCHES.get(self.variant)
        if patch is None:
            return [sys.executable, os.path.join(ROOT, self.script), *args]
        code = (
            f"import sys, tyro; sys.path.insert(0, {ROOT!r}); import ppo_continuous as m; {patch}; "
            "m.main(tyro.cli(m.Args))"
        )
        return [sys.executable, "-c", code, *args]


def grid(name: str) -> list[Run]:
    """The runs of one grid, seed-major: a grid cut short still has every setting on its first seeds."""
    if name == "mujoco":
        return [Run(name, "default", e, s, FULL_STEPS, ()) for s in (1, 2, 3) for e in MUJOCO_ENVS]
    if name == "atari":
        return [Run(name, "default", e, 1, FULL_STEPS, ()) for e in ATARI_ENVS]
    variants = {"table1": TABLE1_VARIANTS, "details": DETAILS_VARIANTS}[name]
    return [
        Run(name, v, e, s, SMALL_STEPS, tuple(flags))
        for s in (1, 2)
        for e in SMALL_ENVS
        for v, flags in variants.items()
    ]


GRIDS = ("mujoco", "atari", "table1", "details")


def run(runs: list[Run], runs_dir: str, parallel: int) -> int:
    """Run what is not done, `parallel` at a time; the number of runs that failed."""
    pending = [r for r in runs if r.state(runs_dir)[0] != "done"]
    print(f"{len(runs) - len(pending)} of {len(runs)} done; {len(pending)} to go, {parallel} at a time", flush=True)
    threads = str(max(1, len(os.sched_getaffinity(0)) // parallel))
    env = os.environ | {"OMP_NUM_THREADS": threads}
    logs = os.path.join(os.path.dirname(runs_dir), "logs")  # beside runs/, so run-folder globs never match them
    os.makedirs(logs, exist_ok=True)
    running: list[tuple[Run, subprocess.Popen, float]] = []
    failed = 0
    while pending or running:
        while pending and len(running) < parallel:
            r = pending.pop(0)
            cmd = r.command(runs_dir)
            print(f"start {r.env_id} {r.exp_name} seed {r.seed}: {' '.join(cmd[-12:])}", flush=True)
            with open(os.path.join(logs, f"{r.env_id}__{r.exp_name}__{r.seed}.log"), "a") as log:
                proc = subprocess.Popen(cmd, cwd=os.path.dirname(runs_dir), stdout=log, stderr=log, env=env)
            running.append((r, proc, time.time()))
        time.sleep(POLL_S)
        for item in list(running):
            r, proc, started = item
            if proc.poll() is None:
                continue
            running.remove(item)
            what = f"{r.env_id} {r.exp_name} seed {r.seed}"
            if proc.returncode == 0 and r.state(runs_dir)[0] == "done":
                print(f"done  {what} in {(time.time() - started) / 60:.1f} min", flush=True)
                continue
            failed += 1
            # exit 0 without summary.json: not a run that finished (resuming would evaluate and summarize it)
            why = f"exit {proc.returncode}" if proc.returncode else "exit 0 without summary.json"
            print(f"FAILED {what} ({why}); see {logs}", flush=True)
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "status"))
    parser.add_argument("grids", nargs="*", choices=GRIDS, help=f"default: all of {', '.join(GRIDS)}")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once, the cores split between them")
    parser.add_argument("--dir", default=DEFAULT_DIR, help="where runs/ is made")
    args = parser.parse_args()
    if args.parallel < 1:
        parser.error("--parallel must be positive")
    runs_dir = os.path.join(os.path.abspath(args.dir), "runs")
    os.makedirs(runs_dir, exist_ok=True)
    runs = [r for name in args.grids or GRIDS for r in grid(name)]
    runs.sort(key=lambda r: r.seed)  # stable: every grid's first seed before any second one
    if args.command == "status":
        for r in runs:
            state, folder = r.state(runs_dir)
            print(f"{state:8s} {r.grid:8s} {r.variant:24s} {r.env_id:26s} seed {r.seed}  {folder or ''}")
        return
    failed = run(runs, runs_dir, args.parallel)
    if failed:
        sys.exit(f"error: {failed} runs failed")


if __name__ == "__main__":
    main()
