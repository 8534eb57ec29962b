"""grid.py --slurm against a real Slurm: the one-node cluster benchmarks/slurm_cluster.sh starts (`.ci/run` starts it
before the suite). A grid submitted as a job array ends with the same figures as the same grid run here; a task cut
by its time limit is requeued and ends at its run's exact budget with a whole history, and so does one that Slurm
itself requeues (a preemption); a failing task ends failed with its line, not requeued. Without a cluster these
tests skip, saying so; the bad-input checks run everywhere."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cluster
import pytest
from conftest import HANG_TIMEOUT, ROOT, SLOW_POINTMASS, STEP_S, finished_run_folder, scalars, wait_for_checkpoint

POINTMASS = ["--env-id", "pointmass:PointMass-v0", "--eval-episodes", "2"]
ENV = os.environ | {"PYTHONPATH": str(ROOT / "examples"), "OMP_NUM_THREADS": "1"}  # as the tasks' one CPU


def slurm_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    nodes = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=60)
    return nodes.returncode == 0 and any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in nodes.stdout.split())


needs_slurm = pytest.mark.skipif(
    not slurm_up(), reason="no Slurm cluster up here: `bash benchmarks/slurm_cluster.sh start` starts one (as root)"
)


def grid_py(*args: str, cwd: Path, env: dict = ENV) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grid.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT)


def summaries(folder: Path) -> dict[str, dict]:
    found = {}
    for path in sorted((folder / "runs").glob("*/summary.json")):
        seed = path.parent.name.split("__")[2]
        summary = json.loads(path.read_text())
        found[seed] = {k: summary[k] for k in ("global_step", "mean_return_last_10", "eval_mean_return")}
    return found


@needs_slurm
def test_a_grid_submitted_to_slurm_ends_with_the_figures_of_the_same_grid_run_here(tmp_path):
    flags = ["--seeds", "1", "2", "3", "--name", "pm", "--", *POINTMASS, "--total-timesteps", "4096"]
    there = grid_py("run", "--slurm", "--dir", str(tmp_path / "slurm"), "--time", "10", "--wait", *flags, cwd=tmp_path)
    assert there.returncode == 0, there.stdout + there.stderr
    assert "submitted 3 runs as job array" in there.stdout and there.stdout.count("done  ") == 3
    here = grid_py("run", "--dir", str(tmp_path / "local"), *flags, cwd=tmp_path)
    assert here.returncode == 0, here.stderr
    assert summaries(tmp_path / "slurm") == summaries(tmp_path / "local") and len(summaries(tmp_path / "local")) == 3
    status = grid_py("status", "--dir", str(tmp_path / "slurm"), *flags, cwd=tmp_path)
    assert [line.split()[0] for line in status.stdout.splitlines()] == ["done"] * 3
    again = grid_py("run", "--slurm", "--dir", str(tmp_path / "slurm"), *flags, cwd=tmp_path)  # nothing left to do
    assert again.returncode == 0 and "none to submit" in again.stdout


@needs_slurm
def test_a_task_cut_by_its_time_limit_is_requeued_and_its_run_ends_at_its_exact_budget_with_a_whole_history(
    tmp_path,
):
    """A one-minute limit: Slurm warns the task 15-45 s into it (cluster.warning_s; it looks every 30 s), so a run
    that sleeps more than 45 s is always cut at least once, and every task trains some."""
    (tmp_path / "slowpoint.py").write_text(SLOW_POINTMASS.replace("STEP_S", repr(STEP_S)))
    num_steps, budget = 256, 48 * 256  # 48 iterations, 49 s asleep; the updates small beside them
    assert budget * STEP_S > 60 - cluster.warning_s(1) and cluster.warning_s(1) == 15
    flags = ["--seeds", "1", "--name", "cut", "--", "--env-id", "slowpoint:SlowPointMass-v0", "--eval-episodes", "1"]
    flags += ["--total-timesteps", str(budget), "--num-steps", str(num_steps), "--save-every", "1"]
    flags += ["--update-epochs", "2", "--num-minibatches", "4"]
    env = ENV | {"PYTHONPATH": f"{tmp_path}:{ENV['PYTHONPATH']}"}
    done = grid_py("run", "--slurm", "--dir", str(tmp_path), "--time", "1", "--wait", *flags, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = next((tmp_path / "runs").glob("*__seeds-cut__1__*"))
    assert json.loads((folder / "summary.json").read_text())["global_step"] == budget
    logs = "".join(p.read_text() for p in (tmp_path / "slurm").glob("*/*_log.out"))
    assert "Requeued job" in logs  # submitit's word: Slurm's warning came, the script stopped saved, the task requeued
    steps = [step for step, _ in scalars(folder)["charts/SPS"]]  # one per iteration, each once, in order
    assert steps == [num_steps * k for k in range(1, budget // num_steps + 1)]
    resumed = [line for line in (tmp_path / "logs").glob("*.log") for line in line.read_text().splitlines()]
    assert any("resuming at step" in line for line in resumed)  # the requeued task went on from the checkpoint
    assert any(line.startswith("SIGTERM: stopping after this iteration") for line in resumed)  # stopped, not killed
    assert any(line.startswith("saved ") and "resume with" in line for line in resumed)  # saved as it stopped


@needs_slurm
def test_a_task_preempted_and_requeued_by_slurm_itself_resumes_its_run_and_ends_at_its_exact_budget(tmp_path):
    """`scontrol requeue`, as a preemption with PreemptMode=REQUEUE does: Slurm sends every process of the job
    SIGTERM (SIGKILL KillWait later), the script saves at the end of its iteration, and Slurm starts the task again,
    which resumes the run from that checkpoint. A ten-minute limit: no warning comes, the requeue is Slurm's own."""
    (tmp_path / "slowpoint.py").write_text(SLOW_POINTMASS.replace("STEP_S", repr(STEP_S)))
    num_steps, budget = 256, 48 * 256  # 49 s asleep: requeued in its first seconds, it has most of its run left
    flags = ["--seeds", "1", "--name", "pre", "--", "--env-id", "slowpoint:SlowPointMass-v0", "--eval-episodes", "1"]
    flags += ["--total-timesteps", str(budget), "--num-steps", str(num_steps), "--save-every", "1"]
    flags += ["--update-epochs", "2", "--num-minibatches", "4"]  # an iteration and its save well inside KillWait
    env = ENV | {"PYTHONPATH": f"{tmp_path}:{ENV['PYTHONPATH']}"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grid.py"), "run", "--slurm", "--dir", str(tmp_path)]
    cmd += ["--time", "10", "--wait", *flags]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = wait_for_checkpoint(proc, tmp_path).parent
    job = json.loads(next((tmp_path / "slurm").glob("*.json")).read_text())["job"]
    requeue = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert requeue.returncode == 0, requeue.stderr
    out, err = proc.communicate(timeout=HANG_TIMEOUT)
    assert proc.returncode == 0 and "done  " in out, out + err
    assert json.loads((folder / "summary.json").read_text())["global_step"] == budget
    logs = "".join(p.read_text() for p in (tmp_path / "slurm").glob("*/*_log.out"))
    assert logs.count("Starting with JobEnvironment") == 2 and "Requeued job" not in logs  # Slurm's requeue
    steps = [step for step, _ in scalars(folder)["charts/SPS"]]  # one per iteration, each once, in order
    assert steps == [num_steps * k for k in range(1, budget // num_steps + 1)]
    resumed = [line for line in (tmp_path / "logs").glob("*.log") for line in line.read_text().splitlines()]
    assert any(line.startswith("SIGTERM: stopping after this iteration") for line in resumed)  # Slurm's SIGTERM
    assert any(line.startswith("saved ") and "resume with" in line for line in resumed)  # saved before KillWait
    assert any("resuming at step" in line for line in resumed)  # the task Slurm started again went on from there


@needs_slurm
def test_a_failing_task_ends_failed_with_its_line_and_is_not_requeued(tmp_path):
    flags = ["--seeds", "1", "--name", "bad", "--", "--env-id", "NoSuchEnv-v0"]
    done = grid_py("run", "--slurm", "--dir", str(tmp_path), "--time", "5", "--wait", *flags, cwd=tmp_path)
    assert done.returncode == 1 and "error: 1 runs failed or did not finish" in done.stderr
    assert "FAILED " in done.stdout and "cannot make NoSuchEnv-v0" in done.stdout
    status = grid_py("status", "--dir", str(tmp_path), *flags, cwd=tmp_path)
    assert status.stdout.startswith("failed") and "cannot make NoSuchEnv-v0" in status.stdout
    logs = "".join(p.read_text() for p in (tmp_path / "slurm").glob("*/*_log.*"))
    assert "Requeued" not in logs


@needs_slurm
def test_an_option_slurm_refuses_is_one_line_and_exit_2_with_nothing_queued(tmp_path):
    flags = ["--seeds", "1", "--name", "refused", "--", *POINTMASS]
    done = grid_py("run", "--slurm", "--dir", str(tmp_path), "--sbatch", "partition=nosuch", *flags, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: Slurm refused the job array: ")
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not list((tmp_path / "slurm").iterdir())  # no run marked as queued, no task pickled


def test_slurm_input_that_cannot_work_is_one_line_and_exit_2_with_nothing_made(tmp_path):
    flags, d = ["--seeds", "1", "--", *POINTMASS], str(tmp_path / "d")
    cases = {
        "--dir is the cluster's to share": (["run", "--slurm", *flags], "--slurm needs --dir"),
        "no sbatch": (["run", "--slurm", "--dir", d, *flags], "no sbatch on this machine's PATH"),
        "a time limit that is none": (
            ["run", "--slurm", "--dir", d, "--time", "0", *flags],
            "--time",
        ),
        "status is no submission": (["status", "--slurm", "--dir", d, *flags], "say `run`"),
        "no CPU": (["run", "--slurm", "--dir", d, "--cpus-per-task", "0", *flags], "--cpus-per-task"),
        "none at once": (
            ["run", "--slurm", "--dir", d, "--max-running", "0", *flags],
            "--max-running",
        ),
        "fewer requeues than none": (
            ["run", "--slurm", "--dir", d, "--max-timeouts", "-1", *flags],
            "--max-timeouts must be at least 0",
        ),
    }
    for name, (args, says) in cases.items():
        env = ENV | ({"PATH": os.path.dirname(sys.executable)} if name == "no sbatch" else {})
        cmd = [sys.executable, str(ROOT / "benchmarks" / "grid.py"), *args]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_TIMEOUT)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and says in done.stderr, (name, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, name
        assert not (tmp_path / "d").exists() and not (tmp_path / "evidence").exists(), name


def test_a_slurm_time_limit_is_read_in_minutes_as_submitit_counts_them():
    spelt = ("90", "1:30:00", "2-00:00:00", "0:30", "1:00:01", "1-12", "1-12:30", "90:30")
    assert [cluster.minutes(t) for t in spelt] == [90, 90, 2880, 1, 61, 2160, 2190, 91]  # DAYS-HOURS[:MINUTES]
    for wrong in ("an hour", "1:2:3:4", "1-1:2:3:4"):
        with pytest.raises(ValueError):
            cluster.minutes(wrong)


def test_a_task_stopped_for_its_time_limit_saves_and_hands_submitit_a_fresh_task_to_requeue(tmp_path, monkeypatch):
    """The checkpoint hook without a cluster: the script gets SIGTERM (it saves on it), the state says requeued, and
    what submitit pickles is a task with no process, which runs the run again (from its checkpoint) when called."""
    import grid
    import submitit

    run = grid.Run(grid.SEEDS_GRID, "hook", "pointmass:PointMass-v0", 1, None, ())
    task = cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=False)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143));"
         " print('up', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, preexec_fn=cluster.ignore_usr2,
    )  # fmt: skip
    assert sleeper.stdout.readline() == b"up\n"
    sleeper.send_signal(cluster.signal.SIGUSR2)  # Slurm's warning reaches the script too: it must not end it
    time.sleep(0.5)
    assert sleeper.poll() is None
    task.proc = sleeper
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    requeue = task.checkpoint()
    assert sleeper.returncode == 143  # stopped by SIGTERM, the signal on which the scripts save
    assert isinstance(requeue, submitit.helpers.DelayedSubmission) and requeue.function.proc is None
    assert requeue.function.run == run and json.loads(Path(cluster.state_path(task.runs_dir, run)).read_text()) == {
        "state": "requeued",
        "job": "41",
    }
    assert task.__getstate__()["proc"] is None


