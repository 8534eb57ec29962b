"""A run's life: checkpoint -> resume, interrupts, evaluation, the non-finite stop, bad checkpoints, and
reruns under the same seed. Some checks run the scripts as real processes with real signals, the rest
run ppo_continuous.py's main in-process, where spies can see the state a run holds: a resumed run goes
on from exactly the state the uninterrupted run had; evaluation changes nothing it should not; a fault
keeps the last good checkpoint; a bad checkpoint is refused with one line."""

import copy
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import (
    HANG_TIMEOUT,
    NEEDS_PGREP,
    ROOT,
    Lines,
    VectorRecorder,
    find_wrapper,
    only_run,
    processes_in_group,
    record_reset_seeds,
    run_script,
    scalars,
    spy,
    wait_for_checkpoint,
    wait_until,
)

import ppo_atari as A
import ppo_continuous as C

# command-line flags for short runs in a subprocess
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
# Args for runs of main in-process
RUN = dict(
    env_id="Pendulum-v1",
    num_envs=2,
    num_steps=200,
    num_minibatches=4,
    update_epochs=2,
    total_timesteps=1600,  # 4 iterations of 400 steps
    eval_episodes=0,
    objective="kl-adaptive",  # so that beta is state that must survive too
    kl_target=0.003,
)
STOP_AT = 2  # the interrupted run stops after this iteration


