"""ppo_atari.py: the wrappers' semantics, short end-to-end runs, and the diff against ppo_continuous.py."""

import ast
import dataclasses
import inspect
import json
import os
import re
import shutil
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import tyro
from conftest import HANG_TIMEOUT, ROOT, find_wrapper, only_run, run_script, scalars

import ppo_atari as A
import ppo_continuous as C

# a short-episode env for each script (by module and by file name)
ENV_IDS = {
    C: "Pendulum-v1",
    A: "BreakoutNoFrameskip-v4",
    "ppo_continuous.py": "Pendulum-v1",
    "ppo_atari.py": "BreakoutNoFrameskip-v4",
}


class FakeAle:
    def __init__(self):
        self.lives_left = 3

    def lives(self) -> int:
        return self.lives_left


class FakeGame(gym.Env):
    """A game with 3 lives: every 4th step loses a life, each step scores 4 points (raw), and the
    game can be cut off by a time limit. Records every action it receives."""

    observation_space = gym.spaces.Box(0, 255, (2,), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, time_limit: int = 1000):
        self.ale, self.time_limit, self.actions, self.resets = FakeAle(), time_limit, [], 0

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ale.lives_left, self.t, self.resets = 3, 0, self.resets + 1
        return np.zeros(2, np.uint8), {}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        if self.t % 4 == 0:
            self.ale.lives_left -= 1
        return np.full(2, self.t, np.uint8), 4.0, self.ale.lives_left == 0, self.t >= self.time_limit, {}


def test_life_loss_ends_the_learning_episode_but_not_the_game():
    game = FakeGame()
    env = A.EpisodicLife(game)
    env.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step(2)
        assert not terminated
    _, _, terminated, truncated, _ = env.step(2)  # the 4th step loses a life
    assert terminated and not truncated and game.ale.lives() == 2
    env.reset()
    assert game.resets == 1  # the game went on: no real reset, only a no-op step
    assert game.actions[-1] == A.NOOP and game.ale.lives() == 2
    while not terminated or game.ale.lives() > 0:
        _, _, terminated, _, _ = env.step(2)
    env.reset()  # the game is over now: a real reset
    assert game.resets == 2 and game.ale.lives() == 3


class BonusLife(FakeGame):
    """A game that awards a life at step 2, as MsPacman and Q*bert do at a score."""

    def step(self, action):
        result = super().step(action)
        self.ale.lives_left += self.t == 2
        return result


def test_a_life_won_ends_no_episode_and_the_next_life_lost_does():
    game = BonusLife()
    env = A.EpisodicLife(game)
    env.reset(seed=0)
    terminated = [env.step(2)[2] for _ in range(4)]
    assert terminated == [False, False, False, True] and game.ale.lives() == 3  # 3, won at step 2: 4, lost at 4


class LastLifeLingers(FakeGame):
    """The lives counter reads 0 for a step before the game says it is over (baselines names Qbert): over at t=13."""

    def step(self, action):
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, self.t >= 13, truncated, info


def test_the_last_life_ends_with_the_game_not_when_the_lives_counter_reads_0():
    game = LastLifeLingers()
    env = A.EpisodicLife(game)
    env.reset(seed=0)
    ends = []
    for _ in range(11):  # a fixed count of agent steps: t = 1 to 13, less the two no-ops after the lives lost
        _, _, terminated, _, _ = env.step(2)
        ends.append((game.t, terminated))
        if terminated and game.t < 13:
            env.reset()  # a life lost: one no-op step
    assert [t for t, terminated in ends if terminated] == [4, 8, 13]  # lives 2 and 1 lost, then the game over only


def test_time_limit_is_a_truncation_not_a_termination_and_ends_the_game():
    game = FakeGame(time_limit=2)
    env = A.EpisodicLife(game)
    env.reset(seed=0)
    env.step(2)
    _, _, terminated, truncated, _ = env.step(2)
    assert truncated and not terminated
    env.reset()  # a game cut off is over, lives left or not: a real reset, no no-op step
    assert game.resets == 2 and game.actions == [2, 2]


def test_a_game_cut_off_on_the_steps_a_reset_takes_is_reset_for_real():
    game = FakeGame(time_limit=5)
    env = A.EpisodicLife(game)
    env.reset(seed=0)
    for _ in range(4):  # the 4th step loses a life
        env.step(2)
    env.reset()  # its no-op step is the 5th: the time limit cuts the game there
    assert game.resets == 2 and game.t == 0
    game = FakeGame(time_limit=2)
    env = A.FireReset(game)
    env.reset(seed=0)  # FIRE is step 1, action 2 step 2: cut off, so the game starts again
    assert game.resets == 2 and game.t == 0


class GameOverAt(FakeGame):
    """A game that is over (terminated, whatever its lives counter reads) at its step over_at."""

    def __init__(self, over_at: int):
        super().__init__()
        self.over_at = over_at

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or self.t >= self.over_at, truncated, info


def test_a_game_over_on_the_steps_a_reset_takes_is_reset_for_real_and_the_new_game_s_frame_returned():
    """As a time limit is (above): a game that terminates on a reset's own steps, the no-op after a lost life or one
    of FireReset's presses, starts again, and the reset returns the new game's frame, not the old game's last."""
    game = GameOverAt(5)
    env = A.EpisodicLife(game)
    env.reset(seed=0)
    for _ in range(4):  # the 4th step loses a life
        env.step(2)
    obs, _ = env.reset()  # its no-op step is the 5th: the game is over there
    assert game.resets == 2 and game.t == 0 and obs.tolist() == [0, 0]  # FakeGame's reset frame
    game = GameOverAt(2)
    env = A.FireReset(game)
    obs, _ = env.reset(seed=0)  # FIRE is step 1, action 2 step 2: the game is over, so it starts again
    assert game.resets == 2 and game.t == 0 and obs.tolist() == [0, 0]


