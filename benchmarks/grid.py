"""Grids of training runs, K at a time with the cores split between them, resumed where cut: the named grids
behind the README's results tables, or one config of a script over several seeds (an ad-hoc grid).

    python benchmarks/grid.py run table1 details --parallel 2     # the PPO paper's Table 1, the ablations
    python benchmarks/grid.py run mujoco atari --parallel 2       # the results table: 9 MuJoCo envs, 3 games
    python benchmarks/grid.py run mujoco table1-1m --parallel 2 --commit   # the paper's scale, each record committed
    python benchmarks/grid.py run atari-10m --parallel 2 --commit --dir ~/ppo-grids   # Atari at 10M, over days
    python benchmarks/grid.py status                              # which runs are done, recorded, cut or missing
    python benchmarks/grid.py record                              # records of finished runs that have none
    python benchmarks/tables.py                                   # every table, from the run folders
    python benchmarks/grid.py --seeds 1 2 3 4 --parallel 2 -- --env-id Hopper-v4     # one config, 4 seeds
    python benchmarks/grid.py --script ppo_atari.py --seeds 1 2 --name pong -- --env-id PongNoFrameskip-v4
    python benchmarks/grid.py status --seeds 1 2 3 4 -- --env-id Hopper-v4            # that grid's runs

Each process gets OMP_NUM_THREADS = usable cores // K (benchmarks/cores.py). A run with summary.json is
done and skipped; a run with only a checkpoint is resumed from it (each run saves every SAVE_EVERY
iterations), so `run` can be started again after any stop. Ctrl-C or SIGTERM stops the grid and its runs, each
saved; a grid killed outright (SIGKILL) leaves none training: on Linux each gets SIGTERM from the kernel and saves.

Named grids: every run lives in evidence/runs/{env}__{grid}-{variant}__{seed}__{time}/ (TensorBoard log,
checkpoint, summary.json, eval.json, and machines.txt: the CPU of each machine that ran it), its console output in
evidence/logs/.
  mujoco   the PPO paper's seven tasks (HalfCheetah, Hopper, InvertedDoublePendulum, InvertedPendulum, Reacher,
           Swimmer, Walker2d), Ant and Humanoid (v4), seeds 1-3, 1M steps, the defaults
  atari    Breakout, Pong, BeamRider (NoFrameskip-v4), seeds 1-3, 1M steps (4M frames), the defaults
  atari-10m  the same games and seeds at ppo_atari.py's own budget (10M steps, 40M frames): no flag but --env-id
           and --seed; about 10 core-hours a run, so keep its --dir outside the work tree; the same command resumes it
  table1   the PPO paper's Table 1 at small scale: clip 0.1/0.2/0.3, kl-adaptive (d_targ 0.01),
           kl-fixed (beta 1), none; HalfCheetah, Hopper, Walker2d (v4), seeds 1-3, 300k steps
  table1-1m  Table 1 at the paper's scale: its eleven settings (none; clip 0.1/0.2/0.3; kl-adaptive d_targ
           0.003/0.01/0.03; kl-fixed beta 0.3/1/3/10) on its seven tasks, seeds 1-3, 1M steps, the learning rate
           annealed over them; its clip 0.2 row is the mujoco grid's runs (the defaults)
  flags    learning under --compile (table1's clip 0.2 setting: 3 envs, 3 seeds, 300k steps) and --bf16
           (Breakout, seeds 1 and 3, 1M steps), against the defaults' runs
  tuned    the best setting of benchmarks/tune.py's study of each env in TUNED_FLAGS (Swimmer-v4: 300k-step trials),
           seeds 1-4, 1M steps, against the defaults: the mujoco grid's seeds 1-3 and this grid's seed 4
  details  this project's departures from CleanRL, one at a time, and two details switched off (advantage
           normalization, gradient-norm clipping); same envs, seeds and budget (the defaults are table1's
           clip 0.2 runs)
The `details` variants that are no flag (the initial std, gymnasium's reward normalization) are run by
importing ppo_continuous.py and changing that one thing before main, as the VARIANT_PATCHES say.

Every finished run of a named grid also leaves a record, benchmarks/records/{label}.json (its settings,
summary, evaluation and learning curve: a few KB), committed with the repository: tables.py reads the records
where a run folder is missing, and a recorded run counts as done. `record` writes the records of the
finished run folders that have none.

Ad-hoc grid (--seeds): --script (default ppo_continuous.py) with the flags after `--`, once per seed, into
./runs/ (logs in ./logs/; --dir elsewhere), named {env}__seeds-{name}__{seed}__{time}. The name defaults
to the script's and a hash of the flags, so the same command resumes its runs and other flags start new
ones. After `run`, it prints each seed's final return (the mean of its last 10 episodes) and SPS, from
summary.json, and their mean +- std.
"""

