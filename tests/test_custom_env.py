"""A user's own environment, the way gymnasium means it: `--env-id module:EnvId` (the module imported from the
Python path or the current folder, as `python -m` does), `--env-kwargs` passed to every gym.make of a run and
saved with it, observations flattened into one vector, and every bad input refused with one line, exit 2,
before anything is written. The scripts run as a user runs them, in a folder that holds the module."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
import tyro
from conftest import (
    HANG_TIMEOUT,
    NEEDS_PGREP,
    ROOT,
    TORCHRUN_ENV,
    only_run,
    processes_in_group,
    run_script,
    scalars,
    wait_until,
)

import ppo_continuous as C

# A module of the user's: Probe pays `reward` at every step of an episode of `length` steps, whatever the
# actions, so each return (training's, a resumed run's, the evaluation's) is reward * length exactly: the
# keyword arguments reached that gym.make. `obs` picks the observation space, `fail` where it raises.
PROBE = textwrap.dedent(
    """
    import multiprocessing
    from collections import OrderedDict

    import gymnasium as gym
    import numpy as np

    BOX = gym.spaces.Box(-5.0, 5.0, (2,), np.float32)


    class Weird(gym.Space):  # a space of the user's own: gymnasium has no flatten for it
        def __init__(self):
            super().__init__((2,), np.float32)


    SPACES = {
        "vector": BOX,
        "matrix": gym.spaces.Box(-5.0, 5.0, (3, 4), np.float32),
        "scalar": gym.spaces.Box(-5.0, 5.0, (), np.float32),
        "dict": gym.spaces.Dict({"b": BOX, "a": gym.spaces.Box(-5.0, 5.0, (1,), np.float32)}),
        "ordered": gym.spaces.Dict(OrderedDict(b=BOX, a=gym.spaces.Box(-5.0, 5.0, (1,), np.float32))),
        "tuple": gym.spaces.Tuple((BOX, gym.spaces.Box(-5.0, 5.0, (1,), np.float32))),
        "sequence": gym.spaces.Sequence(BOX),
        "weird": Weird(),
        "discrete": gym.spaces.Discrete(3),
        "multidiscrete": gym.spaces.MultiDiscrete([2, 3]),
        "multibinary": gym.spaces.MultiBinary(3),
    }


    class Probe(gym.Env):
        metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

        def __init__(self, reward=1.0, length=10, obs="vector", fail=None, render_mode=None, act=(2,)):
            self.reward, self.length, self.kind, self.fail = reward, length, obs, fail
            self.observation_space = SPACES[obs]
            self.action_space = gym.spaces.Box(-1.0, 1.0, tuple(act), np.float32)
            self.render_mode = None if fail == "render-mode" else render_mode  # "render-mode": ignores it
            if fail == "worker" and multiprocessing.parent_process() is not None:  # other copies, other spaces
                self.observation_space = gym.spaces.Box(-6.0, 6.0, (2,), np.float32)

        def observation(self):
            if self.kind in ("dict", "ordered"):
                return {"b": np.array([1.0, 2.0], np.float32), "a": np.array([3.0], np.float32)}
            if self.kind == "tuple":
                return (np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32))
            if self.kind == "sequence":
                return (np.array([1.0, 2.0], np.float32),)
            if self.kind == "discrete":
                return np.int64(2)
            if self.kind == "multidiscrete":
                return np.array([1, 2], np.int64)
            if self.kind == "multibinary":
                return np.array([1, 0, 1], np.int8)
            return np.arange(np.prod(self.observation_space.shape), dtype=np.float32).reshape(
                self.observation_space.shape
            ) / 10

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            if self.fail == "reset":
                raise RuntimeError("reset broke")
            self.t = 0
            return (np.zeros(3, np.float32) if self.fail == "reset-shape" else self.observation()), {}

        def step(self, action):
            if self.fail == "step":
                raise ValueError("step broke")
            self.t += 1
            obs = np.zeros(3, np.float32) if self.fail == "step-shape" else self.observation()
            return obs, self.reward, self.t >= self.length, False, {}

        def render(self):
            return np.zeros((16, 16, 3), np.uint8)


    gym.register("Probe-v0", entry_point=Probe)
    """
)
SMALL = ["--num-steps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "2"]
KWARGS = {"reward": 2.5, "length": 7, "obs": "dict"}  # every return is 17.5


@pytest.fixture
def folder(tmp_path):
    """The user's folder: their module, probe.py, in it; the scripts are run from it."""
    (tmp_path / "probe.py").write_text(PROBE)
    return tmp_path


