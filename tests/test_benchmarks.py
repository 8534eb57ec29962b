"""The benchmark tools run and report what they promise (their figures come from real runs)."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import cores
import grid
import numpy as np
import plot_curves
import pytest
import speed
import tables
from conftest import FAKE_SCRIPT, HANG_TIMEOUT, NEEDS_PGREP, SLOW_POINTMASS, STEP_S, scalars, wait_until

import ppo_continuous as C

ROOT = Path(__file__).resolve().parent.parent


def run_tool(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = HANG_TIMEOUT):
    """python benchmarks/{args}, as a user runs it (its own folder on sys.path, nothing of pytest's)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_usable_cores_are_omp_num_threads_when_set_else_the_affinity(monkeypatch):
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cores.usable_cores() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert cores.usable_cores() == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "0")  # not a thread count: the affinity
    assert cores.usable_cores() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "four")  # nor is a word: no ValueError
    assert cores.usable_cores() == 3
    assert grid.usable_cores is speed.usable_cores is cores.usable_cores  # one helper, imported by both


# --- benchmarks/grid.py, tables.py and plot_curves.py: the README's tables and figures -------------------


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


def test_named_grids_are_the_protocols_seed_major():
    table1, details = grid.grid_runs("table1"), grid.grid_runs("details")
    assert len(table1) == 6 * 3 * 3 and len(details) == 6 * 3 * 3  # 3 seeds: an interval needs them
    assert len(grid.grid_runs("mujoco")) == 9 * 3 and len(grid.grid_runs("atari")) == 3 * 3
    paper = ["HalfCheetah", "Hopper", "InvertedDoublePendulum", "InvertedPendulum", "Reacher", "Swimmer", "Walker2d"]
    assert grid.PAPER_ENVS == tuple(f"{name}-v4" for name in paper)  # the PPO paper's seven MuJoCo tasks, v4
    assert grid.MUJOCO_ENVS == (*grid.PAPER_ENVS, "Ant-v4", "Humanoid-v4")
    table1_1m = grid.grid_runs("table1-1m")  # the paper's scale; its clip 0.2 row is the mujoco grid's
    assert len(table1_1m) == 10 * 7 * 3 and {r.steps for r in table1_1m} == {1_000_000}
    assert {r.env_id for r in table1_1m} == set(grid.PAPER_ENVS)
    assert "clip-0.2" not in {r.variant for r in table1_1m} and grid.TABLE1_1M_FROM_MUJOCO == "clip-0.2"
    # table1's settings keep their names and flags (their records at 1M were made so), then the paper's other five
    assert {(r.variant, r.flags) for r in table1} - {("clip-0.2", ("--clip-coef", "0.2"))} < {
        (r.variant, r.flags) for r in table1_1m
    }
    settings = {r.variant: " ".join(r.flags) for r in table1_1m}
    assert settings["kl-adaptive-0.003"] == "--objective kl-adaptive --kl-target 0.003 --kl-beta 1.0"
    assert settings["kl-adaptive-0.03"] == "--objective kl-adaptive --kl-target 0.03 --kl-beta 1.0"
    for beta in ("0.3", "3", "10"):
        assert settings[f"kl-fixed-{beta}"] == f"--objective kl-fixed --kl-beta {float(beta)}"
    assert [r.seed for r in table1_1m] == sorted(r.seed for r in table1_1m)
    assert "--total-timesteps 1000000" in " ".join(table1_1m[0].command("/nowhere"))
    flags = grid.grid_runs("flags")  # learning under --compile and --bf16, beside the defaults' runs
    assert [r.seed for r in flags] == sorted(r.seed for r in flags)
    assert {(r.env_id, r.seed, r.steps, r.flags) for r in flags if r.variant == "compile"} == {
        (e, s, 300_000, ("--compile",)) for e in grid.SMALL_ENVS for s in (1, 2, 3)
    }
    bf16 = [r for r in flags if r.variant == "bf16"]
    assert {(r.env_id, r.seed, r.steps, r.flags, r.script) for r in bf16} == {
        ("BreakoutNoFrameskip-v4", s, 1_000_000, ("--bf16",), "ppo_atari.py") for s in (1, 3)
    }
    assert len(flags) == 9 + 2
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
        "no-norm-adv": ("--no-norm-adv",),
        "no-grad-clip": ("--max-grad-norm", "inf"),
    }
    assert {r.steps for r in grid.grid_runs("mujoco") + grid.grid_runs("atari")} == {1_000_000}
    assert {r.flags for r in grid.grid_runs("mujoco") + grid.grid_runs("atari")} == {()}  # the defaults
    assert {(r.env_id, r.seed) for r in grid.grid_runs("mujoco")} == {
        (e, s) for e in grid.MUJOCO_ENVS for s in (1, 2, 3)
    }
    assert grid.grid_runs("atari")[0].script == "ppo_atari.py" and table1[0].script == "ppo_continuous.py"
    atari_10m = grid.grid_runs("atari-10m")  # the script's own budget: no flag but --env-id and --seed
    assert [(r.env_id, r.seed) for r in atari_10m] == [(e, s) for s in (1, 2, 3) for e in grid.ATARI_ENVS]
    command = atari_10m[0].command("/nowhere")
    assert command[2:6] == ["--env-id", "BreakoutNoFrameskip-v4", "--seed", "1"] and "--total-timesteps" not in command
    assert set(command[6:]) == {"--exp-name", "atari-10m-default", "--save-every", str(grid.SAVE_EVERY)}


def test_a_committed_record_brings_the_pages_up_to_date_in_a_commit_of_their_own(tmp_path):
    clone = tmp_path / "clone"
    git = lambda *a: subprocess.run(["git", "-C", str(clone), *a], capture_output=True, text=True, timeout=HANG_TIMEOUT)  # noqa: E731
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=HANG_TIMEOUT)
    git("config", "user.email", "grid@example.com"), git("config", "user.name", "grid")
    record = clone / "benchmarks" / "records" / "HalfCheetah-v4__mujoco-default__1.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps(data | {"last_100": data["last_100"] + 300.0}))  # a run that landed higher
    git("commit", "-q", "-m", "records: HalfCheetah", "--", str(record))
    (clone / "notes.txt").write_text("the user's work, staged")
    git("add", "notes.txt")
    assert grid.commit_pages("HalfCheetah-v4__mujoco-default__1", str(clone)) == "pages rewritten and committed"
    assert "| HalfCheetah-v4 | 3 | 5688 +- " in (clone / "README.md").read_text()  # 5587.5 + 300 / 3
    changed = git("show", "--name-only", "--format=%s", "HEAD").stdout.split()
    assert changed[0] == "pages:" and "README.md" in changed and "docs/results.md" in changed
    assert git("status", "--porcelain").stdout == "A  notes.txt\n"  # the user's staged file: staged, not committed
    assert grid.commit_pages("again", str(clone)) == "pages unchanged"
    # another record lands while the user edits pages: an edit to a page tables.py leaves alone stays out of the
    # pages commit; a page tables.py must rewrite that holds the user's edit (staged or not) is left alone
    record.write_text(json.dumps(data | {"last_100": data["last_100"] + 600.0}))
    git("commit", "-q", "-m", "records: HalfCheetah again", "--", str(record))
    tuning = (clone / "docs" / "tuning.md").read_text()
    (clone / "docs" / "tuning.md").write_text(tuning + "\nAn edit to a page without tables.\n")
    assert grid.commit_pages("z", str(clone)) == "pages rewritten and committed"
    assert "| HalfCheetah-v4 | 3 | 5788 +- " in (clone / "README.md").read_text()  # 5587.5 + 600 / 3
    assert git("status", "--porcelain").stdout == " M docs/tuning.md\nA  notes.txt\n"
    record.write_text(json.dumps(data | {"last_100": data["last_100"] + 900.0}))
    git("commit", "-q", "-m", "records: HalfCheetah a third time", "--", str(record))
    head = git("rev-parse", "HEAD").stdout
    readme = (clone / "README.md").read_text()
    (clone / "README.md").write_text(readme + "\nA page edit the user has staged.\n")
    git("add", "README.md")  # staged, not committed: neither swept into a pages commit nor lost
    assert grid.commit_pages("y", str(clone)) == (
        "pages not rewritten: README.md uncommitted (run benchmarks/tables.py --write)"
    )
    assert (
        git("rev-parse", "HEAD").stdout == head and "A page edit the user has staged." in git("diff", "--cached").stdout
    )
    assert (clone / "README.md").read_text() == readme + "\nA page edit the user has staged.\n"
    git("reset", "-q", "--", "README.md")  # the same edit, not staged: left alone too
    assert grid.commit_pages("x", str(clone)).startswith("pages not rewritten: README.md uncommitted")
    assert (
        git("rev-parse", "HEAD").stdout == head and git("diff", "--name-only").stdout == "README.md\ndocs/tuning.md\n"
    )
    assert (clone / "README.md").read_text() == readme + "\nA page edit the user has staged.\n"