import argparse
import ast
import ctypes
import functools
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
from cores import cpu_model, usable_cores

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "evidence")
SAVE_EVERY = 10  # iterations between checkpoints: a cut run loses at most this much
POLL_S = 2.0  # seconds between looks at the running processes
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what stops a grid, its runs saved
PR_SET_PDEATHSIG = 1  # Linux's prctl option: a signal for the child when its parent dies
COMMIT_TRIES = 10  # --commit: tries while another git command holds the index
# the PPO paper's seven MuJoCo tasks, then two it did not run
PAPER_ENVS = (
    "HalfCheetah-v4",
    "Hopper-v4",
    "InvertedDoublePendulum-v4",
    "InvertedPendulum-v4",
    "Reacher-v4",
    "Swimmer-v4",
    "Walker2d-v4",
)
MUJOCO_ENVS = (*PAPER_ENVS, "Ant-v4", "Humanoid-v4")
ATARI_ENVS = ("BreakoutNoFrameskip-v4", "PongNoFrameskip-v4", "BeamRiderNoFrameskip-v4")
SMALL_ENVS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4")  # table1, details and flags
SMALL_STEPS = 300_000
STUDY_SEEDS = (1, 2, 3)  # table1 and details
RECORDS_DIR = os.path.join(ROOT, "benchmarks", "records")  # committed: one record per finished run of a named grid
CURVE_POINTS = 100  # a record's learning curve: the mean return of its episodes in this many equal slices
LAST_EPISODES = 100  # the PPO paper scores a run by its last 100 training episodes
RETURN_TAG = "charts/episodic_return"
MACHINES_FILE = "machines.txt"  # in a run folder: the CPU of each machine that ran one of its processes
FULL_STEPS = 1_000_000
SCRIPTS = ("ppo_continuous.py", "ppo_atari.py")
SEEDS_GRID = "seeds"  # the grid name of ad-hoc runs
OWN_FLAGS = ("--seed", "--exp-name", "--resume")  # set by grid.py for every run

TABLE1_VARIANTS = {
    "clip-0.1": ["--clip-coef", "0.1"],
    "clip-0.2": ["--clip-coef", "0.2"],
    "clip-0.3": ["--clip-coef", "0.3"],
    "kl-adaptive": ["--objective", "kl-adaptive", "--kl-target", "0.01", "--kl-beta", "1.0"],
    "kl-fixed": ["--objective", "kl-fixed", "--kl-beta", "1.0"],
    "none": ["--objective", "none"],
}
# table1-1m: the paper's eleven settings in its order (Table 1), on its seven tasks. The two middle KL settings keep
# table1's names (their records were made so); the adaptive penalty starts at beta 1, halves and doubles as the paper's
TABLE1_1M_VARIANTS = {
    "none": TABLE1_VARIANTS["none"],
    "clip-0.1": TABLE1_VARIANTS["clip-0.1"],
    "clip-0.2": TABLE1_VARIANTS["clip-0.2"],
    "clip-0.3": TABLE1_VARIANTS["clip-0.3"],
    "kl-adaptive-0.003": ["--objective", "kl-adaptive", "--kl-target", "0.003", "--kl-beta", "1.0"],
    "kl-adaptive": TABLE1_VARIANTS["kl-adaptive"],  # d_targ 0.01
    "kl-adaptive-0.03": ["--objective", "kl-adaptive", "--kl-target", "0.03", "--kl-beta", "1.0"],
    "kl-fixed-0.3": ["--objective", "kl-fixed", "--kl-beta", "0.3"],
    "kl-fixed": TABLE1_VARIANTS["kl-fixed"],  # beta 1
    "kl-fixed-3": ["--objective", "kl-fixed", "--kl-beta", "3.0"],
    "kl-fixed-10": ["--objective", "kl-fixed", "--kl-beta", "10.0"],
}
# table1-1m's clip 0.2 row is the mujoco grid's defaults (clip 0.2 is the default): same_numbers.py printed "same"
# for this code against the commits those runs were made at (f306204, 48ed5b7), so they are not run twice
TABLE1_1M_FROM_MUJOCO = "clip-0.2"
DETAILS_VARIANTS = {
    "init-std-1.0": [],
    "clip-vloss": ["--clip-vloss"],
    "no-bootstrap-truncation": ["--no-bootstrap-truncation"],
    "gymnasium-reward-norm": [],
    "no-norm-adv": ["--no-norm-adv"],
    "no-grad-clip": ["--max-grad-norm", "inf"],
}
# --compile and --bf16 change the numbers in their last bits: learning checked against the defaults' runs (table1's
# clip 0.2 runs at 300k steps; the atari grid's Breakout runs)
FLAGS_GAME = "BreakoutNoFrameskip-v4"
FLAGS_GAME_SEEDS = (1, 3)  # 3, not 2: seed-major, the second game (75 core-minutes) starts after every compiled run
# benchmarks/tune.py's studies (docs/tuning.md): the best trial's flags, run at 1M steps against the defaults
# (python benchmarks/tune.py run --study swimmer --trials 40 -- --env-id Swimmer-v4 --total-timesteps 300000: trial 37)
# Four seeds a side: with three, no ordering of the runs on one env could tell a setting from chance (tables.verdict)
TUNED_SEEDS = (1, 2, 3, 4)
TUNED_FLAGS = {
    "Swimmer-v4": (
        "--learning-rate", "0.00019783015321235195", "--num-steps", "512", "--num-minibatches", "16",
        "--update-epochs", "10", "--gamma", "0.9999", "--gae-lambda", "0.99", "--clip-coef", "0.2",
        "--ent-coef", "0.015087013896853525", "--vf-coef", "0.3256118931688156", "--max-grad-norm", "5.0",
    ),
}  # fmt: skip
# Python run before ppo_continuous.main for the variants that are no flag; the script itself is unchanged.
VARIANT_PATCHES = {
    "init-std-1.0": "m.INIT_STD = 1.0",
    "gymnasium-reward-norm": "m.ScaleReward = m.gym.wrappers.vector.NormalizeReward",  # called (envs, gamma=)
}


