"""The course notebooks as a student meets them: JupyterLab on 127.0.0.1, driven by Chromium.

Screenshots and timings land in test-artifacts/browser/. Needs Playwright and a Chromium binary
(Debian's `chromium`; `make test` installs both on a fresh machine).
"""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pictures
import psutil
import pytest

from conftest import ROOT

sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts" / "browser"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: A distributed run of notebook 01's loop, for the Dask tab to find the cluster it ran on.
DASK_TAB_NOTEBOOK = {
    "nbformat": 4,
    "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "cells": [
        {
            "cell_type": "code",
            "id": "run",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": (
                "%load_ext fragnb\n"
                "import fragnb\n"
                "from fragnb.notebook import load_canonical\n"
                "cell = load_canonical('01_first_fragment_graph.ipynb')\n"
                "ns = cell.namespace()\n"
                "ns['iterations'] = 1\n"
                "r = fragnb.run(fragnb.capture(cell.body, ns, name='ppo'), 'coarse', actors=2, progress=False, plot=False)\n"
                "print('ran', r.iterations)"
            ),
        }
    ],
}


def _cells(*sources: str) -> dict:
    """A notebook of code cells with these sources."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [
            {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": src}
            for i, src in enumerate(sources)
        ],
    }


#: Notebook 01's loop logging as CleanRL does, to a SummaryWriter the setup builds, run by the magic under
#: `coarse` x2; then TensorBoard's own notebook magic opens the log directory inside JupyterLab (port 0: the
#: system picks a free one).
TENSORBOARD_NOTEBOOK = _cells(
    "%load_ext fragnb\n"
    "%load_ext tensorboard\n"
    "from torch.utils.tensorboard import SummaryWriter\n"
    "from fragnb.notebook import load_canonical\n"
    "globals().update(load_canonical('01_first_fragment_graph.ipynb').namespace())\n"
    "iterations = 4\n"
    "writer = SummaryWriter('runs/ppo')",
    "%%fragment ppo --policy coarse --actors 2 --run --no-plot\n"
    "obs = env.reset()\n"
    "global_step = 0\n"
    "for it in range(iterations):\n"
    "    for step in range(config.num_steps):\n"
    "        action, logprob, value = actor.act(obs)\n"
    "        next_obs, reward, terminated, truncated, info = env.step(action)\n"
    "        buffer.add(obs, action, logprob, value, reward, terminated | truncated)\n"
    "        obs = next_obs\n"
    "        global_step += config.num_envs\n"
    "        for r in info['episode_returns']:\n"
    "            writer.add_scalar('charts/episodic_return', r, global_step)\n"
    "    stats = learner.update(buffer.batch(actor.value(obs)))\n"
    "    writer.add_scalar('losses/value_loss', stats['value_loss'], global_step)",
    "writer.flush()\n%tensorboard --logdir runs --host 127.0.0.1 --port 0",
)


#: A bug only replica 1 of two actors meets (environment 20, at iteration 3), as notebook 05's drill plants it;
#: the run fails, fragnb.debug() replays it, %debug opens there; then the explorer's Run and Debug here.
DEBUG_NOTEBOOK = _cells(
    "import fragnb\n"
    "from fragnb.notebook import load_canonical\n"
    "cell = load_canonical('01_first_fragment_graph.ipynb')\n"
    "ns = cell.namespace()\n"
    "ns['iterations'] = 5\n"
    "FAILING = '    last_value = actor.value(obs)\\n'\n"
    "PROBE = FAILING + \"    assert not (it == 3 and bool((env.env_ids == 20).any())), 'environment 20 diverged'\\n\"\n"
    "probe = fragnb.capture(cell.body.replace(FAILING, PROBE), ns, name='probe')",
    "fragnb.run(probe, 'coarse', actors=2, progress=False, plot=False)",
    "fragnb.debug()",
    "%debug",
    "x = fragnb.explore(probe, 'coarse', actors=2)\nx",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on loopback without a token, serving copies of the notebooks (autosave must not touch ours)."""
    root = tmp_path_factory.mktemp("lab")
    for name in ("01_first_fragment_graph.ipynb", "04_explore_policies.ipynb"):
        shutil.copy(ROOT / "notebooks" / name, root)
    (root / "dask_tab.ipynb").write_text(json.dumps(DASK_TAB_NOTEBOOK))
    (root / "debug_drill.ipynb").write_text(json.dumps(DEBUG_NOTEBOOK))
    (root / "tensorboard.ipynb").write_text(json.dumps(TENSORBOARD_NOTEBOOK))
    # Every cell in the page: by default JupyterLab leaves cells out of view unrendered (or out of the
    # DOM), and Run All would look finished while a cell below the fold still runs.
    settings = tmp_path_factory.mktemp("settings")
    for name, value in (
        ("notebook-extension/tracker", {"windowingMode": "none"}),
        ("apputils-extension/notification", {"fetchNews": "false"}),
    ):  # no news pop-up over the page
        path = settings / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    port = _free_port()
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=None",
            f"--LabServerApp.user_settings_dir={settings}",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # the environment's programs on PATH, as `make lab` has them (%tensorboard starts `tensorboard`)
        env={**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            time.sleep(0.5)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server, its kernels and their Dask workers
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        yield chromium
        chromium.close()


#: Per page (by id) the requests it made beyond loopback: a course works offline, in a lab without internet.
OUTSIDE: dict[int, list[str]] = {}


def _open(browser, lab, notebook: str):
    url, _ = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    outside = OUTSIDE.setdefault(id(page), [])
    page.on(
        "request",
        lambda r: outside.append(r.url) if urlsplit(r.url).hostname not in (None, "127.0.0.1", "localhost") else None,
    )
    page.goto(f"{url}/lab/workspaces/w{time.monotonic_ns()}/tree/{notebook}?reset")
    page.wait_for_selector(".jp-Notebook", timeout=120_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    return page


PROMPTS = "[...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]"


def _run_all(page, timeout_s: float = 600) -> float:
    """Run every cell (Run > Run All Cells) and wait until none is pending; seconds it took. A click
    that comes before the kernel's session is connected can be lost: then it is made again."""
    page.get_by_text(re.compile(r"\| Idle")).first.wait_for(
        timeout=120_000
    )  # the status bar: kernel connected and idle
    start = time.monotonic()
    for attempt in range(3):
        page.keyboard.press("Escape")
        page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})  # the notebook is the active widget
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile("^Run All Cells")).first.click()
        try:
            page.wait_for_function(f"() => {PROMPTS}.some(e => /\\[(\\*|\\d+)\\]/.test(e.textContent))", timeout=30_000)
            break
        except sync_api.TimeoutError:
            if attempt == 2:
                raise
    page.wait_for_function(
        f"() => {{ const p = {PROMPTS}; return p.length > 0 && p.every(e => /\\[\\d+\\]/.test(e.textContent)); }}",
        timeout=timeout_s * 1000,
    )
    # Cells with a collapsed input (the course's solutions) show no prompt: the kernel's status says when they are done.
    idle = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
    while True:
        page.wait_for_selector(idle, timeout=timeout_s * 1000)
        page.wait_for_timeout(1500)
        if page.locator(idle).count():
            break
    seconds = time.monotonic() - start
    errors = page.locator(".jp-OutputArea-output", has_text="Traceback")
    assert errors.count() == 0, errors.first.inner_text()
    return seconds


