"""Reference algorithms written as fragnb components."""

from . import a2c, dqn, grpo, mappo, ppo

__all__ = ["a2c", "dqn", "grpo", "mappo", "ppo"]
