"""The benchmark tools run and report what they promise (their figures come from real runs)."""

import json
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


# --- benchmarks/evidence.py, tables.py and plot_curves.py: the README's tables and figures -------------------

sys.path.insert(0, str(ROOT / "benchmarks"))
import evidence  # noqa: E402


def fake_run(runs_dir: Path, env_id: str, exp_name: str, seed: int, returns: list[float], evaluation=None, done=True):
    """A run folder as the scripts write it: episode returns in TensorBoard, summary.json when finished."""
    from torch.utils.tensorboard import SummaryWriter

    folder = runs_dir / f"{env_id}__{exp_name}__{seed}__1700000000"
    writer = SummaryWriter(str(folder))
    for i, value in enumerate(returns):
        writer.add_scalar("charts/episodic_return", value, (i + 1) * 1000)
    writer.close()
    (folder / "checkpoint.pt").write_bytes(b"")
    if done:
        summary = {
            "global_step": len(returns) * 1000,
            "mean_return_last_10": sum(returns[-10:]) / min(10, len(returns)),
        }
        (folder / "summary.json").write_text(json.dumps(summary | {"eval_mean_return": evaluation}))
    return folder


def test_evidence_grids_are_the_protocols_seed_major():
    table1, details = evidence.grid("table1"), evidence.grid("details")
    assert len(table1) == 6 * 3 * 2 and len(details) == 4 * 3 * 2
    assert len(evidence.grid("mujoco")) == 5 * 3 and len(evidence.grid("atari")) == 3
    assert {r.steps for r in table1 + details} == {300_000}
    assert [r.seed for r in table1] == sorted(r.seed for r in table1)  # a cut grid has every setting on seed 1
    flags = {r.variant: r.flags for r in table1}
    assert flags["kl-adaptive"] == ("--objective", "kl-adaptive", "--kl-target", "0.01", "--kl-beta", "1.0")
    assert flags["kl-fixed"] == ("--objective", "kl-fixed", "--kl-beta", "1.0")
    assert flags["none"] == ("--objective", "none") and flags["clip-0.3"] == ("--clip-coef", "0.3")
    assert evidence.grid("atari")[0].script == "ppo_atari.py" and table1[0].script == "ppo_continuous.py"


def test_evidence_resumes_a_cut_run_and_skips_a_finished_one(tmp_path):
    run = evidence.Run("table1", "none", "Hopper-v4", 2, 300_000, ("--objective", "none"))
    assert run.state(str(tmp_path)) == ("missing", None)
    command = run.command(str(tmp_path))
    assert command[command.index("--exp-name") + 1] == "table1-none" and "--save-every" in command
    assert command[-2:] == ["--objective", "none"]
    cut = fake_run(tmp_path, "Hopper-v4", "table1-none", 2, [1.0], done=False)
    assert run.state(str(tmp_path)) == ("cut", str(cut))
    assert run.command(str(tmp_path))[-2:] == ["--resume", str(cut / "checkpoint.pt")]
    done = fake_run(tmp_path, "Hopper-v4", "table1-none", 2, [1.0])
    assert run.state(str(tmp_path)) == ("done", str(done))


