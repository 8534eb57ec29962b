"""What more than one test file needs: running a script, reading what a run logged, spying on a
script's functions, and the fake environments, wrappers and rollouts the tests share.
Test files import from here, never from each other."""

import json
import os

# under pytest-xdist the workers share the cores: each worker, and every script it starts, gets its share
# of threads (torch and ppo_atari.py size theirs by OMP_NUM_THREADS when they are imported)
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    share = cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, share)))

import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

import ppo_continuous as C

ROOT = Path(__file__).resolve().parent.parent
# the suite's one limit on time: a guard against a hang, never a bet on the machine's speed. Every subprocess
# a test starts and everything a test waits for gets it (the slowest test runs for about a minute alone)
HANG_TIMEOUT = 900  # seconds
# torchrun's test runs start two processes: on a machine with fewer GPUs (one NCCL process per GPU) they run on the
# CPU (gloo, any number), as `--no-cuda` would
TORCHRUN_ENV = {"OMP_NUM_THREADS": "1"} | ({"CUDA_VISIBLE_DEVICES": ""} if torch.cuda.device_count() < 2 else {})


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """main installs SIGINT/SIGTERM handlers and a stopping run blocks both; put pytest's handlers and signal
    mask back after each test (a blocked mask would pass on to every script a later test starts)."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for sig, handler in saved.items():
        signal.signal(sig, handler)


# --- running a script and reading its run --------------------------------------------------------


def run_script(folder: Path, script: str, *flags: str, timeout: float = HANG_TIMEOUT) -> subprocess.CompletedProcess:
    """`python SCRIPT FLAGS...` run to its end in folder (a test's tmp folder, where it writes runs/),
    with its stdout and stderr captured as text. script is a file of the repository's root."""
    return subprocess.run(
        [sys.executable, str(ROOT / script), *flags], cwd=folder, capture_output=True, text=True, timeout=timeout
    )


def wait_until(condition, what: str, proc: subprocess.Popen | None = None):
    """Poll condition() until it returns something true, and return that; fail if proc (when given) ends without
    it, or at HANG_TIMEOUT (a hang: it says nothing about speed)."""
    deadline = time.monotonic() + HANG_TIMEOUT
    while not (found := condition()):
        if proc is not None and proc.poll() is not None and not (found := condition()):
            stderr = proc.stderr.read()[-3000:] if proc.stderr else ""
            pytest.fail(f"the process ended with {proc.returncode} before {what}: {stderr}")
        assert time.monotonic() < deadline, f"hung: no {what} in {HANG_TIMEOUT} s"
        time.sleep(0.05)
    return found


def processes_in_group(pgid: int) -> list[str]:
    """The processes (zombies too) left in process group pgid."""
    pgrep = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, timeout=HANG_TIMEOUT)
    return pgrep.stdout.split()


NEEDS_PGREP = pytest.mark.skipif(shutil.which("pgrep") is None, reason="needs pgrep")


def wait_for_checkpoint(proc: subprocess.Popen, folder: Path) -> Path:
    """Wait until the run proc started in folder has written its first checkpoint; fail if it ends first."""
    return wait_until(lambda: list(Path(folder).glob("runs/*/checkpoint.pt")), "its first checkpoint", proc)[0]


class Lines:
    """The lines a process writes to a pipe of its (Popen's stderr=PIPE, text=True), read as they come by a
    thread of its own: a test can wait for one line, and still read them all in the end."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.ended = threading.Event()  # every process that could write to the pipe has closed it
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)
        self.ended.set()

    def wait_for(self, text: str) -> str:
        """The first line that holds text, once written; fail if the pipe closes without it."""
        first = lambda: next((line for line in self.lines if text in line), None)
        wait_until(lambda: first() or self.ended.is_set(), repr(text))
        if (line := first()) is None:
            pytest.fail(f"the pipe closed without {text!r}: {''.join(self.lines)[-3000:]}")
        return line

    def all(self) -> str:
        """All of them, once the pipe has closed."""
        wait_until(self.ended.is_set, "end of the pipe")
        return "".join(self.lines)


# an env module for runs of known least length: its steps sleep (tests of stops, cuts and requeues)
SLOW_POINTMASS = """
import time
import gymnasium as gym
from pointmass import EPISODE_STEPS, PointMass

class SlowPointMass(PointMass):  # a step takes at least STEP_S on any machine: a run of known least length
    def step(self, action):
        time.sleep(STEP_S)
        return super().step(action)