def test_a_tuning_worker_stopped_for_its_time_limit_stops_tune_py_and_hands_submitit_the_same_worker_to_requeue():
    """A worker's checkpoint hook: tune.py gets SIGTERM (on which it cuts its trial and queues it to run first, as
    test_tune.py checks), and what submitit pickles is a worker with the same command line and no process."""
    import submitit

    worker = cluster.Worker(["run", "--study", "s", "--trials", "4"])
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143));"
         " print('up', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, preexec_fn=cluster.ignore_usr2,
    )  # fmt: skip
    assert sleeper.stdout.readline() == b"up\n"
    worker.proc = sleeper
    requeue = worker.checkpoint()
    assert sleeper.returncode == 143  # stopped by SIGTERM, as on Ctrl-C: its trial cut and queued again
    assert isinstance(requeue, submitit.helpers.DelayedSubmission) and requeue.function.proc is None
    assert requeue.function.argv == worker.argv and worker.__getstate__()["proc"] is None


def test_the_warning_that_interrupts_the_tasks_wait_for_its_script_stops_the_script_and_returns(tmp_path):
    """Slurm's warning comes while the task waits for its script (proc.wait in __call__); submitit's handler calls
    checkpoint in that same thread, which must stop the script and return, not wait forever on the interrupted
    wait's lock."""
    probe = f"""
import signal, subprocess, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import cluster, grid
run = grid.Run(grid.SEEDS_GRID, "hook", "pointmass:PointMass-v0", 1, None, ())
task = cluster.Task(run, {str(tmp_path / "runs")!r}, {str(tmp_path / "records")!r}, commit=False)
script = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); time.sleep(600)"
task.proc = subprocess.Popen([sys.executable, "-c", script], preexec_fn=cluster.ignore_usr2)
def warned(*_):
    task.checkpoint()
    print("stopped", task.proc.returncode)
    sys.exit(0)  # as submitit's handler ends the task once it is requeued
signal.signal(signal.SIGUSR2, warned)
signal.setitimer(signal.ITIMER_REAL, 1.0)
signal.signal(signal.SIGALRM, lambda *a: task.proc.send_signal(signal.SIGUSR2) or signal.raise_signal(signal.SIGUSR2))
task.proc.wait()
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], env=ENV | {"SLURM_JOB_ID": "7"}, capture_output=True, text=True,
        timeout=HANG_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "stopped 143\n", done.stderr


def test_a_requeued_task_whose_run_ended_as_the_warning_came_lands_it_and_starts_no_run(tmp_path, monkeypatch):
    """The run wrote its summary, then the warning stopped the task: the requeued task must not start the run anew."""
    import grid

    run = grid.Run(grid.SEEDS_GRID, "ended", "pointmass:PointMass-v0", 1, None, ())
    finished_run_folder(tmp_path / "runs", run.env_name, run.exp_name, 1, [1.0] * 12)
    started = []
    monkeypatch.setattr(cluster.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    task = cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=False)
    assert task() == "" and not started  # an ad-hoc run lands no record; nothing was started
    assert cluster.read_state(task.runs_dir, run) == {"state": "done", "job": "42", "landed": ""}
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [f"{run.label}__1700000000"]


# --- tune.py --slurm-workers -----------------------------------------------------------------------------------

TUNE_FLAGS = ["--study", "pm", "--trials", "4", "--seeds", "1", "--param", "learning-rate=1e-4:1e-2:log"]
TUNE_FIXED = ["--", *POINTMASS, "--total-timesteps", "4096"]


def tune_py(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "tune.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=HANG_TIMEOUT)


@needs_slurm
def test_a_study_given_two_array_workers_finishes_its_trials_each_worker_taking_some(tmp_path):
    import optuna

    folder = tmp_path / "shared"
    workers = ["--dir", str(folder), "--slurm-workers", "2"]
    done = tune_py("run", *TUNE_FLAGS, *workers, "--wait", *TUNE_FIXED, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted 2 workers of study pm as job array " in done.stdout and f"storage {folder}/pm.log" in done.stdout
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "pm.log")))
    trials = optuna.load_study(study_name="pm", storage=storage).trials
    states = {t.state for t in trials}
    assert states == {optuna.trial.TrialState.COMPLETE} and 4 <= len(trials) <= 5  # up to one more per extra worker
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    logs = [p.read_text() for p in sorted((folder / "slurm").glob("*/*_log.out"))]
    taken = [sum(line.startswith("trial ") and " complete " in line for line in log.splitlines()) for log in logs]
    assert len(taken) == 2 and min(taken) >= 1 and sum(taken) == len(trials), taken  # both workers took trials
    exactly = [str(len(trials)) if f == "4" else f for f in TUNE_FLAGS]  # --trials as many as it has
    again = tune_py("run", *exactly, *workers, *TUNE_FIXED, cwd=tmp_path)
    assert again.returncode == 0 and "no worker to submit" in again.stdout  # the study has its trials


@needs_slurm
def test_tune_workers_slurm_refuses_are_one_line_and_exit_2_with_no_study_made(tmp_path):
    args = ["run", *TUNE_FLAGS, "--dir", str(tmp_path / "d"), "--slurm-workers", "2", "--sbatch", "bogus=1"]
    done = tune_py(*args, *TUNE_FIXED, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: Slurm refused the job array: ")
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "d" / "pm.log").exists()
    assert not list((tmp_path / "d" / "slurm").iterdir())


def test_tune_workers_input_that_cannot_work_is_one_line_and_exit_2_with_nothing_made(tmp_path):
    cases = {
        "no --dir": ([], "--slurm-workers needs --dir"),
        "no workers": (["--dir", str(tmp_path / "d"), "--slurm-workers", "0"], "--slurm-workers must be positive"),
        "SQLite": (["--dir", str(tmp_path / "d"), "--storage", f"sqlite:///{tmp_path}/d/x.db"], "SQLite is one"),
        "a time limit that is none": (["--dir", str(tmp_path / "d"), "--time", "0"], "--time"),
    }
    for name, (extra, says) in cases.items():
        workers = [] if "--slurm-workers" in extra else ["--slurm-workers", "2"]
        done = tune_py("run", *TUNE_FLAGS, *extra, *workers, *TUNE_FIXED, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and says in done.stderr, (name, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, name
        assert not (tmp_path / "d").exists() and not (tmp_path / "tune").exists(), name


def test_each_worker_runs_the_study_the_submitter_was_given(tmp_path, monkeypatch):
    """Every flag of `tune.py run` reaches the workers' command line as given (a flag left out would make the
    workers another study, which tune.py refuses, or run it otherwise); the Slurm options stay with the submitter."""
    import tune

    given = ["run", "--study", "s", "--script", "ppo_atari.py", "--trials", "7", "--seeds", "3", "4", "--objective",
             "eval", "--last-episodes", "5", "--param", "gamma=0.9,0.99", "--param", "learning-rate=1e-4:1e-3",
             "--threads", "3", "--max-failures", "2", "--no-prune", "--dir", str(tmp_path), "--slurm-workers", "2",
             "--cpus-per-task", "4", "--time", "30"]  # fmt: skip
    seen = []
    monkeypatch.setattr(tune, "submit_workers", lambda args, fixed, url, out, settings: seen.append((args, fixed, url)))
    tune.main([*given, "--", "--env-id", "PongNoFrameskip-v4"])
    ((args, fixed, url),) = seen
    argv = tune.worker_argv(args, fixed, url, str(tmp_path))
    seen.clear()
    monkeypatch.setattr(tune, "run", lambda args, fixed: seen.append((args, fixed)))
    tune.main(argv)
    ((worker, worker_fixed),) = seen
    slurm_only = {"partition", "time", "cpus_per_task", "gpus_per_task", "mem", "account", "sbatch", "max_timeouts",
                  "wait", "slurm_workers"}  # fmt: skip
    mine = {k: v for k, v in vars(args).items() if k not in slurm_only}
    assert {k: v for k, v in vars(worker).items() if k not in slurm_only} == mine | {"storage": url}
    assert worker.slurm_workers is None and worker_fixed == fixed == ["--env-id", "PongNoFrameskip-v4"]
    assert url == str(tmp_path / "s.log") and set(mine) | slurm_only == set(vars(args))
    defaults = tune.worker_argv(argparse_copy(args, threads=None), fixed, url, str(tmp_path))
    assert defaults[defaults.index("--threads") + 1] == "2"  # the task's 4 CPUs over 2 seeds
    one_cpu = tune.worker_argv(argparse_copy(args, threads=None, cpus_per_task=1), fixed, url, str(tmp_path))
    assert one_cpu[one_cpu.index("--threads") + 1] == "1"  # never 0 threads: 1 CPU over 2 seeds is 1 each


def argparse_copy(args, **changes):
    import argparse

    return argparse.Namespace(**(vars(args) | changes))


@needs_slurm
def test_status_shows_a_queued_run_with_its_job_and_steps_and_a_cancelled_one_as_cut(tmp_path):
    """status while the task runs: its job and the steps its event file holds; after scancel, cut (resumable)."""
    (tmp_path / "slowpoint.py").write_text(SLOW_POINTMASS.replace("STEP_S", repr(STEP_S)))
    flags = ["--seeds", "1", "--name", "watched", "--", "--env-id", "slowpoint:SlowPointMass-v0", "--num-steps", "256"]
    flags += ["--total-timesteps", str(256 * 400), "--save-every", "1"]  # far longer than the test waits
    env = ENV | {"PYTHONPATH": f"{tmp_path}:{ENV['PYTHONPATH']}"}
    done = grid_py("run", "--slurm", "--dir", str(tmp_path), "--time", "10", *flags, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    job = json.loads(next((tmp_path / "slurm").glob("*.json")).read_text())["job"]
    deadline, line = time.monotonic() + 240, ""  # the task starts within seconds on an idle node
    while time.monotonic() < deadline and (not line.startswith("running") or " 0 steps" in line):
        time.sleep(2)
        line = grid_py("status", "--dir", str(tmp_path), *flags, cwd=tmp_path, env=env).stdout
    assert line.startswith("running") and f"job {job} (running), " in line and " steps" in line, line
    assert int(line.split("(running), ")[1].split(" steps")[0].replace(",", "")) % 256 == 0
    subprocess.run(["scancel", job], check=True, timeout=HANG_TIMEOUT)
    while cluster.queued(job) and time.monotonic() < deadline:
        time.sleep(1)
    line = grid_py("status", "--dir", str(tmp_path), *flags, cwd=tmp_path, env=env).stdout
    assert line.startswith("cut") and f"job {job} left the queue unfinished" in line, line


def stand_in_executor(monkeypatch) -> dict:
    """submitit's SlurmExecutor replaced by one that keeps what it was given (no cluster needed): the tasks, the
    requeue count and the array's parameters; the submission checks pass."""
    import contextlib
    import types

    import submitit

    made: dict = {"tasks": []}

    class Executor:
        def __init__(self, folder: str, max_num_timeout: int):
            made["max_num_timeout"] = max_num_timeout

        def update_parameters(self, **parameters):
            made["parameters"] = parameters

        @contextlib.contextmanager
        def batch(self):
            yield

        def submit(self, task):
            made["tasks"].append(task)
            return types.SimpleNamespace(job_id=f"77_{len(made['tasks']) - 1}")

    monkeypatch.setattr(submitit, "SlurmExecutor", Executor)
    monkeypatch.setattr(cluster, "check", lambda *a: None)
    return made


