"""An episode's frames: drawn with matplotlib, animated, and embedded in a notebook's HTML.

CartPole is drawn from its states (a rectangle and a line: no renderer, no OpenGL); any other
environment from its own pictures. :func:`embed` makes matplotlib's JavaScript player of them, its
first frame the still a viewer without scripts shows (PNG frames in a few colours, JPEGs for a
camera's pictures), or an animated GIF. Apart from :mod:`fragnb.ui.animate`, which plays the episode
(the policy, the environment, MuJoCo's OpenGL) and hands its states or pictures here. Figures are made
without pyplot, so no static copy of one is shown beside the animation.
"""

from __future__ import annotations

import base64
import io
import math
import re
import tempfile
from pathlib import Path

import numpy as np

from ..envs.cartpole import CartPole

__all__ = ["DPI", "PNG_COLOURS", "cartpole_animation", "pictures_animation", "embed"]

#: Dots per inch of every frame: CartPole's 4.5 x 1.4 inch figure is 360 x 112 pixels.
DPI = 80
#: Colours of a drawn (PNG) frame: a drawing of a few flat colours loses nothing visible in 16, and its
#: PNG is a quarter of matplotlib's full-colour one (a 200-step CartPole episode: 0.2 MB, not 0.7 MB).
PNG_COLOURS = 16
#: CartPole's drawing in its own units (metres), in Gymnasium's proportions: the cart, and the pole drawn
#: at twice ``CartPole.length`` from an axle a quarter of the cart's height above its centre.
CART_WIDTH, CART_HEIGHT, POLE_LENGTH = 0.4, 0.24, 2 * CartPole.length
#: How the frames are saved, whatever the notebook's matplotlib settings say (a tight bounding box or a
#: high savefig dpi would resize them).
_SAVE_RC = {"savefig.dpi": "figure", "savefig.bbox": "standard", "savefig.transparent": False}


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


def cartpole_animation(states: np.ndarray, returns: np.ndarray, ended: str | None, fps: float):
    """CartPole's episode drawn from its ``states`` (``(n + 1, 4)``), captioned with the return so far
    (``returns``, ``(n + 1,)``) and, on the last frame, why it ended; a ``FuncAnimation`` at ``fps``."""
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


def pictures_animation(frames: list[np.ndarray], returns: np.ndarray, ended: str | None, fps: float):
    """An environment's own pictures (``render_mode="rgb_array"``), one frame each at their size,
    captioned as :func:`cartpole_animation`'s; a ``FuncAnimation`` at ``fps``."""
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


def embed(anim, fps: float, gif: bool, frame_format: str) -> str:
    """``anim`` as HTML: matplotlib's player with its first frame as the still a viewer without scripts
    shows, or an animated GIF in an ``<img>``."""
    import matplotlib

    with matplotlib.rc_context({**_SAVE_RC, "animation.frame_format": frame_format}):
        if not gif:
            html = anim.to_jshtml(fps=fps, default_mode="loop")
            return _with_still(_offline(_fewer_colours(html) if frame_format == "png" else html))
        from matplotlib.animation import PillowWriter

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder, "episode.gif")
            anim.save(path, writer=PillowWriter(fps=fps))
            data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/gif;base64,{data}" alt="an episode of the trained agent">'


#: The player's buttons as text, for Font Awesome's icons: matplotlib loads that font from a CDN, and a course
#: must work offline (a lab without internet, a hub behind a firewall).
_ICONS = {  # characters the fonts a Linux desktop has (DejaVu) draw; a media-control symbol (U+23EE...) often not
    "fa fa-minus": "\u2212",
    "fa fa-fast-backward": "\u21e4",
    "fa fa-step-backward": "\u2039",
    "fa fa-play fa-flip-horizontal": "\u25c0",
    "fa fa-pause": "\u2016",
    "fa fa-play": "\u25b6",
    "fa fa-step-forward": "\u203a",
    "fa fa-fast-forward": "\u21e5",
    "fa fa-plus": "+",
}


def _offline(html: str) -> str:
    """matplotlib's player without its stylesheet from the internet: each icon its character (text style)."""
    html = re.sub(r'<link rel="stylesheet"\s*href="https?://[^"]*font-awesome[^"]*">', "", html)
    for icon, glyph in _ICONS.items():
        html = html.replace(f'<i class="{icon}"></i>', f'<i aria-hidden="true">{glyph}\ufe0e</i>')
    return html


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
