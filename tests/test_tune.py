"""benchmarks/tune.py: the search space as the scripts' flags, the objective and the pruner's values from the runs'
own logs, a study that stops and resumes with its trials kept, two workers on one storage, and bad input."""

import dataclasses
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import optuna
import pytest
import sqlalchemy
import tune
import tyro
from conftest import HANG_TIMEOUT, ROOT, scalars, wait_until

import ppo_continuous as C

POINT_MASS = ["--env-id", "examples.pointmass:PointMass-v0", "--num-steps", "256"]  # 100-step episodes
TINY = [*POINT_MASS, "--total-timesteps", "2048"]  # 8 iterations, 20 episodes: seconds a trial
LONG_STEPS = 8192  # 32 iterations: long enough to stop a trial midway
LONG = [*POINT_MASS, "--total-timesteps", str(LONG_STEPS)]
LR = "--param=learning-rate=1e-4:1e-2:log"


def tuner(folder: Path, *args: str, storage: str | None = None) -> list[str]:
    where = ["--storage", storage] if storage else []
    return [sys.executable, str(ROOT / "benchmarks" / "tune.py"), *args[:1], "--dir", str(folder), *where, *args[1:]]


def run_tuner(folder: Path, *args: str, storage: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        tuner(folder, *args, storage=storage), cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )


def in_python(folder: Path, *args: str, before: str, storage: str | None = None) -> list[str]:
    """tuner's command as `python -c`, run from ROOT: tune.py imported, then the code in before (constants
    lowered, a wait), then its main."""
    code = f"import os, sys, time\nsys.path.insert(0, 'benchmarks')\nimport tune\n{before}\ntune.main(sys.argv[1:])"
    return [sys.executable, "-c", code, *tuner(folder, *args, storage=storage)[2:]]


def at_gate(gate: Path) -> str:
    """Code for in_python's before: read the script (its torch import takes seconds, longer in some processes than
    others), say it has come (the file gate.PID), then wait for the file gate."""
    come = f"tune.script_fields('ppo_continuous.py')\nopen(f'{gate}.{{os.getpid()}}', 'w').close()"
    return f"{come}\nwhile not os.path.exists('{gate}'):\n    time.sleep(0.001)"


def released_together(commands: list[list[str]], gate: Path) -> list[subprocess.Popen]:
    """A process of each in_python command, all waiting at_gate(gate), let go in one instant once all have come."""
    procs = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    come = lambda: len(list(gate.parent.glob(f"{gate.name}.*"))) == len(procs)
    wait_until(lambda: come() or any(p.poll() is not None for p in procs), "every process at the gate")
    gate.touch()
    return procs


def load(folder: Path, name: str, storage: str | None = None) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage or f"sqlite:///{folder / (name + '.db')}")


def processes_of(text: str) -> list[int]:
    """The pids of the processes whose command line holds text."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def test_param_specs_become_the_flags_own_type_and_bad_ones_say_why():
    fields = tune.script_fields("ppo_continuous.py")
    assert fields["learning-rate"] is float and fields["num-steps"] is int and fields["clip-vloss"] is bool
    assert fields["target-kl"] is float  # float | None
    lr = tune.parse_param("learning-rate=1e-5:1e-2:log", fields, "x")
    assert (lr.kind, lr.low, lr.high, lr.log, lr.choices) == (float, 1e-5, 1e-2, True, ())
    steps = tune.parse_param("--num-steps=128:2048", fields, "x")
    assert (steps.kind, steps.low, steps.high, steps.log) == (int, 128, 2048, False)
    assert tune.parse_param("gamma=0.9,0.99", fields, "x").choices == (0.9, 0.99)
    assert tune.parse_param("clip-vloss=true,false", fields, "x").choices == (True, False)
    bad = {
        "nope=1:2": "has no flag --nope",
        "learning-rate=1e-2:1e-5": "the range is empty",
        "learning-rate=0.1:0.1": "the range is empty",
        "learning-rate=0:1:log": "above 0",
        "gamma=0.99": "two choices",
        "seed=1,2": "tune.py's to set",
        "learning-rate": "NAME=LOW:HIGH",
        "clip-vloss=1:2": "number flag",
        "num-steps=a,b": "invalid literal",
    }
    for spec, why in bad.items():
        with pytest.raises(tune.BadInput, match=why):
            tune.parse_param(spec, fields, "x")


def test_param_specs_in_the_forms_users_write_and_a_single_value_twice_is_no_choice():
    """1e2 for an int range (a whole number in floating-point notation), True,False as Python spells switches."""
    fields = tune.script_fields("ppo_continuous.py")
    steps = tune.parse_param("num-steps=1e2:2e3:log", fields, "x")
    assert (steps.kind, steps.low, steps.high, steps.log) == (int, 100, 2000, True) and type(steps.low) is int
    assert tune.parse_param("clip-vloss=True,FALSE", fields, "x").choices == (True, False)
    for spec, why in {"gamma=0.99,0.99": "two choices", "learning-rate=": "NAME=LOW:HIGH"}.items():
        with pytest.raises(tune.BadInput, match=why):
            tune.parse_param(spec, fields, "x")


def test_the_default_space_leaves_the_fixed_flags_out_and_the_named_space_must_not_clash():
    space = tune.search_space(
        "ppo_continuous.py", [], ["--env-id", "Swimmer-v4", "--gamma=0.999", "--clip-coef", "0.3"]
    )
    names = [p.flag for p in space]
    assert "gamma" not in names and "clip-coef" not in names and "learning-rate" in names and len(names) == 8
    atari_fields = tune.script_fields("ppo_atari.py")  # its own ranges (learning rate to 1e-3), not only its names
    assert tune.search_space("ppo_atari.py", [], []) == [
        tune.parse_param(t, atari_fields, "ppo_atari.py") for t in tune.SPACES["ppo_atari.py"]
    ]
    assert tune.load_study("s", optuna.storages.InMemoryStorage(), {}).direction == optuna.study.StudyDirection.MAXIMIZE
    with pytest.raises(tune.BadInput, match="both searched"):
        tune.search_space("ppo_continuous.py", ["gamma=0.9,0.99"], ["--gamma", "0.99"])
    with pytest.raises(tune.BadInput, match="no flag --nope"):
        tune.search_space("ppo_continuous.py", [], ["--nope", "1"])
    with pytest.raises(tune.BadInput, match="tune.py's to set"):
        tune.search_space("ppo_continuous.py", [], ["--seed", "3"])
    assert tune.search_space("ppo_continuous.py", [], ["--no-anneal-lr"])  # a switch's --no- form is a known flag


def test_fixed_flags_are_known_in_every_spelling_a_command_line_has():
    """--name=VALUE and a switch's --no-NAME fix a flag as --name VALUE does: searched too is a clash, and tune.py's
    own flags are refused however they are written."""
    for fixed, searched in ((["--gamma=0.99"], "gamma=0.9,0.99"), (["--no-clip-vloss"], "clip-vloss=true,false")):
        with pytest.raises(tune.BadInput, match="both searched"):
            tune.search_space("ppo_continuous.py", [searched], fixed)
    for fixed in (["--seed=3"], ["--exp-name=x"]):
        with pytest.raises(tune.BadInput, match="tune.py's to set"):
            tune.search_space("ppo_continuous.py", [], fixed)


def test_the_default_spaces_are_the_ones_the_tuning_page_lists():
    """docs/tuning.md's table of the default spaces (RL Zoo's sampler cut to these flags) is tune.SPACES, row by row."""
    page = (ROOT / "docs" / "tuning.md").read_text()
    rows = page.split("| flag | `ppo_continuous.py` | `ppo_atari.py` |\n")[1].split("\n\n")[0].splitlines()[1:]
    for column, script in ((1, "ppo_continuous.py"), (2, "ppo_atari.py")):
        documented = []
        for row in rows:
            cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
            ranged = re.fullmatch(r"(\S+) to (\S+?)(, log)?", cells[column])  # 1e-5 to 1e-2, log
            spec = f"{ranged[1]}:{ranged[2]}{':log' if ranged[3] else ''}" if ranged else cells[column].replace(" ", "")
            documented.append(f"{cells[0].strip('`').removeprefix('--')}={spec}")
        fields = tune.script_fields(script)
        parsed = [tune.parse_param(text, fields, script) for text in documented]
        assert len(parsed) == 10 and parsed == [tune.parse_param(text, fields, script) for text in tune.SPACES[script]]


def test_the_sampler_is_tpe_with_its_first_10_trials_at_random():
    """docs/tuning.md: "The sampler is TPE, its first 10 trials at random" (RL Baselines3 Zoo's)."""
    storage = optuna.storages.InMemoryStorage()
    made, loaded = tune.load_study("t", storage, {}), tune.load_study("t", storage, None)  # run's, then show's
    for study in (made, loaded):
        assert isinstance(study.sampler, optuna.samplers.TPESampler) and study.sampler._n_startup_trials == 10


def test_the_tuned_swimmer_flags_are_the_best_trial_of_the_committed_study_of_the_default_space(tmp_path):
    """docs/tuning.md: the committed Swimmer study searched the default space, and its best trial, 37, is what
    grid.TUNED_FLAGS runs again at 1M steps."""
    import grid

    shutil.copy(ROOT / "benchmarks" / "records" / "swimmer-study.db", tmp_path)  # opening it may write to it
    study = optuna.load_study(study_name="swimmer", storage=f"sqlite:///{tmp_path / 'swimmer-study.db'}")
    settings, best = study.user_attrs["settings"], study.best_trial
    assert best.number == 37 and best.user_attrs["flags"] == settings["fixed"] + list(grid.TUNED_FLAGS["Swimmer-v4"])
    space = [dataclasses.asdict(p) | {"kind": p.kind.__name__} for p in tune.search_space("ppo_continuous.py", [], [])]
    assert settings["script"] == "ppo_continuous.py" and settings["space"] == json.loads(json.dumps(space))


SWIMMER_TABLE_FLAGS = (  # docs/tuning.md's Swimmer table, its columns after the objective
    "learning-rate", "num-steps", "num-minibatches", "update-epochs", "gamma",
    "gae-lambda", "clip-coef", "ent-coef", "vf-coef", "max-grad-norm",
)  # fmt: skip
PRUNED_AT_THIRD_REPORT, THIRD_REPORT_STEP = 17, 90_000


def test_the_swimmer_study_prose_and_top_5_table_are_what_the_committed_study_holds(tmp_path):
    """docs/tuning.md: 41 finished trials in 57 minutes, 20 complete and 21 pruned (17 at their third report, 90k
    steps; 3.0 minutes a complete trial, 1.9 a pruned one), the top-5 table, entropy bonuses of 0.005 to 0.06, and the
    learning rate and the entropy coefficient first by PED-ANOVA importance."""
    shutil.copy(ROOT / "benchmarks" / "records" / "swimmer-study.db", tmp_path)  # opening it may write to it
    study = optuna.load_study(study_name="swimmer", storage=f"sqlite:///{tmp_path / 'swimmer-study.db'}")
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    pruned = [t for t in trials if t.state == optuna.trial.TrialState.PRUNED]
    assert (len(trials), len(complete), len(pruned)) == (41, 20, 21)
    minutes = lambda ts: [(t.datetime_complete - t.datetime_start).total_seconds() / 60 for t in ts]
    span = max(t.datetime_complete for t in trials) - min(t.datetime_start for t in trials)
    assert round(span.total_seconds() / 60) == 57
    assert (round(np.mean(minutes(complete)), 1), round(np.mean(minutes(pruned)), 1)) == (3.0, 1.9)
    third = [t for t in pruned if sorted(t.intermediate_values) == [30_000, 60_000, THIRD_REPORT_STEP]]
    assert len(third) == PRUNED_AT_THIRD_REPORT
    page = (ROOT / "docs" / "tuning.md").read_text()
    rows = page.split("| trial | last 10 episodes at 300k |")[1].split("\n\n")[0].splitlines()[2:]
    best = sorted(complete, key=lambda t: t.value, reverse=True)[:5]
    documented = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    assert documented == [
        [str(t.number), f"{t.value:.1f}", *(tune.cell(t, name) for name in SWIMMER_TABLE_FLAGS)] for t in best
    ]
    assert {t.params["gamma"] for t in best} == {0.995, 0.9999}  # "gamma 0.995 or 0.9999"
    ent = [t.params["ent-coef"] for t in best]
    assert (round(min(ent), 3), round(max(ent), 2)) == (0.005, 0.06)
    importances = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
    )
    assert list(importances)[:2] == ["learning-rate", "ent-coef"]  # "mattered most"


