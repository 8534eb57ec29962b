"""torchrun: two processes on this machine's CPU (gloo) train as one. The update on a split batch is the
update on the whole batch; the ranks stay identical; an interrupted run resumes, also with another
number of processes; one process under torchrun is plain python. CUDA checks run where there is a GPU."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import HANG_TIMEOUT, ROOT, TORCHRUN_ENV, only_run, run_script, scalars, wait_for_checkpoint
from distributed_worker import averaged_net, fixed_batch, merge_data, off_by

import ppo_atari as A
import ppo_continuous as C

WORKER = str(ROOT / "tests" / "distributed_worker.py")
PENDULUM = ["--env-id", "Pendulum-v1", "--num-steps", "256", "--num-minibatches", "4", "--update-epochs", "2"]


def torchrun(nproc: int, *command: str, cwd: Path, **popen) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *command]
    env = os.environ | TORCHRUN_ENV | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=HANG_TIMEOUT, env=env, **popen)


def test_an_update_split_across_two_ranks_is_the_update_on_the_whole_batch(tmp_path):
    proc = torchrun(2, WORKER, "update", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    split = torch.load(tmp_path / "update.pt", weights_only=True)
    agent, buf, advantages, returns, args = fixed_batch()
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=C.ADAM_EPS)
    metrics = C.update(agent, optimizer, buf, advantages, returns, args, 1.0, 0.2)
    assert split["epochs_done"] == metrics["losses/epochs_done"] == args.update_epochs
    largest = max((split["agent"][k] - v).abs().max().item() for k, v in agent.state_dict().items())
    print(f"largest parameter difference, 2 ranks vs 1 process: {largest:.2e}")
    assert largest < 1e-5
    moved = max((v - fixed_batch()[0].state_dict()[k]).abs().max().item() for k, v in agent.state_dict().items())
    assert moved > 1e-3  # far above the difference: the update did move the parameters


def test_the_target_kl_stop_is_decided_on_every_rank_s_samples_together(tmp_path):
    # rank 0's own samples are past the limit, the mean over both ranks' is not: every rank must go on
    proc = torchrun(2, WORKER, "target_kl", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"kl{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["epochs_done"] == ranks[1]["epochs_done"] >= 1
    for key, value in ranks[0]["agent"].items():
        assert torch.equal(value, ranks[1]["agent"][key]), key


def test_global_mean_and_var_weigh_each_rank_by_its_sample_count(tmp_path):
    proc = torchrun(2, WORKER, "collectives", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    every = torch.cat([10.0 * r + torch.arange(3 + 4 * r, dtype=torch.float64) for r in (0, 1)])  # 3 + 7 samples
    for r in (0, 1):
        got = torch.load(tmp_path / f"collectives{r}.pt", weights_only=True)
        assert (got["start"]["weight"].item(), got["start"]["bias"].item()) == (1.0, -1.0)  # rank 0's, on every rank
        assert got["mean"].item() == pytest.approx(every.mean().item(), rel=1e-6)  # not the mean of the 2 means
        assert got["var"].item() == pytest.approx(every.var().item(), rel=1e-6)
        errors = torch.cat([off_by(3 + 4 * r).double() for r in (0, 1)])  # 0.97; by each rank alone -0.33 and 0.76
        assert got["ev"] == pytest.approx(1 - errors.var().item() / every.var().item(), rel=1e-6)
        for mb, (mean, std) in zip((slice(0, 3), slice(3, 6)), got["moments"]):  # the spread between ranks counts
            both = torch.cat([100.0 * r + torch.arange(6, dtype=torch.float64)[mb] for r in (0, 1)])
            assert (mean.item(), std.item()) == pytest.approx((both.mean().item(), both.std().item()), rel=1e-6)
    net, rows = averaged_net()
    net(rows).square().mean().backward()  # the gradient of the loss over every process's samples
    for r in (0, 1):
        got = torch.load(tmp_path / f"collectives{r}.pt", weights_only=True)
        assert torch.allclose(got["grad"], net.weight.grad, rtol=1e-5)


@pytest.mark.parametrize("nproc", [2, 3])  # with 3, a prior counted once per other rank shows (with 2 it cannot)
def test_merged_normalization_is_one_running_mean_std_over_every_rank_s_observations(tmp_path, nproc):
    proc = torchrun(nproc, WORKER, "merge", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    obs_rms, return_rms = C.RunningMeanStd((3,)), C.RunningMeanStd(())
    obs_rms.update(torch.arange(12.0).view(4, 3).double().numpy())  # the same prior, then every rank's data
    for rank in range(nproc):
        obs, returns = merge_data(rank)
        obs_rms.update(obs)
        return_rms.update(returns)
    for rank in range(nproc):
        got = torch.load(tmp_path / f"merge{rank}.pt", weights_only=True)
        for name, rms in (("obs_rms", obs_rms), ("return_rms", return_rms)):
            assert got[f"{name}.count"].item() == pytest.approx(rms.count)  # the prior counted once
            np.testing.assert_allclose(got[f"{name}.mean"].numpy(), rms.mean, rtol=1e-9)
            np.testing.assert_allclose(got[f"{name}.var"].numpy(), rms.var, rtol=1e-9)  # with the ranks' spread


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two_ranks")
    flags = [*PENDULUM, "--total-timesteps", "4096", "--eval-episodes", "1", "--seed", "5"]
    proc = torchrun(2, WORKER, "train", str(folder), "--", *flags, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, proc


def test_two_ranks_hold_identical_parameters_and_merged_statistics(two_rank_run):
    folder, _ = two_rank_run
    ranks = [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for key, value in ranks[0]["agent"].items():
        assert torch.equal(value, ranks[1]["agent"][key]), key
    for key, value in ranks[0]["normalization"].items():
        assert torch.equal(value, ranks[1]["normalization"][key]), key
    # the merged statistics count both ranks' observations: 2 x 4096 / 2 steps, plus the two resets
    assert ranks[0]["normalization"]["obs_rms.count"].item() == pytest.approx(4096 + 2, abs=1)
    assert not torch.equal(ranks[0]["first_obs"][0], ranks[1]["first_obs"][0])  # seeded apart
    checkpoint = torch.load(only_run(folder) / C.CHECKPOINT, weights_only=True)
    assert len(checkpoint["rng"]) == 2  # each rank's RNG streams
    for key, value in checkpoint["normalization"].items():
        assert torch.equal(value.double(), ranks[0]["normalization"][key].double()), key


def test_rank_zero_alone_writes_and_logs_every_ranks_episodes(two_rank_run):
    folder, proc = two_rank_run
    assert [p.name for p in (folder / "runs").iterdir()] == [only_run(folder).name]
    assert len(list(only_run(folder).glob("events.out.tfevents.*"))) == 1
    summary = json.loads((only_run(folder) / "summary.json").read_text())
    assert summary["global_step"] == 4096 and summary["episodes"] == 2 * 10  # 200-step episodes, both ranks
    logged = scalars(only_run(folder))
    assert [s for s, _ in logged["charts/SPS"]] == [512 * i for i in range(1, 9)]  # the global batch
    assert len(logged["charts/episodic_return"]) == 20
    # each rank's k-th 200-step episode ends after 200 k + (k - 1) of its own steps (one autoreset step
    # between episodes); every one of them is a step of both ranks: global step = 2 x that
    ends = sorted(2 * (200 * k + k - 1) for k in range(1, 11) for _rank in (0, 1))
    assert sorted(s for s, _ in logged["charts/episodic_return"]) == ends
    assert proc.stdout.count("device: cpu, batch 512 = 2 x 1 envs x 256 steps") == 1


def test_the_closing_evaluation_under_torchrun_is_the_one_plain_python_gives_the_checkpoint(two_rank_run, tmp_path):
    folder, _ = two_rank_run
    shutil.copy(only_run(folder) / C.CHECKPOINT, tmp_path / C.CHECKPOINT)  # its eval.json is written beside it
    again = run_script(tmp_path, "ppo_continuous.py", "--eval-checkpoint", C.CHECKPOINT, "--eval-episodes", "1")
    assert again.returncode == 0, again.stderr
    evaluation = json.loads((only_run(folder) / "eval.json").read_text())
    assert evaluation["episodes"] == 1
    assert json.loads((tmp_path / "eval.json").read_text())["returns"] == evaluation["returns"]


@pytest.mark.parametrize("script", ["ppo_continuous.py", "ppo_atari.py"])
def test_bad_input_under_torchrun_is_reported_once_and_writes_nothing(tmp_path, script):
    # rank 0 starts 2 s late: the other rank fails first, and torchrun, seeing it exit, stops every process
    # left, so the other rank waits for rank 0 (the one that prints) to say why
    late_rank_0 = f'[ "$RANK" = 0 ] && sleep 2; exec {sys.executable} "$@"'
    command = ["--no-python", "bash", "-c", late_rank_0, "bash", str(ROOT / script), "--num-minibatches", "3"]
    proc = torchrun(2, *command, cwd=tmp_path)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "does not divide" in errors[0]
    assert "exitcode  : 2" in proc.stderr and "Traceback (most recent call last)" not in proc.stderr.split("error:")[0]
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_stops_both_ranks_at_one_iteration_and_the_run_resumes_on_any_number_of_processes(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "8192", "--save-every", "1", "--eval-episodes", "0"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    launcher = subprocess.Popen(
        [*cmd, WORKER, "train", str(tmp_path), "--", *flags],  # the script's main, each rank's exit code kept
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | TORCHRUN_ENV | {"PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    wait_for_checkpoint(launcher, tmp_path)
    os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: every process gets it
    _, err = launcher.communicate(timeout=HANG_TIMEOUT)
    # no rank died in a traceback of the script's (torchrun's own SignalException is how its launcher ends)
    assert 'ppo_continuous.py", line' not in err, err[-3000:]
    assert "resume with: torchrun" in err
    # every rank stopped as a stop does, with the same 128 + signal: 130 for the Ctrl-C (143 had torchrun's own
    # SIGTERM to its workers reached a rank first), never 1 or a cut-short -2
    codes = [(tmp_path / f"exit{rank}.txt").read_text() for rank in (0, 1)]
    assert codes[0] == codes[1] in ("130", "143"), codes
    checkpoint = only_run(tmp_path) / C.CHECKPOINT
    stopped = torch.load(checkpoint, weights_only=True)["progress"]
    assert 0 < stopped["global_step"] < 8192 and stopped["global_step"] % 512 == 0

    # resumed by one plain process: the global batch halves, the step count goes on
    resumed = run_script(tmp_path, "ppo_continuous.py", "--resume", str(checkpoint))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "batch 256 = 1 x 1 envs x 256 steps" in resumed.stdout
    assert f"resuming at step {stopped['global_step']}" in resumed.stdout
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["global_step"] == 8192
    steps = [s for s, _ in scalars(only_run(tmp_path))["charts/SPS"]]
    assert steps == sorted(set(steps)) and steps[-1] == 8192


def test_a_run_resumed_under_torchrun_counts_the_checkpoint_s_statistics_once(tmp_path):
    """The merge's prior is the statistics every process holds when the loop starts: after a resume, the checkpoint's.
    Given two more iterations, the resumed run's statistics count the saved observations once plus each rank's new
    ones (the resume's reset is not counted: the statistics are frozen through it)."""
    flags = [*PENDULUM, "--total-timesteps", "1024", "--eval-episodes", "0"]
    proc = torchrun(2, str(ROOT / "ppo_continuous.py"), *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = only_run(tmp_path) / C.CHECKPOINT
    ckpt = torch.load(path, weights_only=True)
    ckpt["args"]["total_timesteps"] = 2048  # two more global batches of 2 x 256 steps
    torch.save(ckpt, path)
    resumed = torchrun(2, str(ROOT / "ppo_continuous.py"), "--resume", str(path), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = torch.load(path, weights_only=True)
    assert final["progress"]["global_step"] == 2048
    saved = ckpt["normalization"]["obs_rms.count"].item()
    assert final["normalization"]["obs_rms.count"].item() == pytest.approx(saved + 1024, abs=1e-6)


def test_one_process_under_torchrun_is_plain_python(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "1024", "--eval-episodes", "0"]
    (tmp_path / "plain").mkdir()
    (tmp_path / "torchrun").mkdir()
    plain = run_script(tmp_path / "plain", "ppo_continuous.py", *flags)
    assert plain.returncode == 0, plain.stderr[-3000:]
    proc = torchrun(1, str(ROOT / "ppo_continuous.py"), *flags, cwd=tmp_path / "torchrun")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (scalars(only_run(tmp_path / name)) for name in ("plain", "torchrun"))
    a.pop("charts/SPS"), b.pop("charts/SPS")
    assert a == b


# --- CUDA: only where there is a GPU -----------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_run_trains_on_the_gpu(tmp_path):
    proc = run_script(tmp_path, "ppo_continuous.py", *PENDULUM, "--total-timesteps", "1024", "--eval-episodes", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "device: cuda:0" in proc.stdout
    # its checkpoint, saved from the GPU, loads on a machine without one (load_checkpoint: --resume's too)
    cmd = [sys.executable, str(ROOT / "ppo_continuous.py"), "--eval-checkpoint", str(only_run(tmp_path) / C.CHECKPOINT)]
    cpu_only = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT, env=cpu_only)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_torchrun_with_more_processes_than_gpus_on_the_machine_is_refused_unless_no_cuda(monkeypatch, module):
    # one GPU and two processes: the second would ask for cuda:1 and NCCL for a GPU of its own; a traceback there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun --nproc-per-node 2, in each of its processes
    refusal = "torchrun starts 2 processes here, more than this machine's GPUs: one per GPU, or --no-cuda"
    assert module.check_args(module.Args()) == refusal
    assert module.check_args(module.Args(cuda=False)) is None  # gloo on the CPU takes any number
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert module.check_args(module.Args()) is None


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_nccl_two_gpus_keep_ranks_identical(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "2048", "--eval-episodes", "0"]
    proc = torchrun(2, WORKER, "train", str(tmp_path), "--", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True, map_location="cpu") for r in (0, 1)]
    for key, value in ranks[0]["agent"].items():
        assert torch.equal(value, ranks[1]["agent"][key]), key


def test_sigterm_to_one_rank_stops_every_rank_at_the_same_iteration_saved_and_whole(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "40960", "--save-every", "1", "--eval-episodes", "0"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [WORKER, "train", str(tmp_path), "--", *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | TORCHRUN_ENV | {"PYTHONPATH": str(ROOT)},
    )
    wait_for_checkpoint(launcher, tmp_path)
    workers = subprocess.run(
        ["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True, timeout=HANG_TIMEOUT
    ).stdout.split()
    assert len(workers) == 2
    os.kill(max(int(pid) for pid in workers), signal.SIGTERM)  # the later one started: rank 1
    _, err = launcher.communicate(timeout=HANG_TIMEOUT)
    # whichever exit torchrun sees first, it signals the other worker, which is stopping already: it ignores
    # that signal and finishes, so every exit torchrun reports is the stop's own 143, none cut short (-15)
    exit_codes = re.findall(r"exitcode\s*:\s*(-?\d+)", err)
    assert exit_codes and set(exit_codes) == {"143"}, err[-3000:]
    assert "resume with: torchrun" in err  # rank 0 saved, though the signal went to the other rank
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True)["progress"] for r in (0, 1)]
    checkpoint = torch.load(only_run(tmp_path) / C.CHECKPOINT, weights_only=True)
    assert ranks[0] == ranks[1] == checkpoint["progress"]  # the same iteration everywhere, and saved
    assert 0 < checkpoint["progress"]["global_step"] < 40960
    logged = [s for s, _ in scalars(only_run(tmp_path))["charts/SPS"]]  # the event file is whole
    assert logged[-1] == checkpoint["progress"]["global_step"]


# --- the collectives compute the global figures (a process group of one, in this process) ----------------


@pytest.fixture
def process_group():
    """A gloo process group of one process: every collective runs, as under torchrun."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("offset, scale", [(0.0, 1.0), (100.0, 3.0), (1000.0, 1.0), (5.3, 0.0)])
def test_advantage_moments_under_torchrun_keep_float64_precision_and_the_sample_std(process_group, offset, scale):
    g = torch.Generator().manual_seed(0)
    x = (offset + scale * torch.randn(256, generator=g)).float()
    slices = C.minibatch_slices(256, 8)
    for (mean, std), mb in zip(C.minibatch_moments(x, slices), slices):
        exact = x[mb].double()
        assert mean.dtype == std.dtype == torch.float32
        assert mean.item() == pytest.approx(exact.mean().item(), rel=1e-7, abs=1e-7)
        if scale:  # the n - 1 std of the samples, to float32's own precision
            assert std.item() == pytest.approx(exact.std().item(), rel=1e-6)
        else:  # equal advantages: a zero std, never NaN
            assert std.item() == 0.0


def test_merging_one_process_s_statistics_keeps_their_values_and_dtypes(process_group):
    """With a process group of one the merge is the statistics themselves: the same figures, in their own dtypes
    (the observations' float32, the returns' float64), in what it returns and in the wrappers that go on."""
    envs = C.make_envs(C.Args(env_id="Pendulum-v1", num_envs=2), "test")
    prior = C.normalization_state(envs)
    envs.reset(seed=0)
    for _ in range(5):
        envs.step(envs.action_space.sample())
    seen = C.normalization_state(envs)
    assert seen["obs_rms.mean"].dtype == torch.float32 and seen["return_rms.mean"].dtype == torch.float64
    merged = C.merge_normalization(envs, prior)
    for state in (merged, C.normalization_state(envs)):
        for key, value in seen.items():
            assert state[key].dtype == value.dtype, key
            torch.testing.assert_close(state[key].double(), value.double(), rtol=1e-5, atol=1e-6, msg=key)
    envs.step(envs.action_space.sample())  # and the wrappers go on learning: a merge freezes nothing
    after = C.normalization_state(envs)
    assert all(after[f"{name}.count"] > seen[f"{name}.count"] for name in C.RUNNING_STATS)
    envs.close()


def test_explained_variance_under_torchrun_is_the_one_of_all_samples(process_group):
    g = torch.Generator().manual_seed(1)
    target = 1000.0 + torch.randn(512, generator=g)
    predicted = target + 0.5 * torch.randn(512, generator=g)
    exact = 1 - (target - predicted).double().var() / target.double().var()
    assert C.explained_variance(predicted, target) == pytest.approx(exact.item(), rel=1e-6)


def rank_view(metrics: dict, samples: int, episodes: list, signum) -> tuple:
    return ({"losses/ratio_max": 1.0, "losses/ratio_min": 1.0} | metrics, samples, episodes, signum)


def test_iteration_metrics_weigh_each_rank_by_its_samples_and_a_signal_to_any_rank_stops_all(monkeypatch):
    rank0 = rank_view({"losses/approx_kl": 0.1, "losses/ratio_max": 1.5}, 300, [(1.0, 10, 3)], None)
    rank1 = rank_view({"losses/approx_kl": 0.4, "losses/ratio_min": 0.7}, 100, [(2.0, 20, 5)], signal.SIGTERM)
    monkeypatch.setattr(C, "gather_objects", lambda obj: [rank0, rank1])
    metrics, episodes, signum = C.gather_iteration(*rank0)
    assert metrics["losses/approx_kl"] == pytest.approx((0.1 * 300 + 0.4 * 100) / 400)
    assert metrics["losses/ratio_max"] == 1.5 and metrics["losses/ratio_min"] == 0.7
    assert episodes == [(1.0, 10, 3), (2.0, 20, 5)]
    assert signum == signal.SIGTERM  # it reached rank 1 alone


def test_plain_python_metrics_are_the_update_s_own(monkeypatch):
    metrics = {"losses/approx_kl": 0.1 + 0.2, "losses/ratio_max": 1.5, "losses/ratio_min": 0.5}
    assert C.gather_iteration(metrics, 7, [], None)[0] == metrics  # exactly: no reweighting round-off


def test_seeds_of_torchrun_ranks_are_drawn_apart_and_plain_python_keeps_its_seed(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert [C.rank_seed(s) for s in (1, 2, 7)] == [1, 2, 7]  # the published single-process runs stand
    monkeypatch.setenv("WORLD_SIZE", "4")
    seeds = {}
    for rank in range(4):
        monkeypatch.setattr(C, "RANK", rank)
        seeds |= {(seed, rank): C.rank_seed(seed) for seed in range(1, 51)}
    assert len(set(seeds.values())) == len(seeds)  # no two (seed, rank) pairs share a stream
    monkeypatch.setattr(C, "RANK", 1)
    C.seed_everything(C.Args(seed=1))
    rank1_of_seed1 = torch.rand(3)
    monkeypatch.setattr(C, "RANK", 0)
    C.seed_everything(C.Args(seed=2))
    assert not torch.equal(rank1_of_seed1, torch.rand(3))
