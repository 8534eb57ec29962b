"""ppo_continuous.py: the pure functions, time-limit bootstrapping, end-to-end runs (one that must learn),
bad input."""

import ctypes.util
import importlib.util
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import HANG_TIMEOUT, OBS_DIM, ROOT, find_wrapper, make_agent, only_run, run_script, scalars

import ppo_continuous as C

# --- GAE ---------------------------------------------------------------------------------------


def gae_case():
    """One env, 7 steps with NEXT_STEP autoreset: step 1 terminates, step 2 is the reset step that
    follows, step 4 is truncated (step 5 resets; obs 5 is the episode's final observation), and
    step 6 is cut off by the end of the rollout."""
    rewards = torch.tensor([1.0, 2.0, 0.0, 0.5, 3.0, 0.0, 1.0])[:, None]
    values = torch.tensor([0.5, 1.0, 9.0, 0.4, 0.6, 2.0, 0.3])[:, None]  # values[5] = V(final obs)
    terms = torch.tensor([0, 1, 0, 0, 0, 0, 0], dtype=torch.bool)[:, None]
    truncs = torch.tensor([0, 0, 0, 0, 1, 0, 0], dtype=torch.bool)[:, None]
    next_value = torch.tensor([0.8])
    return rewards, values, next_value, terms, truncs


def test_gae_cuts_at_a_termination_and_bootstraps_a_truncation_and_the_unfinished_tail():
    g, lam = 0.9, 0.5
    rewards, values, next_value, terms, truncs = gae_case()
    adv, ret = C.compute_gae(rewards, values, next_value, terms, truncs, g, lam)
    d6 = 1.0 + g * 0.8 - 0.3  # the tail bootstraps from V(s_T)
    d4 = 3.0 + g * 2.0 - 0.6  # truncated: bootstraps from V(final obs) = values[5]
    d3 = 0.5 + g * 0.6 - 0.4
    d1 = 2.0 - 1.0  # terminated: nothing after it
    d0 = 1.0 + g * 1.0 - 0.5
    expected = {0: d0 + g * lam * d1, 1: d1, 3: d3 + g * lam * d4, 4: d4, 6: d6}
    for t, a in expected.items():  # steps 2 and 5 are autoreset steps: dropped by the update
        assert adv[t, 0].item() == pytest.approx(a, abs=1e-6)
    assert torch.allclose(ret, adv + values)


def test_no_bootstrap_truncation_treats_the_time_limit_as_a_termination_and_changes_nothing_else():
    g, lam = 0.9, 0.5
    rewards, values, next_value, terms, truncs = gae_case()
    adv, _ = C.compute_gae(rewards, values, next_value, terms, truncs, g, lam, bootstrap_truncation=False)
    d6 = 1.0 + g * 0.8 - 0.3
    d4 = 3.0 - 0.6  # truncated: now nothing after it either
    d3 = 0.5 + g * 0.6 - 0.4
    d1 = 2.0 - 1.0  # terminated: still nothing after it
    d0 = 1.0 + g * 1.0 - 0.5
    expected = {0: d0 + g * lam * d1, 1: d1, 3: d3 + g * lam * d4, 4: d4, 6: d6}
    for t, a in expected.items():
        assert adv[t, 0].item() == pytest.approx(a, abs=1e-6)


def test_gae_with_lambda_one_is_the_discounted_return_minus_value():
    rewards = torch.ones(5, 2)
    values = torch.zeros(5, 2)
    none = torch.zeros(5, 2, dtype=torch.bool)
    adv, _ = C.compute_gae(rewards, values, torch.zeros(2), none, none, 0.5, 1.0)
    assert adv[0, 0].item() == pytest.approx(sum(0.5**k for k in range(5)))


# --- time limits in a real vector env ----------------------------------------------------------


class RawObs(gym.Wrapper):
    """Records every raw observation the env returns, and which step ended an episode."""

    log: list = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        RawObs.log.append(("reset", obs.copy()))
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        RawObs.log.append(("final" if terminated or truncated else "step", obs.copy()))
        return obs, reward, terminated, truncated, info


