"""grid.py's runs on a Slurm cluster (`grid.py run ... --slurm`): the runs not yet done, one job array through
submitit, each run one array task that survives its time limit (docs/cluster.md).

    python benchmarks/grid.py run table1-1m --slurm --dir /shared/ppo-grids --partition cpu --time 240 --commit
    python benchmarks/grid.py run atari-10m --slurm --dir /shared/ppo-grids --gpus-per-task 1 --cpus-per-task 8
    python benchmarks/grid.py status table1-1m --dir /shared/ppo-grids      # done, running, pending, failed, ...

A task runs its run's script as grid.py runs it on one machine (the same command, so the same numbers), with
OMP_NUM_THREADS = its CPUs. Slurm warns a task before its time limit (warning_s; submitit's USR2); the task
then stops the script with SIGTERM, which makes it save its checkpoint at the end of its iteration, and submitit
requeues the task: the requeued task resumes the run from the checkpoint (`--resume`) and ends at the run's budget,
its TensorBoard history whole. A preempted task is requeued by Slurm, and its script saves on Slurm's SIGTERM. A
task whose script fails ends failed with the script's last line: it is not requeued.

Where the grid stands lives beside the runs, in {dir}/slurm/: submitit's folder per task ({array}_{index}: its
pickles and logs) and one state file per run ({label}.json: the job, and done, running or failed with its line),
written by the task itself, so `grid.py status` and tables.py need no process of the submitter's: submit, log
out, come back. Each finished run of a named grid writes its record (and with --commit commits it) from its task.
"""

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import grid

STATE_DIR = "slurm"  # {dir}/slurm/: submitit's folders and each run's state file
SIGNAL_DELAY_S = 120  # Slurm's warning before the time limit: time for the script to end its iteration and save
STOP_WAIT_S = 90  # how long a warned task waits for its script to save and exit before killing it
POLL_S = 0.2  # how often it looks
MAX_TIMEOUTS = 50  # requeues after a time limit a run may take (submitit's max_num_timeout); failures take none
JOB_NAME = "ppo-grid"
STOPPED = 128 + signal.SIGTERM  # the scripts' exit after saving on SIGTERM


def state_path(runs_dir: str, run: "grid.Run") -> str:
    return os.path.join(os.path.dirname(runs_dir), STATE_DIR, f"{run.label}.json")


