"""The real node's configuration files: containerd's, the CNI network's, the kubelet's, kube-proxy's, CoreDNS's.

Why these settings, each departing from a production node only where this machine forces it:

- **kubelet**: ``failCgroupV1: false`` (the machines are cgroup v1 hosts; the kubelet still runs there and
  records a ``CgroupV1`` warning event), ``cgroupDriver: cgroupfs`` (no systemd as PID 1), ``failSwapOn: false``.
  Its state lives under the node's data directory (``--root-dir``, ``podLogsDir``, ``volumePluginDir``); image
  garbage collection is off (``imageGCHighThresholdPercent: 100``) because no registry can give back an image
  it removed; hard eviction thresholds are low so that a shared, busy disk does not evict the tests' pods
  (per-pod limits, such as ``ephemeral-storage``, are enforced as usual). It authenticates clients by the
  cluster CA and authorizes them through the API server (Webhook), as kubeadm configures it.
- **containerd**: ``restrict_oom_score_adj = true`` because root here lacks ``CAP_SYS_RESOURCE``: runc cannot
  lower a container's ``oom_score_adj`` below containerd's own, and without this every sandbox fails
  (``can't get final child's PID from pipe: EOF``). Its root, state, runc root, network namespaces
  (``netns_mounts_under_state_dir``) and managed ``opt`` directory are under the node's data directory; the
  sandbox image is ours (``images.py``), pinned so that nothing removes it.
- **CNI**: Debian's ``bridge`` (a bridge of its own, the gateway of the pod range, hairpin on for a pod that
  reaches itself through its Service), ``host-local`` IPAM (its leases in the data directory) and ``portmap``
  (``hostPort`` of pods that are not on the host network). No masquerading: pods reach the host and each
  other, nothing beyond the machine.
- **kube-proxy**: NodePorts only on the node's address (``nodePortAddresses: [primary]``; on 127.0.0.1 they
  would need ``route_localnet``), and conntrack sysctls left as they are (``maxPerCore: 0``, zero timeouts).
- **CoreDNS** answers for ``cluster.local`` from the API (its ``kubernetes`` plugin) and forwards the rest to
  the host's resolvers. It runs on the host beside the node, on the node's address and a free port; the
  ``kube-dns`` Service (the ClusterIP the kubelet gives pods as their nameserver) forwards to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: the CNI network's name: what its plugins write into the rules and leases they make (cleanup finds them by it)
CNI_NETWORK = "kubedl-py-node"
CLUSTER_DOMAIN = "cluster.local"
#: where Debian's containernetworking-plugins puts the plugins
CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")


@dataclass(frozen=True)
class Layout:
    """Where everything of one node lives, under its data directory."""

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_config(self) -> Path:
        return self.containerd / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def kubelet(self) -> Path:
        """The kubelet's ``--root-dir`` (pods' volumes, its certificates, plugin sockets)."""
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "config" / "kubelet.yaml"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "config" / "kube-proxy.yaml"

    @property
    def corefile(self) -> Path:
        return self.root / "config" / "Corefile"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def cdi(self) -> Path:
        """The CDI specs DRA drivers write for prepared claims (containerd reads them)."""
        return self.root / "cdi"

    def kubeconfig(self, component: str) -> Path:
        return self.root / "kubeconfigs" / component

    def log(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"


def containerd_config(layout: Layout, *, sandbox_image: str, runc: str) -> str:
    """containerd 2's configuration (version 3) for the node."""
    c = layout.containerd
    lines = [
        "version = 3",
        f"root = {_toml(c / 'root')}",
        f"state = {_toml(c / 'state')}",
        f"temp = {_toml(c / 'tmp')}",
        # not used here, and each would look for things on the host (/var/run/nri, tracing endpoints, devices)
        "disabled_plugins = ["
        + ", ".join(
            _toml(name)
            for name in (
                "io.containerd.nri.v1.nri",
                "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.zfs",
                "io.containerd.snapshotter.v1.devmapper",
                "io.containerd.snapshotter.v1.blockfile",
                "io.containerd.snapshotter.v1.erofs",
                "io.containerd.tracing.processor.v1.otlp",
                "io.containerd.internal.v1.tracing",
            )
        )
        + "]",
        "",
        "[grpc]",
        f"  address = {_toml(layout.containerd_socket)}",
        "[ttrpc]",
        f"  address = {_toml(c / 'containerd.sock.ttrpc')}",
        "[debug]",
        '  address = ""',
        "[metrics]",
        '  address = ""',
        "",
        "[plugins]",
        "  [plugins.'io.containerd.internal.v1.opt']",
        f"    path = {_toml(c / 'opt')}",
        "  [plugins.'io.containerd.cri.v1.images']",
        "    snapshotter = 'overlayfs'",
        "    [plugins.'io.containerd.cri.v1.images'.pinned_images]",
        f"      sandbox = {_toml(sandbox_image)}",
        "  [plugins.'io.containerd.cri.v1.runtime']",
        "    restrict_oom_score_adj = true",
        "    netns_mounts_under_state_dir = true",
        f"    cdi_spec_dirs = [{_toml(layout.cdi)}]",
        "    [plugins.'io.containerd.cri.v1.runtime'.containerd]",
        "      default_runtime_name = 'runc'",
        "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
        "        runtime_type = 'io.containerd.runc.v2'",
        "        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
        f"          BinaryName = {_toml(runc)}",
        f"          Root = {_toml(c / 'runc')}",
        "          SystemdCgroup = false",
        "    [plugins.'io.containerd.cri.v1.runtime'.cni]",
        f"      bin_dirs = [{_toml(CNI_BIN_DIR)}]",
        f"      conf_dir = {_toml(layout.cni_conf_dir)}",
        "      max_conf_num = 1",
        "  [plugins.'io.containerd.grpc.v1.cri']",
        "    stream_server_address = '127.0.0.1'",
        "    stream_server_port = '0'",
        "",
    ]
    return "\n".join(lines)