def test_truncation_bootstraps_from_the_normalized_final_observation(monkeypatch):
    args = C.Args(env_id="Pendulum-v1", num_steps=260, total_timesteps=260)  # Pendulum truncates at 200
    monkeypatch.setattr(C, "make_env", lambda env_id, idx, cv, rn, kw: lambda: RawObs(gym.make(env_id)))
    RawObs.log = []
    envs = C.make_envs(args, "test")
    norm = find_wrapper(envs, C.Normalize)
    torch.manual_seed(0)
    agent = C.Agent(envs)
    obs, _ = envs.reset(seed=0)
    for _ in range(300):  # warm the statistics up, then freeze them so the test can recompute them
        envs.step(envs.action_space.sample())
    norm.update_running_mean = False
    obs, _ = envs.reset(seed=1)
    RawObs.log = []
    buf = C.Rollout.allocate(envs, args.num_steps, torch.device("cpu"))
    state = C.EnvState(torch.as_tensor(obs), torch.zeros(1, dtype=torch.bool))
    C.collect_rollout(envs, agent, buf, state, torch.device("cpu"))

    t = int(torch.nonzero(buf.truncations[:, 0])[0])
    assert t == 199 and not buf.terminations[t, 0]
    assert not buf.real[t + 1, 0] and buf.real[t, 0] and buf.real[t + 2, 0]  # the reset step is dropped
    kind, raw_final = RawObs.log[t]
    assert kind == "final"
    expected = np.clip((raw_final - norm.obs_rms.mean) / np.sqrt(norm.obs_rms.var + C.NORM_EPS), -10, 10)
    assert torch.allclose(buf.obs[t + 1, 0], torch.as_tensor(expected, dtype=torch.float32), atol=1e-5)
    kind, raw_reset = RawObs.log[t + 1]
    assert kind == "reset" and not np.allclose(raw_reset, raw_final)
    # the value GAE bootstraps from is the critic's value of exactly that observation
    with torch.no_grad():
        v_final = agent.get_value(torch.as_tensor(expected, dtype=torch.float32)[None])[0]
    assert buf.values[t + 1, 0].item() == pytest.approx(v_final.item(), abs=1e-5)
    adv, _ = C.compute_gae(buf.rewards, buf.values, torch.zeros(1), buf.terminations, buf.truncations, 0.99, 0.95)
    delta = buf.rewards[t, 0] + 0.99 * v_final - buf.values[t, 0]
    assert adv[t, 0].item() == pytest.approx(delta.item(), abs=1e-5)
    envs.close()


# --- losses and statistics ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "rho, adv, zero",
    [(1.5, 1.0, True), (1.0, 1.0, False), (0.5, 1.0, False), (0.5, -1.0, True), (1.0, -1.0, False), (1.5, -1.0, False)],
)
def test_clip_objective_gradient_is_zero_in_exactly_two_of_the_six_cells(rho, adv, zero):
    ratio = torch.tensor([rho], requires_grad=True)
    C.policy_loss(ratio, torch.tensor([adv]), "clip", 0.2, torch.zeros(1), 0.0).backward()
    assert ratio.grad.item() == pytest.approx(0.0 if zero else -adv)


def test_unclipped_and_kl_fixed_objectives_have_the_gradients_of_their_formulas():
    logratio = torch.tensor([0.3, -0.2, 0.1], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5])
    ratio = logratio.exp()
    C.policy_loss(ratio, adv, "none", 0.2, C.kl_k3(logratio), 1.0).backward()
    assert torch.allclose(logratio.grad, -(ratio * adv).detach() / 3)
    logratio.grad = None
    ratio = logratio.exp()
    beta = 2.0
    C.policy_loss(ratio, adv, "kl-fixed", 0.2, C.kl_k3(logratio), beta).backward()
    # d/dlogr of -r A + beta ((r - 1) - log r) = -r A + beta (r - 1)
    expected = (-ratio * adv + beta * (ratio - 1)).detach() / 3
    assert torch.allclose(logratio.grad, expected)


def test_kl_penalty_gradient_is_the_gradient_of_the_true_kl():
    """The k3 penalty's expected gradient under samples of the old policy equals grad KL(old||new)."""
    torch.manual_seed(0)
    old_mean, log_std = torch.zeros(1), torch.zeros(1)
    new_mean = torch.tensor([0.3], requires_grad=True)
    actions = torch.randn(200_000, 1)
    logratio = C.gaussian_log_prob(actions, new_mean, log_std) - C.gaussian_log_prob(actions, old_mean, log_std)
    C.kl_k3(logratio).mean().backward()
    assert new_mean.grad.item() == pytest.approx(0.3, abs=0.02)  # d/dmu of mu^2 / 2


