"""Where replicas listen and how peers reach them: names, Service hosts, framework and host ports.

Normal mode: every replica listens on the framework's port and peers use ``<svc>.<ns>.svc:<port>`` (a
headless Service). Host-network mode: a replica listens on its own host port P while peers keep using the
Service name and the framework's port (a ClusterIP Service forwards port -> P); so only the *own* entries
of the rendezvous settings differ between the modes. Every kind's rendezvous is written against this.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def replica_name(job_name: str, replica_type: str, index: int) -> str:
    """The contract name of replica ``index`` of ``replica_type``: ``<job>-<type>-<index>``."""
    return f"{job_name}-{replica_type.lower()}-{index}"


@dataclass(frozen=True)
class Addressing:
    """Where replicas listen and how peers reach them.

    ``port`` is the framework's port (2222 / 23456, or what the template names ``tfjob-port`` /
    ``pytorchjob-port``); ``type_ports`` overrides it per replica type when templates differ.
    ``host_ports`` maps (replica type, index) to the host port in host-network mode; empty in normal mode.
    ``host`` says host-network mode even before every replica has its port.
    """

    namespace: str
    port: int
    cluster_domain: str | None = None
    type_ports: dict[str, int] = field(default_factory=dict)
    host_ports: dict[tuple[str, int], int] = field(default_factory=dict)
    host: bool = False

    def service_port(self, replica_type: str) -> int:
        """The port peers use, on the replica's Service."""
        return self.type_ports.get(replica_type, self.port)

    def service_host(self, job_name: str, replica_type: str, index: int) -> str:
        host = f"{replica_name(job_name, replica_type, index)}.{self.namespace}.svc"
        return f"{host}.{self.cluster_domain}" if self.cluster_domain else host

    def listen_port(self, replica_type: str, index: int) -> int:
        """The port this replica's process binds: its host port in host mode, else the framework port."""
        return self.host_ports.get((replica_type, index), self.service_port(replica_type))

    @property
    def host_network(self) -> bool:
        return self.host or bool(self.host_ports)

    def reachable(self, replica_type: str, index: int) -> bool:
        """Whether peers can be pointed at the replica: in host-network mode only once it has a host port."""
        return not self.host_network or (replica_type, index) in self.host_ports
