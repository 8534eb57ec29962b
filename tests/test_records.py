"""Results that outlive the machine: each finished run of a named grid leaves a compact record that
benchmarks/tables.py reads as it reads the run folder; and the intervals tables.py prints (the IQM with its
stratified-bootstrap interval, the probability of improvement) call a setting better or worse only where the
interval says so. Small synthetic runs and records only, never the real ones, but for one check that every
committed record is well formed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import ale_py
import cores
import grid
import gymnasium as gym
import numpy as np
import pytest
import tables
from conftest import HANG_TIMEOUT, ROOT, finished_run_folder
from scipy import stats

gym.register_envs(ale_py)


def tool(script: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_TIMEOUT)


def test_records_of_finished_runs_give_tables_the_same_figures_once_the_run_folders_are_gone(tmp_path):
    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text(json.dumps({"HalfCheetah-v4": -100.0, "Hopper-v4": 0.0, "Walker2d-v4": 0.0}))
    for i, env_id in enumerate(grid.SMALL_ENVS):
        for seed in (1, 2, 3):
            finished_run_folder(runs, env_id, "table1-clip-0.2", seed, [100.0 * i + seed + k for k in range(150)])
            finished_run_folder(runs, env_id, "table1-clip-0.3", seed, [200.0 * i + 3 * seed + k for k in range(150)])
    recorded = tool("grid.py", "record", "table1", "--dir", str(tmp_path), "--records", str(records))
    assert recorded.returncode == 0, recorded.stderr
    assert len(list(records.glob("*__table1-*.json"))) == 18
    record = json.loads((records / "Hopper-v4__table1-clip-0.3__2.json").read_text())
    assert record["budget"] == grid.SMALL_STEPS  # asked for; reached below: the fake run's own
    assert record["steps"] == 150_000 and record["eval_returns"] == [356.0, 356.0] and record["sps"] == 100.0
    assert record["eval"] == 356.0 and record["wall_time_s"] == 123.0  # summary.json's greedy mean, its wall time
    assert record["last_100"] == pytest.approx(np.mean([206.0 + k for k in range(50, 150)]))
    assert len(record["curve"]) == grid.CURVE_POINTS and record["curve"][0] == [1500, 206.5]  # mean step, mean return
    assert len((records / "Hopper-v4__table1-clip-0.3__2.json").read_bytes()) < 8000  # a few KB
    assert record["cpu"] == cores.cpu_model() and record["cpu"]  # the machine its speed figures were measured on

    flags = ["--dir", str(tmp_path), "--records", str(records), "--per-seed"]
    from_folders = tool("tables.py", *flags)
    assert from_folders.returncode == 0, from_folders.stderr
    shutil.rmtree(runs)  # a new machine: the records alone
    from_records = tool("tables.py", *flags)
    assert from_records.returncode == 0, from_records.stderr
    assert from_records.stdout == from_folders.stdout
    assert "| table1 | clip-0.3 | Hopper-v4 | 2 | " in from_records.stdout

    status = tool("grid.py", "status", "table1", "--dir", str(tmp_path), "--records", str(records))
    states = [line.split()[0] for line in status.stdout.splitlines()]
    assert states.count("recorded") == 18 and states.count("missing") == len(states) - 18


def test_a_recorded_run_is_not_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr(grid.subprocess, "Popen", lambda *a, **k: pytest.fail("a recorded run was started"))
    run = grid.Run("table1", "clip-0.2", "Hopper-v4", 3, 300_000, ())
    Path(grid.record_path(run, str(tmp_path))).write_text(json.dumps({"last_100": 1.0}))
    assert grid.run([run], str(tmp_path / "runs"), parallel=1, records_dir=str(tmp_path)) == 0


def test_the_iqm_and_its_interval_are_rliables_and_verdicts_need_the_interval_to_exclude_one_half():
    rng = np.random.default_rng(0)
    defaults = rng.normal(1.0, 0.05, size=(5, 3))  # (seeds, envs)
    matrices = {
        "defaults": defaults,
        "higher": defaults + 1.0,  # every run above every run of the defaults on its env
        "lower": defaults - 1.0,
        "same": rng.normal(1.0, 0.05, size=(5, 3)),  # drawn from the defaults' distribution
    }
    result = tables.intervals(matrices, "defaults")
    for name, m in matrices.items():
        assert result[name]["iqm"] == pytest.approx(stats.trim_mean(m.ravel(), 0.25))  # the interquartile mean
        low, high = result[name]["iqm_ci"]
        assert low <= result[name]["iqm"] <= high and high - low > 0
        assert result[name]["runs"] == 15 and result[name]["seeds"] == 5
    assert "p_improve" not in result["defaults"] and tables.verdict(result["defaults"]) == "-"
    assert result["higher"]["p_improve"] == 1.0 and tables.verdict(result["higher"]) == "better"
    assert result["lower"]["p_improve"] == 0.0 and tables.verdict(result["lower"]) == "worse"
    low, high = result["same"]["p_improve_ci"]
    assert low < 0.5 < high and tables.verdict(result["same"]) == "not separated"
    assert tables.intervals(matrices, "defaults") == result  # seeded: the same intervals on every run
    fewer = tables.intervals({"defaults": defaults, "higher, 2 seeds": defaults[:2] + 1.0}, "defaults")
    assert fewer["higher, 2 seeds"]["p_improve"] == 1.0  # runs of every env compared, whatever their number
    # stratified: runs resampled within each env, never the envs themselves (envs far apart, seeds nearly equal)
    levels = np.array([0.0, 10.0, 100.0]) + rng.normal(0, 0.01, size=(5, 3))
    low, high = tables.intervals({"levels": levels}, None)["levels"]["iqm_ci"]
    assert high - low < 1.0  # resampling the envs would swing the IQM by tens


def test_no_verdict_where_the_runs_are_too_few_for_any_ordering_to_exclude_chance(monkeypatch):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 200)
    defaults = np.array([[29.1], [21.8], [23.5]])  # (seeds, envs): one game, 3 runs
    two_above = tables.intervals({"defaults": defaults, "flag": np.array([[32.3], [33.0]])}, "defaults")["flag"]
    assert two_above["p_improve_ci"] == [1.0, 1.0]  # the bootstrap's interval has no width: every run above every run
    assert two_above["least_p"] == pytest.approx(2 / 10) and tables.verdict(two_above) == "too few runs"
    three_each = tables.intervals({"defaults": defaults, "flag": defaults + 50}, "defaults")["flag"]
    assert tables.verdict(three_each) == "too few runs"  # 3 against 3 on one env: at best p = 2/20
    three_envs = tables.intervals({"defaults": np.ones((3, 3)), "flag": np.ones((3, 3)) + 1}, "defaults")["flag"]
    assert three_envs["least_p"] == pytest.approx(2 / 20**3) and tables.verdict(three_envs) == "better"
    one_seed = tables.intervals({"defaults": np.ones((3, 3)), "flag": np.zeros((1, 3))}, "defaults")["flag"]
    assert one_seed["least_p"] < 0.05 and one_seed["p_improve_ci"] == [0.0, 0.0]  # a grid cut after its first seed
    assert tables.verdict(one_seed) == "too few runs"
    one_seed_baseline = tables.intervals({"defaults": np.zeros((1, 3)), "flag": np.ones((3, 3))}, "defaults")["flag"]
    assert one_seed_baseline["least_p"] < 0.05 and one_seed_baseline["p_improve_ci"] == [1.0, 1.0]
    assert tables.verdict(one_seed_baseline) == "too few runs"  # one seed on either side: no verdict
    assert tables.interval_cells(one_seed) == " 0.00 (one seed) | 0.00 (one seed) | too few runs |"


def test_scores_are_normalized_per_env_over_the_seeds_that_ran_on_every_env():
    runs = {
        "Hopper-v4": [{"seed": 1, "last_100": 110.0}, {"seed": 2, "last_100": 210.0}, {"seed": 3, "last_100": 0.0}],
        "Walker2d-v4": [{"seed": 1, "last_100": 30.0}, {"seed": 2, "last_100": 50.0}],  # seed 3 not run yet
    }
    matrix = tables.score_matrix(
        runs, {"Hopper-v4": 10.0, "Walker2d-v4": 10.0}, {"Hopper-v4": 210.0, "Walker2d-v4": 50.0}
    )
    np.testing.assert_allclose(matrix, [[0.5, 0.5], [1.0, 1.0]])  # (seeds 1-2, envs): 0 random, 1 the reference
    found = {("defaults", e): runs[e] for e in runs} | {("flag", e): runs[e] for e in runs}
    with pytest.raises(SystemExit, match="defaults is no better than the random policy on Walker2d-v4"):  # 40 <= 50
        tables.study_stats(found, ["defaults", "flag"], {"Hopper-v4": 10.0, "Walker2d-v4": 50.0}, "defaults", (*runs,))


def test_plot_curves_draws_records_as_it_draws_run_folders_and_leaves_out_records_without_a_curve(tmp_path):
    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir()
    for seed in (1, 2):
        finished_run_folder(runs, "Hopper-v4", "table1-clip-0.2", seed, [10.0 * seed] * 300)
    assert tool("grid.py", "record", "table1", "--dir", str(tmp_path), "--records", str(records)).returncode == 0
    transcribed = {"env_id": "Hopper-v4", "seed": 3, "last_10": 5.0, "curve": None}  # a table's figures, no curve
    (records / "Hopper-v4__table1-clip-0.2__3.json").write_text(json.dumps(transcribed))
    from_records = f"from records={records}/*__table1-*.json"
    plot = ["plot_curves.py", "--group", f"from folders={runs}/*", "--group", from_records]
    out = tool(*plot, "--finished", "--out", str(tmp_path / "curves.png"))
    assert out.returncode == 0, out.stderr
    assert "Hopper-v4 from folders: final mean 15.0 (min 10.0, max 20.0)" in out.stdout
    assert "Hopper-v4 from records: final mean 15.0 (min 10.0, max 20.0)" in out.stdout  # 2 runs, not 3
    assert out.stderr.count("left out") == 1 and "Hopper-v4__table1-clip-0.2__3.json" in out.stderr
    steps, values = plot_curves_load(records / "Hopper-v4__table1-clip-0.2__2.json")
    assert len(steps) == grid.CURVE_POINTS and steps[0] == 2000 and set(values) == {20.0}  # 3 episodes a slice
    only_transcribed = tool("plot_curves.py", str(records / "Hopper-v4__table1-clip-0.2__3.json"))
    assert only_transcribed.returncode == 1 and "no runs in any group" in only_transcribed.stderr
    # a record that kept its final figures but no curve is drawn as its last 100 episodes' mean at its last step
    for seed, last_100 in ((4, 7.0), (5, 11.0)):
        final_only = transcribed | {"seed": seed, "steps": 300_000, "last_100": last_100}
        (records / f"Hopper-v4__table1-clip-0.2__{seed}.json").write_text(json.dumps(final_only))
    out = tool(
        "plot_curves.py", "--group", from_records, "--group", "none yet=nothing*", "--out", str(tmp_path / "c.png")
    )
    assert out.returncode == 0, out.stderr
    assert "Hopper-v4 from records: last 100 episodes, mean 9.0 of 2 runs" in out.stdout
    assert "Hopper-v4 from records: final mean 15.0 (min 10.0, max 20.0)" in out.stdout  # the curves apart
    assert "left out group 'none yet'" in out.stderr  # a grid under way: its settings not run yet are left out


def test_plot_curves_draws_the_panels_asked_for_with_each_panels_reference_levels(tmp_path, monkeypatch):
    import matplotlib.axes
    import plot_curves

    runs = tmp_path / "runs"
    for env_id in ("Hopper-v4", "Swimmer-v4", "Walker2d-v4"):
        finished_run_folder(runs, env_id, "table1-clip-0.2", 1, [10.0] * 30)
    drawn = []
    real_axhline = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "axhline",
        lambda ax, y, **kw: drawn.append((ax, y, kw["label"], kw["color"])) or real_axhline(ax, y, **kw),
    )
    levels = ["--hline", "Hopper-v4=2316.2:ppo2", "--hline", "Swimmer-v4=-6.5:ppo2", "--hline", "5:everywhere"]
    folders = sorted(map(str, runs.glob("*")))
    argv = [*folders, "--env", "Hopper-v4", "--env", "Swimmer-v4", *levels, "--out", str(tmp_path / "p.png")]
    monkeypatch.setattr(sys, "argv", ["plot_curves.py", *argv])
    plot_curves.main()
    panels = {(ax.get_title(), y, label, color) for ax, y, label, color in drawn}
    assert {(title, y, label) for title, y, label, _ in panels} == {
        ("Hopper-v4", 2316.2, "ppo2"),
        ("Swimmer-v4", -6.5, "ppo2"),
        ("Hopper-v4", 5.0, "everywhere"),
        ("Swimmer-v4", 5.0, "everywhere"),
    }  # Walker2d-v4 has no panel; each ENV= level in its own panel only
    assert len({color for _, _, label, color in panels if label == "ppo2"}) == 1  # one color per label
    bad = tool("plot_curves.py", str(runs / "Hopper-v4__table1-clip-0.2__1__1700000000"), "--hline", "Hopper-v4=high")
    assert (
        bad.returncode == 1 and bad.stderr.strip() == "error: --hline needs [ENV=]VALUE[:LABEL], got 'Hopper-v4=high'"
    )


def plot_curves_load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import plot_curves

    return plot_curves.load_curve(str(path), "charts/episodic_return")


def test_every_committed_record_is_a_whole_run_of_a_named_grid_under_its_own_label():
    import tyro

    import ppo_atari
    import ppo_continuous

    runs = {r.label: r for name in grid.GRIDS for r in grid.grid_runs(name)}
    for path in sorted(Path(grid.RECORDS_DIR).glob("*.json")):
        record = json.loads(path.read_text())  # a stray or truncated file fails here
        if path.name == "random.json":
            assert all(isinstance(v, float) for v in record.values())
            continue
        run = grid.Run(record["grid"], record["variant"], record["env_id"], record["seed"], None, ())
        assert path.stem == run.label in runs, path.name
        assert record["last_10"] is not None and record["last_100"] is not None, path.name
        # every iteration of the run's budget (at 10M Atari steps 9,999,360: 9,765 rollouts of 8 x 128)
        run = runs[run.label]
        script = ppo_atari if run.script == "ppo_atari.py" else ppo_continuous
        steps = [] if run.steps is None else ["--total-timesteps", str(run.steps)]
        args = tyro.cli(script.Args, args=[*run.flags, *steps])
        assert record["steps"] == args.num_iterations * args.batch_size, path.name
        assert record["budget"] == run.steps, path.name  # what read_record compares with the grid's budget now


def write_record(
    records: Path, grid_name: str, env_id: str, seed: int, last_10: float, last_100: float, variant: str = "default"
) -> None:
    """A record of a run (the defaults' unless variant), as grid.py writes one (the figures tables.py reads)."""
    run = grid.Run(grid_name, variant, env_id, seed, None, ())
    record = {"grid": grid_name, "variant": variant, "env_id": env_id, "seed": seed, "steps": 1000}
    record |= {"last_10": last_10, "last_100": last_100, "eval": None, "curve": None}
    Path(grid.record_path(run, str(records))).write_text(json.dumps(record))


def test_results_tables_show_the_last_100_on_mujoco_the_last_10_on_atari_intervals_score_the_last_100(
    tmp_path,
):
    records = tmp_path / "records"
    records.mkdir()
    random = {"HalfCheetah-v4": -100.0, "Hopper-v4": 0.0, "Walker2d-v4": 0.0, "Humanoid-v4": 0.0} | PAPER_RANDOM
    (records / "random.json").write_text(json.dumps(random))
    cheetah = np.array([1000.0, 1442.0, 2000.0])  # each seed's last 100 episodes; its last 10 are 10 times as much
    for seed, last_100 in enumerate(cheetah, 1):
        write_record(records, "mujoco", "HalfCheetah-v4", seed, 10 * last_100, last_100)
    write_record(records, "atari", "PongNoFrameskip-v4", 1, 5.0, -5.0)
    flags = ["--dir", str(tmp_path), "--records", str(records)]
    out = tool("tables.py", *flags)
    assert out.returncode == 0, out.stderr
    # MuJoCo: the last 100 episodes, as CleanRL's published figure beside them; Atari: the last 10 games
    assert f"| HalfCheetah-v4 | 3 | {cheetah.mean():.0f} +- {cheetah.std():.0f} | - | 1442 +- 46 |" in out.stdout
    assert "| PongNoFrameskip-v4 | 1 | 5.0 | - | -20.7 | 20.7 (10M) |" in out.stdout
    iqm = stats.trim_mean((cheetah + 100) / (1442 + 100), 0.25)  # 0 the random policy, 1 CleanRL's published mean
    assert f"(0 random, 1 CleanRL's published return) {iqm:.2f}, 95% CI [" in out.stdout and "3 runs" in out.stdout
    assert "Atari, the defaults: an interval takes the seeds run on every env, one so far (1 run): too few" in (
        out.stdout
    )
    pong = np.array([-5.0, -10.0, 0.0])
    for seed, last_100 in ((2, pong[1]), (3, pong[2])):
        write_record(records, "atari", "PongNoFrameskip-v4", seed, 0.0, last_100)
    out = tool("tables.py", *flags)
    iqm = stats.trim_mean((pong + 20.7) / (9.3 + 20.7), 0.25)  # 0 the random agent, 1 the human (Mnih et al. 2015)
    assert f"Atari, the defaults: IQM of normalized scores (0 random agent, 1 human, Mnih et al. 2015) {iqm:.2f}" in (
        out.stdout
    )


PAPER_RANDOM = {"InvertedDoublePendulum-v4": 50.0, "InvertedPendulum-v4": 5.0, "Reacher-v4": -43.0, "Swimmer-v4": 0.0}


def test_the_papers_seven_tasks_stand_beside_its_figures_and_baselines_and_are_scored_from_random_to_ppo2(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text(json.dumps(PAPER_RANDOM | {e: 0.0 for e in grid.SMALL_ENVS}))
    reacher, swimmer = np.array([-5.0, -6.0, -9.0]), np.array([40.0, 120.0, 350.0])
    for seed in (1, 2, 3):
        write_record(records, "mujoco", "Reacher-v4", seed, 0.0, reacher[seed - 1])
        write_record(records, "mujoco", "Swimmer-v4", seed, 0.0, swimmer[seed - 1])
    write_record(records, "mujoco", "InvertedPendulum-v4", 1, 0.0, 1000.0)  # its seeds 2 and 3 still to run
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr  # no interval over the tasks that ran more seeds, as if they were all
    one_seed = "an interval takes the seeds run on every env, one so far (3 runs): too few"
    assert f"seven tasks (the seeds run on every task): {one_seed}" in out.stdout
    write_record(records, "mujoco", "InvertedPendulum-v4", 2, 0.0, 900.0)  # seed 3 still to run: left out everywhere
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr
    assert f"| Reacher-v4 | 3 | {reacher.mean():.0f} +- {reacher.std():.0f} | - | - | - | ~-7 | -6.71 |" in out.stdout
    assert f"| Swimmer-v4 | 3 | {swimmer.mean():.0f} +- {swimmer.std():.0f} | - | - | - | ~110 | 111.2 |" in out.stdout
    pendulum = (np.array([1000.0, 900.0]) - 5.0) / (809.4 - 5.0)  # ppo2 InvertedPendulum-v4: 809.4
    scores = np.concatenate([(reacher[:2] + 43.0) / (-6.71 + 43.0), swimmer[:2] / 111.2, pendulum])  # 0 random, 1 ppo2
    iqm = stats.trim_mean(scores, 0.25)
    line = "the PPO paper's seven tasks (the seeds run on every task): IQM of normalized scores (0 random, 1 baselines'"
    assert f"{line} ppo2 at 1M steps) {iqm:.2f}, 95% CI [" in out.stdout and ", 6 runs (2 seeds x 3 envs)" in out.stdout


def test_table1_at_1m_takes_its_clip_02_row_from_the_mujoco_grid_and_scores_every_row_against_it(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text(json.dumps({e: 0.0 for e in grid.SMALL_ENVS}))
    for seed in (1, 2, 3):
        for env_id in grid.SMALL_ENVS:  # three envs: 3 runs against 3 on one env can not exclude chance
            write_record(records, "mujoco", env_id, seed, 0.0, 1000.0 + seed)  # the defaults: clip 0.2
            write_record(records, "table1", env_id, seed, 0.0, 10.0 * seed, "clip-0.2")  # 300k: not at 1M
            write_record(records, "table1-1m", env_id, seed, 0.0, 2000.0 + seed, "clip-0.1")
            write_record(records, "table1-1m", env_id, seed, 0.0, 500.0 + seed, "none")
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr
    one_m = out.stdout.split("Table 1, 1M steps, three tasks:")[1].split("\n\n")[1]
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in one_m.splitlines() if "|" in line}
    assert rows["clipping, eps = 0.2 (default)"][2] == "1002 +- 1 (3)"  # the mujoco grid's runs, not table1's
    assert rows["clipping, eps = 0.1"][2] == "2002 +- 1 (3)" and rows["clipping, eps = 0.1"][-1] == "better |"
    assert rows["no clipping or penalty"][-1] == "worse |"
    assert float(rows["clipping, eps = 0.1"][4]) == 1.0  # the best setting of each env scores 1
    assert "30 +- 12 (3)" not in one_m


def test_table1_at_the_papers_scale_scores_every_setting_as_the_paper_does_and_says_where_its_ranking_holds(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text(json.dumps({e: 0.0 for e in grid.PAPER_ENVS}))
    last_100 = {"clip-0.1": lambda s: 2000.0 + s, "none": lambda s: 100.0 + s, "kl-fixed-3": lambda s: 1004.0 - s}
    for seed in (1, 2, 3):
        for env_id in grid.PAPER_ENVS:
            write_record(records, "mujoco", env_id, seed, 0.0, 1000.0 + seed)  # clip 0.2, the defaults
            for variant in grid.TABLE1_1M_VARIANTS.keys() - {"clip-0.2"}:
                value = last_100.get(variant, lambda s: 500.0 + s)(seed)  # the rest: below clip 0.2 everywhere
                write_record(records, "table1-1m", env_id, seed, 0.0, value, variant)
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records), "--table1-figure", str(tmp_path / "t1"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "t1.png").stat().st_size > 0  # the figure beside the table: a name with no suffix is a PNG
    table = out.stdout.split("Table 1 at the paper's scale, 1M steps")[1].split("\n\n")[1]
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in table.splitlines()[2:]}
    assert list(rows) == list(tables.TABLE1_NAMES.values())  # the paper's eleven, in its order
    # per task 0 the random policy and 1 the best setting's mean (clip 0.1's 2002), averaged over the 21 runs
    assert rows["clipping, eps = 0.1"][:3] == ["21", "1.00 [1.00, 1.00]", "0.76"]
    assert rows["clipping, eps = 0.2 (default)"][:3] == ["21", f"{1002 / 2002:.2f} [0.50, 0.50]", "0.82"]
    assert (
        rows["no clipping or penalty"][1].startswith(f"{102 / 2002:.2f} [") and rows["fixed KL, beta = 10"][2] == "0.69"
    )
    assert rows["clipping, eps = 0.1"][-1] == "better |" and rows["no clipping or penalty"][-1] == "worse |"
    assert rows["fixed KL, beta = 3"][-1] == "not separated |"  # the same returns, seeds reversed
    tasks = out.stdout.split("the last 100 episodes per task, mean +- std (seeds):")[1].split("\n\n")[1]
    assert tasks.splitlines()[0] == "| setting | " + " | ".join(e.removesuffix("-v4") for e in grid.PAPER_ENVS) + " |"
    assert "| clipping, eps = 0.1 | " + " | ".join(["2002 +- 1 (3)"] * 7) + " |" in tasks
    ranking = "against clip 0.2 (the default): better clip 0.1; worse no clipping or penalty; clip 0.3; adaptive KL"
    assert ranking in out.stdout and "; not separated fixed KL 3." in out.stdout  # all landed: no list of runs to come
    assert "By normalized score, the paper: clip 0.2 (0.82) > clip 0.1 (0.76) > adaptive KL 0.01 (0.74)" in out.stdout
    here = out.stdout.split("Here, the settings with all their runs: ")[1].split("\n")[0]
    assert here.startswith("clip 0.1 (1.00) > ") and here.endswith(f" > no clipping or penalty ({102 / 2002:.2f}).")
    assert (
        "1M steps; all 231 runs): of the 10 other settings with all their runs, 1 scored above clip 0.2 where the "
        "intervals separate, 8 below, 1 not separated: clip 0.2 is not the best." in out.stdout
    )
    assert "so far" not in out.stdout.split("Table 1 at the paper's scale, 1M steps")[1]  # every run in: final
    pairs = out.stdout.split("Pair by pair, among the settings with all their runs")[1].split("\n")[0]
    assert "of the paper's 54 orderings of them, these runs keep 31 (clip 0.2 > adaptive KL 0.01, " in pairs  # no tie
    assert "; clip 0.3 > no clipping or penalty; " in pairs  # every setting stays above no clipping
    # clip 0.1 above clip 0.2 (the table's verdict), fixed KL 3 (~1003) above adaptive KL 0.01 (~501), both below it
    # in the paper; the settings at ~501 among themselves, and fixed KL 3 against clip 0.2, are not separated
    assert pairs.endswith("reverse 2 (here clip 0.1 > clip 0.2; fixed KL 3 > adaptive KL 0.01) and leave 21 open.")

    (records / "Swimmer-v4__table1-1m-clip-0.1__3.json").unlink()  # settings still running: scored over what
    for seed in (2, 3):  # they have, no interval and no verdict until their 21 runs land
        for env_id in grid.PAPER_ENVS:  # seed 1 alone on every task
            (records / f"{env_id}__table1-1m-none__{seed}.json").unlink()
    for seed in (1, 2, 3):  # a setting with no run on one task: no IQM nor P(better) over the six it has
        (records / f"Swimmer-v4__table1-1m-kl-fixed-10__{seed}.json").unlink()
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr
    beta_10 = next(line for line in out.stdout.splitlines() if line.startswith("| fixed KL, beta = 10 | 18 | "))
    assert beta_10.endswith(" | 0.69 | - | - | - |")  # scored over the 18 runs it has; no IQM, no P(better)
    assert "| clipping, eps = 0.1 | 20 | 1.00 (runs to come) | 0.76 |" in out.stdout  # not over its 14 on every task
    assert f"| no clipping or penalty | 7 | {101 / 2002:.2f} (runs to come) | -0.39 |" in out.stdout  # nor of width 0
    assert "runs still to come no clipping or penalty; clip 0.1; fixed KL 10." in out.stdout
    assert "of the 7 other settings with all their runs, 0 scored above" in out.stdout
    assert "clip 0.2 is the best as far as the intervals carry so far." in out.stdout


def test_the_flags_learning_checks_stand_beside_the_defaults_runs_with_the_probability_of_improvement(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text(json.dumps({e: 0.0 for e in grid.SMALL_ENVS}))
    for seed in (1, 2, 3):
        for env_id in grid.SMALL_ENVS:
            write_record(records, "table1", env_id, seed, 0.0, 1000.0 + seed, "clip-0.2")  # the defaults at 300k
            write_record(records, "flags", env_id, seed, 0.0, 999.0 + 2 * seed, "compile")  # the same, or nearly
        write_record(records, "atari", "BreakoutNoFrameskip-v4", seed, 0.0, 20.0 + seed)
    for seed in (1, 3):
        write_record(records, "flags", "BreakoutNoFrameskip-v4", seed, 0.0, 30.0 + seed, "bf16")
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr
    compiled = out.stdout.split("--compile, Table 1's clip 0.2 setting, 300k steps:")[1]
    assert "| the defaults (table1's clip 0.2 runs) | 1002 +- 1 (3) | 1002 +- 1 (3) | 1002 +- 1 (3) |" in compiled
    assert "| --compile | 1003 +- 2 (3) | 1003 +- 2 (3) | 1003 +- 2 (3) |" in compiled
    assert compiled.split("\n\n")[1].splitlines()[-1].endswith(" | not separated |")
    line = "--bf16, BreakoutNoFrameskip-v4, 1M steps: last 100 games 32.0 +- 1.0 (2 runs), the defaults' 22.0 +- 0.8"
    assert f"{line}; P(better than the defaults) 1.00 [1.00, 1.00] (too few runs)" in out.stdout  # 2 against 3


def test_the_studies_score_the_last_100_episodes_and_refuse_an_env_that_no_setting_lifts_above_random(monkeypatch):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)  # the point estimates alone are checked
    found = {
        ("clip-0.2", "Hopper-v4"): [{"seed": 1, "last_100": 300.0, "last_10": 300.0}],
        ("clip-0.3", "Hopper-v4"): [{"seed": 1, "last_100": 200.0, "last_10": 900.0}],
    }
    scores = tables.normalized_scores(found, ["clip-0.2", "clip-0.3"], {"Hopper-v4": 0.0})
    assert scores == {"clip-0.2": [1.0], "clip-0.3": [pytest.approx(2 / 3)]}  # the best mean last 100 scores 1
    with pytest.raises(SystemExit, match="no setting beats the random policy on Hopper-v4"):
        tables.normalized_scores(found, ["clip-0.2", "clip-0.3"], {"Hopper-v4": 300.0})
    # seeds skewed so that their mean (200) is not their median (100): 1 is the mean, the paper's "average"
    runs = [{"seed": s, "last_100": x, "last_10": 1000.0} for s, x in ((1, 100.0), (2, 100.0), (3, 400.0))]
    found = {("clip-0.2", "Hopper-v4"): runs, ("clip-0.3", "Hopper-v4"): [{"seed": 1, "last_100": 150.0}]}
    scores = tables.normalized_scores(found, ["clip-0.2", "clip-0.3"], {"Hopper-v4": 0.0})
    assert scores == {"clip-0.2": [0.5, 0.5, 2.0], "clip-0.3": [0.75]}
    st = tables.study_stats({("clip-0.2", "Hopper-v4"): runs}, ["clip-0.2"], {"Hopper-v4": 0.0}, "clip-0.2")
    assert st["clip-0.2"]["iqm"] == pytest.approx(1.0)  # scores 0.5, 0.5, 2 (three runs: the IQM trims none)


def test_a_tie_is_not_separated_and_a_settings_intervals_do_not_depend_on_the_other_settings(monkeypatch):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 200)  # fewer resamples: the same properties, in seconds
    tie = tables.intervals({"defaults": np.ones((3, 3)), "tie": np.ones((3, 3))}, "defaults")["tie"]
    assert tie["p_improve_ci"] == [0.5, 0.5] and tables.verdict(tie) == "not separated"
    assert (
        tables.verdict({"p_improve_ci": [0.5, 0.8]})
        == tables.verdict({"p_improve_ci": [0.2, 0.5]})
        == ("not separated")
    )
    rng = np.random.default_rng(1)
    defaults, same = rng.normal(1.0, 0.05, (5, 3)), rng.normal(1.0, 0.05, (5, 3))
    alone = tables.intervals({"defaults": defaults, "same": same}, "defaults")["same"]
    beside = tables.intervals({"defaults": defaults, "same": same, "other": defaults + 0.3}, "defaults")["same"]
    before = tables.intervals({"other": defaults + 0.3, "defaults": defaults, "same": same}, "defaults")["same"]
    assert alone == beside == before  # wherever the other setting stands in the table


