"""ppo_continuous.py's main, run in-process: what each flag and each wire (environment chain ->
rollout -> GAE -> update -> logs) does, by its effect. Spies record what the real functions were
given; nothing is stubbed out."""

import copy
import dataclasses
import json
import math
import random
import sys
import time
import types

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import ResetSeeds, VectorRecorder, find_wrapper, only_run, record_reset_seeds, scalars, spy

import ppo_atari as A
import ppo_continuous as C

# Pendulum truncates every episode at 200 steps: with 200-step rollouts the first rollout ends on a
# time limit, and the next one starts with an autoreset step.
PENDULUM = dict(
    env_id="Pendulum-v1",
    num_envs=2,
    num_steps=200,
    num_minibatches=4,
    update_epochs=2,
    total_timesteps=1200,
    eval_episodes=0,
)


def run_main(tmp_path, monkeypatch, module=C, **overrides):
    monkeypatch.chdir(tmp_path)
    args = module.Args(**(PENDULUM | overrides))
    return module.main(args), args


class Wire:
    """Spies on one run's rollout, GAE and update, keeping copies of what passed between them."""

    def __init__(self, monkeypatch):
        self.rollouts, self.gae, self.updates, self.saves = [], [], [], []

        def after_rollout(result, envs, agent, buf, state, device):
            new_state, episodes = result
            with torch.no_grad():
                tail_value = agent.get_value(new_state.obs)
            copy = {k: v.clone() for k, v in dataclasses.asdict(buf).items()}
            self.rollouts.append({"buf": copy, "tail_value": tail_value, "start_done": state.done.clone()})
            self.rollouts[-1]["episodes"] = episodes

        def before_update(agent, optimizer, buf, advantages, returns, args, kl_beta, clip_coef):
            self.updates.append(
                {
                    "advantages": advantages.clone(),
                    "returns": returns.clone(),
                    "args": args,
                    "kl_beta": kl_beta,
                    "clip_coef": clip_coef,
                    "lr": optimizer.param_groups[0]["lr"],
                    "adam_eps": optimizer.defaults["eps"],
                    "params": [p.detach().clone() for p in agent.parameters()],
                }
            )

        def after_save(result, path, agent, optimizer, envs, args, progress):
            self.saves.append(dict(progress))

        spy(monkeypatch, C, "collect_rollout", after=after_rollout)
        self.gae = spy(monkeypatch, C, "compute_gae")
        spy(monkeypatch, C, "update", before=before_update)
        spy(monkeypatch, C, "save_checkpoint", after=after_save)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"gamma": 0.8, "gae_lambda": 0.5}, {"bootstrap_truncation": False}],
    ids=["defaults", "gamma-lambda", "no-bootstrap-truncation"],
)
def test_gae_gets_each_rollout_and_the_runs_settings_and_the_update_gets_gae_and_the_autoreset_mask(
    tmp_path, monkeypatch, overrides
):
    wire = Wire(monkeypatch)
    gathered = spy(monkeypatch, C, "gather_iteration")
    _, args = run_main(tmp_path, monkeypatch, **overrides)
    assert len(wire.rollouts) == len(wire.updates) == args.num_iterations == 3
    # the metrics weigh each process by its real transitions (torchrun's ranks drop different numbers)
    assert [call[0][1] for call in gathered] == [int(r["buf"]["real"].sum()) for r in wire.rollouts] == [400, 398, 398]
    for i, (rollout, update) in enumerate(zip(wire.rollouts, wire.updates)):
        buf = rollout["buf"]
        # the rollout's own tensors, the critic's value of the observation after its last step
        # (the tail bootstrap), and the run's gamma, lambda and truncation handling reach GAE ...
        expected = C.compute_gae(
            buf["rewards"],
            buf["values"],
            rollout["tail_value"],
            buf["terminations"],
            buf["truncations"],
            args.gamma,
            args.gae_lambda,
            args.bootstrap_truncation,
        )
        # ... and what GAE gives reaches the update, advantages and returns in their places
        assert torch.allclose(update["advantages"], expected[0], atol=1e-6)
        assert torch.allclose(update["returns"], expected[1], atol=1e-6)
        assert update["args"] == args
        # the step after a done is an autoreset step, also across the rollout boundary
        dones = buf["terminations"] | buf["truncations"]
        before = wire.rollouts[i - 1]["buf"] if i else None
        previous_done = before["terminations"][-1] | before["truncations"][-1] if i else torch.zeros(2, dtype=bool)
        assert torch.equal(rollout["start_done"], previous_done)
        assert torch.equal(buf["real"], ~torch.cat([previous_done[None], dones[:-1]]))
    # the first rollout ends on Pendulum's time limit, so the second starts with an autoreset step
    assert wire.rollouts[0]["buf"]["truncations"][-1].all() and not wire.rollouts[1]["buf"]["real"][0].any()


def test_the_truncated_tail_bootstraps_unless_told_not_to(tmp_path, monkeypatch):
    """The effect of --bootstrap-truncation on what the update sees at the time limit."""
    advantages = {}
    for flag in (True, False):
        folder = tmp_path / str(flag)
        folder.mkdir()
        wire = Wire(monkeypatch)
        run_main(folder, monkeypatch, bootstrap_truncation=flag, total_timesteps=400)
        buf, tail = wire.rollouts[0]["buf"], wire.rollouts[0]["tail_value"]
        delta_cut = buf["rewards"][-1] - buf["values"][-1]  # the time limit treated as the end
        advantages[flag] = (wire.updates[0]["advantages"][-1], delta_cut, tail)
    adv, delta_cut, tail = advantages[True]
    assert torch.allclose(adv, delta_cut + 0.99 * tail, atol=1e-5)
    adv, delta_cut, _ = advantages[False]
    assert torch.allclose(adv, delta_cut, atol=1e-6)


