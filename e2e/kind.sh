#!/usr/bin/env bash
# `make e2e-kind`: the e2e scenarios against a kind cluster running the controller image built from the
# project's Dockerfile and installed with the rendered manifests.
#
# Without Docker (or with only the client and no engine) or without kind it prints ONE line starting with
# "SKIPPED:" and exits 77 (the automake/meson "skipped" code): make then reports the target as failed, so
# a skipped run can never be mistaken for a pass. Environment: KIND_CLUSTER (default kubedl-e2e),
# KEEP_CLUSTER=1 to keep it afterwards, WITH_TORCH=1 to build torch into the image and run the DDP scenarios.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() { echo "SKIPPED: make e2e-kind: $* (nothing was tested)"; exit 77; }
command -v docker >/dev/null 2>&1 || skip "the docker command is not installed"
docker info >/dev/null 2>&1 || skip "no Docker engine is reachable (docker info failed)"
command -v kind >/dev/null 2>&1 || skip "kind is not installed (https://kind.sigs.k8s.io)"

CLUSTER=${KIND_CLUSTER:-kubedl-e2e}
IMAGE=kubedl-py:e2e
BIN=.venv/bin
KUBECTL=$(command -v kubectl || echo "$BIN/kubectl")
WORK=$(mktemp -d)
cleanup() {
    rm -rf "$WORK"
    if [ "${KEEP_CLUSTER:-0}" != "1" ] && [ "${CREATED:-0}" = "1" ]; then kind delete cluster --name "$CLUSTER"; fi
}
trap cleanup EXIT

if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --wait 180s
    CREATED=1
fi
kind get kubeconfig --name "$CLUSTER" > "$WORK/kubeconfig"
# make image's builder (kubedl_local/image.py): the Dockerfile with its python:3.11-slim base, the .dockerignore'd context
TORCH_FLAG=""; if [ "${WITH_TORCH:-0}" = "1" ]; then TORCH_FLAG=--with-torch; fi
"$BIN/python" -m kubedl_local.image --engine docker --tag "$IMAGE" $TORCH_FLAG
kind load docker-image "$IMAGE" --name "$CLUSTER"
"$BIN/kubedl-py" manifests --image "$IMAGE" | "$KUBECTL" --kubeconfig "$WORK/kubeconfig" apply -f -
"$KUBECTL" --kubeconfig "$WORK/kubeconfig" -n kubedl-system rollout status deployment/kubedl-py-controller --timeout=180s

KUBEDL_E2E_KUBECONFIG="$WORK/kubeconfig" KUBEDL_E2E_IMAGE="$IMAGE" KUBEDL_E2E_TORCH="${WITH_TORCH:-0}" \
    "$BIN/python" -m pytest -q -p no:cacheprovider e2e