def files(path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def start(tmp_path, script, flags) -> subprocess.Popen:
    """Start `python SCRIPT FLAGS...` in tmp_path, its stdout and stderr piped as text, in a process group of
    its own (as a terminal starts a command: os.killpg(proc.pid, sig) is what Ctrl-C does)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / script), *flags],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def live_state(record: list, monkeypatch):
    """Record, at the start of every iteration, the state a checkpoint carries as the run holds it:
    parameters, normalization statistics and RNG streams before the rollout; optimizer moments,
    learning rate, clip and beta before the update."""

    def before_rollout(envs, agent, buf, state, device):
        record.append(
            {
                "agent": {k: v.clone() for k, v in agent.state_dict().items()},
                "normalization": {k: v.clone() for k, v in C.normalization_state(envs).items()},
                "rng": C.rng_state(),
            }
        )

    def before_update(agent, optimizer, buf, advantages, returns, args, kl_beta, clip_coef):
        record[-1] |= {
            "optimizer": copy.deepcopy(optimizer.state_dict()),  # a copy: the moments change in place
            "lr": optimizer.param_groups[0]["lr"],
            "kl_beta": kl_beta,
            "clip_coef": clip_coef,
        }

    spy(monkeypatch, C, "collect_rollout", before=before_rollout)
    spy(monkeypatch, C, "update", before=before_update)


def assert_same(a, b, path="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), path
    else:
        assert a == b, path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short finished run, shared: its checkpoint, and its training environments' reset seeds.
    Tests may write eval.json beside the checkpoint; none may change the checkpoint itself."""
    folder = tmp_path_factory.mktemp("trained")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with pytest.MonkeyPatch.context() as m:
            log = record_reset_seeds(m)
            C.main(C.Args(**(RUN | {"total_timesteps": 800, "seed": 3})))
            training_seeds = {s for s, _ in log if s is not None}
    finally:
        os.chdir(cwd)
    return only_run(folder) / C.CHECKPOINT, training_seeds


# --- checkpoint -> resume ----------------------------------------------------------------------


def test_resumed_run_holds_exactly_the_uninterrupted_state_and_keeps_learning(tmp_path, monkeypatch):
    # the uninterrupted run
    (tmp_path / "whole").mkdir()
    monkeypatch.chdir(tmp_path / "whole")
    whole: list = []
    with monkeypatch.context() as m:
        live_state(whole, m)
        C.main(C.Args(**RUN))
    # the same run, stopped by SIGINT during iteration STOP_AT ...
    (tmp_path / "cut").mkdir()
    monkeypatch.chdir(tmp_path / "cut")
    with monkeypatch.context() as m:
        calls = []

        def interrupt_during(envs, agent, buf, state, device):
            calls.append(1)
            if len(calls) == STOP_AT:
                os.kill(os.getpid(), signal.SIGINT)

        spy(m, C, "collect_rollout", before=interrupt_during)
        with pytest.raises(SystemExit) as stop:
            C.main(C.Args(**RUN))
    assert stop.value.code == 128 + signal.SIGINT
    checkpoint = only_run(tmp_path / "cut") / C.CHECKPOINT
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["progress"]["iteration"] == STOP_AT
    # ... and resumed: the state it goes on from is the uninterrupted run's, bit for bit
    resumed: list = []
    with monkeypatch.context() as m:
        live_state(resumed, m)
        log = record_reset_seeds(m)
        normalized = spy(m, C.Normalize, "observations")  # (args (wrapper, raw observations), kwargs, result)
        C.main(C.Args(resume=str(checkpoint)))
    # its first observations (the reset's) are normalized by the checkpoint's statistics, not fresh ones
    (_, raw), _, first_obs = normalized[0]
    mean, var = (saved["normalization"][f"obs_rms.{k}"].numpy() for k in ("mean", "var"))
    assert np.allclose(first_obs, ((raw - mean) / np.sqrt(var + C.NORM_EPS)).clip(-C.OBS_CLIP, C.OBS_CLIP), atol=1e-6)
    reset_seeds = {seed for seed, _ in log if seed is not None}
    seed, n = RUN.get("seed", 1), RUN["num_envs"]
    first_seeds = {seed + i for i in range(n)}
    assert reset_seeds and not reset_seeds & first_seeds  # fresh episodes, not a replay of the first ones
    # each iteration's own block of n seeds: a resume at iteration 1 of 8 envs replays none of envs 1-7's first starts
    assert reset_seeds == {seed + STOP_AT * n + i for i in range(n)}
    assert len(resumed) == len(whole) - STOP_AT
    assert_same(resumed[0], whole[STOP_AT])
    assert resumed[0]["kl_beta"] != RUN.get("kl_beta", 1.0)  # beta had adapted, and came back

    # it goes on updating everything: nothing stays frozen at the checkpoint's values
    final = torch.load(checkpoint, weights_only=True)
    assert final["progress"]["global_step"] == RUN["total_timesteps"]
    for key in ("obs_rms.count", "return_rms.count"):
        assert final["normalization"][key] > saved["normalization"][key]
    assert not torch.equal(final["normalization"]["obs_rms.mean"], saved["normalization"]["obs_rms.mean"])
    assert any(not torch.equal(final["agent"][k], saved["agent"][k]) for k in saved["agent"])
    steps = [s["step"] for s in final["optimizer"]["state"].values()]
    assert all(s > t["step"] for s, t in zip(steps, saved["optimizer"]["state"].values()))

    # one TensorBoard history: each iteration logged once, none missing
    logged = scalars(only_run(tmp_path / "cut"))
    batch = RUN["num_envs"] * RUN["num_steps"]
    expected_steps = list(range(batch, RUN["total_timesteps"] + 1, batch))
    for tag in ("charts/learning_rate", "losses/policy_loss", "charts/kl_beta"):
        assert [s for s, _ in logged[tag]] == expected_steps, tag
    whole_logged = scalars(only_run(tmp_path / "whole"))
    assert logged["charts/learning_rate"] == whole_logged["charts/learning_rate"]
    assert logged["charts/kl_beta"][:STOP_AT] == whole_logged["charts/kl_beta"][:STOP_AT]


def test_resuming_from_an_older_checkpoint_replaces_what_was_logged_after_it(tmp_path, monkeypatch):
    """A run that went on past its last checkpoint (and then died) resumes from that checkpoint: the
    iterations logged after it are logged again, and TensorBoard holds each step once."""
    monkeypatch.chdir(tmp_path)
    snapshot = tmp_path / "at_iteration_2.pt"

    def keep_second(result, path, agent, optimizer, envs, args, progress):
        if progress["iteration"] == 2:
            snapshot.write_bytes(open(path, "rb").read())

    with monkeypatch.context() as m:
        spy(m, C, "save_checkpoint", after=keep_second)
        C.main(C.Args(**(RUN | {"save_every": 2})))
    run_dir = only_run(tmp_path)
    (run_dir / C.CHECKPOINT).write_bytes(snapshot.read_bytes())  # as if iterations 3 and 4 were never saved
    C.main(C.Args(resume=str(run_dir / C.CHECKPOINT)))
    logged = scalars(run_dir)
    for tag in ("charts/learning_rate", "losses/value_loss", "charts/kl_beta"):
        assert [s for s, _ in logged[tag]] == [400, 800, 1200, 1600], tag


# `python SCRIPT ...` killed by SIGKILL (an out-of-memory kill, a preempted node) the moment its KILL_AT-th checkpoint
# is renamed into place, on a slow disk (each TensorBoard record takes DISK_S to write, so events still wait in the
# writer's queue unless the run flushed them): the script itself is unchanged, only os.replace and the write wrapped
DISK_S = 0.02
KILLED_AFTER_RENAME = f"""
import os, runpy, signal, sys, time
from tensorboard.summary.writer.record_writer import RecordWriter
write = RecordWriter.write
RecordWriter.write = lambda self, data: (time.sleep({DISK_S}), write(self, data))
real, renames, kill_at = os.replace, [], int(sys.argv[2])
def replace(src, dst):
    real(src, dst)
    renames.append(dst)
    if str(dst).endswith("checkpoint.pt") and len(renames) == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
os.replace = replace
script, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize(
    "script, flags, batch",
    [
        ("ppo_continuous.py", PENDULUM + ["--total-timesteps", "1280"], 256),  # 5 iterations of 1 env x 256 steps
        ("ppo_atari.py", BREAKOUT + ["--total-timesteps", "320"], 64),  # 5 iterations of 2 envs x 32 steps
    ],
)
@pytest.mark.parametrize("kill_at", [1, 3])
def test_a_kill_right_after_a_checkpoint_loses_no_iteration_of_the_history(tmp_path, script, flags, batch, kill_at):
    """Every iteration a checkpoint says is done is in the event file before the checkpoint exists: a run killed
    just after the rename and resumed holds each iteration's scalars exactly once, as TensorBoard reads them."""
    command = [sys.executable, "-c", KILLED_AFTER_RENAME, str(ROOT / script), str(kill_at), *flags, "--save-every", "1"]
    killed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_dir = only_run(tmp_path)
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["progress"]["iteration"] == kill_at
    per_iteration = lambda logged: {  # noqa: E731
        tag: [step for step, _ in values]
        for tag, values in logged.items()
        if tag.startswith(("losses/", "charts/")) and "episodic" not in tag
    }
    before = per_iteration(scalars(run_dir))
    assert before and all(steps == [batch * (i + 1) for i in range(kill_at)] for steps in before.values()), before

    resumed = run_script(tmp_path, script, "--resume", str(run_dir / "checkpoint.pt"))
    assert resumed.returncode == 0, resumed.stderr
    total = int(flags[flags.index("--total-timesteps") + 1])
    after = per_iteration(scalars(run_dir))
    assert after.keys() == before.keys()
    assert all(steps == list(range(batch, total + 1, batch)) for steps in after.values()), after


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one_intact(trained, tmp_path, monkeypatch):
    path = tmp_path / C.CHECKPOINT
    shutil.copyfile(trained[0], path)  # a copy: the shared checkpoint stays whole whatever happens here
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


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_a_checkpoint_is_written_beside_its_path_and_nothing_lands_in_the_working_folder(tmp_path, monkeypatch, module):
    """The half-written file is renamed over the checkpoint from its own folder: two runs started from one folder
    never share it, and a run folder on another disk takes the rename."""
    (tmp_path / "cwd").mkdir()
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    args = module.Args(env_id="Pendulum-v1", num_envs=1) if module is C else module.Args(num_envs=1)
    envs = module.make_envs(args, "test")
    agent = module.Agent(envs)
    progress = {"global_step": 0, "iteration": 0, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    written = spy(monkeypatch, torch, "save")
    optimizer = torch.optim.Adam(agent.parameters())
    module.save_checkpoint(str(tmp_path / "run" / "checkpoint.pt"), agent, optimizer, envs, args, progress)
    envs.close()
    assert [Path(call[0][1]).resolve().parent for call in written] == [tmp_path / "run"]
    assert files(tmp_path / "cwd") == set() and files(tmp_path / "run") == {"checkpoint.pt"}


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_only_the_process_of_global_rank_0_writes_the_checkpoint_whatever_its_local_rank(tmp_path, monkeypatch, module):
    """Under torchrun on several machines each machine has a local rank 0: only global rank 0 writes (on a shared
    disk a second writer of the same file would race it), though every process takes part in the RNG gathering."""
    args = module.Args(env_id="Pendulum-v1", num_envs=1) if module is C else module.Args(num_envs=1)
    envs = module.make_envs(args, "test")
    agent = module.Agent(envs)
    progress = {"global_step": 0, "iteration": 0, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    monkeypatch.setattr(module, "RANK", 1)  # the first process of a second machine
    monkeypatch.setattr(module, "LOCAL_RANK", 0)
    optimizer = torch.optim.Adam(agent.parameters())
    module.save_checkpoint(str(tmp_path / "checkpoint.pt"), agent, optimizer, envs, args, progress)
    envs.close()
    assert files(tmp_path) == set()


# --- interrupts, by real signals to real processes ---------------------------------------------


@pytest.mark.parametrize(
    "script, flags, sig, code",
    [
        ("ppo_continuous.py", PENDULUM + ["--total-timesteps", "20480"], signal.SIGINT, 130),
        ("ppo_atari.py", BREAKOUT + ["--total-timesteps", "1280"], signal.SIGTERM, 143),
    ],
)
def test_a_signal_saves_the_run_and_resume_finishes_it_once_on_one_schedule_with_its_closing_evaluation(
    tmp_path, script, flags, sig, code
):
    proc = start(tmp_path, script, flags + ["--save-every", "3"])
    wait_for_checkpoint(proc, tmp_path)  # iteration 3's: the stop comes at a later iteration, most often not a 3rd
    proc.send_signal(sig)
    proc.wait(timeout=HANG_TIMEOUT)
    assert proc.returncode == code
    err = proc.stderr.read()
    assert "resume with:" in err and "Traceback" not in err
    run_dir = only_run(tmp_path)
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    stopped_at = ckpt["progress"]["global_step"]
    total = int(flags[flags.index("--total-timesteps") + 1])
    assert 0 < stopped_at < total
    assert scalars(run_dir)["charts/learning_rate"][-1][0] == stopped_at  # the stop saved its own last iteration
    assert not (run_dir / "summary.json").exists()

    hint = next(line for line in err.splitlines() if "resume with:" in line).split("resume with: ")[1].split()
    assert hint[:3] == ["python", script, "--resume"]
    resumed = run_script(tmp_path, script, *hint[2:])  # the hint as given, from where the run was started
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

    written = (run_dir / "summary.json").read_bytes()
    again = run_script(tmp_path, script, "--resume", str(run_dir / "checkpoint.pt"))
    assert again.returncode == 0 and "already finished" in again.stdout
    assert (run_dir / "summary.json").read_bytes() == written

    # cut in its closing evaluation, or after eval.json: the final checkpoint is there, summary.json is not;
    # resuming (here from inside the run's folder) runs no iteration and writes the same evaluation and the summary
    evaluation = json.loads((run_dir / "eval.json").read_text())
    (run_dir / "summary.json").unlink()
    finished = run_script(run_dir, script, "--resume", "checkpoint.pt")
    assert finished.returncode == 0 and "already finished" not in finished.stdout, finished.stderr
    assert not (run_dir / "runs").exists()  # the run's own folder, not a new one below it
    assert json.loads((run_dir / "eval.json").read_text())["returns"] == evaluation["returns"]
    closing = json.loads((run_dir / "summary.json").read_text())
    assert closing["global_step"] == total and closing["sps"] is None
    assert closing["mean_return_last_10"] == summary["mean_return_last_10"]
    assert scalars(run_dir)["charts/learning_rate"] == s["charts/learning_rate"]  # no iteration ran again


@NEEDS_PGREP
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_process_group_stops_a_run_with_async_envs_saved_and_its_env_workers_with_it(
    tmp_path, sig, code
):
    # a terminal's Ctrl-C (or a scheduler's SIGTERM) signals the whole process group: the env workers too, which
    # must leave the stop to the run
    flags = BREAKOUT + ["--total-timesteps", "4096", "--save-every", "1", "--async-envs"]
    proc = start(tmp_path, "ppo_atari.py", flags)
    wait_for_checkpoint(proc, tmp_path)
    os.killpg(proc.pid, sig)
    proc.wait(timeout=HANG_TIMEOUT)
    err = proc.stderr.read()
    assert proc.returncode == code, err
    assert "resume with:" in err and "Traceback" not in err and "Error" not in err
    ckpt = torch.load(only_run(tmp_path) / "checkpoint.pt", weights_only=True)
    assert 0 < ckpt["progress"]["global_step"] < 4096
    assert processes_in_group(proc.pid) == []  # the workers closed


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("script", [C, A], ids=["continuous", "atari"])
def test_sigint_and_sigterm_each_ask_for_a_stop_after_the_iteration(script, sig):
    signal.signal(sig, lambda *_: None)  # should the script leave sig alone, it must not end pytest
    interrupts = script.Interrupts()
    assert signal.getsignal(sig) == interrupts.handle  # installed: a script that leaves sig alone fails here, at once
    os.kill(os.getpid(), sig)
    wait_until(lambda: interrupts.signum, "the handler's run")  # at the interpreter's next check
    assert interrupts.signum == sig


def catches(pid: int, *sigs: signal.Signals) -> bool:
    """Whether process pid has a handler of its own for each of sigs (Linux: the SigCgt mask of /proc/PID/status);
    False once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = int(status.split("SigCgt:")[1].split()[0], 16)
    return all(caught >> (sig - 1) & 1 for sig in sigs)


@NEEDS_PGREP
@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("async_envs", [False, True], ids=["sync", "async"])
def test_a_second_interrupt_quits_at_once_without_saving(tmp_path, async_envs):
    # one iteration of a million steps (minutes): both signals come in it on any machine. No bet on time: the
    # first goes once the run's handlers are in place, the second once the run has said it got the first (two
    # signals that came before the run had handled either would be one)
    envs = ["--num-envs", "2", "--async-envs"] if async_envs else ["--num-envs", "1"]
    steps = str(1_000_000 // (2 if async_envs else 1))
    flags = ["--env-id", "Pendulum-v1", "--num-steps", steps, "--total-timesteps", "1000000", "--eval-episodes", "0"]
    proc = start(tmp_path, "ppo_continuous.py", flags + envs)
    err = Lines(proc.stderr)
    try:
        # Python catches SIGINT from its start; SIGTERM is caught once Interrupts is in place (SIGINT's handler first)
        wait_until(lambda: catches(proc.pid, signal.SIGINT, signal.SIGTERM), "the run's signal handlers", proc)
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: to the env workers too
        err.wait_for("SIGINT: stopping after this iteration")
        os.killpg(proc.pid, signal.SIGINT)  # within the same iteration
        proc.wait(timeout=HANG_TIMEOUT)  # a run that waits for the iteration's end fails here or below
        text = err.all()  # the pipe closes once no process is left to write to it: the workers' last words too
        assert proc.returncode == 130, text
        assert "resume with:" not in text  # it did not wait to save
        assert not list(tmp_path.glob("runs/*/checkpoint.pt*"))  # nothing saved, not even in part
        assert processes_in_group(proc.pid) == [] and "Traceback" not in text  # none left, none complaining
    finally:
        if proc.poll() is None or processes_in_group(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)  # what a failed check left
            proc.wait(timeout=HANG_TIMEOUT)


# --- evaluation --------------------------------------------------------------------------------


def eval_envs_for(checkpoint):
    ckpt = C.load_checkpoint(str(checkpoint))
    envs = VectorRecorder(C.make_eval_envs(ckpt["args"], "test", ckpt["normalization"]))
    agent = C.Agent(envs)
    C.restore_agent(ckpt, envs, agent, None, frozen=True)
    return ckpt, envs, agent


def test_evaluation_scores_what_training_scored_and_eval_checkpoint_scores_it_again(tmp_path):
    """With a policy that training no longer changes, the evaluation's returns (sampling, as in
    training) and the training's last episodes come from one distribution."""
    proc = run_script(
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
    assert len(evaluation["returns"]) == evaluation["episodes"] == 10
    assert evaluation["mean_return"] == pytest.approx(np.mean(evaluation["returns"]))
    assert evaluation["std_return"] == pytest.approx(np.std(evaluation["returns"]))  # population std, as the tables
    noise = np.sqrt((np.var(train) + evaluation["std_return"] ** 2) / 10)
    assert abs(evaluation["mean_return"] - np.mean(train)) < 4 * noise
    again = run_script(
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


@pytest.mark.parametrize("greedy", [True, False])
def test_evaluation_leaves_the_statistics_unchanged(trained, greedy):
    ckpt = C.load_checkpoint(str(trained[0]))
    envs = C.make_eval_envs(ckpt["args"], "test", ckpt["normalization"])  # alone, as finish_run makes them
    agent = C.Agent(envs)
    agent.load_state_dict(ckpt["agent"])
    C.evaluate(envs, agent, 2, greedy, 123, torch.device("cpu"))
    assert_same(C.normalization_state(envs), ckpt["normalization"])
    envs.close()


def test_greedy_evaluation_takes_the_mean_action_and_stochastic_samples(trained):
    ckpt, envs, agent = eval_envs_for(trained[0])
    with torch.no_grad():
        agent.actor_logstd.fill_(0.0)  # std 1: samples stand far from the mean
    distance = {}
    for greedy in (True, False):
        envs.steps.clear()
        envs.resets.clear()
        C.evaluate(envs, agent, 1, greedy, 123, torch.device("cpu"))
        seen = np.concatenate([envs.resets[0]] + [step[1] for step in envs.steps[:-1]])  # what the policy saw
        taken = np.concatenate([step[0] for step in envs.steps])
        with torch.no_grad():
            means = agent.actor_mean(torch.as_tensor(seen)).numpy()
        distance[greedy] = np.abs(taken - means).max()
    assert distance[True] < 1e-6  # greedy: exactly the mean
    assert distance[False] > 0.5  # stochastic: samples around it
    envs.close()


def test_an_evaluation_stops_at_the_end_of_its_last_episode(trained):
    """N episodes are N episodes of play and no more: Pendulum's last 200 steps each, with one autoreset step between
    two (a run that played on into an episode it then drops would spend its time for nothing)."""
    _, envs, agent = eval_envs_for(trained[0])
    returns = C.evaluate(envs, agent, 2, True, 123, torch.device("cpu"))
    assert len(returns) == 2 and len(envs.steps) == 2 * 200 + 1
    envs.close()


def test_atari_greedy_is_the_argmax_and_stochastic_samples():
    envs = gym.vector.SyncVectorEnv([A.make_env("BreakoutNoFrameskip-v4", 0, False, "test", {})])
    torch.manual_seed(0)
    agent = A.Agent(envs)
    with torch.no_grad():
        agent.actor.weight.mul_(300)  # confident but not certain: argmax and samples part ways
    obs = torch.as_tensor(envs.reset(seed=0)[0]).repeat(256, 1, 1, 1)
    obs[128:] = torch.randint(0, 256, obs[128:].shape, dtype=torch.uint8)
    with torch.no_grad():
        logits = agent.actor(agent.features(obs))
        greedy, _, _, _ = agent.get_action_and_value(obs, greedy=True)
        sampled, _, _, _ = agent.get_action_and_value(obs)
    assert torch.equal(greedy, logits.argmax(-1))
    assert (sampled != greedy).any()
    envs.close()


def test_evaluation_seeds_never_overlap_training_seeds(trained, monkeypatch, tmp_path):
    checkpoint, training_seeds = trained
    log = record_reset_seeds(monkeypatch)
    monkeypatch.chdir(tmp_path)
    C.main(C.Args(eval_checkpoint=str(checkpoint), eval_episodes=2))
    eval_seeds = {s for s, _ in log if s is not None}
    assert eval_seeds and not eval_seeds & training_seeds


def test_evaluation_is_greedy_by_default_and_eval_stochastic_samples(trained, monkeypatch):
    calls = spy(monkeypatch, C, "evaluate")
    C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=1))
    C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=1, eval_stochastic=True))
    assert [args[3] for args, _, _ in calls] == [True, False]  # evaluate's greedy argument
    result = json.loads((trained[0].parent / "eval.json").read_text())
    assert result["greedy"] is False and result["episodes"] == 1


