"""ppo_gridworld.py: the exercises, GAE, the exact solver, and the learning results."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ppo_gridworld as G

ROOT = Path(__file__).resolve().parent.parent


# --- the clip's gradient: the six-cell table ------------------------------------------------


@pytest.mark.parametrize(
    "rho, adv, zero",
    [
        (1.5, 1.0, True),  # A > 0, ratio above 1+eps: clipped, no gradient
        (1.0, 1.0, False),  # A > 0, inside the band
        (0.5, 1.0, False),  # A > 0, ratio fell below 1-eps: the min keeps the unclipped term
        (0.5, -1.0, True),  # A < 0, ratio below 1-eps: clipped, no gradient
        (1.0, -1.0, False),  # A < 0, inside the band
        (1.5, -1.0, False),  # A < 0, ratio rose above 1+eps: unclipped term, full gradient
    ],
)
def test_clip_gradient_is_zero_in_exactly_two_cells(rho, adv, zero):
    eps = 0.2
    logp_old = np.array([-1.0])
    logp_new = logp_old + np.log(rho)
    loss, grad = G.ppo_clip_loss(logp_new, logp_old, np.array([adv]), eps)
    d_loss_d_rho = grad[0] / rho  # chain rule: d logp = d rho / rho
    assert d_loss_d_rho == pytest.approx(0.0 if zero else -adv)  # the loss is the negated objective
    # finite differences in rho
    h = 1e-6
    up, _ = G.ppo_clip_loss(np.log(np.array([rho + h])) + logp_old, logp_old, np.array([adv]), eps)
    down, _ = G.ppo_clip_loss(np.log(np.array([rho - h])) + logp_old, logp_old, np.array([adv]), eps)
    assert (up - down) / (2 * h) == pytest.approx(d_loss_d_rho, abs=1e-6)


def test_clip_loss_gradient_matches_finite_differences_on_a_batch():
    rng = np.random.default_rng(0)
    logp_old = rng.normal(size=20)
    logp_new = logp_old + rng.normal(scale=0.3, size=20)
    adv = rng.normal(size=20)
    _, grad = G.ppo_clip_loss(logp_new, logp_old, adv, 0.2)
    h = 1e-6
    for i in range(20):
        e = np.zeros(20)
        e[i] = h
        numeric = (
            G.ppo_clip_loss(logp_new + e, logp_old, adv, 0.2)[0] - G.ppo_clip_loss(logp_new - e, logp_old, adv, 0.2)[0]
        ) / (2 * h)
        assert grad[i] == pytest.approx(numeric, abs=1e-6)


def test_value_loss_and_its_clipped_gradient():
    rng = np.random.default_rng(1)
    v_old, returns = rng.normal(size=30), rng.normal(size=30)
    v_new = v_old + rng.normal(scale=0.5, size=30)
    loss, grad = G.ppo_value_loss(v_new, v_old, returns)
    assert loss == pytest.approx(0.5 * np.mean((v_new - returns) ** 2))
    for clip in (None, 0.2):
        _, grad = G.ppo_value_loss(v_new, v_old, returns, clip)
        h = 1e-6
        for i in range(30):
            e = np.zeros(30)
            e[i] = h
            numeric = (
                G.ppo_value_loss(v_new + e, v_old, returns, clip)[0]
                - G.ppo_value_loss(v_new - e, v_old, returns, clip)[0]
            ) / (2 * h)
            assert grad[i] == pytest.approx(numeric, abs=1e-6)
    clipped_loss, _ = G.ppo_value_loss(v_new, v_old, returns, 0.2)
    assert clipped_loss >= loss  # the clipped loss is the pessimistic (larger) one


# --- KL geometry, importance sampling, the natural step ------------------------------------


def test_the_same_logit_step_moves_kl_very_differently():
    near = G.kl_divergence(G.softmax(np.array([0.0, 0.0])), G.softmax(np.array([1.0, 0.0])))
    far = G.kl_divergence(G.softmax(np.array([6.0, 0.0])), G.softmax(np.array([7.0, 0.0])))
    assert near == pytest.approx(0.12, abs=0.005)
    assert far == pytest.approx(0.0009, abs=0.0001)
    assert near / far > 100


def test_importance_sampling_is_unbiased_and_its_ess_falls_with_the_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=200_000)  # samples of q = N(0, 1)
    ess = []
    for shift in (0.0, 0.5, 1.0, 2.0):
        logp_target = -0.5 * (x - shift) ** 2  # p = N(shift, 1); the normalizers cancel
        logp_behavior = -0.5 * x**2
        if shift <= 1.0:  # E_p[x] = shift; at larger shifts the variance swamps the estimate
            assert G.importance_estimate(x, logp_target, logp_behavior) == pytest.approx(shift, abs=0.03)
        ess.append(G.effective_sample_size(np.exp(logp_target - logp_behavior)))
    assert ess[0] == pytest.approx(len(x))
    assert all(a > b for a, b in zip(ess, ess[1:]))
    # for unit Gaussians E_q[w^2] = exp(shift^2), so ESS ~ n / exp(shift^2)
    assert ess[2] / len(x) == pytest.approx(np.exp(-1.0), rel=0.05)


def test_natural_step_is_the_exponential_tilt_and_meets_the_kl_limit():
    rng = np.random.default_rng(2)
    z, adv = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    delta = 0.01
    z_new = G.natural_step(z, adv, delta)
    eta = (z_new - z) / adv
    assert np.allclose(eta, eta.flat[0])  # the logits moved by one multiple of the advantage
    tilt = G.softmax(z) * np.exp(eta.flat[0] * adv)
    assert np.allclose(G.softmax(z_new), tilt / tilt.sum(-1, keepdims=True))
    kl = np.mean(G.kl_divergence(G.softmax(z), G.softmax(z_new)))
    assert delta / 4 < kl <= delta


# --- GAE and the exact solver ----------------------------------------------------------------


def test_gae_with_a_termination_a_truncation_and_an_unfinished_tail():
    gamma, lam = 0.9, 0.5
    # one env, 5 steps: step 1 terminates, step 3 is truncated, step 4 is cut off by the rollout
    rewards = np.array([[1.0], [2.0], [0.0], [3.0], [1.0]])
    values = np.array([[0.5], [1.0], [0.2], [0.4], [0.3]])
    next_values = np.array([[1.0], [7.0], [0.4], [2.0], [0.6]])  # V(s_{t+1}); 7.0 must be ignored
    terminations = np.array([[False], [True], [False], [False], [False]])
    truncations = np.array([[False], [False], [False], [True], [False]])
    adv, ret = G.compute_gae(rewards, values, next_values, terminations, truncations, gamma, lam)
    d4 = 1.0 + 0.9 * 0.6 - 0.3  # unfinished tail: bootstrap from V(s_5)
    d3 = 3.0 + 0.9 * 2.0 - 0.4  # truncated: bootstrap from the final cell, no flow from step 4
    d2 = 0.0 + 0.9 * 0.4 - 0.2
    d1 = 2.0 - 1.0  # terminated: no future at all
    d0 = 1.0 + 0.9 * 1.0 - 0.5
    expected = [d0 + 0.45 * d1, d1, d2 + 0.45 * d3, d3, d4]
    assert adv[:, 0] == pytest.approx(expected)
    assert ret == pytest.approx(adv + values)


def test_value_iteration_and_policy_evaluation_on_a_hand_solved_mdp():
    # two states, two actions: in s0, a0 stays (reward 1), a1 moves to the absorbing s1 (reward 5)
    P = np.zeros((2, 2, 2))
    P[0, 0, 0] = 1.0
    P[0, 1, 1] = 1.0
    P[1, :, 1] = 1.0
    R = np.array([[1.0, 5.0], [0.0, 0.0]])
    gamma = 0.9
    V, Q = G.value_iteration(P, R, gamma)
    # staying forever is worth 1/(1-0.9) = 10 > 5
    assert V == pytest.approx([10.0, 0.0])
    assert Q[0] == pytest.approx([10.0, 5.0])
    V_half = G.policy_evaluation(P, R, np.array([[0.5, 0.5], [0.5, 0.5]]), gamma)
    # V = 0.5 (1 + 0.9 V) + 0.5 * 5  =>  V = 3 / 0.55
    assert V_half[0] == pytest.approx(3 / 0.55)


def test_the_gridworld_separates_the_random_walker_from_the_optimum():
    P, R = G.dynamics()
    assert np.allclose(P[~G.TERMINAL].sum(-1), 1.0)
    uniform = np.full((G.NUM_STATES, G.NUM_ACTIONS), 1 / G.NUM_ACTIONS)
    assert G.policy_evaluation(P, R, uniform, 0.9)[G.START] < -0.3
    assert G.value_iteration(P, R, 0.9)[0][G.START] > 0.3


def test_environment_truncates_after_the_time_limit(monkeypatch):
    monkeypatch.setattr(G, "SLIP", 0.0)
    envs = G.GridEnvs(1, np.random.default_rng(0))
    for _ in range(G.MAX_EPISODE_STEPS - 1):
        _, _, terminated, truncated, _, _ = envs.step(np.array([0]))  # bump into the top wall
        assert not (terminated[0] or truncated[0])
    state, _, terminated, truncated, final_state, _ = envs.step(np.array([0]))
    assert truncated[0] and not terminated[0] and final_state[0] == G.START
    assert state[0] == G.START  # reset in the same step; the final cell is returned apart


def run_script(tmp_path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "ppo_gridworld.py"), *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- learning, end to end ----------------------------------------------------------------------


def test_default_run_reaches_the_optimum():
    _, result = G.train(G.Args(), verbose=False)
    assert result["optimal_return"] - result["true_return"] <= G.NEAR_OPTIMAL
    assert result["greedy_optimal_fraction"] == 1.0
    assert result["critic_max_error"] < 0.15
    assert result["global_step"] == 40 * 16 * 32


@pytest.mark.parametrize("objective", ["kl-adaptive", "kl-fixed", "none"])
def test_other_objectives_learn(objective):
    _, result = G.train(G.Args(objective=objective), verbose=False)
    assert result["true_return"] > 0.3


def test_ablation_shows_what_the_clip_is_for():
    table = G.run_ablation(G.Args())
    v_star = table["optimal_return"]
    clip = table["runs"]["clip"]
    none = table["runs"]["none"]
    assert all(r["true_return"] > v_star - 0.1 for r in clip)
    collapsed = [r for r in none if r["true_return"] < 0 and r["entropy_start"] < 0.05]
    assert len(collapsed) >= 2


def test_script_writes_summary_and_tensorboard(tmp_path):
    proc = run_script(tmp_path, "--num-iterations", "3")
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert {"true_return", "optimal_return", "greedy_optimal_fraction", "critic_max_error"} <= summary.keys()
    assert list(run.glob("events.out.tfevents.*"))


def test_surrogate_study_writes_table_and_plot(tmp_path):
    proc = run_script(tmp_path, "--surrogate-study")
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "runs").iterdir()
    rows = json.loads((run / "surrogate_study.json").read_text())["rows"]
    assert rows[0]["surrogate"] == pytest.approx(rows[0]["true_return"])  # L(pi) = J(pi)
    small = [r for r in rows if r["max_kl"] < 0.01]
    assert all(abs(r["surrogate"] - r["true_return"]) < 0.01 for r in small)  # first-order agreement
    assert (run / "surrogate_study.png").stat().st_size > 0


@pytest.mark.parametrize(
    "flags", [["--num-minibatches", "3"], ["--num-envs", "0"], ["--gamma", "1.5"], ["--ablation", "--surrogate-study"]]
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags):
    proc = run_script(tmp_path, *flags)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
