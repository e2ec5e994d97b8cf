"""A real node on this machine: containerd, the kubelet, kube-proxy and the CNI plugins, plus CoreDNS.

Why: the node agents (``kubedl_local.node``) run pods their own way and forward Services with their own
proxy; host-network mode's central promise, a ClusterIP Service whose ``targetPort`` follows a replica to its
new host port, is only proven when the real kube-proxy forwards it, the real kubelet runs, restarts, OOM-kills,
evicts and stops the containers, and the real CRI runtime gives a pod its sandbox. This is that node, joined to
the real control plane (``controlplane.py``), as close to a kubeadm worker as this machine allows (the
departures are in ``config.py`` and docs/local-cluster.md).

What :meth:`RealNode.start` does, in order, and what it needs of the control plane: the API server binds an
address the pods reach (``ControlPlaneOptions.address``, the host's) and serves a Service range off loopback,
so that the ``kubernetes`` Service has that address as its endpoint.

1. takes the machine's one-node lock and, when an earlier node did not stop cleanly, puts the machine back
   from its journal (``journal.py``); refuses when a port of the kubelet or kube-proxy is taken;
2. writes its own journal: the state of everything it may change (``host.py``);
3. identities, as kubeadm gives them: the kubelet as ``system:node:<name>`` (the Node authorizer and
   NodeRestriction apply), kube-proxy as ``system:kube-proxy``, CoreDNS as ``kubedl-py:coredns`` with the
   read rights its ``kubernetes`` plugin needs; the API server's kubelet client is bound to
   ``system:kubelet-api-admin`` so that ``kubectl logs``/``exec`` reach the kubelet, which authorizes them;
4. containerd (its configuration and the CNI network's), then the images: the pause image and whatever
   images of podman's store it is asked for (``images.py``);
5. the kubelet, and waits for its Node to be Ready; kube-proxy, and waits for its ``/healthz``; CoreDNS behind
   the ``kube-dns`` Service (ClusterIP ``.10`` of the Service range, a selector-less Service whose
   EndpointSlice is the node's address and CoreDNS's port), and waits for its ``/ready``.

Every process runs under ``setpriv --pdeathsig KILL``: it dies with the process that started it. containerd's
shims and the containers do not (they are meant to outlive containerd); they are killed by :meth:`stop` or,
after a crash, by the next start's replay. :meth:`crash` kills the node as a power cut would (the kubelet,
containerd, kube-proxy, every shim and container) and leaves the rest to the control plane: the node-loss test.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kubedl_local.kubernetes.controlplane import (
    CONTEXT,
    KubernetesControlPlane,
    log_tail,
    start_process,
    stop_process,
)
from kubedl_local.kubernetes.real_node import config, dra, host, journal
from kubedl_local.kubernetes.real_node.binaries import NodeBinaries, ensure_node_binaries
from kubedl_local.kubernetes.real_node.images import ImageLoadError, Images
from kubedl_local.node.dra import RESOURCE_SLICES
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import AlreadyExists, NotFound
from kubedl_py.kube.resources import Resource

log = logging.getLogger(__name__)

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SERVICES = Resource("", "v1", "services", "Service")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)

#: the kubelet's and kube-proxy's ports: fixed, hence one real node per machine
NODE_PORTS = {
    10250: "the kubelet",
    10248: "the kubelet's healthz",
    10249: "kube-proxy's metrics",
    10256: "kube-proxy's healthz",
}
COREDNS_USER = "kubedl-py:coredns"
#: what Debian packages bring the tools the node runs besides its own programs
HOST_TOOLS = {
    "runc": "runc",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "iptables-restore": "iptables",
    "ip": "iproute2",
    "mount": "mount",
    "umount": "mount",
}
PROXY_MODES = ("iptables", "nftables")


class NodeError(RuntimeError):
    """The real node could not start (or the machine could not run one); the message says why and the fix."""


@dataclass
class RealNodeOptions:
    """How the real node runs."""

    #: the Node's name
    name: str = "local-node-0"
    #: where containerd, the kubelet and CNI keep their state (removed on stop)
    data_dir: Path = field(default_factory=lambda: journal.STATE_DIR / "node")
    #: the CNI bridge and the pods' addresses (pods not on the host network)
    bridge: str = "kubedl-cni0"
    pod_cidr: str = "10.32.0.0/16"
    #: kube-proxy's mode: ``iptables`` or ``nftables``
    proxy_mode: str = "iptables"
    #: images of podman's store to load at start (``kubedl-py:0.1.0``, ``localhost/kubedl-py-base:bookworm``)
    images: tuple[str, ...] = ()
    #: images loaded when podman has them, skipped (with a log line) when it does not
    optional_images: tuple[str, ...] = ()
    #: labels of the Node
    labels: dict[str, str] = field(default_factory=dict)
    #: fields merged over the kubelet's configuration
    kubelet_config: dict[str, Any] = field(default_factory=dict)
    #: seconds to wait for another real node on the machine to end (0: refuse at once)
    lock_wait: float = 0.0
    #: seconds to wait for each part to be ready
    start_timeout: float = 120.0
    #: copy the programs' logs here on stop (the data directory, where they are written, is removed)
    keep_logs: Path | None = None
    #: run Kubernetes' own DRA test driver as the node's DRA kubelet plug-in (``real_node/dra.py``)
    dra_test_driver: bool = False


@dataclass
class _Process:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    process: asyncio.subprocess.Process | None = None


def node_address() -> str:
    """The host's primary address: the node's InternalIP, where the API server and CoreDNS listen for pods."""
    from kubedl_local.node.spec import primary_ipv4

    return primary_ipv4()


def service_ip(cidr: str, offset: int) -> str:
    return str(ipaddress.ip_network(cidr, strict=False).network_address + offset)


def preflight() -> list[str]:
    """What this machine lacks to run a real node (empty: nothing), each with the fix."""
    problems: list[str] = []
    if os.geteuid() != 0:
        problems.append("a real node needs root (containers, mounts, iptables): run `local up` as root")
    missing = sorted({package for tool, package in HOST_TOOLS.items() if host._tool(tool) is None})
    plugins = [name for name in config.CNI_PLUGINS if not (config.CNI_BIN_DIR / name).is_file()]
    if plugins:
        missing.append("containernetworking-plugins")
    if missing:
        problems.append(f"missing tools: `apt-get install -y {' '.join(sorted(set(missing)))}`")
    if not Path("/proc/sys/net/bridge").is_dir():
        problems.append("the bridge netfilter module is not loaded: `modprobe br_netfilter`")
    return problems


class RealNode:
    """One real node of ``control_plane``: ``await start()``, ``await stop()`` (see the module docstring)."""

    def __init__(self, control_plane: KubernetesControlPlane, options: RealNodeOptions | None = None) -> None:
        self.control_plane = control_plane
        self.options = options or RealNodeOptions()
        if self.options.proxy_mode not in PROXY_MODES:
            raise ValueError(f"proxy mode {self.options.proxy_mode!r}: use one of {', '.join(PROXY_MODES)}")
        self.layout = config.Layout(Path(self.options.data_dir))
        self.address = ""
        self.dns_ip = ""
        self.binaries: NodeBinaries | None = None
        self.images: Images | None = None
        self._lock = journal.MachineLock()
        self._journal: journal.Journal | None = None
        self._processes: dict[str, _Process] = {}
        self._started = False
        self._crashed = False
        self.restored: list[str] | None = None

    @property
    def name(self) -> str:
        return self.options.name

    # ------------------------------------------------------------------------------------------ lifecycle

    async def reserve(self) -> None:
        """Check that this machine can run the node, build its programs if needed, and take the machine's
        one-node lock: before the control plane starts, so that a second node is refused at once."""
        if self._started:
            return
        problems = preflight()
        if problems:
            raise NodeError("this machine cannot run a real node: " + "; ".join(problems))
        cp = self.control_plane
        if cp.options.address.startswith("127."):
            raise NodeError(
                "the real node's pods cannot reach an API server on loopback: start the control plane with "
                "ControlPlaneOptions(address=<the host's address>) (local up does so for --runtime kubelet)"
            )
        if ipaddress.ip_network(cp.service_cidr, strict=False).is_loopback:
            raise NodeError(f"the Service range {cp.service_cidr} is on loopback: kube-proxy cannot forward it")
        self.binaries = await asyncio.to_thread(ensure_node_binaries)  # minutes, the first time
        await asyncio.to_thread(self._lock.acquire, wait=self.options.lock_wait)
        self._started = True

    async def start(self) -> None:
        """Start the node (:meth:`reserve` first, unless done); on failure, undo everything."""
        await self.reserve()
        try:
            self.restored = await asyncio.to_thread(journal.replay_leftovers)
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        started = time.monotonic()
        assert self.binaries is not None
        busy = [f"{port} ({what})" for port, what in NODE_PORTS.items() if _port_taken(port)]
        if busy:
            raise NodeError(
                f"ports {', '.join(busy)} are taken: another kubelet or kube-proxy runs on this machine; stop it"
            )
        self.address = node_address()
        self.dns_ip = service_ip(self.control_plane.service_cidr, 10)
        binaries = self.binaries
        self._journal = journal.Journal(
            pid=os.getpid(),
            data_dir=str(self.layout.root),
            bridge=self.options.bridge,
            cni_network=config.CNI_NETWORK,
            binaries=[
                str(p)
                for p in (
                    binaries.kubelet,
                    binaries.kube_proxy,
                    binaries.containerd,
                    binaries.containerd_shim,
                    binaries.coredns,
                    binaries.dra_test_driver,
                )
            ],
            kube_proxy=str(binaries.kube_proxy),
            **journal.before_state(),
        )
        await asyncio.to_thread(self._journal.write)
        for directory in (self.layout.root, self.layout.root / "logs", self.layout.root / "config", self.layout.images):
            directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.layout.root, 0o700)
        deadline = time.monotonic() + self.options.start_timeout
        await self._bootstrap_cluster()
        await self._start_containerd(deadline)
        await self._load_images()
        await self._start_kubelet(deadline)
        if self.options.dra_test_driver:
            await self._start_dra_driver(deadline)
        await self._start_kube_proxy(deadline)
        await self._start_coredns(deadline)
        log.info(
            "real node %s (kubelet, containerd, kube-proxy %s, CoreDNS) ready at %s in %.1fs",
            self.name,
            self.options.proxy_mode,
            self.address,
            time.monotonic() - started,
        )

    async def stop(self) -> None:
        """Stop every program of the node, kill its pods, and put the machine back as it was."""
        if not self._started:
            return
        self._started = False
        for name in ("coredns", "kube-proxy", dra.PROCESS, "kubelet", "containerd"):
            process = self._processes.get(name)
            if process is not None:
                await stop_process(process.process, name, grace=10.0)
        if self.options.keep_logs is not None:
            await asyncio.to_thread(_copy_logs, self.layout.root / "logs", Path(self.options.keep_logs))
        try:
            if self._journal is not None or journal.JOURNAL_PATH.exists():
                record = self._journal or journal.Journal.read()
                if record is not None:
                    done = await asyncio.to_thread(journal.replay, record)
                    log.info("real node %s stopped; machine restored: %s", self.name, "; ".join(done) or "nothing")
        finally:
            self._journal = None
            self._lock.release()

    async def crash(self) -> None:
        """The machine dies: SIGKILL the kubelet, containerd, kube-proxy, every shim and container at once.
        The control plane is left to notice (the Node's lease stops being renewed). :meth:`stop` still
        cleans up afterwards."""
        assert self.binaries is not None
        for name in ("kubelet", "kube-proxy", "containerd", dra.PROCESS):
            process = self._processes.get(name)
            if process is not None and process.process is not None and process.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.process.send_signal(signal.SIGKILL)
        b = self.binaries
        await asyncio.to_thread(host.kill_node_processes, [b.kubelet, b.kube_proxy, b.containerd, b.containerd_shim])
        for name in ("kubelet", "kube-proxy", "containerd", dra.PROCESS):
            process = self._processes.get(name)
            if process is not None and process.process is not None:
                await process.process.wait()
        self._crashed = True

    def pids(self) -> dict[str, int]:
        return {
            name: p.process.pid
            for name, p in self._processes.items()
            if p.process is not None and p.process.returncode is None
        }

    def log_path(self, component: str) -> Path:
        return self.layout.log(component)

    # ------------------------------------------------------------------------------------------ parts

    async def _bootstrap_cluster(self) -> None:
        """Identities and RBAC of the node's programs, and the ``kube-dns`` Service (its EndpointSlice is
        written once CoreDNS's port is known)."""
        cp = self.control_plane
        write = cp.user_kubeconfig
        self._kubelet_kc = await asyncio.to_thread(
            write, f"kubelet-{self.name}", common_name=f"system:node:{self.name}", groups=["system:nodes"]
        )
        self._proxy_kc = await asyncio.to_thread(write, "kube-proxy", common_name="system:kube-proxy")
        self._coredns_kc = await asyncio.to_thread(write, "coredns", common_name=COREDNS_USER)
        async with KubeClient(kubeconfig=cp.admin_kubeconfig) as kube:
            await _ensure(
                kube,
                CLUSTER_ROLE_BINDINGS,
                _binding(
                    "kubedl-py:apiserver-kubelet-client", "system:kubelet-api-admin", "kube-apiserver-kubelet-client"
                ),
            )
            await _ensure(
                kube,
                CLUSTER_ROLES,
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": COREDNS_USER},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "resources": ["services", "namespaces", "pods"],
                            "verbs": ["list", "watch"],
                        },
                        {
                            "apiGroups": ["discovery.k8s.io"],
                            "resources": ["endpointslices"],
                            "verbs": ["list", "watch"],
                        },
                    ],
                },
            )
            await _ensure(kube, CLUSTER_ROLE_BINDINGS, _binding(COREDNS_USER, COREDNS_USER, COREDNS_USER))

    async def _start_containerd(self, deadline: float) -> None:
        assert self.binaries is not None
        layout = self.layout
        for sub in ("root", "state", "runc", "opt", "tmp"):
            (layout.containerd / sub).mkdir(parents=True, exist_ok=True)
        layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        layout.cni_ipam_dir.mkdir(parents=True, exist_ok=True)
        runc = host._tool("runc")
        assert runc is not None
        from kubedl_local.kubernetes.real_node.images import pause_image

        layout.containerd_config.write_text(config.containerd_config(layout, sandbox_image=pause_image(), runc=runc))
        (layout.cni_conf_dir / "10-kubedl-py.conflist").write_text(
            config.cni_config(layout, bridge=self.options.bridge, pod_cidr=self.options.pod_cidr)
        )
        env = dict(os.environ)
        env["PATH"] = f"{self.binaries.containerd.parent}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        await self._spawn(
            _Process("containerd", [str(self.binaries.containerd), "--config", str(layout.containerd_config)], env)
        )
        self.images = Images(self.binaries.ctr, layout.containerd_socket, layout.images)
        while True:
            self._check_alive("containerd")
            if layout.containerd_socket.exists():
                version = await asyncio.to_thread(self.images._ctr, "version", timeout=10)
                if version.returncode == 0:
                    return
            self._check_deadline("containerd", deadline, "its socket does not answer `ctr version`")
            await asyncio.sleep(0.1)

    async def _load_images(self) -> None:
        assert self.images is not None and self.binaries is not None
        images, pause = self.images, self.binaries.pause
        await asyncio.to_thread(images.load_pause, pause)
        wanted = [(reference, True) for reference in self.options.images]
        wanted += [(ref, False) for ref in self.options.optional_images if ref not in self.options.images]
        for reference, required in wanted:
            started = time.monotonic()
            try:
                name = await asyncio.to_thread(images.load_from_podman, reference)
            except ImageLoadError as exc:
                if required:
                    raise
                log.info("not loading %s into the node: %s", reference, exc)
                continue
            log.info("image %s loaded into the node as %s in %.1fs", reference, name, time.monotonic() - started)

    async def load_image(self, reference: str) -> str:
        """Copy an image of podman's store into the running node (see ``images.py``); returns its name there."""
        assert self.images is not None, "the node is not running"
        return await asyncio.to_thread(self.images.load_from_podman, reference)

    async def _start_kubelet(self, deadline: float) -> None:
        assert self.binaries is not None
        layout = self.layout
        layout.kubelet.mkdir(parents=True, exist_ok=True)
        layout.pod_logs.mkdir(parents=True, exist_ok=True)
        settings = config.KubeletSettings(
            node_ip=self.address,
            cluster_dns=self.dns_ip,
            client_ca=self.control_plane.kubelet_client_ca(),
            extra=self.options.kubelet_config,
        )
        layout.kubelet_config.write_text(config.kubelet_config(layout, settings))
        labels = ",".join(f"{k}={v}" for k, v in self.options.labels.items())
        argv = [
            str(self.binaries.kubelet),
            f"--config={layout.kubelet_config}",
            f"--kubeconfig={self._kubelet_kc}",
            f"--root-dir={layout.kubelet}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.address}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=1",
        ]
        await self._spawn(_Process("kubelet", argv))
        async with KubeClient(kubeconfig=self.control_plane.admin_kubeconfig) as kube:
            while True:
                self._check_alive("kubelet")
                with contextlib.suppress(NotFound):
                    node = await kube.get(NODES, self.name)
                    conditions = (node.get("status") or {}).get("conditions") or []
                    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                        return
                self._check_deadline("kubelet", deadline, f"the Node {self.name} is not Ready")
                await asyncio.sleep(0.2)

    async def _start_dra_driver(self, deadline: float) -> None:
        """The DRA test driver as the kubelet's plug-in, under a driver's rights; ready once its node's
        ResourceSlice exists (the plug-in publishes it after the kubelet registered it)."""
        assert self.binaries is not None
        cp = self.control_plane
        kubeconfig = await asyncio.to_thread(cp.user_kubeconfig, "dra-test-driver", common_name=dra.USER)
        async with KubeClient(kubeconfig=cp.admin_kubeconfig) as kube:
            role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": dra.USER}}
            await _ensure(kube, CLUSTER_ROLES, {**role, "rules": dra.rules()})
            await _ensure(kube, CLUSTER_ROLE_BINDINGS, _binding(dra.USER, dra.USER, dra.USER))
            # the plug-in makes only the parent of its socket's directory
            (self.layout.kubelet / "plugins" / dra.DRIVER).mkdir(parents=True, exist_ok=True)
            argv = dra.argv(self.binaries.dra_test_driver, self.layout, kubeconfig=kubeconfig, node=self.name)
            await self._spawn(_Process(dra.PROCESS, argv))
            selector = f"spec.nodeName={self.name},spec.driver={dra.DRIVER}"
            while True:
                self._check_alive(dra.PROCESS)
                if (await kube.list(RESOURCE_SLICES, field_selector=selector)).items:
                    return
                self._check_deadline(dra.PROCESS, deadline, "it published no ResourceSlice for the node")
                await asyncio.sleep(0.2)

    async def _start_kube_proxy(self, deadline: float) -> None:
        assert self.binaries is not None
        path = self.layout.kube_proxy_config
        path.write_text(
            config.kube_proxy_config(
                kubeconfig=self._proxy_kc,
                node_name=self.name,
                pod_cidr=self.options.pod_cidr,
                mode=self.options.proxy_mode,
            )
        )
        await self._spawn(_Process("kube-proxy", [str(self.binaries.kube_proxy), f"--config={path}", "--v=1"]))
        await self._wait_http("kube-proxy", "http://127.0.0.1:10256/healthz", deadline)

    async def _start_coredns(self, deadline: float) -> None:
        assert self.binaries is not None
        dns_port, health_port, ready_port = _free_ports(self.address, 3)
        self.layout.corefile.write_text(
            config.corefile(
                address=self.address,
                port=dns_port,
                health_port=health_port,
                ready_port=ready_port,
                kubeconfig=self._coredns_kc,
                context=CONTEXT,
            )
        )
        async with KubeClient(kubeconfig=self.control_plane.admin_kubeconfig) as kube:
            await _ensure_dns_service(kube, self.dns_ip, self.address, dns_port)
        await self._spawn(_Process("coredns", [str(self.binaries.coredns), "-conf", str(self.layout.corefile)]))
        await self._wait_http("coredns", f"http://127.0.0.1:{ready_port}/ready", deadline)
        self.dns_port = dns_port

    # ------------------------------------------------------------------------------------------ helpers

    async def _spawn(self, process: _Process) -> None:
        log_path = self.layout.log(process.name)
        process.process = await start_process(process.argv, log_path, env=process.env)
        self._processes[process.name] = process
        log.debug("started %s (pid %s)", process.name, process.process.pid)

    def _check_alive(self, name: str) -> None:
        process = self._processes[name].process
        if process is not None and process.returncode is not None:
            raise NodeError(
                f"{name} exited with code {process.returncode} while starting:\n{log_tail(self.layout.log(name))}"
            )

    def _check_deadline(self, name: str, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise NodeError(
                f"{name} was not ready within {self.options.start_timeout:g}s ({what}); its log "
                f"{self.layout.log(name)}:\n{log_tail(self.layout.log(name))}"
            )

    async def _wait_http(self, name: str, url: str, deadline: float) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                self._check_alive(name)
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                self._check_deadline(name, deadline, f"{url} does not answer 200")
                await asyncio.sleep(0.1)


def _copy_logs(source: Path, target: Path) -> None:
    if not source.is_dir():
        return
    target.mkdir(parents=True, exist_ok=True)
    for log_file in source.iterdir():
        with contextlib.suppress(OSError):
            shutil.copyfile(log_file, target / log_file.name)


def _binding(name: str, role: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


async def _ensure(kube: KubeClient, resource: Resource, body: dict[str, Any], namespace: str | None = None) -> None:
    with contextlib.suppress(AlreadyExists):
        await kube.create(resource, body, namespace=namespace)


async def _ensure_dns_service(kube: KubeClient, cluster_ip: str, address: str, port: int) -> None:
    """``kube-system/kube-dns``: ClusterIP ``cluster_ip`` port 53 (UDP and TCP), forwarded to CoreDNS at
    ``address:port`` by a hand-written EndpointSlice (the Service selects no pod: CoreDNS is not one)."""
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "clusterIP": cluster_ip,
            "ports": [{"name": n, "protocol": p, "port": 53, "targetPort": port} for n, p in ports],
        },
    }
    await _ensure(kube, SERVICES, service, namespace="kube-system")
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kube-dns-coredns",
            "namespace": "kube-system",
            "labels": {
                "kubernetes.io/service-name": "kube-dns",
                "endpointslice.kubernetes.io/managed-by": "kubedl-py.local",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": n, "protocol": p, "port": port} for n, p in ports],
    }
    try:
        await kube.create(ENDPOINT_SLICES, slice_, namespace="kube-system")
    except AlreadyExists:
        await kube.patch(ENDPOINT_SLICES, "kube-dns-coredns", slice_, namespace="kube-system")


def _port_taken(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _free_ports(address: str, count: int) -> list[int]:
    """``count`` ports free on ``address`` for both TCP and UDP."""
    found: list[int] = []
    holders: list[socket.socket] = []
    try:
        while len(found) < count:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.bind((address, 0))
            port = tcp.getsockname()[1]
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                udp.bind((address, port))
            except OSError:
                tcp.close()
                udp.close()
                continue
            holders += [tcp, udp]
            found.append(int(port))
        return found
    finally:
        for sock in holders:
            sock.close()
