"""Node agents: kubelets that talk to any API server over HTTP.

Why: nodes used to be in-process shortcuts that wrote the embedded store directly, so they could not serve
a real kube-apiserver. Now a node is an API client like a kubelet (it may use :mod:`kubedl_py.kube`), and the
embedded cluster runs the very same agents against its own HTTP server.

- :mod:`.agent` — :class:`NodeAgent`, the runtime-independent kubelet core (registration, leases, pod
  watch, status, graceful deletion, events, the HTTPS log endpoint, test hooks);
- :mod:`.simulated` — :class:`SimulatedRuntime`: annotations decide how pods end (thousands of pods,
  hundreds of nodes in one agent);
- :mod:`.process_kubelet` — :class:`LocalProcessRuntime`: pods' commands run as local processes, with a Service
  proxy, hosts-file DNS and volumes; its OS layer is :mod:`.process`; with ``containers=True`` the pods whose
  images are all in the local podman store run in containers instead (:mod:`.containers`); :mod:`.probes`
  runs both kinds' startup, liveness and readiness probes;
- :mod:`.spec` (node definitions and addresses), :mod:`.status` (the status manager), :mod:`.server` and
  :mod:`.logs` (the kubelet endpoint), :mod:`.main` (``kubedl-py local node``).

Use::

    async with KubeClient(kubeconfig=path, settings=agent_client_settings()) as client:
        agent = NodeAgent(client, [NodeSpec("node-a", "198.18.0.1")], SimulatedRuntime(),
                          tls=KubeletTLS.from_files(cert, key, client_ca))
        await agent.start(); ...; await agent.stop()
"""

from kubedl_local.node.agent import AgentSettings, NodeAgent, Runtime, agent_client_settings
from kubedl_local.node.server import KubeletTLS
from kubedl_local.node.simulated import EXIT_CODE, RUN_SECONDS, TERMINATION_SECONDS, SimulatedRuntime
from kubedl_local.node.spec import NodeSpec, ensure_local_range, primary_ipv4, simulated_node_ip

__all__ = [
    "EXIT_CODE",
    "RUN_SECONDS",
    "TERMINATION_SECONDS",
    "AgentSettings",
    "KubeletTLS",
    "NodeAgent",
    "NodeSpec",
    "Runtime",
    "SimulatedRuntime",
    "agent_client_settings",
    "ensure_local_range",
    "primary_ipv4",
    "simulated_node_ip",
]
