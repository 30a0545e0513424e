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
static copy of it is shown beside the animation.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gc
import io
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from IPython.display import HTML
from torch import nn

from ..components import device_of
from ..envs.cartpole import CartPole
from ..errors import RenderingError

__all__ = ["EpisodeAnimation", "animate_cartpole", "animate_gym", "cartpole_episode", "greedy", "DPI"]

#: Dots per inch of every frame: CartPole's 4.5 x 1.4 inch figure is 360 x 112 pixels.
DPI = 80
#: Colours of a drawn (PNG) frame: a drawing of a few flat colours loses nothing visible in 16, and its
#: PNG is a quarter of matplotlib's full-colour one (a 200-step CartPole episode: 0.2 MB, not 0.7 MB).
PNG_COLOURS = 16
#: CartPole's drawing in its own units (metres), in Gymnasium's proportions: the cart, and the pole drawn
#: at twice ``CartPole.length`` from an axle a quarter of the cart's height above its centre.
CART_WIDTH, CART_HEIGHT, POLE_LENGTH = 0.4, 0.24, 2 * CartPole.length
#: A MuJoCo camera's picture, in pixels (Gymnasium's default is 480 x 480: four times the bytes).
MUJOCO_SIZE = {"width": 240, "height": 160}
#: How the frames are saved, whatever the notebook's matplotlib settings say (a tight bounding box or a
#: high savefig dpi would resize them).
_SAVE_RC = {"savefig.dpi": "figure", "savefig.bbox": "standard", "savefig.transparent": False}


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
    anim = _cartpole_animation(states, returns, ended, fps)
    return EpisodeAnimation(_embed(anim, fps, gif, "png"), len(states), float(returns[-1]), ended)


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
    anim = _pictures_animation(frames, returns, ended, fps)
    return EpisodeAnimation(_embed(anim, fps, gif, "jpeg"), len(frames), float(returns[-1]), ended)


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


# -- the drawings --------------------------------------------------------------------------------------
def _figure(width: float, height: float):
    """A figure made without pyplot (nothing of it is left for the notebook to show) and axes filling it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    return fig, ax


def _caption(i: int, returns: np.ndarray, ended: str | None, why: str = "") -> str:
    text = f"step {i}   return {returns[i]:g}"
    if i == len(returns) - 1 and ended:
        text += f"   ({why or ended})"
    return text


def _cartpole_animation(states: np.ndarray, returns: np.ndarray, ended: str | None, fps: float):
    from matplotlib.animation import FuncAnimation
    from matplotlib.patches import Rectangle

    fig, ax = _figure(4.5, 1.4)
    edge = CartPole.x_threshold
    ax.set(xlim=(-edge - 0.35, edge + 0.35), ylim=(-0.3, 1.3), aspect="equal")
    rail = -CART_HEIGHT / 2
    ax.plot([-edge, edge], [rail, rail], color="0.6", lw=1)
    for x in (-edge, edge):  # where the episode ends
        ax.plot([x, x], [rail - 0.08, rail + 0.08], color="0.6", lw=1)
    cart = ax.add_patch(Rectangle((0, rail), CART_WIDTH, CART_HEIGHT, color="#4c72b0"))
    (pole,) = ax.plot([], [], lw=3.5, color="#dd8452", solid_capstyle="butt")
    (axle,) = ax.plot([], [], "o", ms=2.5, color="0.2")
    label = ax.text(0.01, 0.97, "", transform=ax.transAxes, va="top", fontsize=7, color="0.2")
    last = len(states) - 1
    x_end = states[last, 0]
    why = ("cart off the track" if abs(x_end) > edge else "pole fell") if ended == "terminated" else "time limit"

    def draw(i: int):
        x, theta = states[i, 0], states[i, 2]
        cart.set_x(x - CART_WIDTH / 2)
        y = CART_HEIGHT / 4
        pole.set_data([x, x + POLE_LENGTH * math.sin(theta)], [y, y + POLE_LENGTH * math.cos(theta)])
        pole.set_color("#c44e52" if i == last and ended == "terminated" else "#dd8452")
        axle.set_data([x], [y])
        label.set_text(_caption(i, returns, ended, why if ended else ""))
        return cart, pole, axle, label

    return FuncAnimation(fig, draw, frames=len(states), interval=1000 / fps)


def _pictures_animation(frames: list[np.ndarray], returns: np.ndarray, ended: str | None, fps: float):
    from matplotlib.animation import FuncAnimation

    height, width = frames[0].shape[:2]
    fig, ax = _figure(width / DPI, height / DPI)
    image = ax.imshow(frames[0], interpolation="none")
    label = ax.text(
        0.01, 0.98, "", transform=ax.transAxes, va="top", fontsize=7, color="white",
        bbox={"facecolor": "black", "alpha": 0.4, "lw": 0, "pad": 1.5},
    )  # fmt: skip

    def draw(i: int):
        image.set_data(frames[i])
        label.set_text(_caption(i, returns, ended))
        return image, label

    return FuncAnimation(fig, draw, frames=len(frames), interval=1000 / fps)


def _embed(anim, fps: float, gif: bool, frame_format: str) -> str:
    """``anim`` as HTML: matplotlib's player with its first frame as the still a viewer without scripts
    shows, or an animated GIF in an ``<img>``."""
    import matplotlib

    with matplotlib.rc_context({**_SAVE_RC, "animation.frame_format": frame_format}):
        if not gif:
            html = anim.to_jshtml(fps=fps, default_mode="loop")
            return _with_still(_fewer_colours(html) if frame_format == "png" else html)
        from matplotlib.animation import PillowWriter

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder, "episode.gif")
            anim.save(path, writer=PillowWriter(fps=fps))
            data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/gif;base64,{data}" alt="an episode of the trained agent">'


def _fewer_colours(html: str) -> str:
    """The player's PNG frames in :data:`PNG_COLOURS` colours (matplotlib saves them in full colour)."""
    from PIL import Image

    def smaller(match: re.Match) -> str:
        rgb = Image.open(io.BytesIO(base64.b64decode(match[2]))).convert("RGB")
        out = io.BytesIO()
        rgb.quantize(PNG_COLOURS, method=Image.Quantize.FASTOCTREE).save(out, format="png", optimize=True)
        return f'{match[1]}{base64.b64encode(out.getvalue()).decode()}"'

    # Frames as matplotlib writes them, base64 with escaped line breaks; a format it no longer writes is left as it is.
    return re.sub(r'(frames\[\d+\] = "data:image/png;base64,)([A-Za-z0-9+/=\\\n]*)"', smaller, html)


def _with_still(html: str) -> str:
    """matplotlib's player sets its picture from a script: give it the first frame to start with."""
    first = re.search(r'frames\[0\] = "(data:image/[a-z+]+;base64,[^"]*)"', html)
    if first is None:
        return html
    return re.sub(r'<img id="(_anim_img\w+)">', lambda m: f'<img id="{m[1]}" src="{first[1]}">', html, count=1)


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