def test_a_submission_takes_the_runs_not_done_recorded_or_queued_with_every_option_given(tmp_path, monkeypatch):
    """grid.py's --slurm branch down to submitit's executor (a stand-in: no cluster needed): which runs become
    tasks, with --commit, and which options reach the array."""
    import grid

    made = stand_in_executor(monkeypatch)
    monkeypatch.setattr(cluster, "queued", lambda job: "PENDING" if job == "5_0" else None)
    runs = sorted(grid.grid_runs("mujoco"), key=lambda r: r.seed)
    records, runs_dir = tmp_path / "records", tmp_path / "shared" / "runs"
    records.mkdir()
    shutil.copy(grid.record_path(runs[0], grid.RECORDS_DIR), records)  # recorded
    # runs[1]: done, not recorded yet
    finished_run_folder(
        runs_dir, runs[1].env_name, runs[1].exp_name, runs[1].seed, [1.0] * 12
    )  # done, not recorded yet
    cluster.write_state(str(runs_dir), runs[2], state="pending", job="5_0")  # queued by an earlier submission
    cluster.write_state(str(runs_dir), runs[3], state="failed", job="4_1", line="boom")  # failed: submitted again
    options = ["--time", "1:30:00", "--cpus-per-task", "2", "--max-running", "1", "--max-timeouts", "7"]
    options += ["--sbatch", "qos=high", "--partition", "cpu", "--mem", "8G", "--account", "lab", "--gpus-per-task", "1"]
    grid.main(["run", "mujoco", "--slurm", "--dir", str(tmp_path / "shared"), "--records", str(records), "--commit"]
              + options)  # fmt: skip
    assert [t.run for t in made["tasks"]] == runs[3:] and all(t.commit for t in made["tasks"])
    assert made["max_num_timeout"] == 7 and made["parameters"]["additional_parameters"] == {"qos": "high"}
    wanted = {"time": 90, "cpus_per_task": 2, "array_parallelism": 1, "partition": "cpu", "mem": "8G",
              "account": "lab", "gpus_per_task": 1, "signal_delay_s": cluster.SIGNAL_DELAY_S}  # fmt: skip
    assert {k: made["parameters"][k] for k in wanted} == wanted
    for k, r in enumerate(runs[3:]):  # each run's state names its own array task
        assert cluster.read_state(str(runs_dir), r) == {"state": "pending", "job": f"77_{k}"}
    assert cluster.read_state(str(runs_dir), runs[2]) == {"state": "pending", "job": "5_0"}