def test_record_writes_only_the_missing_records_of_finished_runs_and_status_counts_a_recorded_cut_run(tmp_path):
    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir()
    finished_run_folder(runs, "Hopper-v4", "table1-clip-0.2", 1, [1.0] * 20)  # finished, recorded before
    finished_run_folder(runs, "Hopper-v4", "table1-clip-0.2", 2, [2.0] * 20)  # finished, no record yet
    cut = runs / "Hopper-v4__table1-clip-0.2__3__1700000000"  # a checkpoint, no summary.json
    cut.mkdir()
    (cut / "checkpoint.pt").write_bytes(b"")
    kept = records / "Hopper-v4__table1-clip-0.2__1.json"
    kept.write_text('{"source": "committed"}')
    out = tool("grid.py", "record", "table1", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr
    assert kept.read_text() == '{"source": "committed"}'  # a record is never overwritten
    assert sorted(p.name for p in records.iterdir()) == [kept.name, "Hopper-v4__table1-clip-0.2__2.json"]
    (records / "Hopper-v4__table1-clip-0.2__3.json").write_text('{"source": "committed"}')  # made on another machine
    status = tool("grid.py", "status", "table1", "--dir", str(tmp_path), "--records", str(records)).stdout
    hopper = [line.split()[0] for line in status.splitlines() if " clip-0.2 " in line and "Hopper-v4" in line]
    assert hopper == ["done", "done", "recorded"]  # the cut run is not run again: it counts as recorded
    recorded = next(line for line in status.splitlines() if line.startswith("recorded"))
    assert recorded.endswith(str(records / "Hopper-v4__table1-clip-0.2__3.json"))  # where its figures are
    (ad_hoc,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "Hopper-v4"], "x")
    Path(grid.record_path(ad_hoc, str(records))).write_text(json.dumps({"last_100": 1.0}))
    assert grid.read_record(ad_hoc, str(records)) is None  # records are the named grids' alone