def test_annealed_rate_and_clip_reach_the_optimizer_the_update_and_the_log(tmp_path, monkeypatch):
    wire = Wire(monkeypatch)
    # 1300 steps run 3 iterations of 400: the schedule falls over the 1200 that run, not over 1300
    kwargs = dict(anneal_clip=True, learning_rate=1e-3, clip_coef=0.3, total_timesteps=1300)
    _, args = run_main(tmp_path, monkeypatch, **kwargs)
    n = args.num_iterations
    assert n == 3
    assert [u["lr"] for u in wire.updates] == pytest.approx([1e-3 * (1 - i / n) for i in range(n)])
    assert [u["clip_coef"] for u in wire.updates] == pytest.approx([0.3 * (1 - i / n) for i in range(n)])
    assert all(u["adam_eps"] == C.ADAM_EPS for u in wire.updates)
    logged = scalars(only_run(tmp_path))
    assert [v for _, v in logged["charts/learning_rate"]] == pytest.approx([u["lr"] for u in wire.updates])
    assert [v for _, v in logged["charts/clip_coef"]] == pytest.approx([u["clip_coef"] for u in wire.updates])


def test_no_anneal_lr_keeps_the_rate_and_clip_stays_fixed_by_default(tmp_path, monkeypatch):
    wire = Wire(monkeypatch)
    run_main(tmp_path, monkeypatch, anneal_lr=False, learning_rate=5e-4)
    assert [u["lr"] for u in wire.updates] == [5e-4] * 3
    assert [u["clip_coef"] for u in wire.updates] == [0.2] * 3


def test_kl_adaptive_beta_follows_the_measured_kl_and_reaches_the_next_update(tmp_path, monkeypatch):
    wire = Wire(monkeypatch)
    _, args = run_main(tmp_path, monkeypatch, objective="kl-adaptive", kl_beta=3.0, kl_target=0.003)
    logged = scalars(only_run(tmp_path))
    final_kl = [v for _, v in logged["losses/final_kl"]]
    betas = [v for _, v in logged["charts/kl_beta"]]
    beta = 3.0
    for i, update in enumerate(wire.updates):
        assert update["kl_beta"] == pytest.approx(beta)  # the update penalizes with the current beta
        beta = C.adapt_kl_beta(beta, final_kl[i], 0.003)
        assert betas[i] == pytest.approx(beta)
    assert len(set(betas)) > 1  # it did adapt
    ckpt = torch.load(only_run(tmp_path) / C.CHECKPOINT, weights_only=True)
    assert ckpt["progress"]["kl_beta"] == pytest.approx(beta)


def test_kl_fixed_keeps_beta(tmp_path, monkeypatch):
    wire = Wire(monkeypatch)
    run_main(tmp_path, monkeypatch, objective="kl-fixed", kl_beta=0.7)
    assert [u["kl_beta"] for u in wire.updates] == [0.7] * 3


def test_each_iteration_s_metrics_are_weighed_by_the_samples_its_update_used_not_the_autoreset_steps(
    tmp_path, monkeypatch
):
    """Under torchrun gather_iteration weighs each rank's metrics by its sample count: main must give it the rollout's
    real transitions (the ones the update averaged over), which differ between ranks, not the rollout's size."""
    used = []
    spy(monkeypatch, C, "update", before=lambda agent, optimizer, buf, *rest: used.append(int(buf.real.sum())))
    gathered = spy(monkeypatch, C, "gather_iteration")
    run_main(tmp_path, monkeypatch, num_steps=250, total_timesteps=1000)  # autoreset steps after each 200-step episode
    assert used[0] < 2 * 250  # this rollout holds autoreset steps
    assert [args[1] for args, _, _ in gathered] == used


def test_save_every_writes_the_checkpoint_at_its_multiples_and_at_the_end(tmp_path, monkeypatch):
    wire = Wire(monkeypatch)
    run_main(tmp_path, monkeypatch, save_every=2, total_timesteps=2000)  # 5 iterations
    assert [s["iteration"] for s in wire.saves] == [2, 4, 5]
    folder = tmp_path / "never"
    folder.mkdir()
    wire = Wire(monkeypatch)
    run_main(folder, monkeypatch, save_every=0)
    assert [s["iteration"] for s in wire.saves] == [3]


def test_sizes_follow_num_envs_num_steps_and_total_timesteps(tmp_path, monkeypatch):
    wire = Wire(monkeypatch)
    summary, args = run_main(tmp_path, monkeypatch, num_envs=3, num_steps=100, total_timesteps=700)
    assert args.num_iterations == 2 and summary["global_step"] == 600
    assert wire.rollouts[0]["buf"]["obs"].shape == (100, 3, 3)
    logged = scalars(only_run(tmp_path))
    assert [s for s, _ in logged["charts/SPS"]] == [300, 600]


def test_episodes_are_logged_at_the_step_where_they_ended(tmp_path, monkeypatch):
    run_main(tmp_path, monkeypatch, num_steps=250, total_timesteps=1000)
    logged = scalars(only_run(tmp_path))
    # both envs end their first episode on rollout step 199 (global step 200 x 2 envs = 400); after
    # the autoreset step, the second ends on rollout 2's step 150: 500 + 151 x 2 = 802
    assert [s for s, _ in logged["charts/episodic_return"]] == [400, 400, 802, 802]
    assert [s for s, _ in logged["charts/episodic_length"]] == [400, 400, 802, 802]
    assert [v for _, v in logged["charts/episodic_length"]] == [200] * 4  # Pendulum's episodes: 200 steps


def test_exp_name_names_the_run_folder(tmp_path, monkeypatch):
    run_main(tmp_path, monkeypatch, exp_name="my-ablation", seed=7, total_timesteps=400)
    assert only_run(tmp_path).name.startswith("Pendulum-v1__my-ablation__7__")


# --- seeds -------------------------------------------------------------------------------------


@pytest.fixture
def reset_log(monkeypatch):
    return record_reset_seeds(monkeypatch)


