"""Reference algorithms written as fragnb components."""

from . import ppo

__all__ = ["ppo"]