def cni_config(layout: Layout, *, bridge: str, pod_cidr: str) -> str:
    """The pod network: one bridge, addresses from ``pod_cidr``, hostPorts by portmap."""
    network = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.cni_ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(network, indent=2) + "\n"


@dataclass(frozen=True)
class KubeletSettings:
    node_ip: str
    cluster_dns: str
    client_ca: Path
    #: kubelet's ports (fixed by the kubelet's defaults, which the API server and tools assume)
    port: int = 10250
    healthz_port: int = 10248
    #: fields merged over the configuration (tests shorten the node's status period, for instance)
    extra: dict[str, Any] | None = None


def kubelet_config(layout: Layout, settings: KubeletSettings) -> str:
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": settings.node_ip,
        "port": settings.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": settings.healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(settings.client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [settings.cluster_dns],
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(layout.pod_logs),
        "volumePluginDir": str(layout.kubelet / "volume-plugins"),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "maxPods": 110,
        # how often volume usage is measured (default 1 minute): eviction for an emptyDir over its sizeLimit
        # waits for it
        "volumeStatsAggPeriod": "10s",
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
    }
    config.update(settings.extra or {})
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(*, kubeconfig: Path, node_name: str, pod_cidr: str, mode: str) -> str:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "mode": mode,
        "clusterCIDR": pod_cidr,
        "detectLocalMode": "ClusterCIDR",
        "nodePortAddresses": ["primary"],
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }
    return yaml.safe_dump(config, sort_keys=False)


def corefile(*, address: str, port: int, health_port: int, ready_port: int, kubeconfig: Path, context: str) -> str:
    return (
        f".:{port} {{\n"
        f"    bind {address}\n"
        "    errors\n"
        f"    health 127.0.0.1:{health_port}\n"
        f"    ready 127.0.0.1:{ready_port}\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig} {context}\n"
        "        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n"
        "    }\n"
        "    forward . /etc/resolv.conf\n"
        "    cache 30\n"
        "}\n"
    )


def _toml(value: object) -> str:
    """A TOML basic string (JSON's escaping is a subset TOML accepts)."""
    return json.dumps(str(value))