def run_variant(tmp_path: Path, variant: str) -> dict:
    """Run a details variant for one iteration on Pendulum through evidence's own command; its checkpoint."""
    import torch

    flags = (*evidence.DETAILS_VARIANTS[variant], "--eval-episodes", "0")
    run = evidence.Run("details", variant, "Pendulum-v1", 1, 2048, flags)
    tmp_path.mkdir()
    proc = subprocess.run(
        run.command(str(tmp_path / "runs")), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return torch.load(run.state(str(tmp_path / "runs"))[1] + "/checkpoint.pt", weights_only=False)


def test_evidence_variants_change_exactly_their_detail(tmp_path):
    default = run_variant(tmp_path / "a", "clip-vloss")
    assert default["args"]["clip_vloss"]
    wide = run_variant(tmp_path / "b", "init-std-1.0")
    # one update moves log std by far less than log(1.0) - log(0.5) = 0.69
    assert default["agent"]["actor_logstd"].mean() < -0.5 < -0.2 < wide["agent"]["actor_logstd"].mean()
    gymnasium = run_variant(tmp_path / "c", "gymnasium-reward-norm")
    # The first rollout's rewards are the same in both (all <= 0 on Pendulum). ScaleReward restarts the discounted
    # return at each 200-step time limit; gymnasium's NormalizeReward carries it on, so its returns run more negative.
    ours, theirs = default["normalization"], gymnasium["normalization"]
    assert ours["return_rms.count"] == theirs["return_rms.count"]  # both skip the autoreset steps
    assert theirs["return_rms.mean"] < ours["return_rms.mean"] - 10


def test_tables_score_runs_as_the_ppo_paper_does(tmp_path):
    runs = tmp_path / "runs"
    # clip-0.2 averages 300 on each env, none 100, random -100 (cached): clip 0.2 scores 1, none (100 + 100) / 400
    for env_id in evidence.SMALL_ENVS:
        for seed, a, b in ((1, 200, 50), (2, 400, 150)):
            fake_run(runs, env_id, "table1-clip-0.2", seed, [0.0] * 50 + [a] * 100, evaluation=a + 1)
            fake_run(runs, env_id, "table1-none", seed, [999.0] * 50 + [b] * 100)
    fake_run(runs, "Hopper-v4", "details-clip-vloss", 1, [600.0] * 100)
    (tmp_path / "random.json").write_text(json.dumps(dict.fromkeys(evidence.SMALL_ENVS, -100.0)))
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--dir", str(tmp_path), "--per-seed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("|")}
    cells = [c.strip() for c in rows["clipping, eps = 0.2 (default)"].split("|")]
    assert cells[2:7] == ["300 +- 100 (2)", "300 +- 100 (2)", "300 +- 100 (2)", "1.00", "6"]
    assert cells[7] == "0.82"  # the paper's figure beside
    assert [c.strip() for c in rows["no clipping or penalty"].split("|")][5] == "0.50"
    details = [c.strip() for c in rows["the defaults"].split("|")]
    assert details[5] == f"{(300 / 700 + 500 / 700 + 2 * (300 / 400 + 500 / 400)) / 6:.2f}"  # best on Hopper: 600
    assert [c.strip() for c in rows["value clipping on (`--clip-vloss`, CleanRL's)"].split("|")][5] == "1.00"
    assert "| table1 | clip-0.2 | Hopper-v4 | 1 | 200.0 | 200.0 | 201.0 | 150000 |" in out.stdout


def test_tables_refuse_a_folder_without_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "evidence.py" in out.stderr


def test_plot_curves_draws_labelled_groups_in_a_panel_per_env(tmp_path):
    runs = tmp_path / "runs"
    for seed in (1, 2):
        fake_run(runs, "Hopper-v4", "a", seed, [10.0 * seed] * 30)
        fake_run(runs, "Walker2d-v4", "a", seed, [100.0 * seed] * 30)
        fake_run(runs, "Hopper-v4", "b", seed, [-5.0] * 30)
    out_png = tmp_path / "curves.png"
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot_curves.py"), "--group", f"first={runs}/*__a__*"]
        + ["--group", f"second={runs}/*__b__*", "--out", str(out_png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Hopper-v4 first: final mean 15.0 (min 10.0, max 20.0)" in out.stdout
    assert "Walker2d-v4 first: final mean 150.0 (min 100.0, max 200.0)" in out.stdout
    assert "Hopper-v4 second: final mean -5.0" in out.stdout and "Walker2d-v4 second" not in out.stdout
    assert "2 panel(s), 2 group(s)" in out.stdout and out_png.stat().st_size > 10_000
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot_curves.py"), "--group", f"x={runs}/nothing*"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "no run folders for group 'x'" in bad.stderr
