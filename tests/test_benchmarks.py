"""The benchmark tools run and report what they promise (their figures come from real runs)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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
import plot_curves  # noqa: E402

import evidence  # noqa: E402


def fake_run(
    runs_dir: Path, env_id: str, exp_name: str, seed: int, returns, evaluation=None, done=True, stamp=1700000000
):
    """A run folder as the scripts write it: episode returns in TensorBoard, summary.json when finished."""
    from torch.utils.tensorboard import SummaryWriter

    folder = runs_dir / f"{env_id}__{exp_name}__{seed}__{stamp}"
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
    assert flags == {
        "clip-0.1": ("--clip-coef", "0.1"),
        "clip-0.2": ("--clip-coef", "0.2"),
        "clip-0.3": ("--clip-coef", "0.3"),
        "kl-adaptive": ("--objective", "kl-adaptive", "--kl-target", "0.01", "--kl-beta", "1.0"),
        "kl-fixed": ("--objective", "kl-fixed", "--kl-beta", "1.0"),
        "none": ("--objective", "none"),
    }
    assert {r.variant: r.flags for r in details} == {
        "init-std-1.0": (),
        "clip-vloss": ("--clip-vloss",),
        "no-bootstrap-truncation": ("--no-bootstrap-truncation",),
        "gymnasium-reward-norm": (),
    }
    assert {r.steps for r in evidence.grid("mujoco") + evidence.grid("atari")} == {1_000_000}
    assert {r.flags for r in evidence.grid("mujoco") + evidence.grid("atari")} == {()}  # the defaults
    assert {(r.env_id, r.seed) for r in evidence.grid("mujoco")} == {
        (e, s) for e in evidence.MUJOCO_ENVS for s in (1, 2, 3)
    }
    assert evidence.grid("atari")[0].script == "ppo_atari.py" and table1[0].script == "ppo_continuous.py"


def test_evidence_resumes_a_cut_run_and_skips_a_finished_one(tmp_path):
    run = evidence.Run("table1", "none", "Hopper-v4", 2, 300_000, ("--objective", "none"))
    assert run.state(str(tmp_path)) == ("missing", None)
    command = run.command(str(tmp_path))
    assert command[1:] == [
        str(ROOT / "ppo_continuous.py"),
        *("--env-id", "Hopper-v4", "--seed", "2", "--total-timesteps", "300000", "--exp-name", "table1-none"),
        *("--save-every", "10", "--objective", "none", "--no-cuda"),
    ]
    assert "--no-cuda" not in evidence.grid("atari")[0].command(str(tmp_path))  # the CNN wants a GPU where there is one
    cut = fake_run(tmp_path, "Hopper-v4", "table1-none", 2, [1.0], done=False)
    assert run.state(str(tmp_path)) == ("cut", str(cut))
    assert run.command(str(tmp_path))[-2:] == ["--resume", str(cut / "checkpoint.pt")]
    done = fake_run(tmp_path, "Hopper-v4", "table1-none", 2, [1.0])
    assert run.state(str(tmp_path)) == ("done", str(done))
    newer = fake_run(tmp_path, "Hopper-v4", "table1-none", 2, [1.0], stamp=1800000000)
    assert run.state(str(tmp_path)) == ("done", str(newer))
    newer.joinpath("summary.json").unlink()
    assert run.state(str(tmp_path)) == ("done", str(done))  # a finished run beats a newer cut one
    done.joinpath("summary.json").unlink()
    assert run.state(str(tmp_path)) == ("cut", str(newer))  # of two cut runs, the newer checkpoint


def test_a_cut_patched_variant_resumes_with_its_patch(tmp_path):
    run = evidence.Run("details", "gymnasium-reward-norm", "Hopper-v4", 1, 300_000, ())
    cut = fake_run(tmp_path, "Hopper-v4", "details-gymnasium-reward-norm", 1, [1.0], done=False)
    command = run.command(str(tmp_path))
    assert command[1] == "-c" and evidence.VARIANT_PATCHES["gymnasium-reward-norm"] in command[2]
    assert command[3:] == ["--resume", str(cut / "checkpoint.pt")]


FAKE_SCRIPT = """
import json, os, sys, time
argv = sys.argv[1:]
with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
    f.write(json.dumps({"argv": argv, "threads": os.environ["OMP_NUM_THREADS"], "cwd": os.getcwd()}) + "\\n")
if "--resume" in argv:
    folder = os.path.dirname(argv[argv.index("--resume") + 1])
else:
    name = "__".join(argv[argv.index(flag) + 1] for flag in ("--env-id", "--exp-name", "--seed"))
    folder = os.path.join("runs", name + "__1700000000")
    os.makedirs(folder)
if "table1-fail" in folder:
    sys.exit(3)
if "table1-nosummary" not in folder:
    open(os.path.join(folder, "summary.json"), "w").write("{}")
