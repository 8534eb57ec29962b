"""Runs that survive: checkpoints, resume, evaluation, interrupts, bad checkpoints, determinism.
End to end, with real processes and real signals."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import ppo_continuous as C

ROOT = Path(__file__).resolve().parent.parent
PENDULUM = [
    "--env-id",
    "Pendulum-v1",
    "--num-steps",
    "256",
    "--num-minibatches",
    "4",
    "--update-epochs",
    "2",
    "--eval-episodes",
    "1",
]
BREAKOUT = [
    "--num-envs",
    "2",
    "--num-steps",
    "32",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--eval-episodes",
    "1",
]


def run(tmp_path, script, *flags, timeout=300):
    return subprocess.run(
        [sys.executable, str(ROOT / script), *flags], cwd=tmp_path, capture_output=True, text=True, timeout=timeout
    )


def only_run(tmp_path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def files(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def interrupt(tmp_path, script, flags, sig) -> subprocess.Popen:
    """Start a run, wait for its first checkpoint, then send it sig."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / script), *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob("runs/*/checkpoint.pt")):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "timeout"
        time.sleep(0.1)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    return proc


@pytest.mark.parametrize(
    "script, flags, sig, code",
    [
        ("ppo_continuous.py", PENDULUM + ["--total-timesteps", "20480"], signal.SIGINT, 130),
        ("ppo_atari.py", BREAKOUT + ["--total-timesteps", "1280"], signal.SIGTERM, 143),
    ],
)
def test_interrupted_run_saves_and_resumes_to_the_requested_total(tmp_path, script, flags, sig, code):
    proc = interrupt(tmp_path, script, flags + ["--save-every", "1"], sig)
    assert proc.returncode == code
    err = proc.stderr.read()
    assert "resume with:" in err and "Traceback" not in err
    run_dir = only_run(tmp_path)
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    stopped_at = ckpt["progress"]["global_step"]
    total = int(flags[flags.index("--total-timesteps") + 1])
    assert 0 < stopped_at < total
    assert not (run_dir / "summary.json").exists()

    resumed = run(tmp_path, script, "--resume", str(run_dir / "checkpoint.pt"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at step {stopped_at}" in resumed.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == total
    s = scalars(run_dir)  # one run folder, one learning-rate schedule from start to end
    steps = [step for step, _ in s["charts/learning_rate"]]
    assert steps == sorted(set(steps)) and steps[-1] == total
    batch = steps[0]
    lrs = dict(s["charts/learning_rate"])
    lr0 = lrs[batch]
    for step, lr in lrs.items():
        assert lr == pytest.approx(lr0 * (1 - (step / batch - 1) / (total / batch)), rel=1e-5)
    assert (run_dir / "eval.json").exists() and "eval/episodic_return" in s

    again = run(tmp_path, script, "--resume", str(run_dir / "checkpoint.pt"))
    assert again.returncode == 0 and "already finished" in again.stdout

    # cut during its closing evaluation: the final checkpoint is there, eval.json and summary.json are
    # not; resuming runs no iteration and writes the same evaluation and the summary
    evaluation = json.loads((run_dir / "eval.json").read_text())
    (run_dir / "eval.json").unlink()
    (run_dir / "summary.json").unlink()
    finished = run(tmp_path, script, "--resume", str(run_dir / "checkpoint.pt"))
    assert finished.returncode == 0 and "already finished" not in finished.stdout, finished.stderr
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == evaluation["returns"]
    closing = json.loads((run_dir / "summary.json").read_text())
    assert closing["global_step"] == total and closing["sps"] is None
    assert closing["mean_return_last_10"] == summary["mean_return_last_10"]
    assert scalars(run_dir)["charts/learning_rate"] == s["charts/learning_rate"]  # no iteration ran again


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A crash while writing leaves the previous checkpoint intact."""
    proc = run(tmp_path, "ppo_continuous.py", *PENDULUM, "--total-timesteps", "512")
    assert proc.returncode == 0, proc.stderr
    path = only_run(tmp_path) / "checkpoint.pt"
    before = path.read_bytes()
    ckpt = C.load_checkpoint(str(path))
    envs = C.make_envs(ckpt["args"], "test")
    agent = C.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters())

    def crash(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        C.save_checkpoint(str(path), agent, optimizer, envs, ckpt["args"], ckpt["progress"])
    assert path.read_bytes() == before
    envs.close()


def test_evaluation_scores_what_training_scored(tmp_path):
    """With a policy that training no longer changes, the evaluation's returns (sampling, as in
    training) and the training's last episodes come from one distribution."""
    proc = run(
        tmp_path,
        "ppo_continuous.py",
        *PENDULUM[:-2],
        "--total-timesteps",
        "4096",
        "--learning-rate",
        "1e-9",
        "--eval-episodes",
        "10",
        "--eval-stochastic",
    )
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run(tmp_path)
    train = [v for _, v in scalars(run_dir)["charts/episodic_return"]][-10:]
    evaluation = json.loads((run_dir / "eval.json").read_text())
    noise = np.sqrt((np.var(train) + evaluation["std_return"] ** 2) / 10)
    assert abs(evaluation["mean_return"] - np.mean(train)) < 4 * noise
    again = run(
        tmp_path,
        "ppo_continuous.py",
        "--eval-checkpoint",
        str(run_dir / "checkpoint.pt"),
        "--eval-episodes",
        "10",
        "--eval-stochastic",
    )
    assert again.returncode == 0, again.stderr
    assert json.loads((run_dir / "eval.json").read_text())["mean_return"] == pytest.approx(evaluation["mean_return"])
    assert "+-" in again.stdout


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good")
    proc = run(folder, "ppo_continuous.py", *PENDULUM, "--total-timesteps", "256", "--eval-episodes", "0")
    assert proc.returncode == 0, proc.stderr
    return only_run(folder) / "checkpoint.pt"


def other_shapes(ckpt_path: Path, out: Path) -> None:
    ckpt = torch.load(ckpt_path, weights_only=True)
    ckpt["args"]["env_id"] = "MountainCarContinuous-v0"  # 2 observations, not Pendulum's 3
    ckpt["progress"] |= {"iteration": 0, "global_step": 0}  # unfinished: --resume gets as far as the shapes
    torch.save(ckpt, out)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "no checkpoint"),
        ("truncated", "not a readable checkpoint"),
        ("garbage", "not a readable checkpoint"),
        ("other_script", "not written by ppo_atari.py"),
        ("other_shapes", "spaces"),
    ],
)
@pytest.mark.parametrize("mode", ["--resume", "--eval-checkpoint"])
def test_bad_checkpoints_are_refused_with_one_line(tmp_path, good_checkpoint, kind, message, mode):
    good = good_checkpoint
    bad = tmp_path / "bad.pt"
    script = "ppo_atari.py" if kind == "other_script" else "ppo_continuous.py"
    if kind == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "garbage":
        bad.write_bytes(os.urandom(4096))
    elif kind == "other_script":
        bad.write_bytes(good.read_bytes())
    elif kind == "other_shapes":
        other_shapes(good, bad)
    before = files(tmp_path)
    proc = run(tmp_path, script, mode, str(bad), timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.strip().splitlines() if "A.L.E" not in line and "Stella" not in line]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], proc.stderr
    assert files(tmp_path) == before  # nothing written


def test_checkpoints_never_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    path = tmp_path / "evil.pt"
    torch.save({"script": "ppo_continuous", "payload": Evil()}, path)
    proc = run(tmp_path, "ppo_continuous.py", "--eval-checkpoint", str(path), timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "pwned").exists()


def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    proc = run(
        tmp_path,
        "ppo_continuous.py",
        *PENDULUM,
        "--total-timesteps",
        "2560",
        "--save-every",
        "1",
        "--learning-rate",
        "1e38",
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: non-finite") and "Traceback" not in proc.stderr
    run_dir = only_run(tmp_path)
    if (run_dir / "checkpoint.pt").exists():  # the good one from before the fault, loadable
        ckpt = C.load_checkpoint(str(run_dir / "checkpoint.pt"))
        assert all(torch.isfinite(v).all() for v in ckpt["agent"].values())


@pytest.mark.parametrize(
    "script, flags",
    [
        ("ppo_continuous.py", PENDULUM + ["--total-timesteps", "1024"]),
        ("ppo_atari.py", BREAKOUT + ["--total-timesteps", "128"]),
        ("ppo_gridworld.py", ["--num-iterations", "5"]),
    ],
)
def test_same_seed_same_scalars(tmp_path, script, flags):
    results = []
    for attempt in range(2):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        proc = run(folder, script, *flags)
        assert proc.returncode == 0, proc.stderr
        s = scalars(only_run(folder))
        results.append({tag: values for tag, values in s.items() if tag != "charts/SPS"})
    assert results[0] == results[1]


def test_a_second_interrupt_quits_at_once(tmp_path):
    flags = [
        "--env-id",
        "Pendulum-v1",
        "--num-steps",
        "4096",
        "--num-minibatches",
        "4",
        "--update-epochs",
        "2",
        "--total-timesteps",
        "40960",
        "--save-every",
        "1",
    ]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "ppo_continuous.py"), *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not list(tmp_path.glob("runs/*/checkpoint.pt")):
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.1)
    saved = next(tmp_path.glob("runs/*/checkpoint.pt")).stat().st_mtime_ns
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # within the same (seconds-long) iteration
    proc.wait(timeout=60)
    assert proc.returncode == 130
    assert "resume with:" not in proc.stderr.read()  # it did not wait to save
    assert next(tmp_path.glob("runs/*/checkpoint.pt")).stat().st_mtime_ns == saved