def test_eval_checkpoint_changes_no_byte_of_the_checkpoint_and_plays_the_same_episodes_each_time(trained):
    before = trained[0].read_bytes()
    first = C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=2))
    second = C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=2))
    assert trained[0].read_bytes() == before
    assert first["returns"] == second["returns"]  # the same episodes each time


def test_eval_checkpoint_takes_the_env_and_seed_from_the_saved_run_not_the_command_line(trained, monkeypatch):
    """--eval-checkpoint evaluates with the saved run's Args (env, seed), only the evaluation flags
    coming from the command line."""
    ckpt = C.load_checkpoint(str(trained[0]))
    assert ckpt["args"].seed == 3 and ckpt["args"].env_id == "Pendulum-v1"
    evaluations = spy(monkeypatch, C, "evaluate")
    result = C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=1, env_id="HalfCheetah-v4", seed=9))
    (envs, _, _, _, seed, _), _, _ = evaluations[0]
    assert result["episodes"] == 1 and seed == 3 + C.EVAL_SEED_OFFSET  # the saved run's seed, not --seed 9
    assert envs.single_observation_space.shape == (3,)  # the saved run's Pendulum, not HalfCheetah's (17,)


def test_eval_checkpoint_films_as_its_command_line_says_not_as_the_run_was_trained(trained, tmp_path, monkeypatch):
    filmed = []  # capture_video of each evaluation environment, which is then made without a camera (no renderer)
    real = C.make_env

    def make_env(env_id, idx, video, run_name, env_kwargs):
        if run_name.endswith("/eval"):
            filmed.append(video)
        thunk = real(env_id, idx, False, run_name, {k: v for k, v in env_kwargs.items() if k != "render_mode"})

        def camera_less():  # check_env's one frame too: the render_mode asked for, and a render that draws nothing
            env = thunk()
            env.unwrapped.render_mode, env.unwrapped.render = env_kwargs.get("render_mode"), lambda: None
            return env

        return camera_less

    monkeypatch.setattr(C, "make_env", make_env)
    ckpt = torch.load(trained[0], map_location="cpu", weights_only=True)
    filmed_run = tmp_path / C.CHECKPOINT  # the same run, as if trained with --capture-video
    torch.save(ckpt | {"args": ckpt["args"] | {"capture_video": True}}, filmed_run)
    for checkpoint, video in ((trained[0], True), (filmed_run, False)):
        filmed.clear()
        C.main(C.Args(eval_checkpoint=str(checkpoint), eval_episodes=1, capture_video=video))
        assert filmed == [video]


