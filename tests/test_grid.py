"""grid.py's local runs by their effect, in this process and on stand-in scripts (seconds, no training): the order
runs start in, what counts as done and is recorded, which flags an ad-hoc grid refuses, the report, a record's
commit, status and record over the named grids, the minutes a run took, the pages after a record not committed, and
the exit of a grid stopped by a signal."""

import json
import os
import signal
import subprocess
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import grid
import pytest
from conftest import FAKE_SCRIPT, HANG_TIMEOUT, ROOT, finished_run_folder


def finished_run(runs_dir: Path, env_id: str, exp_name: str, seed: int, summary: dict | None = None) -> Path:
    """A finished run folder as the scripts write it: one episode in TensorBoard, a checkpoint, summary.json."""
    from torch.utils.tensorboard import SummaryWriter

    folder = runs_dir / f"{env_id}__{exp_name}__{seed}__1700000000"
    writer = SummaryWriter(str(folder))
    writer.add_scalar("charts/episodic_return", 1.0, 1000)
    writer.close()
    (folder / "checkpoint.pt").write_bytes(b"")
    summary = {"global_step": 1000, "mean_return_last_10": 1.0, "sps": 100.0} | (summary or {})
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


# a script run by grid.py: logs its argv, writes a run folder; "-crash" runs finish their summary, then exit 3
LOGGING_SCRIPT = """
import json, os, sys
argv = sys.argv[1:]
with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
    f.write(json.dumps(argv) + "\\n")
name = "__".join(argv[argv.index(flag) + 1] for flag in ("--env-id", "--exp-name", "--seed"))
folder = os.path.join("runs", name + "__1700000000")
os.makedirs(folder)
open(os.path.join(folder, "checkpoint.pt"), "w").close()
open(os.path.join(folder, "summary.json"), "w").write("{}")
if "-crash__" in folder:
    sys.stderr.write("Traceback: crashed\\n")
    sys.exit(int(os.environ.get("CRASH_EXIT", "3")))
"""


@pytest.fixture
def fake_repo(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "ppo_continuous.py").write_text(LOGGING_SCRIPT)
    monkeypatch.setattr(grid, "ROOT", str(repo))
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    return repo


def test_grid_starts_its_runs_in_the_grids_order_first_seeds_before_second(fake_repo, tmp_path):
    records = ["--records", str(tmp_path / "records")]  # none lands in the checkout's records, whatever the grid does
    grid.main(
        ["--seeds", "1", "2", "3", "--name", "order", "--dir", str(tmp_path / "there"), *records, "--", "--env-id", "X"]
    )
    calls = [json.loads(line) for line in (fake_repo / "calls.jsonl").read_text().splitlines()]
    assert [c[c.index("--seed") + 1] for c in calls] == ["1", "2", "3"]


@pytest.mark.parametrize("cores, parallel, threads", [(3, 2, 1), (7, 2, 3), (2, 4, 1)])
def test_each_of_k_runs_gets_the_cores_floor_divided_by_k_never_more_threads_than_cores(
    fake_repo, tmp_path, monkeypatch, capsys, cores, parallel, threads
):
    """3 cores, 2 at a time: 1 thread each (not 2, which would put 4 threads on 3 cores); never 0."""
    script = (fake_repo / "ppo_continuous.py").read_text()
    (fake_repo / "ppo_continuous.py").write_text(
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'threads.txt'), 'a')"
        ".write(os.environ['OMP_NUM_THREADS'] + '\\n')\n" + script
    )
    monkeypatch.setattr(grid, "usable_cores", lambda: cores)
    runs = grid.seed_runs("ppo_continuous.py", [1, 2], ["--env-id", "X"], "threads")
    records = str(tmp_path / "records")  # none lands in the checkout's records, whatever the grid does
    assert grid.run(runs, str(tmp_path / "there" / "runs"), parallel=parallel, records_dir=records) == 0
    assert f"{parallel} at a time, OMP_NUM_THREADS={threads} each" in capsys.readouterr().out
    assert (fake_repo / "threads.txt").read_text().split() == [str(threads)] * 2


