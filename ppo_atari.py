"""PPO for Atari from pixels, in one file: ppo_continuous.py with an Atari environment and a CNN:
    python ppo_atari.py --env-id BreakoutNoFrameskip-v4
    python ppo_atari.py --env-id ALE/Pong-v5 --total-timesteps 2000000
    python ppo_atari.py --anneal-clip --vf-coef 2.0 --update-epochs 3  # the PPO paper's settings (c1 = 1 on (V-R)^2)
    python ppo_atari.py --bf16 --compile     # the CNN in bf16 (CPUs with AVX512-BF16 or AMX, GPUs), compiled
    tensorboard --logdir runs

Part I, PPO, every line that changes what is learned: 1. Args 2. Environment 3. Agent 4. Algorithm (pure functions)
5. Rollout 6. Update 7. Training loop. Part II, running it, changes no number Part I computes under plain python:
8. Processes 9. Checkpoints and resume 10. Evaluation 11. Signals, checks and logs. The same in every script.
"""

import atexit
import dataclasses
import importlib.util
import json
import math
import multiprocessing
import os
import random
import signal
import sys
import time
import warnings
from collections.abc import Callable
from typing import Literal, NoReturn

import ale_py
import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import tyro
from gymnasium.vector import VectorEnv
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

# =============================================================================================
# Part I: PPO
# =============================================================================================

# 1. Args -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Args:
    exp_name: str = os.path.basename(__file__).removesuffix(".py")
    """name of this experiment, part of the run folder's name"""
    seed: int = 1
    """seed of python, numpy, torch and the environments"""
    torch_deterministic: bool = True
    """make cuDNN pick deterministic algorithms"""
    cuda: bool = True
    """use CUDA when it is available"""
    compile: bool = False
    """torch.compile each minibatch's loss and its backward (Adam's step stays eager): see README's speed flags"""
    bf16: bool = False
    """the networks in bf16 (autocast; all else fp32): on a GPU or CPU with bf16 in hardware, faster there (README)"""
    track: bool = False
    """also log to Weights & Biases (needs `pip install wandb`)"""
    wandb_project_name: str = "ppo"
    """the Weights & Biases project"""
    wandb_entity: str | None = None
    """the Weights & Biases entity (team)"""
    capture_video: bool = False
    """record videos of the first environment to videos/{run_name}/"""
    async_envs: bool = False
    """step each environment in a worker process of its own: the same episodes, in parallel (given spare cores)"""
    save_every: int = 0
    """also write the checkpoint every this many iterations (it is always written at the end and on interrupt)"""
    resume: str | None = None
    """continue the run saved in this checkpoint, with its Args"""
    eval_checkpoint: str | None = None
    """evaluate this checkpoint instead of training"""
    eval_episodes: int = 10
    """episodes of the evaluation that ends training (and of --eval-checkpoint); 0 skips it"""
    eval_stochastic: bool = False
    """evaluate by sampling actions instead of taking the most likely one"""

    env_kwargs: str = "{}"
    """keyword arguments of every gym.make of the run and its evaluation, a JSON object: '{"mode": 2}'"""
    env_id: str = "BreakoutNoFrameskip-v4"
    """an Atari id: any *NoFrameskip-v4 or ALE/*-v5 (module:EnvId imports module first)"""
    total_timesteps: int = 10_000_000
    """agent steps of 4 frames summed over all environments (10M: CleanRL's), each life's reset step included"""
    learning_rate: float = 2.5e-4
    """Adam's step size at the start of training (the paper's Atari value)"""
    num_envs: int = 8
    """parallel environments (the paper's 8 Atari actors)"""
    num_steps: int = 128
    """steps per environment per rollout (the paper's Atari T)"""
    num_minibatches: int = 4
    """minibatches per epoch (1024 / 4 = 256 samples each)"""
    update_epochs: int = 4
    """passes over each rollout (CleanRL's 4; the paper used 3)"""
    clip_coef: float = 0.1
    """clip range epsilon of the surrogate, and of the value with --clip-vloss (the paper's Atari value)"""
    ent_coef: float = 0.01
    """weight of the entropy bonus (the paper's Atari c2)"""

    anneal_lr: bool = True
    """decay the learning rate linearly: --learning-rate at the first iteration, 1/num_iterations of it at the last"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    objective: Literal["clip", "kl-adaptive", "kl-fixed", "none"] = "clip"
    """policy objective: clipped surrogate, KL penalty (adaptive or fixed beta), or plain surrogate"""
    kl_beta: float = 1.0
    """weight of the KL penalty (its starting value for kl-adaptive)"""
    kl_target: float = 0.01
    """kl-adaptive's d_targ: beta halves below d_targ/1.5 and doubles above 1.5*d_targ"""
    clip_vloss: bool = False
    """clip the value loss as the policy's (off: Andrychowicz et al. 2021 found it does not help)"""
    vf_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 0.5
    """clip the global gradient norm to this value (inf: no clipping)"""
    anneal_clip: bool = False
    """decay the clip range as the learning rate, as the PPO paper did on Atari"""
    target_kl: float | None = None
    """stop an update at the first minibatch whose approx KL exceeds this, before its step (CleanRL: at an epoch end)"""
    bootstrap_truncation: bool = True
    """bootstrap from the critic at time limits (off: treat them as terminations, as CleanRL does)"""

    @property
    def world_size(self) -> int:
        """processes training together: torchrun's WORLD_SIZE, 1 under plain python"""
        return int(os.environ.get("WORLD_SIZE", "1"))

    @property
    def batch_size(self) -> int:
        """transitions per rollout, summed over all processes"""
        return self.world_size * self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """samples per minibatch, summed over all processes (fewer when autoreset steps were dropped)"""
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        """rollout-and-update iterations (the remainder of total_timesteps is not run)"""
        return self.total_timesteps // self.batch_size


# 2. Environment ------------------------------------------------------------------------------


gym.register_envs(ale_py)  # make the ALE ids known to gymnasium
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # stderr for errors only, not ALE's banner
NOOP_MAX = 30  # up to 30 no-op actions at reset, so that games start in different states
FRAME_SKIP = 4  # repeat each action for 4 frames, max-pooling the last two (Atari flickers)
SCREEN = 84  # frames are resized to 84x84 grayscale
FRAME_STACK = 4  # the agent sees the last 4 frames
NOOP, FIRE, SECOND_START_ACTION = 0, 1, 2  # action indices in every ALE action set that has FIRE
ENV_KWARGS: dict = {"frameskip": 1}  # AtariPreprocessing skips frames itself (max-pooling the last two)


