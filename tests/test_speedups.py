"""--compile and --bf16, by their effects: the compiled minibatch loss computes what the eager one computes; bf16
runs the networks in bf16 and nothing after them (the first minibatch of an update sees a ratio of 1 up to rounding);
a device without bf16 in hardware is refused with one line. The defaults' numbers are same_numbers.py's to hold."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import HANG_TIMEOUT, ROOT, make_agent, only_run, scalars, spy

import ppo_atari as A
import ppo_continuous as C

PENDULUM = dict(env_id="Pendulum-v1", num_steps=256, num_minibatches=4, update_epochs=2, eval_episodes=0)
BREAKOUT = dict(num_envs=2, num_steps=32, num_minibatches=2, update_epochs=2, eval_episodes=0)
NATIVE_BF16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
# the first minibatch's approx KL under --bf16: 0 here (the same bf16 kernels score a sample in the rollout and in the
# update); a rollout in bf16 and an update in fp32 leave 2e-5 (MuJoCo, the policy head at gain 1) and 5e-6 (Atari)
RATIO_ONE_KL = 1e-7


def run(folder, monkeypatch, module, **overrides) -> dict:
    """Two iterations of main in folder (made), with the overrides; every scalar logged."""
    folder.mkdir()
    monkeypatch.chdir(folder)
    config = PENDULUM if module is C else BREAKOUT
    batch = config["num_steps"] * config.get("num_envs", 1)
    module.main(module.Args(**(config | {"total_timesteps": 2 * batch} | overrides)))
    return scalars(only_run(folder))


def atari_agent() -> A.Agent:
    """The Nature CNN agent on 4 stacked 84x84 frames and 4 actions, made without a game."""
    spaces = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])  # only its spaces are replaced
    spaces.single_observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    spaces.single_action_space = gym.spaces.Discrete(4)
    agent = A.Agent(spaces)
    spaces.close()
    return agent


@pytest.mark.parametrize("module", [C, A])
def test_compile_compiles_the_minibatch_loss_and_it_computes_what_the_eager_loss_computes(
    tmp_path, monkeypatch, module
):
    eager = run(tmp_path / "eager", monkeypatch, module)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = run(tmp_path / "compiled", monkeypatch, module, compile=True)
    assert torch._dynamo.utils.counters["frames"]["ok"] > 0  # something was compiled
    if module is C:  # Pendulum ends episodes within the first rollout (Breakout's 64 steps an env end no game)
        first_episodes = [r["charts/episodic_return"][:1] for r in (compiled, eager)]
        assert first_episodes[0] == first_episodes[1]  # the first rollout, before any compiled update: the same
    for tag in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl", "losses/grad_norm"):
        (step, ours), (_, theirs) = compiled[tag][0], eager[tag][0]  # the first update: the last bits may differ
        assert step == (256 if module is C else 64) and ours == pytest.approx(theirs, rel=1e-3, abs=1e-7), tag


@pytest.mark.parametrize("module", [C, A])
def test_bf16_runs_the_networks_in_bf16_and_hands_fp32_to_what_follows(module):
    if module is C:
        agent, obs = make_agent(), torch.randn(64, 3)
    else:
        torch.manual_seed(0)
        agent, obs = atari_agent(), torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    actions = agent.get_action_and_value(obs)[0]
    fp32 = agent.get_action_and_value(obs, actions)
    module.autocast_bf16(agent, torch.device("cpu"))
    bf16 = agent.get_action_and_value(obs, actions)
    for name, ours, theirs in zip(("log-prob", "entropy", "value"), bf16[1:], fp32[1:]):
        assert ours.dtype == torch.float32, name
        assert torch.allclose(ours, theirs, rtol=0.05, atol=0.05), name  # bf16 keeps about 3 significant digits
    assert not torch.equal(bf16[1], fp32[1]) and not torch.equal(bf16[3], fp32[3])  # both networks ran in bf16
    assert all(p.dtype == torch.float32 for p in agent.parameters())
    if module is A:  # the CNN in bf16; its two heads in fp32, on its output cast back to fp32
        seen = []
        for head in (agent.actor, agent.critic):
            head.register_forward_hook(lambda m, inputs, out: seen.append((inputs[0].dtype, out)))
        agent.get_action_and_value(obs, actions)
        for dtype, out in seen:
            assert dtype == out.dtype == torch.float32
            assert not torch.equal(out, out.bfloat16().float())  # fp32 outputs: not all on bf16's coarser grid


@pytest.mark.parametrize("module", [C, A])
def test_bf16_autocasts_on_the_agent_s_own_device(monkeypatch, module):
    """On a GPU --bf16 must autocast CUDA's kernels: a CPU autocast would leave the networks silently in fp32."""
    made = []
    real = torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda device_type, *a, **k: made.append(device_type) or real("cpu", *a))
    agent = make_agent() if module is C else atari_agent()
    module.autocast_bf16(agent, torch.device("cuda"))  # made here, never run: no GPU is needed
    assert made and set(made) == {"cuda"}, made


