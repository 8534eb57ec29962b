"""Tune a training script's flags with Optuna: each trial runs the script as it is, as a process per seed, with
one set of flags; the study lives in a database, so it resumes after any stop and several workers share it.

    python benchmarks/tune.py run --study swimmer --trials 30 -- --env-id Swimmer-v4 --total-timesteps 300000
    python benchmarks/tune.py run --study swimmer --trials 30 -- --env-id Swimmer-v4 --total-timesteps 300000
                                                     # the same command again: resumes (or a 2nd worker joins)
    python benchmarks/tune.py run --study pm --trials 12 --seeds 1 2 --param learning-rate=1e-4:1e-2:log \\
        --param gamma=0.9,0.99,0.999 -- --env-id examples.pointmass:PointMass-v0 --total-timesteps 20000
    python benchmarks/tune.py run --script ppo_atari.py --study pong --objective eval -- --env-id PongNoFrameskip-v4
    python benchmarks/tune.py run --study swimmer --storage postgresql://user:pw@host/db -- ...  # many machines
    python benchmarks/tune.py run --study swimmer --dir /shared/tune/swimmer --slurm-workers 4 -- --env-id Swimmer-v4
    python benchmarks/tune.py show --study swimmer   # the top trials, the best command line, the PNGs
    tensorboard --logdir tune/swimmer/runs           # every trial as it runs; HPARAMS: the flags beside the returns

The flags after `--` are fixed for every trial (the env id, --env-kwargs, the budget); the searched ones are the
script's default space (SPACES, the knobs that matter, less any flag fixed after `--`) or only the --param flags:
NAME=LOW:HIGH (uniform), NAME=LOW:HIGH:log (log-uniform; integers when the flag is an int), NAME=A,B,C (a choice).

The objective, maximized: per seed the mean return of its last --last-episodes training episodes (CleanRL's
tuner) or, with --objective eval, the script's closing greedy evaluation; averaged over --seeds. While the
seeds train, the same mean at REPORTS - 1 evenly spaced steps goes to Optuna's median pruner, which stops a trial
whose best value so far trails the median of the completed trials at the step reported (its processes are
stopped and nothing is left running); a trial whose sizes the fixed flags rule out is pruned before it runs.
Sampler: TPE (RL Baselines3 Zoo's choice), its first STARTUP_TRIALS trials at random.

Storage: --storage, by default SQLite in {dir}/{study}.db, beside the runs ({dir} = tune/{study}). Also any
SQLAlchemy URL Optuna takes (postgresql://, mysql://) or a journal file (a path ending in .log), Optuna's two
documented ways for several processes or machines to work one study, even started in the same instant (a file
storage is opened under a lock, FILE.tune-lock beside it; a server's open is tried again). --trials counts the
finished trials of the study (complete or pruned) from every worker and every earlier invocation; a worker counts
them after each of its trials and stops once they reach it, while the others finish the trials they hold: with W
workers, up to W - 1 more. A stop (Ctrl-C, SIGTERM) stops the trial's processes, marks the trial failed ("cut")
and queues its flags to run again first; a worker killed outright leaves its trial running, which the RDB
storages' heartbeat marks failed and queues again once HEARTBEAT_GRACE_S have passed. A trial whose script fails
is failed too, with its error, and the study goes on; --max-failures in a row end it (exit 2).
"""

import argparse
import contextlib
import dataclasses
import fcntl
import functools
import glob
import importlib.util
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import typing
import warnings
from dataclasses import dataclass

import cluster
import numpy as np
import optuna
import sqlalchemy
from cores import usable_cores
from grid import flag_value, kill_with_parent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("ppo_continuous.py", "ppo_atari.py")
REPORTS = 10  # the budget in tenths: a trial reports its intermediate value at each of the 9 inner steps
PRUNE_AFTER = REPORTS // 3  # the pruner judges a trial from its REPORTS // 3-th report on (RL Zoo's warm-up)
STARTUP_TRIALS = 10  # TPE samples this many trials at random first; the pruner waits for half of them
LAST_EPISODES = 10  # default --last-episodes: the objective's training episodes per seed
POLL_S = 2.0  # seconds between looks at the trial's processes
HEARTBEAT_S = 60  # RDB storages: a running trial's heartbeat ...
HEARTBEAT_GRACE_S = 180  # ... and how long without one before another worker marks it failed and queues it again
OPEN_TRIES = 5  # a server's storage (PostgreSQL, MySQL): opens that lost the race to make its tables, tried again ...
OPEN_RETRY_S = 1.0  # ... this long apart
TUNER_FLAGS = ("--seed", "--exp-name", "--resume", "--save-every", "--eval-checkpoint")  # tune.py sets these
RETURN_TAG = "charts/episodic_return"
STEP_TAG = "charts/SPS"  # logged at every iteration's last step: how far a run has come