@dataclass(frozen=True)
class Run:
    grid: str
    variant: str
    env_id: str | None  # None: the script's default
    seed: int
    steps: int | None  # None: the script's default (or the flags')
    flags: tuple[str, ...]
    script_file: str | None = None  # a file at the root; None: the one for env_id

    @property
    def script(self) -> str:
        if self.script_file:
            return self.script_file
        return "ppo_atari.py" if "NoFrameskip" in (self.env_id or "") else "ppo_continuous.py"

    @property
    def patch(self) -> str | None:
        """Python run before the script's main for a variant that is no flag (VARIANT_PATCHES), else None."""
        return VARIANT_PATCHES.get(self.variant) if self.grid in GRIDS else None

    @property
    def exp_name(self) -> str:
        return f"{self.grid}-{self.variant}"

    @property
    def env_name(self) -> str | None:
        """env_id as the scripts spell it in a run folder's name: '/' and ':' (ALE/Pong-v5, module:EnvId) as '-'"""
        return self.env_id and self.env_id.replace("/", "-").replace(":", "-")

    @property
    def label(self) -> str:
        return f"{self.env_name or 'default-env'}__{self.exp_name}__{self.seed}"

    def folders(self, runs_dir: str) -> list[str]:
        """Its run folders, oldest first: its env's (the script's default where no --env-id is given), its grid's
        and variant's name and its whole seed (seed 1 never takes seed 10's)."""
        env_name = self.env_name or default_env_name(os.path.join(ROOT, self.script))
        pattern = f"{glob.escape(env_name) if env_name else '*'}__{glob.escape(self.exp_name)}__{self.seed}__*"
        return sorted(glob.glob(os.path.join(runs_dir, pattern)))

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
            args = [] if self.env_id is None else ["--env-id", self.env_id]
            args += ["--seed", str(self.seed)]
            args += [] if self.steps is None else ["--total-timesteps", str(self.steps)]
            args += ["--exp-name", self.exp_name, "--save-every", str(SAVE_EVERY), *self.flags]
            if self.grid in GRIDS and self.script == "ppo_continuous.py":
                args.append("--no-cuda")  # its 64-64 MLPs run faster on one CPU thread than through a GPU
        path = os.path.join(ROOT, self.script)
        if self.patch is None:
            return [sys.executable, path, *args]
        code = (  # the script loaded from its file as module m, patched, then its main as `python script` runs it
            f"import importlib.util, sys, tyro; spec = importlib.util.spec_from_file_location('ppo_continuous', "
            f"{path!r}); m = importlib.util.module_from_spec(spec); sys.modules['ppo_continuous'] = m; "
            f"spec.loader.exec_module(m); {self.patch}; m.main(tyro.cli(m.Args))"
        )
        return [sys.executable, "-c", code, *args]


