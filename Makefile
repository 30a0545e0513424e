# fragnb: `make lab` opens the course notebooks, `make test` runs every test (`make test-fast`: all but slow and browser ones), `make demo` trains headless.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; on a CUDA machine use e.g. `make lab TORCH='torch>=2.3'`.
TORCH ?= torch==2.13.0
PORT ?= 8888

.PHONY: setup lab lint test test-fast demo course docs handouts binder bench gpu-check gpu-wheels graphviz chromium slurm hosts clean

setup: $(VENV)/.installed graphviz

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

# graphviz's `dot` draws the graphs; without it fragnb shows DOT source instead.
graphviz:
	@if command -v dot >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "installing graphviz (dot) with apt-get"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null) \
		|| echo "could not install graphviz; graphs will show as DOT source"; \
	else \
		echo "graphviz's 'dot' is missing: run 'sudo apt-get install graphviz' (graphs show as DOT source until then)"; \
	fi

# Chromium drives JupyterLab in tests/test_browser.py (Playwright, pointed at Debian's browser).
chromium:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "installing chromium with apt-get (for the browser tests)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "could not install chromium; the browser tests will be skipped"; \
	else \
		echo "chromium is missing: run 'sudo apt-get install chromium' (the browser tests are skipped until then)"; \
	fi

# No news feed: a course machine makes no requests beyond loopback on its own. The environment's programs on
# PATH, as an activated one has them: TensorBoard's %tensorboard starts the `tensorboard` program it finds there.
lab: setup
	cd notebooks && PATH=$(abspath $(VENV))/bin:$$PATH ../$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --LabApp.news_url=None \
		$$([ "$$(id -u)" = 0 ] && echo --allow-root)

# ruff at 120 columns (pyproject.toml): the code as the formatter writes it, and the lint rules it selects.
lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# The notebooks' cells run with $(BUSY) CPU-bound processes beside them (conftest.py's --busy): a notebook may
# assert only what holds on a busy machine too. Notebooks 01 and 02 (tests/test_small_machine.py) run with two
# whenever BUSY is not 0: on a 2-core machine two neighbours halve every notebook's speed, and CI's 90 minutes
# cannot hold all eleven so. `make test BUSY=0` runs them on a quiet one.
BUSY ?= 1
test: setup chromium slurm hosts lint
	$(PY) -m pytest --busy=$(BUSY); status=$$?; bash .ci/slurm stop; exit $$status

# A one-node Slurm for tests/test_slurm.py (as root: Debian's packages, plain daemons; otherwise those tests skip).
slurm:
	@bash .ci/slurm start

# `ip` (iproute2) for tests/test_hosts.py's network namespaces (as root; otherwise those tests skip).
hosts:
	@if command -v ip >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then :; \
	else \
		echo "installing iproute2 (ip) with apt-get (for the tests of hosts on their own addresses)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null) \
		|| echo "could not install iproute2; tests/test_hosts.py will be skipped"; \
	fi

# The quick loop while changing fragnb: every test and notebook but those that train to a target
# return (slow) or drive JupyterLab in a browser; CI runs `make test`.
test-fast: setup lint
	$(PY) -m pytest -m "not slow and not browser"

demo: setup
	$(PY) -m fragnb.demo --notebook notebooks/01_first_fragment_graph.ipynb --out demo/learning_curve.png

# The course with every output (drawings, plots, tables), readable on GitHub without installing anything.
# Run it after changing a notebook: tests/test_notebooks.py checks that docs/course/ matches notebooks/.
course: setup
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=900 --output-dir docs/course notebooks/[0-9]*.ipynb
	$(PY) -m fragnb.course settle docs/course/[0-9]*.ipynb
	$(PY) -m fragnb.course minutes
	$(PY) -m fragnb.course slides docs/_build/slides

# The documentation site in docs/_build/html (open index.html): the guide, the reference generated from the
# docstrings, the course as students see it (rendered, without solutions or keys) and the benchmarks. Warnings
# are errors and every page is read again, as tests/test_docs.py builds it; nothing is executed (the notebooks show `make course`'s outputs).
docs: setup
	$(PY) -m sphinx -E -W --keep-going -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

# For a class: students' copies without the cells tagged `solution` (exercise solutions, quiz keys) or the
# hidden tests, and per notebook the otter-grader autograder that grades what they hand in (fragnb/course/handouts.py).
handouts: setup
	$(PY) -m fragnb.course handouts --out handouts notebooks/[0-9]*.ipynb

# Binder's environment (binder/environment.yml): every package the course needs, pinned to what this environment
# runs (fragnb/course/pins.py, the autograder zips' pins too). Run it after the course's environment changes.
binder: setup
	$(PY) -m fragnb.course binder

# The `bench` extra adds Stable-Baselines3, which benchmarks/ppo_cartpole.py compares against.
bench: setup
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) benchmarks/wait.py
	$(PY) benchmarks/ppo_cartpole.py
	$(PY) benchmarks/dp_scaling.py
	$(PY) benchmarks/scale.py
	$(PY) benchmarks/predict.py
	$(PY) benchmarks/architectures.py
	$(PY) benchmarks/capture_time.py
	$(PY) benchmarks/explorer.py
	$(PY) benchmarks/algorithms.py
	$(PY) benchmarks/checkpoints.py
	$(PY) benchmarks/exactness.py
	$(PY) benchmarks/field_loops.py
	$(PY) benchmarks/seeds.py
	$(PY) benchmarks/field_mujoco.py
	$(PY) benchmarks/step_cost.py

# On a machine with an NVIDIA GPU: every GPU step with a time limit each, then a summary table (README: On GPUs).
gpu-check: setup
	$(PY) -m pip install --quiet -e '.[gpu]'
	$(PY) benchmarks/gpu.py

# benchmarks/gpu_wheels.txt as wheels in .whl/, for a GPU machine without network (Python 3.12 there).
gpu-wheels: setup
	PATH=$(VENV)/bin:$$PATH bash benchmarks/gpu_wheels.sh

clean:
	rm -rf $(VENV) demo handouts .pytest_cache docs/_build docs/learn