def test_a_trials_values_reach_the_script_as_its_own_flags():
    params = {"learning-rate": 0.00037941879346696484, "num-steps": 512, "gamma": 0.9999, "clip-vloss": False}
    args = tyro.cli(C.Args, args=tune.as_flags(params | {"norm-adv": True}))
    assert args.learning_rate == params["learning-rate"] and args.num_steps == 512 and args.gamma == 0.9999
    assert args.clip_vloss is False and args.norm_adv is True
    assert tune.as_flags({"clip-vloss": True}) == ["--clip-vloss"]


def test_reports_are_the_mean_of_the_last_episodes_by_evenly_spaced_steps():
    assert tune.report_steps(1000) == [100, 200, 300, 400, 500, 600, 700, 800, 900]
    steps, returns = np.array([50, 120, 180, 260, 990]), np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    assert tune.recent_mean(steps, returns, 40, 2) is None
    assert tune.recent_mean(steps, returns, 200, 2) == 3.0  # episodes ending at 120 and 180
    assert tune.recent_mean(steps, returns, 260, 10) == 15.0 / 4


def test_a_study_stops_resumes_its_cut_trial_first_and_scores_trials_by_their_runs_own_logs(tmp_path):
    name = f"s{os.getpid()}"  # its processes are looked for by name, machine-wide
    proc = subprocess.Popen(
        tuner(tmp_path, "run", "--study", name, "--trials", "2", LR, "--", *LONG),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    wait_until(
        lambda: list(tmp_path.glob(f"runs/*{name}-trial0__1__*/checkpoint.pt")), "the first trial's checkpoint", proc
    )
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: what a terminal sends to the tuner's whole process group
    _, err = proc.communicate(timeout=HANG_TIMEOUT)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert err.strip().splitlines() == ["stopped: trial 0 cut and queued to run again first; the same command resumes"]
    assert processes_of(f"{name}-trial0") == []  # the trial's run stopped with it
    # ... by one signal, the tuner's SIGTERM, not the terminal's SIGINT too (a second signal quits a run unsaved)
    log = (tmp_path / "logs" / f"{name}-trial0__1.log").read_text()
    assert "SIGTERM: stopping after this iteration" in log and "SIGINT" not in log, log[-2000:]
    assert "resume with: python ppo_continuous.py --resume" in log  # it saved
    cut = load(tmp_path, name).trials[0]
    assert cut.state == optuna.trial.TrialState.FAIL and cut.user_attrs["cut"]
    (cut_run,) = tmp_path.glob(f"runs/*__{name}-trial0__1__*")
    assert (cut_run / "checkpoint.pt").exists() and not (cut_run / "summary.json").exists()  # stopped, saved

    done = run_tuner(tmp_path, "run", "--study", name, "--trials", "2", LR, "--", *LONG)
    assert done.returncode == 0, done.stderr
    trials = load(tmp_path, name).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]  # the cut trial is not counted
    retry = trials[1]
    assert retry.params == cut.params and retry.user_attrs["retry_of"] == 0
    # the objective: the mean of the run's last 10 training episodes, as the run itself logged and summarized them
    for t in trials[1:]:
        (run_dir,) = tmp_path.glob(f"runs/*__{name}-trial{t.number}__1__*")
        summary = json.loads((run_dir / "summary.json").read_text())
        assert t.value == pytest.approx(summary["mean_return_last_10"], rel=1e-5)
        assert f"--learning-rate {t.params['learning-rate']!r}" in " ".join(t.user_attrs["flags"])
        assert summary["eval_mean_return"] is None  # --objective last: no closing evaluation spent
        # the pruner's values: the mean of the last 10 episodes by each report step, from TensorBoard
        episodes = scalars(run_dir)["charts/episodic_return"]
        steps, returns = np.array([s for s, _ in episodes]), np.array([r for _, r in episodes])
        expected = {s: np.mean(returns[steps <= s][-10:]) for s in tune.report_steps(LONG_STEPS)}
        assert t.intermediate_values == pytest.approx(expected, rel=1e-5)
        assert hparams_of(run_dir) == {"learning-rate": t.params["learning-rate"]}
    best = max(trials[1:], key=lambda t: t.value)
    assert f"best (trial {best.number}, {best.value:.2f})" in done.stdout
    command = shlex.split(done.stdout.split(f"best (trial {best.number}, {best.value:.2f}):\n")[1].splitlines()[0])
    args = tyro.cli(C.Args, args=command[2:])  # python ppo_continuous.py FLAGS: the best trial, ready to run
    assert args.learning_rate == best.params["learning-rate"] and args.total_timesteps == LONG_STEPS
    assert (tmp_path / f"{name}_history.png").stat().st_size > 0 and (
        tmp_path / f"{name}_importances.png"
    ).stat().st_size > 0


