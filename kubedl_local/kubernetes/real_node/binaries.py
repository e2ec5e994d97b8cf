"""Build the real node's programs from Go modules: kubelet, kube-proxy, containerd (with its runc shim and
``ctr``), CoreDNS, and the pod sandbox's ``pause``.

Why build: as for the control plane (``kubernetes/binaries.py``), no release binary can be downloaded on the
machines this project runs on, but the Go module proxy answers. Each part is cached by version under
``~/.cache/kubedl-py`` in a directory of its own, so the control plane's cache is never invalidated by them:

- kubelet and kube-proxy: ``kubernetes-node/v1.37.2``, compiled from the same module set as the control plane
  (the staging modules mapped to their published ``v0.37.2``), so Go's build cache shares most packages with
  the control plane's build;
- containerd v2, ``containerd-shim-runc-v2`` and ``ctr`` (which imports images): ``containerd/v2.4.2``,
  without cgo (tag ``no_btrfs``: its btrfs snapshotter is the one part that needs cgo), its Kubernetes
  libraries raised to the control plane's patch release to share the kubelet's compiled packages. runc and
  the CNI plugins come from Debian (``runc``, ``containernetworking-plugins``);
- CoreDNS: ``coredns/v1.15.0+patched.<digest>``, its ``main`` importing only the plugins the node's Corefile
  uses (the published one imports every plugin, the cloud providers' SDKs among them), with client-go at the
  control plane's staging version so that it, too, shares the build cache;
- the DRA test driver: Kubernetes' own (``k8s.io/kubernetes/test/e2e/dra/test-driver``, the kubelet plug-in its
  DRA e2e tests run), ``dra-test-driver/v1.37.2``, built beside kubelet from the same module set (seconds with
  the kubelet's build cache): the node runs it as a DRA kubelet plug-in when asked (``RealNodeOptions``);
- ``pause``: a program of ours of a few lines (it holds the pod's namespaces and reaps orphans), made into
  the sandbox image by ``images.py``: ``pause/<digest of its source>``.

Cold, on 2 cores with the control plane already built: about 3.5 minutes for kubelet and kube-proxy, 2 for
containerd, 1.5 for CoreDNS (docs/local-cluster.md has the measurements); seconds when cached.
``python -m kubedl_local.kubernetes.real_node`` builds them (``make node-binaries``).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from kubedl_local.kubernetes.binaries import (
    BuildError,
    Progress,
    _build_kubernetes,
    _commit,
    _duration,
    _go_env,
    _locked,
    _run,
    _scratch,
    _stamp,
    _stderr,
    find_go,
)
from kubedl_local.kubernetes.programs import GoProgram, SourcePatch, ensure_program, find_program
from kubedl_local.pins import (
    CONTAINERD_VERSION,
    COREDNS_VERSION,
    KUBERNETES_VERSION,
    NODE_COMPONENTS,
    STAGING_VERSION,
    cache_root,
)

_CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD = GoProgram(
    name="containerd",
    module=_CONTAINERD_MODULE,
    version=f"v{CONTAINERD_VERSION}",
    commands={
        "containerd": f"{_CONTAINERD_MODULE}/cmd/containerd",
        "containerd-shim-runc-v2": f"{_CONTAINERD_MODULE}/cmd/containerd-shim-runc-v2",
        "ctr": f"{_CONTAINERD_MODULE}/cmd/ctr",
    },
    ldflags=f"-s -w -X {_CONTAINERD_MODULE}/version.Version=v{CONTAINERD_VERSION}",
    tags=("no_btrfs",),
    # its Kubernetes libraries (it requires v0.37.0) at the control plane's patch release, as for CoreDNS:
    # the kubelet's build has compiled them already
    extra_requires={
        f"k8s.io/{name}": f"v{STAGING_VERSION}"
        for name in (
            "api",
            "apimachinery",
            "client-go",
            "component-base",
            "cri-api",
            "cri-client",
            "cri-streaming",
            "streaming",
        )
    },
)

#: the CoreDNS plugins the node's Corefile uses (``config.py``)
COREDNS_PLUGINS = ("bind", "errors", "health", "ready", "kubernetes", "forward", "cache")
COREDNS = GoProgram(
    name="coredns",
    module="github.com/coredns/coredns",
    version=f"v{COREDNS_VERSION}",
    commands={"coredns": "github.com/coredns/coredns"},
    patches=(
        SourcePatch(
            file="coredns.go",
            old='_ "github.com/coredns/coredns/core/plugin" // Plug in CoreDNS.',
            new="\n\t".join(f'_ "github.com/coredns/coredns/plugin/{name}"' for name in COREDNS_PLUGINS),
        ),
    ),
    extra_requires={f"k8s.io/{name}": f"v{STAGING_VERSION}" for name in ("api", "apimachinery", "client-go")},
)

#: the sandbox's process: waits for SIGINT/SIGTERM, reaping whatever child is re-parented to it meanwhile
PAUSE_SOURCE = """\
// The process of a pod's sandbox: it holds the pod's namespaces until it is told to stop,
// and reaps the children that end up under it (PID 1 of a shared process namespace).
package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tsignals := make(chan os.Signal, 16)
\tsignal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
\tfor received := range signals {
\t\tif received != syscall.SIGCHLD {
\t\t\tos.Exit(0)
\t\t}
\t\tfor {
\t\t\tvar status syscall.WaitStatus
\t\t\tpid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
\t\t\tif pid <= 0 || err != nil {
\t\t\t\tbreak
\t\t\t}
\t\t}
\t}
}
"""


def pause_digest() -> str:
    return hashlib.sha256(PAUSE_SOURCE.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class NodeBinaries:
    """Paths of one complete set of the node's programs."""

    kubelet: Path
    kube_proxy: Path
    containerd: Path
    containerd_shim: Path
    ctr: Path
    coredns: Path
    pause: Path
    dra_test_driver: Path

    def all(self) -> list[Path]:
        return [
            self.kubelet,
            self.kube_proxy,
            self.containerd,
            self.containerd_shim,
            self.ctr,
            self.coredns,
            self.pause,
            self.dra_test_driver,
        ]


