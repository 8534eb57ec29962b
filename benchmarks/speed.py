"""Steps per second of a training script on 1 or N processes, where one iteration's time goes, and the ceiling
set by the environment; or this checkout's SPS against another commit's, side by side.

    python benchmarks/speed.py --script ppo_continuous.py --iterations 20 --runs 3
    python benchmarks/speed.py --script ppo_atari.py --iterations 20 --runs 3
    python benchmarks/speed.py --processes 2 --iterations 20 --runs 3      # 1 process, then 2 under torchrun
    python benchmarks/speed.py --against HEAD~1 --runs 5 --sps-only        # this checkout against a commit
    python benchmarks/speed.py --iterations 2 --runs 1 -- --env-id Pendulum-v1 --num-steps 256   # script flags
    python benchmarks/speed.py --flag compile --runs 3 --sps-only               # with --compile against without
    python benchmarks/speed.py --script ppo_atari.py --flag bf16 bf16+compile --runs 3 --sps-only

Prints, after the machine (CPU model, usable cores, torch version):
1. the script's own SPS (summary.json) over --runs whole runs of --iterations iterations at the defaults
   (and the flags after --): median and spread (min-max). With --processes N > 1, on 1 process and on N
   (torchrun --standalone; the scripts join with gloo on the CPU, NCCL between GPUs), every process at
   OMP_NUM_THREADS = usable cores // N, and the speed-up. Every process runs its own --num-envs
   environments, so N processes make an N times larger batch: the same iterations are N times the steps.
   With --against COMMIT, the commit's SPS too, its runs interleaved with this checkout's (A B A B ...) so
   that a machine's drift hits both alike, and the ratio of the medians (above 1: this checkout is faster).
   With --flag NAME, this checkout with --NAME added (NAME+OTHER: --NAME --OTHER) too, interleaved the same
   way, and its ratio to this checkout without it (above 1: the flag is faster).
2. where one iteration's time goes, timed in-process (one process, the CPU) around the script's own
   functions: env (envs.step), inference (the policy's call), storage (the rest of the rollout: writing
   the buffer, converting), GAE (with the bootstrap value), update. A checkout whose script lacks one of
   those functions, or calls it otherwise, is skipped, with the reason.
3. the checkpoint: its size, and the median time of a write and a read through the script's own
   save_checkpoint and load_checkpoint (a fresh agent, its Adam moments filled, into a temporary folder).
4. the ceiling: as many steps of the script's wrapped vector env with random actions and no learning, and
   of the bare env (no wrappers, no vector env).
--sps-only prints 1 alone.

Every run starts from a scratch copy of its checkout's ppo_*.py files, taken at the start (so edits made
meanwhile do not leak in). COMMIT is checked out with `git worktree add --detach` into a temporary folder,
copied, and removed. Run it on a quiet machine.
"""

import argparse
import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
import tyro
from cores import cpu_model, usable_cores

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ("ppo_continuous.py", "ppo_atari.py")
THIS = "this checkout"
BREAKDOWN_ITERATIONS = 5  # at most, timed in-process
PHASES = ("env", "inference", "storage", "GAE", "update")
CHECKPOINT_REPEATS = 5  # writes and reads of a checkpoint timed; the median is reported


def machine() -> str:
    """The CPU model (/proc/cpuinfo), the cores this process may use of the machine's, torch's version."""
    cpu = cpu_model()
    gpu = f", GPU {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}" if torch.cuda.is_available() else ""
    return f"machine: {cpu}, {usable_cores()} usable cores of {os.cpu_count()}, torch {torch.__version__}{gpu}"


def scratch_copy(checkout: str, dest: str) -> str:
    """dest holding checkout's ppo_*.py files, as they are now."""
    os.makedirs(dest)
    for name in sorted(os.listdir(checkout)):
        if name.startswith("ppo_") and name.endswith(".py"):
            shutil.copy(os.path.join(checkout, name), dest)
    return dest