class EpisodicLife(gym.Wrapper):
    """Losing a life ends the episode for learning (terminated=True) without ending the game: the
    reset that follows only takes a no-op step, unless the game is really over."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        life_lost = 0 < lives < self.lives
        self.lives = lives
        return obs, reward, terminated or life_lost, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # a life was lost: carry on with the same game
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:  # the no-op ended the game: its score (info["episode"]) goes out with the reset
                obs, reset_info = self.env.reset(**kwargs)
                info |= reset_info
        self.lives, self.game_over = self.env.unwrapped.ale.lives(), False
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE after every reset, in games that wait for it (Breakout's ball, for one), then action 2
    (as OpenAI baselines and CleanRL do: some games need a second input to start)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)  # its info["episode"]: a game that ended on EpisodicLife's no-op step
        for action in (FIRE, SECOND_START_ACTION):
            obs, _, terminated, truncated, step_info = self.env.step(action)
            if terminated or truncated:  # this press ended the game: its score goes out with the reset too
                obs, reset_info = self.env.reset(**kwargs)
                info = info | step_info | reset_info
        return obs, info


def make_env(env_id: str, idx: int, capture_video: bool, run_name: str, env_kwargs: dict) -> Callable[[], gym.Env]:
    def thunk() -> gym.Env:
        render = {"render_mode": "rgb_array"} if capture_video and idx == 0 else {}
        env = gym.make(env_id, **(ENV_KWARGS | env_kwargs | render))  # env_id may be module:EnvId
        if render:
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        env = gym.wrappers.AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SCREEN)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # whole games, raw score: before lives and clipping
        env = EpisodicLife(env)
        if "FIRE" in env.unwrapped.get_action_meanings():
            env = FireReset(env)
        env = gym.wrappers.TransformReward(env, np.sign)  # learn from the reward's sign only
        env = gym.wrappers.FrameStackObservation(env, FRAME_STACK)  # (4, 84, 84), oldest frame first
        return env

    return thunk


def make_envs(args: Args, run_name: str) -> VectorEnv:
    """num_envs copies in lockstep. NEXT_STEP autoreset: the step that ends an episode returns its real final
    observation (through the same wrappers as any other), the next step only resets."""
    video, env_kwargs = args.capture_video and RANK == 0, json.loads(args.env_kwargs)  # checked by check_env
    thunks = [make_env(args.env_id, i, video, run_name, env_kwargs) for i in range(args.num_envs)]
    vector_env = in_workers if args.async_envs else gym.vector.SyncVectorEnv  # Part II: speed only, the same episodes
    envs = vector_env(thunks, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    return envs


# 3. Agent ------------------------------------------------------------------------------------

HIDDEN = 512  # units of the fully connected layer after the convolutions
PIXEL_MAX = 255.0  # observations are uint8 frames, scaled to [0, 1] inside the network


def usable_cores() -> int:
    """OMP_NUM_THREADS when it is set, else the cores this process may run on (its affinity: a cpuset's or a Slurm
    job's share, not the host's count; a CPU quota is not seen), so runs side by side do not oversubscribe."""
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        return int(threads)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


CPU_THREADS = usable_cores()  # the convolutions use every core this process may use
HIDDEN_GAIN = np.sqrt(2)  # orthogonal init gain of the hidden layers
POLICY_HEAD_GAIN = 0.01  # a near-zero policy head: the first actions ignore the observation
VALUE_HEAD_GAIN = 1.0  # the value head at unit scale (the 37 details), unlike the near-zero policy head


def layer_init(layer: nn.Module, gain: float = HIDDEN_GAIN) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class Agent(nn.Module):
    """The Nature CNN (Mnih et al. 2015) shared by a categorical policy head and a value head."""

    def __init__(self, envs: VectorEnv):
        super().__init__()
        channels = envs.single_observation_space.shape[0]
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4)),  # (B, 4, 84, 84) -> (B, 32, 20, 20)
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),  # -> (B, 64, 9, 9)
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),  # -> (B, 64, 7, 7)
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, HIDDEN)),  # -> (B, 512)
            nn.ReLU(),
        )
        self.memory_format = torch.channels_last  # NHWC convolutions: oneDNN's faster layout on the CPU in fp32
        self.network.to(memory_format=self.memory_format)
        self.actor = layer_init(nn.Linear(HIDDEN, envs.single_action_space.n), POLICY_HEAD_GAIN)
        self.critic = layer_init(nn.Linear(HIDDEN, 1), VALUE_HEAD_GAIN)

    def features(self, obs: Tensor) -> Tensor:
        """(B, 4, 84, 84) uint8 frames -> (B, 512); relaid out as uint8, a quarter of float32's bytes, then scaled."""
        return self.network(obs.contiguous(memory_format=self.memory_format) / PIXEL_MAX)

    def get_value(self, obs: Tensor) -> Tensor:
        return self.critic(self.features(obs)).squeeze(-1)  # (B, 4, 84, 84) -> (B,)

    def get_action_and_value(self, obs: Tensor, action: Tensor | None = None, greedy: bool = False):
        """Sample an action (or score the given one, or the likeliest with greedy): action, log-prob, entropy, value."""
        hidden = self.features(obs)  # (B, 512)
        log_probs = self.actor(hidden).log_softmax(-1)  # (B, num_actions)
        if action is None:  # sample, or take the most likely with greedy
            action = log_probs.argmax(-1) if greedy else torch.multinomial(log_probs.exp(), 1).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1), entropy, self.critic(hidden).squeeze(-1)


def autocast_bf16(agent: Agent, device: torch.device) -> None:
    """--bf16: each network's forward (and so its backward) under bf16 autocast, its output cast back to fp32, so
    that weights, Adam and all that follows the networks (log-probs, ratios, advantages, losses) stay fp32."""
    if device.type == "cpu":  # oneDNN's bf16 convolutions ran faster NCHW than NHWC here (fp32: the other way)
        agent.memory_format = torch.contiguous_format
        agent.network.to(memory_format=agent.memory_format)
    for net in (agent.network,):  # the CNN; the two heads take its fp32 output
        forward = torch.autocast(device.type, torch.bfloat16)(net.forward)
        net.forward = lambda *x, forward=forward: forward(*x).float()


# 4. Algorithm: pure functions of tensors -----------------------------------------------------