def hparams_of(run_dir: Path) -> dict:
    """The hyperparameters TensorBoard's HPARAMS view shows for a run folder."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    found = {}
    for path in run_dir.glob("events.out.tfevents.*"):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "hparams":
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    for name, v in data.session_start_info.hparams.items():
                        found[name] = v.number_value
    return found


def test_a_worker_killed_outright_stops_its_runs_and_the_heartbeat_queues_its_trial_again(tmp_path):
    name, grace = f"k{os.getpid()}", 2  # its processes are looked for by name, machine-wide
    lowered = f"tune.HEARTBEAT_S, tune.HEARTBEAT_GRACE_S = 1, {grace}"  # from 60 and 180 seconds
    command = in_python(tmp_path, "run", "--study", name, "--trials", "1", LR, "--", *LONG, before=lowered)
    worker = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # a checkpoint: the run is in its loop, its handler set (its folder is made before: a kill then ends it unsaid)
    saved = lambda: list(tmp_path.glob(f"runs/*__{name}-trial0__1__*/checkpoint.pt"))
    wait_until(saved, "trial 0's checkpoint", worker)
    worker.kill()  # SIGKILL: no handler, no cleanup
    worker.communicate(timeout=HANG_TIMEOUT)
    killed = time.monotonic()
    wait_until(lambda: not processes_of(f"{name}-trial0"), "the run to stop with its tuner")
    log = (tmp_path / "logs" / f"{name}-trial0__1.log").read_text()
    assert "SIGTERM: stopping after this iteration" in log, log[-2000:]  # the parent-death signal, not its end
    time.sleep(max(0.0, killed + grace + 1 - time.monotonic()))  # the grace period is past since its last heartbeat
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert again.returncode == 0, again.stderr
    stale, retry = load(tmp_path, name).trials
    assert stale.state == optuna.trial.TrialState.FAIL and retry.state == optuna.trial.TrialState.COMPLETE
    assert retry.params == stale.params  # the same flags, run again
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(retry) == 0


def test_a_signal_as_a_trial_ends_stops_the_study_there(tmp_path):
    """SIGTERM (a scheduler's stop) between trials: the trial that ended is kept, no other starts, exit 128 + 15."""
    stub = "tune.objective_fn = lambda study, space, stop: lambda trial: os.kill(os.getpid(), 15) or 1.0"
    command = in_python(tmp_path, "run", "--study", "t", "--trials", "3", LR, "--", *TINY, before=stub)
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert out.returncode == 128 + signal.SIGTERM, out.stderr
    assert out.stderr.strip().splitlines() == ["stopped between trials; the same command resumes"]
    assert [t.state.name for t in load(tmp_path, "t").trials] == ["COMPLETE"]


def test_two_workers_share_one_study_in_a_journal_file(tmp_path):
    storage = str(tmp_path / "shared.log")
    command = tuner(
        tmp_path, "run", "--study", "j", "--trials", "4", "--threads", "1", LR, "--", *TINY, storage=storage
    )
    workers = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for w in workers:
        _, err = w.communicate(timeout=HANG_TIMEOUT)
        assert w.returncode == 0, err
    study = load(tmp_path, "j", optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage)))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert 4 <= len(complete) <= 5  # a worker may finish one trial past the count the other reached
    assert len({t.user_attrs["worker"] for t in complete}) == 2  # both took trials
    assert len({t.number for t in complete}) == len(complete)
    assert len({t.params["learning-rate"] for t in complete}) == len(complete)  # unseeded samplers: no repeats


WORKERS = 5  # let go together on a new SQLite file without the lock, they lost the race to make its tables in
# 18 tries of 18 (3 workers: in 16 of 20); on a journal file they never did, and it is held the same


@pytest.mark.parametrize("kind", ["db", "log"])
def test_workers_started_in_one_instant_on_a_new_storage_all_take_trials_of_one_study(tmp_path, kind):
    """Workers opening a new storage together raced to make Optuna's tables (`table alembic_version already
    exists`): here each waits, imported, for one file, so that all open the storage in the same instant."""
    gate, storage = tmp_path / "gate", f"sqlite:///{tmp_path}/new/s.db" if kind == "db" else f"{tmp_path}/new/s.log"
    command = in_python(tmp_path, "run", "--study", "s", "--trials", "1", "--threads", "1", LR, "--", *TINY,
                        before=f"tune.show = lambda *args: None\n{at_gate(gate)}", storage=storage)  # fmt: skip
    for w in released_together([command] * WORKERS, gate):
        _, err = w.communicate(timeout=HANG_TIMEOUT)
        assert w.returncode == 0, err
    assert optuna.get_all_study_names(tune.open_storage(storage)) == ["s"]  # made once
    trials = load(tmp_path, "s", tune.open_storage(storage)).trials
    # every worker started its trial before any had finished: the 1 asked for and one more per extra worker
    assert sorted(t.number for t in trials) == list(range(WORKERS)), [t.number for t in trials]
    assert len({t.user_attrs["worker"] for t in trials}) == WORKERS
    for t in trials:
        assert t.state == optuna.trial.TrialState.COMPLETE
        (run_dir,) = tmp_path.glob(f"runs/*__s-trial{t.number}__1__*")
        assert t.value == pytest.approx(json.loads((run_dir / "summary.json").read_text())["mean_return_last_10"])


def test_workers_started_in_one_instant_with_other_settings_make_one_study_with_one_of_them(tmp_path):
    """A new study's settings are written and checked by one worker at a time too: no worker goes on with its own
    settings while another's are the study's."""
    gate, lows = tmp_path / "gate", [f"1e-{k}" for k in range(3, 3 + WORKERS)]  # a range of learning rates each
    stub = "tune.objective_fn = lambda study, space, stop: lambda trial: 1.0\ntune.show = lambda *args: None"
    # the settings written half a second late: a worker that looked meanwhile would find none and write its own
    late = "write = optuna.Study.set_user_attr\noptuna.Study.set_user_attr = lambda *a: time.sleep(0.5) or write(*a)"
    storage = str(tmp_path / "o.log")  # a journal file: a file storage like SQLite, that never raced to be made
    commands = [
        in_python(tmp_path, "run", "--study", "o", "--trials", "1", f"--param=learning-rate={low}:1e-2:log", "--",
                  *TINY, before=f"import optuna\n{stub}\n{late}\n{at_gate(gate)}", storage=storage)
        for low in lows
    ]  # fmt: skip
    outs = [(w.communicate(timeout=HANG_TIMEOUT)[1], w.returncode) for w in released_together(commands, gate)]
    assert sorted(code for _, code in outs) == [0] + [2] * (WORKERS - 1), outs
    assert all("was made with other settings" in err for err, code in outs if code), outs
    (study,) = optuna.get_all_study_summaries(tune.open_storage(storage))
    (low,) = [low for low, (_, code) in zip(lows, outs) if code == 0]
    assert study.user_attrs["settings"]["space"][0]["low"] == float(low)  # the settings of the one that went on


def test_an_rdb_storage_asks_optuna_for_a_beat_every_minute_and_a_retry_after_three_silent_ones(tmp_path):
    """The heartbeat the docs state: a running trial beats every HEARTBEAT_S; one silent for HEARTBEAT_GRACE_S (three
    beats missed, not one: a loaded node may be late) is failed and queued again by the next worker."""
    storage = tune.open_storage(f"sqlite:///{tmp_path}/s.db")
    assert (storage.heartbeat_interval, storage.grace_period) == (tune.HEARTBEAT_S, tune.HEARTBEAT_GRACE_S) == (60, 180)
    assert isinstance(storage.failed_trial_callback, optuna.storages.RetryHeartbeatStaleTrialCallback)