@pytest.mark.parametrize(
    "wrap, time_limit, agent_steps",
    [
        (A.EpisodicLife, 5, 4),  # the 4th step loses a life; the reset's no-op, the 5th, meets the time limit
        (lambda env: A.FireReset(A.EpisodicLife(env)), 6, 2),  # FIRE, 2, two agent steps, the no-op, FIRE: the 6th
    ],
)
def test_a_game_that_ends_on_a_reset_s_own_steps_is_logged_with_its_whole_score(wrap, time_limit, agent_steps):
    """The rollout logs what the vector env's autoreset step reports: a game over inside the reset is reported too."""
    make = lambda: wrap(gym.wrappers.RecordEpisodeStatistics(FakeGame(time_limit=time_limit)))  # noqa: E731
    envs = gym.vector.SyncVectorEnv([make], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    envs.reset(seed=0)
    for _ in range(agent_steps):
        _, _, terminated, _, info = envs.step(np.array([2]))
        assert "episode" not in info
    assert terminated[0]  # a life lost: the next step is the autoreset that takes the reset's own steps
    _, _, _, _, info = envs.step(np.array([2]))
    assert info["_episode"][0] and info["episode"]["l"][0] == time_limit
    assert info["episode"]["r"][0] == pytest.approx(4.0 * time_limit)  # every step of the game, the reset's too
    envs.close()


def test_fire_is_pressed_after_every_reset_including_after_a_life_loss():
    game = FakeGame()
    env = A.FireReset(A.EpisodicLife(game))
    env.reset(seed=0)
    assert game.actions == [A.FIRE, A.SECOND_START_ACTION]
    env.step(3)
    _, _, terminated, _, _ = env.step(3)  # the game's 4th step loses a life
    assert terminated
    game.actions.clear()
    env.reset()  # after the life loss: a no-op step, then FIRE and action 2
    assert game.actions == [A.NOOP, A.FIRE, A.SECOND_START_ACTION]


def test_a_reset_returns_the_frame_after_its_own_steps_the_one_the_agent_acts_on():
    """FakeGame's frame of its step t reads t: FireReset's reset returns the frame after FIRE and action 2, and
    after a lost life the frame after the no-op and both presses, not one from before them."""
    game = FakeGame()
    env = A.FireReset(A.EpisodicLife(game))
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [2, 2]  # FIRE was step 1, action 2 step 2
    env.step(3)
    _, _, terminated, _, _ = env.step(3)  # the game's 4th step loses a life
    assert terminated
    obs, _ = env.reset()  # the no-op (step 5), FIRE (6), action 2 (7)
    assert obs.tolist() == [7, 7]


def test_episodic_life_ends_an_episode_per_life_while_the_statistics_below_it_score_whole_raw_games():
    game = FakeGame()
    env = gym.wrappers.RecordEpisodeStatistics(game)
    env = A.EpisodicLife(env)
    env = gym.wrappers.TransformReward(env, np.sign)
    env.reset(seed=0)
    clipped, episode = [], None
    for _ in range(20):
        _, reward, terminated, truncated, info = env.step(2)
        clipped.append(reward)
        if "episode" in info:
            episode = info["episode"]
            break
        if terminated:
            env.reset()
    assert set(clipped) == {1.0}
    # the whole game, all three lives: 12 game steps (two of them the no-op steps that follow a
    # lost life) of 4 raw points each, while the agent saw +1 per step
    assert episode["r"] == pytest.approx(4.0 * 12)
    assert sum(clipped) == 10  # the agent's steps (the no-op steps happen inside reset)


def make_real_env(env_id="BreakoutNoFrameskip-v4"):
    env = A.make_env(env_id, 0, False, "test", {})()
    return env


def test_breakout_frames_are_stacked_oldest_first():
    env = make_real_env()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (A.FRAME_STACK, A.SCREEN, A.SCREEN) and obs.dtype == np.uint8
    for _ in range(5):
        new, _, terminated, truncated, _ = env.step(env.action_space.sample())
        assert np.array_equal(new[:-1], obs[1:])  # the window slid by one frame
        obs = new
    env.close()


def test_threads_follow_omp_num_threads_or_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert A.usable_cores() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(A.os, "sched_getaffinity", lambda pid: {0, 5}, raising=False)
    monkeypatch.setattr(A.os, "cpu_count", lambda: 64)
    assert A.usable_cores() == 2  # not the host's 64
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # not a count: ignored
    assert A.usable_cores() == 2


# each script imported in a fresh process (CPU_THREADS is read at import), seeded for the CPU: its torch threads
THREADS_AFTER_SEEDING = """
import torch, ppo_atari as A, ppo_continuous as C
for module in (A, C):
    module.seed_everything(module.Args(cuda=False))
    print(torch.get_num_threads())
"""


def test_on_the_cpu_atari_runs_torch_on_omp_num_threads_threads_and_the_continuous_script_on_one():
    """docs/choices.md, "Speed and threads": ppo_atari.py's CNN takes OMP_NUM_THREADS threads (the share a user gives
    each of several seeds side by side), ppo_continuous.py's tiny MLPs one, whatever OMP_NUM_THREADS says."""
    proc = subprocess.run(
        [sys.executable, "-c", THREADS_AFTER_SEEDING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        env=os.environ | {"OMP_NUM_THREADS": "3"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["3", "1"]


def test_breakout_is_wrapped_to_fire_at_reset_and_each_of_its_five_lives_ends_a_learning_episode():
    env = make_real_env()
    assert isinstance(env.env.env, A.FireReset)
    assert env.action_space.n == 4  # Breakout's minimal action set (NOOP, FIRE, RIGHT, LEFT), not the full 18
    env.reset(seed=0)
    ale = env.unwrapped.ale
    assert ale.lives() == 5
    lives_seen = []
    for _ in range(2000):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            lives_seen.append(ale.lives())
            if ale.game_over():
                break
            env.reset()
    assert lives_seen[:4] == [4, 3, 2, 1]  # each life loss ended a learning episode, the game went on
    env.close()


@pytest.mark.parametrize("env_id", ["BreakoutNoFrameskip-v4", "ALE/Pong-v5"])
def test_a_short_run_writes_its_summary_logs_the_losses_and_anneals_the_clip(tmp_path, env_id):
    proc = run_script(
        tmp_path,
        "ppo_atari.py",
        "--env-id",
        env_id,
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--total-timesteps",
        "300",  # two batches of 128 and a remainder that is not run: the schedules span the 256 steps run
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--anneal-clip",
        "--eval-episodes",
        "0",  # evaluation is tested in test_lifecycle.py
    )
    assert proc.returncode == 0, proc.stderr
    run = only_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 256
    logged = scalars(run)
    assert {"losses/approx_kl", "losses/clipfrac", "losses/entropy", "charts/SPS", "charts/clip_coef"} <= logged.keys()
    clip = [v for _, v in logged["charts/clip_coef"]]
    assert clip == pytest.approx([0.1, 0.05])  # annealed linearly toward zero
    learning_rate = [v for _, v in logged["charts/learning_rate"]]
    assert learning_rate == pytest.approx([2.5e-4, 1.25e-4])


@pytest.mark.parametrize("script", [C, A], ids=["continuous", "atari"])
def test_async_envs_are_stepped_in_worker_processes(script):
    envs = script.make_envs(script.Args(env_id=ENV_IDS[script], num_envs=2, async_envs=True), "test")
    assert isinstance(find_wrapper(envs, gym.vector.AsyncVectorEnv), gym.vector.AsyncVectorEnv)
    envs.close()


@pytest.mark.parametrize("script", ["ppo_continuous.py", "ppo_atari.py"])
def test_async_envs_step_the_same_episodes_and_learn_the_same_numbers(tmp_path, script):
    flags = ["--env-id", ENV_IDS[script], "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512"]
    flags += ["--num-minibatches", "2", "--update-epochs", "1", "--eval-episodes", "1"]
    logged = {}
    for mode in ("--no-async-envs", "--async-envs"):
        (tmp_path / mode).mkdir()
        proc = run_script(tmp_path / mode, script, *flags, mode)
        assert proc.returncode == 0, proc.stderr
        logged[mode] = {tag: values for tag, values in scalars(only_run(tmp_path / mode)).items() if "SPS" not in tag}
    sync, parallel = logged.values()
    assert "charts/episodic_return" in sync and "eval/episodic_return" in sync
    assert parallel == sync


@pytest.mark.parametrize(
    "env_id, says",
    [
        ("HalfCheetah-v4", "is a MuJoCo task, no Atari game, which ppo_atari.py trains: use ppo_continuous.py"),
        ("CartPole-v1", "(Discrete(2) actions) is no Atari game, which ppo_atari.py trains; ppo_continuous.py trains"),
        ("Pendulum-v1", "is no Atari game, which ppo_atari.py trains; train it with ppo_continuous.py"),
        ("NoSuchGame-v4", "cannot make NoSuchGame-v4"),
    ],
)
def test_non_atari_ids_are_refused_with_one_line_that_names_what_trains_them_exit_2_and_nothing_written(
    tmp_path, env_id, says
):
    proc = run_script(tmp_path, "ppo_atari.py", "--env-id", env_id)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(shutil.which("diff") is None, reason="needs diff")
def test_the_diff_against_the_continuous_script_has_at_most_15_hunks():
    proc = subprocess.run(
        ["diff", str(ROOT / "ppo_continuous.py"), str(ROOT / "ppo_atari.py")], capture_output=True, text=True
    )
    hunks = [line for line in proc.stdout.splitlines() if line[:1].isdigit()]
    assert 0 < len(hunks) <= 15


TINY_ATARI = ("--num-envs", "2", "--num-steps", "64", "--total-timesteps", "128", "--num-minibatches", "2")


@pytest.mark.parametrize("envs", [[], ["--async-envs"]], ids=["sync", "async"])
def test_capture_video_films_training_and_the_closing_evaluation_apart(tmp_path, envs):
    proc = run_script(tmp_path, "ppo_atari.py", *TINY_ATARI, "--eval-episodes", "1", "--capture-video", *envs)
    assert proc.returncode == 0, proc.stderr
    videos = tmp_path / "videos" / only_run(tmp_path).name
    assert list(videos.glob("*.mp4")) and list((videos / "eval").glob("*.mp4"))  # neither overwrites the other


def test_eval_checkpoint_films_a_policy_trained_without_video(tmp_path):
    proc = run_script(tmp_path, "ppo_atari.py", *TINY_ATARI, "--eval-episodes", "0")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "videos").exists()
    checkpoint = str(only_run(tmp_path) / A.CHECKPOINT)
    proc = run_script(
        tmp_path, "ppo_atari.py", "--eval-checkpoint", checkpoint, "--eval-episodes", "1", "--capture-video"
    )
    assert proc.returncode == 0, proc.stderr
    assert list((tmp_path / "videos" / only_run(tmp_path).name / "eval").glob("*.mp4"))


# --- the real wrapper chain --------------------------------------------------------------------


def test_learning_sees_sign_clipped_rewards_and_life_losses_while_the_log_gets_the_whole_game():
    """Space Invaders pays 5 to 30 points an invader and has 3 lives: through make_env the agent sees
    +1 per scoring step and a termination per lost life, and the episode statistics report the raw
    score of the whole game once, when the game is over."""
    env = make_real_env("SpaceInvadersNoFrameskip-v4")
    env.reset(seed=0)
    env.action_space.seed(0)
    rewards, terminations, episodes, lives = [], 0, [], []
    for _ in range(20_000):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        rewards.append(reward)
        if "episode" in info:
            episodes.append(info["episode"])
        if terminated or truncated:
            terminations += terminated
            lives.append(env.unwrapped.ale.lives())
            if env.unwrapped.ale.game_over():
                break
            env.reset()
    assert set(rewards) <= {-1.0, 0.0, 1.0} and sum(rewards) > 0
    assert terminations == 3 and lives == [2, 1, 0]  # each life lost ended a learning episode
    (episode,) = episodes  # one record for the whole game, none per life
    assert episode["r"] >= 5 * sum(rewards)  # the raw score, at least 5 points per scoring step
    # its length in agent steps (each of 4 frames), with the few that each reset takes (no-op, FIRE, second
    # start action); not in emulator frames, as statistics recorded below the frame skip would count them
    assert len(rewards) <= episode["l"] <= len(rewards) + 3 * (terminations + 1)
    env.close()


def test_negative_rewards_reach_learning_as_minus_one():
    """Skiing pays -6 or -7 raw points every step (time is its penalty): through make_env the agent sees -1 per step,
    the reward's sign kept (not clipped to [0, 1] or made positive), while the statistics count the raw points."""
    env = make_real_env("SkiingNoFrameskip-v4")
    env.reset(seed=0)
    rewards = [env.step(A.NOOP)[1] for _ in range(10)]
    assert rewards == [-1.0] * 10
    raw = find_wrapper(env, gym.wrappers.RecordEpisodeStatistics).episode_returns
    assert raw <= 6 * sum(rewards)  # -6 or -7 raw points a step
    env.close()


def test_no_op_starts_begin_games_at_different_frames():
    starts = set()
    for seed in range(6):
        env = make_real_env()  # a new game each time: a reset before game over only continues the game
        env.reset(seed=seed)
        starts.add(env.unwrapped.ale.getEpisodeFrameNumber())
        env.close()
    assert len(starts) >= 4  # 1 to 30 no-ops, drawn per game
    # the no-ops are single frames (AtariPreprocessing takes them before it skips), then FIRE and action 2 of 4
    assert 1 + 2 * 4 <= min(starts) and max(starts) <= 30 + 2 * 4


def test_no_op_starts_draw_from_1_to_30_no_ops():
    env = make_real_env()
    preprocessing = find_wrapper(env, gym.wrappers.AtariPreprocessing)
    preprocessing.reset(seed=0)
    frames = set()
    for _ in range(300):  # its own resets alone (no FIRE), drawing on from the seeded generator: 1 in 30 each
        preprocessing.reset()
        frames.add(env.unwrapped.ale.getEpisodeFrameNumber())
    env.close()
    assert min(frames) == 1 and max(frames) == A.NOOP_MAX == 30  # the paper's and CleanRL's 30, every count drawn


def test_a_game_without_fire_gets_no_fire_reset(monkeypatch):
    env = make_real_env("FreewayNoFrameskip-v4")  # NOOP, UP, DOWN: actions 1 and 2 would move the chicken
    assert "FIRE" not in env.unwrapped.get_action_meanings() and A.FireReset not in wrappers_of(env)
    pressed, step = [], type(env.unwrapped).step
    monkeypatch.setattr(type(env.unwrapped), "step", lambda self, a: (pressed.append(int(a)), step(self, a))[1])
    env.reset(seed=0)
    env.close()
    assert pressed and set(pressed) == {A.NOOP}  # the no-op starts alone


def test_video_films_every_emulator_frame_not_one_per_agent_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = A.make_env("BreakoutNoFrameskip-v4", 0, True, "run", {})()
    camera = find_wrapper(env, gym.wrappers.RecordVideo)
    env.reset(seed=0)
    filmed = len(camera.recorded_frames)
    assert filmed > 1 + 2 * A.FRAME_SKIP  # the reset's no-ops, FIRE and action 2: each emulator frame
    for _ in range(5):
        env.step(A.NOOP)
    assert len(camera.recorded_frames) - filmed == 5 * A.FRAME_SKIP  # inside the frame skip: real-time video
    env.close()


def test_the_frame_stack_starts_filled_with_the_reset_frame():
    env = make_real_env()
    obs, _ = env.reset(seed=0)
    assert obs[0].any() and all(np.array_equal(frame, obs[-1]) for frame in obs)
    env.close()


def test_the_network_sees_pixels_scaled_to_unit_range():
    envs = gym.vector.SyncVectorEnv([A.make_env("BreakoutNoFrameskip-v4", 0, False, "test", {})])
    agent = A.Agent(envs)
    seen = []
    agent.network[0].register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]))
    obs = np.full((3, A.FRAME_STACK, A.SCREEN, A.SCREEN), 255, dtype=np.uint8)
    obs[1], obs[2] = 0, 128
    agent.get_value(torch.as_tensor(obs))
    assert seen[0].dtype == torch.float32 and seen[0][0].min() == 1.0 and seen[0][1].max() == 0.0
    assert torch.allclose(seen[0][2], torch.tensor(128 / 255))  # mid-grey is mid-range: no rounding, no floor
    envs.close()