def test_commit_record_commits_that_record_alone_and_waits_out_another_git_command(tmp_path, monkeypatch):
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, timeout=HANG_TIMEOUT)
        assert done.returncode == 0, done.stderr
        return done.stdout

    git("init", "-q")
    git("config", "user.email", "grid@example.com")
    git("config", "user.name", "grid")
    git("commit", "-q", "--allow-empty", "-m", "start")
    (tmp_path / "other.txt").write_text("the user's work, staged")
    git("add", "other.txt")
    records = tmp_path / "records"
    records.mkdir()
    first, second = records / "Hopper-v4__mujoco-default__1.json", records / "Hopper-v4__mujoco-default__2.json"
    first.write_text("{}")
    assert grid.commit_record(str(first), "Hopper-v4__mujoco-default__1") == "committed"
    assert git("show", "--name-only", "--format=%s", "HEAD").split() == [
        "records:",
        "Hopper-v4__mujoco-default__1",
        "records/Hopper-v4__mujoco-default__1.json",
    ]
    assert git("diff", "--cached", "--name-only").split() == ["other.txt"]  # still staged, not committed
    lock = tmp_path / ".git" / "index.lock"  # another git command holds the index: tried again once it is free
    lock.write_text("")
    waits = []
    wait = lambda s: (waits.append(s), lock.unlink())  # noqa: E731
    monkeypatch.setattr(grid, "time", types.SimpleNamespace(sleep=wait, time=time.time))  # grid.py's clock alone
    second.write_text("{}")
    assert grid.commit_record(str(second), "Hopper-v4__mujoco-default__2") == "committed" and len(waits) == 1
    assert git("show", "--name-only", "--format=", "HEAD").split() == ["records/Hopper-v4__mujoco-default__2.json"]
    outside = tmp_path.parent / f"{tmp_path.name}-not-a-repository.json"
    outside.write_text("{}")
    assert grid.commit_record(str(outside), "x").startswith("not committed (") and len(waits) == 1  # not retried


