"""Reference algorithms written as fragnb components."""

from . import a2c, dqn, ppo

__all__ = ["a2c", "dqn", "ppo"]