def _dask_workers(lab) -> list[psutil.Process]:
    """Dask worker processes under the lab server: a kernel's descendants but for multiprocessing's
    resource tracker and forkserver (its direct children; the workers the forkserver forks are its own)."""
    _, proc = lab
    kernels = [p for p in psutil.Process(proc.pid).children() if "ipykernel" in " ".join(p.cmdline())]
    helpers = {
        c.pid
        for k in kernels
        for c in k.children()
        if any(helper in " ".join(c.cmdline()) for helper in ("resource_tracker", "forkserver"))
    }
    return [
        c
        for k in kernels
        for c in k.children(recursive=True)
        if c.is_running() and c.status() != psutil.STATUS_ZOMBIE and c.pid not in helpers
    ]


def _explorer_text(explorer) -> str:
    """What the explorer shows that its picture must show too: its text less the prediction's figures and
    terms, which the machine's load decides (the bottleneck named, the terms' order), not the code."""
    prediction = explorer.locator(".fragnb-prediction").first.inner_text()
    head = re.match(r"Predicted \(a model, not a measurement\) on [^:]+:", prediction)
    return explorer.inner_text().replace(prediction, head.group(0) if head else prediction)


def _around(*locators) -> dict:
    """The smallest rectangle of the page around ``locators`` (each on screen), with a margin."""
    boxes = [locator.bounding_box() for locator in locators]
    left, top = min(b["x"] for b in boxes) - 8, min(b["y"] for b in boxes) - 8
    right = max(b["x"] + b["width"] for b in boxes) + 8
    bottom = max(b["y"] + b["height"] for b in boxes) + 8
    return {"x": max(0, left), "y": max(0, top), "width": right - max(0, left), "height": bottom - max(0, top)}