def compute_gae(
    rewards: Tensor, values: Tensor, next_value: Tensor, terminations: Tensor, truncations: Tensor,
    gamma: float, gae_lambda: float, bootstrap_truncation: bool = True,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Generalized advantage estimation over a rollout of shape (T, N).

    values[t] = V(s_t); next_value = V(s_T), the observation after the last step. With NEXT_STEP
    autoreset the observation after a step that ends an episode is that episode's real final
    observation, so values[t + 1] is what a truncated step bootstraps from:
        delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    A terminated step has no future; a truncated one does (the episode was only cut off) but its
    advantage must not flow across the episode boundary. The step after a done is the autoreset
    step: its advantage is meaningless and the update drops it. Returns (advantages, returns).
    """
    dones = terminations | truncations
    no_future = dones if not bootstrap_truncation else terminations  # CleanRL: truncation = termination
    next_values = torch.cat([values[1:], next_value.unsqueeze(0)])  # (T, N): V(s_{t+1})
    deltas = rewards + gamma * next_values * (~no_future) - values
    carry = gamma * gae_lambda * (~dones)
    advantages, last = torch.zeros_like(values), torch.zeros_like(next_value)
    for t in reversed(range(values.shape[0])):
        advantages[t] = last = deltas[t] + carry[t] * last
    return advantages, advantages + values  # value targets R_t = A_t + V(s_t)


def policy_loss(
    ratio: Tensor, advantages: Tensor, objective: str, clip_coef: float, kl: Tensor, kl_beta: float
) -> Tensor:
    """The policy part of the loss to minimize (the negated objective of the PPO paper's Table 1).

    clip:        -E[min(r A, clip(r, 1-eps, 1+eps) A)]
    kl-*:        -E[r A] + beta * KL(old || new)   (KL: the per-sample k3 estimate, unbiased in value
                                                    and gradient under samples from the old policy)
    none:        -E[r A]
    """
    surrogate = ratio * advantages
    if objective == "clip":
        return -torch.min(surrogate, torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef) * advantages).mean()
    if objective in ("kl-adaptive", "kl-fixed"):
        return -surrogate.mean() + kl_beta * kl.mean()
    return -surrogate.mean()


def value_loss(new_values: Tensor, old_values: Tensor, returns: Tensor, clip_coef: float | None) -> Tensor:
    """0.5 * E[(V - R)^2]; with clip_coef, the larger of that and the error of V kept within clip_coef of V_old."""
    unclipped = (new_values - returns).square()
    if clip_coef is None:
        return 0.5 * unclipped.mean()
    clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
    return 0.5 * torch.max(unclipped, (clipped - returns).square()).mean()


def kl_k3(logratio: Tensor) -> Tensor:
    """Per-sample k3 estimate of KL(old || new): (r - 1) - log r, never negative."""
    return torch.expm1(logratio) - logratio


def linear_schedule(start: float, step: int, total_steps: int) -> float:
    """start before the first step, falling linearly: a run's last batch trains at batch / total_steps of it."""
    return start * (1.0 - step / total_steps)


KL_BAND, KL_BETA_FACTOR = 1.5, 2.0  # the paper's heuristic rule: beta is halved or doubled outside d_targ's band


def adapt_kl_beta(beta: float, kl: float, kl_target: float) -> float:
    """The PPO paper's rule: halve beta when the KL was below d_targ/1.5, double it above 1.5*d_targ."""
    if kl < kl_target / KL_BAND:
        return beta / KL_BETA_FACTOR
    return beta * KL_BETA_FACTOR if kl > kl_target * KL_BAND else beta


def explained_variance(predicted: Tensor, target: Tensor) -> float:
    """1 - Var[target - predicted] / Var[target] over every process's samples (1: perfect, 0: a constant's)."""
    var = global_var(target)
    return float("nan") if var == 0 else float(1 - global_var(target - predicted) / var)


def minibatch_slices(batch_size: int, num_minibatches: int) -> list[slice]:
    """num_minibatches contiguous slices covering range(batch_size), sizes differing by at most one."""
    bounds = np.linspace(0, batch_size, num_minibatches + 1).round().astype(int)
    return [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


# 5. Rollout ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Rollout:
    """What one rollout stores, each (T, N, ...) on the training device."""

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    rewards: Tensor
    terminations: Tensor
    truncations: Tensor
    real: Tensor  # False on the autoreset step that follows a done: not a transition to train on

    @staticmethod
    def allocate(envs: VectorEnv, num_steps: int, device: torch.device) -> "Rollout":
        shape = (num_steps, envs.num_envs)
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        return Rollout(
            obs=torch.as_tensor(np.zeros(shape + obs_space.shape, obs_space.dtype), device=device),  # the space's dtype
            actions=torch.as_tensor(np.zeros(shape + act_space.shape, act_space.dtype), device=device),
            logprobs=torch.zeros(shape, device=device),
            values=torch.zeros(shape, device=device),
            rewards=torch.zeros(shape, device=device),
            terminations=torch.zeros(shape, dtype=torch.bool, device=device),
            truncations=torch.zeros(shape, dtype=torch.bool, device=device),
            real=torch.zeros(shape, dtype=torch.bool, device=device),
        )


@dataclasses.dataclass
class EnvState:
    """What carries over from one rollout to the next: the observation, and whether each env's last step ended."""

    obs: Tensor
    done: Tensor


@torch.inference_mode()  # no autograd bookkeeping at all: cheaper per call than no_grad
def collect_rollout(
    envs: VectorEnv, agent: Agent, buf: Rollout, state: EnvState, device: torch.device
) -> tuple[EnvState, list[tuple[float, int, int]]]:
    """Run the policy for T steps in every env, filling buf. Returns the new state and the
    finished episodes' raw (return, length, rollout step at which each ended)."""
    num_steps = buf.obs.shape[0]
    rewards = np.zeros((num_steps, envs.num_envs), dtype=np.float32)  # env outputs stay in NumPy
    terminations = np.zeros((num_steps, envs.num_envs), dtype=bool)  # until the rollout ends:
    truncations = np.zeros((num_steps, envs.num_envs), dtype=bool)  # one copy, not one per step
    episodes, obs = [], state.obs
    for step in range(num_steps):
        action, logprob, _, value = agent.get_action_and_value(obs)
        buf.obs[step], buf.actions[step], buf.logprobs[step], buf.values[step] = obs, action, logprob, value
        next_obs, rewards[step], terminations[step], truncations[step], info = envs.step(action.cpu().numpy())
        obs = torch.as_tensor(next_obs, device=device)
        if "_episode" in info:
            for i in np.flatnonzero(info["_episode"]):
                episodes.append((float(info["episode"]["r"][i]), int(info["episode"]["l"][i]), step))
    buf.rewards.copy_(torch.from_numpy(rewards))
    buf.terminations.copy_(torch.from_numpy(terminations))
    buf.truncations.copy_(torch.from_numpy(truncations))
    dones = buf.terminations | buf.truncations
    # an env whose previous step ended its episode spends this step resetting: not a transition
    buf.real.copy_(~torch.cat([state.done.unsqueeze(0), dones[:-1]]))
    return EnvState(obs, dones[-1]), episodes


# 6. Update -----------------------------------------------------------------------------------

ADV_EPS = 1e-8  # keeps advantage normalization finite when all advantages are equal
MIN_MINIBATCH = 4  # samples of each process (check_args): a std needs 2, dropped autoreset steps can halve them


def minibatch_moments(x: Tensor, slices: list[slice]) -> list[tuple[Tensor, Tensor]]:
    """Per minibatch, the mean and sample std of x (the advantages) that normalization uses; under torchrun, of the
    minibatch made of every process's share (counts, sums, then centred squares summed by all_sum, in float64)."""
    if not dist.is_initialized():
        return [(x[mb].mean(), x[mb].std()) for mb in slices]
    x64 = x.double()
    counts_sums = torch.stack([torch.stack([x64.new_tensor(mb.stop - mb.start), x64[mb].sum()]) for mb in slices])
    n, total = all_sum(counts_sums).T  # (M,) each
    mean = total / n  # (M,)
    squares = all_sum(torch.stack([(x64[mb] - m).square().sum() for mb, m in zip(slices, mean)]))
    return [(m.to(x.dtype), s.to(x.dtype)) for m, s in zip(mean, (squares / (n - 1)).sqrt())]


def minibatch_loss(
    agent: Agent, minibatch: list[Tensor], adv_moments: tuple[Tensor, Tensor] | None, args: Args, kl_beta: float,
    clip_coef: float) -> tuple[Tensor, Tensor, Tensor] | None:  # fmt: skip
    """One minibatch's PPO loss, its (policy loss, value loss, entropy) and the log pi/pi_old of its samples; None
    when its KL already exceeds --target-kl (the policy left the trust region: no step on it)."""
    mb_obs, mb_actions, mb_logprobs, mb_values, mb_advantages, mb_returns = minibatch
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb_obs, mb_actions)
    logratio = newlogprob - mb_logprobs  # log pi(a|s) - log pi_old(a|s)
    ratio = logratio.exp()
    kl = kl_k3(logratio)
    if args.target_kl is not None and global_mean(kl).item() > args.target_kl:
        return None
    if args.norm_adv:  # advantages to mean 0, std 1 within each minibatch (moments: minibatch_moments, above)
        mb_advantages = (mb_advantages - adv_moments[0]) / (adv_moments[1] + ADV_EPS)
    pg_loss = policy_loss(ratio, mb_advantages, args.objective, clip_coef, kl, kl_beta)
    v_loss = value_loss(newvalue, mb_values, mb_returns, clip_coef if args.clip_vloss else None)
    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + args.vf_coef * v_loss  # an entropy bonus, a value penalty
    return loss, torch.stack([pg_loss, v_loss, entropy_loss]).detach(), logratio.detach()


def update(
    agent: Agent, optimizer: torch.optim.Optimizer, buf: Rollout, advantages: Tensor, returns: Tensor, args: Args,
    kl_beta: float, clip_coef: float,
) -> dict[str, float]:  # fmt: skip
    """K epochs of shuffled minibatch steps on one rollout; the metrics averaged over all of them."""
    keep = buf.real.flatten()  # drop the autoreset steps: (T*N,) -> (B,) real transitions
    b_obs, b_actions = buf.obs.flatten(0, 1)[keep], buf.actions.flatten(0, 1)[keep]
    b_logprobs, b_values = buf.logprobs.flatten()[keep], buf.values.flatten()[keep]
    b_advantages, b_returns = advantages.flatten()[keep], returns.flatten()[keep]
    step_stats: list[tuple[Tensor, Tensor]] = []  # per minibatch: (pg loss, v loss, entropy, grad norm), logratio
    loss_of = torch.compile(minibatch_loss) if args.compile else minibatch_loss  # compiled at its first call
    slices = minibatch_slices(b_obs.shape[0], args.num_minibatches)  # the same bounds in every epoch
    for _epoch in range(args.update_epochs):
        perm = torch.randperm(b_obs.shape[0], device=b_obs.device)
        # one gather per epoch; the minibatches are then contiguous slices
        shuffled = [x[perm] for x in (b_obs, b_actions, b_logprobs, b_values, b_advantages, b_returns)]
        adv_moments = minibatch_moments(b_advantages[perm], slices) if args.norm_adv else [None] * len(slices)
        for mb, moments in zip(slices, adv_moments):
            losses = loss_of(agent, [x[mb] for x in shuffled], moments, args, kl_beta, clip_coef)
            if losses is None:  # --target-kl: no further step on this batch
                break
            loss, mb_stats, logratio = losses
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            average_gradients(agent, len(logratio))  # under torchrun: the gradient of every process's samples
            grad_norm = nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm, foreach=True)  # global
            optimizer.step()
            step_stats.append((torch.cat([mb_stats, grad_norm[None]]), logratio))
        if losses is None:
            break
    # minibatches differ in size by at most one sample: the mean of means is the mean over all samples, nearly
    pg, v, ent, gn = torch.stack([s[0] for s in step_stats]).mean(0).tolist() if step_stats else [float("nan")] * 4
    logratio = torch.cat([s[1] for s in step_stats]) if step_stats else torch.zeros(1)
    ratio = logratio.exp()
    metrics = {
        "losses/policy_loss": pg,
        "losses/value_loss": v,
        "losses/entropy": ent,
        "losses/approx_kl": kl_k3(logratio).mean().item(),
        "losses/old_approx_kl": (-logratio).mean().item(),
        "losses/clipfrac": ((ratio - 1).abs() > clip_coef).float().mean().item(),  # ratios outside [1-eps, 1+eps]
        "losses/grad_norm": gn,
        "losses/ratio_max": ratio.max().item(),
        "losses/ratio_min": ratio.min().item(),
        "losses/epochs_done": len(step_stats) / args.num_minibatches,  # minibatch steps taken, in epochs
        "losses/explained_variance": explained_variance(b_values, b_returns),
    }
    if args.objective == "kl-adaptive":  # the adaptive penalty is set by the KL of the whole update
        with torch.no_grad():
            _, newlogprob, _, _ = agent.get_action_and_value(b_obs, b_actions)
            metrics["losses/final_kl"] = global_mean(kl_k3(newlogprob - b_logprobs)).item()
    return metrics


# 7. Training loop ----------------------------------------------------------------------------

ADAM_EPS = 1e-5  # Adam's epsilon: baselines' 1e-5 (one of the 37 details), not PyTorch's default 1e-8
RECENT_EPISODES = 10  # episodes averaged for the progress bar and summary.json


def advance(progress: dict, iteration: int, batch_size: int, kl_beta: float, episodes: list) -> dict:
    """The run's progress after an iteration: its steps, the KL penalty's beta, the episodes finished."""
    return {
        "global_step": progress["global_step"] + batch_size,
        "iteration": iteration,
        "kl_beta": kl_beta,
        "episodes": progress["episodes"] + len(episodes),
        "recent_returns": (progress["recent_returns"] + [ret for ret, _, _ in episodes])[-RECENT_EPISODES:],
    }


def main(args: Args) -> dict:
    """Train a policy (or, with --eval-checkpoint, only evaluate one). The lines marked Part II manage
    the run (processes, checkpoints, logs) and change no number under plain python."""
    if args.eval_checkpoint:
        return evaluate_checkpoint(args) if RANK == 0 else {}
    args, ckpt, run_dir, progress = start_run(args)  # Part II: a new run, or the one saved in --resume
    # the budget in whole global batches; a resumed run goes on from the steps it has done
    last_iteration = progress["iteration"] + (args.total_timesteps - progress["global_step"]) // args.batch_size
    budget = progress["global_step"] + (last_iteration - progress["iteration"]) * args.batch_size
    if finished_before(run_dir, progress, last_iteration):
        return progress
    device = seed_everything(args)
    envs = make_envs(args, os.path.basename(run_dir))
    agent = Agent(envs).to(device)
    if args.bf16:
        autocast_bf16(agent, device)
    start_distributed(agent, device)  # Part II: under torchrun, every process starts from rank 0's weights
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=ADAM_EPS, fused=True)
    if ckpt:
        restore_agent(ckpt, envs, agent, optimizer, frozen=True)  # Part II (frozen: see the reset below)
    buf = Rollout.allocate(envs, args.num_steps, device)
    prior = normalization_state(envs)  # Part II: the statistics every process starts from
    obs, _ = envs.reset(seed=rank_seed(args.seed) + progress["iteration"] * args.num_envs)  # resumed: unused seeds
    freeze_normalization(envs, False)  # Part II: a resumed run's statistics did not see that reset
    state = EnvState(torch.as_tensor(obs, device=device), torch.zeros(args.num_envs, dtype=torch.bool, device=device))
    log, interrupts = RunLog(args, run_dir, progress, budget, ckpt is not None, device), Interrupts()

    for iteration in range(progress["iteration"] + 1, last_iteration + 1):
        # anneal the learning rate (and with --anneal-clip the clip range) linearly over the budget
        trained = progress["global_step"]  # steps before this iteration
        lr = linear_schedule(args.learning_rate, trained, budget) if args.anneal_lr else args.learning_rate
        optimizer.param_groups[0]["lr"] = lr
        clip_coef = linear_schedule(args.clip_coef, trained, budget) if args.anneal_clip else args.clip_coef

        state, episodes = collect_rollout(envs, agent, buf, state, device)
        prior = merge_normalization(envs, prior)  # Part II: under torchrun, every process's statistics
        with torch.no_grad():
            next_value = agent.get_value(state.obs)  # V(s_T): bootstraps the rollout's unfinished tail
        advantages, returns = compute_gae(
            buf.rewards, buf.values, next_value, buf.terminations, buf.truncations,
            args.gamma, args.gae_lambda, args.bootstrap_truncation,
        )  # fmt: skip
        metrics = update(agent, optimizer, buf, advantages, returns, args, progress["kl_beta"], clip_coef)

        metrics, episodes, signum = gather_iteration(metrics, int(buf.real.sum()), episodes, interrupts.signum)
        log.episodes(episodes, progress["global_step"])
        stop_unless_finite(agent, metrics, log, iteration, run_dir)  # Part II: keeps the last good checkpoint
        kl_beta = progress["kl_beta"]
        if args.objective == "kl-adaptive":  # the PPO paper's adaptive KL penalty coefficient
            kl_beta = adapt_kl_beta(kl_beta, metrics["losses/final_kl"], args.kl_target)
        progress = advance(progress, iteration, args.batch_size, kl_beta, episodes)
        log.iteration(progress, metrics, learning_rate=lr, clip_coef=clip_coef, kl_beta=kl_beta)

        if signum or iteration == last_iteration or (args.save_every and iteration % args.save_every == 0):
            log.writer.flush()  # Part II: every iteration the checkpoint counts as done is in the event file first
            save_checkpoint(os.path.join(run_dir, CHECKPOINT), agent, optimizer, envs, args, progress)
        if signum:  # Part II: Ctrl-C or SIGTERM reached some process: every process stops here, saved
            stop_on_signal(signum, log, envs, args, run_dir)
    return finish_run(args, run_dir, progress, agent, envs, log)  # Part II: evaluate, summarize


