"""Resume, evaluation, the non-finite stop and learning, through ppo_continuous.py's main in-process:
a resumed run holds exactly the state the uninterrupted run had; evaluation changes nothing it
should not; a fault keeps the last good checkpoint; a short run really learns."""

import copy
import dataclasses
import json
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import only_run, scalars, spy
from test_wiring import ResetSeeds, VectorRecorder

import ppo_atari as A
import ppo_continuous as C

RUN = dict(
    env_id="Pendulum-v1",
    num_envs=2,
    num_steps=200,
    num_minibatches=4,
    update_epochs=2,
    total_timesteps=1600,  # 4 iterations of 400 steps
    eval_episodes=0,
    objective="kl-adaptive",  # so that beta is state that must survive too
    kl_target=0.003,
)
STOP_AT = 2  # the interrupted run stops after this iteration


def live_state(record: list, monkeypatch):
    """Record, at the start of every iteration, the state a checkpoint carries as the run holds it:
    parameters, normalization statistics and RNG streams before the rollout; optimizer moments,
    learning rate, clip and beta before the update."""

    def before_rollout(envs, agent, buf, state, device):
        record.append(
            {
                "agent": {k: v.clone() for k, v in agent.state_dict().items()},
                "normalization": {k: v.clone() for k, v in C.normalization_state(envs).items()},
                "rng": C.rng_state(),
            }
        )

    def before_update(agent, optimizer, buf, advantages, returns, args, kl_beta, clip_coef):
        record[-1] |= {
            "optimizer": copy.deepcopy(optimizer.state_dict()),  # a copy: the moments change in place
            "lr": optimizer.param_groups[0]["lr"],
            "kl_beta": kl_beta,
            "clip_coef": clip_coef,
        }

    spy(monkeypatch, C, "collect_rollout", before=before_rollout)
    spy(monkeypatch, C, "update", before=before_update)


