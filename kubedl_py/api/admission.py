"""The admission policies installed with the CRDs: what a job's schema cannot say, refused at create.

A CRD's schema (and its CEL rules) cannot read ``metadata.annotations``, so the network-mode annotation could
only be checked after the job exists: a misspelt ``Host`` would be accepted by ``kubectl apply`` and the job
then fail (or, before, run in the pod network silently). A ``ValidatingAdmissionPolicy`` (GA since Kubernetes
1.30) can, in the API server, without a webhook to run: it refuses the job at create, naming the annotation.

One policy per kind (its replica specs have a field of their own), matching the kind in both API groups,
with the rules of ``validation.py`` written in CEL:

- ``kubedl.io/network-mode`` is ``host`` or ``pod``;
- ``kubedl.io/replica-services`` is ``dialed`` or ``all``;
- a template's own ``hostNetwork: true`` does not contradict an explicit ``pod``;
- a pod holds at most ``--max-host-ports-per-pod`` host ports (``validation.host_port_count``: in host-network
  mode the framework's port plus every other declared port; in the pod network, ports with a ``hostPort``).

The controller checks the same again (``validation.py``), for clusters where the policy is not installed
(the embedded local cluster does not serve admission policies).
"""

from __future__ import annotations

from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEFLOW, ApiGroup
from kubedl_py.api.kinds import all_kinds
from kubedl_py.api.kinds.base import KindAPI

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_PREFIX = "kubedl-py-"


def _quoted(text: str) -> str:
    """A CEL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _policy(plugin: KindAPI, groups: list[ApiGroup], max_host_ports: int) -> dict[str, Any]:
    framework = plugin.framework
    field = framework.replica_specs_field
    annotation = _quoted(c.ANNOTATION_NETWORK_MODE)
    modes = ", ".join(_quoted(mode) for mode in c.NETWORK_MODES)
    services = _quoted(c.ANNOTATION_REPLICA_SERVICES)
    service_choices = ", ".join(_quoted(choice) for choice in c.REPLICA_SERVICES)
    specs = "variables.specs"
    containers = (
        f"((has({specs}[t].template.spec.containers) ? {specs}[t].template.spec.containers : []) + "
        f"(has({specs}[t].template.spec.initContainers) ? {specs}[t].template.spec.initContainers : []))"
    )
    counted = (
        f"variables.host ? (!has(p.name) || p.name != {_quoted(framework.port_name)}) "
        ": (has(p.hostPort) && p.hostPort > 0)"
    )
    count = (
        f"((variables.host ? 1 : 0) + "
        f"{containers}.map(k, has(k.ports) ? k.ports.filter(p, {counted}).size() : 0).sum())"
    )
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"{POLICY_PREFIX}{framework.plural}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group.group for group in groups],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [framework.plural],
                    }
                ]
            },
            "variables": [
                {
                    "name": "mode",
                    "expression": f"has(object.metadata.annotations) && {annotation} in object.metadata.annotations"
                    f" ? object.metadata.annotations[{annotation}] : ''",
                },
                {
                    "name": "services",
                    "expression": f"has(object.metadata.annotations) && {services} in object.metadata.annotations"
                    f" ? object.metadata.annotations[{services}] : ''",
                },
                {"name": "specs", "expression": f"has(object.spec.{field}) ? object.spec.{field} : {{}}"},
                {
                    "name": "templateHost",
                    "expression": f"{specs}.exists(t, has({specs}[t].template.spec.hostNetwork) && "
                    f"{specs}[t].template.spec.hostNetwork == true)",
                },
                {
                    "name": "host",
                    "expression": f"variables.mode == {_quoted(c.NETWORK_MODE_HOST)} || "
                    "(variables.mode == '' && variables.templateHost)",
                },
            ],
            "validations": [
                {
                    "expression": f"variables.mode == '' || variables.mode in [{modes}]",
                    "messageExpression": f"'metadata.annotations[{c.ANNOTATION_NETWORK_MODE}]: \"' + variables.mode + "
                    '\'" is not a network mode; use "host" (the node\\\'s network, host ports chosen per pod) or '
                    '"pod" (the pod network, also what no annotation means); the value is case-sensitive\'',
                    "reason": "Invalid",
                },
                {
                    "expression": f"variables.services == '' || variables.services in [{service_choices}]",
                    "messageExpression": f"'metadata.annotations[{c.ANNOTATION_REPLICA_SERVICES}]: \"' + "
                    'variables.services + \'" is not a choice of Services; use "dialed" (a Service only for the '
                    'replicas their peers dial) or "all" (one per replica, as the Training Operator makes them); '
                    "the value is case-sensitive'",
                    "reason": "Invalid",
                },
                {
                    "expression": f"!(variables.mode == {_quoted(c.NETWORK_MODE_POD)} && variables.templateHost)",
                    "message": f"spec.{field}: a pod template asks for hostNetwork: true but the job's "
                    f"{c.ANNOTATION_NETWORK_MODE} annotation says 'pod': remove hostNetwork from the template, "
                    "or set the annotation to 'host' for the node's network",
                    "reason": "Invalid",
                },
                {
                    "expression": f"{specs}.all(t, {count} <= {max_host_ports})",
                    "messageExpression": f"'spec.{field}: a pod would hold more than {max_host_ports} host ports "
                    "(in host-network mode the framework\\'s port and every other port its containers declare; "
                    "otherwise ports declared with a hostPort), more than a pod may hold "
                    "(--max-host-ports-per-pod); declare fewer ports'",
                    "reason": "Invalid",
                },
            ],
        },
    }


def admission_policies(
    *, kubeflow: bool = False, max_host_ports: int = c.DEFAULT_MAX_HOST_PORTS_PER_POD
) -> list[dict[str, Any]]:
    """Each kind's ValidatingAdmissionPolicy and its binding (all namespaces, ``Deny``)."""
    documents: list[dict[str, Any]] = []
    for plugin in all_kinds():
        groups = [group for group in plugin.groups if kubeflow or group is not KUBEFLOW]
        policy = _policy(plugin, groups, max_host_ports)
        name = policy["metadata"]["name"]
        documents.append(policy)
        documents.append(
            {
                "apiVersion": ADMISSION_API_VERSION,
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            }
        )
    return documents