def test_a_script_that_exits_0_without_its_summary_is_a_failed_run_not_a_done_one(tmp_path, monkeypatch):
    import grid

    run = grid.Run(grid.SEEDS_GRID, "silent", "pointmass:PointMass-v0", 1, None, ())
    monkeypatch.setattr(run.__class__, "command", lambda self, runs_dir: [sys.executable, "-c", "pass"])
    monkeypatch.setenv("SLURM_JOB_ID", "43")
    task = cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=False)
    with pytest.raises(RuntimeError, match="without summary.json"):
        task()
    assert cluster.read_state(task.runs_dir, run)["state"] == "failed"


@pytest.mark.parametrize(
    "script",
    ["import sys; sys.exit(143)", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
    ids=["saved-and-exited-143", "killed-by-SIGTERM"],
)
def test_a_script_stopped_by_sigterm_is_a_stopped_run_to_resume_not_a_failed_one(tmp_path, monkeypatch, script):
    """scancel or a preemption: the script saves on SIGTERM and exits 128 + 15 (or dies of it before its handler is
    up); the task says stopped, and once it left the queue status shows the run cut, to submit again."""
    import grid

    run = grid.Run(grid.SEEDS_GRID, "cancelled", "pointmass:PointMass-v0", 1, None, ())
    monkeypatch.setattr(run.__class__, "command", lambda self, runs_dir: [sys.executable, "-c", script])
    monkeypatch.setenv("SLURM_JOB_ID", "44")
    task = cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=False)
    with pytest.raises(RuntimeError, match="stopped by SIGTERM, its checkpoint saved"):
        task()
    assert cluster.read_state(task.runs_dir, run) == {"state": "stopped", "job": "44"}
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    assert cluster.where(run, task.runs_dir)[0] == "cut"