# The default search space per script: the knobs that matter, in ranges after RL Baselines3 Zoo's PPO sampler.
SPACES = {
    "ppo_continuous.py": [
        "learning-rate=1e-5:1e-2:log",
        "num-steps=256,512,1024,2048,4096",
        "num-minibatches=4,8,16,32,64",
        "update-epochs=3,5,10,20",
        "gamma=0.9,0.95,0.98,0.99,0.995,0.999,0.9999",
        "gae-lambda=0.8,0.9,0.92,0.95,0.98,0.99,1.0",
        "clip-coef=0.1,0.2,0.3,0.4",
        "ent-coef=1e-8:0.1:log",
        "vf-coef=0.1:1.0",
        "max-grad-norm=0.3,0.5,0.7,1.0,2.0,5.0",
    ],
    "ppo_atari.py": [
        "learning-rate=1e-5:1e-3:log",
        "num-steps=64,128,256",
        "num-minibatches=2,4,8",
        "update-epochs=2,3,4,8",
        "gamma=0.98,0.99,0.995,0.999",
        "gae-lambda=0.9,0.95,0.98,1.0",
        "clip-coef=0.1,0.2,0.3",
        "ent-coef=1e-4:0.05:log",
        "vf-coef=0.25:1.0",
        "max-grad-norm=0.3,0.5,1.0,2.0",
    ],
}


class BadInput(Exception):
    """Said in one line, exit 2."""


class TrialFailed(Exception):
    """A trial's script failed: the trial is failed with this reason and the study goes on."""


class Stopped(Exception):
    """The tuner was asked to stop (SIGINT, SIGTERM) during a trial."""


# Search space -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One searched flag: a range (low, high, log) or choices, of the flag's own type."""

    flag: str  # without the dashes: learning-rate
    kind: type  # float, int, bool or str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple = ()

    def suggest(self, trial: optuna.Trial):
        if self.choices:
            return trial.suggest_categorical(self.flag, list(self.choices))
        if self.kind is int:
            return trial.suggest_int(self.flag, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.flag, self.low, self.high, log=self.log)