gym.register("SlowPointMass-v0", entry_point=SlowPointMass, max_episode_steps=EPISODE_STEPS)
"""
STEP_S = 0.004  # most of a step's time, whatever the machine and its load


def only_run(folder: Path) -> Path:
    """The run folder of the one run made in folder."""
    (run_dir,) = (Path(folder) / "runs").iterdir()
    return run_dir


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard holds for a run: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # slow: only when used

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# --- looking inside a run ----------------------------------------------------------------------


def spy(monkeypatch, module, name: str, before=None, after=None) -> list:
    """Wrap module.name: before(*args, **kwargs) runs ahead of each call, after(result, *args, **kwargs)
    behind it; the list returned collects (args, kwargs, result) of every call."""
    real = getattr(module, name)
    calls = []

    def wrapper(*args, **kwargs):
        if before:
            before(*args, **kwargs)
        result = real(*args, **kwargs)
        calls.append((args, kwargs, result))
        if after:
            after(result, *args, **kwargs)
        return result

    monkeypatch.setattr(module, name, wrapper)
    return calls


def find_wrapper(envs: gym.vector.VectorEnv, kind: type) -> gym.vector.VectorEnv:
    """The wrapper of class kind in the chain around envs (walking .env inward)."""
    while not isinstance(envs, kind):
        envs = envs.env
    return envs


# --- fake environments and wrappers ------------------------------------------------------------


class ResetSeeds(gym.Wrapper):
    """Records every seed an environment is reset with, and its first raw observation."""

    log: list = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        ResetSeeds.log.append((kwargs.get("seed"), obs.copy()))
        return obs, info


def record_reset_seeds(monkeypatch) -> list:
    """Wrap every environment ppo_continuous.make_env builds in ResetSeeds; returns the log, emptied:
    (seed, first raw observation) per reset."""
    real = C.make_env
    monkeypatch.setattr(C, "make_env", lambda *a: lambda: ResetSeeds(real(*a)()))
    ResetSeeds.log = []
    return ResetSeeds.log


class VectorRecorder(gym.vector.VectorWrapper):
    """Records what passes through the outermost vector env: each action in, each result out."""

    def __init__(self, env):
        super().__init__(env)
        self.steps, self.resets = [], []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.resets.append(np.array(obs))
        return obs, info

    def step(self, actions):
        result = self.env.step(actions)
        self.steps.append((np.array(actions), *[np.array(x) for x in result[:4]], result[4]))
        return result


# --- a hand-made rollout for update() (test_update.py, and the torchrun worker) ---------------

T, N, OBS_DIM, ACT_DIM = 16, 4, 3, 2  # 64 slots, some of them autoreset steps


def make_agent(seed: int = 0) -> C.Agent:
    torch.manual_seed(seed)
    spaces = SimpleNamespace(
        single_observation_space=gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,)),
        single_action_space=gym.spaces.Box(-1, 1, (ACT_DIM,)),
    )
    agent = C.Agent(spaces)
    with torch.no_grad():  # a policy head far from its near-zero init, so that steps move it visibly
        agent.actor_mean.head.weight.normal_(0, 0.1)
    return agent


def make_rollout(agent: C.Agent, seed: int = 1) -> tuple[C.Rollout, torch.Tensor, torch.Tensor]:
    """A rollout whose old log-probs are the agent's plus noise (so that ratios start spread around 1,
    some outside the clip range), with every third env's step 5 and step 11 masked as autoreset steps."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, N, OBS_DIM, generator=g)
    with torch.no_grad():
        mean = agent.actor_mean(obs)
        actions = mean + agent.actor_logstd.exp() * torch.randn(T, N, ACT_DIM, generator=g)  # on-policy samples
        _, logprobs, _, values = agent.get_action_and_value(obs.flatten(0, 1), actions.flatten(0, 1))
    real = torch.ones(T, N, dtype=torch.bool)
    real[5, ::3] = real[11, ::3] = False
    buf = C.Rollout(
        obs=obs,
        actions=actions,
        logprobs=logprobs.view(T, N) + 0.3 * torch.randn(T, N, generator=g),
        values=values.view(T, N) + 0.5 * torch.randn(T, N, generator=g),
        rewards=torch.zeros(T, N),
        terminations=torch.zeros(T, N, dtype=torch.bool),
        truncations=torch.zeros(T, N, dtype=torch.bool),
        real=real,
    )
    advantages = 2.0 * torch.randn(T, N, generator=g) + 0.7
    returns = buf.values + advantages + 0.3 * torch.randn(T, N, generator=g)
    return buf, advantages, returns


def args_for(**overrides) -> C.Args:
    """Args that fit make_rollout's batch."""
    base = dict(num_envs=N, num_steps=T, num_minibatches=4, update_epochs=3, total_timesteps=T * N, ent_coef=0.01)
    return C.Args(**(base | overrides))


def finished_run_folder(runs_dir: Path, env_id: str, exp_name: str, seed: int, returns: list[float]) -> Path:
    """A finished run folder as the scripts write it: returns in TensorBoard, summary.json, eval.json."""
    from torch.utils.tensorboard import SummaryWriter

    folder = runs_dir / f"{env_id}__{exp_name}__{seed}__1700000000"
    writer = SummaryWriter(str(folder))
    for i, value in enumerate(returns):
        writer.add_scalar("charts/episodic_return", value, (i + 1) * 1000)
    writer.close()
    summary = {"global_step": len(returns) * 1000, "mean_return_last_10": float(np.mean(returns[-10:]))}
    summary |= {"wall_time_s": 123.0}
    (folder / "summary.json").write_text(json.dumps(summary | {"eval_mean_return": returns[-1] + 1, "sps": 100.0}))
    (folder / "eval.json").write_text(json.dumps({"returns": [returns[-1] + 1] * 2}))
    return folder


# a script run by grid.py: logs each call, writes its run folder (resumed with --resume), saves a checkpoint and
# finishes with a summary; "-fail__" runs and every run under CUT exit 3 after the checkpoint
FAKE_SCRIPT = """
import json, os, sys, time
argv = sys.argv[1:]
with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
    f.write(json.dumps({"argv": argv, "threads": os.environ["OMP_NUM_THREADS"], "cwd": os.getcwd()}) + "\\n")
if "--resume" in argv:
    folder = os.path.dirname(argv[argv.index("--resume") + 1])
else:
    name = "__".join(argv[argv.index(flag) + 1] for flag in ("--env-id", "--exp-name", "--seed"))
    folder = os.path.join("runs", name + "__1700000000")
    os.makedirs(folder)
open(os.path.join(folder, "checkpoint.pt"), "w").close()  # as the scripts save one every few iterations
if "-fail__" in folder or "CUT" in os.environ:  # a run that fails, or one cut off (exit 3)
    sys.exit(3)
if "table1-nosummary" not in folder:
    open(os.path.join(folder, "summary.json"), "w").write("{}")
print("trained", folder)
"""
