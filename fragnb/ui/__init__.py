"""UI: what the notebook shows, the last stage: graphviz drawings (``render``), progress bars,
live dashboards and timelines (``live``), a trained agent's episode as an animation (``animate``), and
the ``%%fragment`` magic (``magics``); the policy explorer's widgets are ``fragnb.widgets``. Modules are
imported where used: drawing a graph needs no plotting library."""