@functools.cache
def script_module(script: str):
    """The script as a module, read from its file without running its main."""
    spec = importlib.util.spec_from_file_location(f"tuned_{script.removesuffix('.py')}", os.path.join(ROOT, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_args(script: str) -> type:
    """The script's Args dataclass."""
    return script_module(script).Args


def script_fields(script: str) -> dict[str, type]:
    """The script's flags (its Args fields, dashed) and their types: int, float, bool, or str for the rest."""
    hints, fields = typing.get_type_hints(script_args(script)), {}
    for f in dataclasses.fields(script_args(script)):
        kind = hints[f.name]
        args = [a for a in typing.get_args(kind) if a is not type(None)]  # float | None: float
        kind = args[0] if args and typing.get_origin(kind) is not typing.Literal else kind
        fields[f.name.replace("_", "-")] = kind if kind in (int, float, bool) else str
    return fields


def fixed_int(script: str, flags: list[str], name: str) -> int:
    """An int flag's value after -- (the last one), else the script's default."""
    value, _ = flag_value(flags, f"--{name}")
    if value is None:
        return getattr(script_args(script)(), name.replace("-", "_"))
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"--{name} {value!r} is no integer") from None


def parse_param(text: str, fields: dict[str, type], script: str) -> Param:
    """NAME=LOW:HIGH[:log] or NAME=A,B,C, checked against the script's flags: a BadInput says what is wrong."""
    name, sep, spec = text.partition("=")
    name = name.removeprefix("--")
    if not sep or not spec:
        raise BadInput(f"--param {text!r}: write NAME=LOW:HIGH, NAME=LOW:HIGH:log or NAME=A,B,C")
    if name not in fields:
        raise BadInput(f"--param {text!r}: {script} has no flag --{name}")
    kind = fields[name]
    if name in (f.removeprefix("--") for f in TUNER_FLAGS):
        raise BadInput(f"--param {text!r}: --{name} is tune.py's to set")
    try:
        if ":" in spec:
            low, high, *rest = spec.split(":")
            if kind not in (int, float) or rest not in ([], ["log"]):
                raise ValueError("a range needs a number flag and LOW:HIGH or LOW:HIGH:log")
            low, high = (int(float(x)) if kind is int else float(x) for x in (low, high))
            if not low < high:
                raise ValueError(f"the range is empty ({low} is not below {high})")
            if rest and low <= 0:
                raise ValueError("a log range must lie above 0")
            return Param(name, kind, low, high, bool(rest))
        words = spec.split(",")
        if kind is bool:
            values = {"true": True, "false": False}
            if any(w.lower() not in values for w in words):
                raise ValueError("a switch takes true,false")
            choices = tuple(values[w.lower()] for w in words)
        else:
            choices = tuple(kind(w) if kind is not int else int(w) for w in words)
        if len(set(choices)) < 2:
            raise ValueError("give two choices or more (fix a single value after --)")
        return Param(name, kind, choices=choices)
    except ValueError as e:
        raise BadInput(f"--param {text!r}: {e}") from None


def flag_names(flags: list[str]) -> set[str]:
    """The names of the flags in a command line: --name VALUE, --name=VALUE, --switch, --no-switch."""
    names = set()
    for f in flags:
        if f.startswith("--"):
            name = f[2:].split("=", 1)[0]
            names.add(name)
            names.add(name.removeprefix("no-"))
    return names


def search_space(script: str, params: list[str], fixed: list[str]) -> list[Param]:
    """The --param flags, or the script's default space less the flags fixed after --."""
    fields = script_fields(script)
    unknown = sorted(n for n in flag_names(fixed) if n not in fields and n.removeprefix("no-") not in fields)
    unknown = [n for n in unknown if f"no-{n}" not in fields and n not in fields]
    if unknown:
        raise BadInput(f"{script} has no flag --{unknown[0]} (given after --)")
    if taken := [f for f in TUNER_FLAGS if f[2:] in flag_names(fixed)]:
        raise BadInput(f"{taken[0]} is tune.py's to set: give it no value after --")
    space = [parse_param(p, fields, script) for p in params]
    if twice := [p.flag for i, p in enumerate(space) if p.flag in (q.flag for q in space[:i])]:
        raise BadInput(f"--param {twice[0]} is given twice: one range or one set of choices a flag")
    if params:
        if clash := [p.flag for p in space if p.flag in flag_names(fixed)]:
            raise BadInput(f"--{clash[0]} is both searched (--param) and fixed (after --)")
        return space
    return [p for p in (parse_param(t, fields, script) for t in SPACES[script]) if p.flag not in flag_names(fixed)]


def batch_problem(script: str, flags: list[str]) -> str | None:
    """Why the script would refuse these flags' sizes (a searched one against a fixed one: --num-steps 128 fixed,
    64 minibatches searched), or None. Such a trial is pruned before it runs: no run, no failure."""
    envs, steps = fixed_int(script, flags, "num-envs"), fixed_int(script, flags, "num-steps")
    minibatches, total = fixed_int(script, flags, "num-minibatches"), fixed_int(script, flags, "total-timesteps")
    smallest = script_module(script).MIN_MINIBATCH  # the script's own floor (check_args)
    if min(envs, steps, minibatches, total) < 1:  # a searched 0 (--param num-minibatches=0,4): no division by it
        sizes = f"--num-envs {envs}, --num-steps {steps}, --num-minibatches {minibatches}, --total-timesteps {total}"
        return f"{sizes}: each must be positive"
    if (envs * steps) % minibatches or envs * steps // minibatches < smallest:
        return f"{minibatches} minibatches do not split a batch of {envs * steps} into {smallest}+ samples each"
    if total < envs * steps:
        return f"--total-timesteps {total} is less than one batch of {envs * steps}"
    return None


def as_flags(params: dict) -> list[str]:
    """A trial's values as the script's command-line flags."""
    flags = []
    for name, value in params.items():
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no-{name}")
        else:
            flags += [f"--{name}", repr(value) if isinstance(value, float) else str(value)]
    return flags


# Trials -------------------------------------------------------------------------------------------------------


@dataclass
class Study:
    """What every trial of a study shares: the script, the fixed flags, the objective, where runs go."""

    name: str
    script: str
    fixed: list[str]
    seeds: list[int]
    objective: str  # "last" or "eval"
    last_episodes: int
    budget: int  # the fixed --total-timesteps or the script's default
    runs_dir: str
    threads: int


def report_steps(budget: int) -> list[int]:
    """The steps at which a trial reports its intermediate value (the last report comes before the budget)."""
    return [budget * k // REPORTS for k in range(1, REPORTS)]


def recent_mean(steps: np.ndarray, returns: np.ndarray, at: int, n: int) -> float | None:
    """The mean return of the last n episodes that ended by step `at`, or None before any."""
    done = returns[steps <= at]
    return float(np.mean(done[-n:])) if len(done) else None


def read_scalars(folder: str | None) -> tuple[int, np.ndarray, np.ndarray]:
    """How far a run has come (its last logged step) and its episodes (steps, returns), from TensorBoard."""
    if folder is None:
        return 0, np.zeros(0), np.zeros(0)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(folder, size_guidance={"scalars": 0})  # a fresh one: the run's file, then the .tune one
    acc.Reload()
    tags = acc.Tags()["scalars"]
    progress = acc.Scalars(STEP_TAG)[-1].step if STEP_TAG in tags else 0
    events = acc.Scalars(RETURN_TAG) if RETURN_TAG in tags else []
    return progress, np.array([e.step for e in events]), np.array([e.value for e in events])


class Trial:
    """One trial's processes, one per seed, and what they have logged."""

    def __init__(self, study: Study, number: int, flags: list[str]) -> None:
        self.study, self.exp = study, f"{study.name}-trial{number}"
        extra = (
            ["--eval-episodes", "0"] if study.objective == "last" and "eval-episodes" not in flag_names(flags) else []
        )
        os.makedirs(os.path.join(os.path.dirname(study.runs_dir), "logs"), exist_ok=True)
        env = os.environ | {"OMP_NUM_THREADS": str(study.threads)}
        # the user's folder on the path: their module:EnvId imports as it would from where they stand
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
        self.procs, self.logs, self.read = [], [], {}  # read: per folder, its event files' sizes and scalars
        self.start = int(time.time())  # run folders end in their start time: an older study's are not this trial's
        for seed in study.seeds:
            cmd = [sys.executable, os.path.join(ROOT, study.script), *flags, *extra]
            cmd += ["--seed", str(seed), "--exp-name", self.exp, "--save-every", str(self.save_every(flags))]
            log = os.path.join(os.path.dirname(study.runs_dir), "logs", f"{self.exp}__{seed}.log")
            self.logs.append(log)
            with open(log, "w") as out:
                self.procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=os.path.dirname(study.runs_dir),
                        stdout=out,
                        stderr=out,
                        env=env,
                        preexec_fn=kill_with_parent if sys.platform.startswith("linux") else None,
                        start_new_session=True,  # Ctrl-C reaches the tuner alone, which stops the runs once
                    )
                )

    def save_every(self, flags: list[str]) -> int:
        """Checkpoint (and so flush the event file) about twice a report: the pruner reads what is flushed."""
        batch = fixed_int(self.study.script, flags, "num-envs") * fixed_int(self.study.script, flags, "num-steps")
        return max(1, self.study.budget // batch // (2 * REPORTS))

    def folder(self, seed: int) -> str | None:
        found = sorted(glob.glob(os.path.join(self.study.runs_dir, f"*__{glob.escape(self.exp)}__{seed}__*")))
        found = [f for f in found if f.rsplit("__", 1)[-1].isdigit() and int(f.rsplit("__", 1)[-1]) >= self.start]
        return found[-1] if found else None

    def scalars(self, seed: int) -> tuple[int, np.ndarray, np.ndarray]:
        """read_scalars of the seed's run, read again only when its event files have grown (a run flushes them at
        its checkpoints, some 20 times a run, while tune.py looks every POLL_S: a long run's file takes seconds)."""
        folder = self.folder(seed)
        files = glob.glob(os.path.join(glob.escape(folder), "events.out.tfevents.*")) if folder else []
        sizes = sorted((path, os.path.getsize(path)) for path in files)
        if folder not in self.read or self.read[folder][0] != sizes:
            self.read[folder] = (sizes, read_scalars(folder))
        return self.read[folder][1]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        """SIGTERM every process (each saves and exits); SIGKILL what is left after a while; nothing remains."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def failure(self) -> str | None:
        """The first failed seed's last line of output, or None when every seed finished."""
        for seed, p, log in zip(self.study.seeds, self.procs, self.logs):
            if p.returncode != 0 or self.folder(seed) is None:
                with open(log, errors="replace") as f:
                    lines = [line.strip() for line in f.read().replace("\r", "\n").splitlines() if line.strip()]
                return f"seed {seed} exit {p.returncode}: {lines[-1] if lines else 'no output'}"
        return None

    def final(self) -> float:
        """The objective: per seed its last training episodes' mean return or its greedy evaluation, averaged."""
        values = []
        for seed in self.study.seeds:
            folder = self.folder(seed)
            if self.study.objective == "eval":
                with open(os.path.join(folder, "summary.json")) as f:
                    value = json.load(f).get("eval_mean_return")
            else:
                _, steps, returns = self.scalars(seed)
                value = recent_mean(steps, returns, self.study.budget, self.study.last_episodes)
            if value is None:
                what = "an evaluation" if self.study.objective == "eval" else "an episode"
                raise TrialFailed(f"seed {seed} finished without {what}")
            values.append(value)
        return float(np.mean(values))


def write_hparams(folder: str, params: dict, objective: float | None) -> None:
    """The trial's flags in TensorBoard's hyperparameter view, beside the run's returns (and its objective)."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    with SummaryWriter(folder, filename_suffix=".tune") as writer:
        if objective is None:
            metrics = {RETURN_TAG: 0.0, "tune/objective": 0.0}
            for summary in hparams(params, metrics):
                writer.file_writer.add_summary(summary)
        else:
            writer.add_scalar("tune/objective", objective, 0)


class StopFlag:
    """SIGINT and SIGTERM ask the tuner to stop: the running trial's processes stop, the trial is queued again.
    A context: the handlers it replaced are put back when it closes."""

    def __enter__(self) -> "StopFlag":
        self.signum: int | None = None
        self.before = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def handle(self, signum: int, frame) -> None:
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self.before.items():
            signal.signal(sig, handler)


def report_due(run: Trial, trial: optuna.Trial, reported: int, prune: bool) -> int:
    """Report the intermediate values whose step every seed has passed (the mean over seeds of the mean of the
    last episodes by that step); with prune, ask the pruner after each. The number of values reported so far."""
    study, steps = run.study, report_steps(run.study.budget)
    seen = [run.scalars(seed) for seed in study.seeds] if reported < len(steps) else []
    while reported < len(steps) and all(progress >= steps[reported] for progress, _, _ in seen):
        means = [recent_mean(s, r, steps[reported], study.last_episodes) for _, s, r in seen]
        if all(m is not None for m in means):  # else a seed had no episode by then: nothing to compare at that step
            trial.report(float(np.mean(means)), steps[reported])
        reported += 1
        if prune and trial.should_prune():
            raise optuna.TrialPruned()
    return reported


def objective_fn(study: Study, space: list[Param], stop: StopFlag):
    def objective(trial: optuna.Trial) -> float:
        params = {p.flag: p.suggest(trial) for p in space}
        flags = study.fixed + as_flags(params)
        trial.set_user_attr("flags", flags)
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        if why := batch_problem(study.script, flags):  # the fixed flags rule these values out: pruned, never run
            trial.set_user_attr("refused", why)
            raise optuna.TrialPruned(why)
        run, reported, labelled = Trial(study, trial.number, flags), 0, set()
        try:
            while run.running() and not stop.signum:
                time.sleep(POLL_S)
                for seed in study.seeds:  # the flags in TensorBoard's HPARAMS as soon as the run has a folder
                    if seed not in labelled and (folder := run.folder(seed)):
                        write_hparams(folder, params, None)
                        labelled.add(seed)
                reported = report_due(run, trial, reported, prune=True)
        finally:
            run.stop()  # pruned, stopped or failed: no process outlives its trial
        if stop.signum:  # the runs were stopped by the stop: their exit is the stop's, not a failure
            trial.set_user_attr("cut", True)
            raise Stopped(trial.number, params)
        if why := run.failure():
            trial.set_user_attr("error", why)
            raise TrialFailed(why)
        report_due(run, trial, reported, prune=False)  # a run that ended between looks: its values for the median
        try:
            value = run.final()
        except TrialFailed as failed:  # a seed with no episode or no evaluation: a failure --max-failures counts
            trial.set_user_attr("error", str(failed))
            raise
        for seed in study.seeds:
            write_hparams(run.folder(seed), params, value)
        return value

    return objective


# Study --------------------------------------------------------------------------------------------------------


def storage_file(url: str) -> str | None:
    """The file a storage lives in (a SQLite database, a journal), or None for a server's; a path that is
    neither is refused."""
    if "://" not in url and not url.endswith(".log"):
        raise BadInput(f"--storage {url}: give an RDB URL (sqlite:///file.db) or a journal file (*.log)")
    if url.startswith("sqlite:///"):
        return sqlalchemy.engine.make_url(url).database  # the path, without a ?query of connection options
    return None if "://" in url else url


def open_storage(url: str):
    """The study's storage: a journal file (a path ending in .log) or an RDB URL (SQLite by default)."""
    try:
        if "://" not in url:
            return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url))
        for tries_left in reversed(range(1 if storage_file(url) else OPEN_TRIES)):  # a file: open_study locks it
            try:
                return optuna.storages.RDBStorage(
                    url,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=HEARTBEAT_GRACE_S,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(),
                )
            except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
                if not tries_left:  # else another worker made the tables as this one did: they are there now
                    raise
                time.sleep(OPEN_RETRY_S)
    except Exception as e:
        raise BadInput(
            f"cannot open the storage {url} ({type(e).__name__}: {(str(e).splitlines() or [''])[0]})"
        ) from None