def assert_same(a, b, path="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    else:
        assert a == b, path


def test_resumed_run_holds_exactly_the_uninterrupted_state_and_keeps_learning(tmp_path, monkeypatch):
    # the uninterrupted run
    (tmp_path / "whole").mkdir()
    monkeypatch.chdir(tmp_path / "whole")
    whole: list = []
    with monkeypatch.context() as m:
        live_state(whole, m)
        C.main(C.Args(**RUN))
    # the same run, stopped by SIGINT during iteration STOP_AT ...
    (tmp_path / "cut").mkdir()
    monkeypatch.chdir(tmp_path / "cut")
    with monkeypatch.context() as m:
        calls = []

        def interrupt_during(envs, agent, buf, state, device):
            calls.append(1)
            if len(calls) == STOP_AT:
                os.kill(os.getpid(), signal.SIGINT)

        spy(m, C, "collect_rollout", before=interrupt_during)
        with pytest.raises(SystemExit) as stop:
            C.main(C.Args(**RUN))
    assert stop.value.code == 128 + signal.SIGINT
    checkpoint = only_run(tmp_path / "cut") / C.CHECKPOINT
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["progress"]["iteration"] == STOP_AT
    # ... and resumed: the state it goes on from is the uninterrupted run's, bit for bit
    resumed: list = []
    with monkeypatch.context() as m:
        live_state(resumed, m)
        real = C.make_env
        m.setattr(C, "make_env", lambda *a: lambda: ResetSeeds(real(*a)()))
        ResetSeeds.log = []
        C.main(C.Args(resume=str(checkpoint)))
    reset_seeds = {seed for seed, _ in ResetSeeds.log if seed is not None}
    first_seeds = {RUN.get("seed", 1) + i for i in range(RUN["num_envs"])}
    assert reset_seeds and not reset_seeds & first_seeds  # fresh episodes, not a replay of the first ones
    assert len(resumed) == len(whole) - STOP_AT
    assert_same(resumed[0], whole[STOP_AT])
    assert resumed[0]["kl_beta"] != RUN.get("kl_beta", 1.0)  # beta had adapted, and came back

    # it goes on updating everything: nothing stays frozen at the checkpoint's values
    final = torch.load(checkpoint, weights_only=True)
    assert final["progress"]["global_step"] == RUN["total_timesteps"]
    for key in ("obs_rms.count", "return_rms.count"):
        assert final["normalization"][key] > saved["normalization"][key]
    assert not torch.equal(final["normalization"]["obs_rms.mean"], saved["normalization"]["obs_rms.mean"])
    assert any(not torch.equal(final["agent"][k], saved["agent"][k]) for k in saved["agent"])
    steps = [s["step"] for s in final["optimizer"]["state"].values()]
    assert all(s > t["step"] for s, t in zip(steps, saved["optimizer"]["state"].values()))

    # one TensorBoard history: each iteration logged once, none missing
    logged = scalars(only_run(tmp_path / "cut"))
    batch = RUN["num_envs"] * RUN["num_steps"]
    expected_steps = list(range(batch, RUN["total_timesteps"] + 1, batch))
    for tag in ("charts/learning_rate", "losses/policy_loss", "charts/kl_beta"):
        assert [s for s, _ in logged[tag]] == expected_steps, tag
    whole_logged = scalars(only_run(tmp_path / "whole"))
    assert logged["charts/learning_rate"] == whole_logged["charts/learning_rate"]
    assert logged["charts/kl_beta"][:STOP_AT] == whole_logged["charts/kl_beta"][:STOP_AT]


def test_a_fault_after_a_good_checkpoint_leaves_it_byte_identical(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    good = {}

    def keep_bytes(result, path, *args):
        good["bytes"] = open(path, "rb").read()

    def poison_third(metrics, agent, *args):
        if len(updates) == 3:
            with torch.no_grad():
                agent.actor_logstd.fill_(float("nan"))

    updates = spy(monkeypatch, C, "update", after=poison_third)
    spy(monkeypatch, C, "save_checkpoint", after=keep_bytes)
    args = C.Args(**(RUN | {"save_every": 1, "total_timesteps": 2000}))
    with pytest.raises(SystemExit) as stop:
        C.main(args)
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: non-finite") and "iteration 3" in err[-1] and "untouched" in err[-1]
    run_dir = only_run(tmp_path)
    assert (run_dir / C.CHECKPOINT).read_bytes() == good["bytes"]  # iteration 2's, byte for byte
    assert C.load_checkpoint(str(run_dir / C.CHECKPOINT))["progress"]["iteration"] == 2
    assert [s for s, _ in scalars(run_dir)["charts/learning_rate"]] == [400, 800]  # the log up to the fault
    assert not (run_dir / "summary.json").exists()


# --- evaluation --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A short run's checkpoint, and its training environments' reset seeds."""
    folder = tmp_path_factory.mktemp("trained")
    cwd = os.getcwd()
    os.chdir(folder)
    with pytest.MonkeyPatch.context() as m:
        real = C.make_env
        m.setattr(C, "make_env", lambda *a: lambda: ResetSeeds(real(*a)()))
        ResetSeeds.log = []
        C.main(C.Args(**(RUN | {"total_timesteps": 800, "seed": 3})))
        training_seeds = {s for s, _ in ResetSeeds.log if s is not None}
    os.chdir(cwd)
    return only_run(folder) / C.CHECKPOINT, training_seeds


def eval_envs_for(checkpoint):
    ckpt = C.load_checkpoint(str(checkpoint))
    envs = VectorRecorder(C.make_eval_envs(ckpt["args"], "test", ckpt["normalization"]))
    agent = C.Agent(envs)
    C.restore_agent(ckpt, envs, agent, None, frozen=True)
    return ckpt, envs, agent


@pytest.mark.parametrize("greedy", [True, False])
def test_evaluation_leaves_the_statistics_unchanged(trained, greedy):
    ckpt, envs, agent = eval_envs_for(trained[0])
    C.evaluate(envs, agent, 2, greedy, 123, torch.device("cpu"))
    assert_same(C.normalization_state(envs), ckpt["normalization"])
    envs.close()


def test_greedy_evaluation_takes_the_mean_action_and_stochastic_samples(trained):
    ckpt, envs, agent = eval_envs_for(trained[0])
    with torch.no_grad():
        agent.actor_logstd.fill_(0.0)  # std 1: samples stand far from the mean
    distance = {}
    for greedy in (True, False):
        envs.steps.clear()
        envs.resets.clear()
        C.evaluate(envs, agent, 1, greedy, 123, torch.device("cpu"))
        seen = np.concatenate([envs.resets[0]] + [step[1] for step in envs.steps[:-1]])  # what the policy saw
        taken = np.concatenate([step[0] for step in envs.steps])
        with torch.no_grad():
            means = agent.actor_mean(torch.as_tensor(seen)).numpy()
        distance[greedy] = np.abs(taken - means).max()
    assert distance[True] < 1e-6  # greedy: exactly the mean
    assert distance[False] > 0.5  # stochastic: samples around it
    envs.close()


def test_evaluation_seeds_never_overlap_training_seeds(trained, monkeypatch, tmp_path):
    checkpoint, training_seeds = trained
    real = C.make_env
    monkeypatch.setattr(C, "make_env", lambda *a: lambda: ResetSeeds(real(*a)()))
    ResetSeeds.log = []
    monkeypatch.chdir(tmp_path)
    calls = spy(monkeypatch, C, "evaluate")
    C.main(C.Args(eval_checkpoint=str(checkpoint), eval_episodes=2))
    eval_seeds = {s for s, _ in ResetSeeds.log if s is not None}
    assert eval_seeds and not eval_seeds & training_seeds
    ((args, _, _),) = calls
    assert args[3] is True  # greedy by default


def test_eval_stochastic_flag_samples(trained, monkeypatch, tmp_path):
    calls = spy(monkeypatch, C, "evaluate")
    C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=1, eval_stochastic=True))
    ((args, _, _),) = calls
    assert args[3] is False
    result = json.loads((trained[0].parent / "eval.json").read_text())
    assert result["greedy"] is False and result["episodes"] == 1


