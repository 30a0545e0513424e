"""Reference algorithms written as fragnb components."""

from . import a2c, dqn, mappo, ppo

__all__ = ["a2c", "dqn", "mappo", "ppo"]
