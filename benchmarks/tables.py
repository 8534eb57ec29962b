"""Build the README's results tables from the run folders that benchmarks/grid.py made, or from the records
it committed (benchmarks/records/) where a run folder is missing.

    python benchmarks/tables.py                   # every table whose runs exist, as Markdown, with intervals
    python benchmarks/tables.py --per-seed        # and every run's own figures
    python benchmarks/tables.py --dir evidence    # where grid.py put runs/
    python benchmarks/tables.py --figure docs/intervals.png   # the intervals as a figure
    python benchmarks/tables.py --table1-figure docs/table1_paper.png   # Table 1 at 1M beside the paper's
    python benchmarks/tables.py --write           # the README's and docs' tables and quoted figures, from the records
    python benchmarks/tables.py --check           # exit 1 naming each page that differs from the records (the suite's)

The pages never copy a table by hand: each sits between "<!-- tables.py: NAME -->" and "<!-- /tables.py -->", and
every figure their prose quotes from the records is a phrase of benchmarks/quoted.py; --write and --check read the
committed records only, never a run folder of this machine.

Figures, per run: the mean of its last 10 training episodes and of its closing greedy evaluation (10
episodes, the mean action), both from summary.json, and the mean of its last 100 training episodes
(TensorBoard), the PPO paper's Table 1 score. Across seeds: mean +- std (numpy's population std, ddof 0, over the
seeds: the statistic of CleanRL's published tables).

Table 1's normalized score, as the paper computes it: per environment, a random policy's return maps to 0
and the best setting's mean return to 1; each run is scored so, and the scores of all runs of a setting
(every env and seed) are averaged. The random policy's returns are measured here (uniform actions,
RANDOM_EPISODES episodes per env, cached in benchmarks/records/random.json).

Intervals (Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice", with
its library rliable): per setting, the interquartile mean (IQM) of its normalized scores over every env and seed,
with a 95% stratified-bootstrap interval (runs resampled within each env, BOOTSTRAP_REPS times); per setting of
a study, the probability that a run of it beats a run of the defaults on the same env, with its interval. A
setting is called better or worse than the defaults only where that interval excludes 1/2. Normalization:
0 is the random policy's return; 1 is the defaults' mean return on that env in the studies, CleanRL's published
1M-step return on MuJoCo (Ant-v4 has none: left out of the aggregate), the human score of Mnih et al. (2015)
on Atari.
"""

import argparse
import itertools
import json
import math
import os
import re
import sys

import grid
import numpy as np
from quoted import QUOTED_IN

RANDOM_EPISODES = 100
RANDOM_SEED = 0
RANDOM_CACHE = os.path.join(grid.RECORDS_DIR, "random.json")  # committed beside the records
BOOTSTRAP_REPS = 2000  # stratified-bootstrap resamples per interval
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
IQM_CUT = 0.25  # the interquartile mean drops this fraction of runs from each end

# Published figures, beside ours (same envs and step budget).
# CleanRL: ppo_continuous_action.py on the v4 envs, 1M steps, 3 seeds, its last 100 episodes (its docs' benchmark
# table).
CLEANRL_MUJOCO = {
    "HalfCheetah-v4": "1442 +- 46",
    "Hopper-v4": "2383 +- 272",
    "InvertedPendulum-v4": "963 +- 22",
    "Walker2d-v4": "2288 +- 572",
    "Humanoid-v4": "716 +- 49",
}
# The PPO paper (Schulman et al. 2017) gives MuJoCo results as curves only (Figure 3, v1 envs): its clip-0.2 curves
# at 1M steps, read off the figure (approximate).
PAPER_MUJOCO = {
    "HalfCheetah-v4": "~1800",
    "Hopper-v4": "~2250",
    "InvertedDoublePendulum-v4": "~8000",
    "InvertedPendulum-v4": "~1000",
    "Reacher-v4": "~-7",
    "Swimmer-v4": "~110",
    "Walker2d-v4": "~3400",
}
# OpenAI baselines' ppo2 with the paper's settings: 1M steps, 6 seeds, v2 envs (the MuJoCo 1M benchmark page of
# openai/baselines). 1 of the paper's seven tasks' normalization (0: the random policy).
PPO2_MUJOCO = {
    "HalfCheetah-v4": 1668.6,
    "Hopper-v4": 2316.2,
    "InvertedDoublePendulum-v4": 7102.9,
    "InvertedPendulum-v4": 809.4,
    "Reacher-v4": -6.71,
    "Swimmer-v4": 111.2,
    "Walker2d-v4": 3425.0,
}
# CleanRL's ppo_continuous_action.py run here, on this kind of 2-core machine under gymnasium 1.4 (adapted only
# where the API changed), 1M steps, seeds 1-3, last 10 episodes: its published figures were made with other
# versions of gym and MuJoCo.
CLEANRL_HERE = {"HalfCheetah-v4": [1391.0, 3632.0, 3660.0]}
# Reward scaling on Hopper-v4 (docs/studies.md): 1M steps, the defaults, seeds 1-3, run by hand with either wrapper
# (no grid): per run its closing evaluation and its mean return over the last 200k steps, as (baselines' semantics,
# the default ScaleReward; gymnasium's NormalizeReward).
REWARD_SCALING_HOPPER = {
    "evaluation": ([3578.0, 3295.0, 1465.0], [3430.0, 3253.0, 728.0]),
    "last 200k steps": ([3387.0, 2305.0, 2105.0], [2809.0, 2656.0, 716.0]),
}
# Human scores (Mnih et al. 2015): 1 of Atari's normalization, the random agent's score its 0.
HUMAN_ATARI = {"BreakoutNoFrameskip-v4": 31.8, "PongNoFrameskip-v4": 9.3, "BeamRiderNoFrameskip-v4": 5775.0}
# Random agents on Atari (Mnih et al. 2015), and the PPO paper's last-100-episode scores at 10M steps.
RANDOM_ATARI = {"BreakoutNoFrameskip-v4": 1.7, "PongNoFrameskip-v4": -20.7, "BeamRiderNoFrameskip-v4": 363.9}
# Learning episodes a game ends in: one a life (the ALE's lives() at a game's start; Pong has none, so one), each
# followed by an autoreset step that counts toward the budget but is not trained on (docs/choices.md).
DONES_PER_GAME = {"BreakoutNoFrameskip-v4": 5, "PongNoFrameskip-v4": 1, "BeamRiderNoFrameskip-v4": 3}
PAPER_ATARI = {
    "BreakoutNoFrameskip-v4": "274.8 (10M)",
    "PongNoFrameskip-v4": "20.7 (10M)",
    "BeamRiderNoFrameskip-v4": "1590.0 (10M)",
}
# Atari at 10M steps (40M frames), 3 seeds each, the mean of the last 100 episodes: CleanRL's ppo_atari.py and
# OpenAI baselines' ppo2 as run in CleanRL's comparison (CleanRL's docs); the PPO paper's Table 6 is PAPER_ATARI.
CLEANRL_ATARI_10M = {
    "BreakoutNoFrameskip-v4": "414.66 +- 28.09",
    "PongNoFrameskip-v4": "20.36 +- 0.20",
    "BeamRiderNoFrameskip-v4": "1915.93 +- 484.58",
}
PPO2_ATARI_10M = {
    "BreakoutNoFrameskip-v4": "406.57 +- 31.55",
    "PongNoFrameskip-v4": "20.51 +- 0.50",
    "BeamRiderNoFrameskip-v4": "2642.97 +- 670.37",
}
# The PPO paper's Table 1 (7 MuJoCo envs, 3 seeds, 1M steps): average normalized score per setting.
PAPER_TABLE1 = {
    "none": -0.39,
    "clip-0.1": 0.76,
    "clip-0.2": 0.82,
    "clip-0.3": 0.70,
    "kl-adaptive-0.003": 0.68,
    "kl-adaptive": 0.74,
    "kl-adaptive-0.03": 0.71,
    "kl-fixed-0.3": 0.62,
    "kl-fixed": 0.71,
    "kl-fixed-3": 0.72,
    "kl-fixed-10": 0.69,
}
TABLE1_NAMES = {
    "none": "no clipping or penalty",
    "clip-0.1": "clipping, eps = 0.1",
    "clip-0.2": "clipping, eps = 0.2 (default)",
    "clip-0.3": "clipping, eps = 0.3",
    "kl-adaptive-0.003": "adaptive KL, d_targ = 0.003",
    "kl-adaptive": "adaptive KL, d_targ = 0.01",
    "kl-adaptive-0.03": "adaptive KL, d_targ = 0.03",
    "kl-fixed-0.3": "fixed KL, beta = 0.3",
    "kl-fixed": "fixed KL, beta = 1",
    "kl-fixed-3": "fixed KL, beta = 3",
    "kl-fixed-10": "fixed KL, beta = 10",
}
TABLE1_SHORT = {
    "none": "no clipping or penalty",
    **{f"clip-{eps}": f"clip {eps}" for eps in ("0.1", "0.2", "0.3")},
    **{f"kl-adaptive-{d}": f"adaptive KL {d}" for d in ("0.003", "0.03")},
    "kl-adaptive": "adaptive KL 0.01",
    **{f"kl-fixed-{beta}": f"fixed KL {beta}" for beta in ("0.3", "3", "10")},
    "kl-fixed": "fixed KL 1",
}
TABLE1_RUNS = len(grid.PAPER_ENVS) * len(grid.STUDY_SEEDS)  # a setting's runs at the paper's scale: 21
DETAILS_NAMES = {
    "default": "the defaults",
    "init-std-1.0": "initial std 1.0 (CleanRL's), not 0.5",
    "clip-vloss": "value clipping on (`--clip-vloss`, CleanRL's)",
    "no-bootstrap-truncation": "time limits as terminations (`--no-bootstrap-truncation`, CleanRL's)",
    "gymnasium-reward-norm": "gymnasium's NormalizeReward (CleanRL's), not baselines' semantics",
    "no-norm-adv": "no advantage normalization (`--no-norm-adv`)",
    "no-grad-clip": "no gradient-norm clipping (`--max-grad-norm inf`)",
}


