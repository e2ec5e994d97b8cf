"""A pod's DRA ResourceClaims and what they were given, read from plain objects (the node agents' driver,
``describe``).

A pod has claims three ways: named in ``spec.resourceClaims[].resourceClaimName``; generated from a template
by kube-controller-manager (``status.resourceClaimStatuses``); and, for extended resources served by DRA
(``nvidia.com/gpu: 8`` with a DeviceClass naming ``extendedResourceName``), made by kube-scheduler
(``status.extendedResourceClaimStatus``). A claim's allocation lists, per request, the driver, pool and device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kubedl_py.kube.resources import Resource

RESOURCE_CLAIMS: Final = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")


def claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod has, each once, in the order above."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    names = [e["resourceClaimName"] for e in spec.get("resourceClaims") or [] if e.get("resourceClaimName")]
    names += [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names.append(extended)
    return list(dict.fromkeys(names))


def allocation_results(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The claim's allocated devices, one entry per request and device (empty while unallocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def device_statuses(claim: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """What the drivers reported per device (``status.devices``), by (driver, pool, device)."""
    return {
        (str(d.get("driver")), str(d.get("pool")), str(d.get("device"))): d
        for d in (claim.get("status") or {}).get("devices") or []
    }