def test_an_array_gets_240_minutes_unless_told_and_a_one_minute_limit_is_warned_a_quarter_of_it_before(
    tmp_path, monkeypatch
):
    """--time's default is Slurm's 240 minutes (not "4:00", which Slurm reads as four minutes); the warning never
    takes the whole of a short limit (cluster.warning_s)."""
    import grid

    made = stand_in_executor(monkeypatch)
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    flags = ["--seeds", "1", "--", *POINTMASS]
    grid.main(["run", "--slurm", "--dir", str(tmp_path / "a"), *flags])
    assert made["parameters"]["time"] == 240 and made["parameters"]["signal_delay_s"] == cluster.SIGNAL_DELAY_S
    grid.main(["run", "--slurm", "--dir", str(tmp_path / "b"), "--time", "1", *flags])
    assert made["parameters"]["time"] == 1 and made["parameters"]["signal_delay_s"] == 15  # warned 15-45 s in


def test_an_array_is_warned_two_minutes_before_its_limit_requeued_up_to_50_times_one_cpu_a_task_all_at_once(
    tmp_path, monkeypatch
):
    """docs/cluster.md's defaults: Slurm's warning two minutes before the limit (a quarter of a limit under eight
    minutes), --max-timeouts 50, --cpus-per-task 1, and without --max-running every task of the array at once."""
    import grid

    made = stand_in_executor(monkeypatch)
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    grid.main(["run", "--slurm", "--dir", str(tmp_path), "--seeds", "1", "2", "3", "--", *POINTMASS])
    assert len(made["tasks"]) == 3 and made["max_num_timeout"] == 50
    wanted = {"time": 240, "signal_delay_s": 120, "cpus_per_task": 1, "array_parallelism": 3}
    assert {k: made["parameters"][k] for k in wanted} == wanted
    assert [cluster.warning_s(minutes) for minutes in (1, 7, 8, 60)] == [15, 105, 120, 120]


def test_wait_counts_every_submitted_run_that_did_not_finish_and_says_each_ones_end(tmp_path, monkeypatch, capsys):
    import grid

    monkeypatch.setattr(cluster, "wait_jobs", lambda jobs: None)  # every job has left the queue
    runs = grid.seed_runs("ppo_continuous.py", [1, 2, 3, 4, 5], ["--env-id", "X-v0"])
    runs_dir = str(tmp_path / "runs")
    ends = [
        {"state": "done", "landed": "rec.json"},
        {"state": "failed", "line": "ValueError: boom"},
        {"state": "requeued"},
        {"state": "stopped"},
    ]  # fmt: skip; the fifth run was never submitted
    for run, end in zip(runs, ends):
        cluster.write_state(runs_dir, run, job="9_0", **end)
    assert cluster.wait([], runs, runs_dir) == 3
    said = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in said] == ["done", "FAILED", "NOT", "NOT"]
    assert said[1].endswith("ValueError: boom") and "requeued" in said[2] and "stopped" in said[3]