def seeded_run(tmp_path, monkeypatch, seed):
    folder = tmp_path / f"seed{seed}_{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    wire = Wire(monkeypatch)
    ResetSeeds.log.clear()
    run_main(folder, monkeypatch, seed=seed, total_timesteps=400)
    first_obs = [obs for s, obs in ResetSeeds.log if s is not None]
    return {
        "reset_seeds": [s for s, _ in ResetSeeds.log if s is not None],
        "first_obs": np.stack(first_obs),
        "init_params": torch.cat([p.flatten() for p in wire.updates[0]["params"]]),
        "actions": wire.rollouts[0]["buf"]["actions"],
        "final": torch.load(only_run(folder) / C.CHECKPOINT, weights_only=True)["agent"],
    }


def test_the_same_seed_repeats_envs_weights_actions_and_result_and_another_seed_changes_them(
    tmp_path, monkeypatch, reset_log
):
    a, b, c = (seeded_run(tmp_path, monkeypatch, s) for s in (1, 1, 2))
    assert a["reset_seeds"] == [1, 2] and c["reset_seeds"] == [2, 3]  # envs seeded apart, from --seed
    assert not np.allclose(a["first_obs"][0], a["first_obs"][1])
    for key in ("first_obs", "init_params", "actions"):
        assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key
        assert not np.allclose(np.asarray(a[key]), np.asarray(c[key])), key  # env, torch and sampling seeds
    assert all(torch.equal(a["final"][k], b["final"][k]) for k in a["final"])


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_seed_seeds_python_numpy_and_torch_global_streams(module, monkeypatch):
    """--seed promises python's, numpy's and torch's streams (a user's env may draw from any of them)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)  # plain python: the streams start from --seed itself

    def draws() -> tuple:
        return random.random(), np.random.rand(), torch.rand(1).item()  # noqa: NPY002

    random.seed(7)
    np.random.seed(7)  # noqa: NPY002
    torch.manual_seed(7)
    expected = draws()
    module.seed_everything(module.Args(seed=1))  # another seed first: each stream must be reseeded, not left as is
    draws()
    module.seed_everything(module.Args(seed=7))
    assert draws() == expected
    module.seed_everything(module.Args(seed=8))
    assert all(a != b for a, b in zip(draws(), expected))


def test_cuda_is_used_when_asked_and_available_and_torch_deterministic_sets_cudnn(monkeypatch):
    args = C.Args(torch_deterministic=False, cuda=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert C.seed_everything(args).type == "cuda"
    assert torch.backends.cudnn.deterministic is False
    assert C.seed_everything(dataclasses.replace(args, cuda=False, torch_deterministic=True)).type == "cpu"
    assert torch.backends.cudnn.deterministic is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert C.seed_everything(args).type == "cpu"


@pytest.mark.parametrize("module", [C, A])
def test_track_passes_the_project_and_entity_to_wandb_and_a_resume_goes_on_in_the_same_wandb_run(
    tmp_path, monkeypatch, module
):
    calls = []
    fake = types.SimpleNamespace(init=lambda **kwargs: calls.append(kwargs))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    args = module.Args(track=True, wandb_project_name="proj", wandb_entity="team")
    for resumed_at in (None, 800):  # the new run, then its resume from a checkpoint at step 800
        module.open_writer(args, str(tmp_path / "run"), resumed_at).close()
    first, resumed = calls
    assert first["project"] == "proj" and first["entity"] == "team" and first["sync_tensorboard"]
    assert first["config"]["seed"] == args.seed and first["name"] == "run"
    assert first["id"] == resumed["id"] == "run" and resumed["resume"] == "allow"  # one W&B run, by the folder's name


def test_capture_video_wraps_the_first_environment_only():
    first = C.make_env("HalfCheetah-v4", 0, True, "run", {})()
    second = C.make_env("HalfCheetah-v4", 1, True, "run", {})()
    plain = C.make_env("HalfCheetah-v4", 0, False, "run", {})()
    assert isinstance(first, gym.wrappers.RecordVideo) and first.video_folder.endswith("videos/run")
    assert not isinstance(second, gym.wrappers.RecordVideo) and not isinstance(plain, gym.wrappers.RecordVideo)
    for env in (first, second, plain):
        env.close()


# --- the environment chain ---------------------------------------------------------------------


class Scripted(gym.Env):
    """A 2-d observation and 1-d action env: reward 1000 per step, 5-step episodes, an observation that spikes
    to (1e6, -1e6) and a reward of -1e7 once, at the SPIKE-th step taken by any copy; records every action it
    receives."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    actions: list = []
    SPIKE = 300

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.normal(size=2), {}

    def step(self, action):
        Scripted.actions.append(np.array(action))
        self.t += 1
        spike = len(Scripted.actions) == Scripted.SPIKE
        obs = np.array([1e6, -1e6]) if spike else self.np_random.normal(size=2)
        return obs, -1e7 if spike else 1000.0, self.t == 5, False, {}


@pytest.fixture
def scripted_envs(monkeypatch):
    monkeypatch.setattr(C, "make_env", lambda *a: lambda: Scripted())
    Scripted.actions = []
    envs = C.make_envs(C.Args(num_envs=2), "test")
    yield envs
    envs.close()