# =============================================================================================
# Part II: Running it. Processes, checkpoints, evaluation, signals and checks: nothing below changes a
# number that Part I computes under plain python (one process).
# =============================================================================================

SCRIPT_NAME = os.path.basename(__file__).removesuffix(".py")  # checkpoints are refused by the other scripts
CHECKPOINT = "checkpoint.pt"
EVAL_SEED_OFFSET = 10_000  # the evaluation reset's seed: past a new run's reset seeds (a late resume's may reach it)
RANK = int(os.environ.get("RANK", "0"))  # this process under torchrun; rank 0 alone writes files and logs
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))  # its GPU on this machine
GLOO_EXIT_GRACE_S = 0.2  # at exit, seconds with the GIL free for gloo's threads to drop their last tensors
FAIL_GRACE_S = 10.0  # a failing process other than rank 0 waits: torchrun stops the rest once one has exited


# 8. Processes: torchrun's collectives (each one a no-op without a process group) -------------


def start_distributed(agent: nn.Module, device: torch.device) -> None:
    """Under torchrun with more than one process: join the process group, start every process from rank 0's weights."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return  # plain python, or a single process: no process group, the code path of one process exactly
    on_gpu = device.type == "cuda"
    dist.init_process_group("cpu:gloo,cuda:nccl" if on_gpu else "gloo", device_id=device if on_gpu else None)
    atexit.register(time.sleep, GLOO_EXIT_GRACE_S)  # after the next one (last in, first out): a gloo thread that
    atexit.register(dist.destroy_process_group)  # wants the GIL once the interpreter finalizes aborts the process
    for p in agent.parameters():
        dist.broadcast(p.data, src=0)


def rank_seed(seed: int) -> int:
    """--seed under plain python; under torchrun one drawn for (seed, rank): with seed + rank streams would repeat."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return seed
    return int(np.random.SeedSequence(seed, spawn_key=(RANK,)).generate_state(1)[0])


