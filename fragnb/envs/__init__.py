"""Reference environments: torch-batched CartPole and Pendulum, and an adapter for any Gymnasium id."""

from .cartpole import CartPole
from .gym_adapter import GymnasiumEnv
from .pendulum import Pendulum

__all__ = ["CartPole", "GymnasiumEnv", "Pendulum"]