def test_eval_checkpoint_runs_on_the_device_its_command_line_says(trained, monkeypatch):
    devices, real = [], C.evaluate

    def evaluate(envs, agent, num_episodes, greedy, seed, device):
        devices.append(torch.device(device).type)
        return real(envs, agent, num_episodes, greedy, seed, torch.device("cpu"))

    monkeypatch.setattr(C, "evaluate", evaluate)
    monkeypatch.setattr(torch.nn.Module, "to", lambda module, *_, **__: module)  # no GPU here to move to
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # trained with --cuda, on a host with a GPU
    for cuda in (False, True):
        C.main(C.Args(eval_checkpoint=str(trained[0]), eval_episodes=1, cuda=cuda))
    assert devices == ["cpu", "cuda"]


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_a_new_run_logs_its_hyperparameters_and_derived_sizes_once_and_a_resumed_one_adds_none(module, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = module.Args()
    for folder, resumed_at in (("new", None), ("resumed", 4096)):
        module.open_writer(args, str(tmp_path / folder), resumed_at).close()
    texts = {}
    for folder in ("new", "resumed"):
        acc = EventAccumulator(str(tmp_path / folder))
        acc.Reload()
        tags = acc.Tags()["tensors"]
        texts[folder] = [t.tensor_proto.string_val[0].decode() for tag in tags for t in acc.Tensors(tag)]
    (table,) = texts["new"]
    derived = ["world_size", "batch_size", "minibatch_size", "num_iterations"]
    for name in [f.name for f in dataclasses.fields(args)] + derived:
        assert f"|{name}|{getattr(args, name)}|" in table
    assert texts["resumed"] == []


def test_evaluation_runs_one_environment_whatever_training_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = spy(monkeypatch, C, "evaluate")
    C.main(C.Args(**(RUN | {"num_envs": 4, "num_steps": 100, "total_timesteps": 400, "eval_episodes": 2})))
    ((envs, *_), _, returns) = calls[0]
    assert envs.num_envs == 1 and len(returns) == 2


# --- the non-finite stop -----------------------------------------------------------------------


def test_a_non_finite_update_stops_with_exit_1_and_one_line_leaving_the_last_good_checkpoint_byte_identical(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    good = {}

    def keep_bytes(result, path, *args):
        good["bytes"] = open(path, "rb").read()

    def poison_third(metrics, agent, *args):
        if len(updates) == 3:
            with torch.no_grad():
                agent.actor_logstd.fill_(float("nan"))

    updates = spy(monkeypatch, C, "update", after=poison_third)
    spy(monkeypatch, C, "save_checkpoint", after=keep_bytes)
    args = C.Args(**(RUN | {"save_every": 1, "total_timesteps": 2000}))
    with pytest.raises(SystemExit) as stop:
        C.main(args)
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: non-finite") and "iteration 3" in err[-1] and "untouched" in err[-1]
    run_dir = only_run(tmp_path)
    assert (run_dir / C.CHECKPOINT).read_bytes() == good["bytes"]  # iteration 2's, byte for byte
    assert C.load_checkpoint(str(run_dir / C.CHECKPOINT))["progress"]["iteration"] == 2
    assert [s for s, _ in scalars(run_dir)["charts/learning_rate"]] == [400, 800]  # the log up to the fault
    assert not (run_dir / "summary.json").exists()


@pytest.mark.parametrize("envs", [[], ["--num-envs", "2", "--async-envs"]], ids=["sync", "async"])
def test_a_diverging_run_ends_its_process_with_exit_1_one_error_line_no_traceback_and_a_finite_checkpoint(
    tmp_path, envs
):
    """Divergence for real (a learning rate of 1e38), not a poisoned parameter, in a real process, after a good
    checkpoint: a finished run's, given one more iteration at that rate. With --async-envs the env workers, which
    ignore SIGTERM, must not keep the process from exiting."""
    first = run_script(tmp_path, "ppo_continuous.py", *PENDULUM, "--total-timesteps", "512", *envs)
    assert first.returncode == 0, first.stderr
    path = only_run(tmp_path) / C.CHECKPOINT
    ckpt = torch.load(path, weights_only=True)
    more = ckpt["args"]["num_envs"] * ckpt["args"]["num_steps"]  # one more iteration, at a rate that diverges
    ckpt["args"] |= {"learning_rate": 1e38, "total_timesteps": 512 + more}
    torch.save(ckpt, path)
    good = path.read_bytes()
    proc = run_script(tmp_path, "ppo_continuous.py", "--resume", str(path))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    fault = f"error: non-finite loss or parameters at iteration {ckpt['progress']['iteration'] + 1};"
    assert lines[-1].startswith(fault) and "untouched" in lines[-1]
    assert "Traceback" not in proc.stderr
    assert path.read_bytes() == good  # the good checkpoint stays, whole and finite
    assert all(torch.isfinite(v).all() for v in C.load_checkpoint(str(path))["agent"].values())


# --- bad checkpoints ---------------------------------------------------------------------------


def other_shapes(ckpt_path, out) -> None:
    ckpt = torch.load(ckpt_path, weights_only=True)
    ckpt["args"]["env_id"] = "MountainCarContinuous-v0"  # 2 observations, not Pendulum's 3
    ckpt["progress"] |= {"iteration": 0, "global_step": 0}  # unfinished: --resume gets as far as the shapes
    torch.save(ckpt, out)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("missing", "No such file or directory"),
        ("truncated", "not a readable checkpoint"),
        ("garbage", "not a readable checkpoint"),
        ("other_script", "not written by ppo_atari.py"),
        ("other_shapes", "spaces"),
        ("other_action_bounds", "spaces"),
        ("unknown_args", "does not know"),
        ("not_a_dict", "not written by ppo_continuous.py"),
        ("other_agent", "does not fit this agent"),
        ("missing_weight", "does not fit this agent"),
    ],
)
@pytest.mark.parametrize("mode", ["--resume", "--eval-checkpoint"])
def test_bad_checkpoints_are_refused_with_one_line_exit_2_and_nothing_written(tmp_path, trained, kind, message, mode):
    good = trained[0]
    bad = tmp_path / "bad.pt"
    script = "ppo_atari.py" if kind == "other_script" else "ppo_continuous.py"
    if kind == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "garbage":
        bad.write_bytes(b"\x80\x4e" + bytes(range(256)) * 16)  # pickle's PROTO 78 first: torch warns, then fails
    elif kind == "other_script":
        bad.write_bytes(good.read_bytes())
    elif kind == "other_shapes":
        other_shapes(good, bad)
    elif kind == "other_action_bounds":  # the same shapes: the weights would load, the actions clip elsewhere
        ckpt = torch.load(good, weights_only=True)
        ckpt["spaces"][1] = ckpt["spaces"][1].replace("-2.0, 2.0", "-1.0, 1.0")
        assert ckpt["spaces"][1] == "Box(-1.0, 1.0, (1,), float32)"
        ckpt["progress"] |= {"iteration": 0, "global_step": 0}
        torch.save(ckpt, bad)
    elif kind == "not_a_dict":
        torch.save(torch.zeros(3), bad)
    elif kind in ("unknown_args", "other_agent", "missing_weight"):  # a newer version's flag; another network's
        ckpt = torch.load(good, weights_only=True)
        ckpt["progress"] |= {"iteration": 0, "global_step": 0}
        if kind == "unknown_args":
            ckpt["args"]["no_such_flag"] = 1
        elif kind == "other_agent":
            ckpt["agent"][next(iter(ckpt["agent"]))] = torch.zeros(1)
        else:  # a network without one of this agent's layers: that layer would go on from its init, unnoticed
            del ckpt["agent"][next(reversed(ckpt["agent"]))]
        torch.save(ckpt, bad)
    before = files(tmp_path)
    proc = run_script(tmp_path, script, mode, str(bad))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.strip().splitlines() if "A.L.E" not in line and "Stella" not in line]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], proc.stderr
    assert files(tmp_path) == before  # nothing written