print("trained", folder)
"""


def test_evidence_runs_what_is_missing_resumes_what_is_cut_and_counts_failures(tmp_path, monkeypatch, capsys):
    repo, runs_dir = tmp_path / "repo", tmp_path / "evidence" / "runs"
    repo.mkdir()
    (repo / "ppo_continuous.py").write_text(FAKE_SCRIPT)
    monkeypatch.setattr(evidence, "ROOT", str(repo))
    monkeypatch.setattr(evidence, "POLL_S", 0.05)
    monkeypatch.setattr(evidence.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    make = lambda variant, env_id: evidence.Run("table1", variant, env_id, 1, 2048, ())  # noqa: E731
    missing, cut, done = make("a", "Hopper-v4"), make("b", "Hopper-v4"), make("c", "Hopper-v4")
    failing, unfinished = make("fail", "Hopper-v4"), make("nosummary", "Hopper-v4")
    cut_folder = fake_run(runs_dir, "Hopper-v4", "table1-b", 1, [1.0], done=False)
    fake_run(runs_dir, "Hopper-v4", "table1-c", 1, [1.0])
    failed = evidence.run([missing, cut, done, failing, unfinished], str(runs_dir), parallel=2)
    out = capsys.readouterr().out
    assert failed == 2 and "1 of 5 done; 4 to go, 2 at a time" in out
    assert "FAILED Hopper-v4 table1-fail seed 1 (exit 3)" in out
    assert "table1-nosummary seed 1 (exit 0 without summary.json" in out
    calls = [json.loads(line) for line in (repo / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 4  # the finished run is not started again
    assert {c["threads"] for c in calls} == {"2"} and {c["cwd"] for c in calls} == {str(runs_dir.parent)}
    assert ["--resume", str(cut_folder / "checkpoint.pt")] in [c["argv"] for c in calls]
    assert missing.state(str(runs_dir))[0] == cut.state(str(runs_dir))[0] == "done"
    assert len(list((runs_dir.parent / "logs").glob("*.log"))) == 4 and not list(runs_dir.glob("*.log"))
    assert "trained" in (runs_dir.parent / "logs" / "Hopper-v4__table1-a__1.log").read_text()


def test_evidence_status_lists_every_first_seed_before_any_second(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "evidence.py"),
            "status",
            "table1",
            "details",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    seeds = [line.split()[-1] for line in out.stdout.splitlines()]
    assert seeds == ["1"] * 30 + ["2"] * 30
    assert {line.split()[0] for line in out.stdout.splitlines()} == {"missing"}


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
    random = {"HalfCheetah-v4": -100.0, "Hopper-v4": -200.0, "Walker2d-v4": 0.0}  # measured once, cached
    (tmp_path / "random.json").write_text(json.dumps(random))
    for env_id in evidence.SMALL_ENVS:
        for seed, a, b in ((1, 200, 50), (2, 400, 150)):
            fake_run(runs, env_id, "table1-clip-0.2", seed, [0.0] * 50 + [a] * 100, evaluation=a + 1)
            # last 100 episodes average b, the last 10 b + 10: the paper's score takes the last 100
            fake_run(runs, env_id, "table1-none", seed, [999.0] * 50 + [b - 10] * 50 + [b + 10] * 50)
    fake_run(runs, "HalfCheetah-v4", "table1-clip-0.1", 1, [5000.0] * 100, done=False)  # cut: not counted
    fake_run(runs, "Hopper-v4", "details-clip-vloss", 1, [600.0] * 100)  # beats the defaults on Hopper
    fake_run(runs, "Walker2d-v4", "details-clip-vloss", 1, [150.0] * 100)  # loses to them on Walker2d
    fake_run(runs, "Ant-v4", "mujoco-default", 1, [1000.0] * 10, evaluation=1100.0)
    fake_run(runs, "Ant-v4", "mujoco-default", 2, [3000.0] * 10, evaluation=3100.0)
    fake_run(runs, "HalfCheetah-v4", "mujoco-default", 1, [2000.0] * 10, evaluation=2500.0)
    fake_run(runs, "PongNoFrameskip-v4", "atari-default", 1, [20.0] * 10, evaluation=21.0)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--dir", str(tmp_path), "--per-seed"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in out.stdout.splitlines()
        if line.startswith("|")
    }
    assert rows["clipping, eps = 0.2 (default)"] == ["300 +- 100 (2)"] * 3 + ["1.00", "6", "0.82"]  # paper's beside
    none = [(150 / 400 + 250 / 400) / 2, (250 / 500 + 350 / 500) / 2, (50 / 300 + 150 / 300) / 2]  # per env
    assert rows["no clipping or penalty"] == ["100 +- 50 (2)"] * 3 + [f"{sum(none) / 3:.2f}", "6", "-0.39"]
    assert "clipping, eps = 0.1" not in rows
    # the details table: best per env over the defaults and the variants (600 on Hopper, the defaults' 300 elsewhere)
    defaults = (300 / 400 + 500 / 400 + 400 / 800 + 600 / 800 + 200 / 300 + 400 / 300) / 6
    assert rows["the defaults"][3] == f"{defaults:.2f}"
    assert rows["value clipping on (`--clip-vloss`, CleanRL's)"][:5] == ["-", "600 (1)", "150 (1)", "0.75", "2"]
    assert rows["Ant-v4"] == ["2", "2000 +- 1000", "2100 +- 1000", "-", "-"]
    assert rows["HalfCheetah-v4"] == ["1", "2000", "2500", "1442 +- 46", "~1800"]
    assert rows["PongNoFrameskip-v4"] == ["1", "20.0", "21.0", "-20.7", "20.7 (10M)"]
    assert "| table1 | none | Hopper-v4 | 1 | 60.0 | 50.0 | - | 150000 |" in out.stdout
    assert "| table1 | clip-0.2 | Hopper-v4 | 1 | 200.0 | 200.0 | 201.0 | 150000 |" in out.stdout


def test_random_policy_returns_are_measured_once_and_cached(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tables

    cache = tmp_path / "random.json"
    measured = tables.random_returns(["Pendulum-v1"], str(cache))["Pendulum-v1"]
    assert -1400 < measured < -1000  # the mean of 100 random episodes (their best is near -750)
    assert json.loads(cache.read_text()) == {"Pendulum-v1": measured}
    cache.write_text(json.dumps({"Pendulum-v1": 1.0}))
    assert tables.random_returns(["Pendulum-v1"], str(cache)) == {"Pendulum-v1": 1.0}


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
    fake_run(runs, "Ant-v4", "a", 1, [1.0] * 30, done=False)  # still going
    finished = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot_curves.py"), "--group", f"first={runs}/*__a__*"]
        + ["--finished", "--out", str(out_png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Ant-v4" not in finished.stdout and "2 panel(s), 1 group(s)" in finished.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot_curves.py"), "--group", f"x={runs}/nothing*"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "no run folders for group 'x'" in bad.stderr


def test_plot_curves_draws_the_mean_and_min_to_max_of_running_means(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    runs = tmp_path / "runs"
    for seed, scale in ((1, 1.0), (2, 2.0), (3, 6.0)):  # episode i returns scale * i; the median is not the mean
        fake_run(runs, "Hopper-v4", "a", seed, [scale * i for i in range(30)])
        fake_run(runs, "Walker2d-v4", "a", seed, [scale * i for i in range(30)])
    fake_run(runs, "Walker2d-v4", "b", 1, [1.0, 2.0, 3.0, 4.0, 6.0])  # fewer episodes than the running mean's 10
    # a running mean of 10 episodes: its first point at the 10th episode (step 10,000), its last 24.5 x scale
    steps, values = plot_curves.load_curve(str(runs / "Hopper-v4__a__1__1700000000"), "charts/episodic_return")
    assert steps[0] == 10_000 and steps[-1] == 30_000 and values[[0, -1]] == pytest.approx([4.5, 24.5])
    assert plot_curves.load_curve(str(next(runs.glob("Walker2d-v4__b__*"))), "charts/episodic_return")[1].tolist() == [
        3.2
    ]
    # the common grid is where every run has data
    grid, ys = plot_curves.mean_and_spread([(np.array([0.0, 10.0]), np.zeros(2)), (np.array([5.0, 20.0]), np.ones(2))])
    assert grid[0] == 5.0 and grid[-1] == 10.0 and ys.shape == (2, plot_curves.GRID_POINTS)

    monkeypatch.setattr(plt.Figure, "savefig", lambda *args, **kwargs: None)
    group_a, group_b = f"a={runs}/*__a__*", f"b={runs}/Walker2d-v4__b__*"
    monkeypatch.setattr(sys, "argv", ["plot_curves.py", "--group", group_a, "--group", group_b])
    plot_curves.main()
    hopper, walker = plt.gcf().axes
    final = 24.5 * np.array([1.0, 2.0, 6.0])
    for ax in (hopper, walker):
        line = ax.lines[0]
        assert line.get_label().startswith("a: mean of 3 runs") and line.get_ydata()[-1] == pytest.approx(final.mean())
        band = ax.collections[0].get_paths()[0].vertices[:, 1]
        assert band.min() == pytest.approx(4.5) and band.max() == pytest.approx(final.max())  # min to max, not +- std
    assert hopper.lines[0].get_color() == walker.lines[0].get_color() == "C0" != walker.lines[1].get_color()  # by group
    assert walker.lines[1].get_label() == "b: one run" and len(hopper.lines) == 1
    plt.close("all")