def test_a_server_storage_whose_tables_another_worker_was_making_is_opened_again(monkeypatch):
    """PostgreSQL or MySQL: no file to lock, so a worker that lost the race to make the tables tries again."""
    tries = []

    def rdb_storage(url, **kwargs):
        tries.append(url)
        if len(tries) == 1:
            raise sqlalchemy.exc.OperationalError("CREATE TABLE studies", {}, Exception("table studies already exists"))
        if len(tries) == 2:  # the same version row written by two workers
            raise sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", {}, Exception("duplicate key value"))
        if len(tries) == 3:  # PostgreSQL's DuplicateTable
            raise sqlalchemy.exc.ProgrammingError("CREATE TABLE studies", {}, Exception('relation "studies" exists'))
        return "storage"

    monkeypatch.setattr(tune.optuna.storages, "RDBStorage", rdb_storage)
    monkeypatch.setattr(tune, "OPEN_RETRY_S", 0)
    assert tune.open_storage("postgresql://host/db") == "storage" and len(tries) == 4
    tries.clear()
    monkeypatch.setattr(tune, "OPEN_TRIES", 2)
    with pytest.raises(tune.BadInput, match=r"cannot open the storage postgresql://host/db \(IntegrityError: "):
        tune.open_storage("postgresql://host/db")
    assert len(tries) == 2


class PruneAtOnce(optuna.pruners.BasePruner):
    """A pruner that prunes every trial at its first report, standing in for the median pruner; it keeps the
    arguments tune.py gave the median pruner."""

    made: list[dict] = []

    def __init__(self, **kwargs):
        PruneAtOnce.made.append(kwargs)

    def prune(self, study, trial) -> bool:
        return True


def test_a_pruned_trial_stops_its_run_and_the_median_pruner_waits_for_the_third_report(tmp_path, monkeypatch):
    monkeypatch.setattr(tune.optuna.pruners, "MedianPruner", PruneAtOnce)
    monkeypatch.chdir(ROOT)
    name = f"p{os.getpid()}"
    tune.main(["run", "--study", name, "--dir", str(tmp_path), "--trials", "1", LR, "--", *LONG])
    (trial,) = load(tmp_path, name).trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == tune.report_steps(LONG_STEPS)[:1]  # pruned at its first report
    assert processes_of(f"{name}-trial0") == []
    (run_dir,) = tmp_path.glob(f"runs/*__{name}-trial0__1__*")
    assert not (run_dir / "summary.json").exists()  # stopped, not finished
    assert scalars(run_dir)["charts/SPS"][-1][0] < LONG_STEPS
    # the median pruner: after 5 completed trials, from the third report on (RL Zoo's warm-up of a third)
    assert {"n_startup_trials": 5, "n_warmup_steps": tune.report_steps(LONG_STEPS)[2]} in PruneAtOnce.made


def test_no_prune_runs_every_trial_to_its_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(tune.optuna.pruners, "MedianPruner", PruneAtOnce)
    monkeypatch.chdir(ROOT)
    tune.main(["run", "--study", "n", "--dir", str(tmp_path), "--trials", "1", "--no-prune", LR, "--", *LONG])
    (trial,) = load(tmp_path, "n").trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert list(trial.intermediate_values) == tune.report_steps(LONG_STEPS)


class FakeRun:
    """A trial's runs as report_due and the objective see them: seeds whose logs the test sets."""

    def __init__(self, study, number=0, flags=()):
        self.study = study

    folder = lambda self, seed: f"folder-{seed}"  # noqa: E731
    scalars = lambda self, seed: tune.read_scalars(self.folder(seed))  # noqa: E731
    running = lambda self: False  # noqa: E731  (ended before the first look)
    stop = lambda self: None  # noqa: E731
    failure = lambda self: None  # noqa: E731
    final = lambda self: 1.0  # noqa: E731


def fake_study(**changes) -> tune.Study:
    study = {"name": "u", "script": "ppo_continuous.py", "fixed": [], "seeds": [1, 2], "objective": "last"}
    study |= {"last_episodes": 2, "budget": 1000, "runs_dir": "/nowhere", "threads": 1}
    return tune.Study(**study | changes)


def test_reports_average_the_seeds_and_wait_for_the_slowest_and_a_run_ended_between_looks_still_reports(monkeypatch):
    logs = {  # per seed: its progress, the steps its episodes ended at, their returns
        "folder-1": (1000, np.array([50, 150, 250, 450]), np.array([1.0, 2.0, 3.0, 4.0])),
        "folder-2": (450, np.array([60, 160, 260]), np.array([10.0, 20.0, 30.0])),
        "folder-3": (1000, np.array([70]), np.array([-99.0])),  # far below the others: a mean, not a median
    }
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    trial = optuna.create_study().ask()
    run = FakeRun(fake_study(seeds=[1, 2, 3]))
    assert tune.report_due(run, trial, 0, prune=False) == 4  # seed 2 has passed 400, not 500
    expected = {100: 11.0 - 99.0, 200: 16.5 - 99.0, 300: 27.5 - 99.0, 400: 27.5 - 99.0}
    expected = {step: total / 3 for step, total in expected.items()}
    assert trial.storage.get_trial(trial._trial_id).intermediate_values == pytest.approx(expected)
    # through the objective: a run that ended before the first look still reports every value
    logs["folder-2"] = (1000, *logs["folder-2"][1:])
    monkeypatch.setattr(tune, "Trial", FakeRun)
    monkeypatch.setattr(tune, "write_hparams", lambda *args: None)
    study = optuna.create_study(direction="maximize")
    study.optimize(tune.objective_fn(fake_study(), [], types.SimpleNamespace(signum=None)), n_trials=1)
    assert list(study.trials[0].intermediate_values) == tune.report_steps(1000)


def test_the_objective_is_the_mean_over_seeds_of_the_last_episodes_asked_for(monkeypatch):
    logs = {
        "folder-1": (1000, np.arange(1, 9) * 100, np.arange(1.0, 9.0)),
        "folder-2": (1000, np.array([999]), np.array([7.0])),
        "folder-3": (1000, np.array([999]), np.array([-50.0])),  # far below the others: a mean, not a median
    }
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    run = tune.Trial.__new__(tune.Trial)
    run.study, run.folder, run.read = fake_study(last_episodes=3, seeds=[1, 2, 3]), lambda seed: f"folder-{seed}", {}
    assert run.final() == pytest.approx(((6.0 + 7.0 + 8.0) / 3 + 7.0 - 50.0) / 3)


def test_an_objective_of_zero_is_a_value_not_a_run_without_episodes(monkeypatch):
    """A seed whose last episodes average 0.0 is scored 0.0: only a seed with no episode at all fails its trial."""
    logs = {
        "folder-1": (1000, np.array([100, 200]), np.array([-1.0, 1.0])),
        "folder-2": (1000, np.array([999]), np.array([0.0])),
    }
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    run = tune.Trial.__new__(tune.Trial)
    run.study, run.folder, run.read = fake_study(last_episodes=2), lambda seed: f"folder-{seed}", {}
    assert run.final() == 0.0