def commit_copy(commit: str, dest: str, repo: str = ROOT) -> str:
    """dest holding commit's ppo_*.py files (from a temporary detached worktree, removed at once); its label."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=repo, capture_output=True, text=True)
    if sha.returncode != 0:
        sys.exit(f"error: no commit {commit!r}: {sha.stderr.strip()}")
    tree = tempfile.mkdtemp(prefix="speed-worktree-")
    os.rmdir(tree)  # git makes it
    added = subprocess.run(["git", "worktree", "add", "--detach", tree, commit], cwd=repo, capture_output=True)
    if added.returncode != 0:
        sys.exit(f"error: cannot check out {commit}: {added.stderr.decode().strip()}")
    try:
        scratch_copy(tree, dest)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=repo, capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
    sha = sha.stdout.strip()
    return commit if commit == sha else f"{commit} ({sha})"


def launch_command(script: str, processes: int) -> list[str]:
    """Plain python for one process, torchrun for more."""
    if processes == 1:
        return [sys.executable, script]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}", script]


def run_sps(script: str, processes: int, steps: int, flags: list[str], threads: int) -> float:
    """Global SPS (summary.json) of one whole run of `steps` steps on `processes` processes, in a scratch folder."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*launch_command(script, processes), "--total-timesteps", str(steps), "--eval-episodes", "0", *flags]
        env = os.environ | {"OMP_NUM_THREADS": str(threads)}
        done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        (run,) = os.listdir(os.path.join(tmp, "runs"))
        with open(os.path.join(tmp, "runs", run, "summary.json")) as f:
            return json.load(f)["sps"]


def measure(
    scripts: dict[str, str], counts: list[int], steps: Callable[[int], int], runs: int, run_one: Callable
) -> dict[tuple[str, int], list[float]]:
    """SPS of each checkout's script at each process count, --runs times, the checkouts interleaved (A B A B):
    {(label, processes): [sps of each run]}."""
    sps: dict[tuple[str, int], list[float]] = {}
    for count in counts:
        for i in range(runs):
            for label, script in scripts.items():
                figure = run_one(script, count, steps(count))
                sps.setdefault((label, count), []).append(figure)
                print(f"  run {i + 1}/{runs}, {label}, {count} process(es): {figure:.0f} SPS", flush=True)
    return sps


def spread(values: list[float]) -> str:
    """The median and the spread (min-max) of a few SPS figures."""
    return (
        f"median {np.median(values):.0f} SPS (min-max {min(values):.0f}-{max(values):.0f}, "
        f"{len(values)} run{'s' if len(values) > 1 else ''})"
    )


def ratio(a: list[float], b: list[float]) -> float:
    return float(np.median(a) / np.median(b))


def sps_lines(
    sps: dict[tuple[str, int], list[float]], labels: list[str], counts: list[int], flagged: tuple[str, ...] = ()
) -> list[str]:
    """Each checkout's median and spread at each process count; this checkout's ratio to the other, and each flagged
    variant's ratio to this checkout; the speed-up."""
    lines = []
    for count in counts:
        lines += [f"{label}, {count} process(es): {spread(sps[label, count])}" for label in labels]
        for other in labels[1:]:
            fast, slow = (other, labels[0]) if other in flagged else (labels[0], other)
            times = ratio(sps[fast, count], sps[slow, count])
            lines.append(f"ratio {fast} / {slow}, {count} process(es): {times:.3f} (above 1: {fast} is faster)")
    for count in counts[1:]:
        for label in labels:
            speedup = ratio(sps[label, count], sps[label, counts[0]])
            lines.append(
                f"{label}: speed-up {speedup:.2f}x on {count} processes, scaling efficiency {speedup / count:.0%}"
            )
    return lines


