"""OS-level building blocks of the process kubelet: processes, logs, Service proxy, DNS, pod networks.

Self-contained (imports nothing of kubedl_py outside this package) so the kubelet can depend on it without
a cycle. Modules: ``runner`` (container processes, terminated states, no orphans), ``logs`` (CRI-format
per-container logs), ``sandbox`` (argv wrapping into mount/UTS/net namespaces), ``hosts`` (per-pod hosts
files kept current in place), ``netns`` (bridge + per-pod netns, root only), ``proxy`` (userspace Service
proxy), ``node`` (the facade below).

How the kubelet uses it — everything through one ``ProcessNode``, created on the cluster's event loop and
kept for the cluster's lifetime (``PR_SET_PDEATHSIG`` is tied to the forking thread)::

    from kubedl_local.node.process import (
        Backend, ContainerSpec, PodRef, ProcessNode, ServiceInfo, ServicePort,
        ContainerConfigError, ContainerStartError, PodNetworkUnavailable,
    )

    def resolve(sp: ServicePort) -> list[Backend]:
        # Called per new connection: Service sp.namespace/sp.name port sp.port -> ready endpoints'
        # (podIP, targetPort). Re-pointing targetPort here affects the next connection.
        return [Backend(ip, target_port) for ip in ready_ips(sp)]

    node = ProcessNode(state_dir, resolver=resolve)      # pod_cidr="10.244.0.0/16", bridge="kubedl0"
    await node.start()

    # Services changed (any add/update/delete, or headless endpoints changed): pass the complete set.
    await node.set_services([ServiceInfo(namespace="ns", name="job-master-0", cluster_ip="127.1.0.5",
                                         ports=[23456])])

    # Pod bound to this node:
    pod = PodRef(namespace="ns", name="job-master-0", uid=uid)
    try:
        sb = await node.create_pod_sandbox(pod, host_network=True)   # False: own netns+IP (root only)
    except PodNetworkUnavailable as e:        # not root: fail the pod with str(e), do not half-run it
        ...
    status_pod_ip = sb.ip                      # NODE_IP for host network, else the pod IP
    spec = ContainerSpec(name="pytorch", command=["python", "train.py"], args=[...],
                         env={"RANK": "0", "POD_NAME": "job-master-0", ...},  # downward API resolved by you
                         working_dir="/path", image="ignored:latest")
    try:
        c = await node.start_container(sb, spec, restart_count=n)
    except ContainerConfigError as e:          # e.g. no command: waiting reason e.reason, message str(e)
        ...
    except ContainerStartError as e:           # exec failed: report e.terminated.to_dict() (StartError, 128)
        ...
    c.state()                                  # {"running": {"startedAt": ...}} / {"terminated": {...}}
    term = await c.wait()                      # TerminatedState: exit_code, reason, to_dict()
    # restartPolicy is yours: start_container(sb, spec, restart_count=n + 1) again.

    # /log endpoint:
    clog = node.container_log(pod, "pytorch", previous=False)   # FileNotFoundError -> 400/404
    body = clog.read_text(tail_lines=10, timestamps=True)
    async for line in clog.follow(tail_lines=10):               # ends when the instance exits
        send(line.render(timestamps=False) + "\\n")

    # Pod deletion (grace from metadata.deletionGracePeriodSeconds):
    await c.stop(grace_seconds=30)             # SIGTERM to the group, wait, SIGKILL
    await node.remove_pod_sandbox(sb)          # also stops anything still running in the pod
    node.runtime.remove_pod_logs(pod)

    await node.close()                         # on cluster shutdown; a SIGKILLed cluster is covered too

Root: pod-network pods (netns, veth, bridge; the Service CIDR routed to the host, or without one listeners
inside each pod netns). Without root: host-network pods
work, and the hosts-file sandbox uses an unprivileged user namespace (``unshare --user --map-root-user``),
so processes run as uid 0 *inside* that namespace only. ``ProcessNode.start`` fails loudly if even that is
unavailable; ``hosts_sandbox=False`` runs without cluster DNS.
"""

from .hosts import DEFAULT_CLUSTER_DOMAIN, HostsFiles, PodIdentity, ServiceRecord, render_hosts, service_names
from .logs import ContainerLog, LogLine
from .netns import PodInterface, PodNetwork, PodNetworkUnavailable, run_in_netns
from .node import NODE_IP, PodSandbox, ProcessNode, ServiceInfo
from .proxy import Backend, ProxyStats, Resolver, ServicePort, ServiceProxy
from .runner import (
    ContainerConfigError,
    ContainerProcess,
    ContainerSpec,
    ContainerStartError,
    PodRef,
    ProcessRuntime,
    TerminatedState,
    build_argv,
    expand_vars,
)
from .sandbox import Mount, Sandbox, SandboxUnavailable, check_mount_sandbox, is_root, wrap_argv

__all__ = [
    "DEFAULT_CLUSTER_DOMAIN",
    "NODE_IP",
    "Backend",
    "ContainerConfigError",
    "ContainerLog",
    "ContainerProcess",
    "ContainerSpec",
    "ContainerStartError",
    "HostsFiles",
    "LogLine",
    "Mount",
    "PodIdentity",
    "PodInterface",
    "PodNetwork",
    "PodNetworkUnavailable",
    "PodRef",
    "PodSandbox",
    "ProcessNode",
    "ProcessRuntime",
    "ProxyStats",
    "Resolver",
    "Sandbox",
    "SandboxUnavailable",
    "ServiceInfo",
    "ServicePort",
    "ServiceProxy",
    "ServiceRecord",
    "TerminatedState",
    "build_argv",
    "check_mount_sandbox",
    "expand_vars",
    "is_root",
    "render_hosts",
    "run_in_netns",
    "service_names",
    "wrap_argv",
]