def test_each_trial_process_gets_its_threads_and_the_users_folder_on_the_path(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", "/theirs")
    tune.script_module("ppo_continuous.py")  # read before Popen is replaced: the script's import runs a process
    started = []
    monkeypatch.setattr(tune.subprocess, "Popen", lambda cmd, **kwargs: started.append((cmd, kwargs)))
    monkeypatch.chdir(tmp_path)
    tune.Trial(fake_study(threads=3, runs_dir=str(tmp_path / "runs")), 7, ["--env-id", "Pendulum-v1"])
    assert [cmd[cmd.index("--seed") + 1] for cmd, _ in started] == ["1", "2"]
    for cmd, kwargs in started:
        assert (
            kwargs["env"]["OMP_NUM_THREADS"] == "3" and kwargs["env"]["PYTHONPATH"] == f"{tmp_path}{os.pathsep}/theirs"
        )
        assert cmd[cmd.index("--exp-name") + 1] == "u-trial7" and cmd[cmd.index("--eval-episodes") + 1] == "0"


@pytest.mark.parametrize("asked", [["--eval-episodes", "5"], ["--eval-episodes=5"]])
def test_an_evaluation_asked_for_after_the_dashes_is_kept_under_the_last_episodes_objective(
    tmp_path, monkeypatch, asked
):
    """--objective last spends no closing evaluation unless the fixed flags ask for one (in either spelling): theirs,
    not a 0 after it."""
    tune.script_module("ppo_continuous.py")  # read before Popen is replaced: the script's import runs a process
    started = []
    monkeypatch.setattr(tune.subprocess, "Popen", lambda cmd, **kwargs: started.append(cmd))
    flags = ["--env-id", "Pendulum-v1", *asked]
    tune.Trial(fake_study(runs_dir=str(tmp_path / "runs")), 0, flags)
    assert len(started) == 2
    for cmd in started:
        assert (
            sum(f.startswith("--eval-episodes") for f in cmd) == 1 and tyro.cli(C.Args, args=cmd[2:]).eval_episodes == 5
        )


def test_each_seed_of_a_trial_gets_its_share_of_the_cores_unless_threads_says(tmp_path, monkeypatch):
    threads = []

    def objective_fn(study, space, stop):
        threads.append(study.threads)
        return lambda trial: 1.0

    monkeypatch.setattr(tune, "objective_fn", objective_fn)
    monkeypatch.setattr(tune, "usable_cores", lambda: 4)
    for name, flags in (("a", ["--seeds", "1", "2"]), ("b", ["--seeds", "1", "2", "3"]), ("c", ["--threads", "3"])):
        tune.main(["run", "--study", name, "--dir", str(tmp_path), "--trials", "1", *flags, LR, "--", *TINY])
    assert threads == [2, 1, 3]


def test_each_seed_gets_a_thread_at_least_when_the_seeds_outnumber_the_cores(tmp_path, monkeypatch):
    threads = []
    monkeypatch.setattr(
        tune, "objective_fn", lambda study, space, stop: threads.append(study.threads) or (lambda t: 1.0)
    )
    monkeypatch.setattr(tune, "usable_cores", lambda: 1)
    tune.main(["run", "--study", "a", "--dir", str(tmp_path), "--trials", "1", "--seeds", "1", "2", LR, "--", *TINY])
    assert threads == [1]


def test_only_failures_in_a_row_end_a_study(tmp_path, monkeypatch):
    def objective_fn(study, space, stop):
        def objective(trial):
            if trial.number % 2 == 0:
                trial.set_user_attr("error", "seed 1 exit 1: boom")
                raise tune.TrialFailed("boom")
            return 1.0

        return objective

    monkeypatch.setattr(tune, "objective_fn", objective_fn)
    tune.main(["run", "--study", "f", "--dir", str(tmp_path), "--trials", "2", "--max-failures", "2", LR, "--", *TINY])
    assert [t.state.name for t in load(tmp_path, "f").trials] == ["FAIL", "COMPLETE", "FAIL", "COMPLETE"]
    with pytest.raises(SystemExit) as stopped:
        tune.main(
            ["run", "--study", "f", "--dir", str(tmp_path), "--trials", "3", "--max-failures", "1", LR, "--", *TINY]
        )
    assert stopped.value.code == 2


def test_a_run_that_finished_without_an_episode_is_a_failure_that_max_failures_counts(tmp_path, monkeypatch, capsys):
    """A trial whose seeds all finished but one has no episode to score fails with that reason, and failures in a row
    end the study (a failure without its reason was counted as none: the study started trial after trial)."""
    finals = []

    class NoEpisode(FakeRun):
        def final(self):
            finals.append(1)
            assert len(finals) <= 3, "the study goes on after --max-failures 2 failures in a row"
            raise tune.TrialFailed("seed 1 finished without an episode")

    monkeypatch.setattr(tune, "Trial", NoEpisode)
    monkeypatch.setattr(tune, "read_scalars", lambda folder: (1000, np.array([]), np.array([])))
    with pytest.raises(SystemExit) as stopped:
        tune.main(["run", "--study", "e", "--dir", str(tmp_path), "--trials", "5", "--max-failures", "2", LR])
    assert stopped.value.code == 2 and len(finals) == 2
    out, err = capsys.readouterr()
    assert "trial 1 fail" in out and out.rstrip().endswith(": seed 1 finished without an episode")
    assert err.strip().endswith("2 trials in a row failed, the last with seed 1 finished without an episode")


def test_a_failed_trial_says_the_last_line_its_run_wrote(tmp_path):
    """A traceback's last line is its error: that is the trial's reason (what --max-failures' exit line repeats)."""
    log = tmp_path / "u-trial0__1.log"
    log.write_text("Traceback (most recent call last):\n  File 'x.py', line 1\nstep 10\r\rValueError: boom\n\n")
    run = tune.Trial.__new__(tune.Trial)
    run.study, run.procs, run.logs = fake_study(seeds=[1]), [types.SimpleNamespace(returncode=1)], [str(log)]
    run.folder = lambda seed: "folder-1"
    assert run.failure() == "seed 1 exit 1: ValueError: boom"


def test_pruned_trials_count_toward_the_trials_asked_for(tmp_path, monkeypatch):
    pruned = []

    def objective_fn(study, space, stop):
        def objective(trial):
            assert len(pruned) < 2, "a third trial"
            pruned.append(trial.number)
            raise optuna.TrialPruned()

        return objective

    monkeypatch.setattr(tune, "objective_fn", objective_fn)
    tune.main(["run", "--study", "p", "--dir", str(tmp_path), "--trials", "2", LR, "--", *TINY])
    assert [t.state.name for t in load(tmp_path, "p").trials] == ["PRUNED", "PRUNED"]


def test_bad_input_is_one_line_and_exit_2_and_the_study_keeps_its_trials(tmp_path):
    ok = run_tuner(tmp_path, "run", "--study", "b", "--trials", "1", LR, "--", *TINY)
    assert ok.returncode == 0, ok.stderr
    cases = {
        ("--param", "nope=1:2"): "error: --param 'nope=1:2': ppo_continuous.py has no flag --nope",
        ("--param", "learning-rate=1e-2:1e-4"): "the range is empty",
        ("--storage", "mysql://nobody@localhost/nothing"): "error: cannot open the storage mysql://",
        ("--storage", "study.txt"): "give an RDB URL",
        ("--trials", "0"): "--trials must be positive",
        ("--seeds", "1", "1"): "--seeds 1 1: a seed twice would count one run twice",
        (LR, "--param", "learning-rate=0.1,0.2"): "--param learning-rate is given twice",
    }
    for flags, message in cases.items():
        out = run_tuner(tmp_path, "run", "--study", "b", *flags, "--", *TINY)
        assert out.returncode == 2 and message in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    other = run_tuner(tmp_path, "run", "--study", "b", "--trials", "2", LR, "--", *TINY, "--gamma", "0.9")
    assert other.returncode == 2 and "was made with other settings" in other.stderr
    assert [t.state.name for t in load(tmp_path, "b").trials] == ["COMPLETE"]  # nothing lost
    failing = run_tuner(tmp_path, "run", "--study", "f", "--trials", "5", LR, "--", *TINY, "--env-id", "NoSuchEnv-v9")
    assert failing.returncode == 2
    assert failing.stderr.strip().splitlines()[-1].startswith("error: 3 trials in a row failed, the last with seed 1 ")
    assert "cannot make NoSuchEnv-v9" in failing.stderr and "Traceback" not in failing.stderr
    failed = load(tmp_path, "f").trials
    assert [t.state.name for t in failed] == ["FAIL"] * 3 and all("NoSuchEnv" in t.user_attrs["error"] for t in failed)


def test_bad_input_makes_nothing_neither_the_study_s_folder_nor_its_storage(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default folder, tune/b, would be made here
    (tmp_path / "file").touch()  # a folder no storage can be made in
    monkeypatch.setattr(tune, "Trial", lambda *args: pytest.fail("bad input started a trial"))
    cases = {  # the flags before -- and those after TINY: the line said
        "--param=learning-rate=1e-2:1e-4:log": "the range is empty",
        "--param=learning-rate=0:1e-2:log": "a log range must lie above 0",
        "--param=seed=1,2": "--seed is tune.py's to set",
        f"{LR} -- --nope 1": "ppo_continuous.py has no flag --nope (given after --)",
        f"{LR} -- --exp-name x": "--exp-name is tune.py's to set",
        f"{LR} -- --total-timesteps many": "--total-timesteps 'many' is no integer",
        f"{LR} -- --num-steps abc": "--num-steps 'abc' is no integer",  # read by each trial: before any is made
        f"{LR} -- --num-minibatches 0": "--num-minibatches must be positive, got 0",
        f"--objective eval {LR} -- --eval-episodes 0": "--objective eval needs an evaluation",
        f"--seeds 2 2 {LR}": "--seeds 2 2: a seed twice",
        f"--trials 0 {LR}": "--trials must be positive",
        f"--threads 0 {LR}": "--threads must be positive",
        f"--storage study.txt {LR}": "give an RDB URL (sqlite:///file.db) or a journal file (*.log)",
        f"--storage mysql://nobody@localhost/nothing {LR}": "cannot open the storage mysql://",
        f"--storage foo://host/db {LR}": "cannot open the storage foo://host/db (NoSuchModuleError: ",
        f"--storage sqlite:///{tmp_path}/file/s.db {LR}": f"cannot open the storage sqlite:///{tmp_path}/file/s.db",
        f"--storage {tmp_path}/new/s.log --param=learning-rate=1e-2:1e-4": "the range is empty",
        "--dir new/folder --param=learning-rate=1e-2:1e-4": "the range is empty",
    }
    for flags, message in cases.items():
        mine, _, fixed = flags.partition(" -- ")
        with pytest.raises(SystemExit) as refused:
            tune.main(["run", "--study", "b", *mine.split(), "--", *TINY, *fixed.split()])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and message in err and len(err.splitlines()) == 1, (flags, err)
        assert [p.name for p in tmp_path.iterdir()] == ["file"], flags  # no tune/b/, no b.db


def test_a_first_run_makes_its_folder_and_database_there_and_nothing_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "objective_fn", lambda study, space, stop: lambda trial: 1.0)
    monkeypatch.chdir(tmp_path)
    for where in ([], ["--dir", "new/folder"]):  # the default, tune/x, and a folder of folders yet to be made
        for _ in range(2):  # the same command again finds the study finished: no trial more
            tune.main(["run", "--study", "x", *where, "--trials", "1", LR, "--", *TINY])
    made = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    files = ("x.db", "x.db.tune-lock", "x_history.png")  # the database, the lock its workers take, show's figure
    assert made == [f"{folder}/{name}" for folder in ("new/folder", "tune/x") for name in files]
    for folder in (tmp_path / "tune" / "x", tmp_path / "new" / "folder"):
        assert [t.state.name for t in load(folder, "x").trials] == ["COMPLETE"]


def test_a_study_resumed_with_another_search_space_is_refused_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tune, "objective_fn", lambda study, space, stop: lambda trial: 1.0)
    run = ["run", "--study", "r", "--dir", str(tmp_path)]
    tune.main([*run, "--trials", "1", LR, "--", *TINY])
    kept = "{'flag': 'learning-rate', 'kind': 'float', 'low': 0.0001, 'high': 0.01, 'log': True, 'choices': []}"
    # another range, another scale, choices, one flag more, the default space: each would have run a trial
    for other in ("--param=learning-rate=1e-5:1e-2:log", "--param=learning-rate=1e-4:1e-2",
                  "--param=learning-rate=0.001,0.01", f"{LR} --param=gamma=0.9,0.99", ""):  # fmt: skip
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:
            tune.main([*run, "--trials", "2", *other.split(), "--", *TINY])
        assert refused.value.code == 2 and capsys.readouterr().err == (
            f"error: study 'r' was made with other settings (space [{kept}]): give them again, or a new --study\n"
        ), other
    assert len(load(tmp_path, "r").trials) == 1


