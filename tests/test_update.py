"""update() on a hand-made rollout: each promise of the PPO update checked by its effect on the
parameters, against an independent step-by-step restatement of the loss."""

import copy
import dataclasses

import numpy as np
import pytest
import torch
from conftest import ACT_DIM, OBS_DIM, N, T, args_for, make_agent, make_rollout, spy

import ppo_continuous as C


def reference_update(agent, buf, advantages, returns, args, perms, kl_beta, clip_coef, lr):
    """The PPO update written out step by step, with plain SGD, replaying the update's own shuffles
    (perms): drop the masked steps, then per minibatch normalize the advantages, form the ratio,
    the objective, the value loss, the entropy bonus, clip the gradient norm, step. Returns the
    per-minibatch losses and the log-ratios each minibatch saw."""
    keep = buf.real.flatten()
    b = {
        "obs": buf.obs.flatten(0, 1)[keep],
        "actions": buf.actions.flatten(0, 1)[keep],
        "logprobs": buf.logprobs.flatten()[keep],
        "values": buf.values.flatten()[keep],
        "adv": advantages.flatten()[keep],
        "returns": returns.flatten()[keep],
    }
    params = list(agent.parameters())
    record = {"pg": [], "v": [], "ent": [], "logratio": [], "grad_norm": []}
    for perm in perms:
        for mb in C.minibatch_slices(len(perm), args.num_minibatches):
            idx = perm[mb]
            mean = agent.actor_mean(b["obs"][idx])
            std = agent.actor_logstd.exp().expand_as(mean)
            dist = torch.distributions.Normal(mean, std)
            newlogprob = dist.log_prob(b["actions"][idx]).sum(-1)
            entropy = dist.entropy().sum(-1).mean()
            newvalue = agent.critic(b["obs"][idx]).squeeze(-1)
            logratio = newlogprob - b["logprobs"][idx]
            ratio = logratio.exp()
            adv = b["adv"][idx]
            if args.norm_adv:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            if args.objective == "clip":
                pg = -torch.min(ratio * adv, ratio.clamp(1 - clip_coef, 1 + clip_coef) * adv).mean()
            elif args.objective == "none":
                pg = -(ratio * adv).mean()
            else:  # the k3 estimate of KL(old || new)
                pg = -(ratio * adv).mean() + kl_beta * ((ratio - 1) - logratio).mean()
            err = (newvalue - b["returns"][idx]).square()
            if args.clip_vloss:
                old = b["values"][idx]
                clipped = old + (newvalue - old).clamp(-clip_coef, clip_coef)
                err = torch.max(err, (clipped - b["returns"][idx]).square())
            v = 0.5 * err.mean()
            loss = pg - args.ent_coef * entropy + args.vf_coef * v
            grads = torch.autograd.grad(loss, params)
            norm = torch.sqrt(sum(g.square().sum() for g in grads))
            scale = min(1.0, args.max_grad_norm / (float(norm) + 1e-6))
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p -= lr * scale * g
            for key, value in zip(("pg", "v", "ent", "logratio", "grad_norm"), (pg, v, entropy, logratio, norm)):
                record[key].append(value.detach())
    return record