@pytest.mark.parametrize("code", [3, 128 + signal.SIGTERM], ids=["exit-3", "SIGTERM-without-a-stop"])
def test_a_run_that_exits_non_zero_is_failed_and_unrecorded_even_with_a_summary(
    fake_repo, tmp_path, monkeypatch, capsys, code
):
    """Exit 143 while the grid was not stopped: a run killed on its own, not one saved with the grid. Its traceback
    (stderr) is in its log, not lost on the grid's console."""
    monkeypatch.setenv("CRASH_EXIT", str(code))
    records = tmp_path / "records"
    crashed = grid.Run("table1", "crash", "Hopper-v4", 1, 2048, ())
    assert grid.run([crashed], str(tmp_path / "evidence" / "runs"), parallel=1, records_dir=str(records)) == 1
    assert f"FAILED Hopper-v4 table1-crash seed 1 (exit {code})" in capsys.readouterr().out
    assert not records.exists() or not list(records.iterdir())
    assert "Traceback: crashed" in (tmp_path / "evidence" / "logs" / f"{crashed.label}.log").read_text()


@pytest.mark.parametrize("flag", [["--resume", "runs/x/checkpoint.pt"], ["--resume=runs/x/checkpoint.pt"]])
def test_an_ad_hoc_grid_refuses_resume_after_the_dashes_as_grid_pys_own(flag, monkeypatch, capsys):
    monkeypatch.setattr(grid, "run", lambda *a, **k: sys.exit("error: started runs it should have refused"))
    with pytest.raises(SystemExit):
        grid.main(["--seeds", "1", "--", "--env-id", "Hopper-v4", *flag])
    assert "are grid.py's to set" in capsys.readouterr().err


def test_a_flag_given_twice_is_read_as_the_script_reads_it_the_last_one():
    """tyro takes the last of a repeated flag: an ad-hoc grid named after the first env would never find its runs."""
    assert grid.flag_value(["--env-id", "A-v0", "--clip-coef", "0.1", "--env-id", "B-v0"], "--env-id") == (
        "B-v0",
        ["--clip-coef", "0.1"],
    )
    assert grid.flag_value(["--env-id=A-v0", "--env-id", "B-v0"], "--env-id")[0] == "B-v0"
    (run,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "A-v0", "--env-id", "B-v0"], "twice")
    assert run.env_id == "B-v0" and run.flags == ()


def test_an_ad_hoc_grids_report_gives_the_median_sps_of_its_seeds(tmp_path, capsys):
    runs = grid.seed_runs("ppo_continuous.py", [1, 2, 3, 4], ["--env-id", "Hopper-v4"], "m")
    for seed, sps in ((1, 100.0), (2, 100.0), (3, 400.0)):
        finished_run(tmp_path, "Hopper-v4", "seeds-m", seed, {"sps": sps})
    grid.report_seeds(runs, str(tmp_path))
    out = capsys.readouterr().out
    assert "; median SPS 100" in out and "over 3 seeds" in out  # not the mean, 200
    assert "seed 4: missing\n" in out  # a seed not done is named, not left out


def test_a_records_commit_says_changes_when_grid_py_differs_from_it(tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=HANG_TIMEOUT)
    monkeypatch.setattr(grid, "ROOT", str(clone))
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    with open(clone / "benchmarks" / "grid.py", "a") as f:
        f.write("\n# a change\n")
    assert grid.code_version("ppo_continuous.py") == head.stdout.strip() + "+changes"
    subprocess.run(["git", "-C", str(clone), "add", "benchmarks/grid.py"], check=True, timeout=HANG_TIMEOUT)
    assert grid.code_version("ppo_continuous.py") == head.stdout.strip() + "+changes"  # staged: still not HEAD's


def test_a_records_commit_is_that_of_its_own_script(tmp_path, monkeypatch):
    monkeypatch.setattr(grid, "code_version", lambda script: f"version of {script}")
    folder = finished_run(tmp_path, "BreakoutNoFrameskip-v4", "atari-default", 1)
    record = grid.make_record(grid.grid_runs("atari")[0], str(folder))
    assert record["script"] == "ppo_atari.py" and record["commit"] == "version of ppo_atari.py"


