"""The benchmark tools run and report what they promise (their figures come from real runs)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_run_seeds_runs_seeds_in_parallel_with_the_threads_split(tmp_path):
    flags = ["--env-id", "Pendulum-v1", "--num-steps", "256", "--total-timesteps", "512", "--eval-episodes", "0"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_seeds.py"), "--script", str(ROOT / "ppo_continuous.py")]
        + ["--seeds", "1", "2", "--parallel", "2", "--", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("OMP_NUM_THREADS=") == 2
    assert "seed 1: final return" in proc.stdout and "seed 2: final return" in proc.stdout
    assert "over 2 seeds" in proc.stdout
    assert len(list((tmp_path / "runs").iterdir())) == 2