def test_a_run_is_resumed_when_cut_and_skipped_when_finished(tmp_path):
    run = grid.Run("table1", "none", "Hopper-v4", 2, 300_000, ("--objective", "none"))
    assert run.state(str(tmp_path)) == ("missing", None)
    command = run.command(str(tmp_path))
    assert command[1:] == [
        str(ROOT / "ppo_continuous.py"),
        *("--env-id", "Hopper-v4", "--seed", "2", "--total-timesteps", "300000", "--exp-name", "table1-none"),
        *("--save-every", "10", "--objective", "none", "--no-cuda"),
    ]
    atari = grid.grid_runs("atari")[0]
    assert "--no-cuda" not in atari.command(str(tmp_path))  # the CNN wants a GPU where there is one
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
    for env_id, folder_name in (("ALE/Pong-v5", "ALE-Pong-v5"), ("my_envs:Point-v0", "my_envs-Point-v0")):
        (ad_hoc,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", env_id], "n")
        assert ad_hoc.state(str(tmp_path)) == ("missing", None) and "/" not in ad_hoc.label
        finished = fake_run(tmp_path, folder_name, "seeds-n", 1, [1.0])  # named as the scripts name it
        assert ad_hoc.state(str(tmp_path)) == ("done", str(finished))


def test_a_cut_patched_variant_resumes_with_its_patch(tmp_path):
    run = grid.Run("details", "gymnasium-reward-norm", "Hopper-v4", 1, 300_000, ())
    cut = fake_run(tmp_path, "Hopper-v4", "details-gymnasium-reward-norm", 1, [1.0], done=False)
    command = run.command(str(tmp_path))
    assert command[1] == "-c" and grid.VARIANT_PATCHES["gymnasium-reward-norm"] in command[2]
    assert command[3:] == ["--resume", str(cut / "checkpoint.pt")]


def test_grid_runs_what_is_missing_resumes_what_is_cut_splits_the_threads_and_counts_failures(
    tmp_path, monkeypatch, capsys
):
    repo, runs_dir = tmp_path / "repo", tmp_path / "evidence" / "runs"
    repo.mkdir()
    (repo / "ppo_continuous.py").write_text(FAKE_SCRIPT)
    monkeypatch.setattr(grid, "ROOT", str(repo))
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the user's shell says 4 cores: each of 2 children gets 2, not 4
    make = lambda variant, env_id: grid.Run("table1", variant, env_id, 1, 2048, ())  # noqa: E731
    missing, cut, done = make("a", "Hopper-v4"), make("b", "Hopper-v4"), make("c", "Hopper-v4")
    failing, unfinished = make("fail", "Hopper-v4"), make("nosummary", "Hopper-v4")
    (ad_hoc,) = grid.seed_runs("ppo_continuous.py", [1], ["--clip-coef", "0.1", "--env-id", "Hopper-v4"], "x")
    cut_folder = fake_run(runs_dir, "Hopper-v4", "table1-b", 1, [1.0], done=False)
    (runs_dir.parent / "logs").mkdir(parents=True)
    (runs_dir.parent / "logs" / "Hopper-v4__table1-b__1.log").write_text("why it was cut\n")
    fake_run(runs_dir, "Hopper-v4", "table1-c", 1, [1.0])
    records = tmp_path / "records"
    failed = grid.run(
        [missing, cut, done, failing, unfinished, ad_hoc], str(runs_dir), parallel=2, records_dir=str(records)
    )
    out = capsys.readouterr().out
    assert failed == 2 and "1 of 6 done; 5 to go, 2 at a time, OMP_NUM_THREADS=2 each" in out
    assert "FAILED Hopper-v4 table1-fail seed 1 (exit 3)" in out
    assert "table1-nosummary seed 1 (exit 0 without summary.json" in out
    calls = [json.loads(line) for line in (repo / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 5  # the finished run is not started again
    assert {c["threads"] for c in calls} == {"2"} and {c["cwd"] for c in calls} == {str(runs_dir.parent)}
    assert ["--resume", str(cut_folder / "checkpoint.pt")] in [c["argv"] for c in calls]
    # the ad-hoc run gets its flags as given: no --no-cuda of the named grids'
    assert [*("--env-id", "Hopper-v4", "--seed", "1", "--exp-name", "seeds-x", "--save-every", "10")] + [
        *("--clip-coef", "0.1")
    ] in [c["argv"] for c in calls]
    assert missing.state(str(runs_dir))[0] == cut.state(str(runs_dir))[0] == ad_hoc.state(str(runs_dir))[0] == "done"
    assert len(list((runs_dir.parent / "logs").glob("*.log"))) == 5 and not list(runs_dir.glob("*.log"))
    assert "trained" in (runs_dir.parent / "logs" / "Hopper-v4__table1-a__1.log").read_text()
    resumed_log = (runs_dir.parent / "logs" / "Hopper-v4__table1-b__1.log").read_text()
    assert resumed_log.startswith("why it was cut\n") and "trained" in resumed_log  # the log goes on, kept
    # each run of a named grid that finished here left its record (the one done before, and the ad-hoc one, none)
    assert sorted(p.name for p in records.iterdir()) == ["Hopper-v4__table1-a__1.json", "Hopper-v4__table1-b__1.json"]


TIMED_FAKE = (
    "import time\nSTART = time.time()\n"
    + FAKE_SCRIPT
    + """
time.sleep(2.0)  # long enough that two runs started together overlap on a loaded machine
with open(os.path.join(os.path.dirname(__file__), "spans.jsonl"), "a") as f:
    f.write(json.dumps([START, time.time()]) + "\\n")
"""
)


def test_grid_main_keeps_to_parallel_and_to_dir_gives_each_child_a_core_commits_with_commit_and_fails_loudly(
    tmp_path, monkeypatch, capsys
):
    repo, there, here = tmp_path / "repo", tmp_path / "there", tmp_path / "here"
    repo.mkdir(), here.mkdir()
    (repo / "ppo_continuous.py").write_text(TIMED_FAKE)
    monkeypatch.setattr(grid, "ROOT", str(repo))
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: {0}, raising=False)  # one core for two runs
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.chdir(here)
    grid.main(["--seeds", "1", "2", "3", "--parallel", "2", "--dir", str(there), "--", "--env-id", "Hopper-v4"])
    assert "0 of 3 done; 3 to go, 2 at a time, OMP_NUM_THREADS=1 each" in capsys.readouterr().out
    calls = [json.loads(line) for line in (repo / "calls.jsonl").read_text().splitlines()]
    assert [c["threads"] for c in calls] == ["1"] * 3  # never 0, which is no thread count
    assert len(list((there / "runs").iterdir())) == len(list((there / "logs").iterdir())) == 3
    assert list(here.iterdir()) == []  # --dir, not the current folder
    spans = [json.loads(line) for line in (repo / "spans.jsonl").read_text().splitlines()]
    at_once = [sum(start <= s < end for start, end in spans) for s, _ in spans]
    assert max(at_once) == 2  # two at a time, never three
    # a failed run: its line, and grid.py's exit is not 0
    with pytest.raises(SystemExit) as stop:
        grid.main(["--seeds", "1", "--name", "fail", "--dir", str(there), "--", "--env-id", "Hopper-v4"])
    assert stop.value.code == "error: 1 runs failed" and "FAILED Hopper-v4 seeds-fail seed 1" in capsys.readouterr().out
    # a named grid's record is committed with --commit, and only then
    committed, seed = [], 1
    monkeypatch.setattr(grid, "commit_record", lambda path, label: committed.append(label) or "committed")
    monkeypatch.setattr(grid, "grid_runs", lambda name: [grid.Run("table1", "a", "Hopper-v4", seed, 2048, ())])
    grid.main(["run", "table1", "--dir", str(there), "--records", str(tmp_path / "records")])
    assert not [x for x in capsys.readouterr().out.splitlines() if x.startswith("seed ")]  # no per-seed report: ad hoc
    seed = 2
    grid.main(["run", "table1", "--commit", "--dir", str(there), "--records", str(tmp_path / "records")])
    assert committed == ["Hopper-v4__table1-a__2"]
    assert len(list((tmp_path / "records").iterdir())) == 2


def test_with_commit_each_record_of_the_repositorys_records_brings_its_pages_along(tmp_path, monkeypatch, capsys):
    repo, runs_dir, records = tmp_path / "repo", tmp_path / "evidence" / "runs", tmp_path / "records"
    repo.mkdir(), records.mkdir()
    (repo / "ppo_continuous.py").write_text(FAKE_SCRIPT)
    monkeypatch.setattr(grid, "ROOT", str(repo))
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    committed, paged = [], []
    monkeypatch.setattr(grid, "commit_record", lambda path, label: committed.append(label) or "committed")
    monkeypatch.setattr(grid, "commit_pages", lambda label: paged.append(label) or "pages rewritten and committed")
    first, second = (grid.Run("table1", "a", "Hopper-v4", seed, 2048, ()) for seed in (1, 2))
    monkeypatch.setattr(grid, "RECORDS_DIR", str(records))  # the repository's own records: pages follow
    assert grid.run([first], str(runs_dir), parallel=1, records_dir=f"{records}/", commit=True) == 0  # however spelled
    assert (
        committed == paged == ["Hopper-v4__table1-a__1"]
        and "committed, pages rewritten and committed" in capsys.readouterr().out
    )
    monkeypatch.setattr(grid, "RECORDS_DIR", str(tmp_path))  # records kept elsewhere: no page quotes them
    assert grid.run([second], str(runs_dir), parallel=1, records_dir=str(records), commit=True) == 0
    assert committed == ["Hopper-v4__table1-a__1", "Hopper-v4__table1-a__2"] and paged == ["Hopper-v4__table1-a__1"]


def test_grid_status_lists_every_first_seed_before_any_second(tmp_path):
    out = run_tool("grid.py", "status", "table1", "details", "--dir", str(tmp_path), "--records", str(tmp_path))
    assert out.returncode == 0, out.stderr
    seeds = [line.split()[-1] for line in out.stdout.splitlines()]
    assert seeds == ["1"] * 36 + ["2"] * 36 + ["3"] * 36
    assert {line.split()[0] for line in out.stdout.splitlines()} == {"missing"}


def test_an_ad_hoc_grid_is_named_by_its_flags_and_leaves_the_runs_own_flags_to_grid_py(capsys, monkeypatch):
    a = grid.seed_runs("ppo_continuous.py", [1, 2], ["--env-id", "Hopper-v4", "--clip-coef", "0.1"])
    b = grid.seed_runs("ppo_continuous.py", [1], ["--env-id=Hopper-v4", "--clip-coef", "0.3"])
    c = grid.seed_runs("ppo_atari.py", [1], ["--env-id", "Hopper-v4", "--clip-coef", "0.1"])
    assert [r.seed for r in a] == [1, 2] and {r.env_id for r in a + b} == {"Hopper-v4"}
    assert a[0].flags == ("--clip-coef", "0.1") and a[0].script == "ppo_continuous.py" and c[0].script == "ppo_atari.py"
    assert a[0].exp_name.startswith("seeds-ppo_continuous-") and len({a[0].exp_name, b[0].exp_name, c[0].exp_name}) == 3
    named = grid.seed_runs("ppo_continuous.py", [1], ["--clip-coef", "0.1", "--env-id", "Hopper-v4"], "n")
    assert named[0].exp_name == "seeds-n"
    default_env = grid.seed_runs("ppo_continuous.py", [3], [])[0]
    assert default_env.env_id is None and "--env-id" not in default_env.command("/nowhere")
    for argv, why in (
        ([], "say `run` or `status`"),
        (["run", "nogrid"], "unknown grids"),
        (["run", "table1", "--", "--clip-coef", "0.1"], "flags after -- are for an ad-hoc grid"),
        (["--seeds", "1", "--", "--seed", "3"], "are grid.py's to set"),
        (["--seeds", "1", "--", "--seed=3"], "are grid.py's to set"),
        (["--seeds", "1", "--", "--exp-name=x"], "are grid.py's to set"),
        (["run", "table1", "--seeds", "1"], "no named grids beside it"),
    ):
        monkeypatch.setattr(grid, "run", lambda *a, **k: sys.exit("error: started runs it should have refused"))
        with pytest.raises(SystemExit):
            grid.main(argv)
        assert why in capsys.readouterr().err


def test_grid_runs_one_config_over_seeds_in_parallel_and_prints_each_seeds_return_and_sps(tmp_path):
    flags = ["--env-id", "Pendulum-v1", "--num-steps", "256", "--total-timesteps", "512", "--eval-episodes", "0"]
    env = os.environ | {"OMP_NUM_THREADS": "4"}
    proc = run_tool("grid.py", "--seeds", "1", "2", "--parallel", "2", "--", *flags, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    assert "0 of 2 done; 2 to go, 2 at a time, OMP_NUM_THREADS=2 each" in proc.stdout
    assert proc.stdout.count("start Pendulum-v1 seeds-ppo_continuous-") == 2
    for seed in (1, 2):
        line = next(x for x in proc.stdout.splitlines() if x.startswith(f"seed {seed}: final return"))
        sps = float(line.split(", ")[1].removesuffix(" SPS"))
        assert sps > 0 and "Pendulum-v1__seeds-ppo_continuous-" in line
    assert "over 2 seeds" in proc.stdout and "median SPS" in proc.stdout
    summary = next(x for x in proc.stdout.splitlines() if x.startswith("final return "))  # mean +- std of the seeds
    mean, std = (float(x) for x in summary.split()[2:5:2])
    finals = [float(x) for x in summary.split("per seed: ")[1].split(")")[0].split(", ")]
    assert (mean, std) == pytest.approx((np.mean(finals), np.std(finals)), abs=0.06), summary  # the spread, ddof 0
    assert len(list((tmp_path / "runs").iterdir())) == 2 and len(list((tmp_path / "logs").iterdir())) == 2
    again = run_tool("grid.py", "run", "--seeds", "1", "2", "--", *flags, cwd=tmp_path, env=env)
    assert "2 of 2 done; 0 to go" in again.stdout and "over 2 seeds" in again.stdout  # found again, not rerun
    status = run_tool("grid.py", "status", "--seeds", "1", "2", "3", "--", *flags, cwd=tmp_path, env=env)
    assert [line.split()[0] for line in status.stdout.splitlines()] == ["done", "done", "missing"]


@NEEDS_PGREP
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C", "SIGKILL"])
def test_a_stopped_grid_stops_its_runs_saved_and_the_same_command_resumes_them_to_their_exact_budget(tmp_path, how):
    """Three runs, two at a time. SIGTERM to grid.py, or SIGINT to its process group (a terminal's Ctrl-C, which
    must not reach the runs as well: a second signal quits a run at once): each running run gets it once, saves and
    exits, no other run starts, then grid.py exits 128 + the signal. SIGKILL to grid.py: the kernel sends each run
    SIGTERM (Linux), and each saves and exits. Then no run is left training beside the same runs started again;
    the same command resumes both and runs the third, each to its budget, each step once."""
    if how == "SIGKILL" and not sys.platform.startswith("linux"):
        pytest.skip("a parent's death signals its children on Linux alone")
    (tmp_path / "slowpoint.py").write_text(SLOW_POINTMASS.replace("STEP_S", repr(STEP_S)))
    num_steps, budget = 256, 20 * 256  # 20 iterations, at least 20 s asleep each run: both are cut
    name = f"stop{os.getpid()}"  # the runs' --exp-name, seeds-{name}: pgrep finds this test's runs alone
    flags = [
        "--seeds",
        "1",
        "2",
        "3",
        "--parallel",
        "2",
        "--name",
        name,
        "--",
        "--env-id",
        "slowpoint:SlowPointMass-v0",
    ]
    flags += ["--total-timesteps", str(budget), "--num-steps", str(num_steps), "--save-every", "1"]
    flags += ["--update-epochs", "2", "--num-minibatches", "4", "--eval-episodes", "1"]
    env = os.environ | {"PYTHONPATH": f"{tmp_path}:{ROOT / 'examples'}", "OMP_NUM_THREADS": "2"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grid.py"), "run", *flags]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, **pipes)  # a terminal's group
    wait_until(lambda: len(list(tmp_path.glob("runs/*/checkpoint.pt"))) == 2, "both runs' checkpoints", proc)
    sig = {"SIGTERM": signal.SIGTERM, "Ctrl-C": signal.SIGINT, "SIGKILL": signal.SIGKILL}[how]
    if how == "Ctrl-C":
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=HANG_TIMEOUT)
    runs_left = lambda: subprocess.run(["pgrep", "-f", f"seeds-{name}"], capture_output=True, timeout=HANG_TIMEOUT)  # noqa: E731
    if how == "SIGKILL":  # no grid left to wait for them: they stop on their own
        assert proc.returncode == -sig
        wait_until(lambda: runs_left().returncode == 1, "the runs' exits")
        sig = signal.SIGTERM  # what each run got
    else:
        assert proc.returncode == 128 + sig, out + err
        assert runs_left().returncode == 1  # pgrep found none: no run goes on training unwatched
        assert out.count(f"{sig.name}: each running run saves and stops") == 1  # passed on once, not at every look
        assert out.count("stopped with the grid") == 2
    assert not list(tmp_path.glob("runs/*/summary.json"))  # both cut short of their budget
    assert len(list(tmp_path.glob("runs/*"))) == 2  # seed 3 not started after the stop
    for log in (tmp_path / "logs").glob("*.log"):  # each stopped as on its own signal: saved, not killed
        text = log.read_text()
        assert f"{sig.name}: stopping after this iteration" in text and "resume with" in text, text[-2000:]
    if how != "SIGTERM":  # the checkpoints are those of any stop: resumed in one case
        return
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 of 3 done; 3 to go" in again.stdout and again.stdout.count("--resume ") == 2
    for folder in (tmp_path / "runs").iterdir():
        assert json.loads((folder / "summary.json").read_text())["global_step"] == budget
        steps = [step for step, _ in scalars(folder)["charts/SPS"]]  # one per iteration, each once, in order
        assert steps == [num_steps * k for k in range(1, budget // num_steps + 1)]


STOPPED_RUN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(EXIT))  # EXIT: 143 a run that saved, 1 a save that failed
open(f"ready{SEED}", "w").close()
if SEED == 1:  # the stop, once both runs listen for it
    while not os.path.exists("ready2"):
        time.sleep(0.05)
    os.kill(os.getppid(), signal.SIGTERM)
time.sleep(600)
"""


@dataclass(frozen=True)
class StoppedRun(grid.Run):
    """A run of the ad-hoc grid whose process stops the grid and answers its SIGTERM with exit `code`."""

    code: int = 143

    def command(self, runs_dir: str) -> list[str]:
        code = STOPPED_RUN.replace("EXIT", str(self.code)).replace("SEED", str(self.seed))
        return [sys.executable, "-c", code]


def test_a_run_that_fails_during_a_stop_is_reported_failed_and_the_grid_gives_back_the_signal_handlers(
    tmp_path, capsys
):
    """Of two runs cut by a stop, the one that exits 128 + SIGTERM saved; one that exits otherwise failed, and the
    grid says so (its checkpoint may be missing or broken). In-process: grid.run restores the handlers it found."""
    before = {sig: signal.getsignal(sig) for sig in grid.STOP_SIGNALS}
    runs = [
        StoppedRun(grid.SEEDS_GRID, "stop", None, 1, None, ()),
        StoppedRun(grid.SEEDS_GRID, "stop", None, 2, None, (), None, 1),
    ]
    with pytest.raises(SystemExit) as stop:
        grid.run(runs, str(tmp_path / "runs"), parallel=2)
    assert stop.value.code == 128 + signal.SIGTERM
    out = capsys.readouterr().out
    assert "saved default env seeds-stop seed 1: stopped with the grid" in out, out
    assert "FAILED default env seeds-stop seed 2 (exit 1)" in out, out
    assert {sig: signal.getsignal(sig) for sig in grid.STOP_SIGNALS} == before


def run_variant(tmp_path: Path, variant: str) -> dict:
    """Run a details variant for one iteration on Pendulum through grid.py's own command; its checkpoint."""
    import torch

    flags = (*grid.DETAILS_VARIANTS[variant], "--eval-episodes", "0")
    run = grid.Run("details", variant, "Pendulum-v1", 1, 2048, flags)
    tmp_path.mkdir()
    proc = subprocess.run(
        run.command(str(tmp_path / "runs")), cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return torch.load(run.state(str(tmp_path / "runs"))[1] + "/checkpoint.pt", weights_only=False)


def test_details_variants_change_exactly_their_detail(tmp_path):
    import tyro

    detail = {"clip-vloss": {"clip_vloss"}, "no-bootstrap-truncation": {"bootstrap_truncation"}}
    detail |= {"no-norm-adv": {"norm_adv"}, "no-grad-clip": {"max_grad_norm"}}
    defaults = dataclasses.asdict(C.Args())
    for variant, flags in grid.DETAILS_VARIANTS.items():  # the flags as the script parses them: one field each
        parsed = dataclasses.asdict(tyro.cli(C.Args, args=list(flags)))
        assert {k for k in defaults if parsed[k] != defaults[k]} == detail.get(variant, set()), variant
        assert (variant in grid.VARIANT_PATCHES) == (variant not in detail), variant  # else a patch of one name
    assert all(patch.count("=") == 1 and ";" not in patch for patch in grid.VARIANT_PATCHES.values())
    default = run_variant(tmp_path / "a", "clip-vloss")  # its other settings the defaults': the baseline below
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
    for env_id in grid.SMALL_ENVS:
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
        [
            sys.executable,
            str(ROOT / "benchmarks" / "tables.py"),
            "--dir",
            str(tmp_path),
            "--records",
            str(tmp_path),
            "--per-seed",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert out.returncode == 0, out.stderr
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in out.stdout.splitlines()
        if line.startswith("|")
    }
    assert rows["clipping, eps = 0.2 (default)"][:6] == ["300 +- 100 (2)"] * 3 + ["1.00", "6", "0.82"]  # paper's beside
    none = [(150 / 400 + 250 / 400) / 2, (250 / 500 + 350 / 500) / 2, (50 / 300 + 150 / 300) / 2]  # per env
    assert rows["no clipping or penalty"][:6] == ["100 +- 50 (2)"] * 3 + [f"{sum(none) / 3:.2f}", "6", "-0.39"]
    assert rows["no clipping or penalty"][8] == "worse"  # each of its runs below each of the defaults' on its env
    assert "clipping, eps = 0.1" not in rows
    # the details table: best per env over the defaults and the variants (600 on Hopper, the defaults' 300 elsewhere)
    defaults = (300 / 400 + 500 / 400 + 400 / 800 + 600 / 800 + 200 / 300 + 400 / 300) / 6
    assert rows["the defaults"][3] == f"{defaults:.2f}"
    assert rows["value clipping on (`--clip-vloss`, CleanRL's)"][:5] == ["-", "600 (1)", "150 (1)", "0.75", "2"]
    assert rows["Ant-v4"] == ["2", "2000 +- 1000", "2100 +- 1000", "-", "-", "-", "-"]
    assert rows["HalfCheetah-v4"] == ["1", "2000", "2500", "1442 +- 46", "2894 +- 1063", "~1800", "1668.6"]
    assert rows["PongNoFrameskip-v4"] == ["1", "20.0", "21.0", "-20.7", "20.7 (10M)"]
    assert "| table1 | none | Hopper-v4 | 1 | 60.0 | 50.0 | - | 150000 |" in out.stdout
    assert "| table1 | clip-0.2 | Hopper-v4 | 1 | 200.0 | 200.0 | 201.0 | 150000 |" in out.stdout


def test_random_policy_returns_are_measured_once_and_cached(tmp_path):
    cache = tmp_path / "random.json"
    measured = tables.random_returns(["Pendulum-v1"], str(cache))["Pendulum-v1"]
    assert -1400 < measured < -1000  # the mean of 100 random episodes (their best is near -750)
    assert json.loads(cache.read_text()) == {"Pendulum-v1": measured}
    cache.write_text(json.dumps({"Pendulum-v1": 1.0}))
    assert tables.random_returns(["Pendulum-v1"], str(cache)) == {"Pendulum-v1": 1.0}


def test_tables_refuse_a_folder_without_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--dir", str(tmp_path), "--records", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "grid.py" in out.stderr


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
        timeout=HANG_TIMEOUT,
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
        timeout=HANG_TIMEOUT,
    )
    assert "Ant-v4" not in finished.stdout and "2 panel(s), 1 group(s)" in finished.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "plot_curves.py"), "--group", f"x={runs}/nothing*"],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert bad.returncode == 1 and "no runs in any group" in bad.stderr and "left out group 'x'" in bad.stderr


@pytest.mark.parametrize("out", ["missing/curves.png", "curves.txt"])
def test_a_picture_that_cannot_be_written_is_one_line_before_any_work(tmp_path, out):
    runs = tmp_path / "runs"
    fake_run(runs, "Hopper-v4", "a", 1, [1.0] * 30)
    for tool, flag, rest in (
        ("plot_curves.py", "--out", ["--group", f"a={runs}/*__a__*"]),
        ("tables.py", "--figure", ["--dir", str(tmp_path), "--records", str(tmp_path)]),  # it draws nothing here
        ("tables.py", "--table1-figure", ["--dir", str(tmp_path), "--records", str(tmp_path)]),
    ):
        bad = run_tool(tool, flag, str(tmp_path / out), *rest, cwd=tmp_path)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1, (tool, bad.stderr)  # no traceback
        assert bad.stderr.startswith(f"error: {flag} ") and not bad.stdout, (tool, bad.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing written


def test_tables_write_and_check_refuse_a_root_without_the_pages_in_one_line(tmp_path):
    (tmp_path / "README.md").write_text("no docs/ beside it\n")
    for flag in ("--write", "--check"):
        for root in (tmp_path, tmp_path / "missing"):
            bad = run_tool("tables.py", flag, "--root", str(root), cwd=tmp_path)
            assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--root" in bad.stderr, bad.stderr
    assert (tmp_path / "README.md").read_text() == "no docs/ beside it\n"


def test_plot_curves_draws_the_mean_and_min_to_max_of_running_means(tmp_path, monkeypatch, capsys):
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
    points, ys = plot_curves.mean_and_spread(
        [(np.array([0.0, 10.0]), np.zeros(2)), (np.array([5.0, 20.0]), np.ones(2))]
    )
    assert points[0] == 5.0 and points[-1] == 10.0 and ys.shape == (2, plot_curves.GRID_POINTS)

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
    assert "Hopper-v4 a: final mean 73.5 (min 24.5, max 147.0)" in capsys.readouterr().out  # the last grid point's
    plt.close("all")


def test_plot_curves_draws_the_tag_it_is_given_and_finds_the_env_of_a_folder_given_with_a_slash(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from torch.utils.tensorboard import SummaryWriter

    folder = fake_run(tmp_path / "runs", "Hopper-v4", "a", 1, [1.0] * 20)
    with SummaryWriter(str(folder)) as writer:  # another tag beside the returns: 7.0 at every step
        for i in range(20):
            writer.add_scalar("charts/other", 7.0, (i + 1) * 1000)
    monkeypatch.setattr(plt.Figure, "savefig", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "argv", ["plot_curves.py", f"{folder}/", "--tag", "charts/other"])  # as tab completes it
    plot_curves.main()
    (ax,) = plt.gcf().axes
    assert ax.lines[0].get_ydata()[-1] == pytest.approx(7.0) and "Hopper-v4" in ax.get_title()
    plt.close("all")


# --- benchmarks/same_numbers.py: do two commits compute the same numbers? ---------------------------------


def test_first_difference_names_the_first_tag_and_step_where_two_runs_differ():
    import same_numbers

    a = {"losses/x": [(1, 0.5), (2, float("nan"))], "losses/y": [(1, 1.0)]}
    assert same_numbers.first_difference(a, {k: list(v) for k, v in a.items()}) is None  # NaN is the same as NaN
    changed = a | {"losses/x": [(1, 0.5), (2, 0.25)]}
    assert same_numbers.first_difference(a, changed) == "losses/x at step 2: nan against 0.25 (step 2)"
    assert "at step 1" in same_numbers.first_difference(a, a | {"losses/y": [(1, 1.0 + 1e-9)]})  # one bit off
    assert "values against" in same_numbers.first_difference(a, a | {"losses/y": []})
    shifted = a | {"losses/y": [(2, 1.0)]}  # the same value logged at another step: another run
    assert same_numbers.first_difference(a, shifted) == "losses/y at step 1: 1.0 against 1.0 (step 2)"
    assert "tags differ" in same_numbers.first_difference(a, {"losses/x": a["losses/x"]})


def test_same_numbers_compares_this_checkout_with_the_other_and_exits_1_on_a_difference(monkeypatch, capsys):
    import same_numbers

    monkeypatch.setattr(same_numbers.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))  # no git
    for theirs, code, says in ((1.0, 0, "same: 1 values"), (2.0, 1, "losses/x at step 1: 1.0 against 2.0")):
        ran = []

        def run_scalars(checkout, command, theirs=theirs, ran=ran):
            ran.append(checkout)
            return {"losses/x": [(1, 1.0 if checkout == same_numbers.ROOT else theirs)]}

        monkeypatch.setattr(same_numbers, "run_scalars", run_scalars)
        monkeypatch.setattr(sys, "argv", ["same_numbers.py", "--against", "HEAD~1", "--cases", "gridworld"])
        with pytest.raises(SystemExit) as stop:
            same_numbers.main()
        assert stop.value.code == code and says in capsys.readouterr().out
        assert ran[0] == same_numbers.ROOT and ran[1].name == "other"  # this checkout, then the given commit's


def test_same_numbers_and_speed_refuse_a_commit_that_is_not_there_in_one_line(tmp_path):
    for tool, *rest in (("same_numbers.py",), ("speed.py", "--sps-only")):
        bad = run_tool(tool, "--against", "no-such-commit-here", *rest, cwd=tmp_path)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1, (tool, bad.stderr)  # git's reason on that line
        assert bad.stderr.startswith("error:") and "no-such-commit-here" in bad.stderr, (tool, bad.stderr)


# --- benchmarks/speed.py: steps per second, on 1 or N processes, against a commit ----------------------------


def speed_worktrees() -> set[str]:
    """The git worktrees speed.py made (others may come and go meanwhile: same_numbers.py's, a colleague's)."""
    listed = subprocess.run(
        ["git", "worktree", "list", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    return {line for line in listed.stdout.splitlines() if line.startswith("worktree ") and "speed-worktree-" in line}


def test_speed_spread_is_the_median_and_the_range():
    assert speed.spread([1.0, 2.0, 9.0]) == "median 2 SPS (min-max 1-9, 3 runs)"  # not the mean, 4
    assert speed.ratio([1.0, 2.0, 9.0], [1.0, 1.0, 30.0]) == 2.0


def test_speed_phase_times_leave_the_warm_up_iteration_out(monkeypatch):
    import functools

    import ppo_continuous as C

    clock, real = [0.0], C.update

    @functools.wraps(real)  # speed.py passes arguments by the names in the signature
    def update(*args, **kwargs):
        clock[0] += 100.0 if clock[0] == 0.0 else 1.0  # the first update (compiling, warming up) is long
        return real(*args, **kwargs)

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))  # only updates take time
    monkeypatch.setattr(C, "update", update)
    args = C.Args(env_id="Pendulum-v1", num_steps=64, num_minibatches=2, update_epochs=1)
    phases = speed.phase_times(C, args, iterations=2)
    assert clock[0] == 102.0 and phases["update"] == 1.0 and sum(phases.values()) == 1.0


def test_speed_against_a_commit_prints_both_checkouts_sps_their_ratio_and_where_the_time_goes(tmp_path):
    before = speed_worktrees()
    flags = ["--env-id", "Pendulum-v1", "--num-steps", "64", "--num-minibatches", "4", "--update-epochs", "1"]
    out = run_tool("speed.py", "--against", "HEAD", "--iterations", "1", "--runs", "1", "--", *flags, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "usable cores" in lines[0] and "torch " in lines[0]
    (ratio,) = [x for x in lines if x.startswith("ratio this checkout / HEAD (")]
    other = ratio.removeprefix("ratio this checkout / ").split(", 1 process(es): ")[0]  # HEAD (its short sha)
    assert float(ratio.split(": ")[1].split()[0]) > 0 and ratio.endswith("(above 1: this checkout is faster)")
    for label in ("this checkout", other):
        (line,) = [x for x in lines if x.startswith(f"{label}, 1 process(es): median ")]
        assert float(line.split("median ")[1].split()[0]) > 0 and "min-max" in line
        (phases,) = [x for x in lines if x.startswith(f"{label}: one iteration")]
        assert all(f" {phase} " in phases for phase in speed.PHASES), phases
        assert any(x.startswith(f"{label}: ceiling, random actions: ") for x in lines)
    assert "SPS bare env" in lines[-1]
    assert speed_worktrees() <= before  # the temporary worktree is gone


def test_speed_flag_runs_this_checkout_with_and_without_the_flag_interleaved_and_prints_the_flags_ratio(
    monkeypatch, capsys
):
    calls = []

    def fake_run_sps(script, processes, steps, flags, threads):
        calls.append(tuple(flags))
        return 120.0 if "--bf16" in flags else 150.0 if "--compile" in flags else 100.0

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setattr(speed, "run_sps", fake_run_sps)
    speed.main(["--flag", "compile", "bf16+compile", "--runs", "2", "--iterations", "1", "--sps-only"])
    speed.main(["--flag", "compile", "--runs", "2", "--iterations", "1", "--sps-only", "--", "--num-steps", "64"])
    out = capsys.readouterr().out
    assert calls[:6] == [(), ("--compile",), ("--bf16", "--compile")] * 2  # interleaved, the flags added
    assert calls[6:] == [("--num-steps", "64"), ("--num-steps", "64", "--compile")] * 2  # after the script's flags
    assert (
        "ratio this checkout --compile / this checkout, 1 process(es): 1.500 (above 1: this checkout --compile" in out
    )
    assert "this checkout --bf16 --compile, 1 process(es): median 120 SPS" in out


def test_speed_interleaves_the_checkouts_at_each_process_count_and_reports_median_spread_ratio_speedup(
    monkeypatch, capsys
):
    head = subprocess.run(
        ["git", "show", "HEAD:ppo_continuous.py"], cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT
    ).stdout
    calls = []

    def fake_run_sps(script, processes, steps, flags, threads):
        against = "/against/" in script
        calls.append(("against" if against else "this", processes, steps, threads))
        if against:
            assert Path(script).read_text() == head  # the commit's script, not this checkout's
            return 100.0 * processes
        return (200.0 if len(calls) % 4 == 1 else 220.0) * processes  # 200 then 220: median 210

    before = speed_worktrees()
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # main sets it for the scripts it loads: restored after
    monkeypatch.setattr(speed, "run_sps", fake_run_sps)
    speed.main(
        ["--against", "HEAD", "--processes", "2", "--runs", "2", "--iterations", "3", "--sps-only"]
        + [*("--", "--env-id", "Pendulum-v1", "--num-steps", "64")]
    )
    out = capsys.readouterr().out
    assert [c[:2] for c in calls] == [("this", 1), ("against", 1)] * 2 + [("this", 2), ("against", 2)] * 2
    assert {(c[1], c[2]) for c in calls} == {(1, 3 * 64), (2, 3 * 2 * 64)}  # each process its own batch
    assert {c[3] for c in calls} == {2}  # OMP_NUM_THREADS 4 split between 2 processes
    assert "this checkout, 1 process(es): median 210 SPS (min-max 200-220, 2 runs)" in out
    assert "this checkout, 2 process(es): median 420 SPS (min-max 400-440, 2 runs)" in out
    assert "1 process(es): median 100 SPS (min-max 100-100, 2 runs)" in out
    assert "ratio this checkout / HEAD (" in out and "1 process(es): 2.100 (above 1: this checkout is faster)" in out
    assert "this checkout: speed-up 2.00x on 2 processes, scaling efficiency 100%" in out
    assert "one iteration" not in out and "ceiling" not in out  # --sps-only
    assert speed_worktrees() <= before
    with pytest.raises(SystemExit, match="no commit"):
        speed.commit_copy("no-such-commit-anywhere", "/nowhere")


def test_speed_launches_n_processes_under_torchrun_and_skips_the_breakdown_of_a_script_without_its_functions():
    assert speed.launch_command("s.py", 1) == [sys.executable, "s.py"]
    assert speed.launch_command("s.py", 3) == [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", "s.py")
    ]
    line = speed.breakdown(type("OldScript", (), {"make_envs": None, "Agent": None})(), None, 1)
    assert line.startswith("breakdown skipped") and "compute_gae" in line and "update" in line
    assert speed.spread([3.0, 1.0, 2.0]) == "median 2 SPS (min-max 1-3, 3 runs)"
    assert speed.call_by_name(lambda a, b=2: (a, b), {"a": 1, "c": 3}) == (1, 2)  # what the function names
    with pytest.raises(TypeError, match="wants b"):
        speed.call_by_name(lambda a, b: None, {"a": 1})


# --- eighth audit: speed.py, plot_curves.py, the quoted phrases' matching and same_numbers.py, with fakes ----------

# --- benchmarks/speed.py ------------------------------------------------------------------------------------------


def fake_sps(calls: list):
    def run_sps(script, processes, steps, flags, threads):
        calls.append((processes, threads, tuple(flags)))
        return 100.0

    return run_sps


def test_speed_gives_each_process_at_least_one_thread(monkeypatch, capsys):
    calls = []
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # one core, two processes: 1 // 2 is 0, no thread count
    monkeypatch.setattr(speed, "run_sps", fake_sps(calls))
    speed.main(["--processes", "2", "--runs", "1", "--iterations", "1", "--sps-only", "--", "--num-steps", "64"])
    assert [c[:2] for c in calls] == [(1, 1), (2, 1)]
    assert "1 thread(s) per process (OMP_NUM_THREADS)" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--processes", "--runs", "--iterations"])
def test_speed_refuses_a_count_below_one_before_any_run(monkeypatch, flag):
    calls = []
    monkeypatch.setattr(speed, "run_sps", fake_sps(calls))
    with pytest.raises(SystemExit) as stop:
        speed.main([flag, "0", "--sps-only"])
    assert stop.value.code == 2 and calls == []  # argparse's refusal, not a traceback


@pytest.mark.parametrize("given", [["--total-timesteps", "100"], ["--total-timesteps=100"]])
def test_speed_refuses_total_timesteps_in_either_spelling(monkeypatch, capsys, given):
    calls = []
    monkeypatch.setattr(speed, "run_sps", fake_sps(calls))
    with pytest.raises(SystemExit) as stop:
        speed.main(["--sps-only", "--runs", "1", "--iterations", "1", "--", *given])
    assert stop.value.code == 2 and calls == [] and "not --total-timesteps" in capsys.readouterr().err


def test_speed_run_sps_gives_the_script_its_threads_and_its_flags(monkeypatch):
    seen = {}

    def run(cmd, cwd, capture_output, text, env):
        seen.update(cmd=cmd, env=env)
        os.makedirs(os.path.join(cwd, "runs", "r"))
        with open(os.path.join(cwd, "runs", "r", "summary.json"), "w") as f:
            json.dump({"sps": 321.0}, f)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the user's shell: not what each process gets
    monkeypatch.setattr(speed.subprocess, "run", run)
    assert speed.run_sps("s.py", 2, 640, ["--num-steps", "64"], 3) == 321.0
    assert seen["env"]["OMP_NUM_THREADS"] == "3"
    launch = speed.launch_command("s.py", 2)
    assert seen["cmd"] == [*launch, "--total-timesteps", "640", "--eval-episodes", "0", "--num-steps", "64"]


def test_speed_storage_is_the_rollouts_time_less_env_and_inference(monkeypatch):
    """Only an env step takes time here (one tick each): every tick is env, none is storage."""
    clock, real_make_envs = [0.0], C.make_envs

    def make_envs(*args, **kwargs):
        envs = real_make_envs(*args, **kwargs)
        step = type(envs).step

        def ticking(self, actions):
            clock[0] += 1.0
            return step(self, actions)

        monkeypatch.setattr(type(envs), "step", ticking)
        return envs

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(C, "make_envs", make_envs)
    args = C.Args(env_id="Pendulum-v1", num_steps=16, num_minibatches=2, update_epochs=1)
    phases = speed.phase_times(C, args, iterations=2)
    assert phases == {"env": 16.0, "inference": 0.0, "storage": 0.0, "GAE": 0.0, "update": 0.0}


def test_speed_breakdown_counts_every_env_of_the_batch(monkeypatch):
    phases = {"env": 1.0, "inference": 0.5, "storage": 0.25, "GAE": 0.0, "update": 0.25}  # 2 s an iteration
    monkeypatch.setattr(speed, "phase_times", lambda m, args, iterations: phases)
    line = speed.breakdown(None, types.SimpleNamespace(num_envs=4, num_steps=100), 3)
    assert line.startswith("one iteration (3 timed): env 1.000 s (50%), inference 0.500 s (25%)")
    assert line.endswith("update 0.250 s (12%); 200 SPS")  # 4 x 100 steps in 2 s


def test_speed_times_the_scripts_own_checkpoint_writes_and_reads_with_adams_moments_in_it(monkeypatch):
    """Each write and read goes through the script's save_checkpoint and load_checkpoint (a slower one is seen), the
    median is reported, and the checkpoint holds both Adam moments of every weight, as a run's does."""
    clock, saved, loaded = [0.0], [], []
    save, load = C.save_checkpoint, C.load_checkpoint

    def slow_save(path, agent, optimizer, *rest):
        saved.append(optimizer.state_dict()["state"])
        clock[0] += 2.0 * len(saved) ** 2  # 2, 8, 18, 32, 50 s: the median 18, the mean 22
        return save(path, agent, optimizer, *rest)

    def slow_load(path):
        loaded.append(path)
        clock[0] += 1.0
        return load(path)

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(C, "save_checkpoint", slow_save)
    monkeypatch.setattr(C, "load_checkpoint", slow_load)
    args = C.Args(env_id="Pendulum-v1")
    size, write, read = speed.checkpoint_times(C, args)
    assert (write, read) == (18.0, 1.0) and len(saved) == len(loaded) == speed.CHECKPOINT_REPEATS
    envs = C.make_envs(args, "weights")
    weights = list(C.Agent(envs).parameters())
    envs.close()
    assert len(saved[0]) == len(weights) and all({"exp_avg", "exp_avg_sq"} <= set(s) for s in saved[0].values())
    assert size > 3 * sum(w.numel() * w.element_size() for w in weights) / 1e6  # the weights and their two moments


def test_speed_wrapped_ceiling_counts_env_steps_not_vector_steps(monkeypatch):
    stepped = []
    space = types.SimpleNamespace(seed=lambda s: None, sample=lambda: 0)
    envs = types.SimpleNamespace(action_space=space, reset=lambda seed: None, step=stepped.append, close=lambda: None)
    module = types.SimpleNamespace(make_envs=lambda args, name: envs)
    times = iter([10.0, 12.0])  # 2 s for the steps
    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: next(times)))
    assert speed.wrapped_ceiling(module, types.SimpleNamespace(num_envs=4), 100) == 50.0  # 25 x 4 steps in 2 s
    assert len(stepped) == 25


def test_speed_sps_lines_have_one_ratio_per_other_checkout():
    sps = {("A", 1): [2.0, 4.0, 3.0], ("B", 1): [1.0]}
    assert speed.sps_lines(sps, ["A", "B"], [1]) == [
        "A, 1 process(es): median 3 SPS (min-max 2-4, 3 runs)",
        "B, 1 process(es): median 1 SPS (min-max 1-1, 1 run)",
        "ratio A / B, 1 process(es): 3.000 (above 1: A is faster)",
    ]
    sps = {("A", 1): [2.0], ("B", 1): [1.0], ("A", 2): [3.0], ("B", 2): [4.0]}
    assert speed.sps_lines(sps, ["A", "B"], [1, 2])[-2:] == [  # each checkout's speed-up, not the first's alone
        "A: speed-up 1.50x on 2 processes, scaling efficiency 75%",
        "B: speed-up 4.00x on 2 processes, scaling efficiency 200%",
    ]


def test_speed_a_flag_variant_gets_a_breakdown_but_no_checkpoint_or_ceiling_of_its_own(monkeypatch):
    monkeypatch.setattr(speed, "breakdown", lambda m, args, iterations: f"breakdown compile={args.compile}")
    monkeypatch.setattr(speed, "wrapped_ceiling", lambda m, args, steps: 10.0)
    monkeypatch.setattr(speed, "bare_ceiling", lambda env_id, kwargs, steps: 20.0)
    monkeypatch.setattr(speed, "checkpoint_times", lambda m, args: (0.25, 0.004, 0.0125))
    flagged = f"{speed.THIS} --compile"
    scripts, modules = {speed.THIS: "x.py", flagged: "x.py"}, {speed.THIS: C, flagged: C}
    lines = list(speed.phase_and_ceiling_lines(scripts, modules, [], 1, 100, {flagged: ["--compile"]}))
    assert lines == [
        f"{speed.THIS}: breakdown compile=False",
        f"{speed.THIS}: checkpoint 0.25 MB: write 4.0 ms, read 12.5 ms (save_checkpoint, load_checkpoint; median of 5)",
        f"{speed.THIS}: ceiling, random actions: 10 SPS through the script's wrappers",
        f"{flagged}: breakdown compile=True",
        "ceiling, random actions: 20 SPS bare env (no wrappers, no vector env)",
    ]


# --- benchmarks/plot_curves.py ------------------------------------------------------------------------------------


def test_plot_curves_refuses_a_group_without_a_label(tmp_path):
    (tmp_path / "Hopper-v4__a__1.json").write_text(json.dumps({"curve": [[1000, 1.0], [2000, 2.0]]}))
    for spec in (f"={tmp_path}/*.json", str(tmp_path)):
        with pytest.raises(SystemExit, match="--group needs LABEL=GLOB"):
            plot_curves.parse_groups([], [spec], False)


def test_plot_curves_reference_levels_take_colors_after_the_groups(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    (tmp_path / "Hopper-v4__a__1.json").write_text(json.dumps({"curve": [[1000, 1.0], [2000, 2.0]]}))
    monkeypatch.setattr(plt.Figure, "savefig", lambda *args, **kwargs: None)
    monkeypatch.setattr(sys, "argv", ["plot_curves.py", str(tmp_path / "Hopper-v4__a__1.json"), "--hline", "5:ref"])
    plot_curves.main()
    (ax,) = plt.gcf().axes
    curve, level = ax.lines
    assert curve.get_color() == "C0" and level.get_label() == "ref" and level.get_color() == "C1"
    plt.close("all")


def test_plot_curves_a_picture_without_a_suffix_is_a_png_and_is_named_so(tmp_path, monkeypatch, capsys):
    assert plot_curves.check_out(str(tmp_path / "curves")) is None  # no exit
    (tmp_path / "Hopper-v4__a__1.json").write_text(json.dumps({"curve": [[1000, 1.0], [2000, 2.0]]}))
    argv = ["plot_curves.py", str(tmp_path / "Hopper-v4__a__1.json"), "--out", str(tmp_path / "curves")]
    monkeypatch.setattr(sys, "argv", argv)
    plot_curves.main()
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert f"\nwrote {tmp_path / 'curves.png'}: 1 panel(s)" in capsys.readouterr().out  # the file it wrote


def test_plot_curves_a_record_with_half_a_final_figure_has_none(tmp_path):
    for record in ({"steps": 1000, "last_100": None}, {"steps": None, "last_100": 5.0}, {"last_100": 5.0}):
        (tmp_path / "r.json").write_text(json.dumps(record))
        assert plot_curves.record_final(str(tmp_path / "r.json")) is None
    (tmp_path / "r.json").write_text(json.dumps({"steps": 1000, "last_100": 5.0}))
    assert plot_curves.record_final(str(tmp_path / "r.json")) == (1000.0, 5.0)


# --- the quoted phrases' matching (benchmarks/quoted.py's contract, tables.phrase_pattern) -----------------------


def test_a_space_in_a_quoted_phrase_matches_one_or_more_spaces_or_line_breaks_never_none():
    pattern = tables.phrase_pattern("the IQM of the {n} runs is")
    assert pattern.search("the IQM of\nthe 9 runs  is") and pattern.search("the IQM of the 12 runs is")
    assert not pattern.search("the IQMof the 9 runs is") and not pattern.search("the IQM of the 9runs is")


# --- benchmarks/same_numbers.py -----------------------------------------------------------------------------------


def fake_script_run(seen: dict, code: int = 0):
    """subprocess.run for run_scalars: the scripts it was given, its env; a run that logs the speed and a loss."""

    def run(command, cwd, env, capture_output, text, timeout):
        from torch.utils.tensorboard import SummaryWriter

        seen.update(command=command, env=env, files=sorted(os.listdir(cwd)))
        if code == 0:
            with SummaryWriter(os.path.join(cwd, "runs", "r")) as writer:
                writer.add_scalar("charts/SPS", 123.0, 1)
                writer.add_scalar("charts/episodic_return", 9.0, 1)
                writer.add_scalar("losses/x", 0.5, 1)
                writer.add_scalar("losses/x", 0.25, 2)
        return subprocess.CompletedProcess(command, code, "", "the script's traceback")

    return run


def checkout(tmp_path: Path) -> Path:
    (tmp_path / "ppo_a.py").write_text("")
    (tmp_path / "notes.py").write_text("")
    return tmp_path


def test_same_numbers_compares_every_scalar_but_the_speed(tmp_path, monkeypatch):
    import same_numbers

    seen = {}
    monkeypatch.setattr(same_numbers.subprocess, "run", fake_script_run(seen))
    scalars = same_numbers.run_scalars(checkout(tmp_path), ["python", "ppo_a.py"])
    assert scalars == {"charts/episodic_return": [(1, 9.0)], "losses/x": [(1, 0.5), (2, 0.25)]}  # every step
    assert seen["files"] == ["ppo_a.py"]


def test_same_numbers_runs_each_script_on_one_thread_with_a_fixed_hash_seed(tmp_path, monkeypatch):
    import same_numbers

    seen = {}
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.setenv("PYTHONHASHSEED", "random")
    monkeypatch.setattr(same_numbers.subprocess, "run", fake_script_run(seen))
    same_numbers.run_scalars(checkout(tmp_path), ["python", "ppo_a.py"])
    assert seen["env"]["OMP_NUM_THREADS"] == "1" and seen["env"]["PYTHONHASHSEED"] == "0"


def test_same_numbers_refuses_a_run_that_failed_in_one_line(tmp_path, monkeypatch):
    import same_numbers

    monkeypatch.setattr(same_numbers.subprocess, "run", fake_script_run({}, code=1))
    with pytest.raises(SystemExit) as stop:
        same_numbers.run_scalars(checkout(tmp_path), ["python", "ppo_a.py", "--x"])
    assert str(stop.value.code).startswith("error: ppo_a.py --x failed in ") and "traceback" in str(stop.value.code)
    with pytest.raises(SystemExit) as stop:  # under torchrun: named by the script, not by torchrun's module
        same_numbers.run_scalars(checkout(tmp_path), ["python", "-m", "torch.distributed.run", "ppo_a.py", "--x"])
    assert str(stop.value.code).startswith("error: ppo_a.py --x failed in ")

    def hang(command, timeout, **kwargs):
        raise subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(same_numbers.subprocess, "run", hang)
    with pytest.raises(SystemExit) as stop:  # a hang: one line, not TimeoutExpired's traceback
        same_numbers.run_scalars(checkout(tmp_path), ["python", "ppo_a.py", "--x"])
    assert str(stop.value.code) == f"error: ppo_a.py --x ran past {same_numbers.RUN_TIMEOUT_S} s in {tmp_path}"


def test_same_numbers_exits_1_when_any_case_differs_not_only_the_last(monkeypatch, capsys):
    import same_numbers

    monkeypatch.setattr(same_numbers.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))  # no git

    def run_scalars(checkout, command):
        differs = checkout != same_numbers.ROOT and command is same_numbers.CASES["continuous"]
        return {"losses/x": [(1, 2.0 if differs else 1.0)], "losses/y": [(1, 0.0), (2, 0.0)]}

    monkeypatch.setattr(same_numbers, "run_scalars", run_scalars)
    monkeypatch.setattr(sys, "argv", ["same_numbers.py", "--against", "HEAD", "--cases", "continuous", "gridworld"])
    with pytest.raises(SystemExit) as stop:
        same_numbers.main()
    out = capsys.readouterr().out.splitlines()
    assert stop.value.code == 1 and len(out) == 2
    assert out[0].startswith("continuous ") and "losses/x at step 1: 1.0 against 2.0" in out[0]
    assert out[1].startswith("gridworld ") and out[1].endswith("same: 3 values")  # values, not tags


def test_same_numbers_removes_its_worktree_even_when_a_case_fails(monkeypatch):
    """A case that fails (one line, exit) leaves no worktree of the other commit registered in the repository."""
    import same_numbers

    git = []

    def run(cmd, **kwargs):
        git.append(cmd[:3])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(same_numbers.subprocess, "run", run)  # no git: the worktree's commands, recorded
    monkeypatch.setattr(same_numbers, "run_scalars", lambda checkout, command: sys.exit("error: a case failed"))
    monkeypatch.setattr(sys, "argv", ["same_numbers.py", "--against", "HEAD", "--cases", "gridworld"])
    with pytest.raises(SystemExit, match="failed"):
        same_numbers.main()
    assert git == [["git", "worktree", "add"], ["git", "worktree", "remove"]]


def test_same_numbers_names_tags_that_differ_even_when_as_many():
    import same_numbers

    assert same_numbers.first_difference({"a": [(1, 1.0)]}, {"b": [(1, 1.0)]}) == "tags differ: ['a', 'b']"


# --- ninth audit: speed.py's phases, ceilings and machine line, same_numbers.py's scalars, cores.py ------------


def test_speed_gae_is_the_bootstrap_value_and_compute_gae_and_inference_the_rollouts_policy_calls(monkeypatch):
    """Only the rollout's policy calls (one tick each), the bootstrap value V(s_T) (2 ticks) and compute_gae (3 ticks)
    take time: the bootstrap is GAE's, not storage's; the update has none of them; each policy call counts once."""
    import functools

    clock, real_gae, real_value = [0.0], C.compute_gae, C.Agent.get_value
    real_policy = C.Agent.get_action_and_value

    @functools.wraps(real_gae)  # speed.py passes arguments by the names in the signature
    def compute_gae(*args, **kwargs):
        clock[0] += 3.0
        return real_gae(*args, **kwargs)

    def get_value(self, obs):
        if sys._getframe(1).f_code.co_name == "phase_times":  # the bootstrap, not a policy call's value
            clock[0] += 2.0
        return real_value(self, obs)

    def get_action_and_value(self, *args, **kwargs):
        clock[0] += 1.0 if speed.torch.is_inference_mode_enabled() else 0.0  # the rollout's calls, not the update's
        return real_policy(self, *args, **kwargs)

    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(C, "compute_gae", compute_gae)
    monkeypatch.setattr(C.Agent, "get_value", get_value)
    monkeypatch.setattr(C.Agent, "get_action_and_value", get_action_and_value)
    args = C.Args(env_id="Pendulum-v1", num_steps=16, num_minibatches=2, update_epochs=1)
    phases = speed.phase_times(C, args, iterations=2)
    assert phases == {"env": 0.0, "inference": 16.0, "storage": 0.0, "GAE": 5.0, "update": 0.0}


def test_speed_bare_ceiling_times_the_steps_of_the_env_the_script_makes_not_the_sampling(monkeypatch):
    """The bare env gets the script's ENV_KWARGS; an episode's end resets it; only stepping (and resetting) is timed."""
    clock, made, resets, stepped = [0.0], {}, [], []

    class Env:
        action_space = types.SimpleNamespace(seed=lambda s: None, sample=lambda: clock.__setitem__(0, clock[0] + 100))

        def reset(self, seed=None):
            resets.append(seed)

        def step(self, action):
            clock[0] += 0.5
            stepped.append(action)
            return None, 0.0, len(stepped) % 3 == 0, False, {}  # every 3rd step ends an episode

        def close(self):
            pass

    def make(env_id, **kwargs):
        made.update(env_id=env_id, kwargs=kwargs)
        return Env()

    monkeypatch.setattr(speed.gym, "make", make)
    monkeypatch.setattr(speed, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    assert speed.bare_ceiling("ALE/Pong-v5", {"frameskip": 1}, 12) == 2.0  # 12 steps in 6 s
    assert made == {"env_id": "ALE/Pong-v5", "kwargs": {"frameskip": 1}} and resets == [0, None, None, None, None]


def test_speed_machine_names_the_cpu_the_usable_cores_of_the_machines_and_torch(monkeypatch):
    monkeypatch.setattr(speed, "cpu_model", lambda: "Some CPU @ 2.00GHz")
    monkeypatch.setattr(speed, "usable_cores", lambda: 3)
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(speed.torch.cuda, "is_available", lambda: False)
    assert speed.machine() == f"machine: Some CPU @ 2.00GHz, 3 usable cores of 64, torch {speed.torch.__version__}"


def test_speed_breakdown_times_at_most_five_iterations_and_the_ceilings_as_many_steps_as_a_run(monkeypatch, capsys):
    """main hands --iterations and a whole run's steps (iterations x num_envs x num_steps) to the breakdown and the
    ceilings; the breakdown times min(iterations, BREAKDOWN_ITERATIONS) of them."""
    given, real_lines = {}, speed.phase_and_ceiling_lines

    def lines(scripts, modules, flags, iterations, steps, extra):
        given.update(flags=flags, iterations=iterations, steps=steps)
        return iter(())

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(speed, "run_sps", fake_sps([]))
    monkeypatch.setattr(speed, "phase_and_ceiling_lines", lambda *args: lines(*args))
    speed.main(["--runs", "1", "--iterations", "3", "--", "--num-steps", "64", "--num-envs", "2"])
    assert given == {"flags": ["--num-steps", "64", "--num-envs", "2"], "iterations": 3, "steps": 3 * 2 * 64}
    timed = []
    monkeypatch.setattr(speed, "breakdown", lambda m, args, iterations: timed.append(iterations) or "")
    monkeypatch.setattr(speed, "wrapped_ceiling", lambda m, args, steps: 10.0)
    monkeypatch.setattr(speed, "bare_ceiling", lambda env_id, kwargs, steps: 20.0)
    for iterations in (20, 2):
        list(real_lines({speed.THIS: "x.py"}, {speed.THIS: C}, [], iterations, 100))
    assert timed == [speed.BREAKDOWN_ITERATIONS, 2]


def test_cpu_model_is_the_model_name_line_not_the_model_number(monkeypatch):
    import io

    cpuinfo = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Xeon(R) @ 2.00GHz\n"
    )
    monkeypatch.setattr(cores, "open", lambda path: io.StringIO(cpuinfo), raising=False)
    assert cores.cpu_model() == "Xeon(R) @ 2.00GHz"


def test_speed_bare_ceiling_makes_the_env_with_the_scripts_kwargs_and_the_users_env_kwargs(monkeypatch):
    made = []
    monkeypatch.setattr(speed, "breakdown", lambda m, args, iterations: "")
    monkeypatch.setattr(speed, "wrapped_ceiling", lambda m, args, steps: 10.0)
    monkeypatch.setattr(speed, "bare_ceiling", lambda env_id, kwargs, steps: made.append((env_id, kwargs)) or 20.0)
    module = types.SimpleNamespace(Args=C.Args, ENV_KWARGS={"frameskip": 1})
    flags = ["--env-id", "Pendulum-v1", "--env-kwargs", '{"g": 9.0}']
    list(speed.phase_and_ceiling_lines({speed.THIS: "x.py"}, {speed.THIS: module}, flags, 1, 100))
    assert made == [("Pendulum-v1", {"frameskip": 1, "g": 9.0})]  # as make_env makes each of the run's envs
