"""Whether a container that exited is started again in its pod: the kubelet's rule, for every runtime here.

Kubernetes 1.37.2, ``pkg/api/v1/pod/util.go`` ``ContainerShouldRestart``: a container with its own
``restartPolicy`` (ContainerRestartRules, beta and on since 1.35) is judged first by its ``restartPolicyRules``
in order (the first whose ``exitCodes`` match decides: ``Restart`` restarts it; ``RestartAllContainers`` too),
else by its own policy (``Always``; ``OnFailure``: a non-zero exit; ``Never``); a container without one follows
the pod's ``restartPolicy`` (default ``Always``).

A ``RestartAllContainers`` exit (:func:`matching_rule`) restarts the pod whole, which each runtime does before
asking :func:`should_restart` (``simulated.py`` ``_restart_all``, ``process_kubelet.py``
``PodWorker._restart_all``): every container, init ones included, is removed and started again in order, in
the same sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def matching_rule(container: Mapping[str, Any], exit_code: int) -> Mapping[str, Any] | None:
    """The first of the container's ``restartPolicyRules`` whose ``exitCodes`` match ``exit_code``."""
    rules: list[Mapping[str, Any]] = container.get("restartPolicyRules") or []
    for rule in rules:
        codes = rule.get("exitCodes")
        if not codes:
            continue
        listed = exit_code in (codes.get("values") or [])
        operator = codes.get("operator")
        if (operator == "In" and listed) or (operator == "NotIn" and not listed):
            return rule
    return None


def should_restart(container: Mapping[str, Any], pod_spec: Mapping[str, Any], exit_code: int) -> bool:
    """Whether the kubelet starts ``container`` again after it exited with ``exit_code``."""
    own = container.get("restartPolicy")
    if own is not None:
        rule = matching_rule(container, exit_code)
        if rule is not None and rule.get("action") in ("Restart", "RestartAllContainers"):
            return True
        if own == "Always":
            return True
        if own == "OnFailure":
            return exit_code != 0
        if own == "Never":
            return False
    policy = pod_spec.get("restartPolicy") or "Always"
    if policy == "OnFailure":
        return exit_code != 0
    return policy != "Never"