def test_explorer_changes_policy_runs_live_and_stops_without_leftovers(browser, lab):
    page = _open(browser, lab, "04_explore_policies.ipynb")
    seconds = _run_all(page)
    explorer = page.locator(".fragnb-explorer").first
    explorer.scroll_into_view_if_needed()
    drawing = explorer.locator(".fragnb-drawing").first
    explorer.screenshot(path=ARTIFACTS / "04_explorer_coarse.png")
    drawing.locator("svg text", has_text="actors").first.wait_for(
        timeout=10_000
    )  # a cell scrolled back into view may redraw
    assert "actors" in drawing.inner_text() and "envs" not in drawing.inner_text()
    predicted = (
        r"Predicted \(a model, not a measurement\) on this machine \(2 cores\): [\d,]+( \([\d,]+-[\d,]+\))? env steps/s"
    )
    prediction = explorer.locator(".fragnb-prediction").first
    assert re.search(predicted, prediction.inner_text())

    # The whole explorer in one picture, as notebook 04's cell opens it (coarse, 2 actors), with the scaling
    # plot: docs/explorer.png is a copy, the rendered 04's picture of the cell's output.
    explorer.locator("button", has_text="Scaling plot").click()  # answered once the notebook's cells are done
    scaling = explorer.locator(".fragnb-scaling").first
    scaling.wait_for(state="visible", timeout=120_000)
    assert (scaling.get_attribute("src") or "").startswith(("blob:", "data:"))
    page.set_viewport_size({"width": 1400, "height": 2600})
    explorer.scroll_into_view_if_needed()
    assert "actors" in drawing.inner_text() and "envs" not in drawing.inner_text()  # still coarse
    assert explorer.locator(".widget-dropdown", has_text="policy").locator("select").input_value() == "coarse"
    explorer.screenshot(path=ARTIFACTS / "04_explorer_prediction.png")
    pictures.keep("explorer.png", ARTIFACTS / "04_explorer_prediction.png", _explorer_text(explorer))
    page.set_viewport_size({"width": 1400, "height": 1000})

    started = time.monotonic()
    explorer.locator(".widget-dropdown", has_text="policy").locator("select").select_option("fine")
    drawing.locator("svg text", has_text="envs").first.wait_for(
        timeout=10_000
    )  # fine's env workers: a new worker group
    redraw = time.monotonic() - started
    assert re.search(predicted, prediction.inner_text())
    explorer.screenshot(path=ARTIFACTS / "04_explorer_fine.png")

    explorer.locator("button", has_text=re.compile(r"^\s*Run\s*$")).click()  # not "Run seeds"
    image = explorer.locator(".fragnb-live").first
    seen, deadline = set(), time.monotonic() + 180
    while len(seen) < 3 and time.monotonic() < deadline:  # the first picture and at least two updates
        src = image.get_attribute("src") or ""
        if src.startswith("blob:") or src.startswith("data:"):
            seen.add(src)
        time.sleep(0.1)
    assert len(seen) >= 3, f"the live dashboard showed {len(seen)} pictures"
    explorer.screenshot(path=ARTIFACTS / "04_explorer_running.png")
    # The README's live run: the buttons, the status line and the live plot, mid-run.
    page.set_viewport_size({"width": 1400, "height": 2600})
    image.scroll_into_view_if_needed()
    status_line = explorer.locator(".fragnb-status").first
    live = _around(explorer.locator("button", has_text="Stop").first, status_line, image)
    page.screenshot(path=ARTIFACTS / "04_live_run.png", clip=live)
    pictures.keep("live_run.png", ARTIFACTS / "04_live_run.png", status_line.inner_text())
    page.set_viewport_size({"width": 1400, "height": 1000})

    explorer.locator("button", has_text="Stop").click()
    explorer.locator(".fragnb-status", has_text="stopped").wait_for(timeout=120_000)
    status = explorer.locator(".fragnb-status").inner_text()
    assert re.search(r"stopped after iteration \d+", status), status
    deadline = time.monotonic() + 30
    while _dask_workers(lab) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _dask_workers(lab), [p.cmdline() for p in _dask_workers(lab)]
    explorer.screenshot(path=ARTIFACTS / "04_explorer_stopped.png")
    _record("notebook_04", {"run_all_s": round(seconds, 1), "redraw_s": round(redraw, 3), "status": status})
    page.close()