def train(folder, *flags: str, script: str = "ppo_continuous.py", kwargs: dict = KWARGS, total: int = 128):
    steps = ["--total-timesteps", str(total)]
    return run_script(
        folder, script, "--env-id", "probe:Probe-v0", "--env-kwargs", json.dumps(kwargs), *SMALL, *steps, *flags
    )


def episode_returns(run_dir) -> set[float]:
    return {value for _, value in scalars(run_dir)["charts/episodic_return"]}


def assert_refused(proc: subprocess.CompletedProcess, folder, *words: str) -> None:
    """One line on stderr naming what is wrong, exit 2, and no run folder, video or checkpoint written."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]
    assert not (folder / "runs").exists() and not (folder / "videos").exists()


# --- the module, its keyword arguments and its flattened observations, through every entry point ---


def test_a_module_env_trains_with_its_kwargs_resumes_and_evaluates_with_them(folder):
    proc = train(folder, "--capture-video")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(folder)
    assert run_dir.name.startswith("probe-Probe-v0__")  # no ':' in a folder's name
    assert episode_returns(run_dir) == {17.5}  # training's gym.make had the kwargs
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [17.5, 17.5]  # and the evaluation's
    assert list((folder / "videos" / run_dir.name).glob("*.mp4"))
    ckpt = torch.load(run_dir / C.CHECKPOINT, weights_only=True)
    assert json.loads(ckpt["args"]["env_kwargs"]) == KWARGS and ckpt["args"]["env_id"] == "probe:Probe-v0"

    # --resume, in a new process, rebuilds the same environment from the saved Args alone: cut the saved
    # progress back one iteration and drop the closing files, and the resumed iteration scores 17.5 again
    ckpt["progress"] |= {"iteration": 1, "global_step": 64}
    torch.save(ckpt, run_dir / C.CHECKPOINT)
    for name in ("eval.json", "summary.json"):
        (run_dir / name).unlink()
    resumed = run_script(folder, "ppo_continuous.py", "--resume", str(run_dir / C.CHECKPOINT))
    assert resumed.returncode == 0 and "resuming at step 64" in resumed.stdout, resumed.stderr[-3000:]
    assert [step for step, _ in scalars(run_dir)["charts/episodic_return"]][-1] > 64  # it trained
    assert episode_returns(run_dir) == {17.5}
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [17.5, 17.5]

    # --eval-checkpoint, from another folder (the module found on PYTHONPATH), the checkpoint's env and kwargs
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    env = os.environ | {"PYTHONPATH": str(folder)}
    cmd = [sys.executable, str(ROOT / "ppo_continuous.py"), "--eval-checkpoint", str(run_dir / C.CHECKPOINT)]
    evaluated = subprocess.run(
        cmd + ["--eval-episodes", "3"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [17.5] * 3


def test_eval_checkpoint_of_a_module_env_whose_module_is_gone_is_refused_with_one_line(folder):
    assert train(folder, "--eval-episodes", "0").returncode == 0
    checkpoint = only_run(folder) / C.CHECKPOINT
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    proc = run_script(elsewhere, "ppo_continuous.py", "--eval-checkpoint", str(checkpoint))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: cannot make probe:Probe-v0") and "No module named 'probe'" in proc.stderr
    assert not (checkpoint.parent / "eval.json").exists()


def test_eval_checkpoint_checks_the_env_with_the_checkpoint_s_kwargs(folder):
    """--eval-checkpoint makes, resets and steps the saved env with the saved --env-kwargs before it evaluates: kwargs
    with which the env (its module changed since, say) now fails are refused with one line, as training's are."""
    assert train(folder, "--eval-episodes", "0").returncode == 0
    checkpoint = only_run(folder) / C.CHECKPOINT
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["args"]["env_kwargs"] = json.dumps(KWARGS | {"fail": "reset"})  # made fine, fails at its reset
    torch.save(ckpt, checkpoint)
    proc = run_script(folder, "ppo_continuous.py", "--eval-checkpoint", str(checkpoint))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: probe:Probe-v0 failed when made, reset and stepped once (RuntimeError: reset")
    assert not (checkpoint.parent / "eval.json").exists()


PROBE_RUN = ["--env-id", "probe:Probe-v0", "--env-kwargs", json.dumps(KWARGS), *SMALL, "--total-timesteps", "256"]


def assert_probe_run_finished(proc: subprocess.CompletedProcess, folder) -> None:
    """A PROBE_RUN ended well, its training and its evaluation made with the kwargs (every return 17.5)."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run(folder)
    assert episode_returns(run_dir) == {17.5}
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == [17.5] * 2


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_async_env_workers_find_the_module_under_every_start_method(folder, start_method):
    """Each env worker makes the env by its module:EnvId: a spawned or forkserver worker imports the module itself."""
    run = (
        "import multiprocessing, runpy, sys; "
        f"multiprocessing.set_start_method({start_method!r}); "
        "sys.argv = ['ppo_continuous.py'] + sys.argv[1:]; "
        f"runpy.run_path({str(ROOT / 'ppo_continuous.py')!r}, run_name='__main__')"
    )
    cmd = [sys.executable, "-c", run, *PROBE_RUN, "--num-envs", "2", "--async-envs"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert_probe_run_finished(proc, folder)


@NEEDS_PGREP
def test_env_copies_that_differ_in_their_worker_processes_end_the_run_with_no_process_left(folder):
    # made in the run's own process (check_env) they pass; in the async workers their spaces differ, which the vector
    # env refuses once they run: the run ends with its error, writes nothing, and its workers, which ignore SIGTERM,
    # do not hold the exit for ever
    flags = [*PROBE_RUN, "--env-kwargs", json.dumps(KWARGS | {"fail": "worker"}), "--num-envs", "2", "--async-envs"]
    cmd = [sys.executable, str(ROOT / "ppo_continuous.py"), *flags]
    proc = subprocess.Popen(cmd, cwd=folder, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=HANG_TIMEOUT)
        assert proc.returncode == 1 and "observation spaces" in err, err[-3000:]
        assert not (folder / "runs").exists()
        wait_until(lambda: not processes_in_group(proc.pid), "the end of the env workers")
    finally:
        if proc.poll() is None or processes_in_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)  # what a failed check left


def test_a_module_env_trains_under_torchrun(folder):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = os.environ | TORCHRUN_ENV
    cmd += [str(ROOT / "ppo_continuous.py"), *PROBE_RUN]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert_probe_run_finished(proc, folder)


@pytest.mark.parametrize(
    "kind, flattened",
    [
        ("vector", [0.0, 0.1]),
        ("matrix", [x / 10 for x in range(12)]),  # row by row (C order)
        ("scalar", [0.0]),  # a 0-d Box: a vector of one
        ("dict", [3.0, 1.0, 2.0]),  # the keys sorted: "a", then "b"
        ("ordered", [1.0, 2.0, 3.0]),  # an OrderedDict's own order: "b", then "a"
        ("tuple", [1.0, 2.0, 3.0]),
        ("discrete", [0.0, 0.0, 1.0]),  # 2 of Discrete(3), one-hot
        ("multidiscrete", [0.0, 1.0, 0.0, 0.0, 1.0]),  # (1, 2) of MultiDiscrete([2, 3]): each entry one-hot, in order
        ("multibinary", [1.0, 0.0, 1.0]),  # its int8 bits
    ],
)
def test_observations_are_flattened_in_the_documented_order_before_normalization(folder, monkeypatch, kind, flattened):
    """What the agent, the normalization and the checkpoint see is one vector: each Box row by row, a Dict's
    entries by sorted key (an OrderedDict's in its order), a Tuple's in order, a Discrete (each entry of a
    MultiDiscrete) one-hot, a MultiBinary's bits; of float32 whatever the space's dtype."""
    monkeypatch.syspath_prepend(str(folder))
    __import__("probe")
    envs = C.make_envs(C.Args(env_id="probe:Probe-v0", env_kwargs=json.dumps({"obs": kind})), "test")
    assert envs.single_observation_space.shape == (len(flattened),)
    assert envs.single_observation_space.dtype == np.float32  # the buffer's and the networks' dtype
    envs.reset(seed=1)  # one observation seen: the running mean is that observation
    np.testing.assert_allclose(envs.obs_rms.mean, flattened, rtol=1e-3, atol=1e-6)
    flattening = isinstance(envs.unwrapped.envs[0], gym.wrappers.FlattenObservation)
    assert flattening == (kind != "vector")  # a flat Box goes in as it is
    envs.close()


# An env of the user's whose actions lie in [0.5, 1] x [-3, -2] x (-inf, inf): no dimension holds 0, the bounds differ
# per dimension, one is infinite; like many envs it raises on an action outside its space
SHIFTED = textwrap.dedent(
    """
    import gymnasium as gym
    import numpy as np


    class Shifted(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gym.spaces.Box(
            np.array([0.5, -3.0, -np.inf], np.float32), np.array([1.0, -2.0, np.inf], np.float32)
        )

        def __init__(self):
            self.received = []

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            if not self.action_space.contains(np.asarray(action, np.float32)):
                raise ValueError(f"action {action} is outside {self.action_space}")
            self.received.append(np.array(action))
            return np.zeros(2, np.float32), -1.0, False, False, {}


    gym.register("Shifted-v0", entry_point=Shifted)
    """
)


def test_an_env_whose_action_bounds_exclude_zero_passes_the_check_and_gets_its_own_bounds(tmp_path, monkeypatch):
    """The check steps the env with an action of its own space, as training (which clips to the env's low and high)
    does: an env that refuses actions outside its bounds, none of which holds 0, is not refused."""
    (tmp_path / "shifted.py").write_text(SHIFTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = C.Args(env_id="shifted:Shifted-v0", num_steps=64, num_minibatches=2, total_timesteps=64)
    assert C.check_args(args) is None
    envs = C.make_envs(args, "test")
    envs.reset(seed=0)
    sampled = np.array([[0.0, 0.0, 0.0], [5.0, -9.0, -1e6], [0.75, -2.5, 3.0]], np.float32)
    for action in sampled:
        envs.step(action[None])
    received = np.stack(envs.unwrapped.envs[0].unwrapped.received)
    envs.close()
    assert np.array_equal(received, [[0.5, -2.0, 0.0], [1.0, -3.0, -1e6], [0.75, -2.5, 3.0]])


def test_an_atari_env_takes_its_kwargs_and_a_module_prefix(tmp_path):
    """ALE's own keyword arguments reach its gym.make: `full_action_space` gives all 18 actions to the policy."""
    flags = ["--num-envs", "1", "--num-steps", "32", "--num-minibatches", "1", "--update-epochs", "1"]
    kwargs = json.dumps({"full_action_space": True, "repeat_action_probability": 0.0})
    proc = run_script(
        tmp_path, "ppo_atari.py", "--env-id", "ale_py:ALE/Pong-v5", "--env-kwargs", kwargs, *flags,
        "--total-timesteps", "32", "--eval-episodes", "0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = torch.load(only_run(tmp_path) / C.CHECKPOINT, weights_only=True)
    assert ckpt["agent"]["actor.weight"].shape[0] == 18  # Pong's minimal set has 6


# --- bad input: one line, exit 2, nothing written ------------------------------------------------


@pytest.mark.parametrize(
    "env_id, kwargs, words",
    [
        ("probe:Probe-v0", "{reward: 1}", ["--env-kwargs '{reward: 1}' is not JSON"]),
        ("probe:Probe-v0", "[1, 2]", ["cannot make probe:Probe-v0 with --env-kwargs [1, 2]", "must be a mapping"]),
        (
            "probe:Probe-v0",
            '{"colour": "red"}',
            ['cannot make probe:Probe-v0 with --env-kwargs {"colour": "red"} (', "TypeError"],
        ),
        ("nosuchmodule:Probe-v0", "{}", ["cannot make nosuchmodule:Probe-v0", "No module named 'nosuchmodule'"]),
        ("broken:Probe-v0", "{}", ["cannot make broken:Probe-v0", "ZeroDivisionError"]),
        (
            "probe:Nope-v0",
            "{}",
            ["cannot make probe:Nope-v0 (", "NameNotFound", "`Nope` doesn't exist"],
        ),  # no kwargs said
        ("probe:Probe-v0", '{"fail": "reset"}', ["probe:Probe-v0 failed", "RuntimeError: reset broke"]),
        ("probe:Probe-v0", '{"fail": "step"}', ["probe:Probe-v0 failed", "ValueError: step broke"]),
        ("probe:Probe-v0", '{"fail": "reset-shape"}', ["probe:Probe-v0 failed", "shape [(3,), (2,)], not (2,)"]),
        ("probe:Probe-v0", '{"fail": "step-shape"}', ["probe:Probe-v0 failed", "shape [(2,), (3,)], not (2,)"]),
        ("probe:Probe-v0", '{"obs": "sequence"}', ["observation space Sequence", "cannot be flattened into a Box"]),
        ("probe:Probe-v0", '{"obs": "weird"}', ["space <probe.Weird object", "cannot be flattened"]),
        ("HalfCheetah-v4", '{"colour": 1}', ["cannot make HalfCheetah-v4 with"]),  # v5 exists: gymnasium's note, hushed
        (
            "CartPole-v1",
            "{}",
            ["CartPole-v1 has Discrete(2) actions", "ppo_continuous.py trains Box (A,) actions", "neither does"],
        ),
        ("probe:Probe-v0", '{"act": [2, 3]}', ["Probe-v0 has Box(-1.0, 1.0, (2, 3), float32) actions", "neither"]),
    ],
)
def test_bad_modules_kwargs_and_envs_are_refused_with_one_line(folder, env_id, kwargs, words):
    (folder / "broken.py").write_text("import probe\n1 / 0\n")
    # a run the check let through ends in seconds (and fails the test), not after the default budget
    proc = run_script(
        folder, "ppo_continuous.py", "--env-id", env_id, "--env-kwargs", kwargs, *SMALL, "--total-timesteps", "64"
    )
    assert_refused(proc, folder, *words)


def test_an_env_that_ignores_its_render_mode_is_refused_for_capture_video_in_one_line(folder):
    """--capture-video films through RecordVideo, which refuses an env whose render_mode is not the 'rgb_array' given
    to gym.make: the check says so in one line, before anything is written, not a traceback once training makes it."""
    proc = train(folder, "--capture-video", kwargs=KWARGS | {"fail": "render-mode"})
    said = "probe:Probe-v0 failed when made, reset and stepped once, then rendered"
    assert_refused(proc, folder, said, "'rgb_array'")
    assert train(folder, kwargs=KWARGS | {"fail": "render-mode"}).returncode == 0  # unfilmed, it trains


def test_an_exception_is_told_in_one_line():
    assert C.why(ValueError("first line\nsecond line")) == "ValueError: first line"
    assert C.why(KeyError()) == "KeyError: "


def test_doc_refusal_lines_are_the_ones_printed(monkeypatch):
    """docs/custom_env.md's table of refusals, each row with a literal input: the line the script prints ('...' where
    the doc leaves a long message out)."""
    monkeypatch.chdir(ROOT / "examples")
    inputs = {  # the doc's input cell: the flags after --env-id pointmass:PointMass-v0
        "`--env-kwargs '{speed: 1}'`": ["--env-kwargs", "{speed: 1}"],
        "`--env-kwargs '{\"colour\": 1}'`": ["--env-kwargs", '{"colour": 1}'],
        "`--env-id nosuch:PointMass-v0`": ["--env-id", "nosuch:PointMass-v0"],
        "an id the module does not register": ["--env-id", "pointmass:Nope-v0"],
        "Discrete actions (`CartPole-v1`)": ["--env-id", "CartPole-v1"],
        "`--capture-video` (PointMass takes no `render_mode`)": ["--capture-video"],
    }
    rows = dict(line.strip("| ").split(" | ") for line in (ROOT / "docs" / "custom_env.md").read_text().splitlines()
                if line.startswith("| ") and line.count(" | ") == 1)  # fmt: skip
    for cell, flags in inputs.items():
        args = tyro.cli(C.Args, args=["--env-id", "pointmass:PointMass-v0", *flags])
        documented = re.escape(rows[cell][1:-1]).replace(re.escape("..."), ".*")
        assert re.fullmatch(documented, f"error: {C.check_args(args)}"), (cell, C.check_args(args))


def test_an_env_that_cannot_be_filmed_is_refused_in_one_line_with_gymnasium_s_notes_silenced(tmp_path):
    """The page's PointMass takes no render_mode: --capture-video is exit 2 and the one line alone on stderr (gymnasium
    notes that 'rgb_array' is not among its render modes: said before the line, it would make two), nothing written."""
    command = [sys.executable, str(ROOT / "ppo_continuous.py"), "--env-id", "pointmass:PointMass-v0", "--capture-video"]
    env = os.environ | {"PYTHONPATH": str(ROOT / "examples")}
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: pointmass:PointMass-v0 failed when made") and "'render_mode'" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_module_env_films_its_first_copy_only(folder, monkeypatch):
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    envs = C.make_envs(C.Args(env_id="probe:Probe-v0", num_envs=3, capture_video=True), "test")
    filmed = [isinstance(env, gym.wrappers.RecordVideo) for env in envs.unwrapped.envs]
    envs.close()
    assert filmed == [True, False, False]


@pytest.mark.parametrize(
    "env_id, actions",
    [("ale_py:ALE/Pong-v5", "Discrete(6)"), ("ale_py:BreakoutNoFrameskip-v4", "Discrete(4)")],  # v5's and v4's names
)
def test_an_atari_game_given_to_ppo_continuous_is_sent_to_ppo_atari(folder, env_id, actions):
    """Told by the ALE's entry point, whatever the id's name: a v4 id (no "ALE/" in it) is an Atari game too."""
    proc = run_script(folder, "ppo_continuous.py", "--env-id", env_id, *SMALL, "--total-timesteps", "64")
    assert proc.returncode == 2 and not (folder / "runs").exists()
    last = proc.stderr.strip().splitlines()[-1]  # after ALE's banner, which importing ale_py prints
    assert f"has {actions} actions" in last and "train it with ppo_atari.py" in last and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "env_id, kwargs, words",
    [
        ("ALE/Pong-v5", '{"colour": "red"}', ['cannot make ALE/Pong-v5 with --env-kwargs {"colour": "red"} (']),
        ("ALE/Pong-v5", '{"frameskip": 4}', ["ALE/Pong-v5 failed"]),  # AtariPreprocessing skips frames itself
        (
            "nosuchmodule:ALE/Pong-v5",
            "{}",
            ["cannot make nosuchmodule:ALE/Pong-v5 (", "No module named 'nosuchmodule'"],
        ),
        ("probe:Probe-v0", "{}", ["probe:Probe-v0 (Box(", "is no Atari game", "train it with ppo_continuous.py"]),
        ("CartPole-v1", "{}", ["CartPole-v1 (Discrete(2) actions) is no Atari game", "neither does"]),
        ("probe:Probe-v0", '{"act": [2, 3]}', ["(2, 3), float32) actions) is no Atari game", "neither does"]),
    ],
)
def test_bad_atari_modules_and_kwargs_are_refused_with_one_line(folder, env_id, kwargs, words):
    tiny = [
        "--num-envs",
        "1",
        "--num-steps",
        "32",
        "--num-minibatches",
        "1",
        "--total-timesteps",
        "32",
        "--eval-episodes",
        "0",
    ]
    proc = run_script(folder, "ppo_atari.py", "--env-id", env_id, "--env-kwargs", kwargs, *tiny)
    assert_refused(proc, folder, *words)


# --- the worked example of docs/custom_env.md --------------------------------------------------


def test_the_documented_point_mass_learns_to_reach_its_target(tmp_path):
    """examples/pointmass.py, trained as the docs say (a smaller budget): it ends far above a random policy."""
    env = os.environ | {"PYTHONPATH": str(ROOT / "examples")}
    cmd = [sys.executable, str(ROOT / "ppo_continuous.py"), "--env-id", "pointmass:PointMass-v0"]
    proc = subprocess.run(
        cmd + ["--total-timesteps", "20480", "--eval-episodes", "10"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluation = json.loads((only_run(tmp_path) / "eval.json").read_text())
    # minus distances: random -116.6, standing still -102.3; these 20,480 steps evaluated -27.5 on an AMD EPYC, and
    # half the random score leaves room for another CPU's rounding
    assert -60 < evaluation["mean_return"] <= 0


def test_the_point_mass_moves_by_speed_times_the_action_and_pays_minus_the_distance():
    pointmass = import_example("pointmass")
    env = pointmass.PointMass(speed=0.05)
    start, _ = env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(np.array([1.0, -1.0], np.float32))
    assert obs["position"] == pytest.approx(start["position"] + [0.05, -0.05])  # --env-kwargs' speed
    assert obs["target"] == pytest.approx(start["target"])
    assert reward == pytest.approx(-np.linalg.norm(obs["target"] - obs["position"]))
    assert not terminated and not truncated
    for speed in (0.0, -1.0):
        with pytest.raises(ValueError, match="speed must be positive"):
            pointmass.PointMass(speed=speed)


def test_the_point_mass_is_seeded_by_reset_and_cut_at_its_time_limit():
    pointmass = import_example("pointmass")
    starts = []
    for global_seed in (0, 1):  # numpy's global RNG plays no part
        np.random.seed(global_seed)  # noqa: NPY002
        starts.append(pointmass.PointMass().reset(seed=3)[0])
    assert all(np.array_equal(starts[0][key], starts[1][key]) for key in starts[0])
    other = pointmass.PointMass().reset(seed=4)[0]  # and the seed is what decides it
    assert not all(np.array_equal(starts[0][key], other[key]) for key in other)
    env = gym.make("PointMass-v0", disable_env_checker=True)
    env.reset(seed=0)
    for _ in range(pointmass.EPISODE_STEPS - 1):
        assert env.step(env.action_space.sample())[2:4] == (False, False)
    assert env.step(env.action_space.sample())[2:4] == (False, True)  # a truncation, never a termination


def import_example(name: str):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "examples"))


def test_the_point_mass_baselines_the_page_gives_for_scale(monkeypatch):
    """docs/custom_env.md, for scale: over reset seeds 10,000 to 10,199, actions drawn uniformly at random score
    -116.6, standing still -102.3, and a controller heading straight for the target -5.0."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import pointmass

    env = gym.make("pointmass:PointMass-v0")
    env.action_space.seed(0)
    policies = {
        "random": lambda obs: env.action_space.sample(),
        "still": lambda obs: np.zeros(2),
        "controller": lambda obs: np.clip((obs["target"] - obs["position"]) / env.unwrapped.speed, -1, 1),
    }
    scores = {}
    for name, policy in policies.items():
        returns = []
        for seed in range(10_000, 10_200):
            obs, _ = env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(policy(obs))
                total, done = total + reward, terminated or truncated
            returns.append(total)
        scores[name] = round(float(np.mean(returns)), 1)
    assert scores == {"random": -116.6, "still": -102.3, "controller": -5.0}
    assert pointmass.EPISODE_STEPS == 100  # each of those returns sums 100 steps
