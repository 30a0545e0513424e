"""The policy explorer: pick a distribution policy and its parameters and see the placement redrawn;
compare two policies; compose your own; run the loop from Run and Stop buttons.

Plain ipywidgets rather than a custom front end (anywidget): graphviz already lays placements out
as SVG, which an ``HTML`` widget shows, so no JavaScript has to be written, built or kept in step
with JupyterLab, and the explorer works wherever ipywidgets do (JupyterLab, Notebook 7, VS Code).
A run happens in a thread of the kernel, so the widgets stay live while it lasts; its progress goes
to the explorer's own widgets, whose updates reach the browser from any thread.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from importlib.resources import files

import ipywidgets as W

from fragnb import policies
from fragnb.policies import ROLES, DistributionPolicy, choices
from fragnb.predict import profile
from fragnb.predict.model import PRESETS, predict, scaling
from fragnb.runtime import run
from fragnb.seeds import Setup, sweep
from fragnb.text import human
from fragnb.ui.live import LiveProgress, png
from fragnb.ui.render import DOT_MISSING_HINT, svg
from fragnb.ui.seeds import SweepView

__all__ = ["Explorer"]

STYLE = files(__package__).joinpath("style.css").read_text()
#: Worker groups the "your own policy" tab offers each role, and the roles' defaults there (coarse's).
OWN_GROUPS = ("learner", "actors", "envs", "buffer")
OWN_DEFAULT = {"env": "actors", "actor": "actors", "buffer": "actors", "learner": "learner", "driver": "learner"}
EMBEDDED = ("local", "cuda")


class Explorer:
    """Widgets that place ``graph`` under any registered policy, compare two, and run it.

    Parameters
    ----------
    graph : FragmentGraph
        A captured loop; profiled once under ``single`` on copies when the explorer opens
        (:func:`fragnb.profile`: a few iterations), so edges show their bytes and placements their
        predicted throughput.
    policy, cluster, **params
        What the controls show first (as for :func:`fragnb.run`).
    predict_on : str
        The cluster preset predictions are for (:data:`fragnb.predict.model.PRESETS`).
    profile : Profile, optional
        The loop's profile, if you took one (``p = fragnb.profile(graph)``): the explorer then runs
        nothing when it opens.

    Attributes
    ----------
    profile : Profile or None
        The loop's profile the explorer predicts from and labels edges with; None where profiling
        failed (the explorer still places and runs).
    result : RunResult or None
        The last run's result; ``error`` the exception that ended the last run, if one did.

    Run starts the chosen policy in a thread of the kernel. Stop ends it after the current iteration:
    the namespace is then what plain Python leaves after that many iterations (as with ``until``),
    and fragnb's embedded cluster is closed, so no worker process is left.
    """

    def __init__(self, graph, policy="single", cluster=None, predict_on="here", profile=None, **params):
        self.graph = graph
        self._profile_error = None
        self.profile = profile if profile is not None else self._profiled()
        self.params: dict = dict(params)  # the user's choices, kept across policies
        self._client = None if cluster is None or isinstance(cluster, str) else cluster  # a distributed.Client given
        self.result = self.error = None
        self.redraw_seconds = 0.0  # how long the last change took to show (placement, drawing, table)
        self._thread: threading.Thread | None = None
        self._active = False  # a run is under way (its thread may still be tidying up after)
        self._stop = threading.Event()
        self._svg: dict[str, str] = {}  # DOT source -> SVG
        self._quiet = False  # set while controls are rebuilt, so their events do not redraw

        self.policy = W.Dropdown(
            description="policy", options=sorted(policies.POLICIES), value=policies.resolve(policy).name
        )
        self.controls = W.HBox()
        self.cluster = W.Combobox(
            description="cluster",
            value=self._client.scheduler.address if self._client else cluster or "local",
            options=_clusters(),
            ensure_option=False,
            placeholder="local, cuda or tcp://host:port",
        )
        self.summary = W.HTML().add_class("fragnb-summary")
        self.drawing = W.HTML().add_class("fragnb-drawing")
        self.traffic = W.HTML().add_class("fragnb-traffic")
        self.run_button = W.Button(description="Run", icon="play", button_style="success")
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.seeds = W.BoundedIntText(value=4, min=2, max=64, description="seeds", layout=W.Layout(width="140px"))
        self.seeds_button = W.Button(
            description="Run seeds",
            icon="random",
            tooltip="run the loop once per seed, side by side, each after the notebook's %%setup cell with its seed",
        )
        self.sweep = None  # the last Run seeds' SweepResult
        self.status = W.HTML().add_class("fragnb-status")
        self.bar = W.IntProgress(value=0, min=0, max=1, description="iterations")
        self.link = W.HTML()
        self.plot = W.Image(format="png", layout=W.Layout(max_width="100%", display="none")).add_class("fragnb-live")
        self.preset = W.Dropdown(
            description="predict on", options=[(c.name, k) for k, c in PRESETS.items()], value=predict_on
        )
        self.prediction = W.HTML().add_class("fragnb-prediction")
        self.scaling_button = W.Button(
            description="Scaling plot",
            icon="line-chart",
            tooltip="predicted env steps/s of each policy at 1 to 1,024 replicas on this cluster",
        )
        self.scaling_plot = W.Image(format="png", layout=W.Layout(max_width="100%", display="none")).add_class(
            "fragnb-scaling"
        )
        self._scaling: dict[str, bytes] = {}  # preset -> its plot
        place_tab = W.VBox(
            [
                W.HBox([self.policy, self.cluster]),
                self.controls,
                self.summary,
                self.drawing,
                self.traffic,
                W.HBox([self.preset, self.scaling_button]),
                self.prediction,
                self.scaling_plot,
                W.HBox([self.run_button, self.stop_button, self.seeds, self.seeds_button, self.bar, self.link]),
                self.status,
                self.plot,
            ]
        )

        names = sorted(policies.POLICIES)
        self.left = W.Dropdown(description="compare", options=names, value="coarse" if "coarse" in names else names[0])
        self.right = W.Dropdown(description="with", options=names, value="fine" if "fine" in names else names[-1])
        self.left_drawing = W.HTML(layout=W.Layout(width="50%")).add_class("fragnb-drawing")
        self.right_drawing = W.HTML(layout=W.Layout(width="50%")).add_class("fragnb-drawing")
        self.comparison = W.HTML().add_class("fragnb-traffic")
        compare_tab = W.VBox(
            [W.HBox([self.left, self.right]), W.HBox([self.left_drawing, self.right_drawing]), self.comparison]
        )

        roles = [r for r in ROLES if r in {f.role for f in graph.fragments}] or ["driver"]
        self.own_name = W.Text(description="name", value="my_policy")
        self.own_groups = {r: W.Dropdown(description=r, options=OWN_GROUPS, value=OWN_DEFAULT[r]) for r in roles}
        self.own_drawing = W.HTML().add_class("fragnb-drawing")
        self.own_code = W.HTML().add_class("fragnb-code")
        self.register_button = W.Button(
            description="Register", icon="plus", tooltip="add it to fragnb's policies and place it"
        )
        own_tab = W.VBox(
            [
                W.HTML(
                    "Choose each role's worker group; every group other than the driver's gets a replica count "
                    "parameter of its name. Copy the code into a cell to keep the policy."
                ),
                W.HBox([self.own_name, self.register_button]),
                W.HBox(list(self.own_groups.values())),
                self.own_drawing,
                self.own_code,
            ]
        )

        self.tabs = W.Tab(
            children=[place_tab, compare_tab, own_tab], titles=("Place and run", "Compare two", "Your own policy")
        )
        title = W.HTML(
            f"<span class='fragnb-title'>Explore distribution policies for <code>{html.escape(graph.name)}</code></span>"
        )
        self.widget = W.VBox([W.HTML(f"<style>{STYLE}</style>"), title, self.tabs]).add_class("fragnb-explorer")

        self.policy.observe(lambda _: self._policy_changed(), "value")
        self.preset.observe(lambda _: self._preset_changed(), "value")
        self.scaling_button.on_click(lambda _: self.show_scaling())
        self.left.observe(lambda _: self._compare(), "value")
        self.right.observe(lambda _: self._compare(), "value")
        self.own_name.observe(lambda _: self._own(), "value")
        for dropdown in self.own_groups.values():
            dropdown.observe(lambda _: self._own(), "value")
        self.run_button.on_click(lambda _: self.run())
        self.seeds_button.on_click(lambda _: self.run_seeds())
        self.stop_button.on_click(lambda _: self.stop())
        self.register_button.on_click(lambda _: self.register())
        self._policy_changed()
        self._compare()
        self._own()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    # -- placing ---------------------------------------------------------------------------------

    def select(self, policy: str, **params) -> None:
        """Show ``policy`` with ``params`` (as the controls would)."""
        self.params.update(params)
        if self.policy.value == policy:
            self._policy_changed()
        else:
            self.policy.value = policy

    def current(self) -> tuple[DistributionPolicy, dict]:
        """The chosen policy and the parameters the controls give it."""
        policy = policies.resolve(self.policy.value)
        return policy, {k: self.params[k] for k in policy.parameters if k in self.params}

    def _policy_changed(self) -> None:
        policy = policies.resolve(self.policy.value)
        self._quiet = True
        try:
            controls = []
            for name in policy.parameters:
                control = W.Dropdown(description=name.replace("_", " "), layout=W.Layout(width="max-content"))
                control.observe(lambda change, name=name: self._param_changed(name, change["new"]), "value")
                controls.append(control)
            self.controls.children = controls
            self._fit_controls(policy)
        finally:
            self._quiet = False
        self._show()

    def _param_changed(self, name: str, value) -> None:
        if self._quiet:
            return
        self.params[name] = value
        self._quiet = True
        try:
            self._fit_controls(policies.resolve(self.policy.value))  # e.g. srl: the rings that fit these actors
        finally:
            self._quiet = False
        self._show()

    def _fit_controls(self, policy: DistributionPolicy) -> None:
        """Offer each parameter the values ``place`` accepts given the others; keep the user's where it fits."""
        for control, name in zip(self.controls.children, policy.parameters):
            others = {k: v for k, v in self.current()[1].items() if k != name}
            fits = choices(self.graph, policy, name, **others) or [policy.parameters[name]]
            value = self.params.get(name, policy.parameters[name])
            control.options = fits
            control.value = value if value in fits else fits[0]
            self.params[name] = control.value

    def _place(self, policy, **params):
        """``graph.place(policy, **params)``, its edges labelled with the profile's bytes where there is one."""
        placement = self.graph.place(policy, **params)
        return placement if self.profile is None else placement.measured(self.profile.edge_bytes)

    def _show(self) -> None:
        start = time.perf_counter()
        policy, params = self.current()
        lines = [
            f"<b>{html.escape(policy.name)}</b> mirrors {html.escape(policy.mirrors)}: {html.escape(policy.description)}."
        ]
        if policy.tradeoff:
            lines.append(f"<span class='fragnb-tradeoff'>Trade-off: {html.escape(policy.tradeoff)}.</span>")
        self.summary.value = "<br>".join(lines)
        try:
            placement = self._place(policy, **params)
        except ValueError as e:  # a policy that cannot place this loop: say why, and offer no Run
            self.drawing.value = _error(e)
            self.traffic.value = ""
            self.run_button.disabled = True
        else:
            self.drawing.value = self._draw(placement)
            self.traffic.value = _traffic_table(placement)
            self.prediction.value = self._predicted(placement)
            self.run_button.disabled = self.running
        self.redraw_seconds = time.perf_counter() - start

    # -- predicting ------------------------------------------------------------------------------

    def _profiled(self):
        """The loop's profile, or None where it cannot be taken (its error shows where predictions would)."""
        try:
            return profile(self.graph)
        except Exception as e:  # the explorer still places and runs; it predicts nothing
            self._profile_error = e
            return None

    def prediction_for(self, placement):
        """The chosen preset's prediction for ``placement`` (None without a profile)."""
        return None if self.profile is None else predict(placement, self.profile, self.preset.value)

    def _predicted(self, placement) -> str:
        if self.profile is None:
            return f"<p>No prediction: profiling the loop under single failed ({html.escape(str(self._profile_error))}).</p>"
        p = self.prediction_for(placement)
        shares = ", ".join(f"{html.escape(g)} {b:.0%}" for g, b in p.busy.items())
        terms = ", ".join(f"{html.escape(t)} {share:.0%}" for t, share in p.shares().items())
        return (
            f"<p><b>Predicted</b> (a model, not a measurement) on {html.escape(p.cluster)}: "
            f"<b>{p.env_steps_per_s:,.0f}{p.span} env steps/s</b>, {p.seconds_per_iteration * 1e3:,.0f} ms per iteration; "
            f"busy: {shares}; passing values {p.communication:.0%}.<br>{html.escape(p.bottleneck[0].upper() + p.bottleneck[1:])}."
            f"<br>The iteration's terms: {terms}.</p>"
        )

    def _preset_changed(self) -> None:
        self._show()
        self._compare()
        _picture(self.scaling_plot, self._scaling.get(self.preset.value, b""))

    def show_scaling(self) -> None:
        """Draw the predicted scaling plot for the chosen preset (what the Scaling plot button does)."""
        if self.profile is None:
            return
        if self.preset.value not in self._scaling:
            import matplotlib.pyplot as plt

            sweep = scaling(self.graph, self.profile, self.preset.value, policies=_scalable(self.graph))
            fig, ax = plt.subplots(figsize=(7, 4.2))
            sweep.plot(ax)
            self._scaling[self.preset.value] = png(fig)
            plt.close(fig)
        _picture(self.scaling_plot, self._scaling[self.preset.value])

    def _draw(self, placement) -> str:
        dot = placement.render()
        if dot.source not in self._svg:
            drawn = svg(dot)
            if drawn is None:
                return f"<p>{html.escape(DOT_MISSING_HINT)}</p><pre>{html.escape(dot.source)}</pre>"
            self._svg[dot.source] = drawn
        return self._svg[dot.source]

    # -- comparing -------------------------------------------------------------------------------

    def _compare(self) -> None:
        placed = []
        for dropdown, out in ((self.left, self.left_drawing), (self.right, self.right_drawing)):
            policy = policies.resolve(dropdown.value)
            try:
                placement = self._place(policy, **self._compared_params(policy))
            except ValueError as e:
                out.value = _error(e)
                placed.append(None)
            else:
                out.value = self._draw(placement)
                placed.append(placement)
        self.comparison.value = _comparison_table(*placed, predictions=[p and self.prediction_for(p) for p in placed])

    def _compared_params(self, policy: DistributionPolicy) -> dict:
        """The user's choices where the policy takes them; otherwise 2 replicas where that fits, so
        that both sides show something distributed."""
        params = {}
        for name, default in policy.parameters.items():
            if name in self.params and self.params[name] in choices(self.graph, policy, name, **params):
                params[name] = self.params[name]
            elif (
                isinstance(default, int)
                and name not in policy.options
                and 2 in choices(self.graph, policy, name, **params)
            ):
                params[name] = 2
        return params

    # -- your own policy -------------------------------------------------------------------------

    def own_policy(self) -> DistributionPolicy:
        """The policy the "your own policy" tab composes."""
        groups = {r: self.own_groups[r].value if r in self.own_groups else None for r in ROLES}
        home = groups["driver"] or groups["learner"] or "learner"
        groups = {r: g or home for r, g in groups.items()}
        used = list(dict.fromkeys(groups.values()))
        where = "; ".join(
            f"{', '.join(r for r in self.own_groups if groups[r] == g)} on {g}" + ("" if g == home else " x N")
            for g in used
            if any(groups[r] == g for r in self.own_groups)
        )
        return DistributionPolicy(
            self.own_name.value.strip() or "my_policy",
            "your own",
            where,
            groups=groups,
            replicas={g: 1 if g == home else g for g in used},
            gpu_groups=(groups["learner"],),
            required_roles=tuple(r for r in self.own_groups if r != "driver"),
        )

    def _own(self) -> None:
        policy = self.own_policy()
        self.own_code.value = f"<pre>{html.escape(_source(policy))}</pre>"
        try:
            placement = self._place(policy, **self._compared_params(policy))
        except ValueError as e:
            self.own_drawing.value = _error(e)
        else:
            self.own_drawing.value = self._draw(placement)

    def register(self) -> DistributionPolicy:
        """Register the composed policy and show it in the other tabs."""
        policy = policies.register(self.own_policy())
        names = sorted(policies.POLICIES)
        for dropdown in (self.left, self.right, self.policy):
            value = dropdown.value
            dropdown.options = names
            dropdown.value = value
        self.policy.value = policy.name
        self._policy_changed()
        self.tabs.selected_index = 0
        return policy

    # -- running ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._active

    def run(self) -> None:
        """Start the chosen policy in a thread (what the Run button does); the kernel stays free."""
        self._start(self._work)

    def run_seeds(self) -> None:
        """Run the chosen policy once per seed (the seeds box), side by side, each after the notebook's
        ``%%setup`` cell with its seed, in a thread (what Run seeds does): every run's curve faintly and
        their mean with a 95 % band, then the sweep's table (:func:`fragnb.sweep`)."""
        self._start(self._work_seeds)

    def _start(self, work) -> None:
        if self.running:
            return
        policy, params = self.current()
        from fragnb.runtime.cluster.clusters import ClusterError

        try:
            cluster = self._cluster()
        except ClusterError as e:  # a name that holds no Client
            self.status.value = _error(e)
            return
        self.result = self.error = None
        self._stop = threading.Event()
        self._active = True
        self.run_button.disabled, self.seeds_button.disabled, self.stop_button.disabled = True, True, False
        self.bar.value, self.link.value = 0, ""
        _picture(self.plot, b"")
        self.status.value = f"running {html.escape(policy.name)} {html.escape(str(params or ''))}: starting"
        self._thread = threading.Thread(
            target=work, args=(policy, cluster, params), name="fragnb-explorer", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """End the run after the current iteration (what the Stop button does)."""
        if self.running:
            self._stop.set()
            self.stop_button.disabled = True
            self.status.value = "stopping after the current iteration"

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; whether it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def _work(self, policy: DistributionPolicy, cluster, params: dict) -> None:
        try:
            self.result = run(self.graph, policy, cluster, progress=_WidgetView(self), stop=self._stop, **params)
            self.status.value = html.escape(str(self.result).splitlines()[0]) + (
                f"<br>{html.escape(self.result.stopped)}" if self.result.stopped else ""
            )
            if self.profile is not None and self.result.iterations > 1:  # what ran beside what was predicted
                compared = self.prediction_for(self._place(policy, **params)).compare(self.result)
                self.status.value += f"<br>Against the prediction: {html.escape(str(compared))}"
        except BaseException as e:  # shown, not raised: no cell waits for this thread
            self.error = e
            self.status.value = _error(e)
        finally:
            self._ended(cluster)

    def _work_seeds(self, policy: DistributionPolicy, cluster, params: dict) -> None:
        try:
            setups = [v for v in self.graph.namespace.values() if isinstance(v, Setup)]
            if not setups:
                raise ValueError(
                    "Run seeds runs each seed's setup first: run a %%setup NAME cell in the notebook (its cell "
                    "builds what the loop uses from `seed`)"
                )
            self.sweep = sweep(
                self.graph,
                setups[-1],  # the latest %%setup cell
                seeds=range(self.seeds.value),
                policy=policy.name,
                cluster=cluster,
                progress=_SeedsView(self),
                stop=self._stop,
                **params,
            )
            self.status.value = "<br>".join(html.escape(line) for line in str(self.sweep).splitlines())
        except BaseException as e:  # shown, not raised: no cell waits for this thread
            self.error = e
            self.status.value = _error(e)
        finally:
            self._ended(cluster)

    def _ended(self, cluster) -> None:
        if self._stop.is_set() and cluster in (None, "cuda") and "fragnb.runtime.cluster.clusters" in sys.modules:
            sys.modules["fragnb.runtime.cluster.clusters"].shutdown(
                cluster or "local"
            )  # Stop: no worker process is left
            self.link.value = ""
        self._active = False
        self.run_button.disabled, self.seeds_button.disabled, self.stop_button.disabled = False, False, True
        self._show()

    def _cluster(self):
        """The cluster box's value as ``run`` takes it; a name in the notebook holding a Client is that client."""
        from fragnb.runtime.cluster.clusters import named

        value = self.cluster.value.strip() or "local"
        if self._client is not None and value == self._client.scheduler.address:
            return self._client
        return None if value == "local" else named(value, self.graph.namespace)


class _WidgetView(LiveProgress):
    """A run's progress in the explorer's bar, status line and dashboard image."""

    def __init__(self, explorer: Explorer):
        super().__init__(progress=False, plot=False, plot_every=0.5)
        self.x = explorer
        self.plot = True

    def started(self, total: int | None, title: str) -> LiveProgress:
        self.x.bar.max, self.x.bar.value = total or 1, 0
        self.x.bar.description = "iterations"
        return super().started(total, title)

    def show_bar(self, postfix: dict) -> None:
        self.x.bar.value = min(self.iterations, self.x.bar.max)
        done = f"iteration {self.iterations}" + (f"/{self.total}" if self.total else "")
        self.x.status.value = html.escape(
            f"running {self.title}: {done}, " + ", ".join(f"{k} {v}" for k, v in postfix.items())
        )

    def show_figure(self, fig) -> None:
        _picture(self.x.plot, png(fig))

    def show_link(self, link: str) -> None:
        self.x.link.value = f'<a href="{html.escape(link)}" target="_blank">Dask dashboard</a>'


class _SeedsView(SweepView):
    """A sweep's progress in the explorer's bar, status line and image."""

    def __init__(self, explorer: Explorer):
        super().__init__(progress=False, plot=False, every=0.5)
        self.x = explorer
        self.plot = True

    def begin(self, name: str, policy, runs) -> SweepView:
        self.x.bar.max, self.x.bar.value = len(runs), 0
        self.x.bar.description = "runs"
        return super().begin(name, policy, runs)

    def show_bar(self, run) -> None:
        self.x.bar.value = min(self.x.bar.value + 1, self.x.bar.max)
        failed = sum(bool(r.error) for r in self.runs)
        self.x.status.value = html.escape(
            f"running {self.graph}: {self.x.bar.value} of {len(self.runs)} runs ended"
            + (f", {failed} failed" if failed else "")
        )

    def show_figure(self, fig) -> None:
        _picture(self.x.plot, png(fig))


def _picture(image: W.Image, data: bytes) -> None:
    """Show ``data`` in ``image``, or hide it while there is none (an empty image shows as a broken one)."""
    image.value = data
    image.layout.display = "" if data else "none"


def _error(e: BaseException) -> str:
    return f"<div class='fragnb-error'>{html.escape(f'{type(e).__name__}: {e}')}</div>"


def _traffic_table(placement) -> str:
    """The edges that cross between worker groups, with their operator and bytes per iteration."""
    rows = [
        f"<tr><td>{html.escape(e.src)} &rarr; {html.escape(e.dst)}</td><td>{html.escape(e.operator)}</td>"
        f"<td>{html.escape(placement.graph.describe(e.variables))}</td><td class='fragnb-bytes'>{_size(size)}</td></tr>"
        for e, size in placement.traffic()
    ]
    if not rows:
        return "<p>Nothing crosses between processes: every edge is a local reference.</p>"
    total = _total(placement)
    rows.append(f"<tr><th colspan='3'>predicted per iteration</th><th class='fragnb-bytes'>{_size(total)}</th></tr>")
    collectives = "".join(f"<p>+ {html.escape(c)}</p>" for c in placement.policy.collectives)
    return f"<table><tr><th>edge</th><th>becomes</th><th>values</th><th>bytes/iteration</th></tr>{''.join(rows)}</table>{collectives}"


def _comparison_table(*placements, predictions=(None, None)) -> str:
    def facts(p, guess) -> dict[str, str]:
        if p is None:
            return dict.fromkeys(
                (
                    "parameters",
                    "worker groups",
                    "processes",
                    "edges crossing",
                    "bytes/iteration",
                    "predicted env steps/s",
                    "predicted bottleneck",
                    "mirrors",
                    "trade-off",
                ),
                "cannot place this loop",
            )
        groups = ", ".join(f"{g} x{n}" for g, (n, _) in p.groups.items())
        processes = sum(n // p.colocated.get(g, 1) for g, (n, _) in p.groups.items())
        operators = sorted({e.operator for e, _ in p.traffic()})
        extra = " + all-reduce" if p.policy.collectives else ""
        return {
            "parameters": ", ".join(f"{k}={v}" for k, v in p.params.items()) or "none",
            "worker groups": groups,
            "processes": str(processes),
            "edges crossing": f"{len(p.traffic())} ({', '.join(operators) or 'none'})",
            "bytes/iteration": _size(_total(p)) + extra,
            "predicted env steps/s": f"{guess.env_steps_per_s:,.0f} on {guess.cluster}" if guess else "no profile",
            "predicted bottleneck": guess.bottleneck if guess else "no profile",
            "mirrors": p.policy.mirrors,
            "trade-off": p.policy.tradeoff,
        }

    left, right = (facts(p, guess) for p, guess in zip(placements, predictions))
    names = [p.policy.name if p else "?" for p in placements]
    rows = "".join(
        f"<tr><th>{k}</th><td>{html.escape(left[k])}</td><td>{html.escape(right[k])}</td></tr>" for k in left
    )
    return f"<table><tr><th></th><th>{html.escape(names[0])}</th><th>{html.escape(names[1])}</th></tr>{rows}</table>"


def _total(placement) -> int | None:
    sizes = [size for _, size in placement.traffic()]
    return None if None in sizes else sum(sizes)


def _size(n: int | None) -> str:
    return "not measured" if n is None else human(n)


def _source(policy: DistributionPolicy) -> str:
    """Python that registers ``policy``: what a user pastes into a cell to keep it."""
    return (
        "from fragnb.policies import DistributionPolicy, register\n\n"
        "register(DistributionPolicy(\n"
        f"    {policy.name!r}, {policy.mirrors!r}, {policy.description!r},\n"
        f"    groups={policy.groups!r},\n"
        f"    replicas={policy.replicas!r},\n"
        f"    gpu_groups={policy.gpu_groups!r}, required_roles={policy.required_roles!r},\n"
        "))\n"
    )


def _scalable(graph) -> tuple[str, ...]:
    """The built-in policies with a replica count that place this loop with 2 replicas."""
    fits = []
    for name in ("coarse", "fine", "async", "multi_learner"):
        try:
            graph.place(name, **{"learners" if name == "multi_learner" else "actors": 2})
        except ValueError:
            continue
        fits.append(name)
    return tuple(fits)


def _clusters() -> list[str]:
    import torch

    known = (
        sys.modules["fragnb.runtime.cluster.clusters"].remote_addresses()
        if "fragnb.runtime.cluster.clusters" in sys.modules
        else []
    )
    return [*EMBEDDED[: 2 if torch.cuda.is_available() else 1], *known]