def without_a_running_statistic(good, bad) -> None:
    """The checkpoint good, unfinished, its normalization missing the reward scaler's count (an older or hand-made
    file): written to bad."""
    ckpt = torch.load(good, weights_only=True)
    del ckpt["normalization"]["return_rms.count"]
    ckpt["progress"] |= {"iteration": 0, "global_step": 0}
    torch.save(ckpt, bad)


def test_resume_refuses_a_checkpoint_missing_a_running_statistic_in_one_line_exit_2(trained, tmp_path, capsys):
    """The statistics are part of what must fit: a missing one is bad input (one line, exit 2), not a traceback."""
    bad = tmp_path / "bad.pt"
    without_a_running_statistic(trained[0], bad)
    with pytest.raises(SystemExit) as stop:
        C.main(C.Args(resume=str(bad)))
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    assert err[0].startswith("error: the checkpoint does not fit this agent") and "return_rms.count" in err[0]
    assert files(tmp_path) == {"bad.pt"}  # nothing written


def test_checkpoints_never_run_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    path = tmp_path / "evil.pt"
    torch.save({"script": "ppo_continuous", "payload": Evil()}, path)
    proc = run_script(tmp_path, "ppo_continuous.py", "--eval-checkpoint", str(path))
    assert proc.returncode == 2 and not (tmp_path / "pwned").exists()


