"""Quantities are stored in the real server's canonical form.

Every input below was sent to the real server (v1.37.2) and the right-hand side is what it stored: the
same table is asserted on both tiers. ``emptyDir.sizeLimit`` is a plain ``*resource.Quantity`` (canonical
form only); ``ResourceList`` values (requests, limits, node capacity) are also rounded up to milli-units
(``SetDefaults_ResourceList``).
"""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.api.quantities import QuantityError, canonical
from tests.fidelity.conftest import Server

CANONICAL = [
    ("8", "8"),
    ("0.5", "500m"),
    ("1024Mi", "1Gi"),
    ("1Gi", "1Gi"),
    ("1000Mi", "1000Mi"),
    ("1.5Gi", "1536Mi"),
    ("1536Mi", "1536Mi"),
    ("100m", "100m"),
    ("0.1", "100m"),
    ("1000m", "1"),
    ("1500m", "1500m"),
    ("1e3", "1e3"),
    ("1E3", "1E3"),
    ("1e-3", "1e-3"),
    ("1k", "1k"),
    ("1000", "1k"),
    ("1000000", "1M"),
    ("1M", "1M"),
    ("1Mi", "1Mi"),
    ("0", "0"),
    ("+1", "+1"),
    ("01", "01"),
    ("0.0", "0"),
    ("1.0", "1"),
    ("2.50", "2500m"),
    ("1.234567", "1.234567"),
    ("0.0001", "100u"),
    ("0.00001", "10u"),
    ("1n", "1n"),
    ("1u", "1u"),
    ("1000n", "1u"),
    ("100000000000000000000", "100E"),
    ("123456789012345678901234567890", "123456789012345678901234567890"),
    ("1.5k", "1500"),
    ("1536", "1536"),
    ("1024", "1024"),
    ("1025Ki", "1025Ki"),
    ("1.001", "1.001"),
    ("0.001m", "1u"),
    ("1Ei", "1Ei"),
    ("8Ei", "9223372036854775807"),
    ("9Ei", "9223372036854775807"),
    ("1e18", "1e18"),
    ("1e19", "10e18"),
    ("100Ki", "100Ki"),
    ("1000Ki", "1000Ki"),
    ("5G", "5G"),
    ("5000M", "5G"),
    ("0.5Gi", "512Mi"),
    ("0.3", "300m"),
    ("1.1m", "1100u"),
    ("1.5n", "2n"),
    ("10e3", "10e3"),
    ("1.5e3", "1500"),
    ("0.5e-3", "500e-6"),
    ("2e9", "2e9"),
    ("12Mi", "12Mi"),
    ("1024Ki", "1Mi"),
    ("1048576", "1048576"),
    ("1048576Ki", "1Gi"),
    ("1.0Gi", "1Gi"),
    ("3Ti", "3Ti"),
    ("0.25Ti", "256Gi"),
    ("1Pi", "1Pi"),
    ("1000Pi", "1000Pi"),
    ("1024Pi", "1Ei"),
    ("999m", "999m"),
    ("1.9999", "1999900u"),
    ("123m", "123m"),
    ("0.123456789", "123456789n"),
    ("0.0000000001", "1n"),
    ("1e-10", "1e-9"),
    ("123456789012345678", "123456789012345678"),
    ("1234567890123456789", "1234567890123456789"),
    ("12345678901234567890m", "12345678901234567890m"),
    ("1.5Ei", "1536Pi"),
    ("7Ei", "7Ei"),
    ("1000E", "1"),
    ("1e21", "1e21"),
    ("0.5Ki", "512"),
    ("1023", "1023"),
    ("2048", "2048"),
    ("1023Ki", "1023Ki"),
    ("1.5Ki", "1536"),
    ("0.001Ki", "1024m"),
    ("+1.5", "1500m"),
    ("00.5", "500m"),
    ("1.", "1."),
    ("5e+3", "5e+3"),
    ("5e-3", "5e-3"),
    ("5E+3", "5E+3"),
    ("1e0", "1e0"),
    ("1e1", "10"),
    ("1e2", "100"),
    ("1000k", "1M"),
    ("1000000k", "1G"),
    ("100000e-2", "1e3"),
]
#: ResourceList values: canonical, then rounded up to milli-units
RESOURCE_LIST = [
    ({"cpu": "0.0001"}, {"cpu": "1m"}),
    ({"cpu": "1.9999"}, {"cpu": "2"}),
    ({"cpu": 0.5}, {"cpu": "500m"}),
    ({"cpu": "1n"}, {"cpu": "1m"}),
    ({"memory": "1024Mi"}, {"memory": "1Gi"}),
    ({"memory": "1.5"}, {"memory": "1500m"}),
    ({"memory": "0.5Gi"}, {"memory": "512Mi"}),
    ({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": "8"}),
    ({"cpu": "2", "memory": "1e3"}, {"cpu": "2", "memory": "1e3"}),
    ({"ephemeral-storage": "1000000000"}, {"ephemeral-storage": "1G"}),
    ({"cpu": "100000e-2"}, {"cpu": "1e3"}),
]


async def test_quantities_are_stored_canonical(server: Server) -> None:
    volumes = [{"name": f"v{i}", "emptyDir": {"sizeLimit": given}} for i, (given, _) in enumerate(CANONICAL)]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "q"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "volumes": volumes},
    }
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/pods?dryRun=All", pod)
    assert reply.status == 201, reply.body
    # the real server's ServiceAccount admission may add its token volume: look at ours only
    ours = {v["name"]: v for v in reply.body["spec"]["volumes"]}
    stored = [(given, ours[f"v{i}"]["emptyDir"]["sizeLimit"]) for i, (given, _) in enumerate(CANONICAL)]
    assert stored == CANONICAL