def test_the_vector_envs_step_whole_stacks_of_uint8_frames():
    envs = A.make_envs(A.Args(num_envs=2), "test")
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8  # the last 4 frames, 84x84 gray
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    envs.close()


# --- the shared part is shared -----------------------------------------------------------------

# Everything else defined in both scripts must be identical, line for line.
MAY_DIFFER = {"check_env", "make_env", "make_envs", "Agent", "Args", "autocast_bf16"}


def defined_in(module) -> dict[str, object]:
    return {
        name: obj
        for name, obj in vars(module).items()
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__
    }


def test_every_shared_function_is_identical_in_both_scripts():
    continuous, atari = defined_in(C), defined_in(A)
    shared = continuous.keys() & atari.keys()
    assert {"compute_gae", "update", "collect_rollout", "evaluate", "main", "save_checkpoint"} <= shared
    for name in sorted(shared - MAY_DIFFER):
        assert inspect.getsource(continuous[name]) == inspect.getsource(atari[name]), name
    for name in ("ADAM_EPS", "ADV_EPS", "RECENT_EPISODES", "CHECKPOINT", "EVAL_SEED_OFFSET", "RUNNING_STATS"):
        assert getattr(C, name) == getattr(A, name), name
    for name in ("HIDDEN_GAIN", "POLICY_HEAD_GAIN", "VALUE_HEAD_GAIN"):
        assert getattr(C, name) == getattr(A, name), name