def test_notebook_01_trains_in_the_browser_about_as_fast_as_headless(browser, lab):
    page = _open(browser, lab, "01_first_fragment_graph.ipynb")
    seconds = _run_all(page)
    page.locator(".jp-CodeCell", has_text="result = fragnb.run(ppo)").first.screenshot(path=ARTIFACTS / "01_result.png")
    browser_train = _training_seconds(
        page.locator(".jp-CodeCell", has_text="result = fragnb.run(ppo)").first.inner_text()
    )
    seeds = page.locator(".jp-CodeCell", has_text="%%fragment seeds --seeds 0-3").first
    seeds.scroll_into_view_if_needed()
    assert "4 of 4 runs finished" in seeds.inner_text() and seeds.locator(".jp-OutputArea-output img").count() >= 1
    seeds.screenshot(path=ARTIFACTS / "01_seeds.png")  # the seeds' curves, their band and the table
    _check_quiz_and_solutions(page)
    player = page.locator(".jp-CodeCell .animation").first  # the trained agent's episode, matplotlib's player
    player.scroll_into_view_if_needed()
    player.screenshot(path=ARTIFACTS / "01_episode_player.png")
    assert player.locator("button").count() == 9, "the player's buttons"
    assert not OUTSIDE[id(page)], f"notebook 01 fetched from outside this machine: {OUTSIDE[id(page)]}"
    page.close()
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "fragnb.demo",
            "--notebook",
            str(ROOT / "notebooks" / "01_first_fragment_graph.ipynb"),
            "--out",
            str(ARTIFACTS / "demo_learning_curve.png"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    headless_train = _training_seconds(demo.stdout)
    ratio = browser_train / headless_train
    # Measured, not asserted (CI machines vary); the README and the issue note report it.
    print(f"notebook 01 trains in {browser_train:.2f} s in the browser, {headless_train:.2f} s headless: {ratio:.2f}x")
    _record(
        "notebook_01",
        {
            "run_all_s": round(seconds, 1),
            "browser_train_s": browser_train,
            "headless_train_s": headless_train,
            "ratio": round(ratio, 2),
        },
    )


def _check_quiz_and_solutions(page) -> None:
    """The end of a course notebook as a student meets it: the quiz's answers cell, its key collapsed, the
    autograder's tests run without an error on the key; the solutions collapsed until clicked, prose and code
    alike."""
    cells = json.loads((ROOT / "notebooks" / "01_first_fragment_graph.ipynb").read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    hidden = sum(s.startswith("# HIDDEN") for s in sources)
    key = next(s for s in sources if s.startswith("# The quiz's key"))
    key = next(line for line in key.splitlines() if line.startswith("answers = "))[:30]
    quiz = page.locator(".jp-CodeCell", has_text="answers = {1: None").first
    quiz.scroll_into_view_if_needed()
    tests = page.locator(".jp-CodeCell", has_text="# HIDDEN")
    assert tests.count() == hidden and page.locator(".jp-CodeCell .jp-OutputArea-output", has_text="Error").count() == 0
    page.locator(".jp-Cell", has_text="Try the exercises and the quiz first").first.scroll_into_view_if_needed()
    closed = page.locator(".jp-MarkdownCell details:not([open])")
    hidden = page.locator(".jp-CodeCell .jp-InputPlaceholder")
    page.wait_for_timeout(300)
    assert closed.count() >= 1 and hidden.count() >= 1, (closed.count(), hidden.count())
    assert not page.get_by_text(key).first.is_visible()  # the key stays hidden
    page.screenshot(path=ARTIFACTS / "01_solutions_collapsed.png")
    closed.first.locator("summary").click()
    assert page.locator(".jp-MarkdownCell details[open]").count() == 1
    cells = page.locator(".jp-CodeCell")
    cell = cells.nth(next(i for i in range(cells.count()) if cells.nth(i).locator(".jp-InputPlaceholder").count()))
    assert not cell.locator(".jp-InputArea-editor").is_visible()
    cell.locator(".jp-InputPlaceholder").click()  # JupyterLab opens a collapsed input where it is clicked
    cell.locator(".jp-InputArea-editor").wait_for(state="visible", timeout=5_000)
    assert key in cell.inner_text()  # the first collapsed cell: the quiz's key


def _training_seconds(text: str) -> float:
    return float(re.search(r"env steps in ([\d.]+) s", text).group(1))


def _record(name: str, figures: dict) -> None:
    path = ARTIFACTS / "timings.json"
    timings = json.loads(path.read_text()) if path.exists() else {}
    timings[name] = figures
    path.write_text(json.dumps(timings, indent=1) + "\n")


def test_the_dask_dashboard_opens_inside_jupyterlab_and_through_the_jupyter_server(browser, lab):
    """What a remote student needs (docs/jupyterhub.md): dask-labextension's Dask tab in JupyterLab's left
    bar, and a cluster's dashboard, which listens on loopback, served at the Jupyter server's /proxy/PORT/
    by jupyter-server-proxy."""
    pytest.importorskip("dask_labextension")
    pytest.importorskip("jupyter_server_proxy")
    from distributed import LocalCluster

    url, _ = lab
    port = _free_port()
    with LocalCluster(n_workers=1, processes=False, dashboard_address=f"127.0.0.1:{port}"):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/workspaces/w{time.monotonic_ns()}?reset")
        page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
        tab = page.locator(".jp-SideBar [title^='Dask']").first
        tab.wait_for(state="visible", timeout=60_000)
        tab.click()
        page.locator(".dask-DaskDashboardLauncher").first.wait_for(state="visible", timeout=30_000)
        page.screenshot(path=ARTIFACTS / "dask_labextension.png")
        proxied = browser.new_page(viewport={"width": 1400, "height": 1000})
        response = proxied.goto(f"{url}/proxy/{port}/status")
        assert response is not None and response.ok, response and response.status
        proxied.wait_for_function("document.title.includes('Dask')", timeout=60_000)  # Dask's own page, not the lab's
        proxied.locator("canvas").first.wait_for(
            state="visible", timeout=60_000
        )  # its plots, over the proxied websocket
        proxied.screenshot(path=ARTIFACTS / "dask_dashboard_proxied.png")
        page.close()
        proxied.close()


def test_the_dask_tab_finds_the_cluster_a_run_used_without_a_pasted_url(browser, lab):
    """docs/jupyterhub.md: after a distributed run, the Dask tab's search button ("Auto-detect dashboard
    URL") asks the notebook's kernel for its default client's dashboard, which is fragnb's cluster's."""
    pytest.importorskip("dask_labextension")
    page = _open(browser, lab, "dask_tab.ipynb")
    _run_all(page, timeout_s=300)
    assert "ran 1" in page.locator(".jp-OutputArea").first.inner_text()
    page.locator(".jp-SideBar [title^='Dask']").first.click()
    launcher = page.locator(".dask-DaskDashboardLauncher").first
    launcher.wait_for(state="visible", timeout=30_000)
    assert launcher.get_by_text("Dashboard not connected").count() == 1  # nothing pasted, nothing found yet
    page.locator(".dask-URLInput [title='Auto-detect dashboard URL']").first.click()
    page.wait_for_function(
        "() => document.querySelector('.dask-URLInput input').value.startsWith('http://127.0.0.1:')", timeout=60_000
    )
    launcher.get_by_text("Dashboard not connected").wait_for(state="detached", timeout=60_000)  # its panes listed
    page.screenshot(path=ARTIFACTS / "dask_tab_auto_detected.png")
    page.close()


def test_tensorboard_opens_inside_jupyterlab_on_a_distributed_runs_scalars(browser, lab):
    """Issue 69: a `coarse` run's writer calls, made by the notebook, are in TensorBoard, which opens inside
    JupyterLab with TensorBoard's own notebook magic, listening on 127.0.0.1 alone; the run said where it
    logged and how to watch it."""
    pytest.importorskip("tensorboard")
    _, proc = lab
    page = _open(browser, lab, "tensorboard.ipynb")
    _run_all(page, timeout_s=300)
    said = page.locator(".jp-CodeCell").nth(1).locator(".jp-OutputArea").inner_text()
    assert "calls on `writer` (TensorBoard, runs/ppo)" in said and "%tensorboard --logdir runs/ppo" in said, said
    board = page.frame_locator("iframe[id^='tensorboard-frame']")
    try:
        for tag in ("charts/episodic_return", "losses/value_loss"):
            board.get_by_text(tag).first.wait_for(state="visible", timeout=90_000)
        # a curve drawn, its table at the run's last step: 4 iterations of 1,024 env steps
        board.get_by_text("Smoothed").first.wait_for(state="visible", timeout=60_000)
        board.get_by_text("4,096").first.wait_for(state="visible", timeout=60_000)
        page.wait_for_timeout(2000)
        page.locator(".jp-CodeCell").nth(2).scroll_into_view_if_needed()
        page.screenshot(path=ARTIFACTS / "tensorboard_in_jupyterlab.png")
        boards = [
            p for p in psutil.Process(proc.pid).children(recursive=True) if "tensorboard" in " ".join(p.cmdline())
        ]
        assert boards, "no TensorBoard process under the lab's kernel"
        listening = {c.laddr.ip for b in boards for c in b.net_connections(kind="inet") if c.status == "LISTEN"}
        assert listening == {"127.0.0.1"}, listening
        assert not OUTSIDE[id(page)], f"TensorBoard fetched from outside this machine: {OUTSIDE[id(page)]}"
    except Exception:
        page.locator(".jp-CodeCell").nth(2).scroll_into_view_if_needed()
        page.screenshot(path=ARTIFACTS / "tensorboard_in_jupyterlab_failed.png")
        raise
    finally:
        page.close()
        for board_process in [
            p for p in psutil.Process(proc.pid).children(recursive=True) if "tensorboard" in " ".join(p.cmdline())
        ]:
            board_process.terminate()  # started by the kernel, it would outlive the lab


def _run_cell(page, index: int, timeout_s: float = 300) -> str:
    """Run code cell ``index`` alone (select it, Shift+Enter) and wait for the kernel; the cell's output text."""
    cell = page.locator(".jp-CodeCell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    prompt = cell.locator(".jp-InputArea-prompt")
    page.wait_for_function(
        "p => /\\[\\d+\\]/.test(p.textContent)", arg=prompt.element_handle(), timeout=timeout_s * 1000
    )
    return cell.locator(".jp-OutputArea").inner_text()


def _ipdb(page, index: int, answers: list[str]) -> str:
    """Run cell ``index`` (``%debug``) and type ``answers`` at its ipdb> prompt, as a student does; its output."""
    cell = page.locator(".jp-CodeCell").nth(index)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    for answer in answers:
        box = cell.locator(".jp-Stdin-input").last
        box.wait_for(state="visible", timeout=60_000)
        box.fill(answer)
        box.press("Enter")
        page.wait_for_timeout(300)
    page.wait_for_function(
        "p => /\\[\\d+\\]/.test(p.textContent)",
        arg=cell.locator(".jp-InputArea-prompt").element_handle(),
        timeout=60_000,
    )
    return cell.locator(".jp-OutputArea").inner_text()


def test_a_replicas_failure_opens_in_the_debugger_in_jupyterlab(browser, lab):
    """Issue "Debug a fragment where it failed", as a student meets it: the run's error names the replica and
    says what to do; fragnb.debug() replays it (its time taken from the page); %debug answers at its prompt in
    the failing replica's frame. Then the explorer's Run fails the same way and Debug here leads to %debug too."""
    page = _open(browser, lab, "debug_drill.ipynb")
    page.get_by_text(re.compile(r"\| Idle")).first.wait_for(timeout=120_000)
    _run_cell(page, 0)
    failed = _run_cell(page, 1)
    assert "environment 20 diverged" in failed and "replica 1 of 'actors'" in failed and "fragnb.debug()" in failed
    started = time.monotonic()
    replayed = _run_cell(page, 2)
    waited = time.monotonic() - started
    assert "environment 20 diverged" in replayed and "replayed in this kernel from" in replayed, replayed
    took = float(re.search(r"replayed in this kernel from .*? in ([\d.]+) s", replayed).group(1))
    session = _ipdb(page, 3, ["p it", "p env.env_ids.tolist()", "q"])
    assert "<fragment probe>" in session and "\n3\n" in session and str(list(range(16, 32))) in session, session
    page.locator(".jp-CodeCell").nth(3).screenshot(path=ARTIFACTS / "debug_ipdb.png")

    _run_cell(page, 4)
    explorer = page.locator(".fragnb-explorer").first
    explorer.locator("button", has_text=re.compile(r"^\s*Run\s*$")).click()
    explorer.locator(".fragnb-status", has_text="environment 20 diverged").wait_for(timeout=180_000)
    button = explorer.locator("button", has_text="Debug here")
    button.wait_for(state="visible", timeout=30_000)
    button.click()
    explorer.locator(".fragnb-status", has_text="%debug").wait_for(timeout=120_000)
    explorer.screenshot(path=ARTIFACTS / "debug_here.png")
    session = _ipdb(page, 3, ["p it", "p env.env_ids.tolist()", "q"])
    assert "\n3\n" in session and str(list(range(16, 32))) in session, session
    _record("debug", {"replay_s": took, "replay_cell_s": round(waited, 1)})
    page.close()


def test_the_documentation_site_shows_its_pages_pictures_and_search_in_chromium(browser, site):
    """`make docs`'s site as a reader opens it: the start page with the graph's picture, a reference page, a
    course notebook with its figures, and the search finding `data_parallel` (Sphinx's search runs in the
    page's JavaScript). Served on 127.0.0.1 as a static site would be; screenshots in test-artifacts/browser/."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    loaded = "Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length"
    try:
        page.goto(f"{base}/index.html")
        assert "fragnb" in page.title()
        page.wait_for_function(f"{loaded} > 0")
        page.screenshot(path=str(ARTIFACTS / "docs_start.png"))

        page.goto(f"{base}/reference/api.html")
        assert page.locator('[id="fragnb.run"]').count() == 1
        page.locator('[id="fragnb.run"]').scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "docs_reference.png"))

        page.goto(f"{base}/learn/01_first_fragment_graph.html")
        page.wait_for_function(f"{loaded} >= 3")  # the fragment graph, its timeline, the learning curve
        figures = page.evaluate(loaded)
        page.locator("img").nth(1).scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "docs_course_01.png"))

        page.goto(f"{base}/search.html?q=data_parallel")
        page.wait_for_selector("ul.search li", timeout=30_000)
        hits = page.locator("ul.search li a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        page.screenshot(path=str(ARTIFACTS / "docs_search.png"))
    finally:
        page.close()
        server.shutdown()
        server.server_close()
    assert any("guide/data-parallel" in hit for hit in hits), hits
    _record("docs_site", {"course_01_figures": figures, "search_hits": len(hits)})


def test_a_weeks_slides_present_offline_with_their_equations(browser, tmp_path):
    """Issue 72 item 5: week 0's deck (`python -m fragnb.course slides`) opened from disk with every request
    beyond the file refused: reveal.js starts, MathJax typesets the equations, and the next slide is a section."""
    import urllib.error

    from fragnb.course.slides import write_slides

    try:
        write_slides(ROOT / "docs" / "course", tmp_path)
    except urllib.error.URLError as e:
        pytest.skip(f"npm's registry cannot be reached for reveal.js: {e}")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    refused: list[str] = []
    context.route(
        "**/*",
        lambda route: (
            (refused.append(route.request.url), route.abort())
            if not route.request.url.startswith("file:")
            else route.continue_()
        ),
    )
    page = context.new_page()
    page.goto((tmp_path / "00_rl_primer.html").as_uri())
    page.wait_for_selector(".reveal.ready", timeout=60_000)
    page.wait_for_selector("mjx-container", timeout=60_000)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.querySelector('section.present h2') !== null", timeout=30_000)
    assert "the agent, the environment, the return" in page.locator("section.present h2").first.inner_text().lower()
    page.screenshot(path=ARTIFACTS / "slides_00_section_1.png")
    assert not refused, refused
    context.close()
