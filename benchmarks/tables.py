"""Build the README's results tables from the run folders that benchmarks/grid.py made.

    python benchmarks/tables.py                   # every table whose runs exist, as Markdown
    python benchmarks/tables.py --per-seed        # and every run's own figures
    python benchmarks/tables.py --dir evidence    # where grid.py put runs/

Figures, per run: the mean of its last 10 training episodes and of its closing greedy evaluation (10
episodes, the mean action), both from summary.json, and the mean of its last 100 training episodes
(TensorBoard), the PPO paper's Table 1 score. Across seeds: mean +- std (numpy's, over the seeds).

Table 1's normalized score, as the paper computes it: per environment, a random policy's return maps to 0
and the best setting's mean return to 1; each run is scored so, and the scores of all runs of a setting
(every env and seed) are averaged. The random policy's returns are measured here (uniform actions,
RANDOM_EPISODES episodes per env, cached in {dir}/random.json).
"""

import argparse
import json
import os
import sys

import grid
import numpy as np

LAST_EPISODES = 100  # the PPO paper scores a run by its last 100 training episodes
RANDOM_EPISODES = 100
RANDOM_SEED = 0
TAG = "charts/episodic_return"

# Published figures, beside ours (same envs and step budget).
# CleanRL: ppo_continuous_action.py on the v4 envs, 1M steps, 3 seeds (its docs' benchmark table).
CLEANRL_MUJOCO = {
    "HalfCheetah-v4": "1442 +- 46",
    "Hopper-v4": "2383 +- 272",
    "Walker2d-v4": "2288 +- 572",
    "Humanoid-v4": "716 +- 49",
}
# The PPO paper (Schulman et al. 2017) gives MuJoCo results as curves only (Figure 3, v1 envs); HalfCheetah's
# clip-0.2 curve ends near 1800 at 1M steps.
PAPER_MUJOCO = {"HalfCheetah-v4": "~1800"}
# Random agents on Atari (Mnih et al. 2015), and the PPO paper's last-100-episode scores at 10M steps.
RANDOM_ATARI = {"BreakoutNoFrameskip-v4": 1.7, "PongNoFrameskip-v4": -20.7, "BeamRiderNoFrameskip-v4": 363.9}
PAPER_ATARI = {
    "BreakoutNoFrameskip-v4": "274.8 (10M)",
    "PongNoFrameskip-v4": "20.7 (10M)",
    "BeamRiderNoFrameskip-v4": "1590.0 (10M)",
}
# The PPO paper's Table 1 (7 MuJoCo envs, 3 seeds, 1M steps): average normalized score per setting.
PAPER_TABLE1 = {
    "clip-0.1": 0.76,
    "clip-0.2": 0.82,
    "clip-0.3": 0.70,
    "kl-adaptive": 0.74,
    "kl-fixed": 0.71,
    "none": -0.39,
}
TABLE1_NAMES = {
    "clip-0.1": "clipping, eps = 0.1",
    "clip-0.2": "clipping, eps = 0.2 (default)",
    "clip-0.3": "clipping, eps = 0.3",
    "kl-adaptive": "adaptive KL, d_targ = 0.01",
    "kl-fixed": "fixed KL, beta = 1",
    "none": "no clipping or penalty",
}
DETAILS_NAMES = {
    "default": "the defaults",
    "init-std-1.0": "initial std 1.0 (CleanRL's), not 0.5",
    "clip-vloss": "value clipping on (`--clip-vloss`, CleanRL's)",
    "no-bootstrap-truncation": "time limits as terminations (`--no-bootstrap-truncation`, CleanRL's)",
    "gymnasium-reward-norm": "gymnasium's NormalizeReward (CleanRL's), not baselines' semantics",
}