def test_status_without_a_grid_lists_every_named_grids_runs(tmp_path, capsys):
    grid.main(["status", "--dir", str(tmp_path), "--records", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == sum(len(grid.grid_runs(name)) for name in grid.GRIDS)
    assert {line.split()[1] for line in lines} == set(grid.GRIDS) and {line.split()[0] for line in lines} == {"missing"}


def test_record_writes_no_record_for_an_ad_hoc_grid(tmp_path):
    records = tmp_path / "records"
    finished_run(tmp_path / "runs", "Hopper-v4", "seeds-x", 1)
    grid.main(["record", "--seeds", "1", "--name", "x", "--dir", str(tmp_path), "--records", str(records)] + [
        "--", "--env-id", "Hopper-v4"
    ])  # fmt: skip
    assert not records.exists() or not list(records.iterdir())


def test_a_finished_runs_line_gives_its_time_in_minutes(fake_repo, tmp_path, monkeypatch, capsys):
    clock = iter([0.0] + [180.0] * 100)  # the run starts at 0 and is seen finished at 180 s
    monkeypatch.setattr(grid, "time", types.SimpleNamespace(sleep=time.sleep, time=lambda: next(clock)))
    run = grid.Run("table1", "timed", "Hopper-v4", 1, 2048, ())
    assert grid.run([run], str(tmp_path / "evidence" / "runs"), parallel=1, records_dir=str(tmp_path / "r")) == 0
    assert "done  Hopper-v4 table1-timed seed 1 in 3.0 min" in capsys.readouterr().out


def test_with_commit_a_record_that_was_not_committed_leaves_the_pages_alone(fake_repo, tmp_path, monkeypatch, capsys):
    records, paged = tmp_path / "records", []
    records.mkdir()
    monkeypatch.setattr(grid, "commit_record", lambda path, label: "not committed (index.lock)")
    monkeypatch.setattr(grid, "commit_pages", lambda label: paged.append(label) or "pages rewritten and committed")
    monkeypatch.setattr(grid, "RECORDS_DIR", str(records))
    run = grid.Run("table1", "a", "Hopper-v4", 1, 2048, ())
    assert grid.run([run], str(tmp_path / "evidence" / "runs"), parallel=1, records_dir=str(records), commit=True) == 0
    assert paged == [] and "not committed (index.lock)" in capsys.readouterr().out


# a fake run's start: it records the signals it gets, says it is ready, and seed 1 waits until seed 2 is too
RUN_START = """
import os, signal, sys, time
got = []
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda signum, _: got.append(signum))
open(f"ready{SEED}", "w").close()
if SEED == 1:
    while not os.path.exists("ready2"):
        time.sleep(0.05)
"""

# a run that stops the grid with each of SIGS in turn; like the scripts, it stops a moment after the first signal
# it gets and exits with 128 + that signal (a later one changes nothing)
STOPPING_RUN = (
    RUN_START
    + """    for s in SIGS:
        os.kill(os.getppid(), s)
        time.sleep(0.5)
for _ in range(600):  # 30 s at most
    if got:
        break
    time.sleep(0.05)
time.sleep(1.0)
sys.exit(128 + got[0] if got else 0)
"""
)


@dataclass(frozen=True)
class StoppingRun(grid.Run):
    sigs: tuple[int, ...] = (signal.SIGTERM,)

    def command(self, runs_dir: str) -> list[str]:
        code = STOPPING_RUN.replace("SEED", str(self.seed)).replace("SIGS", repr([int(s) for s in self.sigs]))
        return [sys.executable, "-c", code]


@pytest.mark.parametrize("sigs", [(signal.SIGINT,), (signal.SIGTERM, signal.SIGINT)], ids=["SIGINT", "TERM-then-INT"])
def test_a_stopped_grid_starts_no_other_run_counts_its_runs_saved_and_exits_with_its_first_signal(
    tmp_path, monkeypatch, capsys, sigs
):
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    runs = [StoppingRun(grid.SEEDS_GRID, "stop", None, seed, None, (), None, sigs) for seed in (1, 2, 3)]
    with pytest.raises(SystemExit) as stop:
        grid.run(runs, str(tmp_path / "runs"), parallel=2)
    assert stop.value.code == 128 + sigs[0]
    out = capsys.readouterr().out
    assert out.count("stopped with the grid") == 2 and "FAILED" not in out, out
    assert not (tmp_path / "ready3").exists()  # the third run never started


# a run stopped before it could set a handler (a script still importing torch): the signal kills it, Python's way
UNHANDLED_RUN = """
import os, signal, sys, time
open(f"ready{SEED}", "w").close()
if SEED == 1:
    while not os.path.exists("ready2"):
        time.sleep(0.05)
    os.kill(os.getppid(), signal.SIGTERM)
time.sleep(30)  # the grid's SIGTERM ends it long before
sys.exit(5)
"""


@dataclass(frozen=True)
class UnhandledRun(grid.Run):
    def command(self, runs_dir: str) -> list[str]:
        return [sys.executable, "-c", UNHANDLED_RUN.replace("SEED", str(self.seed))]


def test_a_run_the_grids_signal_kills_before_its_handler_is_set_is_stopped_with_the_grid_not_failed(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    runs = [UnhandledRun(grid.SEEDS_GRID, "early", None, seed, None, ()) for seed in (1, 2)]
    with pytest.raises(SystemExit) as stop:
        grid.run(runs, str(tmp_path / "runs"), parallel=2)
    assert stop.value.code == 128 + signal.SIGTERM
    out = capsys.readouterr().out
    assert out.count("stopped with the grid before its training began") == 2 and "FAILED" not in out, out


# a run that records each signal it gets; seed 1 sends the grid SIGTERM and, once that reached it, SIGINT. Each
# run waits for both (30 s at most, a guard against a hang), as a script that quits at once on a second signal
COUNTING_RUN = (
    RUN_START
    + """    os.kill(os.getppid(), signal.SIGTERM)
    while not got:
        time.sleep(0.05)
    os.kill(os.getppid(), signal.SIGINT)
for _ in range(600):
    if len(got) == 2:
        break
    time.sleep(0.05)
open(f"got{SEED}", "w").write(" ".join(map(str, got)))
sys.exit(128 + got[0])
"""
)


@dataclass(frozen=True)
class CountingRun(grid.Run):
    def command(self, runs_dir: str) -> list[str]:
        return [sys.executable, "-c", COUNTING_RUN.replace("SEED", str(self.seed))]


def test_a_second_signal_to_a_stopped_grid_reaches_each_running_run_again(tmp_path, monkeypatch, capsys):
    """Ctrl-C twice: the grid passes each signal on once, the second too (the scripts then quit at once)."""
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    runs = [CountingRun(grid.SEEDS_GRID, "count", None, seed, None, ()) for seed in (1, 2)]
    with pytest.raises(SystemExit) as stop:
        grid.run(runs, str(tmp_path / "runs"), parallel=2)
    assert stop.value.code == 128 + signal.SIGTERM
    for seed in (1, 2):
        assert (tmp_path / f"got{seed}").read_text() == f"{int(signal.SIGTERM)} {int(signal.SIGINT)}", seed
    out = capsys.readouterr().out
    assert out.count("each running run saves and stops") == 2 and out.count("stopped with the grid") == 2, out


def test_a_record_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Two grids share the records: one's tables.py may read while the other writes. A write that fails halfway
    (here: a value json cannot write, after the fields before it) leaves the earlier record whole, and no stray file."""
    records, run = tmp_path / "records", grid.grid_runs("atari")[0]
    folder = finished_run(tmp_path, run.env_id, f"{run.grid}-{run.variant}", run.seed)
    path = Path(grid.write_record(run, str(folder), str(records)))
    earlier = path.read_text()
    monkeypatch.setattr(grid, "make_record", lambda run, folder: {"summary": {"steps": 1}, "curve": {object()}})
    with pytest.raises(TypeError):
        grid.write_record(run, str(folder), str(records))
    assert path.read_text() == earlier and json.loads(earlier) and [p.name for p in records.iterdir()] == [path.name]


@pytest.mark.parametrize(
    "machines, noted",
    [(("CPU A", "CPU A", "CPU B"), "CPU A\nCPU B\n"), (("CPU A", "CPU B", "CPU A"), "CPU A\nCPU B\nCPU A\n")],
    ids=["resumed-on-the-same-then-another", "back-to-the-first"],
)
def test_a_run_cut_on_one_machine_and_finished_on_another_names_both_cpus_in_its_record(
    fake_repo, tmp_path, monkeypatch, machines, noted
):
    """Its hours and steps per second span both machines: its record names each once, in order; machines.txt is
    each process's machine in turn (one line while the same machine goes on)."""
    (fake_repo / "ppo_continuous.py").write_text(FAKE_SCRIPT)
    runs_dir, records = str(tmp_path / "evidence" / "runs"), str(tmp_path / "records")
    run = grid.Run("table1", "moved", "Hopper-v4", 1, 2048, ())
    for i, cpu in enumerate(machines):  # cut on the first two, finished on the last
        monkeypatch.setattr(grid, "cpu_model", lambda cpu=cpu: cpu)
        if i < len(machines) - 1:
            monkeypatch.setenv("CUT", "1")
        else:
            monkeypatch.delenv("CUT")
        assert grid.run([run], runs_dir, parallel=1, records_dir=records) == (0 if i == len(machines) - 1 else 1)
    record = grid.read_record(run, records)
    assert record["cpus"] == ["CPU A", "CPU B"] and record["cpu"] == machines[-1]
    assert (Path(run.state(runs_dir)[1]) / grid.MACHINES_FILE).read_text() == noted


def test_a_run_resumes_its_newest_cut_folder_and_is_done_by_its_newest_finished_one(tmp_path):
    """A run started again leaves several folders: the newest checkpoint is resumed, the newest summary counts."""
    run = grid.Run("table1", "a", "Hopper-v4", 1, 2048, ())

    def folder(stamp: int) -> Path:
        made = tmp_path / f"Hopper-v4__table1-a__1__{stamp}"
        made.mkdir()
        (made / "checkpoint.pt").write_bytes(b"")
        return made

    old, new = folder(1700000000), folder(1800000000)
    assert run.state(str(tmp_path)) == ("cut", str(new))
    assert run.command(str(tmp_path))[2:] == ["--resume", str(new / "checkpoint.pt")]
    (old / "summary.json").write_text("{}")
    assert run.state(str(tmp_path)) == ("done", str(old))  # a finished run beats a newer cut one
    (new / "summary.json").write_text("{}")
    assert run.state(str(tmp_path)) == ("done", str(new))


def test_an_ad_hoc_run_gets_its_flags_untouched_and_no_no_cuda_which_only_the_named_grids_add(tmp_path):
    (ad_hoc,) = grid.seed_runs("ppo_continuous.py", [2], ["--env-id", "Hopper-v4", "--clip-coef", "0.1"], "x")
    assert ad_hoc.command(str(tmp_path))[2:] == [
        *("--env-id", "Hopper-v4", "--seed", "2", "--exp-name", "seeds-x", "--save-every", "10", "--clip-coef", "0.1")
    ]
    named = grid.Run("table1", "a", "Hopper-v4", 2, 2048, ())
    assert named.command(str(tmp_path))[-1] == "--no-cuda"
    (same_name,) = grid.seed_runs("ppo_continuous.py", [2], ["--env-id", "Hopper-v4"], "init-std-1.0")  # no patch:
    assert same_name.patch is None and same_name.command(str(tmp_path))[1:3] == [  # the details grid's alone
        str(Path(grid.ROOT) / "ppo_continuous.py"),
        "--env-id",
    ]


def test_a_finished_run_is_not_started_again(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grid.subprocess, "Popen", lambda *a, **k: pytest.fail("a finished run was started"))
    named = grid.Run("table1", "a", "Hopper-v4", 1, 2048, ())
    (ad_hoc,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "Hopper-v4"], "x")
    finished_run(tmp_path / "runs", "Hopper-v4", "table1-a", 1)
    finished_run(tmp_path / "runs", "Hopper-v4", "seeds-x", 1)
    assert grid.run([named, ad_hoc], str(tmp_path / "runs"), parallel=1, records_dir=str(tmp_path / "r")) == 0
    assert "2 of 2 done; 0 to go" in capsys.readouterr().out


def test_a_run_that_exits_zero_without_a_summary_is_failed_not_done(fake_repo, tmp_path, capsys):
    """Exit 0 with only a checkpoint: not a finished run (resuming it would evaluate and summarize it)."""
    summary = 'open(os.path.join(folder, "summary.json"), "w").write("{}")\n'
    (fake_repo / "ppo_continuous.py").write_text(LOGGING_SCRIPT.replace(summary, ""))
    runs = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X"], "unfinished")
    assert grid.run(runs, str(tmp_path / "there" / "runs"), parallel=1) == 1
    assert "FAILED X seeds-unfinished seed 1 (exit 0 without summary.json)" in capsys.readouterr().out


def test_a_fresh_run_whose_folder_appears_after_the_grid_first_looks_still_names_its_machine(
    fake_repo, tmp_path, monkeypatch
):
    """A fresh run's folder appears with its first checkpoint: the grid looks again until it is there."""
    runs_dir = tmp_path / "evidence" / "runs"
    (fake_repo / "ppo_continuous.py").write_text(
        "import os, time\nfor _ in range(600):  # 30 s at most\n    if os.path.exists('looked'):\n        break\n"
        "    time.sleep(0.05)\n" + LOGGING_SCRIPT
    )
    note = grid.note_machine

    def note_after_looking(run, runs_dir):  # the grid's first look comes before the folder is made
        (Path(runs_dir).parent / "looked").touch()
        return note(run, runs_dir)

    monkeypatch.setattr(grid, "note_machine", note_after_looking)
    monkeypatch.setattr(grid, "cpu_model", lambda: "CPU A")
    run = grid.Run("table1", "late", "Hopper-v4", 1, 2048, ())
    assert grid.run([run], str(runs_dir), parallel=1, records_dir=str(tmp_path / "records")) == 0
    assert (Path(run.state(str(runs_dir))[1]) / grid.MACHINES_FILE).read_text() == "CPU A\n"
    assert grid.read_record(run, str(tmp_path / "records"))["cpus"] == ["CPU A"]


def test_a_finished_ad_hoc_run_leaves_no_record(fake_repo, tmp_path, capsys):
    records = tmp_path / "records"
    runs = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X"], "plain")
    assert grid.run(runs, str(tmp_path / "there" / "runs"), parallel=1, records_dir=str(records)) == 0
    assert not records.exists() or not list(records.iterdir())
    assert "record" not in capsys.readouterr().out


def test_with_commit_records_kept_outside_the_repository_leave_its_pages_alone(fake_repo, tmp_path, monkeypatch):
    """The pages quote benchmarks/records alone: a record committed elsewhere (--records) rewrites none of them."""
    records, paged = tmp_path / "records", []
    records.mkdir()
    monkeypatch.setattr(grid, "commit_record", lambda path, label: "committed")
    monkeypatch.setattr(grid, "commit_pages", lambda label: paged.append(label) or "pages rewritten and committed")
    monkeypatch.setattr(grid, "RECORDS_DIR", str(fake_repo))  # the repository's records: elsewhere
    run = grid.Run("table1", "a", "Hopper-v4", 1, 2048, ())
    assert grid.run([run], str(tmp_path / "evidence" / "runs"), parallel=1, records_dir=str(records), commit=True) == 0
    assert paged == [] and grid.read_record(run, str(records)) is not None


def test_a_grid_gives_back_the_signal_handlers_it_found(fake_repo, tmp_path):
    before = {sig: signal.getsignal(sig) for sig in grid.STOP_SIGNALS}
    runs = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X"], "handlers")
    assert grid.run(runs, str(tmp_path / "there" / "runs"), parallel=1) == 0
    assert {sig: signal.getsignal(sig) for sig in grid.STOP_SIGNALS} == before  # Ctrl-C stops the caller again


def test_a_record_holds_the_runs_summary_its_budget_and_its_patch_and_reads_back_as_its_variants(tmp_path):
    """Steps reached, SPS, wall time and episodes are summary.json's, the budget the one asked for; a variant that is
    no flag records its patch, so that its own record is read back, not refused; the source names the folder alone."""
    run = next(r for r in grid.grid_runs("details") if r.variant == "init-std-1.0")
    summary = {"global_step": 299_008, "sps": 1234.5, "wall_time_s": 250.0, "episodes": 321}
    folder = finished_run(tmp_path / "runs", run.env_id, run.exp_name, run.seed, summary)
    grid.write_record(run, str(folder), str(tmp_path / "records"))
    record = grid.read_record(run, str(tmp_path / "records"))
    assert record["patch"] == grid.VARIANT_PATCHES["init-std-1.0"] == run.patch
    assert [record[k] for k in ("steps", "budget", "sps", "wall_time_s", "episodes")] == [
        299_008,
        300_000,
        1234.5,
        250.0,
        321,
    ]
    assert record["source"] == f"run folder {folder.name}"  # no path of the machine that made it


def test_a_records_scores_and_curve_are_of_every_episode_of_a_run_with_more_than_ten_thousand(tmp_path):
    """Reacher ends 1M steps with about 19,600 episodes; TensorBoard keeps a random 10,000 of a tag's scalars unless
    told to keep all, and the last 100 of those are not the run's last 100."""
    run, returns = grid.grid_runs("mujoco")[0], [float(k) for k in range(10_500)]
    folder = finished_run_folder(
        tmp_path, run.env_id, run.exp_name, run.seed, returns
    )  # episode k at step 1000 (k + 1)
    record = grid.make_record(run, str(folder))
    assert record["last_100"] == sum(returns[-100:]) / 100 and record["mean_all"] == sum(returns) / len(returns)
    assert record["curve"][-1] == [1000 * (10_500 - 52), 10_500 - 53.0]  # the mean of its last 105 episodes


def test_an_ad_hoc_grid_on_the_scripts_default_env_finds_its_runs_under_that_envs_name(fake_repo, tmp_path, capsys):
    """Without --env-id the script names its folder after its own default env: the grid finds it there, done."""
    script = LOGGING_SCRIPT.replace("argv = sys.argv[1:]", 'argv = ["--env-id", "Hopper-v4", *sys.argv[1:]]')
    (fake_repo / "ppo_continuous.py").write_text(script)
    runs_dir, runs = str(tmp_path / "there" / "runs"), grid.seed_runs("ppo_continuous.py", [1], [], "default")
    assert grid.run(runs, runs_dir, parallel=1) == 0 and "FAILED" not in capsys.readouterr().out
    assert runs[0].state(runs_dir) == (
        "done",
        str(tmp_path / "there" / "runs" / "Hopper-v4__seeds-default__1__1700000000"),
    )
    assert grid.run(runs, runs_dir, parallel=1) == 0 and "1 of 1 done; 0 to go" in capsys.readouterr().out


def test_an_ad_hoc_grid_on_the_default_env_never_claims_a_run_of_another_env_under_the_same_name(tmp_path):
    """--name sweep on the script's default env (HalfCheetah-v4) and --name sweep on Hopper-v4 are two grids: the
    first is not done because the second's seed 1 is."""
    runs_dir = tmp_path / "runs"
    for env in ("Hopper-v4", "HalfCheetah-v4"):
        (runs_dir / f"{env}__seeds-sweep__1__1700000000").mkdir(parents=True)
        (
            runs_dir
            / f"{env}__seeds-sweep__1__1700000000"
            / ("summary.json" if env == "Hopper-v4" else "checkpoint.pt")
        ).touch()
    default_env = grid.seed_runs("ppo_continuous.py", [1], [], "sweep")[0]
    assert default_env.state(str(runs_dir)) == ("cut", str(runs_dir / "HalfCheetah-v4__seeds-sweep__1__1700000000"))
    atari = grid.seed_runs("ppo_atari.py", [1], [], "sweep")[0]  # Breakout's: none yet
    assert atari.state(str(runs_dir)) == ("missing", None)


def test_a_grid_name_with_glob_characters_finds_its_own_runs(tmp_path):
    """A name is a name, not a pattern: --name 'lr[3e-4]' finds its finished run and nothing else."""
    runs_dir = tmp_path / "runs"
    for name in ("lr[3e-4]", "lr3"):
        (runs_dir / f"Hopper-v4__seeds-{name}__1__1700000000").mkdir(parents=True)
    (runs_dir / "Hopper-v4__seeds-lr[3e-4]__1__1700000000" / "summary.json").touch()
    run = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "Hopper-v4"], "lr[3e-4]")[0]
    assert run.state(str(runs_dir)) == ("done", str(runs_dir / "Hopper-v4__seeds-lr[3e-4]__1__1700000000"))
    assert run.folders(str(runs_dir)) == [str(runs_dir / "Hopper-v4__seeds-lr[3e-4]__1__1700000000")]