def all_sum(x: Tensor) -> Tensor:
    """x summed over every process, in place (x itself without a process group)."""
    if dist.is_initialized():
        dist.all_reduce(x)
    return x


def global_mean(x: Tensor) -> Tensor:
    """The mean of x over every process's samples."""
    if not dist.is_initialized():
        return x.mean()
    total, n = all_sum(torch.stack([x.sum(), x.new_tensor(x.numel())]))
    return total / n


def global_var(x: Tensor) -> Tensor:
    """The variance (n - 1) of x over every process's samples, from the global mean, in float64."""
    if not dist.is_initialized():
        return x.var()
    n, total = all_sum(torch.stack([x.new_tensor(x.numel(), dtype=torch.float64), x.double().sum()]))
    return all_sum((x.double() - total / n).square().sum()) / (n - 1)


def average_gradients(agent: nn.Module, samples: int) -> None:
    """Make each process's gradient that of the loss over every process's samples: the same step everywhere."""
    if not dist.is_initialized():
        return
    grads = [p.grad for p in agent.parameters()]
    flat = all_sum(torch.cat([g.flatten() * samples for g in grads] + [grads[0].new_tensor([samples])]))
    for g, part in zip(grads, torch.split(flat[:-1] / flat[-1], [g.numel() for g in grads])):
        g.copy_(part.view_as(g))


def gather_objects(obj) -> list:
    """obj from every process, in rank order."""
    if not dist.is_initialized():
        return [obj]
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, obj)
    return everyone


def gather_iteration(metrics: dict, samples: int, episodes: list, signum: int | None) -> tuple[dict, list, int | None]:
    """Every process's metrics (weighted by its samples: ranks drop different numbers of autoreset steps; the ratio's
    extremes over all), episodes and stop request, so that every process takes the same decisions."""
    everyone = gather_objects((metrics, samples, episodes, signum))
    if len(everyone) > 1:
        total = sum(n for _, n, _, _ in everyone)
        metrics = {k: sum(m[k] * n for m, n, _, _ in everyone) / total for k in metrics}
        metrics["losses/ratio_max"] = max(m["losses/ratio_max"] for m, _, _, _ in everyone)
        metrics["losses/ratio_min"] = min(m["losses/ratio_min"] for m, _, _, _ in everyone)
    signals = [s for _, _, _, s in everyone if s]
    return metrics, [e for _, _, eps, _ in everyone for e in eps], max(signals) if signals else None


def merge_normalization(envs: VectorEnv, prior: dict[str, Tensor]) -> dict[str, Tensor]:
    """Every process's running statistics, weighted by their counts, combined into the global ones all go on with.
    Each process holds prior (the last merge) plus what it has seen since: add up the raw moments, count prior once."""
    state = normalization_state(envs)
    if not dist.is_initialized():
        return state
    extra = dist.get_world_size() - 1
    for name in sorted({key.split(".")[0] for key in state}):  # the same order in every process
        n, mean, var = (state[f"{name}.{x}"].double().flatten() for x in ("count", "mean", "var"))
        n0, mean0, var0 = (prior[f"{name}.{x}"].double().flatten() for x in ("count", "mean", "var"))
        moments = all_sum(torch.cat([n, n * mean, n * (var + mean**2)]))
        moments -= extra * torch.cat([n0, n0 * mean0, n0 * (var0 + mean0**2)])
        n, s1, s2 = moments.split([1, mean.numel(), mean.numel()])
        shape = state[f"{name}.mean"].shape
        mean, var = (s1 / n).view(shape), (s2 / n - (s1 / n) ** 2).view(shape)
        dtype = state[f"{name}.mean"].dtype  # back to the statistics' own dtype (float32 ones stay float32)
        state |= {f"{name}.count": n[0], f"{name}.mean": mean.to(dtype), f"{name}.var": var.to(dtype)}
    load_normalization_state(envs, state, frozen=False)
    return state


# 9. Checkpoints and resume -------------------------------------------------------------------

# The normalizing wrappers' running statistics travel with the checkpoint (ppo_atari.py has none: nothing is found)
RUNNING_STATS = ("obs_rms", "return_rms")  # what gymnasium's normalizing wrappers keep


def running_stats(envs: VectorEnv) -> list[tuple[VectorEnv, str]]:
    """(wrapper, name) of every running statistic in the chain of wrappers around envs."""
    found = []
    while hasattr(envs, "env"):
        found += [(envs, name) for name in RUNNING_STATS if name in vars(envs)]
        envs = envs.env
    return found


def normalization_state(envs: VectorEnv) -> dict[str, Tensor]:
    """The running statistics of every normalizing wrapper around envs, as tensors."""
    state = {}
    for wrapper, name in running_stats(envs):
        rms = vars(wrapper)[name]
        state |= {f"{name}.mean": torch.as_tensor(rms.mean), f"{name}.var": torch.as_tensor(rms.var)}
        state[f"{name}.count"] = torch.tensor(rms.count, dtype=torch.float64)  # float32 rounds above 2^24
    return state