def test_chain_clips_actions_and_observations_scales_rewards_and_records_raw_returns(scripted_envs):
    envs = scripted_envs
    envs.reset(seed=0)
    seen_obs, seen_rewards, episodes = [], [], []
    for _ in range(Scripted.SPIKE):
        obs, reward, _, _, info = envs.step(np.array([[5.0], [-0.5]], dtype=np.float32))
        seen_obs.append(obs)
        seen_rewards.append(reward)
        if "_episode" in info:
            episodes += list(info["episode"]["r"][info["_episode"]])
    assert all(a[0] == 1.0 for a in Scripted.actions[::2])  # 5.0 reached the env clipped to the bound
    assert all(a[0] == -0.5 for a in Scripted.actions[1::2])
    obs = np.stack(seen_obs)
    assert obs.max() == 10.0 and obs.min() == -10.0  # the spike, 17 std out, hit the clip at +-10, no further
    assert np.sort(np.abs(obs).ravel())[-3] < 10.0  # and nothing else reached it
    rewards = np.stack(seen_rewards)
    assert rewards.max() == 10.0  # the first 1000s, scaled by a std still near 1, clipped at +-10
    assert rewards.min() == -10.0  # the -1e7, thousands of std out, clipped at -10
    assert episodes and {float(r) for r in episodes} == {5000.0, 4000.0 - 1e7}  # the statistics keep raw returns
    reward_wrapper = find_wrapper(envs, C.ScaleReward)
    assert reward_wrapper.return_rms.count > 1  # the reward statistics are being learned


def test_reward_scaling_discounts_with_the_runs_gamma(monkeypatch):
    monkeypatch.setattr(C, "make_env", lambda *a: lambda: Scripted())
    envs = C.make_envs(C.Args(num_envs=1, gamma=0.5), "test")
    assert find_wrapper(envs, C.ScaleReward).gamma == 0.5
    envs.close()


class Counting(gym.Env):
    """Reward t + offset on its t-th step; terminates or truncates at a given step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, offset: float, end: int, truncate: bool):
        self.offset, self.end, self.truncate = offset, end, truncate

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        ended = self.t == self.end
        return np.zeros(1, np.float32), self.t + self.offset, ended and not self.truncate, ended and self.truncate, {}


def test_reward_scaling_matches_a_hand_computed_sequence():
    """Env 0 terminates on its 3rd step, env 1 is truncated on its 2nd; gamma 0.5. The return restarts
    after every done, the autoreset step adds nothing, and each reward is divided by the std of all
    returns seen so far, this step's included."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: Counting(0.0, 3, False), lambda: Counting(10.0, 2, True)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    envs = C.ScaleReward(envs, gamma=0.5)
    envs.reset(seed=0)
    raw = [(1, 11), (2, 12), (3, 0), (0, 11), (1, 12)]  # per step, per env; 0: an autoreset step
    returns = [(1, 11), (2.5, 17.5), (4.25, None), (None, 11), (1, 17.5)]  # None: not a transition
    seen, expected = [], []
    for step_raw, step_returns in zip(raw, returns):
        seen += [r for r in step_returns if r is not None]
        std = np.sqrt(np.var(seen) + 1e-8)
        expected.append([r / std for r in step_raw])
    got = [envs.step(np.zeros((2, 1), np.float32))[1] for _ in raw]
    assert np.allclose(got, expected, rtol=1e-3)
    envs.close()