def test_parallel_below_one_is_refused_in_one_line_before_anything_is_made(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grid, "run", lambda *a, **k: sys.exit("error: started runs it should have refused"))
    with pytest.raises(SystemExit) as refused:
        grid.main(["--seeds", "1", "--parallel", "0", "--dir", str(tmp_path), "--", "--env-id", "X"])
    assert refused.value.code == 2 and "--parallel must be positive" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_ad_hoc_run_cut_short_is_resumed_from_its_checkpoint_not_started_again_from_step_0(fake_repo, tmp_path):
    """A cut run of the ad-hoc grid resumes as a named grid's does: --resume its checkpoint, in its own folder."""
    (fake_repo / "ppo_continuous.py").write_text(FAKE_SCRIPT)
    runs_dir = tmp_path / "there" / "runs"
    (run,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "Hopper-v4"], "cut")
    cut = runs_dir / "Hopper-v4__seeds-cut__1__1600000000"
    cut.mkdir(parents=True)
    (cut / "checkpoint.pt").write_bytes(b"")
    assert grid.run([run], str(runs_dir), parallel=1) == 0
    calls = [json.loads(line)["argv"] for line in (fake_repo / "calls.jsonl").read_text().splitlines()]
    assert calls == [["--resume", str(cut / "checkpoint.pt")]]
    assert run.state(str(runs_dir)) == ("done", str(cut)) and [p.name for p in runs_dir.iterdir()] == [cut.name]