def test_plot_curves_takes_only_the_return_from_a_record_and_leaves_out_an_empty_curve(tmp_path):
    import plot_curves

    records = tmp_path / "records"
    records.mkdir()
    curve = {"env_id": "Hopper-v4", "curve": [[1000, 1.0], [2000, 3.0]]}
    (records / "Hopper-v4__table1-a__1.json").write_text(json.dumps(curve))
    (records / "Hopper-v4__table1-a__2.json").write_text(json.dumps(curve | {"curve": []}))  # a run with no episode
    with pytest.raises(SystemExit, match="episodic return only"):
        plot_curves.load_curve(str(records / "Hopper-v4__table1-a__1.json"), "losses/value_loss")
    out = tool("plot_curves.py", "--group", f"a={records}/*.json", "--out", str(tmp_path / "a.png"))
    assert out.returncode == 0, out.stderr
    assert "left out" in out.stderr and "__2.json" in out.stderr and "Hopper-v4 a: final mean 3.0" in out.stdout


def test_plot_curves_draws_the_band_of_two_records(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    import plot_curves

    for seed, level in ((1, 1.0), (2, 3.0)):
        (tmp_path / f"Hopper-v4__a__{seed}.json").write_text(json.dumps({"curve": [[1000, level], [2000, level]]}))
    monkeypatch.setattr(plt.Figure, "savefig", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "argv", ["plot_curves.py", "--group", f"a={tmp_path}/*.json"])
    plot_curves.main()
    (ax,) = plt.gcf().axes
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == 1.0 and band.max() == 3.0 and ax.lines[0].get_ydata()[-1] == 2.0  # min to max, the mean
    plt.close("all")


def test_the_reward_scaling_line_gives_the_probability_that_baselines_semantics_score_higher(monkeypatch):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 200)
    higher = {"evaluation": ([3.0, 4.0, 5.0], [1.0, 2.0, 2.5]), "last 200k steps": ([1.0, 2.0, 2.5], [3.0, 4.0, 5.0])}
    line = tables.reward_scaling_lines(higher)[0]
    assert "evaluation 1.00 [1.00, 1.00] (too few runs)" in line  # 3 runs each: at best p = 2/20
    assert "last 200k steps 0.00 [0.00, 0.00] (too few runs)" in line
    five = {
        "evaluation": ([3, 4, 5, 6, 7], [0, 1, 2, 2.5, 2.7]),
        "last 200k steps": ([0, 1, 2, 2.5, 2.7], [3, 4, 5, 6, 7]),
    }
    line = tables.reward_scaling_lines(five)[0]
    assert "evaluation 1.00 [1.00, 1.00] (better)" in line and "last 200k steps 0.00 [0.00, 0.00] (worse)" in line
    two_pairs_lower = tables.reward_scaling_lines({"evaluation": ([3.0, 2.0, 5.0], [2.5, 2.4, 1.0])})[0]
    assert "evaluation 0.78 [" in two_pairs_lower  # 7 of the 9 pairs: each run of one side against each of the other