def test_value_loss_is_half_the_squared_error_and_clipping_keeps_the_larger_error_and_its_gradient():
    old = torch.tensor([0.0, 0.0])
    ret = torch.tensor([1.0, -1.0])
    new = torch.tensor([0.5, 0.5], requires_grad=True)
    assert C.value_loss(new, old, ret, None).item() == pytest.approx(0.5 * (0.25 + 2.25) / 2)
    loss = C.value_loss(new, old, ret, 0.2)
    # sample 0: clipped 0.2 has error 0.8 > 0.5, the max picks it and its gradient is zero
    # sample 1: unclipped error 1.5 > clipped 1.2, full gradient
    assert loss.item() == pytest.approx(0.5 * (0.64 + 2.25) / 2)
    loss.backward()
    assert new.grad.tolist() == pytest.approx([0.0, 1.5 / 2])


def test_kl_k3_is_never_negative():
    logratio = torch.log(torch.tensor([1.0, 1.5, 0.7, 1.1]))
    assert C.kl_k3(logratio).min().item() >= 0


def test_kl_k3_of_a_policy_that_barely_moved_is_its_float64_value_not_rounding():
    """Near the first steps of an update log-ratios are ~1e-4 and k3 ~ x^2 / 2 ~ 5e-9, below float32's rounding of
    exp(x) - 1 (~6e-8): expm1 keeps it, never negative, its mean within 0.1% (what approx KL and --target-kl read)."""
    logratio = torch.linspace(-3e-4, 3e-4, 601, dtype=torch.float32)
    exact = torch.expm1(logratio.double()) - logratio.double()
    k3 = C.kl_k3(logratio)  # ppo_atari.py's is the same function (test_atari checks the shared ones line for line)
    assert k3.dtype == torch.float32 and k3.min().item() >= 0
    assert k3.double() == pytest.approx(exact, abs=1e-10)  # exp(x) - 1 in float32 errs by up to ~6e-8
    assert k3.double().mean().item() == pytest.approx(exact.mean().item(), rel=1e-3)


def test_explained_variance_of_a_perfect_prediction_is_one():
    assert C.explained_variance(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])) == pytest.approx(1.0)
    assert np.isnan(C.explained_variance(torch.tensor([1.0, 2.0, 3.0]), torch.ones(3)))  # constant returns: undefined


def test_linear_schedule_starts_at_the_full_value_and_trains_the_last_batch_at_its_share_of_the_budget():
    assert C.linear_schedule(3e-4, 0, 10 * 2048) == 3e-4  # before the first step
    assert C.linear_schedule(3e-4, 9 * 2048, 10 * 2048) == pytest.approx(3e-5)  # the last of 10 batches
    # the same floats as CleanRL's (1 - (iteration - 1) / num_iterations): plain runs stand as published
    assert all(
        C.linear_schedule(3e-4, (i - 1) * 2048, 488 * 2048) == 3e-4 * (1.0 - (i - 1.0) / 488) for i in range(1, 489)
    )


def test_adapt_kl_beta_halves_below_doubles_above_and_keeps_beta_at_the_target():
    assert C.adapt_kl_beta(1.0, 0.001, 0.01) == 0.5
    assert C.adapt_kl_beta(1.0, 0.1, 0.01) == 2.0
    assert C.adapt_kl_beta(1.0, 0.01, 0.01) == 1.0
    # the band's edges: d_targ / 1.5 and 1.5 d_targ
    assert [C.adapt_kl_beta(1.0, kl, 0.01) for kl in (0.0064, 0.0068, 0.0148, 0.016)] == [0.5, 1.0, 1.0, 2.0]


