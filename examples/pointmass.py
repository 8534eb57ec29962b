"""A point on a plane, steered to a target: a gymnasium environment of one's own, trained with PPO.

    PYTHONPATH=examples python ppo_continuous.py --env-id pointmass:PointMass-v0 --total-timesteps 40960

`pointmass:PointMass-v0` is gymnasium's `module:EnvId`: gym.make imports this module, whose last line
registers the id. The observation is a Dict, which ppo_continuous.py flattens into one vector (its keys
sorted: position, then target); PointMass's keyword arguments are --env-kwargs, e.g. '{"speed": 0.05}'.
"""

import gymnasium as gym
import numpy as np

ARENA = 1.0  # the point and its target start uniformly in [-1, 1]^2
EPISODE_STEPS = 100  # the time limit: a truncation, not a termination


class PointMass(gym.Env):
    """The action is a velocity in [-1, 1]^2; each step moves the point by speed * action. The reward is
    minus the distance to the target: the sooner there, and the closer it stays, the better."""

    def __init__(self, speed: float = 0.1):
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = speed
        plane = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.observation_space = gym.spaces.Dict({"position": plane, "target": plane})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def observation(self) -> dict:
        return {"position": self.position.copy(), "target": self.target.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position, self.target = self.np_random.uniform(-ARENA, ARENA, (2, 2))
        return self.observation(), {}

    def step(self, action):
        self.position = self.position + self.speed * np.clip(action, -1.0, 1.0)
        distance = float(np.linalg.norm(self.target - self.position))
        return self.observation(), -distance, False, False, {}


gym.register("PointMass-v0", entry_point=PointMass, max_episode_steps=EPISODE_STEPS)
