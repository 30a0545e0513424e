"""Reference environments: torch-batched CartPole, Pendulum and simple_spread (multi-agent), and an adapter for any Gymnasium id."""

from .cartpole import CartPole
from .gym_adapter import GymnasiumEnv
from .pendulum import Pendulum
from .simple_spread import SimpleSpread

__all__ = ["CartPole", "GymnasiumEnv", "Pendulum", "SimpleSpread"]