def collect(
    runs_dir: str | None, grid_name: str, records_dir: str = grid.RECORDS_DIR
) -> dict[tuple[str, str], list[dict]]:
    """{(variant, env): [each finished seed's figures]} of one grid: from its run folder, else from its record (only
    the records where runs_dir is None)."""
    found: dict[tuple[str, str], list[dict]] = {}
    for run in grid.grid_runs(grid_name):
        state, folder = run.state(runs_dir) if runs_dir else ("missing", None)
        record = grid.make_record(run, folder) if state == "done" else grid.read_record(run, records_dir)
        if record is not None:
            found.setdefault((run.variant, run.env_id), []).append(record)
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
    "mujoco": "| env (1M steps) | seeds | last 100 episodes | greedy evaluation | CleanRL (published, last 100) "
    "| CleanRL (run here, last 10) | PPO paper (Fig. 3, v1) | baselines ppo2 (v2) |",
    "atari": "| game (1M steps = 4M frames) | seeds | last 10 games | greedy evaluation | random agent | PPO paper |",
}


def results_blocks(grids: dict[str, dict]) -> dict[str, list[str]]:
    """The defaults' results per env: MuJoCo beside CleanRL and the paper, Atari beside a random agent."""
    blocks = {}
    for grid_name, envs, digits in (("mujoco", grid.MUJOCO_ENVS, 0), ("atari", grid.ATARI_ENVS, 1)):
        found = grids[grid_name]
        if not found:
            continue
        lines = [RESULTS_HEADS[grid_name], "|" + " --- |" * (RESULTS_HEADS[grid_name].count("|") - 1)]
        for env_id in envs:
            runs = found.get(("default", env_id), [])
            if not runs:
                continue
            last = pm([r["last_100" if grid_name == "mujoco" else "last_10"] for r in runs], digits)  # as CleanRL's
            ev = pm([r["eval"] for r in runs], digits)
            if grid_name == "mujoco":
                beside = [
                    CLEANRL_MUJOCO.get(env_id, "-"),
                    pm(CLEANRL_HERE.get(env_id, [])),
                    PAPER_MUJOCO.get(env_id, "-"),
                    str(PPO2_MUJOCO.get(env_id, "-")),
                ]
            else:
                beside = [str(RANDOM_ATARI[env_id]), PAPER_ATARI[env_id]]
            lines.append(f"| {env_id} | {len(runs)} | {last} | {ev} | {' | '.join(beside)} |")
        blocks[grid_name] = [*lines, ""]
    return blocks


ATARI_10M_HEAD = (
    "| game (10M steps = 40M frames) | seeds | all of training | last 100 games | greedy evaluation "
    "| human-normalized (last 100) | CleanRL ppo_atari.py (10M) | baselines ppo2 (CleanRL's run) "
    "| PPO paper (Table 6, last 100) | hours (SPS) |"
)


def atari_10m_lines(found: dict) -> list[str]:
    """Atari at the script's own budget: per game the paper's two scores (the mean return over all of training and
    over the last 100 games), the greedy evaluation, the human-normalized score, beside the published figures."""
    lines = [ATARI_10M_HEAD, "|" + " --- |" * (ATARI_10M_HEAD.count("|") - 1)]
    for env_id in grid.ATARI_ENVS:
        runs = found.get(("default", env_id), [])
        if not runs:
            continue
        every = [r["mean_all"] if r.get("mean_all") is not None else np.mean([c[1] for c in r["curve"]]) for r in runs]
        human = [(r["last_100"] - RANDOM_ATARI[env_id]) / (HUMAN_ATARI[env_id] - RANDOM_ATARI[env_id]) for r in runs]
        hours = [r.get("train_time_s") or r["wall_time_s"] for r in runs]
        sps = [r["steps"] / t for r, t in zip(runs, hours)]
        cells = [pm(every, 1), pm([r["last_100"] for r in runs], 1), pm([r["eval"] for r in runs], 1), pm(human, 2)]
        cells += [CLEANRL_ATARI_10M[env_id], PPO2_ATARI_10M[env_id], PAPER_ATARI[env_id].removesuffix(" (10M)")]
        cells.append(f"{pm([t / 3600 for t in hours], 1)} ({pm(sps)})")
        lines.append(f"| {env_id} | {len(runs)} | {' | '.join(cells)} |")
    cpus = cpus_named([r for runs in found.values() for r in runs])
    lines.append(
        f"\nHours of training and steps per second on {cpus}: the hours summed over every process that "
        "trained a run (one cut and resumed has several), each with one or two threads beside other work (the "
        "default alone on a quiet machine is faster: [speed](benchmarks.md#speed))."
    )
    if max(len(runs) for runs in found.values()) < 2:
        lines.append("\nOne seed a game so far: the figures are that run's, with no spread and no interval.")
    return lines + [""]


def cpus_named(records: list[dict]) -> str:
    """The CPUs the records ran on, as prose: 'AMD EPYC and Intel Xeon' (the vendors' (R), (TM), 'Processor' cut);
    every machine that ran a resumed run, where its record names them ("cpus"), else the one that finished it."""
    cpus = [cpu for r in records for cpu in r.get("cpus") or [r.get("cpu")]]
    names = {re.sub(r"\s*\((R|TM)\)|\s+(CPU|Processor)$", "", cpu or "") for cpu in cpus}
    names = sorted(name or "a CPU not recorded" for name in names)
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def atari_10m_summary(found: dict) -> list[str]:
    """The README's line on the default Atari run: what each game reached at 10M steps, and in how long."""
    games = [(e, found[("default", e)]) for e in grid.ATARI_ENVS if ("default", e) in found]
    if not games:
        return ["No run has reached 10M steps yet.", ""]
    reached = [
        f"{short(e)} {pm([r['last_100'] for r in runs], 1)} (CleanRL {CLEANRL_ATARI_10M[e]})" for e, runs in games
    ]
    every = [r for _, runs in games for r in runs]
    seconds = [r.get("train_time_s") or r["wall_time_s"] for r in every]
    hours, sps = pm([t / 3600 for t in seconds], 1), pm([r["steps"] / t for r, t in zip(every, seconds)])
    cpus = cpus_named(every)
    low, high = min(len(runs) for _, runs in games), max(len(runs) for _, runs in games)  # seeds a game
    seeds = f"{low} seed{'s' if low > 1 else ''}" if low == high else f"{low} to {high} seeds"
    head = f"At 10M steps, {seeds} a game ({len(every)} run{'s' if len(every) > 1 else ''}), the last 100 games:"
    return [f"{head} {'; '.join(reached)}; {hours} hours a run ({sps} steps per second) on {cpus}.", ""]