# --- reruns ------------------------------------------------------------------------------------


# Part II's own flags: how often to checkpoint, how long the closing evaluation plays (the gridworld has neither)
PART_TWO = ["--save-every", "1", "--eval-episodes", "2"]


@pytest.mark.parametrize(
    "script, flags, part_two",
    [
        ("ppo_continuous.py", PENDULUM + ["--total-timesteps", "1024"], PART_TWO),
        ("ppo_atari.py", BREAKOUT + ["--total-timesteps", "128"], PART_TWO),
        ("ppo_gridworld.py", ["--num-iterations", "5"], []),
    ],
)
def test_the_same_seed_logs_the_same_scalars_in_every_script_whatever_part_two_is_asked(
    tmp_path, script, flags, part_two
):
    """Reruns are exact, and Part II changes no number Part I computes (the README's promise): a second run that
    checkpoints every iteration and evaluates for longer trains to the same scalars and the same final weights."""
    results, weights = [], []
    for attempt in range(2):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        proc = run_script(folder, script, *flags, *(part_two if attempt else []))
        assert proc.returncode == 0, proc.stderr
        s = scalars(only_run(folder))
        results.append(
            {tag: values for tag, values in s.items() if tag != "charts/SPS" and not tag.startswith("eval/")}
        )
        if part_two:
            weights.append(torch.load(only_run(folder) / "checkpoint.pt", weights_only=True)["agent"])
    assert results[0] == results[1]
    if part_two:
        assert weights[0].keys() == weights[1].keys()
        for name, tensor in weights[0].items():
            assert torch.equal(tensor, weights[1][name]), name


# --- resuming on another number of processes, and what a checkpoint carries exactly ---------------------

SHORT_PENDULUM = dict(env_id="Pendulum-v1", num_steps=256, num_minibatches=4, update_epochs=1, eval_episodes=0)


def stop_at_iteration(monkeypatch, iteration: int) -> None:
    """The stop request of a signal, delivered to the loop at the given iteration."""
    real, seen = C.gather_iteration, []

    def gather(*args):
        metrics, episodes, signum = real(*args)
        seen.append(None)
        return metrics, episodes, signal.SIGINT if len(seen) == iteration else signum

    monkeypatch.setattr(C, "gather_iteration", gather)


@pytest.mark.parametrize("before, after", [(1, 2), (2, 1)])
def test_a_run_resumed_on_another_number_of_processes_keeps_its_budget_and_its_schedule(
    tmp_path, monkeypatch, before, after
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(C, "start_distributed", lambda agent, device: None)  # one process plays rank 0 of N
    monkeypatch.setenv("WORLD_SIZE", str(before))
    stop_at_iteration(monkeypatch, 3)
    with pytest.raises(SystemExit):
        C.main(C.Args(**SHORT_PENDULUM, total_timesteps=4096))
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(C, "start_distributed", lambda agent, device: None)
    monkeypatch.setenv("WORLD_SIZE", str(after))
    checkpoint = only_run(tmp_path) / C.CHECKPOINT
    stopped, batch = 3 * 256 * before, 256 * after
    final = stopped + (4096 - stopped) // batch * batch  # whole batches of the new size, within the budget
    summary = C.main(C.Args(resume=str(checkpoint)))
    assert summary["global_step"] == final <= 4096
    assert torch.load(checkpoint, weights_only=True)["progress"]["iteration"] == 3 + (final - stopped) // batch
    resumed = [(s, lr) for s, lr in scalars(only_run(tmp_path))["charts/learning_rate"] if s > stopped]
    assert [s for s, _ in resumed] == list(range(stopped + batch, final + 1, batch))
    for step, lr in resumed:  # the start rate times the share of the budget not yet trained
        assert lr == pytest.approx(3e-4 * (1 - (step - batch) / final), rel=1e-6)


def test_a_resumed_runs_summary_counts_every_episode_of_the_run_not_only_those_since_the_resume(tmp_path, monkeypatch):
    """summary.json of a stopped and resumed run counts its episodes, and averages its last returns, over the one
    history TensorBoard holds: the episodes before the checkpoint included."""
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as m:
        stop_at_iteration(m, STOP_AT)
        with pytest.raises(SystemExit):
            C.main(C.Args(**RUN))
    checkpoint = only_run(tmp_path) / C.CHECKPOINT
    assert torch.load(checkpoint, weights_only=True)["progress"]["episodes"] > 0  # episodes before the stop
    summary = C.main(C.Args(resume=str(checkpoint)))
    returns = [value for _, value in scalars(only_run(tmp_path))["charts/episodic_return"]]
    assert summary["episodes"] == len(returns)
    assert summary["mean_return_last_10"] == pytest.approx(np.mean(returns[-10:]), rel=1e-5)
    assert json.loads((only_run(tmp_path) / "summary.json").read_text())["episodes"] == len(returns)


def test_a_checkpoint_from_a_host_with_more_gpus_restores_this_process_s_gpu_only(monkeypatch):
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    agent = C.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters())
    gpu_states = [torch.full((16,), d, dtype=torch.uint8) for d in (0, 1)]  # what a 2-GPU host saved
    spaces = [str(envs.single_observation_space), str(envs.single_action_space)]
    ckpt = {"spaces": spaces, "agent": agent.state_dict(), "optimizer": optimizer.state_dict()}
    ckpt |= {"normalization": C.normalization_state(envs), "rng": [C.rng_state() | {"cuda": gpu_states}]}
    saved_without_gpu = [C.rng_state() | {"cuda": []}]  # what a host without a GPU saved
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a host with one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": restored.append((state, device)))
    C.restore_agent(ckpt, envs, agent, optimizer, frozen=True)
    assert len(restored) == 1 and torch.equal(restored[0][0], gpu_states[0]) and restored[0][1] in (0, "cuda", "cuda:0")
    restored.clear()
    ckpt["rng"] = saved_without_gpu  # this GPU keeps its seed
    C.restore_agent(ckpt, envs, agent, optimizer, frozen=True)
    assert restored == []
    envs.close()