def load_script(path: str, name: str):
    """The script at path as a module called name (registered, so that dataclasses and pickles find it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def call_by_name(fn: Callable, values: dict):
    """fn called with the values its parameters are named for; a required parameter not among them is an error."""
    params = inspect.signature(fn).parameters
    missing = [n for n, p in params.items() if n not in values and p.default is inspect.Parameter.empty]
    if missing:
        raise TypeError(f"{fn.__name__} wants {', '.join(missing)}")
    return fn(**{n: values[n] for n in params if n in values})


def timed(obj, method: str, totals: dict[str, float], key: str) -> None:
    """Time every call of obj.method into totals[key] (an attribute of the instance, removed with `del`)."""
    real = getattr(obj, method)

    def call(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - t

    setattr(obj, method, call)


NEEDED = ("make_envs", "Agent", "Rollout", "EnvState", "collect_rollout", "compute_gae", "update", "ADAM_EPS")


def phase_times(m, args, iterations: int) -> dict[str, float]:
    """Seconds per iteration in each phase, timed around the script's own functions on one process on the CPU, after
    one iteration untimed (the warm-up: --compile compiles in it)."""
    missing = [name for name in NEEDED if not hasattr(m, name)]
    if missing:
        raise AttributeError(f"no {', '.join(missing)}")
    torch.manual_seed(args.seed)
    torch.set_num_threads(getattr(m, "CPU_THREADS", 1))
    device = torch.device("cpu")
    envs = m.make_envs(args, "speed")
    agent = m.Agent(envs)
    if getattr(args, "bf16", False):
        m.autocast_bf16(agent, device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=m.ADAM_EPS, fused=True)
    buf = m.Rollout.allocate(envs, args.num_steps, device)
    obs, _ = envs.reset(seed=args.seed)
    state = m.EnvState(torch.as_tensor(obs), torch.zeros(args.num_envs, dtype=torch.bool))
    totals = dict.fromkeys(PHASES, 0.0)
    values = {"envs": envs, "agent": agent, "buf": buf, "device": device, "optimizer": optimizer, "args": args}
    values |= {"gamma": args.gamma, "gae_lambda": args.gae_lambda, "kl_beta": args.kl_beta, "clip_coef": args.clip_coef}
    values |= {"bootstrap_truncation": getattr(args, "bootstrap_truncation", True)}
    try:
        for i in range(iterations + 1):
            if i == 1:  # the warm-up is not counted
                totals = dict.fromkeys(PHASES, 0.0)
            t0 = time.perf_counter()
            env_before, inference_before = totals["env"], totals["inference"]
            timed(envs, "step", totals, "env")
            policy_call = "act" if hasattr(agent, "act") else "get_action_and_value"  # the rollout's per-step call
            timed(agent, policy_call, totals, "inference")
            try:
                state, _ = call_by_name(m.collect_rollout, values | {"state": state})
            finally:
                delattr(envs, "step")
                delattr(agent, policy_call)  # the update's policy calls are the update's
            t1 = time.perf_counter()
            spent = (totals["env"] - env_before) + (totals["inference"] - inference_before)
            totals["storage"] += (t1 - t0) - spent
            with torch.no_grad():
                next_value = agent.get_value(state.obs)
            buffers = ("rewards", "values", "terminations", "truncations")
            advantages, returns = call_by_name(
                m.compute_gae, values | {"next_value": next_value} | {k: getattr(buf, k) for k in buffers}
            )
            t2 = time.perf_counter()
            call_by_name(m.update, values | {"advantages": advantages, "returns": returns})
            totals["GAE"] += t2 - t1
            totals["update"] += time.perf_counter() - t2
    finally:
        envs.close()
    return {k: v / iterations for k, v in totals.items()}


def breakdown(m, args, iterations: int) -> str:
    """One line: the seconds and share of each phase of one iteration, or why there is none."""
    try:
        phases = phase_times(m, args, iterations)
    except Exception as e:  # an older script without these functions, or with other signatures
        return f"breakdown skipped: {type(e).__name__}: {e}"
    total = sum(phases.values())
    per_phase = ", ".join(f"{k} {v:.3f} s ({v / total:.0%})" for k, v in phases.items())
    return f"one iteration ({iterations} timed): {per_phase}; {args.num_envs * args.num_steps / total:.0f} SPS"


def wrapped_ceiling(m, args, steps: int) -> float:
    """SPS of the script's wrapped vector env with random actions."""
    envs = m.make_envs(args, "speed")
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(max(1, steps // args.num_envs))]
    t = time.perf_counter()
    for action in actions:
        envs.step(action)
    wrapped = len(actions) * args.num_envs / (time.perf_counter() - t)
    envs.close()
    return wrapped


def bare_ceiling(env_id: str, env_kwargs: dict, steps: int) -> float:
    """SPS of one bare env (no wrappers, no vector env) with random actions."""
    env = gym.make(env_id, **env_kwargs)
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(steps)]
    t = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    bare = steps / (time.perf_counter() - t)
    env.close()
    return bare


def checkpoint_times(m, args) -> tuple[float, float, float]:
    """The script's own checkpoint of a fresh agent whose Adam moments are filled (one step), as a run's are: its
    megabytes, and the median seconds of a write (save_checkpoint: a temporary file, renamed) and of a read
    (load_checkpoint, which checks it too), over CHECKPOINT_REPEATS of each."""
    envs = m.make_envs(args, "speed")
    agent = m.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=m.ADAM_EPS)
    sum(p.sum() for p in agent.parameters()).backward()
    optimizer.step()  # Adam's two moments per weight: most of a checkpoint's size
    writes, reads = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "checkpoint.pt")
            for _ in range(CHECKPOINT_REPEATS):
                t = time.perf_counter()
                m.save_checkpoint(path, agent, optimizer, envs, args, {"global_step": 0})
                writes.append(time.perf_counter() - t)
                t = time.perf_counter()
                m.load_checkpoint(path)
                reads.append(time.perf_counter() - t)
            size = os.path.getsize(path) / 1e6
    finally:
        envs.close()
    return size, float(np.median(writes)), float(np.median(reads))