def test_reward_scaling_divides_by_the_root_of_the_variance_plus_epsilon():
    """baselines' and gymnasium's r / sqrt(var + eps): a reward of 1 over a zero variance is 1e4, not 1 / eps."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: Counting(0.0, 3, False)], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
    )
    envs = C.ScaleReward(envs, gamma=0.5)
    envs.reset(seed=0)
    envs.update_running_mean, envs.return_rms.var = False, np.zeros(())
    _, rewards, _, _, _ = envs.step(np.zeros((1, 1), np.float32))  # the first reward: 1
    assert rewards[0] == pytest.approx(1 / np.sqrt(C.NORM_EPS), rel=1e-9)
    envs.close()


def test_rollout_stores_each_observation_with_the_action_taken_on_it_and_its_outcome():
    args = C.Args(env_id="Pendulum-v1", num_envs=2, num_steps=250)
    envs = VectorRecorder(C.make_envs(args, "test"))
    torch.manual_seed(0)
    agent = C.Agent(envs)
    buf = C.Rollout.allocate(envs, args.num_steps, torch.device("cpu"))
    obs, _ = envs.reset(seed=0)
    done = torch.tensor([True, False])  # env 0's previous step ended an episode
    state, episodes = C.collect_rollout(envs, agent, buf, C.EnvState(torch.as_tensor(obs), done), torch.device("cpu"))
    assert torch.equal(buf.obs[0], torch.as_tensor(obs))
    for t, (action, next_obs, reward, terminated, truncated, _) in enumerate(envs.steps):
        assert torch.equal(buf.actions[t], torch.as_tensor(action))  # the sample, before the clip to the bounds
        assert torch.allclose(buf.rewards[t], torch.as_tensor(reward, dtype=torch.float32))
        assert torch.equal(buf.terminations[t], torch.as_tensor(terminated))
        assert torch.equal(buf.truncations[t], torch.as_tensor(truncated))
        if t + 1 < args.num_steps:
            assert torch.equal(buf.obs[t + 1], torch.as_tensor(next_obs))
    assert torch.equal(state.obs, torch.as_tensor(envs.steps[-1][1]))
    with torch.no_grad():
        _, logprob, _, value = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
    assert torch.allclose(buf.logprobs.flatten(), logprob, atol=1e-5)
    assert torch.allclose(buf.values.flatten(), value, atol=1e-5)
    # the mask: env 0's first step resets; each env's step after its truncation at 200 resets
    assert buf.real[:, 0].tolist() == [False] + [True] * 199 + [False] + [True] * 49
    assert buf.real[:, 1].tolist() == [True] * 200 + [False] + [True] * 49
    assert not state.done.any()
    assert [(length, step) for _, length, step in episodes] == [(200, 199), (200, 199)]  # one per env
    returns = [ret for ret, _, _ in episodes]
    assert returns == [envs.steps[199][5]["episode"]["r"][i] for i in range(2)]  # raw returns
    envs.close()


# --- bad input: every check, its own case ------------------------------------------------------

BAD = [
    ({"total_timesteps": 0}, "--total-timesteps must be positive"),
    ({"num_envs": 0}, "--num-envs must be positive"),
    ({"num_steps": 0}, "--num-steps must be positive"),
    ({"num_minibatches": 0}, "--num-minibatches must be positive"),
    ({"update_epochs": 0}, "--update-epochs must be positive"),
    ({"save_every": -1}, "--save-every must not be negative"),
    ({"eval_episodes": -1}, "--eval-episodes must not be negative"),
    ({"num_minibatches": 7}, "does not divide"),
    ({"num_minibatches": 64}, "into minibatches of 4+"),  # 2 samples each: an advantage std of 1 sample is NaN
    ({"total_timesteps": 100}, "less than one batch"),
    ({"learning_rate": 0.0}, "must be positive"),
    ({"learning_rate": -1e-3}, "must be positive"),
    ({"clip_coef": 0.0}, "must be positive"),
    ({"kl_target": 0.0}, "must be positive"),
    ({"target_kl": 0.0}, "--target-kl must be positive"),
    ({"target_kl": -0.1}, "--target-kl must be positive"),
    ({"gamma": 1.5}, "--gamma and --gae-lambda must lie in [0, 1]"),
    ({"gamma": -0.1}, "--gamma and --gae-lambda must lie in [0, 1]"),
    ({"gae_lambda": 1.01}, "--gamma and --gae-lambda must lie in [0, 1]"),
    ({"gae_lambda": -0.5}, "--gamma and --gae-lambda must lie in [0, 1]"),
    ({"learning_rate": float("nan")}, "--learning-rate must be a number, got nan"),  # NaN passes every <= and <
    ({"ent_coef": float("nan")}, "--ent-coef must be a number, got nan"),
    ({"target_kl": float("nan")}, "--target-kl must be a number, got nan"),  # would never stop an update
    ({"kl_beta": -1.0}, "--kl-beta and --max-grad-norm must be positive"),  # a penalty turned into a bonus
    ({"kl_beta": 0.0}, "--kl-beta and --max-grad-norm must be positive"),  # the adaptive beta would stay 0
    ({"max_grad_norm": 0.0}, "--kl-beta and --max-grad-norm must be positive"),  # every gradient scaled to 0
    ({"vf_coef": -0.5}, "--vf-coef must not be negative, got -0.5"),  # the critic would climb its loss
    ({"seed": -1}, "--seed must lie in [0, 2**32), got -1"),  # numpy's global seed: a traceback
    ({"seed": 2**32}, "--seed must lie in [0, 2**32)"),
]


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
@pytest.mark.parametrize("overrides, message", BAD, ids=[next(iter(o)) + "=" + str(*o.values()) for o, _ in BAD])
def test_each_bad_argument_is_one_line_exit_2_and_writes_nothing(
    tmp_path, monkeypatch, capsys, module, overrides, message
):  # noqa: E501
    monkeypatch.chdir(tmp_path)
    base = {"num_envs": 2, "num_steps": 64, "num_minibatches": 2, "total_timesteps": 256}
    with pytest.raises(SystemExit) as stop:
        module.main(module.Args(**(base | overrides)))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_the_boundary_values_of_gamma_and_lambda_and_a_target_kl_pass_the_checks():
    assert C.check_args(C.Args(env_id="Pendulum-v1", gamma=1.0, gae_lambda=0.0, target_kl=0.01)) is None
    assert A.check_args(A.Args(gamma=0.0, gae_lambda=1.0)) is None
    for module in (C, A):  # inf is a number: no gradient clipping (the details study's no-grad-clip), no early stop
        assert module.check_args(module.Args(max_grad_norm=math.inf, target_kl=math.inf, vf_coef=0.0)) is None


@pytest.mark.parametrize("episodes", [0, -1])  # --eval-checkpoint skips check_args: its own check refuses both
def test_eval_checkpoint_with_no_episodes_is_refused(tmp_path, monkeypatch, capsys, episodes):
    run_main(tmp_path, monkeypatch, total_timesteps=400)
    ckpt = only_run(tmp_path) / C.CHECKPOINT
    with pytest.raises(SystemExit) as stop:
        C.main(C.Args(eval_checkpoint=str(ckpt), eval_episodes=episodes))
    assert stop.value.code == 2 and "--eval-episodes must be positive" in capsys.readouterr().err
    assert not (only_run(tmp_path) / "eval.json").exists()


def test_the_summary_returned_and_on_disk_counts_steps_and_episodes_and_holds_the_eval_mean(tmp_path, monkeypatch):
    started = time.time()
    summary, _ = run_main(tmp_path, monkeypatch, eval_episodes=2, total_timesteps=2800)  # 6 episodes in each env
    assert 0 < summary["wall_time_s"] <= time.time() - started + 0.1  # this run's seconds, not a clock reading
    on_disk = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert on_disk == summary and summary["global_step"] == 2800 and summary["episodes"] == 12  # more than the 10
    logged = scalars(only_run(tmp_path))
    returns = [value for _, value in logged["charts/episodic_return"]]
    assert len(returns) == 12 and summary["mean_return_last_10"] == pytest.approx(np.mean(returns[-10:]), rel=1e-5)
    evaluation = json.loads((only_run(tmp_path) / "eval.json").read_text())
    assert evaluation["episodes"] == 2 and summary["eval_mean_return"] == evaluation["mean_return"]
    assert evaluation["std_return"] == pytest.approx(np.std(evaluation["returns"]))  # over the episodes, ddof 0
    (at, value), *_ = logged["eval/episodic_return"]  # the closing evaluation, at the run's last step
    assert len(logged["eval/episodic_return"]) == 1 and at == 2800 and value == pytest.approx(evaluation["mean_return"])


def test_a_run_that_ends_no_episode_says_so_in_its_summary(tmp_path, monkeypatch):
    summary, _ = run_main(tmp_path, monkeypatch, num_steps=100, total_timesteps=200)  # Pendulum's episodes: 200 steps
    assert summary["episodes"] == 0 and summary["mean_return_last_10"] is None


def gymnasium_chain(args: C.Args) -> gym.vector.VectorEnv:
    """The same normalization built from gymnasium's own vector wrappers, one per step of it; the reward scaling is
    the script's ScaleReward in both (gymnasium's NormalizeReward restarts its return differently: ScaleReward has its
    own hand-computed tests), so the rewards compare the clip alone."""
    envs = gym.vector.SyncVectorEnv(
        [C.make_env(args.env_id, i, False, "test", {}) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs = gym.wrappers.vector.ClipAction(envs)
    envs = gym.wrappers.vector.NormalizeObservation(envs)
    envs = gym.wrappers.vector.TransformObservation(envs, lambda obs: np.clip(obs, -C.OBS_CLIP, C.OBS_CLIP))
    envs = C.ScaleReward(envs, gamma=args.gamma)
    return gym.wrappers.vector.ClipReward(envs, -C.REWARD_CLIP, C.REWARD_CLIP)


def test_the_scripts_normalize_wrapper_gives_exactly_what_gymnasiums_clip_and_normalize_wrappers_give():
    # Hopper terminates often: resets, autoreset steps and restarted returns all happen within the stream
    args = C.Args(env_id="Hopper-v4", num_envs=2)
    ours, theirs = C.make_envs(args, "test"), gymnasium_chain(args)
    assert ours.single_observation_space == theirs.single_observation_space
    a, b = ours.reset(seed=3)[0], theirs.reset(seed=3)[0]
    assert a.dtype == b.dtype and np.array_equal(a, b)
    rng, dones = np.random.default_rng(0), 0
    for _ in range(1500):
        actions = rng.normal(0.0, 1.5, (2, 3)).astype(np.float32)  # often past the bounds: clipped
        step_ours, step_theirs = ours.step(actions), theirs.step(actions)
        for x, y in zip(step_ours[:4], step_theirs[:4]):  # observations, rewards, terminations, truncations
            assert x.dtype == y.dtype and np.array_equal(x, y)
        dones += int(step_ours[2].sum())
    assert dones > 10
    ours_rms, theirs_rms = (
        find_wrapper(ours, C.Normalize).obs_rms,
        find_wrapper(theirs, gym.wrappers.vector.NormalizeObservation).obs_rms,
    )
    assert np.array_equal(ours_rms.mean, theirs_rms.mean) and np.array_equal(ours_rms.var, theirs_rms.var)
    ours.close()
    theirs.close()


def test_running_statistics_are_gymnasiums_to_the_last_bit():
    rng = np.random.default_rng(1)
    ours, theirs = C.RunningMeanStd((5,), np.float32), gym.wrappers.utils.RunningMeanStd(shape=(5,), dtype=np.float32)
    for n in (1, 3, 1, 8, 2) * 20:
        x = 100.0 + 30.0 * rng.standard_normal((n, 5))
        ours.update(x)
        theirs.update(x)
    assert ours.count == theirs.count and ours.mean.dtype == theirs.mean.dtype
    assert np.array_equal(ours.mean, theirs.mean) and np.array_equal(ours.var, theirs.var)


def test_the_adaptive_beta_follows_the_kl_of_the_whole_update_not_the_minibatches(tmp_path, monkeypatch):
    real = C.update

    def update(*args, **kwargs):  # the minibatches saw no KL; the whole update moved far: beta must double
        return real(*args, **kwargs) | {"losses/approx_kl": 0.0, "losses/final_kl": 0.1}

    monkeypatch.setattr(C, "update", update)
    run_main(tmp_path, monkeypatch, objective="kl-adaptive", kl_beta=1.0, kl_target=0.01)
    betas = [v for _, v in scalars(only_run(tmp_path))["charts/kl_beta"]]
    assert betas == [2.0 ** (i + 1) for i in range(len(betas))] and len(betas) > 1


class Bounded(gym.Env):
    """Actions in [-2, 2]; records every action it receives."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self):
        self.received = []

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.received.append(float(action[0]))
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_actions_are_clipped_to_the_env_s_own_bounds_and_the_sample_is_kept():
    envs = C.Normalize(gym.vector.SyncVectorEnv([Bounded]))
    envs.reset(seed=0)
    sampled = [np.array([[a]], np.float32) for a in (5.0, 1.5, -3.0)]
    for action in sampled:
        envs.step(action)
    assert envs.env.envs[0].received == [2.0, 1.5, -2.0]
    assert [a.item() for a in sampled] == [5.0, 1.5, -3.0]  # the caller's sample, for the loss, untouched


