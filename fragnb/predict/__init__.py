"""Predict: a placement's throughput on a cluster before it runs there, a stage after execution.

``profile`` measures the loop once under ``single`` on copies (it runs the cell, so it comes after
the runtime); ``calibrate`` describes a real cluster by measuring it over fragnb's own channels;
``model`` is the pure model of a placement's program on a described :class:`~fragnb.predict.model.Cluster`.
"""

from .model import PRESETS, Cluster, Prediction, Scaling, predict, scaling
from .profile import Profile, profile

__all__ = ["profile", "Profile", "predict", "scaling", "Prediction", "Scaling", "Cluster", "PRESETS"]