def phase_and_ceiling_lines(
    scripts: dict[str, str], modules: dict, flags: list[str], iterations: int, steps: int, extra: dict | None = None
):
    """For each checkout (and --flag variant, with its extra flags): its breakdown; then its checkpoint and its
    wrapped env's ceiling (or why not; one per checkout); then the bare env's ceiling."""
    extra = extra or {}
    for label, script in scripts.items():
        try:
            if label not in modules:
                modules[label] = load_script(script, f"{os.path.basename(script).removesuffix('.py')}_{len(modules)}")
            m_args = parse_script_args(modules[label], flags + extra.get(label, []))
        except (Exception, SystemExit) as e:  # tyro exits on flags an older script lacks
            yield f"{label}: breakdown and ceiling skipped: cannot load the script ({type(e).__name__}: {e})"
            continue
        yield f"{label}: {breakdown(modules[label], m_args, min(iterations, BREAKDOWN_ITERATIONS))}"
        if label in extra:  # the same envs as this checkout's
            continue
        try:
            size, write, read = checkpoint_times(modules[label], m_args)
            yield (
                f"{label}: checkpoint {size:.2f} MB: write {write * 1e3:.1f} ms, read {read * 1e3:.1f} ms "
                f"(save_checkpoint, load_checkpoint; median of {CHECKPOINT_REPEATS})"
            )
        except Exception as e:  # an older script without them, or with other signatures
            yield f"{label}: checkpoint skipped: {type(e).__name__}: {e}"
        try:
            wrapped = wrapped_ceiling(modules[label], m_args, steps)
            yield f"{label}: ceiling, random actions: {wrapped:.0f} SPS through the script's wrappers"
        except Exception as e:
            yield f"{label}: ceiling skipped: {type(e).__name__}: {e}"
    m = modules[THIS]
    script_args = parse_script_args(m, flags)  # the script's gym.make kwargs, the user's --env-kwargs over its own
    env_kwargs = getattr(m, "ENV_KWARGS", {}) | json.loads(getattr(script_args, "env_kwargs", "{}"))
    bare = bare_ceiling(script_args.env_id, env_kwargs, steps)
    yield f"ceiling, random actions: {bare:.0f} SPS bare env (no wrappers, no vector env)"


