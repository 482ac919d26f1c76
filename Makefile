# Two entry points for a fresh machine: `make run` and `make test`.
# Both create .venv, install torch==2.13.0 first (DESIGN.md "Installing PyTorch"),
# then the package with its dependencies, so pip never fetches another torch; the jax
# extra is the JAX backend's CPU wheels (framework jax).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH  := torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench aa clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev,jax]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/trainperf run

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/harness_overhead.py
	$(PY) benchmarks/energy_overhead.py

aa: $(STAMP)
	$(PY) benchmarks/aa_test.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
