"""The pods and Services of a job, built from its replica specs.

The user's template is copied and only added to: contract labels, the owner reference, the rendezvous
environment, the framework's port when the container does not declare it, the pod restart policy that the
replica's policy implies, and in host-network mode the host-network fields and the chosen host port.
The reconcile's features then add their own, each only what the template lacks (their ``shape_pod``,
``features.py``): ``spec.rdma`` and ``spec.placement`` (``rdma.py``), with a gang scheduler the PodGroup
reference (``gang.py``). Everything else in the template reaches the pod unchanged.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from kubedl_py.api import TrainingJob
from kubedl_py.api import constants as c
from kubedl_py.api.defaults import default_container_index, training_port
from kubedl_py.api.groups import peer_labels
from kubedl_py.controllers.addressing import Addressing, replica_name
from kubedl_py.controllers.failures.policies import in_place_rule, restarts_in_place
from kubedl_py.controllers.kinds.base import Kind
from kubedl_py.controllers.ownership import owner_reference
from kubedl_py.controllers.rendezvous import apply_rendezvous
from kubedl_py.controllers.restart_agent import add_agent


def replica_labels(job: TrainingJob, replica_type: str, index: int) -> dict[str, str]:
    """The contract labels; ``job-role: master`` on the kind's master replica (PyTorch's Master, TF's Chief).
    A kubeflow.org job's objects carry the Training Operator's labels too (``groups.peer_labels``)."""
    master = replica_type in job.framework.master_types
    labels = {
        c.LABEL_CONTROLLER: c.CONTROLLER_NAME,
        c.LABEL_JOB_NAME: job.name,
        c.LABEL_REPLICA_TYPE: replica_type.lower(),
        c.LABEL_REPLICA_INDEX: str(index),
    }
    if job.metadata.uid:
        labels[c.LABEL_JOB_UID] = job.metadata.uid
    if master:
        labels[c.LABEL_JOB_ROLE] = "master"
    labels.update(peer_labels(job.api_group, job.kind, job.name, replica_type, index, master=master))
    return labels


def type_selector(job: TrainingJob, replica_type: str) -> dict[str, str]:
    """The peer's labels that select every pod of one replica type (empty in training.kubedl.io)."""
    labels = peer_labels(job.api_group, job.kind, job.name, replica_type, 0, master=False)
    return {key: value for key, value in labels.items() if not key.endswith(("/replica-index", "/job-role"))}


def service_ports(job: TrainingJob, replica_type: str) -> int:
    """The framework port of a replica type, as its template declares it (or the default)."""
    template = job.replica_specs[replica_type].template.to_dict()
    containers = template["spec"]["containers"]
    return training_port(containers[default_container_index(containers, job.framework)], job.framework)


def addressing_for(
    job: TrainingJob,
    *,
    cluster_domain: str | None = None,
    host_ports: dict[tuple[str, int], int] | None = None,
) -> Addressing:
    type_ports = {rtype: service_ports(job, rtype) for rtype in job.replica_specs}
    return Addressing(
        namespace=job.namespace,
        port=job.framework.default_port,
        cluster_domain=cluster_domain,
        type_ports=type_ports,
        host_ports=dict(host_ports or {}),
    )


#: the fields of a Kubernetes ObjectMeta (stable since v1): of a template's metadata the pod gets its labels and
#: annotations, the controller sets the rest it needs (name, namespace, owner); any other key is no field at all
OBJECT_META_FIELDS: Final = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