def test_progress_counts_every_episode_and_keeps_the_returns_of_the_last_ten():
    progress = {"global_step": 0, "iteration": 0, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    for iteration in range(1, 4):
        episodes = [(float(10 * iteration + i), 5, i) for i in range(6)]  # (return, length, step)
        progress = C.advance(progress, iteration, 256, 2.0, episodes)
    assert progress["global_step"] == 768 and progress["iteration"] == 3 and progress["kl_beta"] == 2.0
    assert progress["episodes"] == 18
    assert progress["recent_returns"] == [22.0, 23.0, 24.0, 25.0, 30.0, 31.0, 32.0, 33.0, 34.0, 35.0]


@pytest.mark.parametrize("batch_size, num_minibatches", [(2046, 32), (2048, 32), (7, 7), (5, 1)])
def test_minibatch_slices_cover_the_batch_in_parts_that_differ_by_at_most_one(batch_size, num_minibatches):
    slices = C.minibatch_slices(batch_size, num_minibatches)  # the Atari script's: the same lines (test_atari.py)
    sizes = [s.stop - s.start for s in slices]
    assert len(slices) == num_minibatches and max(sizes) - min(sizes) <= 1
    # every sample once per epoch: the slices, taken in turn, are range(batch_size) itself (none repeated, none left)
    assert [i for s in slices for i in range(batch_size)[s]] == list(range(batch_size))


def test_a_batch_cut_by_dropped_autoreset_steps_splits_where_the_published_runs_split_it():
    """Which samples share a minibatch is part of a run's numbers when the kept samples do not divide evenly: the
    bounds are k * B / M rounded (numpy's half to even), 10 in 4 cut at 2, 5, 8, not truncated (2, 5, 7)."""
    assert [(s.start, s.stop) for s in C.minibatch_slices(10, 4)] == [(0, 2), (2, 5), (5, 8), (8, 10)]


def test_gaussian_log_prob_and_the_policys_entropy_match_torch_normal():
    mean, log_std = torch.randn(5, 3), torch.randn(1, 3).expand(5, 3)
    action = torch.randn(5, 3)
    dist = torch.distributions.Normal(mean, log_std.exp())
    assert torch.allclose(C.gaussian_log_prob(action, mean, log_std), dist.log_prob(action).sum(-1), atol=1e-5)
    agent = make_agent()
    with torch.no_grad():
        agent.actor_logstd.copy_(torch.tensor([[-0.7, 0.4]]))
    obs = torch.randn(5, 3)
    _, _, entropy, _ = agent.get_action_and_value(obs)
    expected = torch.distributions.Normal(agent.actor_mean(obs), agent.actor_logstd.exp()).entropy().sum(-1)
    assert entropy.shape == (5,) and torch.allclose(entropy, expected, atol=1e-5)


def test_layers_start_orthogonal_with_gains_sqrt2_001_and_1_zero_biases_and_the_initial_std():
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    agent = C.Agent(envs)
    for net in (agent.actor_mean, agent.critic):  # every hidden layer: orthogonal with gain sqrt(2)
        first, second = (layer.weight for layer in net.hidden)  # 64 x 3 (orthonormal columns), 64 x 64
        assert torch.allclose(first.T @ first, 2 * torch.eye(first.shape[1]), atol=1e-5)
        assert torch.allclose(second @ second.T, 2 * torch.eye(64), atol=1e-5)
    head = agent.actor_mean.head.weight  # orthogonal rows with gain 0.01
    assert torch.allclose(head @ head.T, 1e-4 * torch.eye(head.shape[0]), atol=1e-7)
    assert agent.critic.head.weight.norm().item() == pytest.approx(1.0, abs=1e-5)  # gain 1, one row
    assert all(layer.bias.abs().sum() == 0 for layer in agent.modules() if isinstance(layer, torch.nn.Linear))
    assert torch.allclose(agent.actor_logstd.exp(), torch.tensor(0.5))  # INIT_STD, as the README says
    envs.close()


def hand_mlp(mlp: C.MLP, x: torch.Tensor) -> torch.Tensor:
    """The 64-64 tanh MLP written out from its weights."""
    (first, second), head = mlp.hidden, mlp.head
    h = torch.tanh(x @ first.weight.T + first.bias)
    h = torch.tanh(h @ second.weight.T + second.bias)
    return h @ head.weight.T + head.bias


def test_actor_and_critic_are_two_tanh_hidden_layers_then_a_linear_head():
    agent = make_agent()
    with torch.no_grad():  # biases away from their zero init, so that every term of the forward shows
        for p in agent.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.3)
    x = 3.0 * torch.randn(64, OBS_DIM, generator=torch.Generator().manual_seed(0))  # tanh saturates: relu would not
    with torch.no_grad():
        greedy, _, _, value = agent.get_action_and_value(x, greedy=True)
    assert torch.allclose(greedy, hand_mlp(agent.actor_mean, x), atol=1e-6)
    assert torch.allclose(value, hand_mlp(agent.critic, x).squeeze(-1), atol=1e-6)


