"""The kubelet's restart decision (``kubedl_local.node.restarts``), which every runtime of the local nodes
applies, against the cases of Kubernetes 1.37.2's ``ContainerShouldRestart`` (pkg/api/v1/pod/util.go)."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_local.node.restarts import should_restart

RETRY_SIGNALS = {"action": "Restart", "exitCodes": {"operator": "In", "values": list(range(128, 256))}}


@pytest.mark.parametrize(
    ("container", "pod_policy", "code", "restarts"),
    [
        # no container policy: the pod's (default Always)
        ({}, None, 0, True),
        ({}, "Always", 1, True),
        ({}, "OnFailure", 0, False),
        ({}, "OnFailure", 3, True),
        ({}, "Never", 137, False),
        # rules are read only with the container's own policy
        ({"restartPolicyRules": [RETRY_SIGNALS]}, "Never", 137, False),
        # the container's policy overrides the pod's
        ({"restartPolicy": "Never"}, "Always", 1, False),
        ({"restartPolicy": "OnFailure"}, "Never", 2, True),
        ({"restartPolicy": "Always"}, "Never", 0, True),
        # a matching rule decides, first match wins; else the container's policy
        ({"restartPolicy": "Never", "restartPolicyRules": [RETRY_SIGNALS]}, "Never", 137, True),
        ({"restartPolicy": "Never", "restartPolicyRules": [RETRY_SIGNALS]}, "Never", 1, False),
        ({"restartPolicy": "Never", "restartPolicyRules": [RETRY_SIGNALS]}, "Never", 0, False),
        (
            {
                "restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 1]}}],
            },
            "Never",
            2,
            True,
        ),
        (
            {
                "restartPolicy": "Never",
                "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 1]}}],
            },
            "Never",
            1,
            False,
        ),
        ({"restartPolicy": "OnFailure", "restartPolicyRules": [RETRY_SIGNALS]}, "Never", 1, True),
        # RestartAllContainers also starts the container again (the pod-wide part is the kubelet's)
        (
            {
                "restartPolicy": "Never",
                "restartPolicyRules": [
                    {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
                ],
            },
            "Never",
            42,
            True,
        ),
    ],
)
def test_should_restart_matches_the_kubelet(
    container: dict[str, Any], pod_policy: str | None, code: int, restarts: bool
) -> None:
    pod_spec = {"restartPolicy": pod_policy} if pod_policy else {}
    assert should_restart(container, pod_spec, code) is restarts