def node_kubernetes_dir() -> Path:
    return cache_root() / "kubernetes-node" / f"v{KUBERNETES_VERSION}"


#: the DRA test driver: its binary's name and its package in the Kubernetes module
DRA_TEST_DRIVER = "dra-test-driver"
DRA_TEST_DRIVER_PACKAGE = "k8s.io/kubernetes/test/e2e/dra/test-driver"


def dra_test_driver_dir() -> Path:
    return cache_root() / DRA_TEST_DRIVER / f"v{KUBERNETES_VERSION}"


def pause_dir() -> Path:
    return cache_root() / "pause" / pause_digest()


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _kubernetes_node_built() -> bool:
    return all(_executable(node_kubernetes_dir() / "bin" / name) for name in NODE_COMPONENTS)


def find_node_binaries() -> NodeBinaries | None:
    """The cached build of the pinned versions, or None when any part is missing."""
    containerd, coredns = find_program(CONTAINERD), find_program(COREDNS)
    pause = pause_dir() / "bin" / "pause"
    driver = dra_test_driver_dir() / "bin" / DRA_TEST_DRIVER
    if containerd is None or coredns is None or not _executable(pause) or not _kubernetes_node_built():
        return None
    if not _executable(driver):
        return None
    kube = node_kubernetes_dir() / "bin"
    return NodeBinaries(
        kubelet=kube / "kubelet",
        kube_proxy=kube / "kube-proxy",
        containerd=containerd["containerd"],
        containerd_shim=containerd["containerd-shim-runc-v2"],
        ctr=containerd["ctr"],
        coredns=coredns["coredns"],
        pause=pause,
        dra_test_driver=driver,
    )


def ensure_node_binaries(*, progress: Progress | None = None, go: str | None = None) -> NodeBinaries:
    """Return the node's programs, building what is missing first (minutes the first time)."""
    say = progress or _stderr
    found = find_node_binaries()
    if found is not None:
        return found
    go_cmd = go or find_go()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # A lock of its own: the control plane's build holds ``.build.lock`` for its whole length.
    with _locked(root / ".node-build.lock", say):
        if not _kubernetes_node_built():
            say(
                f"building kubelet and kube-proxy v{KUBERNETES_VERSION} from the k8s.io/kubernetes module into "
                f"{node_kubernetes_dir()} (once; about 4 minutes on 2 cores after the control plane's build)"
            )
            _build_kubernetes(go_cmd, say, components=NODE_COMPONENTS, target=node_kubernetes_dir())
        ensure_program(CONTAINERD, progress=say, go=go_cmd)
        ensure_program(COREDNS, progress=say, go=go_cmd)
        if not _executable(pause_dir() / "bin" / "pause"):
            _build_pause(go_cmd, say)
        if not _executable(dra_test_driver_dir() / "bin" / DRA_TEST_DRIVER):
            say(f"building Kubernetes' DRA test driver (its kubelet plug-in) into {dra_test_driver_dir()}")
            _build_kubernetes(
                go_cmd,
                say,
                components=(DRA_TEST_DRIVER,),
                target=dra_test_driver_dir(),
                packages={DRA_TEST_DRIVER: DRA_TEST_DRIVER_PACKAGE},
            )
    found = find_node_binaries()
    if found is None:  # pragma: no cover - a build that "succeeded" but left no binary
        raise BuildError(f"the node's build finished but some of its programs are missing under {root}")
    say(f"node programs ready in {_duration(time.monotonic() - started)}")
    return found


def _build_pause(go: str, say: Progress) -> None:
    target = pause_dir()
    work = _scratch(target)
    env = _go_env(work)
    (work / "go.mod").write_text("module kubedl-py.local/pause\n\ngo 1.26.0\n")
    (work / "main.go").write_text(PAUSE_SOURCE)
    (work / "bin").mkdir()
    say("compiling pause (the pod sandbox's process)")
    _run(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(work / "bin" / "pause"), "."],
        work,
        env,
        say,
        what="compiling pause",
    )
    _stamp(work, {"pause": pause_digest()}, go, env)
    _commit(work, target)
