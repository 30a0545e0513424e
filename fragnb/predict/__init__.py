"""Predict: a placement's throughput on a cluster before it runs there, a stage after execution.

``profile`` measures the loop once under ``single`` on copies (it runs the cell, so it comes after
the runtime); ``calibrate`` describes a real cluster by measuring it over fragnb's own channels;
``model`` is the pure model of a placement's program on a described :class:`~fragnb.predict.model.Cluster`.
"""

from .model import PRESETS, Cluster, Prediction, Scaling, predict, scaling

__all__ = ["profile", "Profile", "predict", "scaling", "Prediction", "Scaling", "Cluster", "PRESETS"]


def __getattr__(name: str):
    """``profile`` and ``Profile`` on first use: ``profile`` runs the loop, so it imports the runtime, and
    importing any module here (a placement's ``predict`` imports ``model``) runs this file first, which
    would close a circle back through the runtime to the placement."""
    if name not in ("profile", "Profile"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .profile import Profile, profile  # binds this package's `profile` to the module: the function, below

    globals().update(profile=profile, Profile=Profile)
    return globals()[name]
