"""torchrun: two processes on this machine's CPU (gloo) train as one. The update on a split batch is the
update on the whole batch; the ranks stay identical; an interrupted run resumes, also with another
number of processes; one process under torchrun is plain python. CUDA checks run where there is a GPU."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import only_run, scalars
from distributed_worker import fixed_batch

import ppo_continuous as C

ROOT = Path(__file__).resolve().parent.parent
WORKER = str(ROOT / "tests" / "distributed_worker.py")
PENDULUM = ["--env-id", "Pendulum-v1", "--num-steps", "256", "--num-minibatches", "4", "--update-epochs", "2"]


def torchrun(nproc: int, *command: str, cwd: Path, timeout: int = 180, **popen) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *command]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **popen)


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
    assert proc.stdout.count("device: cpu, batch 512 = 2 x 1 envs x 256 steps") == 1


def test_bad_input_under_torchrun_is_reported_once_and_writes_nothing(tmp_path):
    proc = torchrun(2, str(ROOT / "ppo_continuous.py"), "--num-minibatches", "3", cwd=tmp_path, timeout=120)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "does not divide" in errors[0]
    assert "exitcode  : 2" in proc.stderr and "Traceback (most recent call last)" not in proc.stderr.split("error:")[0]
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_stops_both_ranks_at_one_iteration_and_the_run_resumes_on_any_number_of_processes(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "8192", "--save-every", "1", "--eval-episodes", "0"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    launcher = subprocess.Popen(
        [*cmd, str(ROOT / "ppo_continuous.py"), *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
        start_new_session=True,
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob("runs/*/checkpoint.pt")):
        assert launcher.poll() is None and time.time() < deadline
        time.sleep(0.1)
    os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: every process gets it
    _, err = launcher.communicate(timeout=120)
    assert err.count("exitcode  : 130") == 2 or "resume with: torchrun" in err, err[-3000:]
    assert "resume with: torchrun" in err
    checkpoint = only_run(tmp_path) / C.CHECKPOINT
    stopped = torch.load(checkpoint, weights_only=True)["progress"]
    assert 0 < stopped["global_step"] < 8192 and stopped["global_step"] % 512 == 0

    # resumed by one plain process: the global batch halves, the step count goes on
    resumed = subprocess.run(
        [sys.executable, str(ROOT / "ppo_continuous.py"), "--resume", str(checkpoint)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "batch 256 = 1 x 1 envs x 256 steps" in resumed.stdout
    assert f"resuming at step {stopped['global_step']}" in resumed.stdout
    summary = json.loads((only_run(tmp_path) / "summary.json").read_text())
    assert summary["global_step"] == 8192
    steps = [s for s, _ in scalars(only_run(tmp_path))["charts/SPS"]]
    assert steps == sorted(set(steps)) and steps[-1] == 8192


def test_one_process_under_torchrun_is_plain_python(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "1024", "--eval-episodes", "0"]
    (tmp_path / "plain").mkdir()
    (tmp_path / "torchrun").mkdir()
    plain = subprocess.run(
        [sys.executable, str(ROOT / "ppo_continuous.py"), *flags], cwd=tmp_path / "plain", capture_output=True
    )
    assert plain.returncode == 0
    proc = torchrun(1, str(ROOT / "ppo_continuous.py"), *flags, cwd=tmp_path / "torchrun")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (scalars(only_run(tmp_path / name)) for name in ("plain", "torchrun"))
    a.pop("charts/SPS"), b.pop("charts/SPS")
    assert a == b


# --- CUDA: only where there is a GPU -----------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_run_trains_on_the_gpu(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "ppo_continuous.py"),
            *PENDULUM,
            "--total-timesteps",
            "1024",
            "--eval-episodes",
            "1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "device: cuda:0" in proc.stdout


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_nccl_two_gpus_keep_ranks_identical(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "2048", "--eval-episodes", "0"]
    proc = torchrun(2, WORKER, "train", str(tmp_path), "--", *flags, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True, map_location="cpu") for r in (0, 1)]
    for key, value in ranks[0]["agent"].items():
        assert torch.equal(value, ranks[1]["agent"][key]), key


def test_sigterm_to_one_rank_stops_every_rank_at_the_same_iteration(tmp_path):
    flags = [*PENDULUM, "--total-timesteps", "40960", "--save-every", "1", "--eval-episodes", "0"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [str(ROOT / "ppo_continuous.py"), *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob("runs/*/checkpoint.pt")):
        assert launcher.poll() is None and time.time() < deadline
        time.sleep(0.1)
    workers = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2
    os.kill(max(int(pid) for pid in workers), signal.SIGTERM)  # the later one started: rank 1
    _, err = launcher.communicate(timeout=120)
    # Neither hung (communicate returned) nor crashed: every exit torchrun reports is 143. Rank 0 stops at the agreed
    # iteration too; whether torchrun lists it beside rank 1 depends on which of them it sees exit first.
    exit_codes = re.findall(r"exitcode\s*:\s*(-?\d+)", err)
    assert exit_codes and set(exit_codes) == {"143"}, err[-3000:]
    assert "resume with: torchrun" in err  # rank 0 saved, though the signal went to the other rank
    progress = torch.load(only_run(tmp_path) / C.CHECKPOINT, weights_only=True)["progress"]
    assert 0 < progress["global_step"] < 40960