# --- end to end --------------------------------------------------------------------------------

TAGS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/learning_rate",
    "charts/SPS",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/old_approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
    "losses/ratio_max",
    "losses/ratio_min",
    "losses/grad_norm",
    "losses/epochs_done",
    "charts/kl_beta",
}


def test_a_run_logs_every_tag_anneals_the_rate_and_writes_a_summary_of_its_episodes(tmp_path):
    proc = run_script(
        tmp_path,
        "ppo_continuous.py",
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "2048",
        "--num-envs",
        "2",
        "--num-steps",
        "512",
        "--num-minibatches",
        "8",
        "--update-epochs",
        "2",
        "--target-kl",
        "0.05",
    )
    assert proc.returncode == 0, proc.stderr
    run = only_run(tmp_path)
    logged = scalars(run)
    assert TAGS <= logged.keys()
    assert [s for s, _ in logged["charts/learning_rate"]] == [1024, 2048]
    assert logged["charts/learning_rate"][1][1] == pytest.approx(3e-4 / 2)  # annealed
    assert len(logged["charts/episodic_return"]) == 10  # two envs x five 200-step episodes
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 2048 and summary["episodes"] == 10
    assert summary["mean_return_last_10"] == pytest.approx(np.mean([v for _, v in logged["charts/episodic_return"]]))
    assert "device: cpu" in proc.stdout