def test_plot_curves_draws_records_without_a_curve_as_their_mean_with_a_bar_from_lowest_to_highest(
    tmp_path, monkeypatch, capsys
):
    import matplotlib.pyplot as plt
    import plot_curves

    for seed, steps, last_100 in ((1, 1000, 7.0), (2, 2000, 8.0), (3, 3000, 12.0)):  # made before records kept curves
        record = {"steps": steps, "last_100": last_100}
        (tmp_path / f"Hopper-v4__a__{seed}.json").write_text(json.dumps(record))
    (tmp_path / "Walker2d-v4__a__1.json").write_text(json.dumps({"steps": 1000, "last_100": 500.0}))  # another env
    monkeypatch.setattr(plt.Figure, "savefig", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "argv", ["plot_curves.py", "--group", f"a={tmp_path}/*.json"])
    plot_curves.main()
    hopper, walker = plt.gcf().axes
    (bar,) = hopper.containers  # the errorbar
    assert bar.lines[0].get_ydata()[0] == 9.0  # the mean of the three (their median is 8)
    assert bar.lines[0].get_xdata()[0] == 2000.0  # at the mean of their last steps
    segment = bar.lines[2][0].get_segments()[0]
    assert segment[:, 1].min() == 7.0 and segment[:, 1].max() == 12.0  # lowest to highest, not +- a std
    (other,) = walker.containers  # Walker2d's record alone, in its own panel
    assert other.lines[0].get_ydata()[0] == 500.0 and walker.get_title() == "Walker2d-v4"
    assert "Hopper-v4 a: last 100 episodes, mean 9.0 of 3 runs" in capsys.readouterr().out
    plt.close("all")


def test_atari_at_10m_scores_the_papers_two_ways_beside_the_published_figures_and_says_when_one_seed_has_no_spread(
    tmp_path,
):
    records = tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text("{}")
    for env_id, last_100, every in (("BreakoutNoFrameskip-v4", 301.7, 120.0), ("PongNoFrameskip-v4", 19.0, 4.0)):
        run = grid.Run("atari-10m", "default", env_id, 1, None, ())
        record = {"grid": "atari-10m", "variant": "default", "env_id": env_id, "seed": 1, "steps": 9_999_360}
        record |= {"last_10": last_100 - 50.0, "last_100": last_100, "mean_all": every, "eval": last_100 + 10.0}
        record |= {"curve": [[1, 0.0]], "wall_time_s": 3600.0, "train_time_s": 36_000.0}
        if env_id == "PongNoFrameskip-v4":  # a record from before mean_all and train_time_s: its curve, its wall time
            record |= {"mean_all": None, "train_time_s": None, "curve": [[1, 2.0], [2, 6.0]]}
        Path(grid.record_path(run, str(records))).write_text(json.dumps(record))
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("Atari at the script's own budget, the defaults:\n\n")[1]
    assert table.startswith(tables.ATARI_10M_HEAD)
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table.splitlines()[2:4]}
    breakout = rows["BreakoutNoFrameskip-v4"]
    assert breakout[:4] == ["1", "120.0", "301.7", "311.7"]  # seeds, all of training, last 100, greedy evaluation
    assert breakout[4] == f"{(301.7 - 1.7) / (31.8 - 1.7):.2f}"  # human-normalized: 0 random agent, 1 human
    assert breakout[5:8] == ["414.66 +- 28.09", "406.57 +- 31.55", "274.8"]  # CleanRL, ppo2, the paper's Table 6
    assert breakout[8] == f"10.0 ({9_999_360 / 36_000:.0f}) |"  # the training time of every process, not the last
    assert rows["PongNoFrameskip-v4"][1:3] == ["4.0", "19.0"] and rows["PongNoFrameskip-v4"][8] == "1.0 (2778) |"
    assert (
        "One seed a game so far" in table
        and "Atari at 10M steps, the defaults: an interval takes the seeds run on every env, one so far (2 runs)"
        in out.stdout
    )
    assert "Hours of training and steps per second on a CPU not recorded" in table
    summary = "At 10M steps, 1 seed a game (2 runs), the last 100 games: Breakout 301.7 (CleanRL 414.66 +- 28.09); "
    summary += "Pong 19.0 (CleanRL"
    speed = "5.5 +- 4.5 hours a run (1528 +- 1250 steps per second)"  # steps over each run's own training time
    assert f"{summary} 20.36 +- 0.20); {speed} on a CPU not recorded." in out.stdout  # the README's
    second = json.loads(Path(grid.record_path(run, str(records))).read_text()) | {"seed": 2, "cpu": "AMD EPYC"}
    Path(grid.record_path(grid.Run("atari-10m", "default", run.env_id, 2, None, ()), str(records))).write_text(
        json.dumps(second)
    )
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert "One seed a game so far" not in out.stdout and "on AMD EPYC and a CPU not recorded" in out.stdout
    assert "At 10M steps, 1 to 2 seeds a game (3 runs), the last 100 games: Breakout 301.7 (CleanRL" in out.stdout
    # Pong's two seeds are no interval for the games: Breakout has run one
    one_seed = "an interval takes the seeds run on every env, one so far (2 runs): too few"
    assert f"Atari at 10M steps, the defaults: {one_seed}" in out.stdout
    first = json.loads((records / "BreakoutNoFrameskip-v4__atari-10m-default__1.json").read_text())
    run = grid.Run("atari-10m", "default", "BreakoutNoFrameskip-v4", 2, None, ())
    Path(grid.record_path(run, str(records))).write_text(json.dumps(first | {"seed": 2, "last_100": 250.0}))
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))  # two seeds a game: an interval
    breakout, pong = (np.array([301.7, 250.0]) - 1.7) / (31.8 - 1.7), (19.0 + 20.7) / (9.3 + 20.7)  # 0 random, 1 human
    iqm = stats.trim_mean(np.concatenate([breakout, [pong, pong]]), 0.25)
    line = "Atari at 10M steps, the defaults: IQM of normalized scores (0 random agent, 1 human, Mnih et al. 2015) "
    assert f"{line}{iqm:.2f}, 95% CI [" in out.stdout and "4 runs (2 seeds x 2 envs)" in out.stdout, out.stdout