def read_run(folder: str) -> dict:
    """One finished run's figures: last_10, eval (None without eval.json) and last_100."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    returns = [e.value for e in acc.Scalars(TAG)] if TAG in acc.Tags()["scalars"] else []
    return {
        "folder": folder,
        "steps": summary["global_step"],
        "last_10": summary["mean_return_last_10"],
        "eval": summary.get("eval_mean_return"),
        "last_100": float(np.mean(returns[-LAST_EPISODES:])) if returns else float("nan"),
    }


def collect(runs_dir: str, grid_name: str) -> dict[tuple[str, str], list[dict]]:
    """{(variant, env): [each finished seed's figures]} of one grid."""
    found: dict[tuple[str, str], list[dict]] = {}
    for run in grid.grid_runs(grid_name):
        state, folder = run.state(runs_dir)
        if state == "done":
            found.setdefault((run.variant, run.env_id), []).append(read_run(folder) | {"seed": run.seed})
    return found


def random_returns(env_ids: list[str], cache: str) -> dict[str, float]:
    """A uniformly random policy's mean return per env, measured once and cached."""
    import gymnasium as gym

    scores = {}
    if os.path.exists(cache):
        with open(cache) as f:
            scores = json.load(f)
    for env_id in env_ids:
        if env_id in scores:
            continue
        env = gym.make(env_id)
        env.action_space.seed(RANDOM_SEED)
        returns = []
        for episode in range(RANDOM_EPISODES):
            env.reset(seed=RANDOM_SEED + episode)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        env.close()
        scores[env_id] = float(np.mean(returns))
        with open(cache, "w") as f:
            json.dump(scores, f, indent=1)
    return scores


def pm(values: list[float], digits: int = 0) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} +- {np.std(values):.{digits}f}"


RESULTS_HEADS = {
    "mujoco": "| env (1M steps) | seeds | last 10 episodes | greedy evaluation | CleanRL (published) | PPO paper |",
    "atari": "| game (1M steps = 4M frames) | seeds | last 10 games | greedy evaluation | random agent | PPO paper |",
}


def results_table(runs_dir: str) -> list[str]:
    """The defaults' results per env: MuJoCo beside CleanRL and the paper, Atari beside a random agent."""
    lines = []
    for grid_name, envs, digits in (("mujoco", grid.MUJOCO_ENVS, 0), ("atari", grid.ATARI_ENVS, 1)):
        found = collect(runs_dir, grid_name)
        if not found:
            continue
        lines += [RESULTS_HEADS[grid_name], "| --- | --- | --- | --- | --- | --- |"]
        for env_id in envs:
            runs = found.get(("default", env_id), [])
            if not runs:
                continue
            last, ev = pm([r["last_10"] for r in runs], digits), pm([r["eval"] for r in runs], digits)
            if grid_name == "mujoco":
                beside = [CLEANRL_MUJOCO.get(env_id, "-"), PAPER_MUJOCO.get(env_id, "-")]
            else:
                beside = [str(RANDOM_ATARI[env_id]), PAPER_ATARI[env_id]]
            lines.append(f"| {env_id} | {len(runs)} | {last} | {ev} | {' | '.join(beside)} |")
        lines.append("")
    return lines


def normalized_scores(found: dict, variants: list[str], random: dict[str, float]) -> dict[str, list[float]]:
    """{variant: every run's score}, random = 0 and the best variant's mean last-100 return = 1 per env."""
    scores: dict[str, list[float]] = {v: [] for v in variants}
    for env_id in grid.SMALL_ENVS:
        means = [np.mean([r["last_100"] for r in found[(v, env_id)]]) for v in variants if (v, env_id) in found]
        if not means:
            continue
        best = max(means)
        if best <= random[env_id]:
            sys.exit(f"error: no setting beats the random policy on {env_id}: its scores would flip sign")
        for v in variants:
            for r in found.get((v, env_id), []):
                scores[v].append((r["last_100"] - random[env_id]) / (best - random[env_id]))
    return scores


def env_cells(found: dict, variant: str) -> list[str]:
    cells = []
    for env_id in grid.SMALL_ENVS:
        runs = found.get((variant, env_id), [])
        cells.append(f"{pm([r['last_100'] for r in runs])} ({len(runs)})" if runs else "-")
    return cells


def ablation_table(found: dict, variants: list[str], names: dict, random: dict, paper: dict | None) -> list[str]:
    scores = normalized_scores(found, variants, random)
    envs = " | ".join(e.removesuffix("-v4") for e in grid.SMALL_ENVS)
    head = f"| setting | {envs} | normalized score | runs |" + (" PPO paper |" if paper else "")
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for v in variants:
        if scores[v]:
            row = f"| {names[v]} | {' | '.join(env_cells(found, v))} | {np.mean(scores[v]):.2f} | {len(scores[v])} |"
            lines.append(row + (f" {paper[v]:.2f} |" if paper else ""))
    return lines + [""]


def per_seed(grids: dict[str, dict]) -> list[str]:
    lines = ["| grid | setting | env | seed | last 10 | last 100 | evaluation | steps |", "|" + " --- |" * 8]
    for grid_name, found in grids.items():
        for (variant, env_id), runs in sorted(found.items()):
            for r in sorted(runs, key=lambda r: r["seed"]):
                last_10, ev = (("-" if x is None else f"{x:.1f}") for x in (r["last_10"], r["eval"]))
                cells = f"{r['seed']} | {last_10} | {r['last_100']:.1f} | {ev} | {r['steps']}"
                lines.append(f"| {grid_name} | {variant} | {env_id} | {cells} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=grid.DEFAULT_DIR, help="the folder holding runs/")
    parser.add_argument("--per-seed", action="store_true", help="also list every run's figures")
    args = parser.parse_args()
    runs_dir = os.path.join(args.dir, "runs")
    if not os.path.isdir(runs_dir):
        sys.exit(f"error: no {runs_dir}: run benchmarks/grid.py first")
    lines = results_table(runs_dir)
    table1, details = collect(runs_dir, "table1"), collect(runs_dir, "details")
    if table1 or details:
        random = random_returns(list(grid.SMALL_ENVS), os.path.join(args.dir, "random.json"))
        lines += ["Random policy, mean return: " + ", ".join(f"{e} {random[e]:.1f}" for e in grid.SMALL_ENVS), ""]
    if table1:
        lines += ablation_table(table1, list(grid.TABLE1_VARIANTS), TABLE1_NAMES, random, PAPER_TABLE1)
    if details:
        # the defaults of the details grid are table1's clip 0.2 runs
        merged = details | {("default", e): runs for (v, e), runs in table1.items() if v == "clip-0.2"}
        lines += ablation_table(merged, ["default", *grid.DETAILS_VARIANTS], DETAILS_NAMES, random, None)
    if args.per_seed:
        lines += per_seed(
            {
                "mujoco": collect(runs_dir, "mujoco"),
                "atari": collect(runs_dir, "atari"),
                "table1": table1,
                "details": details,
            }
        )
    if not lines:
        sys.exit(f"error: no finished runs in {runs_dir}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