def test_a_failed_runs_line_is_the_last_its_log_says(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("starting\n 10%|#  | 256/2048\r 20%|## | 512/2048\nTraceback (most recent call last):\n"
                   "  File x\nValueError: boom\n\n  \n")  # fmt: skip
    assert cluster.last_line(str(log)) == "ValueError: boom"
    assert cluster.last_line(str(tmp_path / "none.log")) == ""


def test_status_of_a_submitted_run_says_pending_or_running_as_squeue_does_and_cut_once_it_left(tmp_path, monkeypatch):
    import grid

    (run,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X-v0"])
    runs_dir = str(tmp_path / "runs")
    assert cluster.where(run, runs_dir) == ("missing", "not submitted")
    cluster.write_state(runs_dir, run, state="pending", job="9_0")
    for squeue, shown in (("PENDING", "pending"), ("RUNNING", "running"), ("COMPLETING", "pending"), (None, "cut")):
        monkeypatch.setattr(cluster, "queued", lambda job, squeue=squeue: squeue)
        state, found = cluster.where(run, runs_dir)
        assert state == shown and found.startswith("job 9_0"), (squeue, state, found)


def test_status_of_a_slurm_grid_shows_a_recorded_run_as_recorded(tmp_path, capsys):
    """A run recorded (here, or by a task that landed it) whose folder is gone: recorded, not missing."""
    import grid

    (run,) = [r for r in grid.grid_runs("mujoco") if grid.read_record(r) is not None][:1]
    (tmp_path / "slurm").mkdir()  # a folder a --slurm grid was submitted to
    records = tmp_path / "records"
    records.mkdir()
    shutil.copy(grid.record_path(run), records)
    grid.main(["status", "mujoco", "--dir", str(tmp_path), "--records", str(records)])
    shown = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert shown == {"recorded", "missing"}


def test_a_task_gives_its_script_the_tasks_cpus_as_threads_and_shields_it_from_slurms_warning(tmp_path, monkeypatch):
    """OMP_NUM_THREADS is SLURM_CPUS_PER_TASK, whatever the submitter's was; SIGUSR2 (sent to every process of the
    step) is ignored by the script, of a grid's task and of a study's worker alike: the task stops it saved."""
    import grid

    probe = "import os, signal; print('threads', os.environ['OMP_NUM_THREADS'], 'usr2 ignored', " \
            "signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN, file=open({out!r}, 'w'))"  # fmt: skip
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = grid.Run(grid.SEEDS_GRID, "probe", "pointmass:PointMass-v0", 1, None, ())
    out = tmp_path / "task.txt"
    command = [sys.executable, "-c", probe.format(out=str(out))]
    monkeypatch.setattr(run.__class__, "command", lambda self, runs_dir: command)
    with pytest.raises(RuntimeError, match="without summary.json"):
        cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=False)()
    assert out.read_text() == "threads 4 usr2 ignored True\n"
    (tmp_path / "tune.py").write_text(f"import sys\n{probe.format(out=str(tmp_path / 'worker.txt'))}\n")
    monkeypatch.setattr(cluster, "__file__", str(tmp_path / "cluster.py"))  # the worker runs tmp_path/tune.py
    assert cluster.Worker(["run"])().startswith("worker ")
    assert (tmp_path / "worker.txt").read_text().endswith(" usr2 ignored True\n")  # its threads: tune's --threads


def test_a_server_study_made_otherwise_is_refused_before_any_worker_is_queued(tmp_path, monkeypatch, capsys):
    """A PostgreSQL or MySQL storage has no file to look for: the study there is checked against these settings
    always, before the array is submitted (the workers would all fail on it)."""
    import tune

    opened, submitted = [], []

    def made_otherwise(url, name, settings):
        opened.append(url)
        raise tune.BadInput(f"study {name!r} was made with other settings (seeds [1]): give them again, or a new")

    monkeypatch.setattr(cluster, "check", lambda *a: None)
    monkeypatch.setattr(tune, "open_study", made_otherwise)
    monkeypatch.setattr(cluster, "submit_array", lambda *a: submitted.append(a))
    url = "postgresql://tuner@db.cluster/studies"
    with pytest.raises(SystemExit) as end:
        tune.main(["run", *TUNE_FLAGS, "--dir", str(tmp_path), "--storage", url, "--slurm-workers", "2", *TUNE_FIXED])
    assert end.value.code == 2 and opened == [url] and not submitted
    assert capsys.readouterr().err.startswith("error: study 'pm' was made with other settings")


def test_a_study_that_has_its_trials_submits_no_worker_and_one_short_of_them_submits_all(tmp_path, monkeypatch, capsys):
    """--trials counts the study's finished trials: as many as asked for submit nothing, one fewer the whole array."""
    import types

    import tune

    submitted = []

    def submit_array(folder, workers, *args):
        submitted.append(workers)
        return [types.SimpleNamespace(job_id=f"7_{i}") for i in range(len(workers))]

    monkeypatch.setattr(cluster, "check", lambda *a: None)
    monkeypatch.setattr(cluster, "submit_array", submit_array)
    monkeypatch.setattr(tune, "objective_fn", lambda study, space, stop: lambda trial: 1.0)
    monkeypatch.setattr(tune, "show", lambda study, out_dir: None)
    tune.main(["run", *TUNE_FLAGS, "--dir", str(tmp_path), "--storage", str(tmp_path / "pm.log"), *TUNE_FIXED])
    workers = ["--dir", str(tmp_path), "--slurm-workers", "2"]  # the journal file pm.log there, by default
    tune.main(["run", *TUNE_FLAGS, *workers, *TUNE_FIXED])
    assert "study pm: 4 of 4 trials finished; no worker to submit" in capsys.readouterr().out and not submitted
    more = [("5" if f == "4" else f) for f in TUNE_FLAGS]  # --trials 5
    tune.main(["run", *more, *workers, *TUNE_FIXED])
    assert len(submitted) == 1 and len(submitted[0]) == 2
    assert "submitted 2 workers of study pm as job array 7" in capsys.readouterr().out


def test_waiting_for_workers_of_which_one_failed_ends_with_exit_1_and_its_line(tmp_path, monkeypatch, capsys):
    import types

    import tune

    def failed():
        raise RuntimeError("Traceback ...\nRuntimeError: tune.py exit 2: error: cannot open the storage x")

    jobs = [types.SimpleNamespace(job_id="5_0", result=lambda: "worker 5_0: the study has its trials"),
            types.SimpleNamespace(job_id="5_1", result=failed)]  # fmt: skip
    monkeypatch.setattr(cluster, "check", lambda *a: None)
    monkeypatch.setattr(cluster, "submit_array", lambda *a: jobs)
    monkeypatch.setattr(cluster, "wait_jobs", lambda jobs: None)  # both have left the queue
    monkeypatch.setattr(tune, "load_study", lambda name, storage, create: None)  # the study the workers made
    monkeypatch.setattr(tune, "show", lambda study, out_dir: None)
    with pytest.raises(SystemExit) as end:
        tune.main(["run", *TUNE_FLAGS, "--dir", str(tmp_path), "--slurm-workers", "2", "--wait", *TUNE_FIXED])
    said = capsys.readouterr()
    assert end.value.code == 1 and said.err == "error: 1 of 2 workers failed\n"
    assert "FAILED worker 5_1: tune.py exit 2: error: cannot open the storage x" in said.out.splitlines()


def test_a_run_stopped_on_one_node_and_finished_on_another_names_both_cpus_in_its_record(tmp_path, monkeypatch):
    """A requeued task may land on a node of another CPU: the run's hours span both, and its record says so."""
    import grid

    run = grid.Run("table1", "moved", "Hopper-v4", 1, 2048, ())
    runs_dir, records = tmp_path / "runs", str(tmp_path / "records")
    folder = runs_dir / "Hopper-v4__table1-moved__1__1700000000"
    saves = f"import os, sys; os.makedirs({str(folder)!r}); open({str(folder / 'checkpoint.pt')!r}, 'w')"
    saves += "; sys.exit(143)"  # saved, then stopped by SIGTERM
    finishes = f"open({str(folder / 'summary.json')!r}, 'w').write('{{}}')"
    monkeypatch.setenv("SLURM_JOB_ID", "45")
    for cpu, script in (("CPU A", saves), ("CPU B", finishes)):
        monkeypatch.setattr(grid, "cpu_model", lambda cpu=cpu: cpu)
        command = [sys.executable, "-c", script]
        monkeypatch.setattr(run.__class__, "command", lambda self, runs_dir, command=command: command)
        task = cluster.Task(run, str(runs_dir), records, commit=False)
        if cpu == "CPU A":
            with pytest.raises(RuntimeError, match="stopped by SIGTERM"):
                task()
        else:
            assert task().startswith("record ")
    assert grid.read_record(run, records)["cpus"] == ["CPU A", "CPU B"]


# --- audit: what the tests above left unchecked ------------------------------------------------------------------


def test_a_submission_needs_sbatch_squeue_scontrol_and_submitit_on_the_submitters_machine(tmp_path, monkeypatch):
    """check() passes a machine of the cluster (the three Slurm tools on its PATH, submitit importable) and names the
    first one missing: submitit submits with sbatch and requeues with scontrol, the waiting looks with squeue."""
    import argparse

    parser = argparse.ArgumentParser()
    cluster.add_options(parser, "Slurm")
    options = parser.parse_args([])
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("sbatch", "squeue", "scontrol"):
        (tools / tool).write_text("#!/bin/sh\nexit 1\n")
        (tools / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    assert cluster.check(options, str(tmp_path), "--slurm") is None
    for tool in ("sbatch", "squeue", "scontrol"):
        (tools / tool).rename(tools / f"{tool}.gone")
        assert f"--slurm: no {tool} on this machine's PATH" in cluster.check(options, str(tmp_path), "--slurm"), tool
        (tools / f"{tool}.gone").rename(tools / tool)
    find_spec = cluster.importlib.util.find_spec
    monkeypatch.setattr(
        cluster.importlib.util, "find_spec", lambda name, *a: None if name == "submitit" else find_spec(name, *a)
    )
    assert cluster.check(options, str(tmp_path), "--slurm") == "--slurm needs submitit: pip install -r requirements.txt"


def test_status_of_a_queued_run_counts_the_steps_its_event_file_holds_and_a_failed_one_says_its_line(
    tmp_path, monkeypatch
):
    """where(): a queued run's last logged step (0 before its first SPS), a failed run's line whatever squeue says,
    and a state file cut short (a full disk) read as none: missing, not a traceback."""
    import grid
    from torch.utils.tensorboard import SummaryWriter

    (run,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X-v0"])
    runs_dir = tmp_path / "runs"
    folder = runs_dir / f"{run.label}__1700000000"
    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(b"")  # cut: its folder is the one resumed
    monkeypatch.setattr(cluster, "queued", lambda job: "RUNNING")
    Path(cluster.state_path(str(runs_dir), run)).parent.mkdir()
    Path(cluster.state_path(str(runs_dir), run)).write_text('{"state": "pen')
    assert cluster.where(run, str(runs_dir)) == ("missing", "not submitted")
    cluster.write_state(str(runs_dir), run, state="running", job="9_0")
    assert cluster.where(run, str(runs_dir)) == ("running", "job 9_0 (running), 0 steps")  # no SPS logged yet
    writer = SummaryWriter(str(folder))
    for step in (512, 1024, 1536):  # an iteration's SPS at its last step
        writer.add_scalar("charts/SPS", 100.0, step)
    writer.close()
    assert cluster.where(run, str(runs_dir)) == ("running", "job 9_0 (running), 1,536 steps")
    cluster.write_state(str(runs_dir), run, state="failed", job="9_0", line="ValueError: boom")
    assert cluster.where(run, str(runs_dir)) == ("failed", "job 9_0: ValueError: boom")


def test_a_failed_tasks_state_file_beside_the_runs_says_its_scripts_last_line_and_status_shows_it(
    tmp_path, monkeypatch
):
    """{dir}/slurm/{label}.json: failed with the script's last line (its stderr is in the log), or with the exit 0 that
    left no summary.json; `grid.py status` shows that line. The task raises: submitit does not requeue it."""
    import grid

    run = grid.Run(grid.SEEDS_GRID, "boom", "pointmass:PointMass-v0", 1, None, ())
    runs_dir, state_file = str(tmp_path / "runs"), tmp_path / "slurm" / f"{run.label}.json"
    monkeypatch.setattr(cluster, "queued", lambda job: None)  # it has left the queue
    monkeypatch.setenv("SLURM_JOB_ID", "46")
    for script, line in (
        ("import sys; print('starting', flush=True); sys.exit('ValueError: boom')", "ValueError: boom"),  # stderr
        ("pass", "exit 0 without summary.json"),
    ):
        monkeypatch.setattr(
            run.__class__, "command", lambda self, runs_dir, script=script: [sys.executable, "-c", script]
        )
        with pytest.raises(RuntimeError, match=line):
            cluster.Task(run, runs_dir, str(tmp_path / "records"), commit=False)()
        assert json.loads(state_file.read_text()) == {"state": "failed", "job": "46", "line": line}
        assert cluster.where(run, runs_dir) == ("failed", f"job 46: {line}")


def test_a_tasks_script_runs_in_the_grids_folder_one_thread_unless_told_its_run_marked_running_by_its_array_task(
    tmp_path, monkeypatch
):
    """The script runs where grid.py runs it (its runs/ there), on SLURM_CPUS_PER_TASK threads (1 when Slurm says
    none, not the submitter's), while its state says running with the job as squeue names an array task
    (ARRAY_INDEX, not the task's own SLURM_JOB_ID)."""
    import grid

    run = grid.Run(grid.SEEDS_GRID, "seen", "pointmass:PointMass-v0", 1, None, ())
    runs_dir, out = str(tmp_path / "runs"), tmp_path / "seen.json"
    probe = (
        f"import json, os; json.dump({{'cwd': os.path.realpath(os.getcwd()), 'threads': os.environ['OMP_NUM_THREADS'],"
        f" 'state': json.load(open({cluster.state_path(runs_dir, run)!r}))}}, open({str(out)!r}, 'w'))"
    )
    monkeypatch.setattr(run.__class__, "command", lambda self, runs_dir: [sys.executable, "-c", probe])
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the submitter's
    monkeypatch.setenv("SLURM_JOB_ID", "12")  # the array task's own job number
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "9")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    with pytest.raises(RuntimeError, match="without summary.json"):
        cluster.Task(run, runs_dir, str(tmp_path / "records"), commit=False)()
    seen = json.loads(out.read_text())
    assert seen == {"cwd": os.path.realpath(tmp_path), "threads": "1", "state": {"state": "running", "job": "9_2"}}
    assert cluster.read_state(runs_dir, run)["job"] == "9_2"


def test_a_task_given_commit_lands_its_run_with_commit_and_so_does_the_task_it_requeues(tmp_path, monkeypatch):
    """--commit travels with the requeued task; a warning that comes before the script started (no process) still
    leaves the run requeued."""
    import grid

    run = grid.Run("table1", "kept", "Hopper-v4", 1, 2048, ())
    landed = []
    monkeypatch.setattr(grid, "land", lambda run, runs_dir, records, commit: landed.append((records, commit)) or "r")
    monkeypatch.setenv("SLURM_JOB_ID", "47")
    task = cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=True)
    requeued = task.checkpoint().function
    assert cluster.read_state(task.runs_dir, run) == {"state": "requeued", "job": "47"}
    finished_run_folder(tmp_path / "runs", run.env_name, run.exp_name, 1, [1.0] * 12)
    assert requeued() == "r" and landed == [(str(tmp_path / "records"), True)]


def test_a_task_names_its_node_in_the_run_folder_while_its_script_runs_not_only_once_it_ended(tmp_path, monkeypatch):
    """Slurm's warning ends a task inside its wait (submitit requeues it from its signal handler): the node must be
    named as soon as the run folder is there, or the CPU of a node that ran part of the run is never named."""
    import grid

    run = grid.Run("table1", "noted", "Hopper-v4", 1, 2048, ())
    folder = tmp_path / "runs" / "Hopper-v4__table1-noted__1__1700000000"
    machines = folder / grid.MACHINES_FILE
    script = (  # saves, then waits for the node's name before it stops (saved: exit 143)
        f"import os, sys, time; os.makedirs({str(folder)!r}); open({str(folder / 'checkpoint.pt')!r}, 'w').close()\n"
        f"deadline = time.monotonic() + {HANG_TIMEOUT}\n"
        f"while not os.path.exists({str(machines)!r}) and time.monotonic() < deadline:\n    time.sleep(0.05)\n"
        f"sys.exit(143 if os.path.exists({str(machines)!r}) else 3)"
    )
    monkeypatch.setattr(run.__class__, "command", lambda self, runs_dir: [sys.executable, "-c", script])
    monkeypatch.setattr(grid, "cpu_model", lambda: "CPU A")
    monkeypatch.setattr(grid, "POLL_S", 0.05)
    monkeypatch.setenv("SLURM_JOB_ID", "48")
    with pytest.raises(RuntimeError, match="stopped by SIGTERM"):
        cluster.Task(run, str(tmp_path / "runs"), str(tmp_path / "records"), commit=False)()
    assert grid.noted_machines(str(folder)) == ["CPU A"]


def test_a_warned_script_that_has_not_stopped_stop_wait_s_after_its_sigterm_is_killed(tmp_path):
    """A script stuck past STOP_WAIT_S is killed (its last --save-every checkpoint stands) and reaped: the warned
    task goes on to be requeued, never waits on it forever."""
    probe = f"""
import subprocess, sys
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import cluster
cluster.STOP_WAIT_S = 0.5
script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
assert proc.stdout.readline() == b"up\\n"
cluster.stop(proc)
print("stopped", proc.returncode)
"""
    done = subprocess.run([sys.executable, "-c", probe], env=ENV, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert done.returncode == 0 and done.stdout == f"stopped {-cluster.signal.SIGKILL}\n", done.stderr


def test_a_grid_whose_runs_are_all_done_submits_no_array(tmp_path, monkeypatch, capsys):
    import grid

    made = stand_in_executor(monkeypatch)
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    flags = ["--seeds", "1", "2", "--", "--env-id", "X-v0"]
    for r in grid.seed_runs("ppo_continuous.py", [1, 2], ["--env-id", "X-v0"]):
        finished_run_folder(tmp_path / "runs", r.env_name, r.exp_name, r.seed, [1.0] * 12)
    grid.main(["run", "--slurm", "--dir", str(tmp_path), *flags])
    assert made["tasks"] == [] and "parameters" not in made
    assert capsys.readouterr().out == "2 runs: none to submit\n"


def test_an_array_sbatch_refuses_leaves_no_pickle_or_state_of_its_own_and_says_sbatchs_first_line(
    tmp_path, monkeypatch, capsys
):
    """submitit pickles the tasks into {dir}/slurm before sbatch: a refusal removes them, not what an earlier
    array left there (a run's state file), and says sbatch's first line."""
    import contextlib

    import grid
    import submitit
    from submitit.core.utils import FailedJobError

    class Refusing:
        def __init__(self, folder: str, max_num_timeout: int):
            self.folder = os.path.dirname(folder)  # {dir}/slurm/%j

        def update_parameters(self, **parameters):
            pass

        @contextlib.contextmanager
        def batch(self):
            yield
            raise FailedJobError("sbatch: error: invalid partition specified: nosuch\nsbatch: error: submission failed")

        def submit(self, task):
            os.makedirs(self.folder, exist_ok=True)
            Path(self.folder, f"{id(task)}_submitted.pkl").write_bytes(b"")

    monkeypatch.setattr(submitit, "SlurmExecutor", Refusing)
    monkeypatch.setattr(cluster, "check", lambda *a: None)
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    runs = grid.seed_runs("ppo_continuous.py", [1, 2], ["--env-id", "X-v0"])
    runs_dir = str(tmp_path / "runs")
    cluster.write_state(runs_dir, runs[1], state="failed", job="4_1", line="boom")  # an earlier array's
    with pytest.raises(SystemExit) as end:
        grid.main(["run", "--slurm", "--dir", str(tmp_path), "--seeds", "1", "2", "--", "--env-id", "X-v0"])
    assert end.value.code == 2
    said = "error: Slurm refused the job array: sbatch: error: invalid partition specified: nosuch\n"
    assert capsys.readouterr().err == said
    assert os.listdir(tmp_path / "slurm") == [f"{runs[1].label}.json"]
    assert cluster.read_state(runs_dir, runs[1]) == {"state": "failed", "job": "4_1", "line": "boom"}


def test_an_sbatch_option_reaches_the_array_with_its_whole_value(tmp_path, monkeypatch):
    import grid

    made = stand_in_executor(monkeypatch)
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    sbatch = ["--sbatch", "comment=lr=3e-4", "--sbatch", "qos=high"]
    grid.main(["run", "--slurm", "--dir", str(tmp_path), *sbatch, "--seeds", "1", "--", *POINTMASS])
    assert made["parameters"]["additional_parameters"] == {"comment": "lr=3e-4", "qos": "high"}


def test_waiting_lasts_until_every_job_of_the_array_has_left_the_queue(monkeypatch):

    import grid

    left = {"9_0": ["RUNNING", "RUNNING", None], "9_1": ["PENDING", "RUNNING", None]}  # what squeue says, look by look
    monkeypatch.setattr(grid, "POLL_S", 0)
    monkeypatch.setattr(cluster, "queued", lambda job: left[job].pop(0))
    cluster.wait_jobs(left)
    assert left == {"9_0": [], "9_1": []}


def test_queued_is_squeues_state_of_a_job_in_the_queue_and_none_once_it_left(tmp_path, monkeypatch):
    """squeue as Slurm's answers (a stand-in on the PATH): a header unless -h, a job's state as -o asks (%T: PENDING,
    RUNNING; %t: PD, R), and for a job that has left the queue no line and exit 1."""
    fake = tmp_path / "squeue"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "args = sys.argv[1:]\n"
        "jobs = {'5_0': ('RUNNING', 'R'), '5_1': ('PENDING', 'PD')}\n"
        "job, form = args[args.index('-j') + 1], args[args.index('-o') + 1]\n"
        "if job not in jobs:\n"
        "    sys.exit('slurm_load_jobs error: Invalid job id specified')\n"
        "if '-h' not in args:\n"
        "    print('STATE' if form == '%T' else 'ST')\n"
        "print(jobs[job][0] if form == '%T' else jobs[job][1])\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert [cluster.queued(job) for job in ("5_0", "5_1", "4_0")] == ["RUNNING", "PENDING", None]


def test_an_sbatch_option_without_a_value_reaches_sbatch_as_a_bare_flag(tmp_path, monkeypatch):
    """--sbatch exclusive (sbatch's --exclusive, --requeue, ...): submitit writes a bare `#SBATCH --exclusive` for
    True only; any other value is written as --exclusive=VALUE, which sbatch refuses."""
    import grid
    from submitit.slurm.slurm import _make_sbatch_string

    made = stand_in_executor(monkeypatch)
    monkeypatch.setattr(cluster, "queued", lambda job: None)
    sbatch = ["--sbatch", "exclusive", "--sbatch", "qos=high"]
    grid.main(["run", "--slurm", "--dir", str(tmp_path), *sbatch, "--seeds", "1", "--", *POINTMASS])
    given = made["parameters"]["additional_parameters"]
    script = _make_sbatch_string(command="true", folder=str(tmp_path), additional_parameters=given).splitlines()
    assert "#SBATCH --exclusive" in script and "#SBATCH --qos=high" in script


def test_waiting_also_waits_for_the_runs_an_earlier_submission_queued(tmp_path, monkeypatch, capsys):
    """`run --slurm --wait` again while an earlier array's task still runs one of the grid's runs: that run was not
    submitted again (it is queued), and the wait lasts until it has left the queue too, then says its end."""
    import grid

    (run,) = grid.seed_runs("ppo_continuous.py", [1], ["--env-id", "X-v0"])
    runs_dir = str(tmp_path / "runs")
    cluster.write_state(runs_dir, run, state="running", job="5_0")
    looks = iter(["RUNNING", "RUNNING", None])  # what squeue says of job 5_0, look by look

    def queued(job):
        said = next(looks, None) if job == "5_0" else None
        if said is None and job == "5_0":  # the task landed its run, then left the queue
            cluster.write_state(runs_dir, run, state="done", job=job, landed="")
        return said

    monkeypatch.setattr(cluster, "queued", queued)
    monkeypatch.setattr(grid, "POLL_S", 0)
    assert cluster.wait([], [run], runs_dir) == 0
    assert capsys.readouterr().out == f"done  {run.label}: \n"