def open_study(url: str, name: str, create: dict) -> optuna.Study:
    """open_storage and load_study for run, one worker at a time on a file storage. Workers started together race
    to make Optuna's tables (`table alembic_version already exists`) and the study's settings: an exclusive flock
    on FILE.tune-lock beside the file (SQLite, a journal), which the system lets go however a worker ends, lets
    them in one by one. A server (PostgreSQL, MySQL) has no file to lock: open_storage tries it again instead."""
    with contextlib.ExitStack() as held:
        if path := storage_file(url):
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                fcntl.flock(held.enter_context(open(f"{path}.tune-lock", "a")), fcntl.LOCK_EX)
            except OSError as e:
                raise BadInput(f"cannot open the storage {url} ({type(e).__name__}: {e})") from None
        return load_study(name, open_storage(url), create)


def load_study(name: str, storage, create: dict | None) -> optuna.Study:
    """The study, made with create's settings (kept as its attributes) when it is new; a study made with other
    settings (script, fixed flags, seeds, objective, search space) is refused rather than mixed."""
    sampler = optuna.samplers.TPESampler(n_startup_trials=STARTUP_TRIALS)
    pruner = optuna.pruners.NopPruner()  # run sets the median pruner, which needs the budget
    if create is None:  # show: an existing study only (a misspelt name is said, not made)
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        except KeyError:
            raise BadInput(f"no study {name!r} in this storage") from None
    try:
        study = optuna.create_study(
            study_name=name, storage=storage, direction="maximize", sampler=sampler, pruner=pruner, load_if_exists=True
        )
    except optuna.exceptions.DuplicatedStudyError:  # made by another worker between the look and the make
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
    if create is not None:
        kept = study.user_attrs.get("settings")
        if kept is None:
            study.set_user_attr("settings", create)
        elif kept != create:
            differ = [k for k in create if kept.get(k) != create[k]]
            was = "; ".join(f"{k} {kept.get(k)}" for k in differ)
            raise BadInput(f"study {name!r} was made with other settings ({was}): give them again, or a new --study")
    return study


def finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return study.get_trials(deepcopy=False, states=states)


def command_line(script: str, flags: list[str]) -> str:
    """A command to paste into a shell: --env-kwargs' JSON quoted."""
    return shlex.join(["python", script, *flags])


def cell(trial: optuna.trial.FrozenTrial, name: str) -> str:
    """A trial's value of a flag for the table: a choice as it is (0.9999 stays 0.9999), a range's in 3 digits."""
    value = trial.params.get(name, "")
    ranged = isinstance(value, float) and not isinstance(
        trial.distributions[name], optuna.distributions.CategoricalDistribution
    )
    return f"{value:.3g}" if ranged else str(value)


def show(study: optuna.Study, out_dir: str, top: int = 10) -> None:
    """The top trials as a table, the best trial's command line, the history and the importances as PNGs."""
    states = {s: len(study.get_trials(deepcopy=False, states=(s,))) for s in optuna.trial.TrialState}
    counts = ", ".join(f"{n} {s.name.lower()}" for s, n in states.items() if n)
    settings = study.user_attrs.get("settings", {})
    print(f"study {study.study_name}: {counts or 'no trials'}; objective: {settings.get('objective_text', '')}")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        return
    best = sorted(complete, key=lambda t: t.value, reverse=True)[:top]
    names = sorted({k for t in best for k in t.params})
    print("\n| trial | objective | " + " | ".join(names) + " |")
    print("|" + "---|" * (len(names) + 2))
    for t in best:
        cells = [cell(t, n) for n in names]
        print(f"| {t.number} | {t.value:.2f} | " + " | ".join(cells) + " |")
    print(
        f"\nbest (trial {best[0].number}, {best[0].value:.2f}):\n  "
        + command_line(settings.get("script", ""), best[0].user_attrs.get("flags", []))
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings(action="ignore"):  # Optuna's matplotlib plots are marked experimental
        os.makedirs(out_dir, exist_ok=True)
        paths = []
        ax = optuna.visualization.matplotlib.plot_optimization_history(study)
        paths.append(os.path.join(out_dir, f"{study.study_name}_history.png"))
        ax.figure.savefig(paths[-1], bbox_inches="tight", dpi=120)
        plt.close("all")
        if len(complete) >= 2 and names:
            try:
                ax = optuna.visualization.matplotlib.plot_param_importances(study)
                paths.append(os.path.join(out_dir, f"{study.study_name}_importances.png"))
                ax.figure.savefig(paths[-1], bbox_inches="tight", dpi=120)
            except (RuntimeError, ValueError) as e:  # too few distinct trials to tell importances apart
                print(f"no importances yet ({e})")
            plt.close("all")
    print("figures: " + ", ".join(paths))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    argv, fixed = argv[:cut], argv[cut + 1 :]  # the flags after -- go to every trial, untouched
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("run", "show"), help="run (or resume, or join) a study; show its results")
    parser.add_argument("--study", required=True, help="the study's name")
    parser.add_argument("--script", choices=SCRIPTS, default="ppo_continuous.py", help="the script tuned")
    parser.add_argument("--trials", type=int, default=30, help="finished trials (complete or pruned) in the study")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="seeds per trial, the objective averaged")
    parser.add_argument("--objective", choices=("last", "eval"), default="last", help="last training episodes or eval")
    parser.add_argument("--last-episodes", type=int, default=LAST_EPISODES, help="--objective last: episodes per seed")
    parser.add_argument("--param", action="append", default=[], help="NAME=LOW:HIGH[:log] or NAME=A,B,C (repeat)")
    parser.add_argument("--storage", help="an RDB URL or a journal file (*.log) (default: SQLite in --dir)")
    parser.add_argument("--dir", help="where the runs, logs and figures go (default: tune/STUDY)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS per process (default: usable cores / seeds)")
    parser.add_argument("--max-failures", type=int, default=3, help="failed trials in a row that end the study")
    parser.add_argument("--no-prune", action="store_true", help="run every trial to its budget")
    slurm = cluster.add_options(parser, "Slurm (docs/cluster.md): workers of the study as one job array")
    slurm.add_argument("--slurm-workers", type=int, help="run: N workers as array tasks (needs --dir, shared)")
    args = parser.parse_args(argv)
    try:
        run(args, fixed)
    except BadInput as e:
        say(f"error: {e}")
        sys.exit(2)