def tuned_lines(grids: dict[str, dict], random: dict[str, float]) -> list[str]:
    """Each env's tuned setting (benchmarks/tune.py's study) against the defaults' runs (the mujoco grid's and the
    tuned grid's own): the returns, and P(a tuned run beats a default one) with its interval and verdict."""
    lines = []
    for (variant, env_id), tuned in sorted(grids["tuned"].items()):
        if variant != "study":
            continue
        defaults = grids["mujoco"].get(("default", env_id), []) + grids["tuned"].get(("default", env_id), [])
        found = {("tuned", env_id): tuned, ("defaults", env_id): defaults}
        st = study_stats(found, ["defaults", "tuned"], random, "defaults", (env_id,)).get("tuned", {})
        ci = st.get("p_improve_ci")
        p = (
            f"; P(better than the defaults) {st['p_improve']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] ({verdict(st)})"
            if ci
            else ""
        )
        figures = [
            f"{what} {pm([r['last_100'] for r in runs])} ({len(runs)} runs)"
            for what, runs in (("tuned", tuned), ("the defaults", defaults))
        ]
        evals = f"greedy evaluation {pm([r['eval'] for r in tuned])} against {pm([r['eval'] for r in defaults])}"
        lines += [f"{env_id}, tuned (tune.py), 1M steps: last 100 episodes {', '.join(figures)}; {evals}{p}", ""]
    return lines


def best_means(found: dict, variants: list[str], random: dict[str, float], envs: tuple) -> dict[str, float]:
    """{env: the best setting's mean last-100 return}: the paper's 1 of the normalized score, per env with runs."""
    best = {}
    for env_id in envs:
        means = [np.mean([r["last_100"] for r in found[(v, env_id)]]) for v in variants if (v, env_id) in found]
        if means and max(means) <= random[env_id]:
            sys.exit(f"error: no setting beats the random policy on {env_id}: its scores would flip sign")
        best |= {env_id: float(max(means))} if means else {}
    return best


def normalized_scores(
    found: dict, variants: list[str], random: dict[str, float], envs: tuple = grid.SMALL_ENVS
) -> dict[str, list[float]]:
    """{variant: every run's score}, random = 0 and the best variant's mean last-100 return = 1 per env."""
    scores: dict[str, list[float]] = {v: [] for v in variants}
    for env_id, best in best_means(found, variants, random, envs).items():
        for v in variants:
            for r in found.get((v, env_id), []):
                scores[v].append((r["last_100"] - random[env_id]) / (best - random[env_id]))
    return scores


def env_cells(found: dict, variant: str, envs: tuple = grid.SMALL_ENVS) -> list[str]:
    """Per env the setting's last-100 return over its seeds, mean +- std (seeds); a decimal where returns are small."""
    cells = []
    for env_id in envs:
        returns = [r["last_100"] for r in found.get((variant, env_id), [])]
        digits = 1 if returns and abs(np.mean(returns)) < 100 else 0
        cells.append(f"{pm(returns, digits)} ({len(returns)})" if returns else "-")
    return cells


def ablation_table(
    found: dict, variants: list[str], names: dict, random: dict, paper: dict | None, stats: dict
) -> list[str]:
    """A study: per setting its returns per env, the paper's normalized score, then its intervals (see intervals)."""
    scores = normalized_scores(found, variants, random)
    envs = " | ".join(e.removesuffix("-v4") for e in grid.SMALL_ENVS)
    head = f"| setting | {envs} | normalized score (1: the best here) | runs |" + (" PPO paper |" if paper else "")
    head += " IQM [95% CI] | P(better than the defaults) [95% CI] | verdict |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for v in variants:
        if scores[v]:
            row = f"| {names[v]} | {' | '.join(env_cells(found, v))} | {np.mean(scores[v]):.2f} | {len(scores[v])} |"
            lines.append(row + (f" {paper[v]:.2f} |" if paper else "") + interval_cells(stats.get(v, {})))
    return lines + [""]


def interval_cells(st: dict) -> str:
    """A row's IQM and P(improvement) with their intervals; one seed per env has none (a bootstrap over one run per
    env resamples nothing, so its interval would have no width)."""
    one_seed = st.get("seeds", 2) < 2
    ci = lambda k: " (one seed)" if one_seed else f" [{st[k][0]:.2f}, {st[k][1]:.2f}]"  # noqa: E731
    iqm = f"{st['iqm']:.2f}{ci('iqm_ci')}" if "iqm" in st else "-"
    p = f"{st['p_improve']:.2f}{ci('p_improve_ci')}" if "p_improve" in st else "-"
    return f" {iqm} | {p} | {verdict(st)} |"


def score_matrix(runs: dict[str, list[dict]], random: dict[str, float], reference: dict[str, float]) -> np.ndarray:
    """{env: runs} -> (seeds, envs) normalized last-100 scores, 0 random and 1 reference, of the seeds that ran on
    every env (rliable's layout: runs by tasks)."""
    envs = [e for e in runs if e in reference]
    seeds = sorted(set.intersection(*({r["seed"] for r in runs[e]} for e in envs))) if envs else []
    by_seed = {e: {r["seed"]: r["last_100"] for r in runs[e]} for e in envs}
    score = lambda e, seed: (by_seed[e][seed] - random[e]) / (reference[e] - random[e])  # noqa: E731
    return np.array([[score(e, seed) for e in envs] for seed in seeds]).reshape(len(seeds), len(envs))