@functools.cache
def default_env_name(path: str) -> str | None:
    """The env a script's Args default to, spelt as in a run folder's name; None for a script with no such default.
    Read from its source: importing it would load torch for a glob."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Args":
            for field in node.body:
                if isinstance(field, ast.AnnAssign) and getattr(field.target, "id", None) == "env_id" and field.value:
                    value = field.value.value if isinstance(field.value, ast.Constant) else None
                    return value.replace("/", "-").replace(":", "-") if isinstance(value, str) else None
    return None


def record_path(run: Run, records_dir: str = RECORDS_DIR) -> str:
    return os.path.join(records_dir, f"{run.label}.json")


class RecordMismatch(ValueError):
    """A record made with other settings than its run's: its figures would pass for the new setting's."""


def read_record(run: Run, records_dir: str = RECORDS_DIR) -> dict | None:
    """The committed record of a finished run of a named grid, or None. A record made by another setting than the
    grid now gives the run (its flags changed since) is refused: RecordMismatch."""
    path = record_path(run, records_dir)
    if run.grid not in GRIDS or not os.path.exists(path):
        return None
    with open(path) as f:
        record = json.load(f)
    wanted = {
        "grid": run.grid,
        "variant": run.variant,
        "env_id": run.env_id,
        "seed": run.seed,
        "flags": list(run.flags),
        "patch": run.patch,
        "budget": run.steps,
    }
    # what the record says it ran, and now; a record without "patch" was made before records held it: no patch;
    # one without "budget" (the steps asked for; None: the script's default) was made before records held it
    differ = [k for k in wanted if (k in record or k == "patch") and record.get(k) != wanted[k]]
    if differ:
        made, now = (", ".join(f"{k} {source.get(k)}" for k in differ) for source in (record, wanted))
        raise RecordMismatch(f"{path} was made with {made}; the grid now runs {now}: run it again (remove the record)")
    return record


def make_record(run: Run, folder: str) -> dict:
    """A finished run's figures, from its folder: its settings, summary.json, eval.json, the mean of its last
    LAST_EPISODES returns and its learning curve (CURVE_POINTS slices of its episodes: mean step, mean return)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    evaluation = None
    if os.path.exists(os.path.join(folder, "eval.json")):
        with open(os.path.join(folder, "eval.json")) as f:
            evaluation = json.load(f)
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(RETURN_TAG) if RETURN_TAG in acc.Tags()["scalars"] else []
    steps, returns = np.array([e.step for e in events]), np.array([e.value for e in events])
    slices = zip(np.array_split(steps, CURVE_POINTS), np.array_split(returns, CURVE_POINTS))
    return {
        "grid": run.grid,
        "variant": run.variant,
        "env_id": run.env_id,
        "seed": run.seed,
        "script": run.script,
        "flags": list(run.flags),
        "patch": run.patch,
        "commit": code_version(run.script),  # the code the run finished with (a resumed run may have begun earlier)
        "steps": summary.get("global_step"),  # reached: the budget rounded down to whole batches
        "budget": run.steps,  # asked for (--total-timesteps; None: the script's default)
        "last_10": summary.get("mean_return_last_10"),
        "last_100": float(np.mean(returns[-LAST_EPISODES:])) if len(returns) else None,
        "mean_all": float(np.mean(returns)) if len(returns) else None,  # the PPO paper's other Atari score
        "eval": summary.get("eval_mean_return"),
        "eval_returns": evaluation["returns"] if evaluation else None,
        "sps": summary.get("sps"),
        "wall_time_s": summary.get("wall_time_s"),
        "train_time_s": train_time(folder),
        "cpu": cpu_model(),  # of the machine that finished the run (speed figures name their machine)
        "cpus": list(dict.fromkeys([*noted_machines(folder), cpu_model()])),  # every machine that ran it, each once
        "episodes": summary.get("episodes"),
        "curve": [[round(float(s.mean())), round(float(r.mean()), 2)] for s, r in slices if len(s)],
        "source": f"run folder {os.path.basename(folder)}",
    }


def note_machine(run: Run, runs_dir: str) -> bool:
    """Adds this machine's CPU to the run folder's MACHINES_FILE (unless its last line already names it); False
    while the run has no folder yet (a fresh run's appears with its first checkpoint): call it again."""
    folder = run.state(runs_dir)[1]
    if folder is None:
        return False
    if noted_machines(folder)[-1:] != [cpu_model()]:
        with open(os.path.join(folder, MACHINES_FILE), "a") as f:
            f.write(cpu_model() + "\n")
    return True


