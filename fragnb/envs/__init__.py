"""Reference environments: a torch-batched CartPole and an adapter for any Gymnasium id."""

from .cartpole import CartPole
from .gym_adapter import GymnasiumEnv

__all__ = ["CartPole", "GymnasiumEnv"]