def iqm(scores: np.ndarray) -> float:
    """The interquartile mean of every run on every env: rliable's aggregate_iqm (scipy's trim_mean, 25% cut from
    each end), in numpy: the bootstrap calls it thousands of times."""
    flat = np.sort(scores, axis=None)
    cut = int(IQM_CUT * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """(runs_x, envs), (runs_y, envs) -> P(a run of x beats a run of y on the same env), ties counted half, averaged
    over envs: rliable's probability_of_improvement (Mann-Whitney U / (runs_x * runs_y) per env), without scipy."""
    pairs_x, pairs_y = x[:, None, :], y[None, :, :]  # (runs_x, 1, envs), (1, runs_y, envs)
    per_env = (pairs_x > pairs_y).mean(axis=(0, 1)) + 0.5 * (pairs_x == pairs_y).mean(axis=(0, 1))  # (envs,)
    return float(per_env.mean())


def estimates(runs: dict, metric) -> tuple[dict, dict]:
    """rliable's stratified-bootstrap estimates (runs resampled within each env) of metric over each setting's
    (runs, envs) matrix, each from its own seeded stream: none depends on the settings beside it."""
    from rliable import library as rly

    point, ci = {}, {}
    for k, m in runs.items():
        np.random.seed(BOOTSTRAP_SEED)  # noqa: NPY002 (rliable draws its resamples from numpy's global RNG)
        one = rly.get_interval_estimates({k: m}, metric, reps=BOOTSTRAP_REPS, confidence_interval_size=CONFIDENCE)
        point[k], ci[k] = one[0][k], one[1][k]
    return point, ci


def intervals(matrices: dict[str, np.ndarray], baseline: str | None) -> dict[str, dict]:
    """Per setting: its IQM with the 95% stratified-bootstrap interval and, beside a baseline, the probability of
    improvement over it with its interval (rliable; runs resampled within each env)."""
    usable = {k: m for k, m in matrices.items() if m.size}
    point, iqm_ci = estimates(usable, lambda m: np.array([iqm(m)]))
    out = {
        k: {"iqm": float(point[k][0]), "iqm_ci": [float(x) for x in iqm_ci[k][:, 0]], "runs": m.size, "seeds": len(m)}
        for k, m in usable.items()
    }
    if baseline in usable:
        pairs = {
            k: (m, usable[baseline])
            for k, m in usable.items()
            if k != baseline and m.shape[1] == usable[baseline].shape[1]
        }
        if pairs:
            p, p_ci = estimates(pairs, probability_of_improvement)
            for k, (m, base) in pairs.items():
                out[k] |= {"p_improve": float(p[k]), "p_improve_ci": [float(x) for x in np.ravel(p_ci[k])]}
                # the smallest two-sided p an exact rank test could give these run counts: every run of one setting
                # above every run of the other on every env, each env's orderings equally likely under chance
                out[k]["least_p"] = 2.0 / math.comb(len(m) + len(base), len(m)) ** m.shape[1]
                out[k]["baseline_seeds"] = len(base)
    return out


def verdict(stats: dict) -> str:
    """'better' or 'worse' than the baseline only where the interval of P(improvement) excludes 1/2, and where the
    runs are enough for any ordering to exclude chance: 2 runs against 3 on one env can not, nor can one seed per env
    on either side (a bootstrap over so few runs gives an interval of width 0 when they do not overlap, which says
    nothing)."""
    if "p_improve_ci" not in stats:
        return "-"
    if min(stats.get("seeds", 2), stats.get("baseline_seeds", 2)) < 2 or stats.get("least_p", 0.0) > 1 - CONFIDENCE:
        return "too few runs"
    low, high = stats["p_improve_ci"]
    return "better" if low > 0.5 else "worse" if high < 0.5 else "not separated"


def interval_line(stats: dict, what: str, zero_one: str) -> list[str]:
    if "default" not in stats:  # no seed has run on every env yet (or no env of the normalization has a run)
        return [f"{what}: an interval takes the seeds run on every env, none so far: too few", ""]
    st = stats["default"]
    if st["seeds"] < 2:
        runs = f"{st['runs']} run{'s' if st['runs'] > 1 else ''}"
        return [f"{what}: an interval takes the seeds run on every env, one so far ({runs}): too few", ""]
    low, high = st["iqm_ci"]
    iqm = f"IQM of normalized scores ({zero_one}) {st['iqm']:.2f}, 95% CI [{low:.2f}, {high:.2f}]"
    return [f"{what}: {iqm}, {st['runs']} runs ({st['seeds']} seeds x {st['runs'] // st['seeds']} envs)", ""]


def iqm_spread_line(found: dict, stats: dict) -> list[str]:
    """Beside the Atari interval: which games' runs the IQM averages and how far apart the games score. With three
    games scored from a third of a human to fourteen times one, the games in the middle half of the runs set the
    IQM, and the stratified bootstrap resamples seeds within each game: its interval is the seeds' spread only."""
    if stats.get("default", {}).get("seeds", 0) < 2:
        return []
    runs = {e: found[("default", e)] for e in grid.ATARI_ENVS if ("default", e) in found}
    games, scores = list(runs), score_matrix(runs, RANDOM_ATARI, HUMAN_ATARI)  # (seeds, games)
    cut = int(IQM_CUT * scores.size)
    middle = np.unravel_index(np.argsort(scores, axis=None)[cut : scores.size - cut], scores.shape)[1]  # their games
    kept = ", ".join(f"{np.sum(middle == j)} {short(e)}" for j, e in enumerate(games) if np.any(middle == j))
    means = scores.mean(axis=0)  # (games,)
    low, high = int(np.argmin(means)), int(np.argmax(means))
    return [
        f"The IQM averages the middle {scores.size - 2 * cut} of the {scores.size} runs ({kept}); the games' mean "
        f"scores run from {means[low]:.2f} ({short(games[low])}) to {means[high]:.2f} ({short(games[high])}), so its "
        "interval, resampling seeds within each game, shows how the seeds spread, not how another game would score.",
        "",
    ]


def table1_at_1m(table1_1m: dict, mujoco: dict) -> dict:
    """Table 1 at 1M steps: the table1-1m grid's runs, and as its clip 0.2 row the mujoco grid's defaults on its envs
    (the same code and settings: grid.TABLE1_1M_FROM_MUJOCO)."""
    row = grid.TABLE1_1M_FROM_MUJOCO
    return table1_1m | {(row, e): mujoco[("default", e)] for e in grid.PAPER_ENVS if ("default", e) in mujoco}


TABLE1_PAPER_HEAD = (
    "| setting | runs | normalized score [95% CI] | PPO paper | IQM [95% CI] | P(better than clip 0.2) [95% CI] "
    "| verdict |"
)


def table1_paper(found: dict, random: dict[str, float]) -> tuple[dict[str, list[str]], dict[str, object]]:
    """The PPO paper's Table 1 at its scale (table1-1m): per setting the mean normalized score of its runs (per task
    0 the random policy, 1 the best setting's mean, the paper's definition) with a stratified-bootstrap interval
    (runs resampled within each task, the 1 held), beside the paper's figure; the IQM and P(better than clip 0.2) of
    the studies; the returns per task; and what the intervals say of the paper's ranking. Blocks and quoted figures."""
    variants = [v for v in grid.TABLE1_1M_VARIANTS if any((v, e) in found for e in grid.PAPER_ENVS)]
    envs = tuple(e for e in grid.PAPER_ENVS if any((v, e) in found for v in variants))
    scores, best = normalized_scores(found, variants, random, envs), best_means(found, variants, random, envs)
    by_variant = {v: {e: found[(v, e)] for e in envs if (v, e) in found} for v in variants}
    matrices = {v: score_matrix(runs, random, best) for v, runs in by_variant.items()}
    # an interval only where the matrix holds every run of the setting with 2+ seeds a task: over a part of them it
    # would bound another mean than the score beside it (one seed a task: an interval of width 0)
    whole = {v: m for v, m in matrices.items() if m.size == len(scores[v]) and len(m) >= 2}
    _, ci = estimates(whole, np.mean)
    everywhere = [v for v in variants if all((v, e) in found for e in envs)]  # comparable with clip 0.2 task by task
    stats = study_stats(found, everywhere, random, "clip-0.2", envs)
    lines = [TABLE1_PAPER_HEAD, "|" + " --- |" * (TABLE1_PAPER_HEAD.count("|") - 1)]
    quoted = stats_figures("table1-paper", stats)
    for v in variants:
        interval = "[{:.2f}, {:.2f}]".format(*np.ravel(ci[v])) if v in ci else "(runs to come)"
        score = f"{np.mean(scores[v]):.2f} {interval}"
        cells = f"{len(scores[v])} | {score} | {PAPER_TABLE1[v]:.2f} |{interval_cells(stats.get(v, {}))}"
        lines.append(f"| {TABLE1_NAMES[v]} | {cells}")
        quoted[f"table1-paper/{v}/score"], quoted[f"table1-paper/{v}/runs"] = float(np.mean(scores[v])), len(scores[v])
        if v in ci:
            quoted[f"table1-paper/{v}/low"], quoted[f"table1-paper/{v}/high"] = map(float, np.ravel(ci[v]))
    head = f"| setting | {' | '.join(e.removesuffix('-v4') for e in envs)} |"
    tasks = [head, "|" + " --- |" * (head.count("|") - 1)]
    tasks += [f"| {TABLE1_NAMES[v]} | {' | '.join(env_cells(found, v, envs))} |" for v in variants]
    blocks = {"table1-paper": [*lines, ""], "table1-paper-tasks": [*tasks, ""]}
    return blocks | table1_ranking(scores, stats, matrices), quoted


def paired_p_interval(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(runs_x, envs), (runs_y, envs) -> the 95% interval of P(a run of x beats a run of y): the stratified bootstrap
    of estimates() (each side's runs resampled within each env, percentile interval), in one vectorized draw, for
    Table 1's 45 pairs, which rliable's loop takes 15 to 20 s over (6 ms a pair here, 370 ms there)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    pick_x = rng.integers(0, len(x), size=(BOOTSTRAP_REPS, *x.shape))  # (reps, runs_x, envs): rows drawn per env
    pick_y = rng.integers(0, len(y), size=(BOOTSTRAP_REPS, *y.shape))
    xs, ys = np.take_along_axis(x[None], pick_x, axis=1), np.take_along_axis(y[None], pick_y, axis=1)
    pairs_x, pairs_y = xs[:, :, None, :], ys[:, None, :, :]  # (reps, runs_x, 1, envs), (reps, 1, runs_y, envs)
    wins = (pairs_x > pairs_y).mean(axis=(1, 2)) + 0.5 * (pairs_x == pairs_y).mean(axis=(1, 2))  # (reps, envs)
    low, high = np.percentile(wins.mean(axis=1), [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)])
    return float(low), float(high)


def table1_pairs(matrices: dict[str, np.ndarray], stats: dict[str, dict], done: list[str]) -> str:
    """The paper's order pair by pair: for every two settings with all their runs that the paper scores apart, do
    these runs keep its order (the interval of P(its higher setting beats its lower) above 1/2), reverse it (below)
    or leave it open? A pair with clip 0.2 takes the table's interval, so that the line never contradicts the table."""
    short = lambda v: TABLE1_SHORT[v]  # noqa: E731
    kept, reversed_, open_ = {}, [], 0  # kept: {the paper's higher setting: the lower ones it stays above}
    for high, low in itertools.combinations(sorted(done, key=lambda v: -PAPER_TABLE1[v]), 2):
        if PAPER_TABLE1[high] == PAPER_TABLE1[low]:  # the paper ties them (0.71): no order to keep
            continue
        if high == "clip-0.2":  # the paper's best: the table's P(the other beats clip 0.2), turned around
            p_low, p_high = stats[low]["p_improve_ci"]
            ci = (1 - p_high, 1 - p_low)
        else:
            ci = paired_p_interval(matrices[high], matrices[low])
        if ci[0] > 0.5:
            kept.setdefault(high, []).append(short(low))
        elif ci[1] < 0.5:
            reversed_.append(f"{short(low)} > {short(high)}")
        else:
            open_ += 1
    n_kept = sum(map(len, kept.values()))
    orderings = n_kept + len(reversed_) + open_
    above = "; ".join(f"{short(high)} > {', '.join(lows)}" for high, lows in kept.items())
    keep = f"{n_kept} ({above})" if kept else "none"
    reverse = f"{len(reversed_)} (here {'; '.join(reversed_)})" if reversed_ else "none"
    if not orderings:
        return "Pair by pair: no two settings the paper scores apart have all their runs yet."
    return (
        f"Pair by pair, among the settings with all their runs (P(the paper's higher setting beats its lower), the "
        f"same stratified bootstrap): of the paper's {orderings} ordering{'s' if orderings > 1 else ''} of them, "
        f"these runs keep {keep}, reverse {reverse} and leave {open_} open."
    )


def table1_ranking(
    scores: dict[str, list[float]], stats: dict[str, dict], matrices: dict[str, np.ndarray]
) -> dict[str, list[str]]:
    """What the runs say of the paper's Table 1, where clip 0.2 scores above every other setting: each setting with
    all its runs is better, worse or not separated from clip 0.2 by P(better)'s interval; the others wait for their
    runs. The README's sentence, and the studies' lines: those verdicts, then the paper's order by normalized score
    and this one's (settings with all their runs), and the paper's order pair by pair."""
    short = lambda v: TABLE1_SHORT[v]  # noqa: E731
    done = [v for v in TABLE1_NAMES if len(scores.get(v, [])) == TABLE1_RUNS and v in stats]
    baseline = ["clip-0.2"] if "clip-0.2" in done else []  # every setting waits until clip 0.2 has all its runs
    others = [v for v in done if v != "clip-0.2"] if baseline else []  # judged against the whole of clip 0.2
    verdicts = {word: [v for v in others if verdict(stats[v]) == word]
                for word in ("better", "worse", "not separated")}  # fmt: skip
    waiting = [short(v) for v in TABLE1_NAMES if v not in baseline + others]
    runs = sum(len(s) for s in scores.values())
    listed = lambda names: "; ".join(short(v) for v in names) or "none"  # noqa: E731
    total = len(TABLE1_NAMES) * TABLE1_RUNS
    so_far = " so far" if runs < total else ""  # the lines read as final once every run has landed
    counted = f"{runs} of {total} runs so far" if so_far else f"all {total} runs"
    head = (
        f"Table 1 at the paper's scale ({len(TABLE1_NAMES)} settings x {len(grid.PAPER_ENVS)} tasks x "
        f"{len(grid.STUDY_SEEDS)} seeds, 1M steps; {counted})"
    )
    if not baseline:
        summary = f"{head}: clip 0.2 has not all its runs yet, so whether it is the best is open."
    elif not others:
        summary = f"{head}: no setting but clip 0.2 has all its runs yet, so whether clip 0.2 is the best is open."
    else:
        best = "not the best" if verdicts["better"] else "the best as far as the intervals carry"
        summary = (
            f"{head}: of the {len(others)} other settings with all their runs, {len(verdicts['better'])} scored above "
            f"clip 0.2 where the intervals separate, {len(verdicts['worse'])} below, {len(verdicts['not separated'])} "
            f"not separated: clip 0.2 is {best}{so_far}."
        )
    line = (
        f"{head}, against clip 0.2 (the default): better {listed(verdicts['better'])}; worse "
        f"{listed(verdicts['worse'])}; not separated {listed(verdicts['not separated'])}"
        + (f"; runs still to come {'; '.join(waiting)}." if waiting else ".")
    )
    order = lambda pairs: " > ".join(f"{short(v)} ({value:.2f})" for v, value in pairs) or "none yet"  # noqa: E731
    paper = sorted(PAPER_TABLE1.items(), key=lambda kv: -kv[1])
    here = sorted(((v, float(np.mean(scores[v]))) for v in done), key=lambda kv: -kv[1])
    ranking = [line, "", f"By normalized score, the paper: {order(paper)}.", ""]
    ranking += [f"Here, the settings with all their runs: {order(here)}.", ""]
    pairs = table1_pairs(matrices, stats, others + baseline)
    return {"table1-paper-ranking": [*ranking, pairs, ""],
            "table1-paper-summary": [summary, ""]}  # fmt: skip


def study_stats(
    found: dict, variants: list[str], random: dict, baseline: str, envs: tuple = grid.SMALL_ENVS
) -> dict[str, dict]:
    """A study's intervals, normalized per env by the random policy (0) and the baseline's mean return (1)."""
    reference = {
        e: float(np.mean([r["last_100"] for r in found[(baseline, e)]])) for e in envs if (baseline, e) in found
    }
    if flipped := [e for e, mean in reference.items() if mean <= random[e]]:  # 1 at or below 0: scores flip sign
        sys.exit(f"error: {baseline} is no better than the random policy on {flipped[0]}: scores would flip sign")
    by_variant = {v: {e: found[(v, e)] for e in envs if (v, e) in found} for v in variants}
    return intervals({v: score_matrix(runs, random, reference) for v, runs in by_variant.items() if runs}, baseline)


def results_stats(found: dict, envs: tuple, random: dict[str, float], reference: dict[str, float]) -> dict:
    """The defaults' interval over every env with a run (of those with a reference), on the seeds each of them has
    run: a seed still running on one env waits for it, so the interval never stands for a subset of the envs."""
    runs = {e: found[("default", e)] for e in envs if ("default", e) in found and e in reference}
    return intervals({"default": score_matrix(runs, random, reference)}, None)


def figure(panels: dict[str, tuple[dict, dict]], path: str) -> None:
    """Each study's IQM intervals and P(improvement) intervals, one row of two panels per study."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(panels), 2, figsize=(12, 2.2 + 0.45 * max(len(s) for s, _ in panels.values())), squeeze=False
    )
    for row, (title, (stats, names)) in enumerate(panels.items()):
        labels = [names.get(k, k) for k in stats][::-1]
        for col, (key, xlabel) in enumerate(
            (("iqm", "IQM of normalized scores"), ("p_improve", "P(better than the defaults)"))
        ):
            ax = axes[row][col]
            for i, k in enumerate(list(stats)[::-1]):
                if key in stats[k]:
                    low, high = stats[k][f"{key}_ci"]
                    ax.plot([low, high], [i, i], lw=6, alpha=0.5, color="C0")
                    ax.plot([stats[k][key]], [i], "k|", ms=12)
            if key == "p_improve":
                ax.axvline(0.5, color="grey", ls="--", lw=1)
            ax.set_yticks(range(len(labels)), labels if col == 0 else [""] * len(labels), fontsize=8)
            ax.set_xlabel(xlabel)
            ax.set_title(f"{title}: 95% stratified-bootstrap intervals" if col == 0 else title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


Table1Row = tuple[str, int, float, tuple[float, float] | None, float]  # (name, runs, score, interval, the paper's)


def table1_rows(quoted: dict[str, object]) -> list[Table1Row]:
    """Table 1 at the paper's scale as its figure draws it, the paper's best first: per setting with runs, (its name,
    its runs, their normalized score, its 95% interval or None while runs are to come, the paper's score)."""
    rows = []
    for v in sorted(PAPER_TABLE1, key=lambda v: -PAPER_TABLE1[v]):
        if f"table1-paper/{v}/score" in quoted:
            low, high = (quoted.get(f"table1-paper/{v}/{end}") for end in ("low", "high"))
            interval = None if low is None else (low, high)
            score, runs = quoted[f"table1-paper/{v}/score"], quoted[f"table1-paper/{v}/runs"]
            rows.append((TABLE1_NAMES[v], runs, score, interval, PAPER_TABLE1[v]))
    return rows


def table1_figure(rows: list[Table1Row], path: str) -> None:
    """These runs' Table 1 beside the paper's: one line per setting, the runs' score with its interval (a hollow
    dot while runs are to come) and the paper's score. Each is normalized to its own best setting per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.38 * len(rows)))
    for i, (_, _, score, interval, paper) in enumerate(rows[::-1]):  # the paper's best at the top
        if interval:
            ax.plot(interval, [i, i], lw=6, alpha=0.5, color="C0")
        ax.plot([score], [i], "o", color="C0", mfc="C0" if interval else "none")
        ax.plot([paper], [i], "x", color="C3", ms=8)
    ax.axvline(0.0, color="grey", ls="--", lw=1)  # the random policy
    ax.set_yticks(range(len(rows)), [name for name, *_ in rows[::-1]], fontsize=8)
    ax.set_xlabel("normalized score (0: random policy, 1: the best setting on each task), averaged over the runs")
    runs, total = sum(row[1] for row in rows), len(TABLE1_NAMES) * TABLE1_RUNS
    runs = f"{runs} of {total} runs" if runs < total else f"all {total} runs"
    title = f"Table 1 at 1M steps, {len(grid.PAPER_ENVS)} tasks: these runs ({runs}) and the PPO paper's"
    ax.set_title(title, fontsize=10)
    keys = [
        Line2D([], [], color="C0", marker="o", lw=6, alpha=0.5, label="these runs, 95% interval"),
        Line2D([], [], color="C3", marker="x", ls="", label="the PPO paper"),
    ]
    if not all(interval for _, _, _, interval, _ in rows):  # the hollow dot's key only while it is drawn
        keys.insert(1, Line2D([], [], color="C0", marker="o", mfc="none", ls="", label="these runs, runs to come"))
    ax.legend(handles=keys, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


FLAGS_NAMES = {"defaults": "the defaults (table1's clip 0.2 runs)", "compile": "--compile"}


def flags_blocks(grids: dict[str, dict], random: dict[str, float]) -> tuple[dict[str, list[str]], dict[str, object]]:
    """Learning under --compile and --bf16 against the defaults' runs: each run's figures and P(better than the
    defaults), which should not be separated from 1/2 (the flags change only the last bits of the numbers)."""
    flags, blocks, quoted = grids["flags"], {}, {}
    compiled = {("compile", e): runs for (v, e), runs in flags.items() if v == "compile"}
    if compiled:
        found = compiled | {("defaults", e): grids["table1"][("clip-0.2", e)] for _, e in compiled}
        stats = study_stats(found, ["defaults", "compile"], random, "defaults")
        blocks["compile"] = ablation_table(found, ["defaults", "compile"], FLAGS_NAMES, random, None, stats)
        quoted |= stats_figures("compile", stats)
    bf16 = flags.get(("bf16", grid.FLAGS_GAME), [])
    if bf16:
        game, defaults = grid.FLAGS_GAME, grids["atari"].get(("default", grid.FLAGS_GAME), [])
        matrices = {
            k: score_matrix({game: runs}, RANDOM_ATARI, HUMAN_ATARI) for k, runs in (("d", defaults), ("b", bf16))
        }
        st = intervals(matrices, "d").get("b", {})
        quoted |= stats_figures("bf16", {"bf16": st}) if st else {}
        ci = st.get("p_improve_ci")
        p = (
            f"; P(better than the defaults) {st['p_improve']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] ({verdict(st)})"
            if ci
            else ""
        )
        ours, theirs = (pm([r["last_100"] for r in runs], 1) for runs in (bf16, defaults))
        blocks["bf16"] = [
            f"--bf16, {game}, 1M steps: last 100 games {ours} ({len(bf16)} runs), the defaults' {theirs}{p}",
            "",
        ]
    return blocks, quoted


def reward_scaling_stats(figures: dict[str, tuple[list[float], list[float]]]) -> dict[str, dict]:
    """Per figure, P(a run with baselines' reward scaling scores higher than one with gymnasium's NormalizeReward)."""
    out = {}
    for what, (baselines, gymnasium) in figures.items():
        matrices = {"baselines": np.array(baselines)[:, None], "gymnasium": np.array(gymnasium)[:, None]}
        out[what] = intervals(matrices, "gymnasium")["baselines"]
    return out


def reward_scaling_lines(figures: dict[str, tuple[list[float], list[float]]]) -> list[str]:
    """P(a run with baselines' reward scaling scores higher than one with gymnasium's NormalizeReward), per figure."""
    parts = []
    for what, stats in reward_scaling_stats(figures).items():
        low, high = stats["p_improve_ci"]
        parts.append(f"{what} {stats['p_improve']:.2f} [{low:.2f}, {high:.2f}] ({verdict(stats)})")
    head = "Reward scaling on Hopper-v4 (1M steps, 3 seeds): P(baselines' semantics higher than NormalizeReward)"
    return [f"{head}, 95% CI: " + "; ".join(parts), ""]


def per_seed(grids: dict[str, dict]) -> list[str]:
    lines = ["| grid | setting | env | seed | last 10 | last 100 | evaluation | steps |", "|" + " --- |" * 8]
    for grid_name, found in grids.items():
        for (variant, env_id), runs in sorted(found.items()):
            for r in sorted(runs, key=lambda r: r["seed"]):
                last_10, ev = (("-" if x is None else f"{x:.1f}") for x in (r["last_10"], r["eval"]))
                cells = f"{r['seed']} | {last_10} | {r['last_100']:.1f} | {ev} | {r['steps']}"
                lines.append(f"| {grid_name} | {variant} | {env_id} | {cells} |")
    return lines + [""]


def build(runs_dir: str | None, records_dir: str) -> tuple[dict, dict[str, list[str]], dict[str, str], dict]:
    """(the grids' runs, every table as named blocks of Markdown lines, the figures the pages quote in prose by name,
    the studies' intervals for the figure)."""
    grids = {name: collect(runs_dir, name, records_dir) for name in grid.GRIDS}
    if not any(grids.values()):
        sys.exit(f"error: no finished runs in {runs_dir} nor records in {records_dir}: run benchmarks/grid.py first")
    blocks, quoted, panels = results_blocks(grids), record_figures(grids), {}
    table1, details = grids["table1"], grids["details"]
    table1_1m = table1_at_1m(grids["table1-1m"], grids["mujoco"]) if grids["table1-1m"] else {}
    for (variant, env_id), runs in table1_1m.items():  # its clip 0.2 row: the mujoco grid's runs
        quoted |= run_figures(f"table1-1m/{variant}/{short(env_id)}", runs, env_id)
    cleanrl = {e: float(CLEANRL_MUJOCO[e].split(" +- ")[0]) for e in CLEANRL_MUJOCO}
    needed = [
        e
        for e in grid.MUJOCO_ENVS
        if (("default", e) in grids["mujoco"] and (e in cleanrl or e in PPO2_MUJOCO))
        or ((table1 or table1_1m or details or grids["flags"]) and e in grid.SMALL_ENVS)
        or any((v, e) in table1_1m for v in grid.TABLE1_1M_VARIANTS)
        or ("study", e) in grids["tuned"]
    ]
    random = random_returns(needed, os.path.join(records_dir, "random.json"))
    for env_id, runs in (
        (e, grids["mujoco"][("default", e)]) for e in CLEANRL_MUJOCO if ("default", e) in grids["mujoco"]
    ):
        ours, theirs = float(np.mean([r["last_100"] for r in runs])), cleanrl[env_id]  # both the last 100 episodes
        quoted |= {
            f"ratio/{short(env_id)}/cleanrl": ours / theirs,
            f"difference/{short(env_id)}/cleanrl": ours - theirs,
        }
        if env_id in CLEANRL_HERE:  # its runs here: the last 10 episodes, as ours beside them
            ours_10 = float(np.mean([r["last_10"] for r in runs]))
            quoted[f"ratio/{short(env_id)}/cleanrl-here"] = ours_10 / float(np.mean(CLEANRL_HERE[env_id]))
    if grids["mujoco"]:
        stats = results_stats(grids["mujoco"], grid.PAPER_ENVS, random, PPO2_MUJOCO)
        blocks["mujoco-paper-iqm"] = interval_line(
            stats,
            "MuJoCo, the defaults on the PPO paper's seven tasks (the seeds run on every task)",
            "0 random, 1 baselines' ppo2 at 1M steps",
        )
        quoted |= stats_figures("paper7", stats)
        stats = results_stats(grids["mujoco"], grid.MUJOCO_ENVS, random, cleanrl)
        blocks["mujoco-cleanrl-iqm"] = interval_line(
            stats,
            "MuJoCo, the defaults on the envs with a CleanRL figure (the seeds run on every task)",
            "0 random, 1 CleanRL's published return",
        )
        quoted |= stats_figures("cleanrl", stats)
    if grids["atari"]:
        stats = results_stats(grids["atari"], grid.ATARI_ENVS, RANDOM_ATARI, HUMAN_ATARI)
        blocks["atari-iqm"] = interval_line(stats, "Atari, the defaults", "0 random agent, 1 human, Mnih et al. 2015")
        quoted |= stats_figures("atari", stats)
    if grids["atari-10m"]:
        stats = results_stats(grids["atari-10m"], grid.ATARI_ENVS, RANDOM_ATARI, HUMAN_ATARI)
        blocks["atari-10m"] = atari_10m_lines(grids["atari-10m"])
        blocks["atari-10m"] += interval_line(
            stats, "Atari at 10M steps, the defaults", "0 random agent, 1 human, Mnih et al. 2015"
        ) + iqm_spread_line(grids["atari-10m"], stats)
    else:  # the pages' place for the table, until its first run lands
        blocks["atari-10m"] = ["No run of the `atari-10m` grid has reached 10M steps yet.", ""]
    blocks["atari-10m-summary"] = atari_10m_summary(grids["atari-10m"])
    if table1 or table1_1m or details:
        blocks["random-policy"] = [
            "Random policy, mean return: " + ", ".join(f"{e} {random[e]:.1f}" for e in grid.SMALL_ENVS),
            "",
        ]
    for name, found in (("table1", table1), ("table1-1m", table1_1m)):
        if found:
            stats = study_stats(found, list(grid.TABLE1_VARIANTS), random, "clip-0.2")
            blocks[name] = ablation_table(found, list(grid.TABLE1_VARIANTS), TABLE1_NAMES, random, PAPER_TABLE1, stats)
            panels[TITLES[name].split("\n")[-1].removesuffix(":")] = (stats, TABLE1_NAMES)
            quoted |= stats_figures(name, stats)
    if table1_1m:  # the paper's layout, its eleven settings on its seven tasks
        paper_blocks, paper_quoted = table1_paper(table1_1m, random)
        blocks, quoted = blocks | paper_blocks, quoted | paper_quoted
    if details:
        # the defaults of the details grid are table1's clip 0.2 runs
        merged = details | {("default", e): runs for (v, e), runs in table1.items() if v == "clip-0.2"}
        variants = ["default", *grid.DETAILS_VARIANTS]
        stats = study_stats(merged, variants, random, "default")
        blocks["details"] = ablation_table(merged, variants, DETAILS_NAMES, random, None, stats)
        panels["One detail at a time"] = (stats, DETAILS_NAMES)
        quoted |= stats_figures("details", stats)
    if grids["flags"]:
        flag_blocks, flag_figures = flags_blocks(grids, random)
        blocks, quoted = blocks | flag_blocks, quoted | flag_figures
    if grids["tuned"]:
        blocks["tuned"] = tuned_lines(grids, random)
        for (variant, env_id), tuned in grids["tuned"].items():
            if variant == "study":  # the defaults beside it: the mujoco grid's seeds and the tuned grid's own
                defaults = grids["mujoco"].get(("default", env_id), []) + grids["tuned"].get(("default", env_id), [])
                quoted |= run_figures(f"tuned/defaults/{short(env_id)}", defaults, env_id)
                found = {("tuned", env_id): tuned, ("defaults", env_id): defaults}
                stats = study_stats(found, ["defaults", "tuned"], random, "defaults", (env_id,))
                quoted |= stats_figures(f"tuned/{short(env_id)}", stats)
    blocks["reward-scaling"] = reward_scaling_lines(REWARD_SCALING_HOPPER)
    for what, stats in reward_scaling_stats(REWARD_SCALING_HOPPER).items():  # reward-scaling/evaluation/p, ...
        name = f"reward-scaling/{what.replace(' ', '-')}"
        quoted |= {f"{name}/p": stats["p_improve"], f"{name}/p_ci": "[{:.2f}, {:.2f}]".format(*stats["p_improve_ci"])}
    blocks["per-seed"] = per_seed(grids)
    return grids, blocks, quoted, panels


def record_figures(grids: dict[str, dict]) -> dict[str, float]:
    """Every run's figures for quoted.py, per env ({grid}/{variant}/{env}/...) and, for how long runs took, over a
    setting's envs: all its runs ({grid}/{variant}/all/{min|max}/{minutes|sps}) and each seed's (.../seed{n}/...)."""
    out: dict[str, float] = {}
    ends = tuple(f"/{stat}/{figure}" for stat in ("min", "max") for figure in ("minutes", "sps"))
    for grid_name, found in grids.items():
        for (variant, env_id), runs in found.items():
            out |= run_figures(f"{grid_name}/{variant}/{short(env_id)}", runs, env_id)
        for variant in sorted({v for v, _ in found}):
            every = [r for (v, _), runs in found.items() if v == variant for r in runs]
            groups = [("all", every)] + [
                (f"seed{n}", [r for r in every if r["seed"] == n]) for n in {r["seed"] for r in every}
            ]
            for group, runs in groups:
                speed = run_figures(f"{grid_name}/{variant}/{group}", runs, "")
                out |= {k: x for k, x in speed.items() if k.endswith(ends)}
    return out


def short(env_id: str) -> str:
    return env_id.split("NoFrameskip")[0].removesuffix("-v4")


def run_figures(prefix: str, runs: list[dict], env_id: str) -> dict[str, float]:
    """{prefix}/{seed}/{figure} of each run and {prefix}/{mean|std|min|max}/{figure} over them, for quoted.py."""

    def figure(r: dict, key: str) -> float:
        if key == "minutes":  # its whole training time (train_time_s sums every resumed process's)
            return (r.get("train_time_s") or r.get("wall_time_s") or math.nan) / 60
        if key == "sps" and r.get("train_time_s") and r.get("steps"):  # over every process of a resumed run (the
            return r["steps"] / r["train_time_s"]  # record's own sps is its last process's, since its resume)
        if key == "human":  # the human-normalized last 100 (Atari)
            low, high = RANDOM_ATARI.get(env_id, math.nan), HUMAN_ATARI.get(env_id, math.nan)
            return (r["last_100"] - low) / (high - low)
        if key == "reset_share" and r.get("episodes") and r.get("steps"):  # % of the steps that are autoreset steps
            return 100 * DONES_PER_GAME.get(env_id, math.nan) * r["episodes"] / r["steps"]
        return math.nan if r.get(key) is None else r[key]

    out = {}
    for key in ("last_10", "last_100", "eval", "minutes", "sps", "human", "reset_share"):
        values = [(r["seed"], figure(r, key)) for r in runs]
        values = [(seed, v) for seed, v in values if not math.isnan(v)]
        out |= {f"{prefix}/{seed}/{key}": v for seed, v in values}
        if values:
            for name, stat in (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max)):
                out[f"{prefix}/{name}/{key}"] = float(stat([v for _, v in values]))
    return out


def stats_figures(prefix: str, stats: dict) -> dict[str, object]:
    """Each setting's intervals for quoted.py: {prefix}/{setting}/{iqm|iqm_ci|runs|p|p_ci|verdict}."""
    out: dict[str, object] = {}
    for k, st in stats.items():
        out |= {f"{prefix}/{k}/iqm": st["iqm"], f"{prefix}/{k}/runs": st["runs"], f"{prefix}/{k}/verdict": verdict(st)}
        out[f"{prefix}/{k}/iqm_ci"] = "[{:.2f}, {:.2f}]".format(*st["iqm_ci"])
        if "p_improve" in st:
            out[f"{prefix}/{k}/p"] = st["p_improve"]
            out[f"{prefix}/{k}/p_ci"] = "[{:.2f}, {:.2f}]".format(*st["p_improve_ci"])
    return out


# Printed above a table (the pages have their own words for it).
TITLES = {
    "atari-10m": "Atari at the script's own budget, the defaults:",
    "table1": "Intervals: IQM of normalized scores (0 random, 1 the defaults' mean), P(better than the defaults)\n\n"
    "Table 1, 300k steps:",
    "table1-1m": "Table 1, 1M steps, three tasks:",
    "table1-paper": "Table 1 at the paper's scale, 1M steps (normalized score: 0 random, 1 the best setting's mean):",
    "table1-paper-tasks": "Table 1 at the paper's scale, the last 100 episodes per task, mean +- std (seeds):",
    "details": "One detail at a time, 300k steps:",
    "compile": "--compile, Table 1's clip 0.2 setting, 300k steps:",
}
# The pages (README.md, docs/*.md) show the tables, each between "<!-- tables.py: NAME -->" and "<!-- /tables.py -->":
# written by --write, and checked by --check (and by the suite) against the committed records.
BLOCK = re.compile(r"(<!-- tables\.py: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /tables\.py -->)", re.S)
FIELD = re.compile(r"\{([^{}:]+)(?::([^{}]*))?\}")  # {name} or {name:format spec} in a quoted phrase
# what a field matches on the page: an interval "[0.13, 0.16]", a number, or a verdict of up to three words
FIGURE = r"(\[[^\]]{1,30}\]|-?\d+(?:\.\d+)?|[a-z]+(?:\s[a-z]+){0,2})"


def phrase_pattern(phrase: str) -> re.Pattern:
    """A phrase of quoted.py -> a pattern matching it with any figures in its fields (a run of spaces and line breaks
    matches each space: the page may wrap the phrase anywhere)."""
    parts = FIELD.split(phrase)  # literal, name, spec, literal, name, spec, ..., literal
    literal = lambda text: r"\s+".join(re.escape(word) for word in text.split(" "))  # noqa: E731
    return re.compile(FIGURE.join(literal(parts[i]) for i in range(0, len(parts), 3)))


def refresh(page: str, text: str, blocks: dict[str, list[str]], quoted: dict[str, object]) -> str:
    """A page's text with every marked table and every quoted figure as the records give them."""

    def table(match: re.Match) -> str:
        name = match["name"]
        if name not in blocks:
            raise ValueError(f"{page}: no table named {name} (tables.py writes {', '.join(blocks)})")
        lines = blocks[name]
        while lines and not lines[-1]:
            lines = lines[:-1]
        return match[1] + "\n".join(lines) + "\n" + match[4]

    text = BLOCK.sub(table, text)
    for phrase in QUOTED_IN.get(page, []):
        if FIELD.fullmatch(phrase.split(" ")[-1]) or FIELD.fullmatch(phrase.split(" ")[0]):
            raise ValueError(f"{page}: the phrase {phrase!r} starts or ends in a figure: give it a word there")
        found = list(phrase_pattern(phrase).finditer(text))
        if len(found) != 1:
            why = "is gone (or reworded)" if not found else f"is on the page {len(found)} times: make it longer"
            raise ValueError(f"{page}: the phrase {phrase!r} {why}: update benchmarks/quoted.py")
        found = found[0]
        fields = FIELD.findall(phrase)  # [(name, spec)], one per group of the match
        for number, (name, spec) in reversed(list(enumerate(fields, 1))):  # from the end: offsets stay valid
            if name not in quoted:
                raise ValueError(f"{page}: no figure named {name} in the records")
            start, end = found.start(number), found.end(number)
            figure, line_break = format(quoted[name], spec), re.search(r"\s+", text[start:end])
            if line_break:  # "[0.63,\n1.00]": the page's line stays where it broke
                figure = figure.replace(" ", line_break[0], 1)
            text = text[:start] + figure + text[end:]
    return text


def pages_out_of_date(root: str, blocks: dict[str, list[str]], quoted: dict[str, object], write: bool) -> list[str]:
    """The pages whose tables or quoted figures differ from the records' (rewritten where write)."""
    stale, docs = [], os.path.join(root, "docs")
    for page in ["README.md", *(f"docs/{f}" for f in sorted(os.listdir(docs)) if f.endswith(".md"))]:
        path = os.path.join(root, page)
        with open(path) as f:
            text = f.read()
        try:
            new = refresh(page, text, blocks, quoted)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(2)
        if new != text:
            stale.append(page)
            if write:
                with open(path, "w") as f:
                    f.write(new)
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=grid.DEFAULT_DIR, help="the folder holding runs/")
    parser.add_argument("--records", default=grid.RECORDS_DIR, help="the records of runs whose folder is missing")
    parser.add_argument("--per-seed", action="store_true", help="also list every run's figures")
    parser.add_argument("--figure", help="also draw the studies' intervals to this PNG")
    parser.add_argument("--table1-figure", help="also draw Table 1 at the paper's scale beside its figures to this PNG")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--write", action="store_true", help="write the tables and quoted figures into the pages")
    what.add_argument("--check", action="store_true", help="exit 1 naming each page that differs from the records")
    parser.add_argument("--root", default=grid.ROOT, help="where the pages are (README.md, docs/)")
    parser.add_argument("--names", action="store_true", help="list the figures quoted.py can name, with their values")
    args = parser.parse_args()
    for flag, path in (("--figure", args.figure), ("--table1-figure", args.table1_figure)):
        if path:
            from plot_curves import check_out

            check_out(path, flag)
    if (args.write or args.check) and not (
        os.path.isfile(os.path.join(args.root, "README.md")) and os.path.isdir(os.path.join(args.root, "docs"))
    ):
        sys.exit(f"error: --root {args.root} holds no README.md and docs/ (the pages --write and --check read)")
    # the pages show the committed records only: a run folder of this machine never leaks into them
    runs_dir = None if args.write or args.check or args.names else os.path.join(args.dir, "runs")
    grids, blocks, quoted, panels = build(runs_dir, args.records)
    if args.names:
        print("\n".join(f"{name} = {value}" for name, value in quoted.items()))
        return
    if args.write or args.check:
        stale = pages_out_of_date(args.root, blocks, quoted, write=args.write)
        for page in stale:
            print(f"{'wrote' if args.write else 'differs from the records'}: {page}", file=sys.stderr)
        sys.exit(1 if stale and args.check else 0)
    shown = [name for name in blocks if name != "per-seed" or args.per_seed]
    lines = [line for name in shown for line in ([TITLES[name], ""] if name in TITLES else []) + blocks[name]]
    print("\n".join(lines))
    if args.figure and panels:
        figure(panels, args.figure)
    if args.table1_figure and table1_rows(quoted):
        table1_figure(table1_rows(quoted), args.table1_figure)


if __name__ == "__main__":
    try:
        main()
    except grid.RecordMismatch as e:  # one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
