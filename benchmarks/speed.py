"""Steps per second of a training script at its defaults, beside the ceiling set by the environment.

    python benchmarks/speed.py --script ppo_continuous.py --iterations 20 --runs 3
    python benchmarks/speed.py --script ppo_atari.py --iterations 20 --runs 3

Prints three things:
1. the script's own SPS (summary.json) over --runs whole runs of --iterations iterations at the defaults;
2. where one iteration's time goes (rollout, GAE, update), timed in-process;
3. the ceiling: as many steps of the same wrapped vector env with random actions and no learning,
   and of the bare env (no wrappers, no vector env).
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(path: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(path).removesuffix(".py"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def whole_runs(script: str, steps: int, runs: int, extra: list[str]) -> list[float]:
    sps = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, script, "--total-timesteps", str(steps), "--eval-episodes", "0", *extra]
            subprocess.run(cmd, cwd=tmp, check=True, capture_output=True)
            (run,) = os.listdir(os.path.join(tmp, "runs"))
            with open(os.path.join(tmp, "runs", run, "summary.json")) as f:
                sps.append(json.load(f)["sps"])
    return sps


def phase_times(m, args, iterations: int) -> dict[str, float]:
    """Seconds per iteration in each phase, timed around the script's own functions."""
    torch.manual_seed(args.seed)
    if hasattr(m, "CPU_THREADS"):
        torch.set_num_threads(m.CPU_THREADS)
    device = torch.device("cpu")
    envs = m.make_envs(args, "speed")
    agent = m.Agent(envs)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=m.ADAM_EPS, fused=True)
    buf = m.Rollout.allocate(envs, args.num_steps, device)
    obs, _ = envs.reset(seed=args.seed)
    state = m.EnvState(torch.as_tensor(obs), torch.zeros(args.num_envs, dtype=torch.bool))
    totals = {"rollout": 0.0, "gae": 0.0, "update": 0.0}
    for _ in range(iterations):
        t0 = time.perf_counter()
        state, _ = m.collect_rollout(envs, agent, buf, state, device)
        t1 = time.perf_counter()
        with torch.no_grad():
            next_value = agent.get_value(state.obs)
        adv, ret = m.compute_gae(
            buf.rewards, buf.values, next_value, buf.terminations, buf.truncations, args.gamma, args.gae_lambda
        )
        t2 = time.perf_counter()
        m.update(agent, optimizer, buf, adv, ret, args, args.kl_beta, args.clip_coef)
        t3 = time.perf_counter()
        totals["rollout"] += t1 - t0
        totals["gae"] += t2 - t1
        totals["update"] += t3 - t2
    envs.close()
    return {k: v / iterations for k, v in totals.items()}


def ceiling(m, args, steps: int) -> tuple[float, float]:
    """SPS of the wrapped vector env with random actions, and of one bare env."""
    envs = m.make_envs(args, "speed")
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(steps // args.num_envs)]
    t = time.perf_counter()
    for action in actions:
        envs.step(action)
    wrapped = steps / (time.perf_counter() - t)
    envs.close()
    env = gym.make(args.env_id, **m.ENV_KWARGS)
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
    return wrapped, bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", default="ppo_continuous.py")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("script_args", nargs="*", help="extra flags for the script (after --)")
    args = parser.parse_args()
    script = os.path.join(ROOT, args.script)
    m = load_script(script)
    defaults = m.Args()
    steps = args.iterations * defaults.batch_size
    print(
        f"{args.script}, {defaults.env_id}: {args.iterations} iterations of {defaults.batch_size} steps, "
        f"torch {torch.__version__}, {os.cpu_count()} cores"
    )
    sps = whole_runs(script, steps, args.runs, args.script_args)
    print(f"training SPS: median {np.median(sps):.0f} over {args.runs} runs ({', '.join(f'{x:.0f}' for x in sps)})")
    phases = phase_times(m, defaults, min(args.iterations, 5))
    total = sum(phases.values())
    print(
        "one iteration: "
        + ", ".join(f"{k} {v:.3f} s ({v / total:.0%})" for k, v in phases.items())
        + f"; {defaults.batch_size / total:.0f} SPS"
    )
    wrapped, bare = ceiling(m, defaults, steps)
    print(f"ceiling, random actions: {wrapped:.0f} SPS through the script's wrappers, {bare:.0f} SPS bare env")


if __name__ == "__main__":
    main()