def test_a_study_resumed_with_other_seeds_objective_or_episodes_is_refused_by_name(tmp_path, monkeypatch, capsys):
    """Each of them changes what a trial's value or its reports mean: --last-episodes too under --objective eval,
    where the pruner still reads the last training episodes."""
    monkeypatch.setattr(tune, "objective_fn", lambda study, space, stop: lambda trial: 1.0)
    for name, first, other, said in (
        ("s", [], ["--seeds", "1", "2"], "seeds [1]"),
        ("o", [], ["--objective", "eval"], "objective last"),
        ("l", ["--objective", "eval"], ["--objective", "eval", "--last-episodes", "5"], "last_episodes 10"),
    ):
        run = ["run", "--study", name, "--dir", str(tmp_path), LR]
        tune.main([*run, "--trials", "1", *first, "--", *TINY])
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:
            tune.main([*run, "--trials", "2", *other, "--", *TINY])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and f"was made with other settings ({said}" in err, err
        assert len(load(tmp_path, name).trials) == 1


def test_the_eval_objective_is_the_closing_greedy_evaluation_averaged_over_the_seeds(tmp_path):
    out = run_tuner(tmp_path, "run", "--study", "e", "--trials", "1", "--seeds", "1", "2", "--objective", "eval", LR,
                    "--", *TINY, "--eval-episodes", "3")  # fmt: skip
    assert out.returncode == 0, out.stderr
    (trial,) = load(tmp_path, "e").trials
    evals = [
        json.loads(p.read_text())["eval_mean_return"] for p in sorted(tmp_path.glob("runs/*__e-trial0__*/summary.json"))
    ]
    assert len(evals) == 2 and trial.value == pytest.approx(np.mean(evals))
    assert len(json.loads(next(tmp_path.glob("runs/*__e-trial0__2__*/eval.json")).read_text())["returns"]) == 3


def test_a_step_before_some_seeds_first_episode_is_skipped_not_waited_for(monkeypatch):
    logs = {
        "folder-1": (1000, np.array([50, 250]), np.array([1.0, 3.0])),
        "folder-2": (1000, np.array([150]), np.array([5.0])),
    }
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    trial = optuna.create_study().ask()
    assert tune.report_due(FakeRun(fake_study()), trial, 0, prune=False) == 9
    values = trial.storage.get_trial(trial._trial_id).intermediate_values
    assert 100 not in values and values[200] == (1.0 + 5.0) / 2 and values[300] == (2.0 + 5.0) / 2


def test_a_seed_that_has_come_exactly_to_a_report_step_has_passed_it(monkeypatch):
    logs = {
        "folder-1": (1000, np.array([50, 150, 250, 450]), np.array([1.0, 2.0, 3.0, 4.0])),
        "folder-2": (400, np.array([60, 160, 400]), np.array([10.0, 20.0, 30.0])),  # its last episode ends at 400
    }
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    trial = optuna.create_study().ask()
    assert tune.report_due(FakeRun(fake_study()), trial, 0, prune=False) == 4
    assert trial.storage.get_trial(trial._trial_id).intermediate_values[400] == ((2.0 + 3.0) / 2 + 25.0) / 2


def test_without_prune_a_trial_the_pruner_would_stop_runs_on_and_with_prune_it_stops(monkeypatch):
    logs = {f"folder-{seed}": (1000, np.array([50, 150]), np.array([1.0, 2.0])) for seed in (1, 2)}
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    reports = []
    trial = types.SimpleNamespace(report=lambda value, step: reports.append(step), should_prune=lambda: True)
    assert tune.report_due(FakeRun(fake_study()), trial, 0, prune=False) == 9 and len(reports) == 9
    with pytest.raises(optuna.TrialPruned):
        tune.report_due(FakeRun(fake_study()), trial, 0, prune=True)


class PruneAll(optuna.pruners.BasePruner):
    def prune(self, study, trial) -> bool:
        return True


def test_a_run_that_ended_between_looks_is_complete_however_its_values_compare(monkeypatch):
    """The values reported after a run has ended are for the median: a trial that spent its whole budget is not
    pruned then (its value is kept), whatever the pruner would say."""
    logs = {f"folder-{seed}": (1000, np.array([50, 150]), np.array([1.0, 2.0])) for seed in (1, 2)}
    monkeypatch.setattr(tune, "read_scalars", lambda folder: logs[folder])
    monkeypatch.setattr(tune, "Trial", FakeRun)  # ended before the first look
    monkeypatch.setattr(tune, "write_hparams", lambda *args: None)
    study = optuna.create_study(direction="maximize", pruner=PruneAll())
    study.optimize(tune.objective_fn(fake_study(), [], types.SimpleNamespace(signum=None)), n_trials=1)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 1.0
    assert list(trial.intermediate_values) == tune.report_steps(1000)


def test_a_trial_checkpoints_twice_a_report_so_the_pruner_reads_flushed_logs():
    batch = 2048  # ppo_continuous.py's defaults: 1 env x 2048 steps
    iterations = 2 * tune.REPORTS * 5
    trial = types.SimpleNamespace(study=fake_study(budget=iterations * batch))
    every = tune.Trial.save_every(trial, [])
    assert iterations // every == 2 * tune.REPORTS
    assert tune.Trial.save_every(trial, ["--num-steps", "1024"]) == 2 * every  # from the trial's own flags


def test_a_trial_of_a_small_budget_still_checkpoints_so_its_logs_are_flushed():
    """--save-every 0 is never: a budget of fewer batches than two a report still checkpoints every iteration."""
    trial = types.SimpleNamespace(study=fake_study(budget=3 * 2048))  # 3 iterations of the default batch
    assert tune.Trial.save_every(trial, []) == 1