def test_each_process_resumes_its_own_rng_streams(monkeypatch):
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    agent = C.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters())
    saved = []
    for seed in (0, 1):  # what ranks 0 and 1 saved
        torch.manual_seed(seed)
        saved.append(C.rng_state())
    spaces = [str(envs.single_observation_space), str(envs.single_action_space)]
    ckpt = {"spaces": spaces, "agent": agent.state_dict(), "optimizer": optimizer.state_dict()}
    ckpt |= {"normalization": C.normalization_state(envs), "rng": saved}
    monkeypatch.setattr(C, "RANK", 1)
    C.restore_agent(ckpt, envs, agent, optimizer, frozen=True)
    assert torch.equal(torch.get_rng_state(), saved[1]["torch"])
    envs.close()


@pytest.mark.parametrize("losses", [(float("nan"), 1.0), (1.0, float("nan")), (float("inf"), 1.0)])
def test_a_non_finite_policy_or_value_loss_alone_stops_the_run(tmp_path, losses):
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    metrics = {"losses/policy_loss": losses[0], "losses/value_loss": losses[1]}
    closed = []
    log = types.SimpleNamespace(close=lambda: closed.append(True))
    with pytest.raises(SystemExit) as stop:
        C.stop_unless_finite(C.Agent(envs), metrics, log, 3, str(tmp_path))
    assert stop.value.code == 1 and closed == [True]
    C.stop_unless_finite(C.Agent(envs), {"losses/policy_loss": 1.0, "losses/value_loss": 1.0}, log, 3, str(tmp_path))
    envs.close()


def test_a_non_finite_stop_before_any_checkpoint_says_none_was_written(tmp_path, capsys):
    """The stop's line names the last good checkpoint only where there is one: a run that diverges before its first
    checkpoint (--save-every 0 writes none until the end) must not send its user to --resume a missing file."""
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    log = types.SimpleNamespace(close=lambda: None)
    metrics = {"losses/policy_loss": float("nan"), "losses/value_loss": 1.0}
    with pytest.raises(SystemExit) as stop:
        C.stop_unless_finite(C.Agent(envs), metrics, log, 1, str(tmp_path))
    envs.close()
    assert stop.value.code == 1 and not (tmp_path / C.CHECKPOINT).exists()
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: non-finite loss or parameters at iteration 1; no checkpoint was written"
    ]