@pytest.mark.skipif(not NATIVE_BF16, reason="needs a CPU with AVX512-BF16 or AMX")
@pytest.mark.parametrize("module", [C, A])
def test_under_bf16_the_first_minibatch_of_an_update_sees_a_ratio_of_one_and_weights_and_adam_stay_fp32(
    tmp_path, monkeypatch, module
):
    monkeypatch.setattr(module, "POLICY_HEAD_GAIN", 1.0)  # actions that depend on the state: bf16's rounding shows
    losses = spy(monkeypatch, module, "minibatch_loss")
    updates = spy(monkeypatch, module, "update")
    run(tmp_path / "run", monkeypatch, module, bf16=True)
    (agent, minibatch, *_), _, (_, _, logratio) = losses[0]  # the first minibatch of the first update
    assert module.kl_k3(logratio).mean().item() < RATIO_ONE_KL
    optimizer = updates[0][0][1]
    obs = minibatch[0]  # the network of the run did compute in bf16: its outputs are bf16 numbers, cast
    out = agent.critic(obs) if module is C else agent.features(obs)
    assert out.dtype == torch.float32 and torch.equal(out, out.bfloat16().float())
    assert all(p.dtype == torch.float32 for p in agent.parameters())
    adam = [t for s in optimizer.state.values() for t in s.values() if t.is_floating_point() and t.dim() > 0]
    assert adam and all(t.dtype == torch.float32 for t in adam)


@pytest.mark.parametrize("module", [C, A])
def test_a_bf16_run_s_checkpoint_is_evaluated_in_bf16_as_its_closing_evaluation_was(tmp_path, monkeypatch, module):
    """--eval-checkpoint of a --bf16 run evaluates the policy the run trained and evaluated: its networks under bf16
    autocast (in fp32 a greedy action could differ from the one its eval.json was measured with)."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)  # emulated where the CPU has none
    run(tmp_path / "run", monkeypatch, module, bf16=True, eval_episodes=1)
    run_dir = only_run(tmp_path / "run")
    closing = json.loads((run_dir / "eval.json").read_text())
    evaluated = spy(monkeypatch, module, "evaluate")
    again = module.main(module.Args(eval_checkpoint=str(run_dir / "checkpoint.pt"), eval_episodes=1))
    agent, obs = evaluated[0][0][1], 255 * torch.rand((1, *evaluated[0][0][0].single_observation_space.shape))
    out = agent.critic(obs) if module is C else agent.features(obs)
    assert out.dtype == torch.float32 and torch.equal(out, out.bfloat16().float())  # computed in bf16
    assert again["returns"] == closing["returns"]


# the script run with the CPU's bf16 instructions reported missing: only the two queries are replaced
NO_BF16 = """
import runpy, sys, torch
torch.cpu._is_avx512_bf16_supported = torch.cpu._is_amx_tile_supported = lambda: False
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
@pytest.mark.parametrize("avx512_bf16, amx", [(True, False), (False, True), (True, True), (False, False)])
def test_bf16_takes_a_cpu_with_either_bf16_instruction_set_and_refuses_one_with_neither(
    monkeypatch, module, avx512_bf16, amx
):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU with bf16, declined with --no-cuda
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **_: True)
    error = module.check_args(module.Args(bf16=True, cuda=False))
    if avx512_bf16 or amx:  # AVX512-BF16 (Zen 4, Cooper Lake) or AMX (Sapphire Rapids) alone runs bf16 in hardware
        assert error is None, error
    else:
        assert error.startswith("--bf16 needs bf16 in hardware") and "CPU has none" in error


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
@pytest.mark.parametrize("gpu_bf16", [True, False])
def test_bf16_on_a_gpu_asks_the_gpu_not_the_cpu(monkeypatch, module, gpu_bf16):
    """Where the run takes a GPU, the GPU's bf16 in hardware decides: not the CPU's, not the GPU's emulation of it."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: not gpu_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: not gpu_bf16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    emulating = lambda including_emulation=True: gpu_bf16 or including_emulation  # a V100 emulates it
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", emulating)
    error = module.check_args(module.Args(bf16=True, cuda=True))
    if gpu_bf16:  # even on a CPU without it
        assert error is None, error
    else:
        assert error.startswith("--bf16 needs bf16 in hardware") and error.endswith("this GPU has none"), error


@pytest.mark.parametrize("script", ["ppo_continuous.py", "ppo_atari.py"])
def test_bf16_on_a_cpu_without_bf16_instructions_is_one_line_and_exit_2_before_anything_is_written(tmp_path, script):
    command = [sys.executable, "-c", NO_BF16, str(ROOT / script), "--bf16", "--no-cuda", "--total-timesteps", "4096"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --bf16 needs bf16 in hardware"), proc.stderr[-2000:]
    assert "AVX512-BF16 or AMX" in lines[0] and "CPU has none" in lines[0]
    assert not (tmp_path / "runs").exists()