def run_update(agent, buf, advantages, returns, args, monkeypatch, kl_beta=1.0, clip_coef=None, lr=0.05):
    """update() with plain SGD, recording the permutations it draws."""
    perms = []
    real_randperm = torch.randperm

    def recording_randperm(*a, **k):
        perms.append(real_randperm(*a, **k))
        return perms[-1]

    monkeypatch.setattr(torch, "randperm", recording_randperm)
    optimizer = torch.optim.SGD(agent.parameters(), lr=lr)
    clip_coef = args.clip_coef if clip_coef is None else clip_coef
    metrics = C.update(agent, optimizer, buf, advantages, returns, args, kl_beta, clip_coef)
    monkeypatch.setattr(torch, "randperm", real_randperm)
    return metrics, perms


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"objective": "none"},
        {"objective": "kl-fixed", "kl_beta": 3.0},
        {"clip_vloss": True, "vf_coef": 1.3},
        {"norm_adv": False, "ent_coef": 0.2, "max_grad_norm": 0.05},
        {"clip_vloss": True, "annealed_clip": 0.07},
    ],
    ids=["clip", "none", "kl", "clip-vloss", "raw-adv-entropy-gradclip", "annealed-clip"],
)
def test_update_takes_exactly_the_steps_of_the_ppo_loss_written_out(monkeypatch, overrides):
    """Pairing through the shuffle, the mask, per-minibatch normalization, the ratio's direction,
    the objective, the coefficients' sign and weight, the norm clip, the clip range passed in (annealed,
    for the policy and the value alike): all by the parameters reached."""
    overrides = dict(overrides)
    clip_coef = overrides.pop("annealed_clip", None)
    args = args_for(**overrides)
    clip_coef = args.clip_coef if clip_coef is None else clip_coef
    agent = make_agent()
    buf, advantages, returns = make_rollout(agent)
    reference = copy.deepcopy(agent)
    metrics, perms = run_update(agent, buf, advantages, returns, args, monkeypatch, args.kl_beta, clip_coef)
    assert len(perms) == args.update_epochs and len(perms[0]) == int(buf.real.sum())
    record = reference_update(reference, buf, advantages, returns, args, perms, args.kl_beta, clip_coef, 0.05)
    for (name, p), q in zip(agent.named_parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-5), name
    moved = sum((p - q).abs().sum() for p, q in zip(agent.parameters(), make_agent().parameters()))
    assert moved > 0.1  # the update did move the parameters
    # the metrics average over every minibatch of every epoch, not the last one
    assert metrics["losses/policy_loss"] == pytest.approx(torch.stack(record["pg"]).mean().item(), abs=1e-5)
    assert metrics["losses/value_loss"] == pytest.approx(torch.stack(record["v"]).mean().item(), rel=1e-5)
    assert metrics["losses/entropy"] == pytest.approx(torch.stack(record["ent"]).mean().item(), rel=1e-5)
    logratio = torch.cat(record["logratio"])
    assert metrics["losses/approx_kl"] == pytest.approx(((logratio.exp() - 1) - logratio).mean().item(), rel=1e-4)
    assert metrics["losses/old_approx_kl"] == pytest.approx((-logratio).mean().item(), rel=1e-4, abs=1e-7)
    clipped = ((logratio.exp() - 1).abs() > clip_coef).float().mean().item()
    assert metrics["losses/clipfrac"] == pytest.approx(clipped)
    assert metrics["losses/ratio_max"] == pytest.approx(logratio.exp().max().item(), rel=1e-5)
    assert metrics["losses/ratio_min"] == pytest.approx(logratio.exp().min().item(), rel=1e-5)
    assert metrics["losses/grad_norm"] == pytest.approx(torch.stack(record["grad_norm"]).mean().item(), rel=1e-4)
    assert metrics["losses/epochs_done"] == args.update_epochs
    keep = buf.real
    values, targets = buf.values[keep], returns[keep]
    explained = 1 - (targets - values).var() / targets.var()
    assert metrics["losses/explained_variance"] == pytest.approx(explained.item(), rel=1e-5)


def test_masked_autoreset_steps_have_no_influence(monkeypatch):
    agent_a, agent_b = make_agent(), make_agent()
    buf, advantages, returns = make_rollout(agent_a)
    garbage = copy.deepcopy(buf)
    masked = ~buf.real
    garbage.obs[masked] = 100.0
    garbage.actions[masked] = -50.0
    garbage.logprobs[masked] = -1e3
    garbage.values[masked] = 1e3
    adv_b, ret_b = advantages.clone(), returns.clone()
    adv_b[masked], ret_b[masked] = 1e4, -1e4
    optimizer_a = torch.optim.Adam(agent_a.parameters(), lr=1e-2)
    optimizer_b = torch.optim.Adam(agent_b.parameters(), lr=1e-2)
    args = args_for()
    torch.manual_seed(5)
    C.update(agent_a, optimizer_a, buf, advantages, returns, args, 1.0, args.clip_coef)
    torch.manual_seed(5)
    C.update(agent_b, optimizer_b, garbage, adv_b, ret_b, args, 1.0, args.clip_coef)
    for p, q in zip(agent_a.parameters(), agent_b.parameters()):
        assert torch.equal(p, q)


def test_positive_advantages_raise_the_probability_of_their_actions(monkeypatch):
    """The ratio is pi/pi_old: one step on a fresh rollout moves log-probs in the advantage's direction."""
    agent = make_agent()
    buf, _, returns = make_rollout(agent)
    with torch.no_grad():
        _, logp, _, _ = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
    buf.logprobs = logp.view(T, N)  # on-policy: every ratio starts at exactly 1
    advantages = torch.where(torch.arange(T * N).view(T, N) % 2 == 0, 1.0, -1.0)
    for objective in ("clip", "none", "kl-adaptive"):
        candidate = copy.deepcopy(agent)
        optimizer = torch.optim.SGD(candidate.parameters(), lr=0.01)
        args = args_for(num_minibatches=1, update_epochs=1, objective=objective, norm_adv=False, ent_coef=0.0)
        C.update(candidate, optimizer, buf, advantages, returns, args, 1.0, 0.2)
        with torch.no_grad():
            _, new, _, _ = candidate.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
        change = (new - logp).view(T, N)
        assert (advantages * change)[buf.real].mean() > 0, objective  # the surrogate rose