class BoundedPerDimension(Bounded):
    """Actions in [0, 1] x [-3, -1]: bounds that differ per dimension and are not symmetric about 0."""

    action_space = gym.spaces.Box(np.array([0.0, -3.0], np.float32), np.array([1.0, -1.0], np.float32))

    def step(self, action):
        self.received.append(np.array(action))
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_actions_are_clipped_to_each_dimension_s_own_low_and_high():
    envs = C.Normalize(gym.vector.SyncVectorEnv([BoundedPerDimension]))
    envs.reset(seed=0)
    sampled = np.array([[-0.5, 0.0], [2.0, -5.0], [0.5, -2.0]], np.float32)
    for action in sampled:
        envs.step(action[None])
    assert np.array_equal(np.stack(envs.env.envs[0].received), [[0.0, -1.0], [1.0, -3.0], [0.5, -2.0]])


def test_a_reset_s_observations_are_clipped_as_a_step_s():
    """The run's first observations (and a resume's, and an evaluation's) are normalized and clipped to +-10 as
    every step's are: here frozen statistics of a near-constant signal put them far beyond 10 before the clip."""
    envs = C.make_envs(C.Args(env_id="Pendulum-v1", num_envs=2), "test")
    raw, _ = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 2).reset(seed=0)
    near_constant = {"mean": np.zeros(3, np.float32), "var": np.full(3, 1e-6, np.float32), "count": 1.0}
    state = {f"obs_rms.{k}": torch.as_tensor(v) for k, v in near_constant.items()}
    state |= {f"return_rms.{k}": torch.as_tensor(v) for k, v in {"mean": 0.0, "var": 1.0, "count": 1.0}.items()}
    C.load_normalization_state(envs, state, frozen=True)
    obs, _ = envs.reset(seed=0)
    assert np.abs(raw / np.sqrt(1e-6 + C.NORM_EPS)).max() > 10 * C.OBS_CLIP  # far beyond the clip unclipped
    assert np.allclose(obs, (raw / np.sqrt(1e-6 + C.NORM_EPS)).clip(-C.OBS_CLIP, C.OBS_CLIP), rtol=1e-5)
    envs.close()