def test_a_trial_whose_sizes_the_fixed_flags_rule_out_is_pruned_before_it_runs(monkeypatch):
    started = []
    monkeypatch.setattr(tune, "Trial", lambda *args: started.append(args))
    fixed = ["--num-steps", "128"]  # 64 minibatches of a 128-step batch: 2 samples each, which the script refuses
    space = tune.search_space("ppo_continuous.py", ["num-minibatches=4,64"], fixed)
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"num-minibatches": 64})
    objective = tune.objective_fn(fake_study(fixed=fixed), space, types.SimpleNamespace(signum=None))
    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED and started == []  # no run started
    assert trial.user_attrs["refused"] == "64 minibatches do not split a batch of 128 into 4+ samples each"
    assert tune.batch_problem("ppo_continuous.py", [*fixed, "--num-minibatches", "32"]) is None  # 4 samples each
    assert "less than one batch" in tune.batch_problem("ppo_continuous.py", ["--total-timesteps", "1000"])
    for script, texts in tune.SPACES.items():  # the default spaces never rule themselves out
        steps, minibatches = (tune.parse_param(t, tune.script_fields(script), script) for t in texts[1:3])
        for n, m in ((n, m) for n in steps.choices for m in minibatches.choices):
            assert tune.batch_problem(script, ["--num-steps", str(n), "--num-minibatches", str(m)]) is None


def test_a_trial_is_pruned_before_it_runs_exactly_when_the_script_would_refuse_its_sizes():
    """batch_problem agrees with the script's own check, one batch of the whole budget and several envs included."""
    said = []
    for envs, steps, minibatches, total in itertools.product((1, 4), (128, 2048), (0, 32, 128), (2048, 4096)):
        flags = ["--num-envs", str(envs), "--num-steps", str(steps), "--num-minibatches", str(minibatches),
                 "--total-timesteps", str(total)]  # fmt: skip
        problem = tune.batch_problem("ppo_continuous.py", flags)
        assert (problem is None) == (C.check_args(tyro.cli(C.Args, args=flags)) is None), (flags, problem)
        said.append(problem is None)
    assert any(said) and not all(said)


def test_a_log_range_on_an_integer_flag_is_searched_log_uniformly_in_whole_numbers(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "Trial", FakeRun)
    monkeypatch.setattr(tune, "read_scalars", lambda folder: (0, np.zeros(0), np.zeros(0)))
    monkeypatch.setattr(tune, "write_hparams", lambda *args: None)
    fixed = ["--env-id", "examples.pointmass:PointMass-v0", "--num-minibatches", "4", "--total-timesteps", "2048"]
    steps = "--param=num-steps=64:1024:log"
    tune.main(["run", "--study", "i", "--dir", str(tmp_path), "--trials", "1", steps, "--", *fixed])
    (trial,) = load(tmp_path, "i").trials
    assert trial.distributions["num-steps"] == optuna.distributions.IntDistribution(64, 1024, log=True)
    assert trial.user_attrs["flags"][-2:] == ["--num-steps", str(trial.params["num-steps"])]


def test_a_trial_reads_only_run_folders_started_with_it_not_an_older_study_s(tmp_path):
    """Trial numbers start again at 0 in a new database: trial 0's folder from before must not pass for this one."""
    run = tune.Trial.__new__(tune.Trial)
    run.study, run.exp, run.start = fake_study(runs_dir=str(tmp_path)), "u-trial0", 1_800_000_000
    (tmp_path / "Pendulum-v1__u-trial0__1__1799999999").mkdir()  # the old study's trial 0, a second too early
    assert run.folder(1) is None
    (tmp_path / "Pendulum-v1__u-trial0__1__1800000000").mkdir()
    assert run.folder(1) == str(tmp_path / "Pendulum-v1__u-trial0__1__1800000000")


def test_a_run_s_logs_are_read_again_only_when_its_event_files_have_grown(tmp_path, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    reads, real = [], tune.read_scalars
    monkeypatch.setattr(tune, "read_scalars", lambda folder: reads.append(folder) or real(folder))
    run = tune.Trial.__new__(tune.Trial)
    run.folder, run.read = lambda seed: str(tmp_path), {}
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_scalar(tune.STEP_TAG, 1.0, 100)
        writer.add_scalar(tune.RETURN_TAG, 5.0, 90)
        writer.flush()
        assert run.scalars(1)[0] == 100 and run.scalars(1)[0] == 100 and len(reads) == 1  # unchanged: not read again
        writer.add_scalar(tune.STEP_TAG, 1.0, 200)
        writer.add_scalar(tune.RETURN_TAG, 7.0, 180)
        writer.flush()
        progress, steps, returns = run.scalars(1)
    assert len(reads) == 2 and progress == 200 and steps.tolist() == [90, 180] and returns.tolist() == [5.0, 7.0]


def test_show_of_a_study_that_does_not_exist_says_so_and_makes_nothing(tmp_path):
    out = run_tuner(tmp_path, "show", "--study", "nosuch")
    assert out.returncode == 2 and out.stderr.startswith("error: no study 'nosuch'"), out.stderr
    out = run_tuner(tmp_path, "show", "--study", "nosuch", storage=str(tmp_path / "nosuch.log"))  # a journal's too
    assert out.returncode == 2 and out.stderr.startswith("error: no study 'nosuch'"), out.stderr
    assert list(tmp_path.iterdir()) == []
    storage = f"sqlite:///{tmp_path / 'other.db'}"  # a database that exists, without the study in it
    tune.load_study("other", tune.open_storage(storage), {})
    out = run_tuner(tmp_path, "show", "--study", "nosuch", storage=storage)
    assert out.returncode == 2 and "no study 'nosuch' in this storage" in out.stderr, out.stderr
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["other"]


def test_show_ranks_every_complete_trial_not_only_the_first_ten(tmp_path, capsys):
    """The best trial is the best of all: here the twelfth, after eleven that did worse."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("settings", {"script": "ppo_continuous.py", "objective_text": "test"})
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    for number in range(12):
        value, params = 100.0 if number == 11 else float(number), {"learning-rate": 1e-4 * (number + 1)}
        made = {"params": params, "distributions": {"learning-rate": lr}, "value": value}
        study.add_trial(optuna.trial.create_trial(**made, user_attrs={"flags": tune.as_flags(params)}))
    tune.show(study, str(tmp_path))
    out = capsys.readouterr().out
    assert "best (trial 11, 100.00):" in out and "| 11 | 100.00 |" in out
    assert "| 2 | 2.00 |" in out and "| 1 | 1.00 |" not in out and "| 0 | 0.00 |" not in out  # the top ten of 12


def test_show_ranks_complete_trials_keeps_choices_as_given_and_gives_the_best_ones_command(tmp_path, capsys):
    """A pruned trial's value (its last report, mid-budget) is not ranked; a choice shows as chosen (0.9999, not 1),
    a range in 3 digits; the command line is the best trial's, not the first's."""
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("settings", {"script": "ppo_continuous.py", "objective_text": "test"})
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    gamma = optuna.distributions.CategoricalDistribution([0.99, 0.9999])
    made = [(0.0012345, 0.99, 5.0, "COMPLETE"), (0.0056789, 0.9999, 9.0, "COMPLETE"), (0.002, 0.99, 50.0, "PRUNED")]
    for rate, g, value, state in made:
        params = {"learning-rate": rate, "gamma": g}
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions={"learning-rate": lr, "gamma": gamma}, value=value,
                intermediate_values={100: value}, state=optuna.trial.TrialState[state],
                user_attrs={"flags": ["--env-id", "X-v0", *tune.as_flags(params)]},
            )
        )  # fmt: skip
    tune.show(study, str(tmp_path))
    out = capsys.readouterr().out
    assert "| 1 | 9.00 | 0.9999 | 0.00568 |" in out and "| 0 | 5.00 | 0.99 | 0.00123 |" in out and "| 2 |" not in out
    command = out.split("best (trial 1, 9.00):\n")[1].splitlines()[0]
    assert shlex.split(command) == ["python", "ppo_continuous.py", *study.trials[1].user_attrs["flags"]]


def test_the_best_command_is_quoted_for_a_shell():
    flags = ["--env-id", "X-v0", "--env-kwargs", '{"size": 3}', "--no-clip-vloss"]
    assert shlex.split(tune.command_line("ppo_continuous.py", flags)) == ["python", "ppo_continuous.py", *flags]


def test_every_range_of_the_default_space_is_searched_on_its_own_scale(tmp_path, monkeypatch):
    """A log range (the learning rate, the entropy bonus) is sampled log-uniformly and a plain one (vf-coef) uniformly,
    as Optuna records each trial's distribution: 1e-8 to 0.1 sampled uniformly would almost never go below 1e-3."""
    monkeypatch.setattr(tune, "Trial", FakeRun)
    monkeypatch.setattr(tune, "read_scalars", lambda folder: (0, np.zeros(0), np.zeros(0)))
    monkeypatch.setattr(tune, "write_hparams", lambda *args: None)
    tune.main(["run", "--study", "d", "--dir", str(tmp_path), "--trials", "1", "--", *TINY])
    (trial,) = load(tmp_path, "d").trials
    FloatDistribution = optuna.distributions.FloatDistribution
    assert trial.distributions["learning-rate"] == FloatDistribution(1e-5, 1e-2, log=True)
    assert trial.distributions["ent-coef"] == FloatDistribution(1e-8, 0.1, log=True)
    assert trial.distributions["vf-coef"] == FloatDistribution(0.1, 1.0, log=False)


def test_a_trial_is_pruned_before_it_runs_when_its_minibatches_do_not_divide_the_batch():
    """The script refuses a batch that its minibatches do not divide evenly (100 steps in 3 minibatches), not only one
    they cut too small: batch_problem agrees with check_args there too."""
    said = []
    for envs, steps, minibatches in itertools.product((1, 3), (96, 100), (3, 4, 8)):
        flags = ["--num-envs", str(envs), "--num-steps", str(steps), "--num-minibatches", str(minibatches),
                 "--total-timesteps", "4096"]  # fmt: skip
        problem = tune.batch_problem("ppo_continuous.py", flags)
        assert (problem is None) == (C.check_args(tyro.cli(C.Args, args=flags)) is None), (flags, problem)
        said.append(problem is None)
    assert any(said) and not all(said)
    assert "3 minibatches do not split a batch of 100" in tune.batch_problem(
        "ppo_continuous.py", ["--num-steps", "100", "--num-minibatches", "3"]
    )


def test_a_seed_that_exited_0_without_a_run_folder_is_a_failure_not_a_finished_run(tmp_path):
    """A script that ends cleanly but made no run (nothing to read the objective from) fails its trial with its last
    line, rather than passing for a finished seed (under --objective eval its summary would be looked for in None)."""
    log = tmp_path / "u-trial0__1.log"
    log.write_text("evaluated the checkpoint: 12.5\n")
    run = tune.Trial.__new__(tune.Trial)
    run.study, run.procs, run.logs = fake_study(seeds=[1]), [types.SimpleNamespace(returncode=0)], [str(log)]
    run.folder = lambda seed: None
    assert run.failure() == "seed 1 exit 0: evaluated the checkpoint: 12.5"


def test_every_flag_tune_py_sets_or_that_would_replace_the_run_is_refused_fixed_or_searched():
    """--seed, --exp-name, --save-every are tune.py's; --resume and --eval-checkpoint would make a trial another
    run (or none): each is refused after -- and as a --param, for both scripts."""
    for script in tune.SCRIPTS:
        fields = tune.script_fields(script)
        for flag in ("--seed", "--exp-name", "--resume", "--save-every", "--eval-checkpoint"):
            assert flag[2:] in fields, (script, flag)
            with pytest.raises(tune.BadInput, match=f"{flag} is tune.py's to set"):
                tune.search_space(script, [], [flag, "1"])
            with pytest.raises(tune.BadInput, match="tune.py's to set"):
                tune.parse_param(f"{flag[2:]}=1,2", fields, script)


def test_a_trial_checkpoints_by_its_own_batch_size_searched_values_included(tmp_path, monkeypatch):
    """--save-every of each seed's command follows the trial's batch: a searched --num-steps 1024 (not the default
    2048 the fixed flags leave) checkpoints twice as many iterations apart, twice a report."""
    tune.script_module("ppo_continuous.py")  # read before Popen is replaced: the script's import runs a process
    started = []
    monkeypatch.setattr(tune.subprocess, "Popen", lambda cmd, **kwargs: started.append(cmd))
    study = fake_study(budget=2 * tune.REPORTS * 4 * 1024, runs_dir=str(tmp_path / "runs"))  # 80 iterations of 1024
    tune.Trial(study, 0, [*study.fixed, *tune.as_flags({"num-steps": 1024})])
    assert [cmd[cmd.index("--save-every") + 1] for cmd in started] == ["4", "4"]


def test_pruned_trials_are_no_failures_however_many_come_in_a_row(tmp_path, monkeypatch):
    """--max-failures counts scripts that failed: trials the pruner stopped (or refused sizes pruned) in a row do not
    end the study, which goes on to its --trials."""

    def objective_fn(study, space, stop):
        def objective(trial):
            raise optuna.TrialPruned()

        return objective

    monkeypatch.setattr(tune, "objective_fn", objective_fn)
    monkeypatch.setattr(tune, "show", lambda *args: None)
    tune.main(["run", "--study", "p", "--dir", str(tmp_path), "--trials", "3", "--max-failures", "1", LR, "--", *TINY])
    assert [t.state.name for t in load(tmp_path, "p").trials] == ["PRUNED"] * 3


def test_a_run_puts_back_the_signal_handlers_it_found(tmp_path, monkeypatch):
    """tune.main as a library call: Ctrl-C and SIGTERM reach the caller's handlers again once it returns."""
    monkeypatch.setattr(tune, "objective_fn", lambda study, space, stop: lambda trial: 1.0)
    monkeypatch.setattr(tune, "show", lambda *args: None)
    mine = lambda signum, frame: None  # noqa: E731
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, mine)
    tune.main(["run", "--study", "h", "--dir", str(tmp_path), "--trials", "1", LR, "--", *TINY])
    assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine


def test_a_range_is_refused_for_a_flag_that_is_no_number():
    """LOW:HIGH samples numbers: on a text flag (--env-id) it would hand the script 1.5 for an environment's id."""
    fields = tune.script_fields("ppo_continuous.py")
    assert fields["env-id"] is str
    with pytest.raises(tune.BadInput, match="a range needs a number flag"):
        tune.parse_param("env-id=1:2", fields, "x")


def test_the_eval_objective_keeps_the_scripts_closing_evaluation_when_the_dashes_name_none(tmp_path, monkeypatch):
    """--objective eval scores the closing evaluation: without --eval-episodes after -- each seed runs the script's
    default number of them (a 0 there would leave every trial without its value)."""
    tune.script_module("ppo_continuous.py")  # read before Popen is replaced: the script's import runs a process
    started = []
    monkeypatch.setattr(tune.subprocess, "Popen", lambda cmd, **kwargs: started.append(cmd))
    tune.Trial(fake_study(objective="eval", runs_dir=str(tmp_path / "runs")), 0, ["--env-id", "Pendulum-v1"])
    assert len(started) == 2
    for cmd in started:
        assert tyro.cli(C.Args, args=cmd[2:]).eval_episodes == C.Args().eval_episodes > 0


def test_a_sqlite_url_with_connection_options_locks_and_finds_its_database_file(tmp_path, monkeypatch, capsys):
    """sqlite:///DIR/s.db?timeout=30 is the file DIR/s.db (SQLAlchemy's reading): run locks s.db.tune-lock beside
    it, and show finds the study there, not a file named with the query."""
    monkeypatch.setattr(tune, "objective_fn", lambda study, space, stop: lambda trial: 1.0)
    monkeypatch.setattr(tune, "show", lambda *args: None)
    url = f"sqlite:///{tmp_path / 's.db'}?timeout=30"
    tune.main(["run", "--study", "q", "--dir", str(tmp_path), "--storage", url, "--trials", "1", LR, "--", *TINY])
    assert sorted(p.name for p in tmp_path.glob("s.db*")) == ["s.db", "s.db.tune-lock"]
    monkeypatch.undo()
    capsys.readouterr()
    tune.main(["show", "--study", "q", "--dir", str(tmp_path), "--storage", url])
    assert capsys.readouterr().out.startswith("study q: 1 complete;")


def test_max_failures_names_this_workers_last_failure_when_another_worker_took_the_newest_trial(
    tmp_path, monkeypatch, capsys
):
    """The exit line repeats the failure that ended the study, not the study's newest trial: with a second worker
    on the storage that is the other worker's trial, which has no error yet."""
    url = f"sqlite:///{tmp_path / 'w.db'}"

    def objective_fn(study, space, stop):
        def objective(trial):
            optuna.load_study(study_name="w", storage=url).ask()  # another worker takes the next trial meanwhile
            trial.set_user_attr("error", "seed 1 exit 1: ValueError: boom")
            raise tune.TrialFailed("boom")

        return objective

    monkeypatch.setattr(tune, "objective_fn", objective_fn)
    with pytest.raises(SystemExit) as stopped:
        tune.main(["run", "--study", "w", "--dir", str(tmp_path), "--storage", url, "--trials", "5",
                   "--max-failures", "1", LR, "--", *TINY])  # fmt: skip
    assert stopped.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("1 trials in a row failed, the last with seed 1 exit 1: ValueError: boom")
    )
