"""Notebook 00's sentences that state a measured fact, each with its check (tests/claims/__init__.py)."""

from . import Asserted, Explained

CLAIMS = [
    (
        "If you have not met RL before, this notebook is the week 0 the others assume",
        Explained("who the notebook is for, and a lesson plan's time to read it"),
    ),
    ("**Goals.** After this notebook you can", Explained("the learning goals")),
    ("**CartPole**, the environment of most of this course", Explained("what the environment is")),
    (
        "The episode ends when the pole leans more than 12 degrees",
        Explained("CartPole-v1's rules, which fragnb.envs.CartPole copies (its docstring and tests/test_envs.py)"),
    ),
    ("fragnb's `CartPole` steps many copies at once", Explained("what a vector environment is")),
    ("A reward now is worth more than the same reward later", Explained("why discount: the geometric series' bound")),
    ("The random agent's gives each action $1/2$", Explained("a definition: the uniform policy")),
    ("$Q$ being the same for a given first action", Explained("a definition of Q")),
    ("Every algorithm of the course uses one of two ways to learn a value", Explained("Monte Carlo and TD, defined")),
    ("No need to wait for the episode to end", Explained("a property of TD learning, from Sutton and Barto")),
    ("**REINFORCE** (Williams, 1992) estimates it", Explained("the algorithm as published")),
    ("**A learned baseline.** A second head of the network", Explained("PPO's critic and GAE, as published")),
    ("**DQN** (Mnih et al., 2015), the algorithm of notebook 8", Explained("DQN as published")),
    ("Each transition $(s, a, r, s', d)$ goes into a **replay buffer**", Explained("what off-policy means")),
    ("Every loop above has the same parts, which notebook 1 names *roles*", Explained("the course's vocabulary")),
    ("PPO wants its batch from the current policy", Explained("on- and off-policy, as notebooks 2, 3 and 8 show")),
    ("Run REINFORCE again from the same seed for the same 40 updates", Explained("an exercise's instruction")),
    ("Print the mean return of the last 20 episodes beside the run above", Explained("an exercise's instruction")),
    ("1 for the six returns, each equal to the closed form within rounding", Explained("a rubric line")),
    ("1 for the run without the baseline, from the same seed", Explained("a rubric line")),
    ("The returns equal the closed form", Asserted("abs(mine - closed) < 1e-09")),
    (
        "Without it every return to go is positive",
        Explained("CartPole's rewards are all 1, so every return to go is positive; the rest is the theorem"),
    ),
]