def load_normalization_state(envs: VectorEnv, state: dict[str, Tensor], frozen: bool) -> None:
    """Put saved running statistics back into the wrappers; frozen ones stop updating (evaluation)."""
    for wrapper, name in running_stats(envs):
        rms = vars(wrapper)[name]
        rms.mean = state[f"{name}.mean"].numpy().copy()  # in the saved dtype: a float64 observation's statistics are
        rms.var = state[f"{name}.var"].numpy().copy()  # float64 after their first update, a fresh wrapper's float32
        rms.count = state[f"{name}.count"].item()
    freeze_normalization(envs, frozen)


def freeze_normalization(envs: VectorEnv, frozen: bool) -> None:
    """Stop (or restart) the updates of every normalizing wrapper's running statistics."""
    for wrapper, _ in running_stats(envs):
        wrapper.update_running_mean = not frozen


def rng_state() -> dict:
    return {
        "python": random.getstate(),
        "numpy": [x.tolist() if isinstance(x, np.ndarray) else x for x in np.random.get_state()],  # noqa: NPY002
        "torch": torch.get_rng_state(),
        "cuda": [torch.cuda.get_rng_state(LOCAL_RANK)] if torch.cuda.is_available() else [],  # this GPU's
    }


def set_rng_state(state: dict) -> None:
    random.setstate((state["python"][0], tuple(state["python"][1]), state["python"][2]))
    np.random.set_state((state["numpy"][0], np.array(state["numpy"][1], dtype=np.uint32), *state["numpy"][2:]))  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if torch.cuda.is_available() and state["cuda"]:  # onto this process's GPU, whatever the saving host had
        torch.cuda.set_rng_state(state["cuda"][0], LOCAL_RANK)


def save_checkpoint(
    path: str, agent: Agent, optimizer: torch.optim.Optimizer, envs: VectorEnv, args: Args, progress: dict
) -> None:
    """Everything a run needs to go on, written beside path and renamed over it: a crash leaves the last one whole."""
    spaces = [str(envs.single_observation_space), str(envs.single_action_space)]  # restore_agent checks them
    state = {"script": SCRIPT_NAME, "spaces": spaces, "args": dataclasses.asdict(args), "agent": agent.state_dict()}
    state |= {"optimizer": optimizer.state_dict(), "normalization": normalization_state(envs), "progress": progress}
    state["rng"] = gather_objects(rng_state())  # one per process
    if RANK == 0:
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)


def load_checkpoint(path: str) -> dict:
    """A checkpoint is data: weights_only refuses anything that would run code while loading."""
    try:
        with warnings.catch_warnings(action="ignore"):  # torch's notes on a broken file would precede our one line
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # missing, truncated, corrupted, or not a torch file at all
        fail(f"{path} is not a readable checkpoint ({why(e)})")
    if not isinstance(ckpt, dict) or ckpt.get("script") != SCRIPT_NAME:
        fail(f"{path} was not written by {SCRIPT_NAME}.py")
    try:
        ckpt["args"] = Args(**ckpt["args"])
    except TypeError as e:
        fail(f"{path} holds Args this version of {SCRIPT_NAME}.py does not know ({e})")
    return ckpt


def restore_agent(
    ckpt: dict, envs: VectorEnv, agent: Agent, optimizer: torch.optim.Optimizer | None, frozen: bool
) -> None:
    """Load the saved agent (optimizer, this process's RNG streams) and normalization, checked against envs."""
    spaces = [str(envs.single_observation_space), str(envs.single_action_space)]
    if ckpt["spaces"] != spaces:
        fail(f"the checkpoint is for observation/action spaces {ckpt['spaces']}, the environment has {spaces}")
    try:
        agent.load_state_dict(ckpt["agent"])
        if optimizer is not None:
            optimizer.load_state_dict(ckpt["optimizer"])
        load_normalization_state(envs, ckpt["normalization"], frozen)
    except (RuntimeError, KeyError, ValueError) as e:
        fail(f"the checkpoint does not fit this agent ({why(e)})")
    if optimizer is not None and RANK < len(ckpt["rng"]):  # a process the saved run lacked keeps its seed
        set_rng_state(ckpt["rng"][RANK])


def start_run(args: Args) -> tuple[Args, dict | None, str, dict]:
    """A new run, or the one saved in --resume: its Args, checkpoint, folder and progress."""
    ckpt = load_checkpoint(args.resume) if args.resume else None
    if ckpt:  # the saved run goes on with its own Args
        args = dataclasses.replace(ckpt["args"], resume=args.resume)
    if error := check_args(args):
        fail(error)
    if ckpt:  # main goes on from the saved step, in batches of this run's number of processes
        return args, ckpt, os.path.dirname(args.resume) or ".", ckpt["progress"]
    run_name = f"{args.env_id.replace('/', '-').replace(':', '-')}__{args.exp_name}__{args.seed}__{int(time.time())}"
    progress = {"global_step": 0, "iteration": 0, "kl_beta": args.kl_beta, "episodes": 0, "recent_returns": []}
    return args, None, f"runs/{run_name}", progress


def finished_before(run_dir: str, progress: dict, last_iteration: int) -> bool:
    """A resumed run with nothing left to do (one without summary.json was cut in its closing evaluation: redo it)."""
    if progress["iteration"] < last_iteration or not os.path.exists(os.path.join(run_dir, "summary.json")):
        return False
    say(f"{run_dir} already finished at step {progress['global_step']}: nothing to resume")
    return True


def seed_everything(args: Args) -> torch.device:
    """Seed every RNG and pick the device (CUDA when available and wanted)."""
    seed = rank_seed(args.seed)  # every process samples its own actions
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 (seeds any library that draws from the global RNG)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = torch.device(f"cuda:{LOCAL_RANK}" if torch.cuda.is_available() and args.cuda else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(CPU_THREADS)
    return device


# 10. Evaluation ------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(
    envs: VectorEnv, agent: Agent, num_episodes: int, greedy: bool, seed: int, device: torch.device
) -> list[float]:
    """Raw returns of num_episodes whole episodes (whole games on Atari) of the policy."""
    returns = []
    torch.manual_seed(seed)  # the same episodes whenever a policy is evaluated
    obs, _ = envs.reset(seed=seed)
    while len(returns) < num_episodes:
        action, _, _, _ = agent.get_action_and_value(torch.as_tensor(obs, device=device), greedy=greedy)
        obs, _, _, _, info = envs.step(action.cpu().numpy())
        if "_episode" in info:
            returns += [float(r) for r in info["episode"]["r"][info["_episode"]]]
    return returns[:num_episodes]


def make_eval_envs(args: Args, run_name: str, normalization: dict) -> VectorEnv:
    """One environment whose normalization statistics are the given ones, frozen."""
    envs = make_envs(dataclasses.replace(args, num_envs=1, async_envs=False), f"{run_name}/eval")
    load_normalization_state(envs, normalization, frozen=True)
    return envs


def run_evaluation(envs: VectorEnv, agent: Agent, args: Args, path: str, device: torch.device) -> dict:
    """Evaluate, print mean +- std of the raw return, and write the figures to path (eval.json)."""
    returns = evaluate(envs, agent, args.eval_episodes, not args.eval_stochastic, args.seed + EVAL_SEED_OFFSET, device)
    result = {"episodes": len(returns), "mean_return": float(np.mean(returns)), "std_return": float(np.std(returns))}
    result |= {"greedy": not args.eval_stochastic, "returns": returns}
    print(f"eval: {result['mean_return']:.1f} +- {result['std_return']:.1f} over {len(returns)} episodes")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    return result