def noted_machines(folder: str) -> list[str]:
    """The CPUs noted in a run folder, one a process that ran it (by the grid or the Slurm task that started it)."""
    if not os.path.exists(path := os.path.join(folder, MACHINES_FILE)):
        return []
    with open(path) as f:
        return [line for line in f.read().splitlines() if line]


def code_version(script: str) -> str | None:
    """The checkout's commit, with "+changes" when the script or grid.py differ from it; None outside git (or
    without git: a finished run's record is written all the same)."""
    git = ["git", "-C", ROOT]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        changed = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", script, "benchmarks/grid.py"]).returncode
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if changed else "")


def train_time(folder: str) -> float:
    """Seconds a run trained, over every process that ran it (a resumed run writes an event file per process):
    the sum of each event file's span from its first to its last scalar."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    spans = []
    for path in glob.glob(os.path.join(glob.escape(folder), "events.out.tfevents.*")):
        times = [event.wall_time for event in EventFileLoader(path).Load() if event.HasField("summary")]
        spans.append(max(times) - min(times) if times else 0.0)
    return round(sum(spans), 1)


def write_record(run: Run, folder: str, records_dir: str = RECORDS_DIR) -> str:
    """The run's record, whole or not at all: written to a hidden file beside it, then renamed over it, so that
    another grid's tables.py, reading the records at that moment, never finds half of one."""
    os.makedirs(records_dir, exist_ok=True)
    path = record_path(run, records_dir)
    partial = os.path.join(records_dir, f".{run.label}.json.partial")
    try:
        with open(partial, "w") as f:
            json.dump(make_record(run, folder), f, indent=1)
            f.write("\n")
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path


def commit_record(path: str, label: str) -> str:
    """Commit one record, and nothing else the index holds, on the checkout's branch; retried while another
    git command holds the index (a commit made by hand at the same moment). What happened, in words."""
    git, why = ["git", "-C", os.path.dirname(path)], ""
    for _ in range(COMMIT_TRIES):
        done = subprocess.run([*git, "add", "--", path], capture_output=True, text=True)
        if done.returncode == 0:
            commit = [*git, "commit", "-q", "-m", f"records: {label}", "--", path]
            done = subprocess.run(commit, capture_output=True, text=True)
        if done.returncode == 0:
            return "committed"
        lines = (done.stderr or done.stdout).strip().splitlines()
        why = lines[-1] if lines else f"git exit {done.returncode}"
        if "index.lock" not in done.stderr:
            break
        time.sleep(POLL_S)
    return f"not committed ({why})"


STALE = "differs from the records: "  # how tables.py --check names a page whose tables lag the records


def commit_pages(label: str, root: str = ROOT) -> str:
    """After a record is committed: the pages whose tables or quoted figures lag the records (tables.py --check)
    rewritten (--write) and committed, those pages alone, so that the pages never lag the records (the suite checks
    them); left alone where one of those pages holds someone's uncommitted edits. What happened, in words."""
    git, tables = ["git", "-C", root], [sys.executable, os.path.join(root, "benchmarks", "tables.py")]
    done = subprocess.run([*tables, "--check"], capture_output=True, text=True)
    stale = [line.removeprefix(STALE) for line in done.stderr.splitlines() if line.startswith(STALE)]
    if done.returncode == 0:
        return "pages unchanged"
    diff = [*git, "diff", "--name-only", "HEAD", "--", *stale]  # the stale pages that hold someone's edits
    edited = subprocess.run(diff, capture_output=True, text=True).stdout.split() if stale else []
    if edited:
        return f"pages not rewritten: {', '.join(edited)} uncommitted (run benchmarks/tables.py --write)"
    if stale:
        done = subprocess.run([*tables, "--write"], capture_output=True, text=True)
    if stale and done.returncode == 0:
        message = f"pages: tables and quoted figures with {label}"
        done = subprocess.run([*git, "commit", "-q", "-m", message, "--", *stale], capture_output=True, text=True)
    if stale and done.returncode == 0:
        return "pages rewritten and committed"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return f"pages not rewritten ({lines[-1] if lines else f'exit {done.returncode}'})"