def test_eval_checkpoint_changes_no_byte_of_the_checkpoint(trained, tmp_path):
    before = trained[0].read_bytes()
    first = C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=2))
    second = C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=2))
    assert trained[0].read_bytes() == before
    assert first["returns"] == second["returns"]  # the same episodes each time


def test_atari_greedy_is_the_argmax_and_stochastic_samples():
    envs = gym.vector.SyncVectorEnv([A.make_env("BreakoutNoFrameskip-v4", 0, False, "test")])
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.mul_(300)  # confident but not certain: argmax and samples part ways
    obs = torch.as_tensor(envs.reset(seed=0)[0]).repeat(256, 1, 1, 1)
    obs[128:] = torch.randint(0, 256, obs[128:].shape, dtype=torch.uint8)
    with torch.no_grad():
        logits = agent.actor(agent.features(obs))
        greedy, _, _, _ = agent.get_action_and_value(obs, greedy=True)
        sampled, _, _, _ = agent.get_action_and_value(obs)
    assert torch.equal(greedy, logits.argmax(-1))
    assert (sampled != greedy).any()
    envs.close()


# --- learning ----------------------------------------------------------------------------------


def test_a_short_run_learns_to_balance_the_inverted_pendulum(tmp_path, monkeypatch):
    """A random policy balances for about 5-10 steps; 20k steps of PPO hold the pole far longer.
    A broken gradient, ratio, advantage or bootstrap fails this even when every unit passes."""
    monkeypatch.chdir(tmp_path)
    args = C.Args(env_id="InvertedPendulum-v4", num_steps=1024, total_timesteps=20480, eval_episodes=3)
    summary = C.main(args)
    assert summary["eval_mean_return"] >= 500, summary
    assert summary["mean_return_last_10"] >= 300, summary


def test_evaluation_args_keep_the_runs_own(trained, tmp_path):
    """--eval-checkpoint evaluates with the saved run's Args (env, seed), only the evaluation flags
    coming from the command line."""
    ckpt = C.load_checkpoint(str(trained[0]))
    assert ckpt["args"].seed == 3 and ckpt["args"].env_id == "Pendulum-v1"
    result = C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=1, env_id="HalfCheetah-v4", seed=9))
    assert result["episodes"] == 1 and dataclasses.asdict(ckpt["args"])["seed"] == 3


def test_resuming_from_an_older_checkpoint_replaces_what_was_logged_after_it(tmp_path, monkeypatch):
    """A run that went on past its last checkpoint (and then died) resumes from that checkpoint: the
    iterations logged after it are logged again, and TensorBoard holds each step once."""
    monkeypatch.chdir(tmp_path)
    snapshot = tmp_path / "at_iteration_2.pt"

    def keep_second(result, path, agent, optimizer, envs, args, progress):
        if progress["iteration"] == 2:
            snapshot.write_bytes(open(path, "rb").read())

    with monkeypatch.context() as m:
        spy(m, C, "save_checkpoint", after=keep_second)
        C.main(C.Args(**(RUN | {"save_every": 2})))
    run_dir = only_run(tmp_path)
    (run_dir / C.CHECKPOINT).write_bytes(snapshot.read_bytes())  # as if iterations 3 and 4 were never saved
    C.main(C.Args(resume=str(run_dir / C.CHECKPOINT)))
    logged = scalars(run_dir)
    for tag in ("charts/learning_rate", "losses/value_loss", "charts/kl_beta"):
        assert [s for s, _ in logged[tag]] == [400, 800, 1200, 1600], tag


def test_evaluation_runs_one_environment_whatever_training_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = spy(monkeypatch, C, "evaluate")
    C.main(C.Args(**(RUN | {"num_envs": 4, "num_steps": 100, "total_timesteps": 400, "eval_episodes": 2})))
    ((envs, *_), _, returns) = calls[0]
    assert envs.num_envs == 1 and len(returns) == 2