def evaluate_checkpoint(args: Args) -> dict:
    """--eval-checkpoint: the saved policy, with its saved normalization frozen; eval.json beside it."""
    ckpt = load_checkpoint(args.eval_checkpoint)
    keep = {k: getattr(args, k) for k in ("eval_episodes", "eval_stochastic", "capture_video", "cuda")}
    run_args = dataclasses.replace(ckpt["args"], **keep)
    if run_args.eval_episodes < 1:
        fail(f"--eval-episodes must be positive, got {run_args.eval_episodes}")
    if error := check_env(run_args):  # its module, its env_kwargs
        fail(error)
    device = torch.device("cuda" if torch.cuda.is_available() and run_args.cuda else "cpu")
    run_dir = os.path.dirname(args.eval_checkpoint) or "."
    envs = make_eval_envs(run_args, os.path.basename(os.path.abspath(run_dir)), ckpt["normalization"])
    agent = Agent(envs).to(device)
    if run_args.bf16:  # the policy the run trained and evaluated: its networks under bf16 autocast
        autocast_bf16(agent, device)
    restore_agent(ckpt, envs, agent, None, frozen=True)
    result = run_evaluation(envs, agent, run_args, os.path.join(run_dir, "eval.json"), device)
    envs.close()
    return result


def finish_run(args: Args, run_dir: str, progress: dict, agent: Agent, envs: VectorEnv, log: "RunLog") -> dict:
    """After the last iteration rank 0 evaluates the policy (eval.json) and writes summary.json."""
    device, normalization = next(agent.parameters()).device, normalization_state(envs)
    log.bar.close()
    envs.close()
    if RANK != 0:
        return progress
    evaluation = None
    if args.eval_episodes:
        eval_envs = make_eval_envs(args, os.path.basename(os.path.abspath(run_dir)), normalization)
        evaluation = run_evaluation(eval_envs, agent, args, os.path.join(run_dir, "eval.json"), device)
        eval_envs.close()
        log.writer.add_scalar("eval/episodic_return", evaluation["mean_return"], progress["global_step"])
    summary = {"global_step": progress["global_step"], "episodes": progress["episodes"]}
    summary["mean_return_last_10"] = float(np.mean(progress["recent_returns"])) if progress["recent_returns"] else None
    summary["eval_mean_return"] = evaluation["mean_return"] if evaluation else None
    summary["sps"] = None if log.sps is None else round(log.sps, 1)  # None when no iteration ran
    summary["wall_time_s"] = round(time.time() - log.start_time, 1)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    log.writer.close()
    return summary


# 11. Signals, checks and logs ----------------------------------------------------------------


class Interrupts:
    """SIGINT and SIGTERM ask the loop to checkpoint and stop after this iteration. Under plain python a second one
    quits at once (only a rename replaces a checkpoint); under torchrun later ones are torchrun's copies: ignored."""

    def __init__(self):
        self.signum: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
            again = "" if "WORLD_SIZE" in os.environ else " (again to quit now)"
            say(f"\n{signal.Signals(signum).name}: stopping after this iteration{again}", sys.stderr)
        elif "WORLD_SIZE" not in os.environ:
            for worker in multiprocessing.active_children():  # --async-envs' env workers: at once, quietly
                worker.kill()
                worker.join()  # reaped: no zombie left behind
            os._exit(128 + signum)


