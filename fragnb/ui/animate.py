"""Animations: one short episode of a trained agent, played in the notebook's output.

A learning curve says that the return went up; watching the pole stay up says what that means. The
animation is matplotlib's JavaScript player (``FuncAnimation.to_jshtml``): its frames are PNGs (JPEGs
for a camera's pictures) inside the HTML, so it needs no ffmpeg, is saved with the notebook, and plays
wherever a notebook's HTML may run scripts (JupyterLab, VS Code, nbviewer). A viewer that strips scripts
(GitHub's preview of a notebook) shows the first frame as a still: the player's picture carries it.
``gif=True`` embeds an animated GIF instead, which plays without scripts but has no controls.

CartPole is drawn from the state of fragnb's own :class:`~fragnb.envs.CartPole` (a rectangle and a
line: no renderer, no OpenGL). Any other Gymnasium environment (MuJoCo's HalfCheetah-v5) is drawn from
its ``render_mode="rgb_array"`` pictures, for which MuJoCo needs an OpenGL backend that works without a
display, EGL or OSMesa: :func:`animate_gym` finds one that works, each tried in a subprocess (a failed
OpenGL import cannot be undone in this one), or raises a :class:`~fragnb.errors.RenderingError` saying
what to install.

The episode is the policy's greedy one (its most likely action, or the largest Q value), in an
environment made for it with its own seed, under ``torch.no_grad``: the caller's environments, actors,
networks and random number generators are left as they were. The figure is made without pyplot, so no
static copy of it is shown beside the animation. Playing the episode is here; drawing, animating and
embedding its frames is :mod:`fragnb.ui.frames`'s.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import random
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import torch
from IPython.display import HTML
from torch import nn

from ..components import device_of
from ..envs.cartpole import CartPole
from ..errors import RenderingError
from .frames import DPI, cartpole_animation, embed, pictures_animation

__all__ = ["EpisodeAnimation", "animate_cartpole", "animate_gym", "cartpole_episode", "greedy", "DPI"]

#: A MuJoCo camera's picture, in pixels (Gymnasium's default is 480 x 480: four times the bytes).
MUJOCO_SIZE = {"width": 240, "height": 160}


class EpisodeAnimation(HTML):
    """An episode's animation as notebook HTML, and what happened in it.

    Attributes
    ----------
    frames : int
        Pictures in the animation: the state after reset and one per step.
    episode_return : float
        Sum of the rewards over the steps shown.
    ended : str or None
        ``"terminated"`` or ``"truncated"`` if the episode ended within the steps asked for, else None.
    """

    def __init__(self, html: str, frames: int, episode_return: float, ended: str | None):
        super().__init__(html)
        self.frames, self.episode_return, self.ended = frames, episode_return, ended

    def __repr__(self) -> str:  # the text a viewer without HTML shows
        how = f", {self.ended}" if self.ended else ""
        return f"<EpisodeAnimation: {self.frames} frames, return {self.episode_return:g}{how}>"


def greedy(policy) -> Callable[[torch.Tensor], torch.Tensor]:
    """The greedy action of ``policy`` in each of a batch of observations: the argmax of its scores.

    Parameters
    ----------
    policy
        An :class:`~fragnb.algos.ppo.ActorCritic` (scores: its ``logits``), a Q network such as
        :class:`~fragnb.algos.dqn.QNetwork` (what it returns), an actor holding either
        (:class:`~fragnb.algos.ppo.PPOActor`'s ``policy``, :class:`~fragnb.algos.dqn.EpsilonGreedyActor`'s
        ``q``), or any callable from observations ``(n, *obs_shape)`` to scores ``(n, num_actions)``.

    Returns
    -------
    callable
        From float32 observations ``(n, *obs_shape)`` to int64 actions ``(n,)`` on the observations'
        device. It computes under ``torch.no_grad`` on the network's device and draws no random number.

    Examples
    --------
    >>> from fragnb.algos.ppo import ActorCritic
    >>> greedy(ActorCritic(obs_dim=4, num_actions=2))(torch.zeros(3, 4)).shape
    torch.Size([3])
    """
    net = _network(policy)
    scores = net.logits if hasattr(net, "logits") else net
    device = _device(net)

    def act(obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return scores(obs if device is None else obs.to(device)).argmax(-1).to(obs.device)

    return act


def cartpole_episode(policy, steps: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray, str | None]:
    """One greedy episode of a CartPole of its own (``CartPole(num_envs=1, seed=seed)``), ``steps`` steps at most.

    Parameters
    ----------
    policy
        Anything :func:`greedy` takes.
    steps : int
        Most steps to take (CartPole-v1 truncates at 500).
    seed : int
        Seed of the environment's reset.

    Returns
    -------
    states : numpy.ndarray
        ``(n + 1, 4)`` float64: x, x_dot, theta, theta_dot after reset and after each of the ``n`` steps, the
        last one the state the episode ended in (which ``CartPole.step`` replaces by the next episode's first).
    rewards : numpy.ndarray
        ``(n,)`` float32.
    ended : str or None
        ``"terminated"`` (the pole fell or the cart left the track), ``"truncated"`` (time limit) or None.
    """
    act = greedy(policy)
    env = CartPole(num_envs=1, seed=seed)
    states, rewards, ended = [], [], None
    with _randomness_kept():
        obs = env.reset()
        states.append(env.state[0].clone())
        for _ in range(steps):
            # The physics step itself: `step` would reset the environment at the end and lose its last state.
            obs, reward, terminated, truncated = env._step(act(obs))
            states.append(env.state[0].clone())
            rewards.append(float(reward[0]))
            if terminated[0] or truncated[0]:
                ended = "terminated" if terminated[0] else "truncated"
                break
    return torch.stack(states).numpy(), np.asarray(rewards, dtype=np.float32), ended


def animate_cartpole(policy, steps: int = 200, seed: int = 0, fps: float = 50, gif: bool = False) -> EpisodeAnimation:
    """An animation of ``policy``'s greedy episode of CartPole (:func:`cartpole_episode`), to show in a notebook.

    Parameters
    ----------
    policy
        Anything :func:`greedy` takes: the ``ActorCritic`` or ``QNetwork`` a loop trained, or its actor.
    steps : int
        Most steps to show: the animation stops at the end of the episode or after ``steps`` steps.
    seed : int
        Seed of the animation's own environment.
    fps : float
        Frames per second; 50 is real time (CartPole's step is 0.02 s).
    gif : bool
        An animated GIF (plays without scripts, no controls) instead of matplotlib's player.

    Returns
    -------
    EpisodeAnimation
        The HTML to show (the last expression of a cell), with ``frames``, ``episode_return`` and ``ended``.

    Examples
    --------
    >>> from fragnb.algos.ppo import ActorCritic
    >>> animate_cartpole(ActorCritic(obs_dim=4, num_actions=2), steps=3)  # doctest: +ELLIPSIS
    <EpisodeAnimation: ... frames, return ...>
    """
    states, rewards, ended = cartpole_episode(policy, steps, seed)
    returns = np.concatenate([[0.0], np.cumsum(rewards, dtype=np.float64)])
    anim = cartpole_animation(states, returns, ended, fps)
    return EpisodeAnimation(embed(anim, fps, gif, "png"), len(states), float(returns[-1]), ended)


def animate_gym(
    env_id: str, act, steps: int = 100, seed: int = 0, fps: float | None = None, gif: bool = False, **make_kwargs
) -> EpisodeAnimation:
    """An animation of an episode of a Gymnasium environment, from its own ``render_mode="rgb_array"`` pictures.

    For a MuJoCo environment (HalfCheetah-v5) the pictures are 240 x 160 pixels unless ``width`` and
    ``height`` say otherwise, and an OpenGL backend is needed: the one ``MUJOCO_GL`` names, or else
    the first of EGL and OSMesa that works here, which is then set in ``MUJOCO_GL`` for this process.

    Parameters
    ----------
    env_id : str
        A registered Gymnasium id, e.g. ``"HalfCheetah-v5"``.
    act
        From one observation (a NumPy array of the observation space's shape) to one action: an ``int``
        for a ``Discrete`` space, an array of the ``Box``'s shape for a continuous one (clipped to its
        bounds, as :class:`~fragnb.envs.GymnasiumEnv` clips). Or a fragnb network, taken greedily: an
        ``ActorCritic``'s most likely action, a ``GaussianActorCritic``'s mean, a Q network's best
        action, or an actor holding one of them.
    steps : int
        Most steps to show: the animation stops at the end of the episode or after ``steps`` steps. A
        HalfCheetah picture is about 15 kB in the notebook (a checkerboard floor), 100 steps 1.5 MB.
    seed : int
        Seed of the environment's reset.
    fps : float, optional
        Frames per second; by default the environment's ``render_fps`` (real time; HalfCheetah: 20).
    gif : bool
        An animated GIF (plays without scripts, no controls) instead of matplotlib's player.
    **make_kwargs
        Passed to ``gymnasium.make``.

    Raises
    ------
    RenderingError
        The environment cannot draw itself here; the message says what is missing and how to get it.
    """
    import gymnasium as gym

    from ..envs.gym_adapter import _mujoco_warnings_to_python

    spec = gym.spec(env_id)  # an unknown id fails here, with Gymnasium's message
    if "mujoco" in str(spec.entry_point):
        backend = _mujoco_backend()
        _mujoco_warnings_to_python(env_id)
        make_kwargs = {**MUJOCO_SIZE, **make_kwargs}
    else:
        backend = None
    try:
        env = gym.make(env_id, render_mode="rgb_array", **make_kwargs)
    except gym.error.DependencyNotInstalled as err:
        raise RenderingError(f"{env_id} cannot be made here: {err}") from err
    try:
        policy = _numpy_policy(act, env.action_space)
        frames, rewards, ended = [], [], None
        with _randomness_kept():
            obs, _ = env.reset(seed=seed)
            frames.append(_first_picture(env, env_id, backend))
            for _ in range(steps):
                obs, reward, terminated, truncated, _ = env.step(policy(obs))
                frames.append(env.render())
                rewards.append(float(reward))
                if terminated or truncated:
                    ended = "terminated" if terminated else "truncated"
                    break
        fps = fps or env.metadata.get("render_fps") or 30
    finally:
        env.close()
    returns = np.concatenate([[0.0], np.cumsum(rewards, dtype=np.float64)])
    anim = pictures_animation(frames, returns, ended, fps)
    return EpisodeAnimation(embed(anim, fps, gif, "jpeg"), len(frames), float(returns[-1]), ended)


# -- the policy ---------------------------------------------------------------------------------------
def _network(policy):
    """The network an actor acts with (``PPOActor.policy``, ``EpsilonGreedyActor.q``), else ``policy``."""
    for name in ("policy", "q"):
        inner = getattr(policy, name, None)
        if isinstance(inner, nn.Module):
            return inner
    return policy


def _device(net) -> torch.device | None:
    return device_of(net) if isinstance(net, nn.Module) and any(True for _ in net.parameters()) else None


def _numpy_policy(act, space) -> Callable[[np.ndarray], int | np.ndarray]:
    """``act`` as a function from one NumPy observation to an action ``space`` takes."""
    import gymnasium as gym

    discrete = isinstance(space, gym.spaces.Discrete)
    net = _network(act)
    if isinstance(net, nn.Module):
        device = _device(net)
        batch = greedy(net) if discrete else getattr(net, "mean", net)

        def call(obs):
            x = torch.as_tensor(obs, dtype=torch.float32, device=device).unsqueeze(0)
            with torch.no_grad():
                return batch(x)[0].cpu().numpy()
    else:
        call = act

    def policy(obs):
        action = call(obs)
        return int(action) if discrete else np.clip(np.asarray(action, dtype=space.dtype), space.low, space.high)

    return policy


@contextlib.contextmanager
def _randomness_kept():
    """Run the episode without moving the caller's random number generators (torch's on the CPU, NumPy's
    and Python's global ones): a greedy policy draws nothing, but a user's ``act`` might."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


# -- MuJoCo's OpenGL ---------------------------------------------------------------------------------------
#: The backends tried, in order, when ``MUJOCO_GL`` is not set (``glfw`` needs a display).
BACKENDS = ("egl", "osmesa")
_PROBE = "import mujoco; r = mujoco.Renderer(mujoco.MjModel.from_xml_string('<mujoco/>'), 8, 8); r.render(); r.close()"
_HOW = (
    "MuJoCo draws off screen through EGL or OSMesa. OSMesa (Mesa's software renderer, any machine): "
    "`apt-get install libosmesa6`, then MUJOCO_GL=osmesa. EGL: a GPU's driver (NVIDIA's ships libEGL_nvidia) "
    "or Mesa's (`apt-get install libegl1 libgl1-mesa-dri`), then MUJOCO_GL=egl. Set MUJOCO_GL before starting "
    'Jupyter, or run `os.environ["MUJOCO_GL"] = "osmesa"` in a fresh kernel before anything renders. '
    "(animate_cartpole needs no OpenGL.)"
)


def _mujoco_backend() -> str:
    """The OpenGL backend MuJoCo renders with: ``MUJOCO_GL`` if set, else the first of :data:`BACKENDS`
    that works here (then set in ``MUJOCO_GL``, where Gymnasium's renderer looks)."""
    try:
        import mujoco  # noqa: F401
    except ImportError as err:
        raise RenderingError(
            "MuJoCo is not installed: `pip install 'fragnb[mujoco]'` (Gymnasium's mujoco extra)"
        ) from err
    except RuntimeError as err:  # MuJoCo reads MUJOCO_GL when it is first imported
        raise RenderingError(
            f"MuJoCo does not load with MUJOCO_GL={os.environ.get('MUJOCO_GL')}: {err}. {_HOW}"
        ) from err
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        return chosen
    failures = {}
    for backend in BACKENDS:
        failures[backend] = _opengl_failure(backend)
        if failures[backend] is None:
            os.environ["MUJOCO_GL"] = backend
            return backend
    tried = "; ".join(f"MUJOCO_GL={b}: {why}" for b, why in failures.items())
    raise RenderingError(f"MuJoCo cannot render on this machine: no OpenGL backend works ({tried}). {_HOW}")


@functools.cache
def _opengl_failure(backend: str) -> str | None:
    """None if MuJoCo renders with ``MUJOCO_GL=backend``, else why not (the error's last line). Tried in a
    subprocess: an OpenGL library that fails to load cannot be unloaded from this process."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "no picture within 120 s"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def _first_picture(env, env_id: str, backend: str | None) -> np.ndarray:
    """The environment's first picture; where it cannot draw, a RenderingError saying why."""
    hook = sys.unraisablehook
    # A Gymnasium viewer that got no OpenGL context fails again as it is collected ("Exception ignored in
    # OffScreenViewer.__del__"): after the error below that says it all, that would be noise.
    sys.unraisablehook = lambda u: None if "OffScreenViewer" in getattr(u.object, "__qualname__", "") else hook(u)
    try:
        try:
            return env.render()
        except Exception as err:  # OpenGL's failures come as ImportError, AttributeError, mujoco.FatalError...
            failure = f"{type(err).__name__}: {err}"
        gc.collect()  # the viewer, held by the error's traceback until now
    finally:
        sys.unraisablehook = hook
    using = f" with MUJOCO_GL={backend}" if backend else ""
    hint = f" {_HOW}" if backend else ""
    raise RenderingError(f"{env_id} cannot draw itself{using}: {failure}.{hint}")