def count_steps(optimizer: torch.optim.Optimizer) -> int:
    return int(next(iter(optimizer.state.values()))["step"])


def test_target_kl_stops_the_epochs_and_epochs_done_says_when():
    args = args_for(update_epochs=8, num_minibatches=4, ent_coef=0.0)
    done = {}
    for target_kl in (None, 0.02, 1e-9):
        agent = make_agent()
        buf, advantages, returns = make_rollout(agent)
        with torch.no_grad():
            _, logp, _, _ = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
        buf.logprobs = logp.view(T, N)  # on-policy: the first minibatch's KL is zero
        optimizer = torch.optim.Adam(agent.parameters(), lr=1e-4)
        torch.manual_seed(0)
        run_args = dataclasses.replace(args, target_kl=target_kl)
        metrics = C.update(agent, optimizer, buf, advantages, returns, run_args, 1.0, 0.2)
        done[target_kl] = (metrics["losses/epochs_done"], count_steps(optimizer))
    assert done[None] == (8, 32)
    assert done[1e-9] == (0.25, 1)  # one step (a quarter epoch), then the next minibatch already exceeds the target
    epochs, steps = done[0.02]
    assert 0 < epochs < 8 and epochs == steps / 4 and steps % 4  # stopped within an epoch: the steps, in epochs


def test_target_kl_stops_at_the_first_minibatch_whose_mean_kl_exceeds_it(monkeypatch):
    kls = []
    spy(monkeypatch, C, "kl_k3", after=lambda kl, logratio: kls.append(kl.mean().item()))
    agent = make_agent()
    buf, advantages, returns = make_rollout(agent)
    with torch.no_grad():
        _, logp, _, _ = agent.get_action_and_value(buf.obs.flatten(0, 1), buf.actions.flatten(0, 1))
    buf.logprobs = logp.view(T, N)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-4)
    torch.manual_seed(0)
    C.update(agent, optimizer, buf, advantages, returns, args_for(update_epochs=8, target_kl=0.01), 1.0, 0.2)
    steps = count_steps(optimizer)
    assert all(kl <= 0.01 for kl in kls[:steps])  # every minibatch stepped on was within the target
    assert kls[steps] > 0.01  # the one that stopped the update was past it, by its mean


def test_advantage_normalization_removes_scale_and_shift(monkeypatch):
    results = {}
    for norm_adv in (True, False):
        for scale, shift in ((1.0, 0.0), (3.0, 5.0)):
            agent = make_agent()
            buf, advantages, returns = make_rollout(agent)
            optimizer = torch.optim.SGD(agent.parameters(), lr=0.05)
            torch.manual_seed(3)
            args = args_for(norm_adv=norm_adv)
            C.update(agent, optimizer, buf, scale * advantages + shift, returns, args, 1.0, 0.2)
            results[norm_adv, scale] = torch.cat([p.flatten() for p in agent.parameters()])
    assert torch.allclose(results[True, 1.0], results[True, 3.0], atol=1e-5)
    assert not torch.allclose(results[False, 1.0], results[False, 3.0], atol=1e-3)


def test_advantage_normalization_brings_nearly_equal_advantages_to_unit_scale(monkeypatch):
    """ADV_EPS only keeps a zero std finite: advantages spread by 1e-6 (a sparse reward's nearly equal ones) come
    out with std about 1, not shrunk toward 0 by an epsilon near their spread."""
    agent = make_agent()
    buf, advantages, returns = make_rollout(agent)
    calls = spy(monkeypatch, C, "policy_loss")
    args = args_for()
    optimizer = torch.optim.SGD(agent.parameters(), lr=0.05)
    C.update(agent, optimizer, buf, 1e-6 * advantages / advantages.std() + 3e-6, returns, args, 1.0, 0.2)
    stds = [float(call[0][1].std()) for call in calls]  # policy_loss(ratio, mb_advantages, ...)
    assert len(stds) == args.update_epochs * args.num_minibatches and all(0.95 < s < 1.05 for s in stds), stds


