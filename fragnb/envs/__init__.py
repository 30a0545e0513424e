"""Reference environments: torch-batched CartPole, Pendulum and simple_spread (multi-agent), text tasks for
language models (addition, reversal), and an adapter for any Gymnasium id."""

from .cartpole import CartPole
from .gym_adapter import GymnasiumEnv
from .pendulum import Pendulum
from .simple_spread import SimpleSpread
from .text import Addition, Reverse

__all__ = ["Addition", "CartPole", "GymnasiumEnv", "Pendulum", "Reverse", "SimpleSpread"]
