"""The real node's parts that need no node: image names, the pause image, configuration, what counts as a
change of the machine, which iptables rules are the node's. (The node itself: ``tests/node``, opt-in.)"""

from __future__ import annotations

import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from kubedl_local.kubernetes.real_node import config, host
from kubedl_local.kubernetes.real_node.images import normalized, pause_archive, pause_image
from kubedl_local.up import LocalUpOptions, build_cluster


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("kubedl-py:0.1.0", "docker.io/library/kubedl-py:0.1.0"),
        ("busybox", "docker.io/library/busybox:latest"),
        ("ml/trainer:1", "docker.io/ml/trainer:1"),
        ("localhost/kubedl-py-base:bookworm", "localhost/kubedl-py-base:bookworm"),
        ("registry.example.com:5000/a/b", "registry.example.com:5000/a/b:latest"),
        ("python@sha256:abc", "docker.io/library/python@sha256:abc"),
    ],
)
def test_image_names_are_normalized_as_containerd_does(reference: str, expected: str) -> None:
    assert normalized(reference) == expected


def test_the_pause_image_is_one_layer_with_the_program(tmp_path: Path) -> None:
    program = tmp_path / "pause"
    program.write_bytes(b"\x7fELF not really")
    archive = pause_archive(program, tmp_path / "pause.tar")
    with tarfile.open(archive) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == [pause_image()]
        image = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        assert image["config"]["Entrypoint"] == ["/pause"]
        layer = tar.extractfile(manifest[0]["Layers"][0]).read()  # type: ignore[union-attr]
    with tarfile.open(fileobj=io.BytesIO(layer)) as inner:
        member = inner.getmember("pause")
        assert member.mode == 0o755
        assert inner.extractfile(member).read() == b"\x7fELF not really"  # type: ignore[union-attr]


def test_configuration_keeps_the_node_in_its_directory(tmp_path: Path) -> None:
    layout = config.Layout(tmp_path)
    containerd = tomllib.loads(config.containerd_config(layout, sandbox_image="localhost/p:1", runc="/usr/sbin/runc"))
    runtime = containerd["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # root here lacks CAP_SYS_RESOURCE
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["Root"].startswith(str(tmp_path))
    assert containerd["root"].startswith(str(tmp_path)) and containerd["state"].startswith(str(tmp_path))
    assert containerd["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "localhost/p:1"
    kubelet = yaml.safe_load(
        config.kubelet_config(
            layout, config.KubeletSettings(node_ip="192.0.2.2", cluster_dns="10.96.0.10", client_ca=tmp_path / "ca")
        )
    )
    assert kubelet["failCgroupV1"] is False and kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["podLogsDir"].startswith(str(tmp_path))
    assert kubelet["authorization"]["mode"] == "Webhook"
    network = json.loads(config.cni_config(layout, bridge="br-x", pod_cidr="10.32.0.0/16"))
    assert network["name"] == config.CNI_NETWORK
    assert network["plugins"][0]["ipam"]["dataDir"].startswith(str(tmp_path))


def test_the_kubelet_runtime_needs_the_real_control_plane() -> None:
    with pytest.raises(ValueError, match="--control-plane kubernetes"):
        build_cluster(LocalUpOptions(kubeconfig="/dev/null", runtime="kubelet"))


SAVE_BEFORE = """\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-THEIRS - [0:0]
-A INPUT -j KUBE-THEIRS
COMMIT
"""

SAVE_AFTER = """\
*filter
:INPUT ACCEPT [10:20]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [3:4]
:KUBE-THEIRS - [0:0]
:KUBE-FIREWALL - [0:0]
:CNI-OTHER - [0:0]
-A INPUT -j KUBE-THEIRS
-A INPUT -j KUBE-FIREWALL
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:CNI-DN-123 - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"kubedl-py-node\\" id: \\"abc\\"" -j CNI-DN-123
-A PREROUTING -m comment --comment "someone else" -j ACCEPT
COMMIT
"""


def test_only_the_nodes_new_chains_and_rules_are_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    before = {"filter": ["INPUT", "FORWARD", "OUTPUT", "KUBE-THEIRS", "CNI-OTHER"]}
    scripts: list[str] = []

    def fake_run(argv: list[str], *, check: bool = False, stdin: str | None = None) -> object:
        class Result:
            returncode = 0
            stdout = SAVE_AFTER if argv[0].endswith("-save") else ""
            stderr = ""

        if stdin is not None:
            scripts.append(stdin)
        return Result()

    monkeypatch.setattr(host, "_run", fake_run)
    monkeypatch.setattr(host, "_tool", lambda name: f"/usr/sbin/{name}")
    removed = host.remove_iptables("ipv4", before, network="kubedl-py-node")
    script = scripts[0].splitlines()
    assert "-X KUBE-FIREWALL" in script and "-X CNI-HOSTPORT-DNAT" in script and "-X CNI-DN-123" in script
    assert "-D INPUT -j KUBE-FIREWALL" in script and "-D OUTPUT -j KUBE-FIREWALL" in script
    assert "-D PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT" in script
    # what existed before, and what is not the node's, stays
    assert not any("KUBE-THEIRS" in line or "CNI-OTHER" in line or "someone else" in line for line in script)
    assert removed


def test_a_change_of_the_machine_is_named() -> None:
    before = host.HostState(
        iptables={"ipv4": ["filter :INPUT"]},
        sysctls={"kernel.panic": "1", "net.ipv4.conf.eth0.forwarding": "0", "net.ipv4.conf.veth1.forwarding": "1"},
        mounts=["/ proc"],
        links=["eth0", "lo"],
        paths={"/var/lib/kubelet": False},
    )
    after = host.HostState(
        iptables={"ipv4": ["filter :INPUT", "filter :KUBE-FIREWALL"]},
        sysctls={"kernel.panic": "10", "net.ipv4.conf.eth0.forwarding": "0"},
        mounts=["/ proc", "/var/lib/kubedl-py-node/x overlay"],
        links=["eth0", "lo"],
        paths={"/var/lib/kubelet": True},
    )
    changes = before.differences(after)
    assert "iptables (ipv4) added: filter :KUBE-FIREWALL" in changes
    assert "sysctl kernel.panic: '1' before, '10' after" in changes
    assert "mount added: /var/lib/kubedl-py-node/x overlay" in changes
    assert "path /var/lib/kubelet: absent before, present after" in changes
    assert not any("veth1" in change for change in changes)  # an interface gone with its parameters
    assert before.differences(before) == []