def parse_script_args(m, flags: list[str]):
    """The script's Args as its own command line makes them from flags (tyro, as the script's __main__)."""
    return tyro.cli(m.Args, args=flags)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", choices=SCRIPTS, default="ppo_continuous.py")
    parser.add_argument("--iterations", type=int, default=20, help="iterations per whole run (per process count)")
    parser.add_argument("--runs", type=int, default=3, help="whole runs per checkout and process count")
    parser.add_argument("--processes", type=int, default=1, help="N > 1: also on N processes under torchrun")
    parser.add_argument("--against", metavar="COMMIT", help="also measure this git commit, interleaved")
    parser.add_argument("--flag", nargs="+", default=[], metavar="NAME", help="also with --NAME (NAME+OTHER: both)")
    parser.add_argument("--sps-only", action="store_true", help="no breakdown and no ceiling")
    parser.add_argument("script_args", nargs="*", help="flags for the script (after --)")
    args = parser.parse_args(argv)
    if min(args.iterations, args.runs, args.processes) < 1:
        parser.error("--iterations, --runs and --processes must be positive")
    if any(f.startswith("--total-timesteps") for f in args.script_args):
        parser.error("the length is --iterations (of --num-envs x --num-steps steps), not --total-timesteps")
    print(machine(), flush=True)
    threads = max(1, usable_cores() // args.processes)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the scripts loaded here size their threads by it too
    counts = sorted({1, args.processes})
    with tempfile.TemporaryDirectory() as tmp:
        folders = {THIS: scratch_copy(ROOT, os.path.join(tmp, "this"))}
        if args.against:
            folders[commit_copy(args.against, os.path.join(tmp, "against"))] = os.path.join(tmp, "against")
        extra = {}  # the flags each --flag variant adds, by its label
        for i, name in enumerate(args.flag):
            flags = [f"--{part}" for part in name.split("+")]
            label = f"{THIS} {' '.join(flags)}"
            folders[label], extra[label] = scratch_copy(ROOT, os.path.join(tmp, f"flag{i}")), flags
        scripts = {label: os.path.join(folder, args.script) for label, folder in folders.items()}
        flags_of = {scripts[label]: flags for label, flags in extra.items()}
        stem = args.script.removesuffix(".py")
        modules = {THIS: load_script(scripts[THIS], f"{stem}_this")}
        script_args = parse_script_args(modules[THIS], args.script_args)
        local_batch = script_args.num_envs * script_args.num_steps
        print(
            f"{args.script}, {script_args.env_id}: {args.iterations} iteration(s) of {local_batch} steps per process, "
            f"{threads} thread(s) per process (OMP_NUM_THREADS)",
            flush=True,
        )
        run_one = lambda script, count, steps: run_sps(  # noqa: E731
            script, count, steps, args.script_args + flags_of.get(script, []), threads
        )
        try:
            sps = measure(scripts, counts, lambda count: args.iterations * count * local_batch, args.runs, run_one)
        except RuntimeError as e:
            sys.exit(f"error: {e}")
        print("\n".join(sps_lines(sps, list(scripts), counts, tuple(extra))), flush=True)
        if args.sps_only:
            return
        ceiling_steps = args.iterations * local_batch
        lines = phase_and_ceiling_lines(scripts, modules, args.script_args, args.iterations, ceiling_steps, extra)
        for line in lines:
            print(line, flush=True)


if __name__ == "__main__":
    main()
