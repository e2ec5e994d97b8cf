"""What a pod of a job restarted whole in place carries (``kubedl_py.agent`` is the protocol).

Added to the pod ``pods.build_pod`` assembled, never replacing anything of the template:

- the main container's own ``restartPolicy: Never`` with a rule ``RestartAllContainers`` for the exits its
  replica retries (``ExitCode``: 128-255; ``OnFailure``/``Always``: any but 0; ``Never``: none, its exit ends
  the pod and the job's policy decides);
- two containers from the agent image (``--agent-image``, the controller's own by default), each with 10m CPU
  and 16Mi of memory requested (limits 100m and 32Mi, so a namespace quota on limits admits the pod), no
  service account token use, non-root, a read-only root filesystem, no capabilities: the **barrier**, the
  last init container, and the **watcher**, a native sidecar after it, whose exit
  :data:`~kubedl_py.agent.RESTART_EXIT_CODE` restarts the pod whole;
- a downward API volume with the job's attempt annotations and an ``emptyDir`` (memory, 1Mi) with the pod's.

The scheduler then places the pod only on nodes that declare ``RestartAllContainersOnContainerExits``
(Kubernetes 1.37, ``node.status.declaredFeatures``).
"""

from __future__ import annotations

from typing import Any, Final

from kubedl_py import agent
from kubedl_py._version import __version__
from kubedl_py.api import TrainingJob
from kubedl_py.controllers.failures.policies import IN_PLACE_EXIT_CODES

#: the agent's image when the controller is given none: the controller's own (its entry point
#: ``kubedl-py-agent`` is installed with the package)
DEFAULT_AGENT_IMAGE: Final = f"kubedl-py:{__version__}"

_SECURITY: Final = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
_RESOURCES: Final = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}}


def main_rule(restart_policy: str | None) -> dict[str, Any] | None:
    """The main container's RestartAllContainers rule for its replica's restart policy (None: no exit
    restarts the job in place)."""
    if restart_policy == "ExitCode":
        codes: dict[str, Any] = {"operator": "In", "values": list(IN_PLACE_EXIT_CODES)}
    elif restart_policy in ("OnFailure", "Always"):
        codes = {"operator": "NotIn", "values": [0]}
    else:
        return None
    return {"action": "RestartAllContainers", "exitCodes": codes}


def _container(name: str, program: str, image: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["kubedl-py-agent", program],
        "resources": {key: dict(value) for key, value in _RESOURCES.items()},
        "securityContext": {
            key: (dict(value) if isinstance(value, dict) else value) for key, value in _SECURITY.items()
        },
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def add_agent(pod_spec: dict[str, Any], main: dict[str, Any], job: TrainingJob, replica_type: str, image: str) -> None:
    """Shape one pod of a job restarted whole in place (see the module docstring)."""
    spec = job.replica_specs[replica_type]
    rule = main_rule(spec.restart_policy)
    main["restartPolicy"] = "Never"
    if rule is not None:
        main["restartPolicyRules"] = [*(main.get("restartPolicyRules") or []), rule]
    mounts: list[dict[str, Any]] = [
        {"name": agent.SIGNALS_VOLUME, "mountPath": agent.SIGNALS_DIR, "readOnly": True},
        {"name": agent.STATE_VOLUME, "mountPath": agent.STATE_DIR},
    ]
    barrier = _container(agent.BARRIER, "barrier", image, mounts)
    watcher = _container(agent.WATCHER, "watcher", image, mounts)
    watcher["restartPolicy"] = "Always"
    watcher["restartPolicyRules"] = [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [agent.RESTART_EXIT_CODE]}}
    ]
    pod_spec["initContainers"] = [*(pod_spec.get("initContainers") or []), barrier, watcher]
    items = [
        {"path": agent.ATTEMPT_FILE, "fieldRef": {"fieldPath": f"metadata.annotations['{agent.ANNOTATION_ATTEMPT}']"}},
        {
            "path": agent.RELEASED_FILE,
            "fieldRef": {"fieldPath": f"metadata.annotations['{agent.ANNOTATION_RELEASED}']"},
        },
        {
            "path": agent.CREATED_FILE,
            "fieldRef": {"fieldPath": f"metadata.annotations['{agent.ANNOTATION_CREATED}']"},
        },
    ]
    pod_spec["volumes"] = [
        *(pod_spec.get("volumes") or []),
        {"name": agent.SIGNALS_VOLUME, "downwardAPI": {"items": items}},
        {"name": agent.STATE_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