def test_a_records_training_time_sums_every_process_that_ran_it_and_its_score_over_all_of_training(tmp_path):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    returns = [float(k) for k in range(150)]  # more than the last 100
    folder = finished_run_folder(tmp_path / "runs", "Hopper-v4", "tuned-study", 1, returns)
    for start, seconds in ((1000.0, 50.0), (5000.0, 20.0)):  # a run and its resume, an hour apart
        writer = EventFileWriter(str(folder), filename_suffix=f".{start}")
        for t in (start, start + seconds / 2, start + seconds):
            scalar = Summary(value=[Summary.Value(tag="charts/SPS", simple_value=1.0)])
            writer.add_event(Event(wall_time=t, step=1, summary=scalar))
        writer.close()
    record = grid.make_record(grid.Run("tuned", "study", "Hopper-v4", 1, None, ()), str(folder))
    assert record["mean_all"] == np.mean(returns) and record["last_100"] == np.mean(returns[-100:])
    real = grid.train_time(str(folder)) - 70.0  # the fake run's own event file spans its writing, a moment
    assert 0.0 <= real < 60.0 and record["train_time_s"] == pytest.approx(70.0 + real, abs=0.1)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    assert record["commit"].split("+")[0] == head.stdout.strip() and record["patch"] is None  # the code that ran it


def test_a_records_commit_says_when_the_script_differed_from_it(tmp_path, monkeypatch):
    """A run made with uncommitted code names its commit with "+changes": its figures are not that commit's."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    monkeypatch.setattr(grid, "ROOT", str(clone))
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    assert grid.code_version("ppo_atari.py") == head.stdout.strip()
    with open(clone / "ppo_atari.py", "a") as f:
        f.write("\n# a change\n")
    assert grid.code_version("ppo_atari.py") == head.stdout.strip() + "+changes"
    assert grid.code_version("ppo_continuous.py") == head.stdout.strip()  # another script's change is not this run's
    monkeypatch.setattr(grid, "ROOT", str(tmp_path / "not-a-checkout"))
    assert grid.code_version("ppo_atari.py") is None
    monkeypatch.setattr(grid.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError("git")))
    assert grid.code_version("ppo_atari.py") is None  # no git on the machine: the record is still written


def test_a_tuned_setting_stands_beside_the_defaults_runs_with_the_probability_of_improvement(tmp_path, monkeypatch):
    monkeypatch.setattr(grid, "TUNED_FLAGS", {"Swimmer-v4": ("--gamma", "0.9999")})
    runs = grid.grid_runs("tuned")
    assert [(r.variant, r.env_id, r.seed, r.steps, r.flags) for r in runs] == [
        ("study", "Swimmer-v4", s, 1_000_000, ("--gamma", "0.9999")) for s in (1, 2, 3, 4)
    ] + [("default", "Swimmer-v4", 4, 1_000_000, ())]  # seed-major; the defaults' seed 4 beside the mujoco grid's 1-3
    found = {("study", "Swimmer-v4"): [{"seed": s, "last_100": 300.0 + s, "eval": 310.0} for s in (1, 2, 3, 4)]}
    found[("default", "Swimmer-v4")] = [{"seed": 4, "last_100": 104.0, "eval": 90.0}]
    defaults = {("default", "Swimmer-v4"): [{"seed": s, "last_100": 100.0 + s, "eval": 90.0} for s in (1, 2, 3)]}
    lines = tables.tuned_lines({"tuned": found, "mujoco": defaults}, {"Swimmer-v4": 0.0})
    assert lines[0] == (
        "Swimmer-v4, tuned (tune.py), 1M steps: last 100 episodes tuned 302 +- 1 (4 runs), the defaults 102 +- 1 "
        "(4 runs); greedy evaluation 310 +- 0 against 90 +- 0; P(better than the defaults) 1.00 [1.00, 1.00] (better)"
    )
    three = found | {("study", "Swimmer-v4"): found[("study", "Swimmer-v4")][:3]}
    lines = tables.tuned_lines({"tuned": three, "mujoco": defaults}, {"Swimmer-v4": 0.0})
    assert lines[0].endswith("(too few runs)")  # 3 runs against 4 on one env: no ordering excludes chance


def test_a_record_made_with_other_flags_than_its_grid_now_gives_is_refused_in_one_line(tmp_path):
    """A grid's flags or budget changed since a run was recorded (a new tuned setting, more steps): its old figures
    must not pass for it."""
    records = tmp_path / "records"
    records.mkdir()
    (records / "random.json").write_text("{}")
    run = next(r for r in grid.grid_runs("tuned") if r.flags)  # the tuned setting: flags of its own
    record = {
        "grid": run.grid,
        "variant": run.variant,
        "env_id": run.env_id,
        "seed": run.seed,
        "flags": list(run.flags),
    }
    path = Path(grid.record_path(run, str(records)))
    path.write_text(json.dumps(record | {"steps": 1000, "last_10": 1.0, "last_100": 1.0, "eval": None, "curve": None}))
    assert grid.read_record(run, str(records))["flags"] == list(run.flags)  # its own setting: read
    original = path.read_text()
    others = (("grid", "mujoco"), ("variant", "default"), ("env_id", "Hopper-v4"), ("seed", 9), ("budget", 3_000_000))
    for key, other in others:
        path.write_text(json.dumps(json.loads(original) | {key: other}))  # a record of another run under its name
        with pytest.raises(grid.RecordMismatch, match=rf"was made with {key} {other}; the grid now runs {key} "):
            grid.read_record(run, str(records))
    path.write_text(original)
    path.write_text(json.dumps(json.loads(path.read_text()) | {"flags": ["--gamma", "0.9"]}))  # another setting's
    with pytest.raises(
        grid.RecordMismatch,
        match=r"was made with flags \['--gamma', '0.9'\]; the grid now runs flags \['--learning-rate'",
    ):
        grid.read_record(run, str(records))
    out = tool("tables.py", "--dir", str(tmp_path), "--records", str(records))
    assert out.returncode == 2 and out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_a_record_made_with_another_patch_than_its_variant_now_has_is_refused(tmp_path):
    """Variants that are no flag (init-std-1.0: a patched constant) record their patch: flags [] cannot tell them."""
    run = next(r for r in grid.grid_runs("details") if r.variant == "init-std-1.0")
    record = {"grid": run.grid, "variant": run.variant, "env_id": run.env_id, "seed": run.seed, "flags": []}
    path = Path(grid.record_path(run, str(tmp_path)))
    for patch, refused in (("m.INIT_STD = 1.0", False), ("m.INIT_STD = 2.0", True), (None, True)):
        path.write_text(json.dumps(record | ({"patch": patch} if patch else {})))  # None: a record without one
        if not refused:
            assert grid.read_record(run, str(tmp_path))["patch"] == patch == run.patch
            continue
        with pytest.raises(grid.RecordMismatch, match=rf"made with patch {patch}; the grid now runs patch m.INIT"):
            grid.read_record(run, str(tmp_path))
    plain = next(r for r in grid.grid_runs("details") if r.variant == "clip-vloss")
    path = Path(grid.record_path(plain, str(tmp_path)))
    path.write_text(json.dumps(record | {"variant": plain.variant, "flags": list(plain.flags)}))
    assert grid.read_record(plain, str(tmp_path))["variant"] == "clip-vloss"  # no patch, none recorded: read


def test_a_setting_below_the_random_policy_scores_negative_and_only_the_best_below_it_is_refused():
    """The paper's 'no clipping' row is -0.39: a setting under the random policy is scored, below 0. Only where the
    best setting itself is no better than random would every score flip sign: one line and exit."""
    found = {("clip-0.2", "Hopper-v4"): [{"seed": 1, "last_100": 300.0}]}
    found[("none", "Hopper-v4")] = [{"seed": 1, "last_100": -100.0}]
    scores = tables.normalized_scores(found, ["clip-0.2", "none"], {"Hopper-v4": 0.0}, ("Hopper-v4",))
    assert scores == {"clip-0.2": [1.0], "none": [pytest.approx(-1 / 3)]}
    with pytest.raises(SystemExit, match="no setting beats the random policy on Hopper-v4"):
        tables.normalized_scores(found, ["clip-0.2", "none"], {"Hopper-v4": 300.0}, ("Hopper-v4",))


def test_table1_at_the_papers_scale_judges_no_setting_against_clip_02_until_clip_02_has_all_its_runs(monkeypatch):
    """clip 0.1 has its 21 runs, all above clip 0.2's, but clip 0.2 lacks one: no verdict yet, said as such."""
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)  # the verdicts' words alone are checked
    found: dict = {}
    for env_id in grid.PAPER_ENVS:
        for seed in grid.STUDY_SEEDS:
            found.setdefault(("clip-0.1", env_id), []).append({"seed": seed, "last_100": 2000.0 + seed})
            if (env_id, seed) != ("Swimmer-v4", 3):  # clip 0.2's last run still to come
                found.setdefault(("clip-0.2", env_id), []).append({"seed": seed, "last_100": 1000.0 + seed})
    blocks, _ = tables.table1_paper(found, {e: 0.0 for e in grid.PAPER_ENVS})
    (summary, _), (ranking, *_) = blocks["table1-paper-summary"], blocks["table1-paper-ranking"]
    assert summary.endswith("(11 settings x 7 tasks x 3 seeds, 1M steps; 41 of 231 runs so far): clip 0.2 has not "
                            "all its runs yet, so whether it is the best is open.")  # fmt: skip
    assert ranking.endswith("better none; worse none; not separated none; runs still to come " + "; ".join(
        tables.TABLE1_SHORT[v] for v in tables.TABLE1_NAMES) + ".")  # fmt: skip