def test_every_detail_the_readme_points_to_is_in_part_one_of_both_scripts():
    """The README's details table sends a learner to Part I ("Read Part I"): each name in its "where" column is
    defined above the Part II banner, in every script that defines it (advantage moments were once in Part II)."""
    table = (ROOT / "README.md").read_text().split("| detail | where |")[1].split("\n\n")[0]
    names = {
        m.split(".")[0]
        for row in table.splitlines()[2:]
        for m in re.findall(r"`([A-Za-z_][\w.]*)`", row.split(" | ")[-1])
    }
    assert {"minibatch_moments", "minibatch_loss", "compute_gae", "ADAM_EPS"} <= names
    for script in ("ppo_continuous.py", "ppo_atari.py"):
        source = (ROOT / script).read_text()
        part_two = source.index("\n# Part II: Running it")  # the banner
        for name in names:
            found = re.search(rf"^(def|class) {name}\b|^{name} *[:=]", source, re.M)
            if found:
                assert found.start() < part_two, f"{script}: {name} is defined in Part II"


# Per "where" of the README's details table, what the detail is made of there: the table names where each one lives
DETAIL_MARKERS = {
    "make_envs": ["AutoresetMode.NEXT_STEP"],
    "Normalize.observations": ["obs_rms", "OBS_CLIP"],  # normalized by the running statistics, then clipped
    "Normalize.step": [".clip(self.env.action_space.low", "REWARD_CLIP"],  # the action clipped; the reward clip
    "ScaleReward.step": ["return_rms", "self.returns[self.done] = 0.0"],  # restarted after every done
    "layer_init": ["orthogonal_", "zeros_"],
    "Agent": ["POLICY_HEAD_GAIN", "VALUE_HEAD_GAIN"],
    "gaussian_log_prob": [".sum(-1)"],
    "compute_gae": ["no_future", "~dones"],  # terminations and truncations kept apart
    "update": ["buf.real", "torch.randperm", "clip_grad_norm_"],
    "minibatch_slices": ["slice(lo, hi)"],  # contiguous slices of the epoch's one shuffled gather
    "minibatch_moments": [".std()"],
    "minibatch_loss": ["ADV_EPS", "args.ent_coef", "args.target_kl"],
    "policy_loss": ["torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)", "kl_beta * kl"],
    "value_loss": ["torch.clamp(new_values - old_values"],
    "adapt_kl_beta": ["KL_BAND", "KL_BETA_FACTOR"],
    "kl_k3": ["expm1"],
    "linear_schedule": ["1.0 - step / total_steps"],
    "main": ["eps=ADAM_EPS", "linear_schedule(", "adapt_kl_beta("],
}


def test_each_detail_is_made_where_the_readme_s_table_says():
    """The table's "where" column holds the detail itself, not only a name defined in Part I: each named function
    has the lines the detail is made of (and every function the table names has its markers here)."""
    table = (ROOT / "README.md").read_text().split("| detail | where |")[1].split("\n\n")[0]
    named = {m for row in table.splitlines()[2:] for m in re.findall(r"`([A-Za-z_][\w.]*)`", row.split(" | ")[-1])}
    functions = {name for name in named if callable(getattr(C, name.split(".")[0], None))}
    assert functions <= DETAIL_MARKERS.keys() | {"Normalize", "ScaleReward", "Rollout.real"}, functions
    for module in (C, A):
        for name, markers in DETAIL_MARKERS.items():
            owner, _, attribute = name.partition(".")
            if hasattr(module, owner):
                source = inspect.getsource(
                    getattr(getattr(module, owner), attribute) if attribute else getattr(module, owner)
                )
                missing = [marker for marker in markers if marker not in source]
                assert not missing, f"{module.__name__}.{name} lacks {missing}"


def test_both_scripts_take_the_same_flags():
    continuous = {f.name: f.type for f in dataclasses.fields(C.Args)}
    atari = {f.name: f.type for f in dataclasses.fields(A.Args)}
    assert continuous == atari
    assert {"batch_size", "minibatch_size", "num_iterations"} <= {
        name for name, value in vars(A.Args).items() if isinstance(value, property)
    }