def grid_runs(name: str) -> list[Run]:
    """The runs of one named grid, seed-major: a grid cut short still has every setting on its first seeds."""
    if name == "mujoco":
        return [Run(name, "default", e, s, FULL_STEPS, ()) for s in (1, 2, 3) for e in MUJOCO_ENVS]
    if name == "atari":
        return [Run(name, "default", e, s, FULL_STEPS, ()) for s in (1, 2, 3) for e in ATARI_ENVS]
    if name == "atari-10m":  # steps None: the script's default budget, untouched
        return [Run(name, "default", e, s, None, ()) for s in (1, 2, 3) for e in ATARI_ENVS]
    if name == "tuned":  # seed-major; seed 4 of the defaults beside the mujoco grid's seeds 1-3
        study = [Run(name, "study", e, s, FULL_STEPS, flags) for s in TUNED_SEEDS for e, flags in TUNED_FLAGS.items()]
        return sorted(
            study + [Run(name, "default", e, TUNED_SEEDS[-1], FULL_STEPS, ()) for e in TUNED_FLAGS],
            key=lambda r: r.seed,
        )
    if name == "flags":  # seed-major too, each seed's compiled runs first
        compiled = [Run(name, "compile", e, s, SMALL_STEPS, ("--compile",)) for s in STUDY_SEEDS for e in SMALL_ENVS]
        bf16 = [Run(name, "bf16", FLAGS_GAME, s, FULL_STEPS, ("--bf16",)) for s in FLAGS_GAME_SEEDS]
        return sorted(compiled + bf16, key=lambda r: r.seed)
    variants = {"table1": TABLE1_VARIANTS, "table1-1m": TABLE1_1M_VARIANTS, "details": DETAILS_VARIANTS}[name]
    steps = FULL_STEPS if name == "table1-1m" else SMALL_STEPS
    return [
        Run(name, v, e, s, steps, tuple(flags))
        for s in STUDY_SEEDS
        for e in (PAPER_ENVS if name == "table1-1m" else SMALL_ENVS)
        for v, flags in variants.items()
        if not (name == "table1-1m" and v == TABLE1_1M_FROM_MUJOCO)
    ]


GRIDS = ("mujoco", "atari", "atari-10m", "table1", "table1-1m", "details", "flags", "tuned")


def flag_value(flags: list[str], name: str) -> tuple[str | None, list[str]]:
    """The value of `--name VALUE` or `--name=VALUE` in flags (the last one), and the flags without it."""
    value, rest, i = None, [], 0
    while i < len(flags):
        if flags[i] == name and i + 1 < len(flags):
            value, i = flags[i + 1], i + 2
        elif flags[i].startswith(name + "="):
            value, i = flags[i].split("=", 1)[1], i + 1
        else:
            rest.append(flags[i])
            i += 1
    return value, rest


def seed_runs(script: str, seeds: list[int], flags: list[str], name: str | None = None) -> list[Run]:
    """The ad-hoc grid: script with flags, once per seed. Its name defaults to the script's and a hash of the
    flags, so that the same command finds its runs again and other flags never pass for them."""
    if name is None:
        digest = hashlib.sha1(json.dumps([script, flags]).encode()).hexdigest()[:8]
        name = f"{script.removesuffix('.py')}-{digest}"
    env_id, rest = flag_value(flags, "--env-id")
    return [Run(SEEDS_GRID, name, env_id, seed, None, tuple(rest), script) for seed in seeds]