def test_a_tasks_returns_get_a_decimal_only_where_they_are_small_in_size_whatever_their_sign():
    found = {
        ("none", "Reacher-v4"): [{"last_100": -150.0}, {"last_100": -250.0}],  # large and negative: no decimal
        ("none", "Swimmer-v4"): [{"last_100": -4.0}, {"last_100": -5.0}],  # small and negative: a decimal
        ("none", "Hopper-v4"): [{"last_100": 150.0}, {"last_100": 250.0}],
    }
    cells = tables.env_cells(found, "none", ("Reacher-v4", "Swimmer-v4", "Hopper-v4", "Walker2d-v4"))
    assert cells == ["-200 +- 50 (2)", "-4.5 +- 0.5 (2)", "200 +- 50 (2)", "-"]


def test_table1s_pairs_take_rliables_stratified_bootstrap_of_the_probability_of_improvement_in_one_draw():
    rng = np.random.default_rng(3)
    for shift in (0.0, 0.5, 1.0):
        x, y = rng.normal(shift, 1.0, size=(3, 7)), rng.normal(0.0, 1.0, size=(3, 7))  # (seeds, tasks)
        _, ci = tables.estimates({"x": (x, y)}, tables.probability_of_improvement)
        assert np.allclose(tables.paired_p_interval(x, y), np.ravel(ci["x"]), atol=0.04)  # other draws, same law
    assert tables.paired_p_interval(x + 10.0, x) == (1.0, 1.0)  # every run above every run on its task
    assert tables.paired_p_interval(x, x + 10.0) == (0.0, 0.0)
    low, high = tables.paired_p_interval(x, x)
    assert low < 0.5 < high and tables.paired_p_interval(x, x) == (low, high)  # seeded: the same on every call
    by_task = np.array([[0.0, 9.0]] * 3), np.array([[1.0, 8.0]] * 3)  # each wins one task: resampling keeps 1/2
    assert tables.paired_p_interval(*by_task) == (0.5, 0.5)
    assert tables.paired_p_interval(np.ones((3, 7)), np.ones((3, 7))) == (0.5, 0.5)  # a tie counts half
    # one task, one seed of three above y: P is k/3 for k ~ Binomial(3, 1/3); P(k = 3) = 1/27 lies above 2.5%, so the
    # 95% interval reaches 1 (a 90% one would stop at 2/3)
    one_best = np.array([[1.0], [0.0], [0.0]])
    assert tables.paired_p_interval(one_best, np.full((3, 1), 0.5)) == (0.0, 1.0)
    # on 7 tasks each task's seeds are drawn on their own, so P is a mean of 7 such draws: far from 0 and 1 (seeds
    # drawn whole, the same rows for every task, would keep the one task's interval)
    low, high = tables.paired_p_interval(np.repeat(one_best, 7, axis=1), np.full((3, 7), 0.5))
    assert 0.0 < low < 1 / 3 < high < 2 / 3
    same = {"kl-adaptive": np.ones((3, 7)), "kl-fixed-3": np.ones((3, 7))}  # the paper: 0.74 above 0.72
    line = tables.table1_pairs(same, {}, ["kl-fixed-3", "kl-adaptive"])
    assert line.endswith("of the paper's 1 ordering of them, these runs keep none, reverse none and leave 1 open.")


def test_the_cpus_a_table_ran_on_read_as_prose_without_the_vendors_marks():
    named = tables.cpus_named([{"cpu": "Intel(R) Xeon(R) Processor"}, {"cpu": "AMD EPYC"}, {"cpu": "AMD EPYC"}])
    assert named == "AMD EPYC and Intel Xeon"  # each machine once, sorted, joined as a sentence would
    three = [{"cpu": "Intel(R) Core(TM) i7-9700K CPU"}, {}, {"cpu": "AMD EPYC 7B13"}]
    assert tables.cpus_named(three) == "AMD EPYC 7B13, Intel Core i7-9700K and a CPU not recorded"
    assert tables.cpus_named([{"cpu": None}]) == "a CPU not recorded"
    resumed = {"cpu": "AMD EPYC", "cpus": ["Intel(R) Xeon(R) Processor", "AMD EPYC"]}  # begun on one, ended on another
    assert tables.cpus_named([resumed, {"cpu": "AMD EPYC"}]) == "AMD EPYC and Intel Xeon"


def test_atari_at_10m_takes_a_recorded_mean_over_all_of_training_even_when_it_is_zero():
    record = {"seed": 1, "steps": 9_999_360, "last_10": 0.0, "last_100": 0.0, "eval": 0.0, "cpu": "AMD EPYC"}
    record |= {"mean_all": 0.0, "curve": [[1, 2.0], [2, 6.0]], "wall_time_s": 3600.0, "train_time_s": 36_000.0}
    lines = tables.atari_10m_lines({("default", "PongNoFrameskip-v4"): [record]})
    row = next(line for line in lines if line.startswith("| PongNoFrameskip-v4 |"))
    assert row.split(" | ")[2] == "0.0"  # the record's own mean_all, not its curve's mean (4.0)


def test_table1_at_the_papers_scale_bootstraps_within_each_task_and_judges_a_setting_over_all_seven(monkeypatch):
    """clip 0.2 scores 0.1 to 0.7 by task, its seeds close: resampled within each task (rliable's stratified
    bootstrap) its interval is narrow. clip 0.3 beats it on four tasks of seven, not on the three
    small ones: better over the seven, as the paper's table weighs them."""
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 200)
    found: dict = {}
    for k, env_id in enumerate(grid.PAPER_ENVS):
        margin = -200.0 if env_id in grid.SMALL_ENVS else 200.0
        for seed in grid.STUDY_SEEDS:
            for variant, value in (
                ("clip-0.1", 2000.0),
                ("clip-0.2", 200.0 * (k + 1)),
                ("clip-0.3", 200.0 * (k + 1) + margin),
            ):
                found.setdefault((variant, env_id), []).append({"seed": seed, "last_100": value + 60.0 * seed})
    blocks, _ = tables.table1_paper(found, {e: 0.0 for e in grid.PAPER_ENVS})
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:] for line in blocks["table1-paper"][2:-1]}
    score, low, high = map(float, rows["clipping, eps = 0.2 (default)"][1].strip("]").replace("[", ",").split(","))
    assert score == round(920 / 2120, 2) and low < score < high < low + 0.06  # pooled, 0.1-0.7 would give +- 0.09
    assert rows["clipping, eps = 0.3"][-1] == "better |"  # P(better) 4/7 over the seven tasks; 0 over the small three


def test_table1_scores_from_the_random_policy_up_and_bounds_the_mean_of_every_setting_with_two_seeds_a_task(
    monkeypatch,
):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 200)
    found: dict = {}
    for env_id in grid.PAPER_ENVS:
        for seed in grid.STUDY_SEEDS:
            found.setdefault(("clip-0.2", env_id), []).append({"seed": seed, "last_100": 1000.0 + 100.0 * seed})
            if seed < 3:  # two whole seeds on every task: scored, with its interval
                found.setdefault(("clip-0.1", env_id), []).append({"seed": seed, "last_100": 500.0 + 100.0 * seed})
    blocks, quoted = tables.table1_paper(found, {e: 100.0 for e in grid.PAPER_ENVS})
    # 0 the random policy's 100 and 1 clip 0.2's mean 1200: clip 0.1's mean 650 scores (650 - 100) / 1100
    assert quoted["table1-paper/clip-0.1/score"] == pytest.approx(0.5)
    assert quoted["table1-paper/clip-0.1/low"] < 0.5 < quoted["table1-paper/clip-0.1/high"]
    assert any(line.startswith("| clipping, eps = 0.1 | 14 | 0.50 [") for line in blocks["table1-paper"])
    found = {("clip-0.2", e): [{"seed": s, "last_100": r} for s, r in zip(grid.STUDY_SEEDS, (1000.0, 1000.0, 4000.0))]
             for e in grid.PAPER_ENVS}  # fmt: skip
    _, quoted = tables.table1_paper(found, {e: 0.0 for e in grid.PAPER_ENVS})
    # each task 0.5, 0.5, 2 (best: the mean 2000): the mean's interval, not the IQM's (it would reach down to 0.5)
    assert quoted["table1-paper/clip-0.2/score"] == pytest.approx(1.0) and quoted["table1-paper/clip-0.2/low"] > 0.6


def partial_table1() -> dict:
    """Table 1 with three settings on the paper's seven tasks: clip 0.2 and no clipping whole, clip 0.1 above both
    but its last run (Swimmer, seed 3) still to come."""
    found: dict = {}
    for env_id in grid.PAPER_ENVS:
        for seed in grid.STUDY_SEEDS:
            found.setdefault(("clip-0.2", env_id), []).append({"seed": seed, "last_100": 1000.0 + 100.0 * seed})
            found.setdefault(("none", env_id), []).append({"seed": seed, "last_100": 100.0 * seed})
            if (env_id, seed) != ("Swimmer-v4", 3):  # clip 0.1's last run still to come
                found.setdefault(("clip-0.1", env_id), []).append({"seed": seed, "last_100": 2000.0 + seed})
    return found