def test_gradient_norm_is_clipped_to_max_grad_norm_and_logged_before_clipping():
    agent = make_agent()
    before = torch.cat([p.detach().flatten() for p in agent.parameters()])
    buf, advantages, returns = make_rollout(agent)
    optimizer = torch.optim.SGD(agent.parameters(), lr=1.0)
    args = args_for(num_minibatches=1, update_epochs=1, max_grad_norm=1e-3)
    metrics = C.update(agent, optimizer, buf, advantages, returns, args, 1.0, 0.2)
    step = torch.cat([p.detach().flatten() for p in agent.parameters()]) - before
    assert step.norm().item() == pytest.approx(1e-3, rel=1e-3)  # lr 1: the step is the clipped gradient
    assert metrics["losses/grad_norm"] > 0.1  # the norm before clipping


def test_value_coefficient_weights_the_critic_and_entropy_coefficient_widens_the_policy():
    buf_agent = make_agent()
    buf, advantages, returns = make_rollout(buf_agent)
    moved = {}
    for vf_coef, ent_coef in ((0.0, 0.0), (0.5, 0.0), (0.0, 0.5)):
        agent = make_agent()
        critic_before = [p.clone() for p in agent.critic.parameters()]
        std_before = agent.actor_logstd.detach().clone()
        optimizer = torch.optim.SGD(agent.parameters(), lr=0.05)
        args = args_for(objective="none", vf_coef=vf_coef, ent_coef=ent_coef, norm_adv=True, max_grad_norm=1e9)
        C.update(agent, optimizer, buf, advantages * 0, returns, args, 1.0, 0.2)  # no policy gradient at all
        critic = sum((p - q).abs().sum().item() for p, q in zip(agent.critic.parameters(), critic_before))
        moved[vf_coef, ent_coef] = (critic, (agent.actor_logstd - std_before).sum().item())
    assert moved[0.0, 0.0] == (0.0, 0.0)
    assert moved[0.5, 0.0][0] > 0 and moved[0.5, 0.0][1] == 0.0  # the value loss trains the critic only
    assert moved[0.0, 0.5][0] == 0.0 and moved[0.0, 0.5][1] > 0  # the entropy bonus raises the std


def test_kl_penalty_weight_holds_the_policy_back_and_final_kl_measures_the_whole_update():
    kls = {}
    for kl_beta in (0.0, 30.0):
        agent = make_agent()
        buf, advantages, returns = make_rollout(agent)
        old = copy.deepcopy(agent)
        optimizer = torch.optim.Adam(agent.parameters(), lr=1e-2)
        torch.manual_seed(0)
        args = args_for(objective="kl-adaptive", update_epochs=4)
        metrics = C.update(agent, optimizer, buf, advantages, returns, args, kl_beta, 0.2)
        keep = buf.real.flatten()
        obs, actions = buf.obs.flatten(0, 1)[keep], buf.actions.flatten(0, 1)[keep]
        with torch.no_grad():
            _, new, _, _ = agent.get_action_and_value(obs, actions)
        logratio = new - buf.logprobs.flatten()[keep]
        assert metrics["losses/final_kl"] == pytest.approx(((logratio.exp() - 1) - logratio).mean().item(), rel=1e-4)
        with torch.no_grad():  # the true KL between the Gaussians before and after the update
            m0, m1 = old.actor_mean(obs), agent.actor_mean(obs)
            s0, s1 = old.actor_logstd.exp(), agent.actor_logstd.exp()
            kls[kl_beta] = (torch.log(s1 / s0) + (s0**2 + (m0 - m1) ** 2) / (2 * s1**2) - 0.5).sum(-1).mean().item()
    assert kls[30.0] < 0.5 * kls[0.0]


def test_sampled_actions_follow_the_policys_gaussian_and_are_scored_and_valued_by_it():
    agent = make_agent()
    with torch.no_grad():
        agent.actor_logstd.fill_(float(np.log(0.5)))
    torch.manual_seed(0)
    obs = torch.randn(20_000, OBS_DIM)
    with torch.inference_mode():
        actions, logprob, _, value = agent.get_action_and_value(obs)
        mean = agent.actor_mean(obs)
        noise = (actions - mean) / 0.5  # standard normal if the call samples N(mean, 0.5^2)
        assert noise.mean(0).abs().max() < 0.03
        assert noise.std(0).tolist() == pytest.approx([1.0] * ACT_DIM, rel=0.03)
        assert (noise.abs() < 1).float().mean().item() == pytest.approx(0.6827, abs=0.01)  # a Gaussian's share
        expected = torch.distributions.Normal(mean, 0.5).log_prob(actions).sum(-1)
        assert torch.allclose(logprob, expected, atol=1e-4)
        assert torch.equal(value, agent.get_value(obs))