def test_a_reset_restarts_each_env_s_discounted_return_mid_episode():
    """ScaleReward's R restarts at a reset as after a done: after a reset the next step's R is its reward alone."""
    envs = gym.vector.SyncVectorEnv([lambda: Counting(0.0, 100, False)])
    envs = C.ScaleReward(envs, gamma=0.5)
    envs.reset(seed=0)
    for _ in range(2):
        envs.step(np.zeros((1, 1), np.float32))  # R: 1, then 2.5
    envs.reset(seed=1)
    assert envs.returns.tolist() == [0.0]
    envs.step(np.zeros((1, 1), np.float32))  # the first reward of the new episode: 1
    assert envs.returns.tolist() == [1.0]
    envs.close()


def test_under_torchrun_each_process_s_batch_must_split_into_the_minibatches(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # a global batch of 10 splits in 2, each process's 5 does not
    error = C.check_args(C.Args(env_id="Pendulum-v1", num_envs=1, num_steps=5, num_minibatches=2))
    assert error is not None and "--num-minibatches 2 does not divide" in error
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert C.check_args(C.Args(env_id="Pendulum-v1", num_envs=2, num_steps=5, num_minibatches=2)) is None


def test_under_torchrun_each_process_s_minibatches_must_hold_four_samples_not_only_the_global_ones(monkeypatch):
    """4 processes of 1 env x 4 steps in 4 minibatches: global minibatches of 4, but each process's holds 1, and
    once an autoreset step is dropped one of its slices is empty (NaN losses: the run stopped as non-finite)."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert [s.stop - s.start for s in C.minibatch_slices(3, 4)].count(0) == 1  # 3 real samples of 4 in 4 slices
    for module, env_id in ((C, "Pendulum-v1"), (A, "BreakoutNoFrameskip-v4")):
        args = module.Args(env_id=env_id, num_envs=1, num_steps=4, num_minibatches=4)
        assert args.minibatch_size == module.MIN_MINIBATCH
        error = module.check_args(args)
        assert (
            error is not None and "does not divide the batch of 4 (--num-envs x --num-steps, each process's)" in error
        )
        assert module.check_args(module.Args(env_id=env_id, num_envs=1, num_steps=16, num_minibatches=4)) is None


def test_under_torchrun_the_budget_must_hold_one_global_batch(monkeypatch):
    """--total-timesteps counts every process's steps: a budget of one process's batch but not of the global one
    would run no iteration, and evaluate and summarize an untrained agent at step 0."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    for module, env_id in ((C, "Pendulum-v1"), (A, "BreakoutNoFrameskip-v4")):
        args = {"env_id": env_id, "num_envs": 2, "num_steps": 64, "num_minibatches": 2}
        error = module.check_args(module.Args(**args, total_timesteps=200))  # 128 steps per process, 256 in all
        assert error is not None and "--total-timesteps 200 is less than one batch of 256" in error
        assert module.check_args(module.Args(**args, total_timesteps=256)) is None


def test_minibatches_of_fewer_than_four_samples_are_refused_four_pass():
    """An advantage std needs 2 samples, and dropping a minibatch's autoreset steps can halve it: 4 at least."""
    for module, env_id in ((C, "Pendulum-v1"), (A, "BreakoutNoFrameskip-v4")):
        args = {"env_id": env_id, "num_envs": 2, "num_steps": 8}
        assert module.check_args(module.Args(**args, num_minibatches=4)) is None  # 4 samples each
        assert "into minibatches of 4+" in module.check_args(module.Args(**args, num_minibatches=8))  # 2 each


def test_the_step_after_a_termination_is_an_autoreset_step_too_within_a_rollout_and_across_its_end():
    """Not only a time limit: with NEXT_STEP autoreset the step after a termination also only resets the env (its
    observation is the ended episode's last), so the mask drops it, and a termination on a rollout's last step makes
    the next rollout start with one. Env 0 terminates every 3rd step, env 1 is truncated every 2nd. The episodes it
    returns are those that ended, each once (return 1 + 2 + 3 and 11 + 12), never on the same step."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: Counting(0.0, 3, False), lambda: Counting(10.0, 2, True)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    torch.manual_seed(0)
    agent = C.Agent(envs)
    buf = C.Rollout.allocate(envs, 7, torch.device("cpu"))
    obs, _ = envs.reset(seed=0)
    state = C.EnvState(torch.as_tensor(obs), torch.zeros(2, dtype=torch.bool))
    state, episodes = C.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    assert episodes == [(23.0, 2, 1), (6.0, 3, 2), (23.0, 2, 4), (6.0, 3, 6)]  # (return, length, step)
    assert buf.terminations[:, 0].tolist() == [False, False, True, False, False, False, True]
    assert buf.truncations[:, 1].tolist() == [False, True, False, False, True, False, False]
    assert buf.real[:, 0].tolist() == [True, True, True, False, True, True, True]  # row 3 resets after the end
    assert buf.real[:, 1].tolist() == [True, True, False, True, True, False, True]
    assert state.done.tolist() == [True, False]  # env 0 terminated on the last step
    C.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    assert buf.real[0].tolist() == [False, True]  # so its first step in the next rollout is the reset
    envs.close()


def test_rollout_stores_the_raw_sample_even_where_it_lies_outside_the_action_bounds():
    args = C.Args(env_id="Pendulum-v1", num_envs=2, num_steps=40)
    envs = VectorRecorder(C.make_envs(args, "test"))
    torch.manual_seed(0)
    agent = C.Agent(envs)
    with torch.no_grad():
        agent.actor_logstd.fill_(float(np.log(4.0)))  # std 4: most samples fall outside Pendulum's [-2, 2]
    buf = C.Rollout.allocate(envs, args.num_steps, torch.device("cpu"))
    obs, _ = envs.reset(seed=0)
    state = C.EnvState(torch.as_tensor(obs), torch.zeros(2, dtype=torch.bool))
    C.collect_rollout(envs, agent, buf, state, torch.device("cpu"))
    sent = torch.as_tensor(np.stack([step[0] for step in envs.steps]))  # what the rollout gave envs.step
    assert (sent.abs() > 2.0).float().mean() > 0.3  # the bounds were exceeded (Normalize clips for the env)
    assert torch.equal(buf.actions, sent)  # stored: the sample itself, not its clip
    with torch.no_grad():  # and its log-prob is of that very action
        _, logprob, _, _ = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
    assert torch.allclose(buf.logprobs.flatten(), logprob, atol=1e-5)
    envs.close()


@pytest.mark.parametrize("anneal_lr, anneal_clip", [(True, False), (False, True)])
def test_the_rate_anneals_with_anneal_lr_alone_and_the_clip_range_with_anneal_clip_alone(
    tmp_path, monkeypatch, anneal_lr, anneal_clip
):
    monkeypatch.chdir(tmp_path)
    seen = []  # each update's learning rate (the optimizer's) and clip range (its last argument)
    spy(monkeypatch, C, "update", before=lambda agent, opt, *rest: seen.append((opt.param_groups[0]["lr"], rest[-1])))
    pendulum = {"env_id": "Pendulum-v1", "num_envs": 2, "num_steps": 200, "num_minibatches": 4, "update_epochs": 1}
    args = C.Args(**pendulum, total_timesteps=1200, eval_episodes=0, learning_rate=1e-3, clip_coef=0.3)
    C.main(dataclasses.replace(args, anneal_lr=anneal_lr, anneal_clip=anneal_clip))
    n = args.num_iterations
    assert [lr for lr, _ in seen] == pytest.approx([1e-3 * (1 - i / n) if anneal_lr else 1e-3 for i in range(n)])
    assert [clip for _, clip in seen] == pytest.approx([0.3 * (1 - i / n) if anneal_clip else 0.3 for i in range(n)])


class EndsOnItsSecondStep(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t == 2, False, {}


def test_a_reset_after_a_done_makes_the_next_step_a_real_transition_of_the_reward_scaler():
    envs = gym.vector.SyncVectorEnv([EndsOnItsSecondStep], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    envs = C.ScaleReward(envs, gamma=0.5)
    envs.reset(seed=0)
    for _ in range(2):  # the second step ends the episode
        envs.step(np.zeros((1, 1), np.float32))
    count = envs.return_rms.count
    envs.reset(seed=1)  # a reset of the caller's, not an autoreset step
    envs.step(np.zeros((1, 1), np.float32))
    assert envs.return_rms.count == pytest.approx(count + 1)  # a transition of the new episode
    assert envs.returns[0] == pytest.approx(1.0)  # whose return starts from zero
    envs.close()


# --- ninth audit: the optimizer main builds ---------------------------------------------------------------------
# one iteration of 80 Adam steps (10 epochs x 8 minibatches of 16) at a large constant rate: Adam's betas, a weight
# decay or a parameter left out all move the parameters visibly within it
ONE_ADAM_UPDATE = dict(
    env_id="Pendulum-v1", num_envs=2, num_steps=64, total_timesteps=128, num_minibatches=8, update_epochs=10,
    learning_rate=1e-2, anneal_lr=False, ent_coef=0.01, eval_episodes=0,
)  # fmt: skip


def test_main_steps_every_parameter_with_adams_default_betas_no_weight_decay_and_adam_eps(tmp_path, monkeypatch):
    """main's optimizer is PyTorch's Adam over every parameter of the agent, the log-std included, with Adam's
    default betas (0.9, 0.999), no weight decay and eps ADAM_EPS (README: "Adam eps 1e-5"). main's update is
    replayed through the real update() with such an Adam, from the same parameters and random state: it must land
    on the same parameters."""
    monkeypatch.chdir(tmp_path)
    seen = {}

    def before(agent, optimizer, buf, advantages, returns, args, kl_beta, clip_coef):
        seen["start"] = copy.deepcopy(agent)
        seen["call"] = (copy.deepcopy(buf), advantages.clone(), returns.clone(), args, kl_beta, clip_coef)
        seen["lr"], seen["rng"] = optimizer.param_groups[0]["lr"], torch.get_rng_state()

    def after(result, agent, *rest):
        seen["end"] = [p.detach().clone() for p in agent.parameters()]

    real_update = C.update
    spy(monkeypatch, C, "update", before=before, after=after)
    C.main(C.Args(**ONE_ADAM_UPDATE))
    reference = copy.deepcopy(seen["start"])
    adam = torch.optim.Adam(reference.parameters(), lr=seen["lr"], eps=C.ADAM_EPS, fused=True)  # default betas
    torch.set_rng_state(seen["rng"])
    real_update(reference, adam, *seen["call"])
    for (name, p), q, p0 in zip(reference.named_parameters(), seen["end"], seen["start"].parameters()):
        assert not torch.equal(q, p0), f"{name} was not trained"
        assert torch.allclose(p, q, atol=1e-6, rtol=1e-5), name