def test_table1s_figure_draws_each_settings_score_and_interval_from_its_table_beside_the_papers(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)
    found = partial_table1()
    blocks, quoted = tables.table1_paper(found, {e: 0.0 for e in grid.PAPER_ENVS})
    table = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1:3] for line in blocks["table1-paper"][2:-1]}
    rows = tables.table1_rows(quoted)
    in_order = ["clipping, eps = 0.2 (default)", "clipping, eps = 0.1", "no clipping or penalty"]
    assert [name for name, *_ in rows] == in_order  # the paper's order: 0.82, 0.76, -0.39
    for name, runs, score, interval, paper in rows:
        drawn = f"{score:.2f} " + ("[{:.2f}, {:.2f}]".format(*interval) if interval else "(runs to come)")
        assert table[name] == [str(runs), drawn]  # the figure shows what the table says
        assert paper == tables.PAPER_TABLE1[next(v for v, n in tables.TABLE1_NAMES.items() if n == name)]
    assert [runs for _, runs, *_ in rows] == [21, 20, 21] and rows[1][3] is None and rows[2][3][0] < rows[2][3][1]
    tables.table1_figure(rows, str(tmp_path / "table1.png"))
    assert (tmp_path / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.figure

    drawn_figures = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, **kw: drawn_figures.append(fig))
    complete = [(name, 21, 0.8, (0.7, 0.9), tables.PAPER_TABLE1[v]) for v, name in tables.TABLE1_NAMES.items()]
    for drawn in (rows, complete):  # the hollow dot's key and "of 231" while runs are to come, never after
        tables.table1_figure(drawn, str(tmp_path / "t.png"))
    (partial, final) = [(fig.axes[0].get_title(), [t.get_text() for t in fig.axes[0].get_legend().get_texts()])
                        for fig in drawn_figures]  # fmt: skip
    ax = drawn_figures[0].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert {labels[int(dot.get_ydata()[0])]: dot.get_xdata()[0] for dot in dots} == {n: x for n, _, x, *_ in rows}
    assert "(62 of 231 runs)" in partial[0] and "these runs, runs to come" in partial[1]
    assert "(all 231 runs)" in final[0] and "these runs, runs to come" not in final[1]


# --- Atari at 10M through tables.build: a partial grid, and 2 or 3 seeds on every game ---


E = grid.ATARI_ENVS  # Breakout, Pong, BeamRider (the Atari-at-10M tests below)
NORM_10M = {E[0]: (10.0, 12.0, 14.0), E[1]: (1.0, 1.2, 1.4), E[2]: (0.2, 0.4, 0.6)}  # human-normalized, seeds 1-3


def atari_10m_record(env_id, seed, **kw):
    low, high = tables.RANDOM_ATARI[env_id], tables.HUMAN_ATARI[env_id]
    r = {"grid": "atari-10m", "variant": "default", "env_id": env_id, "seed": seed, "steps": 9_999_360}
    r |= {"last_100": low + (high - low) * NORM_10M[env_id][seed - 1], "last_10": -1e6, "mean_all": 5.0 * seed}
    r |= {"eval": 100.0 * seed, "curve": [[1, 0.0]], "wall_time_s": 60.0, "sps": 1.0, "cpu": "AMD EPYC"}
    r |= {"train_time_s": 3600.0 * seed if env_id == E[0] else 7200.0}  # Breakout 1, 2, 3 h; the others 2 h
    return r | kw


def build_atari_10m(tmp_path, runs):
    records = tmp_path / "records"
    records.mkdir(exist_ok=True)
    (records / "random.json").write_text("{}")
    for f in records.glob("*atari-10m*"):
        f.unlink()
    for r in runs:
        run = grid.Run("atari-10m", "default", r["env_id"], r["seed"], None, ())
        (records / f"{run.label}.json").write_text(json.dumps(r))
    for run in grid.grid_runs("atari"):  # the 1M-step grid beside it, scored far apart: never in the 10M figures
        one = {"seed": run.seed, "steps": 1_000_000, "last_100": tables.RANDOM_ATARI[run.env_id], "last_10": 0.0}
        (records / f"{run.label}.json").write_text(json.dumps(one | {"eval": 0.0, "mean_all": 0.0, "cpu": "Z80"}))
    _, blocks, _, _ = tables.build(None, str(records))
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in blocks["atari-10m"] if line.startswith("| ")}
    return rows, "\n".join(blocks["atari-10m"]), blocks["atari-10m-summary"][0]


def test_atari_at_10m_on_a_partial_grid_counts_seeds_runs_hours_and_cpus_over_every_run(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)
    runs = [
        atari_10m_record(E[0], 1, cpu="Intel(R) Xeon(R) Processor"),
        atari_10m_record(E[0], 3),
    ]  # Breakout's seed 2 still running
    runs += [atari_10m_record(E[1], s) for s in (1, 2, 3)] + [atari_10m_record(E[2], 1)]
    rows, table, summary = build_atari_10m(tmp_path, runs)
    assert rows[E[0]][0] == "2" and rows[E[1]][0] == "3"  # runs, not the highest seed
    assert (
        rows[E[0]][8] == f"2.0 +- 1.0 ({np.mean([9_999_360 / 3600, 9_999_360 / 10800]):.0f} +- "
        f"{np.std([9_999_360 / 3600, 9_999_360 / 10800]):.0f}) |"
    )  # steps / train_time_s, not the record's sps
    assert rows[E[1]][4] == "1.20 +- 0.16"  # human-normalized, population std
    assert "on AMD EPYC and Intel Xeon:" in table  # the CPUs of every game, not the last one's
    assert "one so far (3 runs): too few" in table and "The IQM averages" not in table
    hours = [1.0, 3.0, 2.0, 2.0, 2.0, 2.0]
    sps = [9_999_360 / (3600 * h) for h in hours]
    assert summary.startswith("At 10M steps, 1 to 3 seeds a game (6 runs), the last 100 games:")
    assert (
        f"; {np.mean(hours):.1f} +- {np.std(hours):.1f} hours a run ({np.mean(sps):.0f} +- {np.std(sps):.0f} steps"
        in summary
    )  # over runs, not over the games' means


def test_atari_at_10m_with_no_seed_on_every_game_says_its_interval_has_too_few_runs(tmp_path):
    runs = [atari_10m_record(E[0], 1), atari_10m_record(E[1], 2)]  # each game a seed of its own: none on both
    rows, table, _ = build_atari_10m(tmp_path, runs)
    assert rows[E[0]][0] == "1" and rows[E[1]][0] == "1" and E[2] not in rows
    assert "Atari at 10M steps, the defaults: an interval takes the seeds run on every env, none so far: too few" in (
        table
    )  # said, not left out: the table's reader learns why there is no interval
    assert "IQM of normalized scores" not in table and "The IQM averages" not in table


@pytest.mark.parametrize("seeds", [(1, 2), (1, 2, 3)])
def test_atari_at_10m_with_two_and_three_seeds_on_every_game_give_the_iqm_of_every_run_as_rliable(
    tmp_path, monkeypatch, seeds
):
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)
    runs = [atari_10m_record(e, s) for e in E for s in seeds]
    rows, table, summary = build_atari_10m(tmp_path, runs)
    scores = [NORM_10M[e][s - 1] for e in E for s in seeds]
    iqm = stats.trim_mean(scores, 0.25)  # 6 runs: 1 cut from each end; 9 runs: 2
    n = len(seeds)
    assert f"Mnih et al. 2015) {iqm:.2f}, 95% CI [" in table and f"{3 * n} runs ({n} seeds x 3 envs)" in table
    assert summary.startswith(f"At 10M steps, {n} seeds a game ({3 * n} runs)")
    kept = {
        2: "4 of the 6 runs (1 Breakout, 2 Pong, 1 BeamRider)",
        3: "5 of the 9 runs (1 Breakout, 3 Pong, 1 BeamRider)",
    }
    means = {2: "from 0.30 (BeamRider) to 11.00 (Breakout)", 3: "from 0.40 (BeamRider) to 12.00 (Breakout)"}
    assert f"The IQM averages the middle {kept[n]}; the games' mean scores run {means[n]}, so its interval" in table
    assert [rows[e][0] for e in E] == [str(n)] * 3


def test_atari_at_10m_counts_a_games_seeds_as_its_runs_and_spreads_the_games_by_their_mean_score(tmp_path, monkeypatch):
    """The README's line counts a game's runs, never its highest seed (seed 3 alone is one seed a game, not three);
    and the spread line beside the IQM gives each game's mean over its seeds, not their median."""
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)
    runs = [atari_10m_record(E[0], 3), atari_10m_record(E[1], 2), atari_10m_record(E[1], 3)]  # seeds 1-2 to come
    rows, _, summary = build_atari_10m(tmp_path, runs)
    assert rows[E[0]][0] == "1" and rows[E[1]][0] == "2"
    assert summary.startswith("At 10M steps, 1 to 2 seeds a game (3 runs), the last 100 games:")
    low, high = tables.RANDOM_ATARI[E[0]], tables.HUMAN_ATARI[E[0]]
    skewed = atari_10m_record(E[0], 3, last_100=low + (high - low) * 16.0)  # Breakout 10, 12, 16: mean 12.67
    runs = [atari_10m_record(e, s) for e in E for s in (1, 2, 3) if (e, s) != (E[0], 3)] + [skewed]
    _, table, _ = build_atari_10m(tmp_path, runs)
    assert "the games' mean scores run from 0.40 (BeamRider) to 12.67 (Breakout)" in table  # the median: 12.00


# --- Table 1's pairs, the studies' scores, the per-seed table and the figures quoted.py names (ninth audit) ---