def in_workers(thunks: list[Callable[[], gym.Env]], **kwargs) -> VectorEnv:
    """gymnasium's AsyncVectorEnv of the same envs, each in a worker process. The workers ignore SIGINT and SIGTERM,
    which Ctrl-C (to the process group) sends them too: the run closes them, or kills them if their start failed."""

    def ignoring_signals(make: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
        def thunk() -> gym.Env:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
            return make()

        return thunk

    atexit.register(lambda: [w.kill() for w in multiprocessing.active_children()])  # at exit: a failed start's workers
    envs = gym.vector.AsyncVectorEnv([ignoring_signals(make) for make in thunks], **kwargs)
    atexit.register(envs.close)  # before multiprocessing's own exit, which would wait on them for ever
    return envs


def stop_on_signal(signum: int, log: "RunLog", envs: VectorEnv, args: Args, run_dir: str) -> NoReturn:
    """After the checkpoint of a stop: close the logs, say how to resume, and exit with 128 + the signal."""
    # saved: no signal may cut the closing short, not even torchrun's SIGTERM to all once one worker has exited.
    for sig in (signal.SIGINT, signal.SIGTERM):  # ignored by every thread, through the interpreter's exit
        signal.signal(sig, signal.SIG_IGN)
    log.close()
    envs.close()
    path, launcher = os.path.join(run_dir, CHECKPOINT), "python" if args.world_size == 1 else "torchrun (as before)"
    say(f"saved {path}; resume with: {launcher} {SCRIPT_NAME}.py --resume {path}", sys.stderr)
    sys.exit(128 + signum)


def stop_unless_finite(agent: Agent, metrics: dict[str, float], log: "RunLog", iteration: int, run_dir: str) -> None:
    """A non-finite loss or parameter ends the run (exit 1), keeping what was logged and the last checkpoint."""
    losses = (metrics["losses/policy_loss"], metrics["losses/value_loss"])
    if all(math.isfinite(x) for x in losses) and all(torch.isfinite(p).all() for p in agent.parameters()):
        return
    log.close()  # keep everything logged up to the fault
    path = os.path.join(run_dir, CHECKPOINT)
    saved = f"the last good checkpoint {path} is untouched" if os.path.exists(path) else "no checkpoint was written"
    fail(f"non-finite loss or parameters at iteration {iteration}; {saved}", code=1)


def check_args(args: Args) -> str | None:
    """The first problem with the arguments, or None. Checked before anything is written."""
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}"
    if not 0 <= args.seed < 2**32:  # what numpy's global seed takes; gymnasium's seeds are never negative
        return f"--seed must lie in [0, 2**32), got {args.seed}"
    if nan := [name for name, value in vars(args).items() if isinstance(value, float) and math.isnan(value)]:
        return f"--{nan[0].replace('_', '-')} must be a number, got nan"  # inf is one: --max-grad-norm inf clips none
    for name in ("save_every", "eval_episodes", "vf_coef"):
        if getattr(args, name) < 0:
            return f"--{name.replace('_', '-')} must not be negative, got {getattr(args, name)}"
    if (batch := args.num_envs * args.num_steps) % args.num_minibatches or batch < args.num_minibatches * MIN_MINIBATCH:
        what = f"the batch of {batch} (--num-envs x --num-steps, each process's)"
        return f"--num-minibatches {args.num_minibatches} does not divide {what} into minibatches of {MIN_MINIBATCH}+"
    if args.total_timesteps < args.batch_size:
        return f"--total-timesteps {args.total_timesteps} is less than one batch of {args.batch_size}"
    if min(args.learning_rate, args.clip_coef, args.kl_target, args.kl_beta, args.max_grad_norm) <= 0:
        return "--learning-rate, --clip-coef, --kl-target, --kl-beta and --max-grad-norm must be positive"
    if args.target_kl is not None and args.target_kl <= 0:
        return f"--target-kl must be positive, got {args.target_kl}"
    if not (0 <= args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        return "--gamma and --gae-lambda must lie in [0, 1]"
    if args.track and importlib.util.find_spec("wandb") is None:
        return "--track needs Weights & Biases: pip install wandb"
    device = "GPU" if torch.cuda.is_available() and args.cuda else "CPU"  # the one seed_everything picks
    cpu_bf16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if args.bf16 and not (torch.cuda.is_bf16_supported(including_emulation=False) if device == "GPU" else cpu_bf16):
        return f"--bf16 needs bf16 in hardware (CUDA with bf16, a CPU with AVX512-BF16 or AMX): this {device} has none"
    if device == "GPU" and (processes := int(os.environ.get("LOCAL_WORLD_SIZE", "1"))) > torch.cuda.device_count():
        return f"torchrun starts {processes} processes here, more than this machine's GPUs: one per GPU, or --no-cuda"
    return check_env(args)


def check_env(args: Args) -> str | None:
    """Why --env-id with --env-kwargs cannot be trained on by this script (said before anything is written), or None."""
    try:
        env_kwargs = json.loads(args.env_kwargs)
    except json.JSONDecodeError as e:
        return f"--env-kwargs {args.env_kwargs!r} is not JSON ({e})"
    sys.path.append(os.getcwd())  # module:EnvId finds a module in the current folder too, as `python -m` does
    module, _, env_name = args.env_id.rpartition(":")
    try:  # an Atari id or not, asked of gymnasium's registry first
        if module:
            __import__(module)  # module:EnvId: importing the module registers EnvId
        entry_point = str(gym.spec(env_name).entry_point)
    except Exception:  # no such module or id: gym.make below says which
        entry_point = "ale_py"
    if "mujoco" in entry_point:  # Box actions, and not made: MuJoCo's own warnings would precede our one line
        return f"{args.env_id} is a MuJoCo task, no Atari game, which {SCRIPT_NAME}.py trains: use ppo_continuous.py"
    try:  # gymnasium's module:EnvId imports the module, which registers EnvId, then makes EnvId
        with warnings.catch_warnings(action="ignore"):  # gymnasium's notes (an old version...) would precede our line
            (env := gym.make(args.env_id, **env_kwargs)).close()  # its spaces are read below
    except Exception as e:  # no such module or id, an import that raised, a keyword the env does not take
        given = f" with --env-kwargs {args.env_kwargs}" if env_kwargs else ""  # only what the user gave
        return f"cannot make {args.env_id}{given} ({why(e)})"
    if "ale_py" not in entry_point:  # say what trains it
        box = isinstance(env.action_space, gym.spaces.Box) and len(env.action_space.shape) == 1
        other = "train it with ppo_continuous.py" if box else "ppo_continuous.py trains Box (A,) actions: neither does"
        return f"{args.env_id} ({env.action_space} actions) is no Atari game, which {SCRIPT_NAME}.py trains; {other}"
    render = {"render_mode": "rgb_array"} if args.capture_video else {}  # filmed: rendered once here too
    try:  # as training makes it, unseeded, without gymnasium's env checker (its warnings would precede our one line)
        with warnings.catch_warnings(action="ignore"):  # nor gymnasium's notes on make, nor GLFW's (no display)
            env = make_env(args.env_id, 0, False, "", env_kwargs | {"disable_env_checker": True} | render)()
            shapes = [np.shape(env.reset()[0]), np.shape(env.step(env.action_space.sample())[0])]
            if render:  # without a display MuJoCo renders through libEGL only: no libEGL, one line here, no traceback
                if env.render_mode != "rgb_array":  # RecordVideo's own refusal, a traceback once training makes it
                    raise ValueError(f"render_mode is {env.render_mode!r}, not the 'rgb_array' given to gym.make")
                env.render()
        env.close()
        if any(shape != env.observation_space.shape for shape in shapes):  # the size the agent is built for
            raise ValueError(f"reset and step gave observations of shape {shapes}, not {env.observation_space.shape}")
    except Exception as e:
        filmed = ", then rendered for --capture-video" if render else ""
        return f"{args.env_id} failed when made, reset and stepped once{filmed} ({why(e)})"
    return None


def say(message: str, file=None) -> None:
    """print, from rank 0 alone: under torchrun every process runs the same lines."""
    if RANK == 0:
        print(message, file=file)


def why(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def fail(message: str, code: int = 2) -> NoReturn:
    """Bad input ends the program with one line on stderr, no traceback."""
    say(f"error: {message}", file=sys.stderr)
    time.sleep(0 if RANK == 0 else FAIL_GRACE_S)  # under torchrun: rank 0, which prints, exits first
    sys.exit(code)


class NoWriter:
    """TensorBoard for the processes other than rank 0: nothing is written."""

    def add_scalar(self, *args, **kwargs) -> None: ...

    add_text = flush = close = add_scalar


def open_writer(args: Args, run_dir: str, resumed_at: int | None) -> SummaryWriter | NoWriter:
    """TensorBoard (W&B too with --track, resumed by id); a resumed run drops what was logged after its checkpoint."""
    if RANK != 0:
        return NoWriter()
    run_name = os.path.basename(os.path.abspath(run_dir))
    if args.track:
        wandb = importlib.import_module("wandb")  # installed: check_args made sure
        run = {"project": args.wandb_project_name, "entity": args.wandb_entity, "name": run_name, "id": run_name}
        wandb.init(**run, resume="allow", sync_tensorboard=True, config=dataclasses.asdict(args), save_code=True)
    writer = SummaryWriter(run_dir, purge_step=None if resumed_at is None else resumed_at + 1)
    if resumed_at is None:  # the hyperparameters, the derived sizes with them
        derived = {k: getattr(args, k) for k in ("world_size", "batch_size", "minibatch_size", "num_iterations")}
        rows = "\n".join(f"|{k}|{v}|" for k, v in (dataclasses.asdict(args) | derived).items())
        writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")
    return writer


class RunLog:
    """What a run shows as it goes: TensorBoard, the progress bar and the speed (rank 0 alone writes)."""

    def __init__(self, args: Args, run_dir: str, progress: dict, budget: int, resumed: bool, device) -> None:
        sizes = f"batch {args.batch_size} = {args.world_size} x {args.num_envs} envs x {args.num_steps} steps"
        resuming = f", resuming at step {progress['global_step']}" if resumed else ""
        say(f"device: {device}, {sizes}, run: {run_dir}{resuming}")
        self.args, self.writer = args, open_writer(args, run_dir, progress["global_step"] if resumed else None)
        self.start_time, self.start_step = time.time(), progress["global_step"]
        self.sps: float | None = None  # this process's steps per second since it started; None before any
        self.bar = tqdm(total=budget, initial=self.start_step, unit="step", dynamic_ncols=True, disable=RANK != 0)

    def episodes(self, episodes: list[tuple[float, int, int]], start_step: int) -> None:
        """Each finished episode's raw return and length, at the global step where it ended."""
        for ret, length, step in episodes:
            at = start_step + (step + 1) * self.args.num_envs * self.args.world_size
            self.writer.add_scalar("charts/episodic_return", ret, at)
            self.writer.add_scalar("charts/episodic_length", length, at)

    def iteration(self, progress: dict, metrics: dict[str, float], **charts: float) -> None:
        """The update's metrics, the schedules (charts/NAME) and the speed, at the iteration's last step."""
        global_step, recent = progress["global_step"], progress["recent_returns"]
        self.sps = (global_step - self.start_step) / (time.time() - self.start_time)
        scalars = metrics | {f"charts/{name}": value for name, value in charts.items()} | {"charts/SPS": self.sps}
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step)
        self.bar.update(self.args.batch_size)
        self.bar.set_postfix(sps=f"{self.sps:.0f}", ret=f"{np.mean(recent) if recent else float('nan'):.1f}")

    def close(self) -> None:
        self.bar.close()
        self.writer.close()


if __name__ == "__main__":
    main(tyro.cli(Args))
