"""What the informers keep of a pod: the fields the reconcile and its features read; everything else is dropped
from the cache, so 10,000 pods stay small."""

from __future__ import annotations

from kubedl_py.api.plain import Object


def trim_pod(pod: Object) -> Object:
    """The fields of a pod the reconcilers read; everything else is dropped from the cache."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return {
        "metadata": {
            key: meta[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "labels",
                "annotations",
                "ownerReferences",
                "deletionTimestamp",
                "creationTimestamp",
            )
            if key in meta
        },
        "spec": {
            "hostNetwork": spec.get("hostNetwork", False),
            # where it runs: a host port is taken on that node only (ports.py); a pod on a node that is not
            # Ready may be lost with it (recovery.py)
            "nodeName": spec.get("nodeName"),
            # which scheduler a pod no scheduler has looked at waits for (policies.unseen_by_scheduler)
            **({"schedulerName": spec["schedulerName"]} if spec.get("schedulerName") else {}),
            "containers": [
                {"name": ctr.get("name"), "ports": ctr.get("ports") or []} for ctr in spec.get("containers") or []
            ],
        },
        "status": {
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "containerStatuses": [
                {key: cs[key] for key in ("name", "restartCount", "state", "lastState") if key in cs}
                for cs in status.get("containerStatuses") or []
            ],
            # why a pod is Pending (failurePolicy.pendingTimeoutSeconds): image pulls and scheduling; the
            # in-place barrier's restartCount: how often the pod restarted whole (whole_in_place.py)
            "initContainerStatuses": [
                {key: cs[key] for key in ("name", "state", "restartCount") if key in cs}
                for cs in status.get("initContainerStatuses") or []
            ],
            # PodScheduled: why a pod is Pending; Ready: false on a lost node; DisruptionTarget: ended by the
            # cluster (an infrastructure failure, failures.py); AllContainersRestarting: restarting whole now
            "conditions": [
                {key: cond[key] for key in ("type", "status", "reason", "message", "lastTransitionTime") if key in cond}
                for cond in status.get("conditions") or []
                if cond.get("type") in ("PodScheduled", "Ready", "DisruptionTarget", "AllContainersRestarting")
            ],
        },
    }