async def test_resource_lists_are_rounded_up_to_milli_units(server: Server) -> None:
    containers = [
        {"name": f"c{i}", "image": "busybox:1.36", "resources": {"limits": given}}
        for i, (given, _) in enumerate(RESOURCE_LIST)
    ]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r"}, "spec": {"containers": containers}}
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/pods?dryRun=All", pod)
    assert reply.status == 201, reply.body
    got = [c["resources"] for c in reply.body["spec"]["containers"]]
    # requests default to the limits, already canonical
    assert got == [{"limits": want, "requests": want} for _, want in RESOURCE_LIST]


async def test_node_capacity_is_canonical(server: Server) -> None:
    node: dict[str, Any] = {
        "metadata": {"name": f"{server.ns}-node"},
        "status": {
            "capacity": {"cpu": "0.0001", "memory": "1.5Gi", "pods": "110", "example.com/x": "1.9999"},
            "allocatable": {"cpu": "3500m", "memory": "1073741824"},
        },
    }
    reply = await server.post("/api/v1/nodes?dryRun=All", node)
    assert reply.status == 201, reply.body
    status = reply.body["status"]
    assert status["capacity"] == {"cpu": "1m", "memory": "1536Mi", "pods": "110", "example.com/x": "2"}
    assert status["allocatable"] == {"cpu": "3500m", "memory": "1073741824"}


async def test_an_invalid_quantity_is_a_400(server: Server) -> None:
    pod = {
        "metadata": {"name": "bad"},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1e6m"}}],
        },
    }
    reply = await server.post(f"/api/v1/namespaces/{server.ns}/pods?dryRun=All", pod)
    assert reply.status == 400
    assert reply.body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: '
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


@pytest.mark.parametrize("given,stored", CANONICAL)
def test_canonical_form_unit(given: str, stored: str) -> None:
    """The port itself, without a server: the same table."""
    assert canonical(given) == stored


@pytest.mark.parametrize("given", ["", "abc", "1e6m", "1.5.5", "5e+", "1Xi", "--1"])
def test_not_quantities(given: str) -> None:
    with pytest.raises(QuantityError):
        canonical(given)