def test_a_seeds_runs_are_found_by_its_whole_seed_seed_1_never_passes_for_seed_10(tmp_path, capsys):
    """Seeds 1 and 10 of one grid: seed 10's folder is not seed 1's (done, or resumed as seed 1's checkpoint)."""
    finished_run(tmp_path / "runs", "Hopper-v4", "seeds-x", 10)
    grid.main(["status", "--seeds", "1", "10", "--name", "x", "--dir", str(tmp_path), "--", "--env-id", "Hopper-v4"])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["missing", "done"]
    named = grid.Run("table1", "a", "Hopper-v4", 1, 2048, ())
    finished_run(tmp_path / "runs", "Hopper-v4", "table1-a", 12)
    assert named.state(str(tmp_path / "runs")) == ("missing", None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a parent's death signals its children on Linux alone")
def test_each_run_gets_sigterm_when_the_grid_dies_and_runs_in_a_session_of_its_own(fake_repo, tmp_path):
    """A grid killed outright leaves no run training: each asked the kernel for SIGTERM (it saves; SIGKILL would not)
    at its parent's death; and each is out of the terminal's process group, so that Ctrl-C reaches the grid alone."""
    (fake_repo / "ppo_continuous.py").write_text(
        "import ctypes, json, os, signal\nsig = ctypes.c_int(0)\nctypes.CDLL(None).prctl(2, ctypes.byref(sig))\n"
        "open(os.path.join(os.path.dirname(__file__), 'process.json'), 'w').write(json.dumps("
        "{'pdeathsig': sig.value, 'own_session': os.getsid(0) == os.getpid(), 'pgid': os.getpgid(0)}))\n"
        + LOGGING_SCRIPT
    )
    runs = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X"], "orphan")
    assert grid.run(runs, str(tmp_path / "there" / "runs"), parallel=1) == 0
    process = json.loads((fake_repo / "process.json").read_text())
    assert process["pdeathsig"] == signal.SIGTERM
    assert process["own_session"] and process["pgid"] != os.getpgid(0)


def test_a_runs_record_is_made_from_the_folder_it_finished_in_not_an_older_one(fake_repo, tmp_path):
    """A run started over by hand leaves two folders: the newest checkpoint is resumed, and its record is that
    folder's, not the older one's (which has no summary)."""
    (fake_repo / "ppo_continuous.py").write_text(FAKE_SCRIPT)
    runs_dir, records = tmp_path / "evidence" / "runs", str(tmp_path / "records")
    run = grid.Run("table1", "twice", "Hopper-v4", 1, 2048, ())
    for stamp in (1600000000, 1650000000):
        (runs_dir / f"Hopper-v4__table1-twice__1__{stamp}").mkdir(parents=True)
        (runs_dir / f"Hopper-v4__table1-twice__1__{stamp}" / "checkpoint.pt").write_bytes(b"")
    assert grid.run([run], str(runs_dir), parallel=1, records_dir=records) == 0
    assert grid.read_record(run, records)["source"] == "run folder Hopper-v4__table1-twice__1__1650000000"