def read_state(runs_dir: str, run: "grid.Run") -> dict | None:
    try:
        with open(state_path(runs_dir, run)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_state(runs_dir: str, run: "grid.Run", **state) -> None:
    """The run's state file, replaced whole (a reader on another node never sees half of one)."""
    path = state_path(runs_dir, run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def last_line(path: str) -> str:
    """The last line of a log that says something (a failed script's one line), "" when there is none."""
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f.read().replace("\r", "\n").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def ignore_usr2() -> None:
    """In the script's process: Slurm's warning signal goes to every process of the step, and USR2 would end the
    script unsaved; the task, warned too, stops it with SIGTERM instead."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def this_job() -> str:
    """The task's job id as squeue and submitit name it: ARRAY_INDEX for an array task."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID", "?"))
    return job + (f"_{os.environ['SLURM_ARRAY_TASK_ID']}" if "SLURM_ARRAY_TASK_ID" in os.environ else "")


class Task:
    """One run of the grid as an array task: called to run it to its end; checkpointed (by submitit, on Slurm's
    warning) to stop it saved and be requeued."""

    def __init__(self, run: "grid.Run", runs_dir: str, records_dir: str, commit: bool):
        self.run, self.runs_dir, self.records_dir, self.commit = run, runs_dir, records_dir, commit
        self.proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return vars(self) | {"proc": None}  # a process does not travel with the pickle

    def __call__(self) -> str:
        run, runs_dir = self.run, self.runs_dir
        job = this_job()
        if run.state(runs_dir)[0] == "done":  # it ended as the warning came: landed, not run again
            return self.land(job)
        write_state(runs_dir, run, state="running", job=job)
        logs = os.path.join(os.path.dirname(runs_dir), "logs")
        os.makedirs(logs, exist_ok=True)
        threads = os.environ.get("SLURM_CPUS_PER_TASK", "1")
        log_path = os.path.join(logs, f"{run.label}.log")
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen(
                run.command(runs_dir), cwd=os.path.dirname(runs_dir), stdout=log, stderr=log,
                env=os.environ | {"OMP_NUM_THREADS": threads}, preexec_fn=ignore_usr2,
            )  # fmt: skip
        noted = False  # whether the run folder names this node's CPU (a fresh run's folder comes with its checkpoint)
        while True:
            code = self.proc.poll()  # before the note: a run that saved its checkpoint and then ended is noted too
            noted = noted or grid.note_machine(run, runs_dir)
            if code is not None:
                break
            time.sleep(grid.POLL_S)
        if code == 0 and run.state(runs_dir)[0] == "done":
            return self.land(job)
        if code == 0:  # exit 0 without summary.json: not a run that finished
            write_state(runs_dir, run, state="failed", job=job, line="exit 0 without summary.json")
            raise RuntimeError(f"{run.label}: exit 0 without summary.json")
        if code in (STOPPED, -signal.SIGTERM):  # scancel, a preemption: saved, resumable, not failed
            write_state(runs_dir, run, state="stopped", job=job)
            raise RuntimeError(f"{run.label}: stopped by SIGTERM, its checkpoint saved")
        why = last_line(log_path) or f"exit {code}"
        write_state(runs_dir, run, state="failed", job=job, line=why)
        raise RuntimeError(f"{run.label}: {why}")  # the task fails: submitit does not requeue it

    def land(self, job: str) -> str:
        landed = grid.land(self.run, self.runs_dir, self.records_dir, self.commit)
        write_state(self.runs_dir, self.run, state="done", job=job, landed=landed)
        return landed

    def checkpoint(self) -> object:
        """Slurm's warning before the time limit (or a preemption): the script stops saved, the task is requeued
        and resumes it."""
        import submitit

        if self.proc is not None and self.proc.returncode is None:
            stop(self.proc)
        write_state(self.runs_dir, self.run, state="requeued", job=this_job())
        return submitit.helpers.DelayedSubmission(Task(self.run, self.runs_dir, self.records_dir, self.commit))


class Worker:
    """One worker of a tuning study as an array task: `tune.py run` with the study's flags and a storage every node
    reaches. On Slurm's warning it stops as on Ctrl-C (its trial cut, queued to run again first) and the task is
    requeued: the worker joins the study again. A worker that fails (exit 2: its line) is not requeued."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return vars(self) | {"proc": None}

    def __call__(self) -> str:
        tune = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune.py")
        self.proc = subprocess.Popen([sys.executable, tune, *self.argv], preexec_fn=ignore_usr2)  # its output: the log
        code = self.proc.wait()
        if code == 0:
            return f"worker {this_job()}: the study has its trials"
        import submitit

        why = last_line(str(submitit.JobEnvironment().paths.stderr)) or f"exit {code}"
        raise RuntimeError(f"tune.py exit {code}: {why}")  # the task fails: submitit does not requeue it

    def checkpoint(self) -> object:
        import submitit

        if self.proc is not None and self.proc.returncode is None:
            stop(self.proc)
        return submitit.helpers.DelayedSubmission(Worker(self.argv))


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the script, which saves at the end of its iteration and exits; killed after STOP_WAIT_S (its last
    --save-every checkpoint stands). Reaped with os.waitpid, not proc.wait: this runs in submitit's signal handler,
    which interrupts the task's own proc.wait(), and that holds the lock proc.wait would wait for forever."""
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    try:
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        while pid == 0 and time.monotonic() < deadline:
            time.sleep(POLL_S)
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid == 0:
            proc.kill()
            pid, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    except ChildProcessError:  # reaped already: the interrupted wait had returned
        pass


def warning_s(limit_min: int) -> int:
    """How long before its time limit Slurm warns a task. Slurm looks every 30 s and warns at the first look that
    finds the limit within the warning and 30 s more: a task trains at least limit - warning - 30 s, so a short limit
    gets a quarter of it as warning (one minute: warned 15 to 45 s in), never the whole."""
    return min(SIGNAL_DELAY_S, limit_min * 60 // 4)


def minutes(text: str) -> int:
    """A Slurm time limit in whole minutes (submitit's unit), in Slurm's spellings: MINUTES, MINUTES:SECONDS,
    HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS."""
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # DAYS-HOURS[:MINUTES[:SECONDS]]
        fields = parts + [0] * (3 - len(parts))
    elif len(parts) < 3:  # MINUTES[:SECONDS]
        fields = [0, *parts, 0][:3]
    else:  # HOURS:MINUTES:SECONDS
        fields = parts
    if len(fields) != 3:
        raise ValueError(f"not a Slurm time: {text}")
    hours, mins, secs = fields
    return int(days or 0) * 1440 + hours * 60 + mins + (secs > 0)


def queued(job: str) -> str | None:
    """Slurm's state of a job that is still queued or running (PENDING, RUNNING, ...), None when it has left."""
    done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    states = done.stdout.split()
    return states[0] if done.returncode == 0 and states else None


def steps_so_far(folder: str | None) -> int:
    """The last step a run logged (its SPS, at each iteration's last step), 0 before any."""
    if not folder:
        return 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(folder, size_guidance={"scalars": 1}).Reload()
    return events.Scalars("charts/SPS")[-1].step if "charts/SPS" in events.Tags()["scalars"] else 0


def where(run: "grid.Run", runs_dir: str) -> tuple[str, str]:
    """Where a run that is not done stands: ('running' | 'pending', 'job JOB, N steps'), ('failed', 'job JOB: its
    line'), ('cut', ...: it left the queue unfinished), or ('missing', 'not submitted')."""
    state = read_state(runs_dir, run)
    if state is None:
        return "missing", "not submitted"
    if state["state"] == "failed":
        return "failed", f"job {state['job']}: {state['line']}"
    slurm = queued(state["job"])
    steps = f"{steps_so_far(run.state(runs_dir)[1]):,} steps"
    if slurm:
        return ("running" if slurm == "RUNNING" else "pending"), f"job {state['job']} ({slurm.lower()}), {steps}"
    return "cut", f"job {state['job']} left the queue unfinished, {steps}: submit again to resume it"


class Refused(Exception):
    """sbatch refused the array (an unknown option, partition or account): its first line."""


def submit_array(folder: str, tasks: list, options, name: str) -> list:
    """Submit the tasks (callables, pickled) as one job array through submitit, with the Slurm options of the
    command line; their jobs. A refusal leaves nothing behind and raises Refused."""
    import submitit
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    executor = submitit.SlurmExecutor(os.path.join(folder, "%j"), max_num_timeout=options.max_timeouts)
    limit = minutes(options.time)
    parameters = {
        "job_name": name, "time": limit, "cpus_per_task": options.cpus_per_task, "partition": options.partition,
        "gpus_per_task": options.gpus_per_task, "mem": options.mem, "account": options.account,
        "array_parallelism": getattr(options, "max_running", None) or len(tasks),
        "signal_delay_s": warning_s(limit),
        "additional_parameters": dict(options.sbatch),
        # the task imports grid.py, tune.py and this module: they are on its path wherever submitit starts it
        "setup": [f"export PYTHONPATH={os.path.dirname(os.path.abspath(__file__))}${{PYTHONPATH:+:$PYTHONPATH}}"],
    }  # fmt: skip
    executor.update_parameters(**{k: v for k, v in parameters.items() if v is not None})
    before = set(os.listdir(folder)) if os.path.isdir(folder) else set()
    try:
        with contextlib.redirect_stderr(io.StringIO()), executor.batch():  # submitit echoes sbatch: said once
            jobs = [executor.submit(task) for task in tasks]
    except (FailedJobError, FailedSubmissionError) as e:
        for leftover in set(os.listdir(folder)) - before:  # submitit's pickles and script of tasks never queued
            if os.path.isfile(os.path.join(folder, leftover)):
                os.remove(os.path.join(folder, leftover))
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise Refused(lines[0] if lines else type(e).__name__) from None
    return jobs


def submit(runs: list["grid.Run"], runs_dir: str, records_dir: str, commit: bool, options) -> list:
    """Submit the runs that are neither done, recorded nor already queued, as one job array; their jobs."""
    todo = []
    for r in runs:
        if r.state(runs_dir)[0] == "done" or grid.read_record(r, records_dir) is not None:
            continue
        state = read_state(runs_dir, r)
        if state and state.get("job") and queued(state["job"]):
            print(f"queued {r.label}: job {state['job']}", flush=True)
            continue
        todo.append(r)
    if not todo:
        print(f"{len(runs)} runs: none to submit", flush=True)
        return []
    base = os.path.dirname(runs_dir)
    tasks = [Task(r, runs_dir, records_dir, commit) for r in todo]
    jobs = submit_array(os.path.join(base, STATE_DIR), tasks, options, JOB_NAME)
    for r, job in zip(todo, jobs):
        write_state(runs_dir, r, state="pending", job=job.job_id)
    print(f"submitted {len(jobs)} runs as job array {jobs[0].job_id.split('_')[0]} ({base})", flush=True)
    return jobs


def wait_jobs(job_ids: list[str]) -> None:
    """Until every job has left the queue (squeue: submitit's own wait needs Slurm's accounting)."""
    for job_id in job_ids:
        while queued(job_id):
            time.sleep(grid.POLL_S)


def wait(jobs: list, runs: list["grid.Run"], runs_dir: str) -> int:
    """Wait for every job to leave the queue; print each submitted run's end; the number that did not finish
    (failed, or stopped or out of requeues: those resume when submitted again). The runs an earlier submission
    queued (not submitted again) are waited for too."""
    earlier = [state["job"] for r in runs if (state := read_state(runs_dir, r) or {}).get("job")]
    wait_jobs([job.job_id for job in jobs] + earlier)
    unfinished = 0
    for r in runs:
        state = read_state(runs_dir, r) or {}
        if state.get("state") == "done":
            print(f"done  {r.label}: {state.get('landed')}", flush=True)
        elif state.get("state") == "failed":
            unfinished += 1
            print(f"FAILED {r.label}: {state.get('line')}", flush=True)
        elif state:
            unfinished += 1
            print(f"NOT DONE {r.label}: {state.get('state')} (submit again to resume it)", flush=True)
    return unfinished


def add_options(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The Slurm options grid.py and tune.py share, as a group of parser's."""
    slurm = parser.add_argument_group(title)
    slurm.add_argument("--partition", help="sbatch --partition (default: the cluster's)")
    slurm.add_argument("--time", default="240", help="each task's time limit, MINUTES or D-HH:MM:SS (default 240)")
    slurm.add_argument("--cpus-per-task", type=int, default=1, help="CPUs per task: its OMP_NUM_THREADS (default 1)")
    slurm.add_argument("--gpus-per-task", type=int, help="GPUs per task (default none)")
    slurm.add_argument("--mem", help="sbatch --mem, e.g. 8G (default: the cluster's)")
    slurm.add_argument("--account", help="sbatch --account")
    slurm.add_argument(
        "--sbatch", action="append", default=[], type=lambda s: tuple(s.split("=", 1)) if "=" in s else (s, True),
        metavar="OPTION=VALUE", help="any other sbatch option, no dashes: --sbatch qos=high, --sbatch exclusive",
    )  # fmt: skip
    slurm.add_argument("--max-timeouts", type=int, default=MAX_TIMEOUTS, help=f"requeues after a time limit per task "
                       f"({MAX_TIMEOUTS})")  # fmt: skip
    slurm.add_argument("--wait", action="store_true", help="stay until every task has left the queue")
    return slurm


def check(options, given_dir: str | None, flag: str) -> str | None:
    """What makes a Slurm submission impossible, said before anything is submitted or made; None when none."""
    if given_dir is None:
        return f"{flag} needs --dir, a folder every node of the cluster reaches (the default is this checkout's)"
    try:
        if minutes(options.time) < 1:
            return f"--time {options.time}: at least one minute"
    except ValueError:
        return f"--time {options.time}: give MINUTES or [DAYS-]HOURS:MINUTES:SECONDS"
    for name, least in (("cpus_per_task", 1), ("max_running", 1), ("max_timeouts", 0)):
        value = getattr(options, name, None)
        if value is not None and value < least:
            return f"--{name.replace('_', '-')} must be at least {least}, got {value}"
    for tool in ("sbatch", "squeue", "scontrol"):
        if shutil.which(tool) is None:
            return f"{flag}: no {tool} on this machine's PATH (submit from a machine of the cluster)"
    if importlib.util.find_spec("submitit") is None:
        return f"{flag} needs submitit: pip install -r requirements.txt"
    return None


if __name__ == "__main__":
    sys.exit("run grid.py with --slurm (python benchmarks/grid.py run GRID --slurm --dir SHARED)")