def test_normalization_counts_survive_a_checkpoint_exactly_beyond_float32(tmp_path):
    args = C.Args(env_id="Pendulum-v1")
    envs = C.make_envs(args, "test")
    agent = C.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters())
    find_wrapper(envs, C.Normalize).obs_rms.count = 2.0**25 + 1 + 1e-4  # counts start at 1e-4: a float
    assert C.normalization_state(envs)["obs_rms.count"].dtype == torch.float64
    progress = {"global_step": 0, "iteration": 0, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    C.save_checkpoint(str(tmp_path / "ckpt.pt"), agent, optimizer, envs, args, progress)
    fresh = C.make_envs(args, "test")
    C.restore_agent(C.load_checkpoint(str(tmp_path / "ckpt.pt")), fresh, C.Agent(fresh), None, frozen=True)
    assert find_wrapper(fresh, C.Normalize).obs_rms.count == 2.0**25 + 1 + 1e-4
    envs.close()
    fresh.close()


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_a_second_signal_quits_at_once_under_python_and_is_one_stop_under_torchrun(module, monkeypatch, capsys):
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # handlers called by hand, not installed
    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun: the second is torchrun's copy of the first
    under_torchrun = module.Interrupts()
    under_torchrun.handle(signal.SIGINT, None)
    under_torchrun.handle(signal.SIGTERM, None)
    assert under_torchrun.signum == signal.SIGINT and exits == []
    # the stop is said once, and promises no quit that a second Ctrl-C would not bring under torchrun
    assert capsys.readouterr().err == "\nSIGINT: stopping after this iteration\n"
    monkeypatch.delenv("WORLD_SIZE")
    under_python = module.Interrupts()
    under_python.handle(signal.SIGTERM, None)
    assert exits == []
    assert capsys.readouterr().err == "\nSIGTERM: stopping after this iteration (again to quit now)\n"
    under_python.handle(signal.SIGINT, None)
    assert under_python.signum == signal.SIGTERM and exits == [128 + signal.SIGINT]


@pytest.mark.parametrize("module", [C, A], ids=["continuous", "atari"])
def test_a_stopped_run_closes_with_sigint_and_sigterm_ignored_and_exits_128_plus_the_signal(module, tmp_path):
    """After its checkpoint a stopped run closes its logs and envs: no later signal (torchrun's SIGTERM to every
    worker once one has exited, a second Ctrl-C) may cut that short, so both are ignored before the closing."""
    closed, before = [], {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    seen = types.SimpleNamespace(close=lambda: closed.append({s: signal.getsignal(s) for s in before}))
    try:
        with pytest.raises(SystemExit) as stop:
            module.stop_on_signal(signal.SIGTERM, seen, seen, module.Args(), str(tmp_path))
        after = {sig: signal.getsignal(sig) for sig in before}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert stop.value.code == 128 + signal.SIGTERM
    ignored = {signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}
    assert closed == [ignored, ignored] and after == ignored  # already while the log and the envs close


def test_a_process_other_than_rank_0_shows_no_bar_evaluates_nothing_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Under torchrun every process runs main to its end: rank 0 alone shows the progress bar, evaluates the policy
    and writes eval.json and summary.json (another rank would evaluate for nothing and race rank 0's writes)."""
    monkeypatch.setattr(C, "RANK", 1)
    args = C.Args(env_id="Pendulum-v1", num_steps=256, eval_episodes=1)
    progress = {"global_step": 0, "iteration": 0, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    envs = C.make_envs(args, "test")
    evaluations = spy(monkeypatch, C, "evaluate")
    log = C.RunLog(args, str(tmp_path), progress, 512, False, "cpu")
    progress = C.advance(progress, 1, args.batch_size, 1.0, [])
    log.iteration(progress, {"losses/policy_loss": 0.0})
    assert C.finish_run(args, str(tmp_path), progress, C.Agent(envs), envs, log) == progress
    assert evaluations == [] and files(tmp_path) == set()
    assert capsys.readouterr() == ("", "")  # no bar, no summary line


def test_eval_checkpoint_under_torchrun_is_rank_0_s_alone(trained, tmp_path, monkeypatch, capsys):
    shutil.copy(trained[0], tmp_path / C.CHECKPOINT)  # its eval.json would be written beside it
    evaluations = spy(monkeypatch, C, "evaluate")
    monkeypatch.setattr(C, "RANK", 1)
    assert C.main(C.Args(eval_checkpoint=str(tmp_path / C.CHECKPOINT), eval_episodes=1)) == {}
    assert evaluations == [] and files(tmp_path) == {C.CHECKPOINT}
    assert capsys.readouterr() == ("", "")


def test_a_resumed_runs_speed_counts_only_the_steps_it_ran_itself(tmp_path, monkeypatch):
    args = C.Args(env_id="Pendulum-v1", num_steps=256)
    progress = {"global_step": 1000, "iteration": 4, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    log = C.RunLog(args, str(tmp_path), progress, 2024, True, "cpu")  # resumed at step 1000
    log.start_time = 50.0
    with monkeypatch.context() as m:
        m.setattr(C.time, "time", lambda: 52.0)  # one iteration of 256 steps took 2 s
        log.iteration(C.advance(progress, 5, args.batch_size, 1.0, []), {"losses/policy_loss": 0.0})
    log.close()
    assert log.sps == 128.0  # not 1256 / 2: the steps before the resume were not run here


# --- a checkpoint across hosts, GPUs and processes; the global random streams; a run without evaluation -----


def one_process_checkpoint(envs: gym.vector.VectorEnv, agent: C.Agent, optimizer: torch.optim.Optimizer) -> dict:
    """What save_checkpoint keeps for the agent, of a run of one process (its one RNG state)."""
    spaces = [str(envs.single_observation_space), str(envs.single_action_space)]
    ckpt = {"spaces": spaces, "agent": agent.state_dict(), "optimizer": optimizer.state_dict()}
    return ckpt | {"normalization": C.normalization_state(envs), "rng": [C.rng_state()]}


def test_a_checkpoint_keeps_the_random_state_of_every_process_in_rank_order(tmp_path, monkeypatch):
    """Under torchrun the checkpoint holds each process's RNG streams, gathered from all (rank 0 writes the file):
    with only rank 0's own, every other rank would resume on a fresh seed."""
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    agent = C.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters())
    torch.manual_seed(7)
    rank_1 = C.rng_state()  # what the other process of two holds
    monkeypatch.setattr(C, "gather_objects", lambda obj: [obj, rank_1])  # rank 0's, then rank 1's
    torch.manual_seed(3)
    own = C.rng_state()
    progress = {"global_step": 0, "iteration": 0, "kl_beta": 1.0, "episodes": 0, "recent_returns": []}
    C.save_checkpoint(str(tmp_path / C.CHECKPOINT), agent, optimizer, envs, C.Args(env_id="Pendulum-v1"), progress)
    envs.close()
    saved = C.load_checkpoint(str(tmp_path / C.CHECKPOINT))["rng"]
    assert len(saved) == 2
    assert torch.equal(saved[0]["torch"], own["torch"]) and torch.equal(saved[1]["torch"], rank_1["torch"])


def test_a_process_the_saved_run_lacked_resumes_with_its_own_seed(monkeypatch):
    # a one-process run resumed under torchrun with two: rank 1 finds no RNG state of its own and keeps its seed
    envs = C.make_envs(C.Args(env_id="Pendulum-v1"), "test")
    agent = C.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters())
    ckpt = one_process_checkpoint(envs, agent, optimizer)
    torch.manual_seed(123)
    own = torch.get_rng_state()
    monkeypatch.setattr(C, "RANK", 1)
    C.restore_agent(ckpt, envs, agent, optimizer, frozen=True)  # no IndexError
    assert torch.equal(torch.get_rng_state(), own)
    envs.close()


def test_each_process_saves_and_restores_the_random_state_of_its_own_gpu(monkeypatch):
    devices = []  # the GPU each CUDA RNG call names: the current device's generator is another GPU's under torchrun
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": devices.append(device) or torch.zeros(4))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": devices.append(device))
    monkeypatch.setattr(C, "LOCAL_RANK", 1)
    C.set_rng_state(C.rng_state())
    assert [torch.device("cuda", d) if isinstance(d, int) else torch.device(d) for d in devices] == [
        torch.device("cuda:1")
    ] * 2


def test_a_checkpoint_written_on_a_gpu_loads_on_a_host_without_one(tmp_path, monkeypatch):
    path = tmp_path / "gpu.pt"
    with monkeypatch.context() as m:  # its tensors tagged cuda:0, as a CUDA run writes them
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save({"script": C.SCRIPT_NAME, "args": {"env_id": "Pendulum-v1"}, "agent": {"w": torch.ones(2)}}, path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert C.load_checkpoint(str(path))["agent"]["w"].device.type == "cpu"


def test_the_random_state_round_trips_python_numpy_and_torch():
    # a user's env or library that draws from python's or numpy's global stream resumes on the same draws
    random.seed(5), np.random.seed(5), torch.manual_seed(5)  # noqa: NPY002 (the global stream, as such code uses it)
    saved = C.rng_state()
    expected = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    random.seed(6), np.random.seed(6), torch.manual_seed(6)  # noqa: NPY002 (a fresh process's own seeding)
    C.set_rng_state(saved)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected  # noqa: NPY002


def test_a_new_run_logs_its_hyperparameters_and_without_evaluation_writes_none(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)
    no_evaluation = {"num_steps": 64, "num_minibatches": 2, "total_timesteps": 128, "eval_episodes": 0}
    summary = C.main(C.Args(**(RUN | no_evaluation)))
    run = only_run(tmp_path)
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert any("hyperparameters" in tag for tag in acc.Tags()["tensors"])  # main's RunLog: a new run's table
    assert summary["eval_mean_return"] is None and not (run / "eval.json").exists()
    assert "eval/episodic_return" not in acc.Tags()["scalars"]


def test_an_exception_is_said_in_one_bounded_line():
    line = C.why(ValueError("x" * 5000 + "\nsecond line"))
    assert line.startswith("ValueError: xxx") and "\n" not in line and len(line) < 300