def test_table1s_pair_line_reads_clip_02s_pairs_from_the_tables_interval_so_that_the_two_never_disagree():
    """A pair with clip 0.2 takes the table's P(better than clip 0.2), turned around, not a bootstrap of its own: here
    the runs tie (a bootstrap of their own leaves the pair open at [0.50, 0.50]) and the table's interval decides."""
    matrices = {"clip-0.2": np.ones((3, 7)), "clip-0.1": np.ones((3, 7))}
    line = lambda ci: tables.table1_pairs(matrices, {"clip-0.1": {"p_improve_ci": ci}}, ["clip-0.1", "clip-0.2"])  # noqa: E731
    head = "of the paper's 1 ordering of them, these runs keep "
    assert line([0.1, 0.3]).endswith(f"{head}1 (clip 0.2 > clip 0.1), reverse none and leave 0 open.")  # worse
    assert line([0.7, 0.9]).endswith(f"{head}none, reverse 1 (here clip 0.1 > clip 0.2) and leave 0 open.")  # better
    assert line([0.4, 0.7]).endswith(f"{head}none, reverse none and leave 1 open.")  # [0.3, 0.6] turned around


def test_a_studys_normalized_score_is_the_mean_of_its_runs_scores_the_papers_average_not_their_median():
    found = {}
    for env_id in grid.SMALL_ENVS:  # seeds skewed: scores 0.5, 0.5 and 2 on each env (the best mean, 200, is 1)
        found[("clip-0.2", env_id)] = [{"seed": s, "last_100": x} for s, x in ((1, 100.0), (2, 100.0), (3, 400.0))]
        found[("clip-0.3", env_id)] = [{"seed": 1, "last_100": 150.0}]
    random = {e: 0.0 for e in grid.SMALL_ENVS}
    lines = tables.ablation_table(found, ["clip-0.2", "clip-0.3"], tables.TABLE1_NAMES, random, None, {})
    rows = {line.split(" | ")[0].removeprefix("| "): line.split(" | ")[4:] for line in lines[2:-1]}
    assert rows["clipping, eps = 0.2 (default)"] == ["1.00", "9", "-", "-", "- |"]  # the median would give 0.50
    assert rows["clipping, eps = 0.3"] == ["0.75", "3", "-", "-", "- |"]


def test_the_per_seed_table_gives_each_runs_last_10_last_100_and_evaluation_in_their_columns_seed_by_seed():
    run = {"seed": 2, "last_10": 1.0, "last_100": 2.0, "eval": 3.0, "steps": 4000}
    lines = tables.per_seed({"table1": {("clip-0.2", "Hopper-v4"): [run, run | {"seed": 1, "eval": None}]}})
    assert lines[0] == "| grid | setting | env | seed | last 10 | last 100 | evaluation | steps |"
    assert lines[2:4] == [
        "| table1 | clip-0.2 | Hopper-v4 | 1 | 1.0 | 2.0 | - | 4000 |",  # no evaluation recorded: a dash
        "| table1 | clip-0.2 | Hopper-v4 | 2 | 1.0 | 2.0 | 3.0 | 4000 |",
    ]


def test_a_quoted_spread_is_the_tables_population_std_and_a_quoted_human_score_runs_from_the_random_agent():
    runs = [{"seed": s, "last_10": 0.0, "last_100": x, "eval": None} for s, x in ((1, -5.7), (2, 9.3))]
    figures = tables.run_figures("atari/default/Pong", runs, "PongNoFrameskip-v4")
    assert figures["atari/default/Pong/std/last_100"] == pytest.approx(7.5)  # ddof 0, as the tables' +- (pm)
    assert f"{figures['atari/default/Pong/mean/last_100']:.1f} +- {figures['atari/default/Pong/std/last_100']:.1f}" == (
        tables.pm([r["last_100"] for r in runs], 1)
    )
    # human-normalized: 0 the random agent's -20.7, 1 the human's 9.3 (Mnih et al. 2015)
    assert figures["atari/default/Pong/1/human"] == pytest.approx(0.5)
    assert figures["atari/default/Pong/2/human"] == pytest.approx(1.0) == figures["atari/default/Pong/max/human"]
    assert "atari/default/Pong/1/eval" not in figures  # no evaluation recorded: no figure, not NaN


def test_the_share_of_autoreset_steps_is_one_step_a_life_lost_over_the_runs_steps_as_many_as_the_ale_gives_lives():
    """docs/choices.md's 'about 0.4% of Breakout's steps': a game of Breakout ends 5 learning episodes (EpisodicLife),
    each followed by an autoreset step; Pong has no lives, so one a game."""
    runs = [{"seed": s, "episodes": n, "steps": 10_000, "last_100": 0.0} for s, n in ((1, 40), (2, 60))]
    figures = tables.run_figures("atari-10m/default/Breakout", runs, "BreakoutNoFrameskip-v4")
    assert figures["atari-10m/default/Breakout/1/reset_share"] == pytest.approx(2.0)  # 5 x 40 of 10,000 steps, in %
    assert figures["atari-10m/default/Breakout/mean/reset_share"] == pytest.approx(2.5)
    figures = tables.run_figures("atari-10m/default/Pong", runs, "PongNoFrameskip-v4")
    assert figures["atari-10m/default/Pong/2/reset_share"] == pytest.approx(0.6)
    assert not any("reset_share" in k for k in tables.run_figures("mujoco/default/Hopper", runs, "Hopper-v4"))
    for env_id, dones in tables.DONES_PER_GAME.items():
        env = gym.make(env_id)
        env.reset(seed=1)
        assert max(env.unwrapped.ale.lives(), 1) == dones, env_id
        env.close()


def test_a_settings_minutes_and_sps_over_its_envs_and_per_seed_take_its_own_runs_only():
    def record(seed: int, minutes: float) -> dict:
        run = {"seed": seed, "last_10": 0.0, "last_100": 0.0, "eval": None}
        return run | {"steps": 6000, "train_time_s": 60 * minutes}

    flags = {
        ("compile", "Hopper-v4"): [record(1, 10.0), record(2, 20.0)],
        ("compile", "Walker2d-v4"): [record(1, 30.0)],
        ("bf16", "BreakoutNoFrameskip-v4"): [record(1, 600.0)],  # another setting of the grid, far slower
    }
    out = tables.record_figures({"flags": flags})
    assert (out["flags/compile/all/min/minutes"], out["flags/compile/all/max/minutes"]) == (10.0, 30.0)
    assert (out["flags/compile/seed1/min/minutes"], out["flags/compile/seed1/max/minutes"]) == (10.0, 30.0)
    assert out["flags/compile/seed2/min/minutes"] == out["flags/compile/seed2/max/minutes"] == 20.0
    assert out["flags/compile/all/max/sps"] == 10.0 and out["flags/bf16/all/min/sps"] == pytest.approx(6000 / 36000)
    assert out["flags/compile/Walker2d/1/minutes"] == 30.0 and "flags/compile/all/mean/minutes" not in out


def test_a_studys_quoted_intervals_are_each_its_own_figures_interval():
    st = {"iqm": 0.91, "iqm_ci": [0.8, 1.0], "runs": 9, "seeds": 3, "baseline_seeds": 3, "least_p": 2 / 20**3}
    st |= {"p_improve": 0.7, "p_improve_ci": [0.55, 0.85]}
    out = tables.stats_figures("table1", {"kl-fixed": st, "clip-0.2": {k: st[k] for k in ("iqm", "iqm_ci", "runs")}})
    assert out["table1/kl-fixed/iqm_ci"] == "[0.80, 1.00]" and out["table1/kl-fixed/p_ci"] == "[0.55, 0.85]"
    assert out["table1/kl-fixed/p"] == 0.7 and out["table1/kl-fixed/verdict"] == "better"
    assert out["table1/clip-0.2/verdict"] == "-" and "table1/clip-0.2/p" not in out  # the baseline: no P
    cells = tables.interval_cells(st).split(" | ")
    assert cells == [" 0.91 [0.80, 1.00]", "0.70 [0.55, 0.85]", "better |"]  # the table's cells: the same intervals


def test_refresh_rewrites_a_hyphenated_tables_block_and_a_quoted_negative_figure_or_three_word_verdict(monkeypatch):
    """The pages' blocks are named with hyphens (table1-paper, atari-10m-summary); a quoted figure may be negative
    (Reacher's returns) or a verdict of up to three words ("too few runs"): each is found and rewritten."""
    phrases = ["Reacher {r:.1f} (-6.71) and", "calls the setting {v} (four", "and then {w} (four"]
    monkeypatch.setattr(tables, "QUOTED_IN", {"p.md": phrases})
    text = "<!-- tables.py: table1-paper -->\n| old |\n<!-- /tables.py -->\nReacher -5.2 (-6.71) and calls the"
    text += " setting too few runs (four, and then not separated (four"
    new = tables.refresh("p.md", text, {"table1-paper": ["| new |", ""]}, {"r": -4.94, "v": "better", "w": "worse"})
    assert new == (
        "<!-- tables.py: table1-paper -->\n| new |\n<!-- /tables.py -->\nReacher -4.9 (-6.71) and calls the setting"
        " better (four, and then worse (four"
    )


def test_table1s_order_here_lists_only_the_settings_with_all_their_runs(monkeypatch):
    """clip 0.1 scores above clip 0.2 over its 20 runs but lacks its 21st: the line of this order leaves it out, as
    its heading says, until its last run lands."""
    monkeypatch.setattr(tables, "BOOTSTRAP_REPS", 100)  # the order's words alone are checked
    found = partial_table1()
    blocks, quoted = tables.table1_paper(found, {e: 0.0 for e in grid.PAPER_ENVS})
    here = next(line for line in blocks["table1-paper-ranking"] if line.startswith("Here, "))
    clip, none = (quoted[f"table1-paper/{v}/score"] for v in ("clip-0.2", "none"))
    head = "Here, the settings with all their runs:"
    assert here == f"{head} clip 0.2 ({clip:.2f}) > no clipping or penalty ({none:.2f})."
    found[("clip-0.1", "Swimmer-v4")].append({"seed": 3, "last_100": 2003.0})  # its 21st: now in the order, first
    blocks, quoted = tables.table1_paper(found, {e: 0.0 for e in grid.PAPER_ENVS})
    here = next(line for line in blocks["table1-paper-ranking"] if line.startswith("Here, "))
    assert here.startswith(f"{head} clip 0.1 ({quoted['table1-paper/clip-0.1/score']:.2f}) > clip 0.2 ")
