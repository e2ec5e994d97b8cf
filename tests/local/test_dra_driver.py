"""The local DRA driver's pieces alone (kubedl_local/node/dra.py): ``--node-devices``, the slices it publishes,
and which container of a pod is told which devices. The driver at work, through the real kube-scheduler and
kubelet-like node agent, is ``test_dra_node.py`` and ``tests/integration/test_dra.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubedl_local.node.dra import (
    GPU_DRIVER,
    NIC_DRIVER,
    PCIE_ROOT,
    DraDevices,
    container_env,
    containers_devices,
    parse_node_devices,
    resource_slices,
)


def test_node_devices_are_parsed() -> None:
    assert parse_node_devices("gpu=8,nic=8,pcie-roots=4") == DraDevices(gpus=8, nics=8, pcie_roots=4)
    assert parse_node_devices("gpu=2") == DraDevices(gpus=2, nics=0, pcie_roots=1)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpus=8", "'gpus=8' is not <kind>=<count> with kind one of gpu, nic, pcie-roots"),
        ("gpu=eight", "gpu='eight' is not a whole number"),
        ("pcie-roots=2", "no GPU and no NIC given"),
        ("gpu=2,pcie-roots=4", "pcie-roots=4 must be between 1 and the number of GPUs or NICs"),
    ],
)
def test_bad_node_devices_are_refused_naming_the_fix(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="--node-devices") as e:
        parse_node_devices(text)
    assert says in str(e.value) and "e.g. --node-devices gpu=8,nic=8,pcie-roots=4" in str(e.value)


def test_local_up_refuses_node_devices_on_the_embedded_plane(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kubedl_py.cli.main import main

    argv = ["local", "up", "--kubeconfig", str(tmp_path / "kc"), "--node-devices", "gpu=8,nic=8,pcie-roots=4"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "embedded API server does not serve" in err and "add --control-plane kubernetes" in err, err
    assert not (tmp_path / "kc").exists()


def test_each_gpu_and_its_nic_share_a_root_and_the_roots_spread_evenly() -> None:
    slices = {s["spec"]["driver"]: s for s in resource_slices("n1", gpus=8, nics=8, pcie_roots=4, node_uid="u")}
    roots = {
        driver: [d["attributes"][PCIE_ROOT]["string"] for d in s["spec"]["devices"]] for driver, s in slices.items()
    }
    assert roots[GPU_DRIVER] == roots[NIC_DRIVER]
    assert [roots[GPU_DRIVER].count(r) for r in sorted(set(roots[GPU_DRIVER]))] == [2, 2, 2, 2]
    assert slices[GPU_DRIVER]["metadata"]["ownerReferences"][0]["uid"] == "u"


def _claim(name: str, node: str, results: list[tuple[str, str, str]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": r, "driver": d, "pool": node, "device": dev} for r, d, dev in results]
                }
            }
        },
    }


def test_each_container_is_told_only_the_devices_of_the_claims_it_names() -> None:
    pod = {
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": "t"}],
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "devices"}]}}, {"name": "side"}],
        },
        "status": {
            "resourceClaimStatuses": [{"name": "devices", "resourceClaimName": "p-devices-x"}],
            "extendedResourceClaimStatus": {
                "resourceClaimName": "p-extended",
                "requestMappings": [
                    {"containerName": "side", "resourceName": "nvidia.com/gpu", "requestName": "container-1-request-0"}
                ],
            },
        },
    }
    claims = {
        "p-devices-x": _claim(
            "p-devices-x",
            "n1",
            [("gpu-0", GPU_DRIVER, "gpu-1"), ("nic-0", NIC_DRIVER, "nic-1"), ("other", "x.example.com", "dev-0")],
        ),
        "p-extended": _claim("p-extended", "n1", [("container-1-request-0", GPU_DRIVER, "gpu-10")]),
    }
    given = containers_devices(pod, claims, "n1")
    main = container_env(given["main"], "n1")
    assert main["NCCL_IB_HCA"] == "=mlx5_1:1"  # exact: not mlx5_10 too
    assert main["CUDA_VISIBLE_DEVICES"] == main["NVIDIA_VISIBLE_DEVICES"] == "GPU-pretend-n1-1"
    assert main["KUBEDL_DRA_DEVICES"] == "gpu-0=gpu-1,nic-0=nic-1"  # another driver's device is not ours to tell
    side = container_env(given["side"], "n1")
    assert side["CUDA_VISIBLE_DEVICES"] == "GPU-pretend-n1-10" and "NCCL_IB_HCA" not in side
    assert container_env(given["init"], "n1") == {}
    # a claim allocated on another node's pool gives this node's containers nothing
    assert container_env(containers_devices(pod, claims, "n2")["main"], "n2") == {}