@pytest.mark.parametrize("script", ["ppo_continuous.py", "ppo_atari.py", "ppo_gridworld.py"])
def test_help_documents_every_flag_with_its_docstring(script):
    """The README: `--help` documents every flag. Each Args field has a docstring, and --help shows it whole."""
    (args_class,) = [
        node for node in ast.parse((ROOT / script).read_text()).body if getattr(node, "name", "") == "Args"
    ]
    fields = [node for node in args_class.body if isinstance(node, ast.AnnAssign)]
    docs = {}
    for node, after in zip(args_class.body, args_class.body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split())
    assert len(fields) >= 20 and list(docs) == [node.target.id for node in fields]  # none undocumented
    env = os.environ | {"COLUMNS": "160"}
    command = [sys.executable, str(ROOT / script), "--help"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=HANG_TIMEOUT, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = " ".join(proc.stdout.replace("│", " ").split())  # the panel's borders and wrapping dropped
    for name, doc in docs.items():
        assert f"--{name.replace('_', '-')}" in shown and doc in shown, (name, doc)


# A command line of CleanRL's ppo_continuous_action.py and ppo_atari.py flags (every setting both have, none at its
# default), and the value each must land as in Args
CLEANRL_FLAGS = {
    "--exp-name": ("mine", "mine"), "--seed": ("7", 7), "--no-torch-deterministic": (None, False),
    "--no-cuda": (None, False), "--track": (None, True), "--wandb-project-name": ("p", "p"),
    "--wandb-entity": ("team", "team"), "--capture-video": (None, True), "--env-id": ("Hopper-v4", "Hopper-v4"),
    "--total-timesteps": ("5000", 5000), "--learning-rate": ("0.001", 0.001), "--num-envs": ("2", 2),
    "--num-steps": ("64", 64), "--no-anneal-lr": (None, False), "--gamma": ("0.9", 0.9), "--gae-lambda": ("0.8", 0.8),
    "--num-minibatches": ("8", 8), "--update-epochs": ("3", 3), "--no-norm-adv": (None, False),
    "--clip-coef": ("0.3", 0.3), "--clip-vloss": (None, True), "--ent-coef": ("0.02", 0.02), "--vf-coef": ("0.4", 0.4),
    "--max-grad-norm": ("0.7", 0.7), "--target-kl": ("0.05", 0.05),
}  # fmt: skip


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_cleanrl_s_flags_work_unchanged_and_save_model_is_refused_in_one_line(module, capsys):
    """The README: CleanRL's flags work unchanged where both have the setting; no --save-model (runs always
    checkpoint) and no Hub upload: those are refused, exit 2, as any flag the script does not have."""
    argv = [word for flag, (value, _) in CLEANRL_FLAGS.items() for word in (flag, value) if word is not None]
    args = tyro.cli(module.Args, args=argv)
    for flag, (_, expected) in CLEANRL_FLAGS.items():
        name = flag.removeprefix("--").removeprefix("no-").replace("-", "_")
        assert getattr(args, name) == expected, flag
    for flag in ("--save-model", "--upload-model", "--batch-size"):  # batch sizes are derived, never flags
        with pytest.raises(SystemExit) as stop:
            tyro.cli(module.Args, args=[flag])
        assert stop.value.code == 2, flag
    capsys.readouterr()


def test_the_policy_scores_actions_and_entropy_as_a_categorical_distribution():
    envs = gym.vector.SyncVectorEnv([A.make_env("BreakoutNoFrameskip-v4", 0, False, "test", {})])
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.mul_(100)  # far from uniform, so that every term matters
    obs = torch.randint(0, 256, (16, A.FRAME_STACK, A.SCREEN, A.SCREEN), dtype=torch.uint8)
    actions = torch.randint(0, envs.single_action_space.n, (16,))
    with torch.no_grad():
        _, logprob, entropy, value = agent.get_action_and_value(obs, actions)
        dist = torch.distributions.Categorical(logits=agent.actor(agent.features(obs)))
        assert torch.allclose(logprob, dist.log_prob(actions), atol=1e-5)
        assert torch.allclose(entropy, dist.entropy(), atol=1e-5)
        assert torch.allclose(value, agent.get_value(obs), atol=1e-6)
        agent.actor.bias[0] = 200.0  # a near-certain policy: the other actions' probabilities underflow to 0
        _, logprob, entropy, _ = agent.get_action_and_value(obs, actions)
        assert torch.isfinite(logprob).all() and torch.isfinite(entropy).all()  # log_softmax, not log(softmax)
    envs.close()


def test_the_network_is_the_nature_cnn_orthogonal_with_gains_sqrt2_001_and_1_and_zero_biases():
    envs = gym.vector.SyncVectorEnv([A.make_env("BreakoutNoFrameskip-v4", 0, False, "test", {})])
    agent = A.Agent(envs)
    kinds = [type(layer).__name__ for layer in agent.network]
    assert kinds == ["Conv2d", "ReLU", "Conv2d", "ReLU", "Conv2d", "ReLU", "Flatten", "Linear", "ReLU"]
    convs = [layer for layer in agent.network if isinstance(layer, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    hidden = [(agent.network[i], np.sqrt(2)) for i in (0, 2, 4, 7)]  # the three convolutions and the dense layer
    for layer, gain in (*hidden, (agent.actor, 0.01), (agent.critic, 1.0)):
        w = layer.weight.flatten(1)
        rows = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        assert torch.allclose(rows, gain**2 * torch.eye(rows.shape[0]), atol=1e-4), layer
        assert layer.bias.abs().sum() == 0
    assert agent.network[7].out_features == A.HIDDEN == 512
    sizes, x = [], torch.zeros(1, A.FRAME_STACK, A.SCREEN, A.SCREEN)
    for layer in agent.network[:6]:  # no padding: 84 -> 20 -> 9 -> 7, the 3136 features of the Nature CNN
        x = layer(x)
        sizes += [tuple(x.shape[2:])] if isinstance(layer, torch.nn.Conv2d) else []
    assert sizes == [(20, 20), (9, 9), (7, 7)] and agent.network[7].in_features == 64 * 7 * 7
    envs.close()


@pytest.mark.parametrize("env_id", ["BreakoutNoFrameskip-v4", "ALE/Pong-v5"])
def test_a_game_is_cut_at_108k_frames_as_in_the_ppo_paper_and_cleanrl(env_id):
    env = A.make_env(env_id, 0, False, "test", {})()
    env.reset(seed=0)
    assert env.unwrapped.ale.getInt("max_num_frames_per_episode") == 108_000  # 30 minutes of play at 60 Hz
    # the ALE's frame counter is the only limit: a TimeLimit beneath the frame skipping would count raw frames
    assert gym.wrappers.TimeLimit not in wrappers_of(env)
    env.close()


@pytest.mark.parametrize("env_id, sticky", [("ALE/Pong-v5", 0.25), ("PongNoFrameskip-v4", 0.0)])
def test_v5_ids_keep_their_sticky_actions_and_v4_ids_have_none(env_id, sticky):
    """docs/choices.md: an ALE/*-v5 game repeats the previous action with probability 0.25 (Machado et al.); the
    script's own settings must not turn that off, and a NoFrameskip-v4 game has none."""
    env = A.make_env(env_id, 0, False, "test", {})()
    env.reset(seed=0)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(sticky)
    env.close()


class LosesALifeAtOnce(FakeGame):
    """Every game's first step loses a life."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.t == 1:
            self.ale.lives_left -= 1
        return obs, reward, self.ale.lives_left == 0, truncated, info


def test_a_life_lost_on_the_first_step_of_a_game_ends_the_learning_episode():
    game = LosesALifeAtOnce()
    env = A.EpisodicLife(game)
    for _ in range(2):  # the first game, and a new one after game over
        env.reset(seed=0)
        _, _, terminated, _, _ = env.step(2)
        assert terminated and game.ale.lives() == 2
        game.ale.lives_left = 0
        env.step(2)  # game over: the next reset starts a new game


def test_breakout_skips_four_max_pooled_frames_and_serves_with_fire_after_every_life_lost(monkeypatch):
    env = A.make_env("BreakoutNoFrameskip-v4", 0, False, "test", {})()
    ale_env, raw_actions = type(env.unwrapped), []
    real_step = ale_env.step

    def record(self, action):
        raw_actions.append(int(action))
        return real_step(self, action)

    monkeypatch.setattr(ale_env, "step", record)
    env.reset(seed=0)
    raw_actions.clear()
    env.step(0)
    assert raw_actions == [0, 0, 0, 0]  # the ALE steps single frames; the wrapper skips 4 and max-pools
    for _ in range(2000):  # no-ops until the ball is lost
        _, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            break
    assert terminated and env.unwrapped.ale.lives() == 4  # a life lost, the game goes on
    raw_actions.clear()
    env.reset()
    assert raw_actions == [0] * 4 + [1] * 4 + [2] * 4  # one no-op step, then FIRE and action 2 serve again
    env.close()


# --- the rollout's policy: sampled from the categorical, scored and valued by it ---------------


class RandomFrames(gym.vector.VectorEnv):
    """num_envs fake Atari games in lockstep: every step returns fresh random (4, 84, 84) uint8 stacks,
    no reward and no episode end. Records the actions it is stepped with."""

    def __init__(self, num_envs: int, num_actions: int = 4, seed: int = 0):
        self.num_envs = num_envs
        self.single_observation_space = gym.spaces.Box(0, 255, (A.FRAME_STACK, A.SCREEN, A.SCREEN), np.uint8)
        self.single_action_space = gym.spaces.Discrete(num_actions)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.rng, self.stepped = np.random.default_rng(seed), []

    def frames(self) -> np.ndarray:
        return self.rng.integers(0, 256, (self.num_envs, *self.single_observation_space.shape), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        return self.frames(), {}

    def step(self, actions):
        self.stepped.append(np.array(actions))
        zeros = np.zeros(self.num_envs, dtype=bool)
        return self.frames(), np.zeros(self.num_envs, np.float32), zeros, zeros.copy(), {}


def test_the_rollout_stores_frames_as_the_uint8_the_envs_give():
    """A rollout keeps each frame in its space's dtype, one byte a pixel (the network scales it to [0, 1]): float32
    storage would take 4x the memory, in the rollout and in each epoch's shuffled copy (8 x 128 stacks: 116 MB)."""
    envs = RandomFrames(2)
    buf = A.Rollout.allocate(envs, 3, torch.device("cpu"))
    assert buf.obs.dtype == torch.uint8 and buf.obs.shape == (3, 2, A.FRAME_STACK, A.SCREEN, A.SCREEN)
    obs, _ = envs.reset()
    state = A.EnvState(torch.as_tensor(obs), torch.zeros(envs.num_envs, dtype=torch.bool))
    A.collect_rollout(envs, A.Agent(envs), buf, state, torch.device("cpu"))
    assert buf.obs.dtype == torch.uint8 and torch.equal(buf.obs[0], torch.as_tensor(obs))


PROBS = torch.tensor([0.05, 0.15, 0.3, 0.5])  # the likeliest action only half the time, none uniform's 0.25


def agent_with_fixed_probs(envs) -> A.Agent:
    """An agent whose policy is PROBS on every observation (a zero actor weight, a bias of log PROBS
    shifted by 3: logits that are not log-probabilities themselves), and whose critic is far from zero."""
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.zero_()
        agent.actor.bias.copy_(PROBS.log() + 3.0)
        agent.critic.weight.mul_(10)
        agent.critic.bias.fill_(5.0)
    return agent


def assert_frequencies_are_the_policys(actions: torch.Tensor) -> None:
    """Each action's share of the samples is PROBS's within 6 standard errors (never fails by chance)."""
    n = actions.numel()
    freq = torch.bincount(actions.flatten(), minlength=len(PROBS)).double() / n
    tolerance = 6 * (PROBS.double() * (1 - PROBS.double()) / n).sqrt()
    assert ((freq - PROBS.double()).abs() < tolerance).all(), (freq.tolist(), PROBS.tolist())


def assert_scored_and_valued_by_the_policy(agent: A.Agent, obs, actions, logprobs, values) -> None:
    """Each log-prob is the policy's log-softmax at its action, each value the critic's of its observation."""
    with torch.inference_mode():
        hidden = agent.features(obs)
        expected = agent.actor(hidden).log_softmax(-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(logprobs, expected, atol=1e-5)
        assert torch.allclose(values, agent.critic(hidden).squeeze(-1), atol=1e-5)
        assert torch.allclose(values, agent.get_value(obs), atol=1e-5)


def test_the_rollout_samples_each_action_at_its_policy_probability_and_stores_its_log_prob_and_value():
    """What collect_rollout stores: actions drawn from the categorical policy (not its argmax, not uniform),
    the log-probability of each action under that policy, and the critic's value of its observation."""
    envs = RandomFrames(500)
    agent = agent_with_fixed_probs(envs)
    buf = A.Rollout.allocate(envs, 4, torch.device("cpu"))
    obs, _ = envs.reset()
    state = A.EnvState(torch.as_tensor(obs), torch.zeros(envs.num_envs, dtype=torch.bool))
    torch.manual_seed(1)
    A.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    assert_frequencies_are_the_policys(buf.actions)
    assert np.array_equal(np.stack(envs.stepped), buf.actions.numpy())  # the env was stepped with them
    assert torch.allclose(buf.logprobs, PROBS.log()[buf.actions], atol=1e-5)
    some = slice(None, None, 25)  # the critic's value of each stored observation (a spread of 80 of them)
    assert_scored_and_valued_by_the_policy(
        agent, buf.obs.flatten(0, 1)[some], buf.actions.flatten()[some], buf.logprobs.flatten()[some],
        buf.values.flatten()[some],
    )  # fmt: skip


def test_the_rollout_scores_each_action_by_the_policy_of_the_observation_it_was_taken_on():
    """With a policy that depends on the frames, the stored log-prob and value are those of the stored
    observation (the one the action was taken on) and the stored action."""
    envs = RandomFrames(32, num_actions=6)
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.mul_(300)  # confident but not certain, and different on each observation
        agent.critic.bias.fill_(2.0)
    buf = A.Rollout.allocate(envs, 3, torch.device("cpu"))
    obs, _ = envs.reset()
    state = A.EnvState(torch.as_tensor(obs), torch.zeros(envs.num_envs, dtype=torch.bool))
    A.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    assert buf.actions.dtype == torch.int64 and buf.actions.unique().numel() > 1
    obs, actions = buf.obs.flatten(0, 1), buf.actions.flatten()
    assert_scored_and_valued_by_the_policy(agent, obs, actions, buf.logprobs.flatten(), buf.values.flatten())
    with torch.inference_mode():
        greedy = agent.actor(agent.features(obs)).argmax(-1)
    assert (actions != greedy).any()  # samples, not the likeliest action


def test_get_action_and_value_samples_at_the_policy_probabilities_scores_and_values_them():
    """The update's and evaluation's call, asked for no particular action: a sample of the categorical policy,
    its log-probability, the policy's entropy and the critic's value."""
    envs = RandomFrames(1)
    agent = agent_with_fixed_probs(envs)
    obs = torch.as_tensor(RandomFrames(1500).frames())
    torch.manual_seed(1)
    with torch.inference_mode():
        actions, logprobs, entropy, values = agent.get_action_and_value(obs)
    assert_frequencies_are_the_policys(actions)
    assert torch.allclose(logprobs, PROBS.log()[actions], atol=1e-5)
    assert torch.allclose(entropy, -(PROBS * PROBS.log()).sum().expand(len(obs)), atol=1e-5)
    assert_scored_and_valued_by_the_policy(agent, obs[:100], actions[:100], logprobs[:100], values[:100])


class RandomGames(RandomFrames):
    """RandomFrames whose games all end every GAME_STEPS steps, scored by the step they ended on; it keeps
    every observation it shows, so each action can be matched with the frames it was taken on."""

    GAME_STEPS = 5

    def reset(self, *, seed=None, options=None):
        self.shown = [self.frames()]
        return self.shown[-1], {}

    def step(self, actions):
        obs, rewards, terminations, truncations, _ = super().step(actions)
        self.shown.append(obs)
        ended = np.full(self.num_envs, len(self.stepped) % self.GAME_STEPS == 0)
        info = {"episode": {"r": np.full(self.num_envs, float(len(self.stepped)))}, "_episode": ended}
        return obs, rewards, ended, truncations, info if ended.any() else {}


class LivesEndEveryFive(RandomFrames):
    """RandomFrames whose every env terminates (a life lost) on its 5th, 10th, ... step."""

    def step(self, actions):
        obs, rewards, terminations, truncations, info = super().step(actions)
        return obs, rewards, terminations | (len(self.stepped) % 5 == 0), truncations, info


def test_the_step_after_a_game_or_life_ends_is_an_autoreset_step_the_rollout_masks():
    """A termination (a life lost, a game over) is followed by an autoreset step as a time limit is: collect_rollout's
    mask drops that step, and a termination on the rollout's last step makes the next rollout start with one."""
    envs = LivesEndEveryFive(2)
    torch.manual_seed(0)
    agent = A.Agent(envs)
    buf = A.Rollout.allocate(envs, 10, torch.device("cpu"))
    obs, _ = envs.reset()
    state = A.EnvState(torch.as_tensor(obs), torch.zeros(envs.num_envs, dtype=torch.bool))
    state, _ = A.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    ended = [t in (4, 9) for t in range(10)]
    assert buf.terminations.tolist() == [[e, e] for e in ended] and not buf.truncations.any()
    assert buf.real.tolist() == [[t != 5] * 2 for t in range(10)]  # the step after the first end
    assert state.done.tolist() == [True, True]  # the second ended on the last step
    A.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    assert buf.real.tolist() == [[t not in (0, 5)] * 2 for t in range(10)]  # its first step resets
    envs.close()


class Frames(gym.Env):
    """A fake Atari game of blank (4, 84, 84) frames whose every game lasts `length` steps at 1 raw point a step."""

    observation_space = gym.spaces.Box(0, 255, (A.FRAME_STACK, A.SCREEN, A.SCREEN), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, length: int):
        self.length = length

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.zeros(self.observation_space.shape, np.uint8), 1.0, self.t == self.length, False, {}


def test_the_rollout_returns_only_the_episodes_that_ended_each_with_the_step_it_ended_on():
    """Atari's envs end their games at different steps: the vector env's info then holds a slot for every env, zeros
    where none ended. collect_rollout returns the ended ones alone, as (raw return, length, rollout step)."""
    thunks = [
        lambda: gym.wrappers.RecordEpisodeStatistics(Frames(2)),
        lambda: gym.wrappers.RecordEpisodeStatistics(Frames(3)),
    ]
    envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    torch.manual_seed(0)
    agent = A.Agent(envs)
    buf = A.Rollout.allocate(envs, 8, torch.device("cpu"))
    obs, _ = envs.reset(seed=0)
    state = A.EnvState(torch.as_tensor(obs), torch.zeros(envs.num_envs, dtype=torch.bool))
    _, episodes = A.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    # env 0 ends on steps 1, 4 and 7 (each end is followed by its autoreset step), env 1 on steps 2 and 6
    assert episodes == [(2.0, 2, 1), (3.0, 3, 2), (2.0, 2, 4), (3.0, 3, 6), (2.0, 2, 7)]
    envs.close()


@pytest.mark.parametrize("greedy", [True, False])
def test_evaluation_takes_the_likeliest_action_when_greedy_and_samples_otherwise(greedy):
    """evaluate (the closing evaluation's and --eval-checkpoint's call) with greedy plays the argmax of the
    policy on every frame it is shown; without, it samples (--eval-stochastic); it returns the games' scores."""
    envs = RandomGames(16, num_actions=6)
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.mul_(300)  # confident but not certain, and different on each observation
    returns = A.evaluate(envs, agent, 40, greedy, 123, torch.device("cpu"))
    assert returns == [5.0] * 16 + [10.0] * 16 + [15.0] * 8  # whole games, in the order they ended
    with torch.inference_mode():
        obs = torch.as_tensor(np.stack(envs.shown[:-1]))  # (steps, envs, 4, 84, 84): what each action saw
        likeliest = agent.actor(agent.features(obs.flatten(0, 1))).argmax(-1).view(obs.shape[:2])
    played = torch.as_tensor(np.stack(envs.stepped))
    assert played.unique().numel() > 1  # the frames decide the action
    assert (played == likeliest).all() if greedy else (played != likeliest).any()


def test_the_evaluation_plays_whole_games_wrapped_as_training_s():
    """docs/runs.md: the evaluation's env has training's wrappers (lives end learning episodes, FIRE at each
    reset), so a game goes on after a life is lost, and its statistics score the whole game."""
    train, evaluation = A.make_envs(A.Args(num_envs=1), "test"), A.make_eval_envs(A.Args(), "test", {})
    assert wrappers_of(evaluation.envs[0]) == wrappers_of(train.envs[0])
    assert {A.EpisodicLife, A.FireReset, gym.wrappers.RecordEpisodeStatistics} <= set(wrappers_of(evaluation.envs[0]))
    train.close(), evaluation.close()


# --- what ppo_atari.py may set apart from ppo_continuous.py: its defaults, sizes and video ------


def test_the_defaults_are_the_atari_settings_of_the_ppo_paper_and_cleanrl():
    """Args may differ from ppo_continuous.py's, so its Atari defaults are pinned here: 8 actors x 128 steps,
    4 minibatches, 4 epochs, clip 0.1, entropy 0.01, lr 2.5e-4 annealed, gamma 0.99, lambda 0.95, 10M steps."""
    args = A.Args()
    expected = dict(
        env_id="BreakoutNoFrameskip-v4", total_timesteps=10_000_000, learning_rate=2.5e-4, num_envs=8, num_steps=128,
        num_minibatches=4, update_epochs=4, clip_coef=0.1, ent_coef=0.01, anneal_lr=True, gamma=0.99,
        gae_lambda=0.95, norm_adv=True, objective="clip", clip_vloss=False, vf_coef=0.5, max_grad_norm=0.5,
        anneal_clip=False, target_kl=None, bootstrap_truncation=True, seed=1, eval_stochastic=False,
        kl_beta=1.0, kl_target=0.01,  # the paper's adaptive penalty: beta starts at 1, d_targ 0.01
    )  # fmt: skip
    assert {name: getattr(args, name) for name in expected} == expected
    assert (args.batch_size, args.minibatch_size, args.num_iterations) == (1024, 256, 10_000_000 // 1024)
    atari_settings = {"exp_name", "env_id", "total_timesteps", "learning_rate", "num_envs", "num_steps"}
    atari_settings |= {"num_minibatches", "update_epochs", "clip_coef", "ent_coef"}  # every other default: the same
    same = [f.name for f in dataclasses.fields(A.Args) if f.name not in atari_settings]
    assert {name: getattr(args, name) for name in same} == {name: getattr(C.Args(), name) for name in same}


@pytest.mark.parametrize("module", [A, C], ids=["atari", "continuous"])  # each script's Args has its own properties
def test_under_torchrun_the_batch_counts_every_process_s_envs(monkeypatch, module):
    args = module.Args(num_envs=2, num_steps=8, num_minibatches=4, total_timesteps=100)
    assert (args.world_size, args.batch_size, args.minibatch_size, args.num_iterations) == (1, 16, 4, 6)
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert (args.world_size, args.batch_size, args.minibatch_size, args.num_iterations) == (3, 48, 12, 2)


def wrappers_of(env: gym.Env) -> list[type]:
    kinds = []
    while isinstance(env, gym.Wrapper):
        kinds.append(type(env))
        env = env.env
    return kinds


def test_capture_video_records_the_first_of_the_vector_envs_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for capture_video, expected in ((True, [True, False, False]), (False, [False, False, False])):
        envs = A.make_envs(A.Args(num_envs=3, capture_video=capture_video), "run")
        assert [gym.wrappers.RecordVideo in wrappers_of(env) for env in envs.envs] == expected
        rendering = ["rgb_array" if recorded else None for recorded in expected]  # rendering costs: only when recorded
        assert [env.render_mode for env in envs.envs] == rendering
        envs.close()
    monkeypatch.setattr(A, "RANK", 1)  # under torchrun, a process other than rank 0 films nothing (one folder)
    envs = A.make_envs(A.Args(num_envs=2, capture_video=True), "run")
    assert not any(gym.wrappers.RecordVideo in wrappers_of(env) for env in envs.envs)
    envs.close()


def test_omp_num_threads_of_zero_is_not_a_count(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "0")
    monkeypatch.setattr(A.os, "sched_getaffinity", lambda pid: {0, 5}, raising=False)
    assert A.usable_cores() == 2  # torch.set_num_threads(0) would fail


def test_the_same_seed_starts_the_same_games_through_every_wrapper():
    """The reset's seed reaches the game and the no-op draw through every wrapper: the same seed gives the
    same start frames and observations, so that a run repeats."""
    starts = []
    for _ in range(2):
        envs = A.make_envs(A.Args(num_envs=2), "test")
        obs, _ = envs.reset(seed=7)
        starts.append(([env.unwrapped.ale.getEpisodeFrameNumber() for env in envs.envs], obs.tobytes()))
        envs.close()
    assert starts[0] == starts[1]  # unseeded, 2 of 31 no-op counts would match 1 time in 961


@pytest.mark.parametrize("vf_coef, ent_coef", [(1.0, 0.0), (0.0, 0.5)], ids=["value-loss", "entropy-bonus"])
def test_the_value_loss_trains_the_shared_cnn_and_the_entropy_bonus_trains_the_policy(vf_coef, ent_coef):
    """Zero advantages leave the policy loss no gradient: what moves the agent is the value loss alone (through the
    critic into the CNN it shares with the policy), or the entropy bonus alone (raising the policy's entropy)."""
    envs = RandomFrames(8, num_actions=6)
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.mul_(300)  # far from uniform, where the entropy has room to rise
    buf = A.Rollout.allocate(envs, 8, torch.device("cpu"))
    obs, _ = envs.reset()
    state = A.EnvState(torch.as_tensor(obs), torch.zeros(envs.num_envs, dtype=torch.bool))
    A.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    with torch.no_grad():
        entropy_before = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten())[2].mean()
    args = A.Args(num_envs=8, num_steps=8, num_minibatches=1, update_epochs=1, vf_coef=vf_coef, ent_coef=ent_coef)
    optimizer = torch.optim.SGD(agent.parameters(), lr=0.05)  # a small step along the gradient: first order holds
    zeros = torch.zeros(8, 8)
    A.update(agent, optimizer, buf, zeros, buf.values + 1.0, args, 1.0, args.clip_coef)
    moved = {k for k, v in agent.state_dict().items() if not torch.equal(v, before[k])}
    with torch.no_grad():
        entropy_after = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten())[2].mean()
    if vf_coef:
        assert "network.0.weight" in moved and "critic.weight" in moved and "actor.weight" not in moved
    else:
        assert "network.0.weight" in moved and "actor.weight" in moved and "critic.weight" not in moved
        assert entropy_after > entropy_before


@pytest.mark.parametrize("bad", ["reset", "step"])
def test_check_env_refuses_an_atari_env_whose_reset_or_step_observation_is_not_the_spaces_shape(monkeypatch, bad):
    real = A.make_env

    def make_env(*args):  # the game as training makes it, one of its two calls giving a frame stack too few
        made = real(*args)()
        call = getattr(made, bad)
        setattr(made, bad, lambda *a, **k: (lambda out: (out[0][:-1], *out[1:]))(call(*a, **k)))
        return lambda: made

    assert A.check_env(A.Args()) is None
    monkeypatch.setattr(A, "make_env", make_env)
    says = A.check_env(A.Args())
    assert says.startswith("BreakoutNoFrameskip-v4 failed when made, reset and stepped once") and "shape" in says


# --- The reward: its sign, not a clip -------------------------------------------------------------------------------


def test_a_fractional_reward_reaches_learning_as_its_sign_not_clipped_to_plus_minus_one():
    """The reward's sign, not np.clip(r, -1, 1): the two agree on the ALE's whole-point scores, not on the fractional
    rewards of an Atari-like env given as module:EnvId (0.3 is learned as +1, as CleanRL's ClipRewardEnv does)."""
    env = make_real_env()
    frame = env.reset(seed=0)[0][-1]
    below = find_wrapper(env, gym.wrappers.TransformReward).env  # what the sign wrapper reads its reward from
    seen = []
    for raw in (0.3, -0.01, 2.5, -7.0, 0.0):
        below.step = lambda action, raw=raw: (frame, raw, False, False, {})
        seen.append(env.step(A.NOOP)[1])
    assert seen == [1.0, -1.0, 1.0, -1.0, 0.0]
    env.close()