def worker_argv(args: argparse.Namespace, fixed: list[str], url: str, out_dir: str) -> list[str]:
    """The command line of each --slurm-workers worker: this one's study flags, its storage and folder spelt out,
    OMP_NUM_THREADS from the task's CPUs."""
    threads = args.threads or max(1, args.cpus_per_task // len(args.seeds))
    argv = ["run", "--study", args.study, "--script", args.script, "--trials", str(args.trials), "--seeds",
            *map(str, args.seeds), "--objective", args.objective, "--last-episodes", str(args.last_episodes),
            *(f"--param={p}" for p in args.param), "--storage", url, "--dir", out_dir, "--threads", str(threads),
            "--max-failures", str(args.max_failures), *(["--no-prune"] if args.no_prune else [])]  # fmt: skip
    return [*argv, "--", *fixed]


def submit_workers(args: argparse.Namespace, fixed: list[str], url: str, out_dir: str, settings: dict) -> None:
    """--slurm-workers N: N workers of the study as one job array (cluster.Worker), on a storage every node reaches;
    an existing study is checked against these settings first. Nothing is made or queued on bad input."""
    problem = cluster.check(args, args.dir, "--slurm-workers")
    if args.slurm_workers < 1:
        problem = f"--slurm-workers must be positive, got {args.slurm_workers}"
    elif url.startswith("sqlite"):
        problem = "--slurm-workers: SQLite is one machine's; give a journal file (--storage PATH.log) or a server URL"
    if problem:
        raise BadInput(problem)
    path = storage_file(url)
    done = 0
    if path is None or os.path.exists(path):  # a study there already: refused here if made with other settings
        done = len(finished(open_study(url, args.study, settings)))
    if done >= args.trials:
        print(f"study {args.study}: {done} of {args.trials} trials finished; no worker to submit")
        return
    workers = [cluster.Worker(worker_argv(args, fixed, url, out_dir)) for _ in range(args.slurm_workers)]
    try:
        jobs = cluster.submit_array(os.path.join(out_dir, cluster.STATE_DIR), workers, args, "ppo-tune")
    except cluster.Refused as e:
        raise BadInput(f"Slurm refused the job array: {e}") from None
    array = jobs[0].job_id.split("_")[0]
    print(f"submitted {len(jobs)} workers of study {args.study} as job array {array}; storage {url}", flush=True)
    if not args.wait:
        return
    cluster.wait_jobs([job.job_id for job in jobs])
    failed = 0
    for job in jobs:
        try:
            print(job.result())
        except Exception as e:  # the worker's failure, as submitit kept it
            failed += 1
            lines = [line for line in str(e).splitlines() if line.startswith("RuntimeError: ")]
            print(f"FAILED worker {job.job_id}: {lines[-1].removeprefix('RuntimeError: ') if lines else e}")
    show(load_study(args.study, open_storage(url), None), out_dir)
    if failed:
        say(f"error: {failed} of {len(jobs)} workers failed")
        sys.exit(1)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, fixed: list[str]) -> None:
    out_dir = os.path.abspath(args.dir or os.path.join("tune", args.study))
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # tune.py says what each trial did
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat's retry, the plots
    url = args.storage or f"sqlite:///{os.path.join(out_dir, args.study + '.db')}"
    if args.slurm_workers is not None:  # a journal file on the shared folder unless a server is given
        url = args.storage or os.path.join(out_dir, args.study + ".log")
    path = storage_file(url)
    if args.command == "show":
        if path and not os.path.exists(path):  # say so, make no database
            raise BadInput(f"no study {args.study!r}: {path} does not exist (--dir, --storage)")
        show(load_study(args.study, open_storage(url), None), out_dir)
        return
    # every check of the command line comes before the storage and its folder are made: bad input makes nothing
    for name in ("trials", "last_episodes", "max_failures") + (("threads",) if args.threads is not None else ()):
        if getattr(args, name) < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if len(set(args.seeds)) < len(args.seeds):
        raise BadInput(f"--seeds {' '.join(map(str, args.seeds))}: a seed twice would count one run twice")
    space = search_space(args.script, args.param, fixed)
    if not space:
        raise BadInput("nothing to search: every flag of the default space is fixed after -- (name some with --param)")
    budget = fixed_int(args.script, fixed, "total-timesteps")
    for name in ("num-envs", "num-steps", "num-minibatches", "total-timesteps"):  # what batch_problem reads each trial
        if (value := fixed_int(args.script, fixed, name)) < 1:
            raise BadInput(f"--{name} must be positive, got {value}")
    if args.objective == "eval" and fixed_int(args.script, fixed, "eval-episodes") < 1:
        raise BadInput("--objective eval needs an evaluation: give --eval-episodes a positive value after --")
    objective_text = (
        f"mean of the last {args.last_episodes} training episodes" if args.objective == "last" else "greedy evaluation"
    ) + f", averaged over seeds {args.seeds}"
    space_text = [dataclasses.asdict(p) | {"kind": p.kind.__name__} for p in space]
    settings = {"script": args.script, "fixed": fixed, "seeds": args.seeds, "objective": args.objective,
                "last_episodes": args.last_episodes, "space": space_text, "objective_text": objective_text}  # fmt: skip
    if args.slurm_workers is not None:
        submit_workers(args, fixed, url, out_dir, json.loads(json.dumps(settings)))
        return
    study = open_study(url, args.study, json.loads(json.dumps(settings)))
    if not args.no_prune:  # judged from the PRUNE_AFTER-th report on, against the median of the trials before
        warmup = report_steps(budget)[PRUNE_AFTER - 1]
        study.pruner = optuna.pruners.MedianPruner(n_startup_trials=STARTUP_TRIALS // 2, n_warmup_steps=warmup)
    threads = args.threads or max(1, usable_cores() // len(args.seeds))
    setup = Study(args.study, args.script, fixed, args.seeds, args.objective, args.last_episodes, budget,
                  os.path.join(out_dir, "runs"), threads)  # fmt: skip
    failures: list[str | None] = []  # per trial of this worker: its script's error, None for a value or a prune

    def failing() -> bool:
        return len(failures) >= args.max_failures and None not in failures[-args.max_failures :]

    def after_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        value = f" {trial.value:.2f}" if trial.value is not None else ""
        if trial.state == optuna.trial.TrialState.PRUNED and trial.intermediate_values:
            value = f" at step {max(trial.intermediate_values)} ({value.strip()})"
        error = f": {trial.user_attrs.get('error') or trial.user_attrs.get('refused') or ''}".removesuffix(": ")
        print(f"trial {trial.number} {trial.state.name.lower()}{value} {' '.join(as_flags(trial.params))}{error}")
        failed = trial.state == optuna.trial.TrialState.FAIL and "error" in trial.user_attrs
        failures.append(trial.user_attrs["error"] if failed else None)
        if failing() or len(finished(study)) >= args.trials or stop.signum:
            study.stop()

    done = len(finished(study))
    print(f"study {args.study}: {done} of {args.trials} trials finished; runs in {setup.runs_dir}", flush=True)
    with StopFlag() as stop:
        try:
            if done < args.trials:
                study.optimize(objective_fn(setup, space, stop), callbacks=[after_trial], catch=(TrialFailed,))
        except Stopped as cut:
            number, params = cut.args
            study.enqueue_trial(params, user_attrs={"retry_of": number})
            say(f"stopped: trial {number} cut and queued to run again first; the same command resumes")
            sys.exit(128 + stop.signum)
        if stop.signum:
            say("stopped between trials; the same command resumes")
            sys.exit(128 + stop.signum)
    if failing():
        say(f"error: {args.max_failures} trials in a row failed, the last with {failures[-1]}")
        sys.exit(2)
    show(study, out_dir)


if __name__ == "__main__":
    main()
