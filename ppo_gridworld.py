"""The textbook PPO in NumPy: a tabular softmax policy and critic on a small gridworld, every
gradient written by hand, graded against the exact optimum from value iteration.

    python ppo_gridworld.py                           # PPO with the clipped objective, 40 iterations
    python ppo_gridworld.py --objective kl-adaptive   # the PPO paper's KL-penalty variant
    python ppo_gridworld.py --ablation                # 5 seeds, aggressive updates, with and without the clip
    python ppo_gridworld.py --surrogate-study         # the surrogate L(pi') against the true J(pi')
    tensorboard --logdir runs

Sections, in the same order as the other scripts: 1. Args  2. Environment (and the exact solver that
grades PPO; PPO itself never sees the dynamics)  3. Agent  4. Algorithm (pure functions, including the
section's exercises)  5. Rollout  6. Update  7. Logging  8. Main
"""

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import tyro

if TYPE_CHECKING:  # the algorithm needs NumPy alone; torch only for TensorBoard, imported in main
    from torch.utils.tensorboard import SummaryWriter

# ---------------------------------------------------------------------------------------------
# 1. Args
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Args:
    exp_name: str = os.path.basename(__file__).removesuffix(".py")
    """name of this experiment, part of the run folder's name"""
    seed: int = 1
    """seed of the environments' and the update's random numbers"""
    num_envs: int = 16
    """gridworld copies run in lockstep"""
    num_steps: int = 32
    """steps per environment per rollout"""
    num_iterations: int = 40
    """rollout-and-update iterations (40 x 16 x 32 = 20,480 transitions)"""
    update_epochs: int = 4
    """passes over each rollout"""
    num_minibatches: int = 4
    """minibatches per epoch"""
    learning_rate: float = 0.05
    """Adam's step size on the policy's logits"""
    anneal_lr: bool = False
    """decay the step size linearly: --learning-rate at the first iteration, 1/num_iterations of it at the last
    (the neural scripts' default; off here, as in the textbook: a constant step)"""
    critic_learning_rate: float = 0.5
    """fraction of the way each visited cell's value moves toward its targets' mean, per minibatch"""
    gamma: float = 0.9
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    objective: Literal["clip", "kl-adaptive", "kl-fixed", "none"] = "clip"
    """policy objective: clipped surrogate, KL penalty (adaptive or fixed beta), or plain surrogate"""
    clip_coef: float = 0.2
    """the clip range epsilon"""
    kl_beta: float = 1.0
    """weight of the KL penalty (its starting value for kl-adaptive)"""
    kl_target: float = 0.01
    """kl-adaptive's d_targ"""
    ent_coef: float = 0.01
    """weight of the entropy bonus"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_vloss: bool = False
    """clip the critic's move within --clip-coef of its value at collection, as the policy's ratio is clipped"""
    target_kl: float | None = None
    """stop an update at the first minibatch whose approx KL exceeds this, before its step (CleanRL: at an epoch end)"""
    ablation: bool = False
    """run the clip ablation instead of one training run"""
    surrogate_study: bool = False
    """run the surrogate study instead of one training run"""

    @property
    def batch_size(self) -> int:
        """transitions per rollout"""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """samples per minibatch"""
        return self.batch_size // self.num_minibatches


# The ablation's aggressive settings: a small batch, many epochs on one big minibatch, a large step.
ABLATION = dict(num_envs=8, num_steps=16, update_epochs=30, num_minibatches=1, learning_rate=0.1)  # 2x the default
ABLATION_SEEDS = 5
ADV_EPS = 1e-8  # keeps advantage normalization finite when all advantages are equal
MIN_MINIBATCH = 2  # samples: a normalized minibatch of one has advantage 0, so no policy gradient
NEAR_OPTIMAL = 0.01  # "reached the optimum": J(pi) within this of V*
VISITED = 0.01  # critic and greedy actions are graded on cells s with (1 - gamma) rho(s) >= 1%
Q_TIE = 1e-6  # actions whose Q* is within this of the best count as optimal


def check_args(args: Args) -> str | None:
    """The first problem with the arguments, or None. Checked before anything is written."""
    for name in ("num_envs", "num_steps", "num_iterations", "update_epochs", "num_minibatches"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}"
    if args.batch_size % args.num_minibatches:
        return f"--num-minibatches {args.num_minibatches} does not divide the batch of {args.batch_size}"
    if args.norm_adv and args.batch_size // args.num_minibatches < MIN_MINIBATCH:
        return f"--num-minibatches {args.num_minibatches} makes minibatches of one sample, normalized to advantage 0"
    if not 0 <= args.seed < 2**32:  # numpy's generators take no negative seed; the bound is the neural scripts'
        return f"--seed must lie in [0, 2**32), got {args.seed}"
    if nan := [name for name, value in vars(args).items() if isinstance(value, float) and np.isnan(value)]:
        return f"--{nan[0].replace('_', '-')} must be a number, got nan"  # NaN passes every <= and <
    if min(args.learning_rate, args.clip_coef, args.kl_target, args.kl_beta) <= 0:
        return "--learning-rate, --clip-coef, --kl-target and --kl-beta must be positive"
    if not 0 < args.critic_learning_rate <= 1:  # a fraction of the way to the targets: above 1 overshoots them
        return f"--critic-learning-rate must lie in (0, 1], got {args.critic_learning_rate}"
    if args.target_kl is not None and args.target_kl <= 0:
        return f"--target-kl must be positive, got {args.target_kl}"
    if not (0 <= args.gamma < 1 and 0 <= args.gae_lambda <= 1):
        return "--gamma must lie in [0, 1) and --gae-lambda in [0, 1]"
    if args.ablation and args.surrogate_study:
        return "choose one of --ablation and --surrogate-study"
    return None


# ---------------------------------------------------------------------------------------------
# 2. Environment: the gridworld, and its exact solution (for grading only)
# ---------------------------------------------------------------------------------------------

# S start, G goal (+1, ends the episode), X trap (-1, ends the episode), . empty (reward 0).
# The edges are walls: a move into one leaves the agent in place. With probability SLIP the
# chosen move is replaced by a uniformly random one (which may be the chosen one).
LAYOUT = (
    "S X . X",
    ". X . .",
    ". X . X",
    ". . . G",
)
SLIP = 0.1
MAX_EPISODE_STEPS = 50  # a time limit: the episode is truncated, not terminated
MOVES = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)])  # up, right, down, left
ACTION_NAMES = "^>v<"
CELL_REWARD = {"G": 1.0, "X": -1.0, ".": 0.0, "S": 0.0}
GRID = np.array([row.split() for row in LAYOUT])
HEIGHT, WIDTH = GRID.shape
NUM_STATES, NUM_ACTIONS = HEIGHT * WIDTH, len(MOVES)
START = int(np.flatnonzero(GRID.ravel() == "S")[0])
TERMINAL = np.isin(GRID.ravel(), ["G", "X"])  # (S,)
REWARD_ON_ENTRY = np.array([CELL_REWARD[c] for c in GRID.ravel()])  # (S,)


def next_cell(state: np.ndarray, move: np.ndarray) -> np.ndarray:
    """The cell reached from state by move (indices into MOVES), walls keeping the agent in place."""
    row, col = np.divmod(state, WIDTH)
    row = np.clip(row + MOVES[move, 0], 0, HEIGHT - 1)
    col = np.clip(col + MOVES[move, 1], 0, WIDTH - 1)
    return row * WIDTH + col


def dynamics() -> tuple[np.ndarray, np.ndarray]:
    """P[s, a, s'] and the expected reward R[s, a]; terminal cells have no outgoing transitions."""
    P = np.zeros((NUM_STATES, NUM_ACTIONS, NUM_STATES))
    for s in np.flatnonzero(~TERMINAL):
        for a in range(NUM_ACTIONS):
            for move in range(NUM_ACTIONS):
                P[s, a, next_cell(np.array(s), np.array(move))] += (1 - SLIP) * (move == a) + SLIP / NUM_ACTIONS
    return P, P @ REWARD_ON_ENTRY


def value_iteration(P: np.ndarray, R: np.ndarray, gamma: float, tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """V* and Q* by iterating V <- max_a R + gamma P V to a fixed point."""
    V = np.zeros(P.shape[0])
    while True:
        Q = R + gamma * P @ V
        V_new = Q.max(1)
        if np.abs(V_new - V).max() < tol:
            return V_new, Q
        V = V_new


def policy_evaluation(P: np.ndarray, R: np.ndarray, pi: np.ndarray, gamma: float) -> np.ndarray:
    """V^pi exactly, from the linear system (I - gamma P_pi) V = R_pi."""
    P_pi = np.einsum("sa,sat->st", pi, P)
    R_pi = (pi * R).sum(1)
    return np.linalg.solve(np.eye(len(R_pi)) - gamma * P_pi, R_pi)


def discounted_visitation(P: np.ndarray, pi: np.ndarray, gamma: float, start: int = START) -> np.ndarray:
    """rho^pi(s) = sum_t gamma^t Pr(s_t = s) from the start cell."""
    P_pi = np.einsum("sa,sat->st", pi, P)
    return np.linalg.solve(np.eye(len(P_pi)) - gamma * P_pi.T, np.eye(len(P_pi))[start])


class GridEnvs:
    """num_envs gridworlds in lockstep. A finished episode resets in the same step; its final cell
    is returned apart, so that a truncated episode can bootstrap from it."""

    def __init__(self, num_envs: int, rng: np.random.Generator):
        self.num_envs, self.rng = num_envs, rng
        self.state = np.full(num_envs, START)
        self.t = np.zeros(num_envs, dtype=int)
        self.episode_return = np.zeros(num_envs)

    def step(self, action: np.ndarray):
        """-> next state (reset where done), reward, terminated, truncated, final state, finished returns."""
        slipped = self.rng.random(self.num_envs) < SLIP
        move = np.where(slipped, self.rng.integers(NUM_ACTIONS, size=self.num_envs), action)
        final_state = next_cell(self.state, move)
        reward = REWARD_ON_ENTRY[final_state]
        self.t += 1
        terminated = TERMINAL[final_state]
        truncated = ~terminated & (self.t >= MAX_EPISODE_STEPS)
        done = terminated | truncated
        self.episode_return += reward
        finished = self.episode_return[done].tolist()
        self.state = np.where(done, START, final_state)
        self.t[done], self.episode_return[done] = 0, 0.0
        return self.state.copy(), reward, terminated, truncated, final_state, finished


# ---------------------------------------------------------------------------------------------
# 3. Agent: one logit per cell and action, one value per cell
# ---------------------------------------------------------------------------------------------

LOG_FLOOR = 1e-300  # log(0) would be -inf, and 0 * -inf NaN: a zero probability adds 0 to an entropy or a KL


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def entropy(pi: np.ndarray) -> np.ndarray:
    return -(pi * np.log(np.clip(pi, LOG_FLOOR, None))).sum(-1)


class Adam:
    """Adam (Kingma & Ba 2015) on one array, written out: per-entry steps of about lr whatever the
    gradient's scale, so rarely visited cells learn as fast as the start cell."""

    BETA1, BETA2, EPS = 0.9, 0.999, 1e-8

    def __init__(self, shape: tuple[int, ...], lr: float):
        self.lr, self.t = lr, 0
        self.m, self.v = np.zeros(shape), np.zeros(shape)

    def step(self, grad: np.ndarray) -> np.ndarray:
        """The change to apply for a gradient to descend (negate the gradient to ascend)."""
        self.t += 1
        self.m = self.BETA1 * self.m + (1 - self.BETA1) * grad
        self.v = self.BETA2 * self.v + (1 - self.BETA2) * grad**2
        m_hat, v_hat = self.m / (1 - self.BETA1**self.t), self.v / (1 - self.BETA2**self.t)
        return -self.lr * m_hat / (np.sqrt(v_hat) + self.EPS)


@dataclass
class Agent:
    logits: np.ndarray  # (S, A): the policy pi(a|s) = softmax(logits[s])
    values: np.ndarray  # (S,): the critic V(s)
    policy_optimizer: Adam

    @staticmethod
    def uniform(learning_rate: float = 0.0) -> "Agent":
        shape = (NUM_STATES, NUM_ACTIONS)
        return Agent(np.zeros(shape), np.zeros(NUM_STATES), Adam(shape, learning_rate))

    def policy(self) -> np.ndarray:
        return softmax(self.logits)


# ---------------------------------------------------------------------------------------------
# 4. Algorithm: pure functions, including the section's exercises
# ---------------------------------------------------------------------------------------------


def importance_estimate(f: np.ndarray, logp_target: np.ndarray, logp_behavior: np.ndarray) -> float:
    """Estimate E_target[f] from samples of the behavior distribution: mean of w * f with
    w = p_target / p_behavior. Unbiased, but its variance explodes as the two separate."""
    return float(np.mean(np.exp(logp_target - logp_behavior) * f))


def effective_sample_size(weights: np.ndarray) -> float:
    """(sum w)^2 / sum w^2: how many samples of the target the reweighted batch is worth."""
    return float(weights.sum() ** 2 / np.square(weights).sum())


def kl_divergence(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p || q) over the last axis."""
    return (p * (np.log(np.clip(p, LOG_FLOOR, None)) - np.log(np.clip(q, LOG_FLOOR, None)))).sum(-1)


FLAT_ADVANTAGE = 1e-9  # advantages spread less than this (relative) within each state are rounding, not a direction


def natural_step(z: np.ndarray, adv: np.ndarray, delta: float) -> np.ndarray:
    """TRPO's step for tabular softmax logits z (..., A) under the limit mean KL(pi_old || pi_new) <= delta.

    The Fisher matrix of a softmax in its logits is diag(pi) - pi pi^T, and F^-1 g moves the logits
    by a multiple of the advantage itself: z + eta * A, i.e. pi_new = pi_old * exp(eta * A), normalized.
    eta makes the quadratic KL model equal delta, 0.5 * eta^2 * Var_pi(A) = delta, and is then halved
    until the true KL meets the limit (TRPO's backtracking line search)."""
    pi = softmax(z)
    centered = adv - (pi * adv).sum(-1, keepdims=True)
    fisher_quadratic = np.mean((pi * centered**2).sum(-1))  # A^T F A, averaged over states
    if fisher_quadratic <= (FLAT_ADVANTAGE * np.abs(adv).max()) ** 2:  # A constant in every state: no direction
        return z.copy()
    eta = np.sqrt(2 * delta / fisher_quadratic)
    while np.mean(kl_divergence(pi, softmax(z + eta * adv))) > delta:
        eta /= 2
    return z + eta * adv


def ppo_clip_loss(logp_new: np.ndarray, logp_old: np.ndarray, adv: np.ndarray, eps: float) -> tuple[float, np.ndarray]:
    """-mean(min(rho A, clip(rho, 1-eps, 1+eps) A)) and its gradient in logp_new.

    d/d logp of one sample is -rho A when the unclipped term is the one selected, else 0: the
    gradient vanishes exactly when A > 0 and rho > 1+eps, or A < 0 and rho < 1-eps."""
    rho = np.exp(logp_new - logp_old)
    unclipped, clipped = rho * adv, np.clip(rho, 1 - eps, 1 + eps) * adv
    active = unclipped <= clipped  # the min selects the unclipped term (ties: both equal, slope A)
    return float(-np.mean(np.minimum(unclipped, clipped))), -(active * rho * adv) / len(adv)


def ppo_value_loss(
    v_new: np.ndarray, v_old: np.ndarray, returns: np.ndarray, clip: float | None = None
) -> tuple[float, np.ndarray]:
    """0.5 * mean((V - R)^2), or with clip the larger of that and the error of V kept within clip of
    v_old (the values at collection); returns the loss and its gradient in v_new."""
    err = v_new - returns
    if clip is None:
        return float(0.5 * np.mean(err**2)), err / len(err)
    v_clipped = v_old + np.clip(v_new - v_old, -clip, clip)
    err_clipped = v_clipped - returns
    use_unclipped = err**2 >= err_clipped**2
    inside = np.abs(v_new - v_old) <= clip  # the clipped branch moves with v_new only inside the band
    grad = np.where(use_unclipped, err, err_clipped * inside)
    return float(0.5 * np.mean(np.maximum(err**2, err_clipped**2))), grad / len(err)


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminations: np.ndarray,
    truncations: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE over (T, N) arrays. next_values[t] = V(s_{t+1}), the value of the cell step t reached
    (its final cell when the episode ended there). A terminated step has no future; a truncated one
    bootstraps from its final cell; neither lets the advantage flow back across the episode boundary.
        delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    Returns (advantages, value targets A + V)."""
    deltas = rewards + gamma * next_values * (1 - terminations) - values
    carry = gamma * gae_lambda * (1 - (terminations | truncations))
    advantages = np.zeros_like(values)
    last = np.zeros(values.shape[1:])
    for t in reversed(range(len(values))):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def normalize(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + ADV_EPS)


def kl_k3(logratio: np.ndarray) -> np.ndarray:
    """Per-sample k3 estimate of KL(old || new): (rho - 1) - log rho."""
    return np.expm1(logratio) - logratio


KL_BAND, KL_BETA_FACTOR = 1.5, 2.0  # the paper's heuristic rule: beta is halved or doubled outside d_targ's band


def adapt_kl_beta(beta: float, kl: float, kl_target: float) -> float:
    """The PPO paper's rule: halve beta when the KL was below d_targ/1.5, double it above 1.5*d_targ."""
    if kl < kl_target / KL_BAND:
        return beta / KL_BETA_FACTOR
    return beta * KL_BETA_FACTOR if kl > kl_target * KL_BAND else beta


def policy_gradient(
    pi: np.ndarray,
    pi_old: np.ndarray,
    states: np.ndarray,
    actions: np.ndarray,
    logp_old: np.ndarray,
    adv: np.ndarray,
    objective: str,
    clip_coef: float,
    kl_beta: float,
    ent_coef: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Gradient of the objective to maximize with respect to the logits (S, A), from one minibatch,
    and the samples' log-ratios. The chain rule runs through d rho / d z[s] = rho * (e_a - pi[s])."""
    n = len(states)
    logratio = np.log(pi[states, actions]) - logp_old
    score = np.eye(NUM_ACTIONS)[actions] - pi[states]  # d log pi(a|s) / d z[s]: (n, A)
    if objective == "clip":
        _, dloss_dlogp = ppo_clip_loss(logratio + logp_old, logp_old, adv, clip_coef)
        per_sample = -dloss_dlogp[:, None] * score  # ascent direction
    else:
        per_sample = (np.exp(logratio) * adv)[:, None] * score / n
    if objective in ("kl-adaptive", "kl-fixed"):
        per_sample += -kl_beta * (pi[states] - pi_old[states]) / n  # d KL(old||new) / d z = pi - pi_old
    log_pi = np.log(pi[states])
    H = entropy(pi[states])[:, None]
    per_sample += ent_coef * -pi[states] * (log_pi + H) / n  # d H / d z = -pi * (log pi + H)
    grad = np.zeros_like(pi)
    np.add.at(grad, states, per_sample)
    return grad, logratio


# ---------------------------------------------------------------------------------------------
# 5. Rollout
# ---------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    states: np.ndarray  # (T, N)
    actions: np.ndarray
    logprobs: np.ndarray
    values: np.ndarray
    next_values: np.ndarray  # V(s_{t+1}) under the critic at collection time
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray


def collect_rollout(
    envs: GridEnvs, agent: Agent, state: np.ndarray, num_steps: int, rng: np.random.Generator
) -> tuple[Rollout, np.ndarray, list[float]]:
    pi = agent.policy()
    shape = (num_steps, envs.num_envs)
    buf = Rollout(
        *(np.zeros(shape, dtype=int) for _ in range(2)),
        *(np.zeros(shape) for _ in range(4)),
        *(np.zeros(shape, dtype=bool) for _ in range(2)),
    )
    finished = []
    for step in range(num_steps):
        # inverse-CDF sampling of one action per env from pi(.|s)
        action = (rng.random((envs.num_envs, 1)) > pi[state].cumsum(1)).sum(1).clip(max=NUM_ACTIONS - 1)
        buf.states[step], buf.actions[step] = state, action
        buf.logprobs[step], buf.values[step] = np.log(pi[state, action]), agent.values[state]
        state, reward, terminated, truncated, final_state, done_returns = envs.step(action)
        buf.rewards[step], buf.terminations[step], buf.truncations[step] = reward, terminated, truncated
        buf.next_values[step] = agent.values[final_state]
        finished += done_returns
    return buf, state, finished


# ---------------------------------------------------------------------------------------------
# 6. Update
# ---------------------------------------------------------------------------------------------


def update(agent: Agent, buf: Rollout, args: Args, kl_beta: float, rng: np.random.Generator) -> dict[str, float]:
    """K epochs of shuffled minibatch gradient steps on the logits and the critic's table."""
    advantages, returns = compute_gae(
        buf.rewards, buf.values, buf.next_values, buf.terminations, buf.truncations, args.gamma, args.gae_lambda
    )
    b_states, b_actions, b_logprobs = buf.states.ravel(), buf.actions.ravel(), buf.logprobs.ravel()
    b_values, b_advantages, b_returns = buf.values.ravel(), advantages.ravel(), returns.ravel()
    pi_old = agent.policy()
    v_clip = args.clip_coef if args.clip_vloss else None  # value clipping: the policy's clip range, as CleanRL's
    logratios, entropies, value_losses = [], [], []
    for _epoch in range(args.update_epochs):
        perm = rng.permutation(args.batch_size)
        stop = False
        for mb in np.split(perm, args.num_minibatches):
            pi = agent.policy()
            mb_adv = normalize(b_advantages[mb]) if args.norm_adv else b_advantages[mb]
            logratio = np.log(pi[b_states[mb], b_actions[mb]]) - b_logprobs[mb]
            if args.target_kl is not None and kl_k3(logratio).mean() > args.target_kl:
                stop = True
                break
            grad, logratio = policy_gradient(
                pi,
                pi_old,
                b_states[mb],
                b_actions[mb],
                b_logprobs[mb],
                mb_adv,
                args.objective,
                args.clip_coef,
                kl_beta,
                args.ent_coef,
            )
            entropies.append(entropy(pi[b_states[mb]]).mean())  # of the policy this step starts from
            agent.logits += agent.policy_optimizer.step(-grad)  # gradient ascent on the objective
            v_loss, v_grad = ppo_value_loss(agent.values[b_states[mb]], b_values[mb], b_returns[mb], v_clip)
            value_losses.append(v_loss)  # of the critic this step starts from
            v_grad_sum, visits = np.zeros(NUM_STATES), np.zeros(NUM_STATES)
            np.add.at(v_grad_sum, b_states[mb], v_grad)
            np.add.at(visits, b_states[mb], 1.0 / len(mb))
            # regression toward the value targets: each visited cell moves toward its targets' mean
            step = np.divide(v_grad_sum, visits, out=np.zeros(NUM_STATES), where=visits > 0)  # unvisited: none
            agent.values -= args.critic_learning_rate * step
            logratios.append(logratio)
        if stop:
            break
    pi = agent.policy()
    logratio = np.concatenate(logratios) if logratios else np.zeros(1)
    ratio = np.exp(logratio)
    return {
        "losses/approx_kl": float(kl_k3(logratio).mean()),
        "losses/clipfrac": float((np.abs(ratio - 1) > args.clip_coef).mean()),
        "losses/entropy": float(np.mean(entropies)) if entropies else float("nan"),
        "losses/value_loss": float(np.mean(value_losses)) if value_losses else float("nan"),
        "losses/ratio_max": float(ratio.max()),
        "losses/ratio_min": float(ratio.min()),
        "losses/ess": effective_sample_size(ratio) / len(ratio),
        "losses/final_kl": float(kl_divergence(pi_old[b_states], pi[b_states]).mean()),  # the paper's: over samples
        "losses/epochs_done": len(logratios) / args.num_minibatches,  # minibatch steps taken, in epochs
    }


# ---------------------------------------------------------------------------------------------
# 7. Logging
# ---------------------------------------------------------------------------------------------


def hyperparameter_table(args: Args) -> str:
    derived = {"batch_size": args.batch_size, "minibatch_size": args.minibatch_size}
    rows = "\n".join(f"|{k}|{v}|" for k, v in (dataclasses.asdict(args) | derived).items())
    return f"|param|value|\n|-|-|\n{rows}"


def grade(agent: Agent, P: np.ndarray, R: np.ndarray, gamma: float, V_star: np.ndarray, Q_star: np.ndarray) -> dict:
    """The exact figures: J(pi), the share of cells whose greedy action is optimal, critic error."""
    pi = agent.policy()
    V_pi = policy_evaluation(P, R, pi, gamma)
    cells = ~TERMINAL
    visited = discounted_visitation(P, pi, gamma) >= VISITED * (1 / (1 - gamma))  # cells the policy visits
    greedy = agent.logits.argmax(1)
    optimal = Q_star[np.arange(NUM_STATES), greedy] >= Q_star.max(1) - Q_TIE
    return {
        "true_return": float(V_pi[START]),
        "optimal_return": float(V_star[START]),
        "greedy_optimal_fraction": float(optimal[cells & visited].mean()),
        "greedy_optimal_fraction_all_cells": float(optimal[cells].mean()),
        "critic_max_error": float(np.abs(agent.values - V_pi)[cells & visited].max()),
        "entropy_start": float(entropy(pi[START])),
    }


def policy_picture(agent: Agent) -> str:
    greedy = agent.logits.argmax(1)
    cells = [GRID.ravel()[s] if TERMINAL[s] else ACTION_NAMES[greedy[s]] for s in range(NUM_STATES)]
    return "\n".join(" ".join(cells[r * WIDTH : (r + 1) * WIDTH]) for r in range(HEIGHT))


# ---------------------------------------------------------------------------------------------
# 8. Main
# ---------------------------------------------------------------------------------------------


def train(args: Args, writer: "SummaryWriter | None" = None, verbose: bool = True) -> tuple[Agent, dict]:
    """One PPO run; returns the agent and its final grade."""
    rng = np.random.default_rng(args.seed)
    P, R = dynamics()
    V_star, Q_star = value_iteration(P, R, args.gamma)
    agent, envs = Agent.uniform(args.learning_rate), GridEnvs(args.num_envs, rng)
    state, kl_beta, global_step = envs.state.copy(), args.kl_beta, 0
    if verbose:
        print(
            f"{'iter':>4} {'step':>6} {'J(pi)':>7} {'V*':>6} {'approx_kl':>9} {'clipfrac':>8} {'entropy':>7} "
            f"{'ratio':>11} {'ess':>5} {'critic_err':>10}"
        )
    for iteration in range(1, args.num_iterations + 1):
        if args.anneal_lr:  # linear decay, CleanRL's schedule: 1/num_iterations of the step at the last iteration
            agent.policy_optimizer.lr = args.learning_rate * (1 - (iteration - 1) / args.num_iterations)
        buf, state, finished = collect_rollout(envs, agent, state, args.num_steps, rng)
        global_step += args.batch_size
        metrics = update(agent, buf, args, kl_beta, rng)
        if args.objective == "kl-adaptive":
            kl_beta = adapt_kl_beta(kl_beta, metrics["losses/final_kl"], args.kl_target)
        g = grade(agent, P, R, args.gamma, V_star, Q_star)
        scalars = {
            **metrics,
            "charts/true_return": g["true_return"],
            "charts/optimal_return": g["optimal_return"],
            "charts/critic_max_error": g["critic_max_error"],
            "charts/kl_beta": kl_beta,
            "charts/learning_rate": agent.policy_optimizer.lr,
        }
        if writer:
            for tag, value in scalars.items():
                writer.add_scalar(tag, value, global_step)
            for episode_return in finished:  # one point per episode, as the neural scripts log them
                writer.add_scalar("charts/episodic_return", episode_return, global_step)
        if verbose:
            print(
                f"{iteration:4d} {global_step:6d} {g['true_return']:7.3f} {g['optimal_return']:6.3f} "
                f"{metrics['losses/approx_kl']:9.4f} {metrics['losses/clipfrac']:8.3f} "
                f"{metrics['losses/entropy']:7.3f} "
                f"{metrics['losses/ratio_min']:5.2f}-{metrics['losses/ratio_max']:<5.2f} "
                f"{metrics['losses/ess']:5.2f} {g['critic_max_error']:10.3f}"
            )
    final = grade(agent, P, R, args.gamma, V_star, Q_star)
    return agent, {**final, "global_step": global_step}


def run_ablation(args: Args) -> dict:
    """The section's ablation: aggressive updates, ABLATION_SEEDS seeds, with and without the clip."""
    table = {}
    print(f"{'objective':>9} {'seed':>4} {'J(pi)':>7} {'V*':>6} {'entropy(start)':>14}")
    for objective in ("clip", "none"):
        table[objective] = []
        for seed in range(1, ABLATION_SEEDS + 1):
            run_args = dataclasses.replace(args, **ABLATION, objective=objective, seed=seed)
            _, g = train(run_args, verbose=False)
            table[objective].append(
                {"seed": seed, "true_return": g["true_return"], "entropy_start": g["entropy_start"]}
            )
            print(
                f"{objective:>9} {seed:4d} {g['true_return']:7.3f} {g['optimal_return']:6.3f} "
                f"{g['entropy_start']:14.3f}"
            )
    return {"settings": ABLATION, "optimal_return": g["optimal_return"], "runs": table}


def run_surrogate_study(args: Args, out_dir: str) -> dict:
    """Step from the uniform policy along the exact policy gradient by growing amounts; compare the
    surrogate L(pi') = J(pi) + sum_s rho^pi(s) sum_a pi'(a|s) A^pi(s, a) with the true J(pi'), and with
    TRPO's lower bound (Schulman et al. 2015, Theorem 1): J(pi') >= L(pi') - C max_s KL(pi || pi')(s),
    C = 4 eps gamma / (1 - gamma)^2, eps = max_{s,a} |A^pi(s, a)|. With gamma 0.9 the constant is
    360 eps: the bound is vacuous beyond tiny steps, which is why TRPO constrains the KL instead of
    paying this penalty, and PPO clips."""
    P, R = dynamics()
    agent = Agent.uniform()
    pi = agent.policy()
    V = policy_evaluation(P, R, pi, args.gamma)
    Q = R + args.gamma * P @ V
    A = Q - V[:, None]
    rho = discounted_visitation(P, pi, args.gamma)
    grad = rho[:, None] * pi * A  # dJ/dz for tabular softmax
    penalty = 4 * np.abs(A[~TERMINAL]).max() * args.gamma / (1 - args.gamma) ** 2  # TRPO's C
    rows = []
    for step in (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0):
        pi_new = softmax(agent.logits + step * grad)
        surrogate = V[START] + float((rho[:, None] * pi_new * A).sum())
        true_J = float(policy_evaluation(P, R, pi_new, args.gamma)[START])
        max_kl = float(kl_divergence(pi, pi_new)[~TERMINAL].max())
        bound = surrogate - penalty * max_kl
        rows.append({"step": step, "max_kl": max_kl, "surrogate": surrogate, "true_return": true_J, "bound": bound})
    print(f"TRPO's penalty constant C = {penalty:.1f}")
    print(f"{'step':>6} {'max KL':>8} {'L(pi_new)':>10} {'J(pi_new)':>10} {'L - C KL':>10}")
    for r in rows:
        print(f"{r['step']:6.2f} {r['max_kl']:8.4f} {r['surrogate']:10.4f} {r['true_return']:10.4f} {r['bound']:10.4f}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    kls = [r["max_kl"] for r in rows]
    ax.plot(kls, [r["surrogate"] for r in rows], "o-", label="surrogate L(pi')")
    ax.plot(kls, [r["true_return"] for r in rows], "s-", label="true J(pi')")
    ax.plot(kls, [r["bound"] for r in rows], "v--", label=f"TRPO bound L - {penalty:.0f} max KL")
    values = [r[k] for r in rows for k in ("surrogate", "true_return")]
    ax.set_ylim(min(values) - 0.3, max(values) + 0.1)  # the bound leaves the chart after tiny steps
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlim(0, 1.5 * max(kls))
    ax.set_xlabel("max KL(pi || pi') over cells")
    ax.set_ylabel("return from the start cell")
    ax.set_title("Surrogate vs true objective along the policy gradient")
    ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out_dir}/surrogate_study.png", dpi=120)
    return {"penalty_constant": penalty, "rows": rows}


def main(args: Args) -> dict:
    error = check_args(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    mode = "ablation" if args.ablation else "surrogate" if args.surrogate_study else "train"
    run_name = f"gridworld__{args.exp_name}__{mode}__{args.seed}__{int(time.time())}"
    out_dir = f"runs/{run_name}"
    os.makedirs(out_dir, exist_ok=True)
    if args.ablation:
        result, out_file = run_ablation(args), "ablation.json"
    elif args.surrogate_study:
        result, out_file = run_surrogate_study(args, out_dir), "surrogate_study.json"
    else:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(out_dir)
        writer.add_text("hyperparameters", hyperparameter_table(args))
        agent, result = train(args, writer)
        writer.close()
        print(policy_picture(agent))
        print(
            f"J(pi) = {result['true_return']:.3f}, V* = {result['optimal_return']:.3f}, "
            f"greedy optimal in {result['greedy_optimal_fraction']:.0%} of visited cells, "
            f"critic max error {result['critic_max_error']:.3f}"
        )
        out_file = "summary.json"
    with open(f"{out_dir}/{out_file}", "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {out_dir}/{out_file}")
    return result


if __name__ == "__main__":
    main(tyro.cli(Args))