def kill_with_parent() -> None:
    """In a run's process before it runs the script: SIGTERM it when its parent dies, however it dies (Linux): the
    script saves and exits, so no run goes on training unwatched, nor beside the same run started again."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run(runs: list[Run], runs_dir: str, parallel: int, records_dir: str = RECORDS_DIR, commit: bool = False) -> int:
    """Run what is neither done nor recorded, `parallel` at a time, recording each run of a named grid as it
    finishes (and committing the record, with commit); the number of runs that failed. SIGINT or SIGTERM stops the
    grid: each running run gets the signal once (a second one, again: the scripts then quit at once), saves and
    exits; then the grid exits with 128 + the signal, and the same command resumes it."""
    pending = [r for r in runs if r.state(runs_dir)[0] != "done" and read_record(r, records_dir) is None]
    threads = str(max(1, usable_cores() // parallel))
    print(
        f"{len(runs) - len(pending)} of {len(runs)} done; {len(pending)} to go, {parallel} at a time, "
        f"OMP_NUM_THREADS={threads} each",
        flush=True,
    )
    env = os.environ | {"OMP_NUM_THREADS": threads}
    logs = os.path.join(os.path.dirname(runs_dir), "logs")  # beside runs/, so run-folder globs never match them
    os.makedirs(logs, exist_ok=True)
    running: list[tuple[Run, subprocess.Popen, float]] = []
    noted: set[subprocess.Popen] = set()  # the processes whose machine their run folder names
    failed, signals, forwarded = 0, [], 0  # signals: those that reached the grid; forwarded: how many went on
    before = {sig: signal.signal(sig, lambda signum, _: signals.append(signum)) for sig in STOP_SIGNALS}
    while pending or running:
        while pending and len(running) < parallel:
            r = pending.pop(0)
            cmd = r.command(runs_dir)
            print(f"start {r.env_id or 'default env'} {r.exp_name} seed {r.seed}: {' '.join(cmd[-12:])}", flush=True)
            with open(os.path.join(logs, f"{r.label}.log"), "a") as log:
                proc = subprocess.Popen(
                    cmd,
                    cwd=os.path.dirname(runs_dir),
                    stdout=log,
                    stderr=log,
                    env=env,
                    preexec_fn=kill_with_parent if sys.platform.startswith("linux") else None,
                    start_new_session=True,  # a terminal's Ctrl-C reaches the grid alone, which passes it on once
                )
            running.append((r, proc, time.time()))
        time.sleep(POLL_S)
        noted |= {proc for r, proc, _ in running if proc not in noted and note_machine(r, runs_dir)}
        for signum in signals[forwarded:]:  # in the loop, not the handler: no Popen call interrupted half-way
            print(
                f"{signal.Signals(signum).name}: each running run saves and stops; the same command resumes", flush=True
            )
            for _, proc, _ in running:
                if proc.poll() is None:
                    proc.send_signal(signum)
            forwarded += 1
            pending.clear()  # none starts after a stop
        for item in list(running):
            r, proc, started = item
            if proc.poll() is None:
                continue
            running.remove(item)
            what = f"{r.env_id or 'default env'} {r.exp_name} seed {r.seed}"
            if proc.returncode == 0 and r.state(runs_dir)[0] == "done":
                landed = land(r, runs_dir, records_dir, commit)
                print(f"done  {what} in {(time.time() - started) / 60:.1f} min{landed and '; '}{landed}", flush=True)
                continue
            if signals and proc.returncode == 128 + signals[0]:
                print(f"saved {what}: stopped with the grid", flush=True)
                continue
            if signals and proc.returncode == -signals[0]:  # killed by it before the script's handler was set
                print(f"kept  {what}: stopped with the grid before its training began; nothing to save", flush=True)
                continue
            failed += 1
            # exit 0 without summary.json: not a run that finished (resuming would evaluate and summarize it)
            why = f"exit {proc.returncode}" if proc.returncode else "exit 0 without summary.json"
            print(f"FAILED {what} ({why}); see {logs}", flush=True)
    for sig, handler in before.items():
        signal.signal(sig, handler)
    if signals:
        sys.exit(128 + signals[0])
    return failed


def land(run: Run, runs_dir: str, records_dir: str, commit: bool) -> str:
    """A finished run of a named grid: its record written (with commit: committed, then the pages rewritten from
    the records and committed); what happened, in words ("" for an ad-hoc run, which has no record)."""
    if run.grid not in GRIDS:
        return ""
    path = write_record(run, run.state(runs_dir)[1], records_dir)
    landed = f"record {path}" + (f", {commit_record(path, run.label)}" if commit else "")
    if landed.endswith(", committed") and os.path.samefile(records_dir, RECORDS_DIR):
        landed += f", {commit_pages(run.label)}"
    return landed


def report_seeds(runs: list[Run], runs_dir: str) -> None:
    """Each finished seed's final return and SPS (summary.json), then their mean +- std."""
    finals, sps = [], []
    for r in runs:
        state, folder = r.state(runs_dir)
        if state != "done":
            print(f"seed {r.seed}: {state}")
            continue
        with open(os.path.join(folder, "summary.json")) as f:
            summary = json.load(f)
        final, speed = summary.get("mean_return_last_10"), summary.get("sps")
        finals += [] if final is None else [final]
        sps += [] if speed is None else [speed]
        final_text = "-" if final is None else f"{final:.1f}"
        speed_text = "-" if speed is None else f"{speed:.0f}"
        print(f"seed {r.seed}: final return {final_text}, {speed_text} SPS, {folder}", flush=True)
    if finals:
        print(
            f"final return {np.mean(finals):.1f} +- {np.std(finals):.1f} over {len(finals)} seeds "
            f"(per seed: {', '.join(f'{x:.1f}' for x in finals)})"
            + (f"; median SPS {np.median(sps):.0f}" if sps else "")
        )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, flags = argv[:cut], argv[cut + 1 :]  # the flags after -- go to the script, untouched
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s {run,status,record} [GRID ...] [options]\n"
        "       %(prog)s [{run,status}] --seeds SEED [SEED ...] [--script SCRIPT] [--name NAME] [options] [-- FLAGS]",
    )
    parser.add_argument("words", nargs="*", metavar="{run,status} GRID", help=f"grids: {', '.join(GRIDS)} (all)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once, the cores split between them")
    parser.add_argument("--dir", help="where runs/ and logs/ are made (default: evidence/ for the named grids, . else)")
    parser.add_argument("--records", default=RECORDS_DIR, help="the named grids' records (default: benchmarks/records)")
    parser.add_argument("--commit", action="store_true", help="run: commit each named grid's record as it lands")
    parser.add_argument("--seeds", type=int, nargs="+", help="an ad-hoc grid: --script with the flags after --")
    parser.add_argument("--script", choices=SCRIPTS, default="ppo_continuous.py", help="the ad-hoc grid's script")
    parser.add_argument("--name", help="the ad-hoc grid's name (default: the script's and a hash of the flags)")
    import cluster  # its Slurm options, shared with tune.py

    slurm = cluster.add_options(parser, "Slurm (docs/cluster.md): the runs not done as one job array, through submitit")
    slurm.add_argument("--slurm", action="store_true", help="run: submit to Slurm (needs --dir, shared by the nodes)")
    slurm.add_argument("--max-running", type=int, help="array tasks running at once (Slurm's %%N; default all)")
    args = parser.parse_args(argv)
    words = list(args.words)
    command = words.pop(0) if words and words[0] in ("run", "status", "record") else None
    if command is None and not args.seeds:
        parser.error("say `run` or `status` (or give --seeds for an ad-hoc grid)")
    if args.parallel < 1:
        parser.error("--parallel must be positive")
    if args.seeds:
        if words:
            parser.error("--seeds is a grid of its own: no named grids beside it")
        if any(f == own or f.startswith(own + "=") for f in flags for own in OWN_FLAGS):
            parser.error(f"{', '.join(OWN_FLAGS)} are grid.py's to set (name the grid with --name)")
        runs = seed_runs(args.script, args.seeds, flags, args.name)
        folder = args.dir or "."
    else:
        unknown = [w for w in words if w not in GRIDS]
        if unknown:
            parser.error(f"unknown grids {unknown}: choose from {', '.join(GRIDS)}")
        if flags:
            parser.error("flags after -- are for an ad-hoc grid (--seeds)")
        runs = [r for name in words or GRIDS for r in grid_runs(name)]
        runs.sort(key=lambda r: r.seed)  # stable: every grid's first seed before any second one
        folder = args.dir or DEFAULT_DIR
    if args.slurm:
        problem = "--slurm submits: say `run`" if command != "run" else cluster.check(args, args.dir, "--slurm")
        if problem:  # one line, nothing made or submitted
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
    runs_dir = os.path.join(os.path.abspath(folder), "runs")
    os.makedirs(runs_dir, exist_ok=True)
    if command == "status":
        on_slurm = os.path.isdir(os.path.join(os.path.abspath(folder), "slurm"))  # a grid submitted with --slurm
        for r in runs:
            state, found = r.state(runs_dir)
            if state != "done" and read_record(r, args.records) is not None:
                state, found = "recorded", record_path(r, args.records)
            if state != "done" and state != "recorded" and on_slurm:
                state, found = cluster.where(r, runs_dir)
            print(f"{state:8s} {r.grid:8s} {r.variant:24s} {r.env_id or 'default':26s} seed {r.seed}  {found or ''}")
        return
    if command == "record":
        for r in runs:
            state, found = r.state(runs_dir)
            if state == "done" and read_record(r, args.records) is None and r.grid in GRIDS:
                print(f"recorded {write_record(r, found, args.records)}")
        return
    if args.slurm:
        try:
            jobs = cluster.submit(runs, runs_dir, args.records, args.commit, args)
        except cluster.Refused as e:  # one line, exit 2, nothing queued
            print(f"error: Slurm refused the job array: {e}", file=sys.stderr)
            sys.exit(2)
        failed = cluster.wait(jobs, runs, runs_dir) if args.wait else 0
        if failed:
            sys.exit(f"error: {failed} runs failed or did not finish")
        return
    failed = run(runs, runs_dir, args.parallel, args.records, args.commit)
    if args.seeds:
        report_seeds(runs, runs_dir)
    if failed:
        sys.exit(f"error: {failed} runs failed")


if __name__ == "__main__":
    import grid  # this file as the module `grid`: what --slurm pickles for its tasks is grid.Run, not __main__.Run

    try:
        grid.main()
    except grid.RecordMismatch as e:  # one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