@pytest.mark.parametrize("objective", ["kl-adaptive", "kl-fixed", "none"])
def test_the_kl_and_unclipped_objectives_with_value_clipping_run_to_completion(tmp_path, objective):
    proc = run_script(
        tmp_path,
        "ppo_continuous.py",
        "--env-id",
        "Pendulum-v1",
        "--total-timesteps",
        "512",
        "--num-steps",
        "256",
        "--num-minibatches",
        "4",
        "--update-epochs",
        "2",
        "--objective",
        objective,
        "--clip-vloss",
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--env-id", "NoSuchEnv-v0"], "doesn't exist"),
        (["--env-id", "CartPole-v1"], "ppo_atari.py trains Atari games: neither does"),
        (["--num-minibatches", "3"], "does not divide"),
        (["--total-timesteps", "0"], "must be positive"),
        (["--total-timesteps", "100"], "less than one batch"),
        (["--num-envs", "-1"], "must be positive"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, flags, message):
    proc = run_script(tmp_path, "ppo_continuous.py", *flags)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not (tmp_path / "runs").exists()


def test_a_value_tyro_cannot_parse_exits_2_names_its_flag_and_writes_nothing(tmp_path):
    """docs/runs.md: a value tyro cannot parse at all (`--num-envs abc`) gets tyro's box naming the flag, exit 2."""
    proc = run_script(tmp_path, "ppo_continuous.py", "--num-envs", "abc")
    assert proc.returncode == 2
    assert proc.stdout == "" and "--num-envs" in proc.stderr and "abc" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no runs/, no videos/


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
@pytest.mark.parametrize("script", ["ppo_continuous.py", "ppo_atari.py"])
def test_track_without_wandb_is_one_line_exit_2_and_writes_nothing(tmp_path, script):
    proc = run_script(tmp_path, script, "--track", "--capture-video")  # refused before any env is made
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == ["error: --track needs Weights & Biases: pip install wandb"]
    assert list(tmp_path.iterdir()) == []  # no runs/, no videos/


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v4", "Walker2d-v5", "Ant-v4", "Humanoid-v5"])
def test_mujoco_ids_in_v4_and_v5_run_a_rollout(env_id):
    args = C.Args(env_id=env_id, num_envs=2, num_steps=8, num_minibatches=2, total_timesteps=16)
    assert C.check_args(args) is None
    envs = C.make_envs(args, "test")
    agent = C.Agent(envs)
    buf = C.Rollout.allocate(envs, args.num_steps, torch.device("cpu"))
    obs, _ = envs.reset(seed=0)
    C.collect_rollout(
        envs, agent, buf, C.EnvState(torch.as_tensor(obs), torch.zeros(2, dtype=torch.bool)), torch.device("cpu")
    )
    assert buf.obs.shape == (8, 2, *envs.single_observation_space.shape) and torch.isfinite(buf.obs).all()
    envs.close()


def test_float64_observation_statistics_come_back_from_a_checkpoint_bit_for_bit(tmp_path):
    """MuJoCo's observations are float64, so the running statistics turn float64 at their first update: a resumed run
    and an evaluation get them back exactly as saved, not rounded to a fresh wrapper's float32."""
    args = C.Args(env_id="InvertedPendulum-v4", num_envs=2)
    envs = C.make_envs(args, "trained")
    envs.reset(seed=0)
    for _ in range(5):
        envs.step(envs.action_space.sample())
    saved = C.normalization_state(envs)
    assert saved["obs_rms.mean"].dtype == torch.float64
    torch.save(saved, tmp_path / "state.pt")
    evaluated = C.make_eval_envs(args, "evaluated", torch.load(tmp_path / "state.pt", weights_only=True))
    for key, value in C.normalization_state(evaluated).items():
        assert value.dtype == saved[key].dtype and torch.equal(value, saved[key]), key
    envs.close()
    evaluated.close()


# the script run on a machine without libEGL (a GPU server without its graphics libraries): ctypes finds no
# EGL library and cannot open one under any name
NO_EGL = """
import ctypes, ctypes.util, runpy, sys
find, open_library = ctypes.util.find_library, ctypes.CDLL.__init__
ctypes.util.find_library = lambda name: None if name == "EGL" else find(name)
def refuse_egl(self, name, *args, **kwargs):
    if "libEGL" in str(name):
        raise OSError(f"{name}: cannot open shared object file")
    open_library(self, name, *args, **kwargs)
ctypes.CDLL.__init__ = refuse_egl
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""
TINY_CHEETAH = [
    *("--env-id", "HalfCheetah-v4", "--env-kwargs", json.dumps({"max_episode_steps": 16, "width": 64, "height": 64})),
    *("--num-envs", "1", "--num-steps", "32", "--num-minibatches", "1", "--update-epochs", "1"),
    *("--total-timesteps", "32", "--eval-episodes", "0"),
]


def test_a_machine_without_libegl_trains_on_mujoco(tmp_path, monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)  # the script's own choice, not the caller's
    command = [sys.executable, "-c", NO_EGL, str(ROOT / "ppo_continuous.py"), *TINY_CHEETAH]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-2000:]  # MUJOCO_GL=egl there: "cannot make HalfCheetah-v4 (...)"
    assert json.loads(proc.stdout.strip().splitlines()[-1])["global_step"] == 32


# the script imported on a machine with libEGL (found whether or not this one has it), printing MUJOCO_GL
WITH_EGL = f"""
import ctypes.util, os, sys
find = ctypes.util.find_library
ctypes.util.find_library = lambda name: "libEGL.so.1" if name == "EGL" else find(name)
sys.path.insert(0, {str(ROOT)!r})
import ppo_continuous
print(os.environ["MUJOCO_GL"])
"""


@pytest.mark.parametrize("given, used", [(None, "egl"), ("osmesa", "osmesa")], ids=["unset", "set"])
def test_mujoco_gl_is_egl_where_libegl_is_found_and_the_caller_left_it_unset(monkeypatch, given, used):
    """docs/runs.md: MUJOCO_GL=egl is set when unset and libEGL is found; a caller's own choice (osmesa) stands."""
    if given is None:
        monkeypatch.delenv("MUJOCO_GL", raising=False)
    else:
        monkeypatch.setenv("MUJOCO_GL", given)
    proc = subprocess.run([sys.executable, "-c", WITH_EGL], capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == used, proc.stderr[-2000:]


@pytest.mark.skipif(ctypes.util.find_library("EGL") is None, reason="needs libEGL: MuJoCo renders headless through it")
def test_capture_video_films_a_mujoco_env_on_a_machine_without_a_display(tmp_path, monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    proc = run_script(tmp_path, "ppo_continuous.py", *TINY_CHEETAH, "--capture-video")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "videos").glob("*/rl-video-episode-0.mp4"))  # the first 16-step episode, filmed


def test_under_torchrun_only_rank_0_films(monkeypatch):
    """--capture-video films env 0 of rank 0 alone: another rank would render for nothing into the same folder."""
    asked, make_env = {}, C.make_env

    def recording(env_id, idx, capture_video, run_name, env_kwargs):
        asked.setdefault(C.RANK, []).append(capture_video)
        return make_env(env_id, idx, False, run_name, env_kwargs)  # asked, not filmed: no rendering here

    monkeypatch.setattr(C, "make_env", recording)
    for rank in (0, 1):
        monkeypatch.setattr(C, "RANK", rank)
        C.make_envs(C.Args(env_id="Pendulum-v1", num_envs=2, capture_video=True), "run").close()
    assert asked[0][0] and not any(asked[1])  # make_env itself films its env 0 only


def test_capture_video_where_nothing_can_render_is_refused_in_one_line(tmp_path, monkeypatch):
    """No libEGL and no display (a GPU server): MuJoCo cannot film there. One line before anything is written,
    not mujoco's traceback (and GLFW's warnings) at the first reset."""
    for name in ("MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    command = [sys.executable, "-c", NO_EGL, str(ROOT / "ppo_continuous.py"), *TINY_CHEETAH, "--capture-video"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]  # before it only mujoco's and gymnasium's notes on HalfCheetah-v4
    assert last.startswith(
        "error: HalfCheetah-v4 failed when made, reset and stepped once, then rendered for --capture-video ("
    ), proc.stderr
    assert "Traceback" not in proc.stderr and "GLFWError" not in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "videos").exists()  # (mujoco leaves MUJOCO_LOG.TXT)


# --- learning ----------------------------------------------------------------------------------


def test_a_short_run_learns_to_balance_the_inverted_pendulum(tmp_path, monkeypatch):
    """A random policy balances for about 5-10 steps; 20k steps of PPO hold the pole far longer.
    A broken gradient, ratio, advantage or bootstrap fails this even when every unit passes."""
    monkeypatch.chdir(tmp_path)
    args = C.Args(env_id="InvertedPendulum-v4", num_steps=1024, total_timesteps=20480, eval_episodes=3)
    summary = C.main(args)
    assert summary["eval_mean_return"] >= 500, summary
    assert summary["mean_return_last_10"] >= 300, summary


def test_the_defaults_are_the_mujoco_settings_of_the_ppo_paper_and_cleanrl():
    """The paper's MuJoCo hyperparameters (T 2048, Adam 3e-4, K 10 epochs, minibatch 64, gamma 0.99, lambda 0.95,
    clip 0.2, one actor, 1M steps) and CleanRL's details beside them (no entropy bonus, the rate annealed, the
    gradient norm clipped to 0.5, Adam's epsilon 1e-5); test_atari.py pins the Atari script's."""
    args = C.Args()
    expected = dict(
        env_id="HalfCheetah-v4", total_timesteps=1_000_000, learning_rate=3e-4, num_envs=1, num_steps=2048,
        num_minibatches=32, update_epochs=10, clip_coef=0.2, ent_coef=0.0, anneal_lr=True, gamma=0.99,
        gae_lambda=0.95, norm_adv=True, objective="clip", clip_vloss=False, vf_coef=0.5, max_grad_norm=0.5,
        anneal_clip=False, target_kl=None, bootstrap_truncation=True, seed=1, eval_stochastic=False,
        kl_beta=1.0, kl_target=0.01,  # the paper's adaptive penalty: beta starts at 1, d_targ 0.01
        eval_episodes=10, torch_deterministic=True,  # the closing evaluation's 10 episodes (README, docs/runs.md)
        compile=False, bf16=False, async_envs=False, capture_video=False, track=False, cuda=True,  # README: opt-in
    )  # fmt: skip
    assert {name: getattr(args, name) for name in expected} == expected
    assert (args.batch_size, args.minibatch_size, args.num_iterations) == (2048, 64, 1_000_000 // 2048)
    assert C.ADAM_EPS == 1e-5  # the optimizer takes it (test_wiring.py)