def build_pod(
    job: TrainingJob,
    replica_type: str,
    index: int,
    addressing: Addressing,
    *,
    annotations: dict[str, str] | None = None,
    kind: Kind[Any] | None = None,
    agent_image: str | None = None,
) -> dict[str, Any]:
    """The pod of one replica (``job`` already defaulted), before the reconcile's steps add to it. With
    ``agent_image`` the job restarts whole in place and the pod carries the agent (``restart_agent.py``)."""
    spec = job.replica_specs[replica_type]
    template = spec.template.to_dict()  # a fresh structure on every call (model_dump), ours to edit
    metadata = template.get("metadata") or {}
    pod_spec = template["spec"]
    name = replica_name(job.name, replica_type, index)
    labels = {**(metadata.get("labels") or {}), **replica_labels(job, replica_type, index)}
    pod_annotations = {**(metadata.get("annotations") or {}), **(annotations or {})}

    # ExitCode is decided by the controller, and so is every restart when the whole job restarts together:
    # the kubelet must not restart the container itself.
    policy = job.run_policy.failure_policy
    whole_job = policy is not None and policy.restart_scope == "Job"
    pod_spec["restartPolicy"] = "Never" if spec.restart_policy == "ExitCode" or whole_job else spec.restart_policy
    containers = pod_spec["containers"]
    main_index = default_container_index(containers, job.framework)
    main = containers[main_index]
    port = addressing.service_port(replica_type)
    _ensure_port(main, job.framework.port_name, port)
    if restarts_in_place(job, replica_type):
        # The retryable exits restart the program in its pod, by the kubelet; the rest end it (Never), as the
        # pod's policy says. A template's own rules come first (the kubelet takes the first that matches).
        main["restartPolicy"] = "Never"
        main["restartPolicyRules"] = [*(main.get("restartPolicyRules") or []), in_place_rule()]
    if agent_image is not None:
        add_agent(pod_spec, main, job, replica_type, agent_image)
    # The evidence of a failure: the kubelet keeps a failed container's last log lines as its termination
    # message, which the controller copies into the job's status before the pod goes (failures.py).
    main.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")

    host_port = addressing.host_ports.get((replica_type, index))
    if host_port is not None:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
        for declared in main["ports"]:
            if declared.get("name") == job.framework.port_name:
                declared["containerPort"] = host_port
                declared["hostPort"] = host_port
        pod_annotations[c.ANNOTATION_HOST_PORT] = str(host_port)

    apply_rendezvous(pod_spec, job, replica_type, index, addressing, kind=kind)
    pod_metadata: dict[str, Any] = {
        "name": name,
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    if pod_annotations:
        pod_metadata["annotations"] = pod_annotations
    # A key of the template's metadata that is no ObjectMeta field (``labelz``) goes to the API server, whose
    # strict field validation names it (refusals.py), instead of vanishing here without a word.
    pod_metadata.update({key: value for key, value in metadata.items() if key not in OBJECT_META_FIELDS})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": pod_spec}


def _ensure_port(container: dict[str, Any], port_name: str, port: int) -> None:
    ports = container.setdefault("ports", [])
    if not any(declared.get("name") == port_name for declared in ports):
        ports.append({"name": port_name, "containerPort": port, "protocol": "TCP"})


def build_service(job: TrainingJob, replica_type: str, index: int, addressing: Addressing) -> dict[str, Any]:
    """The Service of one replica: headless in normal mode, a ClusterIP port-forward in host mode."""
    name = replica_name(job.name, replica_type, index)
    labels = replica_labels(job, replica_type, index)
    selector = {key: value for key, value in labels.items() if not key.endswith("/job-role")}
    port = addressing.service_port(replica_type)
    host_port = addressing.host_ports.get((replica_type, index))
    spec: dict[str, Any] = {"selector": selector}
    if host_port is None:
        spec["clusterIP"] = "None"
        spec["ports"] = [_service_port(p) for p in _declared_ports(job, replica_type)]
    else:
        spec["type"] = "ClusterIP"
        spec["ports"] = [{"name": job.framework.port_name, "port": port, "targetPort": host_port, "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def _declared_ports(job: TrainingJob, replica_type: str) -> list[dict[str, Any]]:
    template = job.replica_specs[replica_type].template.to_dict()
    containers = template["spec"]["containers"]
    main = copy.deepcopy(containers[default_container_index(containers, job.framework)])
    _ensure_port(main, job.framework.port_name, service_ports(job, replica_type))
    return list(main["ports"])


def _service_port(declared: dict[str, Any]) -> dict[str, Any]:
    port: dict[str, Any] = {
        "port": declared["containerPort"],
        "targetPort": declared["containerPort"],
        "protocol": declared.get("protocol", "TCP"),
    }
    if declared.get("name"):
        port["name"] = declared["name"]
    return port


def service_target_port(service: dict[str, Any]) -> int | None:
    """The (numeric) targetPort of a host-mode Service, or None."""
    for port in (service.get("spec") or {}).get("ports") or []:
        target = port.get("targetPort")
        if isinstance(target, int):
            return target
    return None


#: what a Service must keep as the job made it (a change here is undone)
_SERVICE_PORT_FIELDS = ("name", "port", "targetPort", "protocol")


def _port_shape(port: dict[str, Any]) -> tuple[Any, ...]:
    """A Service port as far as the job cares, with the API server's defaults (TCP; targetPort = port)."""
    return (
        port.get("name") or "",
        port.get("port"),
        port.get("targetPort", port.get("port")),
        port.get("protocol") or "TCP",
    )


def service_drift(live: dict[str, Any], desired: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """What to write to bring ``live`` (one of the job's Services) back to ``desired`` (``build_service``): a
    JSON merge patch (None: nothing), and the fields that drifted. A Service whose ``clusterIP`` kind changed
    (headless or not: immutable) cannot be patched back: the fields then include ``clusterIP`` and the caller
    deletes it, to be made again."""
    spec, want = live.get("spec") or {}, desired["spec"]
    headless, wanted_headless = spec.get("clusterIP") == "None", want.get("clusterIP") == "None"
    if headless != wanted_headless:
        return None, ["clusterIP"]
    patch: dict[str, Any] = {}
    drifted: list[str] = []
    selector = spec.get("selector") or {}
    wanted = want["selector"]
    if c.LABEL_JOB_UID not in selector and {**selector, c.LABEL_JOB_UID: wanted.get(c.LABEL_JOB_UID)} == wanted:
        # Made before Services selected by uid, for pods that may not carry the label: left as it is (a patch
        # would take every endpoint out of it until the pods are made again).
        wanted = selector
    if selector != wanted:
        drifted.append("selector")
        patch["selector"] = {**{key: None for key in selector if key not in wanted}, **wanted}
    if [_port_shape(p) for p in spec.get("ports") or []] != [_port_shape(p) for p in want["ports"]]:
        drifted.append("ports")
        patch["ports"] = [{key: p[key] for key in _SERVICE_PORT_FIELDS if key in p} for p in want["ports"]]
    if (spec.get("type") or "ClusterIP") != "ClusterIP":
        drifted.append("type")
        patch["type"] = "ClusterIP"
    return ({"spec": patch} if patch else None), drifted
