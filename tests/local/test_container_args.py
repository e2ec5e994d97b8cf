"""The container runtime's mapping of a pod to ``podman create`` flags, without podman: argv rules, the security
context, resources, network and mounts, and the kubelet's refusals. What podman then does with the flags is
checked for real in ``test_container_runtime.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubedl_local.image import Engine
from kubedl_local.node.containers import (
    ContainerCreateError,
    ImageConfig,
    container_argv,
    create_args,
    security_context,
)
from kubedl_local.node.process import ContainerConfigError, Mount, PodRef, PodSandbox
from kubedl_local.node.process.netns import PodInterface
from kubedl_py.templates import render_manifests

ENGINE = Engine("podman")
IMAGE = ImageConfig(ref="kubedl-py:0.1.0", id="ab" * 32, user="65532:65532", entrypoint=("kubedl-py",), cmd=())
ROOT_IMAGE = ImageConfig(ref="debian", id="cd" * 32, user="", entrypoint=(), cmd=("/bin/bash",))
REF = PodRef(namespace="kubedl-system", name="ctl-0", uid="uid-1")


def _sandbox(*, host_network: bool = False) -> PodSandbox:
    interface = (
        None
        if host_network
        else PodInterface(key="uid-1", netns="kd0-2", ip="10.244.0.2", gateway="10.244.0.1", host_veth="kd0v2")
    )
    return PodSandbox(
        pod=REF,
        host_network=host_network,
        ip="192.0.2.2" if host_network else "10.244.0.2",
        hostname="vm" if host_network else "ctl-0",
        hosts_file=Path("/state/hosts/uid-1"),
        interface=interface,
    )


def _deployment_pod() -> dict[str, Any]:
    """The pod the rendered Deployment makes (as the API server would store it)."""
    deployment = next(d for d in yaml.safe_load_all(render_manifests()) if d and d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    return {"metadata": {"name": "ctl-0", "namespace": "kubedl-system", "uid": "uid-1"}, "spec": template["spec"]}


def _flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_deployments_pod_maps_to_a_locked_down_container() -> None:
    pod = _deployment_pod()
    (container,) = pod["spec"]["containers"]
    token = Mount(
        Path("/state/pods/uid-1/volumes/kube-api-access-x"), "/var/run/secrets/kubernetes.io/serviceaccount", True
    )
    argv = create_args(
        ENGINE,
        name="k8s_controller_ctl-0_kubedl-system_uid-1_0",
        pod=pod,
        container=container,
        image=IMAGE,
        env={"POD_NAME": "ctl-0", "KUBERNETES_SERVICE_HOST": "127.64.0.1"},
        mounts=[token],
        sandbox=_sandbox(),
        labels={"io.kubernetes.pod.uid": "uid-1"},
        termination_log=Path("/state/t.log"),
    )
    assert argv[:6] == ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "create"] or argv[:4] == [
        "podman",
        "--cgroup-manager",
        "cgroupfs",
        "create",
    ]
    assert argv[-1] == IMAGE.id  # the image the pod's start resolved, not whatever the tag names later
    assert _flag_values(argv, "--user") == ["65532:65532"]
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert _flag_values(argv, "--cap-drop") == ["all"]
    assert _flag_values(argv, "--security-opt") == ["no-new-privileges"]  # RuntimeDefault: podman's profile
    assert _flag_values(argv, "--network") == ["ns:/run/netns/kd0-2"]
    assert _flag_values(argv, "--hostname") == ["ctl-0"]
    assert _flag_values(argv, "--memory") == [str(512 * 2**20)] == _flag_values(argv, "--memory-swap")
    assert _flag_values(argv, "--cpu-shares") == ["102"]  # 100m
    assert "--cpus" not in argv  # no CPU limit
    mounts = _flag_values(argv, "--mount")
    assert "type=bind,source=/state/hosts/uid-1,destination=/etc/hosts" in mounts and "--no-hosts" in argv
    assert (
        "type=bind,source=/state/pods/uid-1/volumes/kube-api-access-x,"
        "destination=/var/run/secrets/kubernetes.io/serviceaccount,ro=true"
    ) in mounts
    assert "type=bind,source=/state/t.log,destination=/dev/termination-log" in mounts
    assert _flag_values(argv, "--env") == ["POD_NAME=ctl-0", "KUBERNETES_SERVICE_HOST=127.64.0.1"]
    # args only: the image's ENTRYPOINT with the Deployment's args, all given as the entrypoint
    assert json.loads(_flag_values(argv, "--entrypoint")[0]) == ["kubedl-py", *container["args"]]
    assert _flag_values(argv, "--label") == ["io.kubernetes.pod.uid=uid-1"]
    assert "--pull=never" in argv and "--log-driver=none" in argv


def test_command_and_args_follow_kubernetes_over_the_image() -> None:
    env = {"WHO": "world"}
    image = ImageConfig(ref="i", id="1", entrypoint=("/entry", "-x"), cmd=("default", "cmd"))
    assert container_argv({}, image, env) == ["/entry", "-x", "default", "cmd"]
    assert container_argv({"args": ["hello $(WHO)"]}, image, env) == ["/entry", "-x", "hello world"]
    assert container_argv({"command": ["echo"]}, image, env) == ["echo"]  # CMD dropped with the entrypoint
    assert container_argv({"command": ["echo"], "args": ["$(WHO)", "$$(WHO)"]}, image, env) == [
        "echo",
        "world",
        "$(WHO)",
    ]
    with pytest.raises(ContainerCreateError, match="no command specified"):
        container_argv({"name": "c"}, ImageConfig(ref="i", id="1"), env)


def test_security_context_container_over_pod_and_the_kubelets_non_root_rules() -> None:
    pod_spec = {
        "securityContext": {"runAsUser": 1000, "runAsNonRoot": True, "fsGroup": 2000, "supplementalGroups": [5]}
    }
    container = {"name": "c", "securityContext": {"runAsUser": 1001, "capabilities": {"add": ["NET_ADMIN"]}}}
    assert security_context(pod_spec, container) == {
        "runAsUser": 1001,
        "runAsNonRoot": True,
        "capabilities": {"add": ["NET_ADMIN"]},
    }

    def args(pod_sc: dict[str, Any], c_sc: dict[str, Any] | None = None, image: ImageConfig = ROOT_IMAGE) -> list[str]:
        pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"securityContext": pod_sc}}
        c = {"name": "c", "command": ["true"], "securityContext": c_sc or {}}
        return create_args(
            ENGINE, name="n", pod=pod, container=c, image=image, env={}, mounts=[], sandbox=_sandbox(host_network=True)
        )

    with pytest.raises(
        ContainerConfigError,
        match=r"container has runAsNonRoot and image will run as root \(pod: \"p_ns\(u\)\", container: c\)",
    ):
        args({"runAsNonRoot": True})
    with pytest.raises(ContainerConfigError, match="container's runAsUser breaks non-root policy"):
        args({"runAsNonRoot": True}, {"runAsUser": 0})
    named = ImageConfig(ref="i", id="1", user="app")
    with pytest.raises(
        ContainerConfigError, match=r"image has non-numeric user \(app\), cannot verify user is non-root"
    ):
        args({"runAsNonRoot": True}, image=named)
    assert _flag_values(args({"runAsNonRoot": True}, {"runAsUser": 7}), "--user") == ["7"]
    assert "--user" not in args({"runAsNonRoot": True}, image=IMAGE)  # the image's own non-root user

    flags = args(
        {
            "runAsUser": 1000,
            "fsGroup": 2000,
            "supplementalGroups": [5],
            "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}],
        },
        {
            "runAsGroup": 3000,
            "capabilities": {"drop": ["all"], "add": ["net_bind_service", "CAP_CHOWN"]},
            "privileged": False,
        },
    )
    assert _flag_values(flags, "--user") == ["1000:3000"]
    assert _flag_values(flags, "--group-add") == ["5", "2000"]
    assert _flag_values(flags, "--cap-drop") == ["all"]
    assert _flag_values(flags, "--cap-add") == ["CAP_NET_BIND_SERVICE", "CAP_CHOWN"]
    assert _flag_values(flags, "--sysctl") == ["kernel.shm_rmid_forced=1"]
    assert _flag_values(flags, "--network") == ["host"] and "--hostname" not in flags
    # no seccomp profile: unconfined, as the kubelet's default (seccompDefault: false); Localhost: its file
    assert _flag_values(flags, "--security-opt") == ["seccomp=unconfined"]
    local = args({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})
    assert _flag_values(local, "--security-opt") == ["seccomp=/var/lib/kubelet/seccomp/p.json"]
    assert "--privileged" in args({}, {"privileged": True})
    assert _flag_values(args({}, {"runAsGroup": 9}, image=IMAGE), "--user") == ["65532:9"]


def test_resources_become_cgroup_limits() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {}}
    c = {
        "name": "c",
        "command": ["true"],
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}, "requests": {"cpu": "1m"}},
    }
    flags = create_args(
        ENGINE, name="n", pod=pod, container=c, image=ROOT_IMAGE, env={}, mounts=[], sandbox=_sandbox(host_network=True)
    )
    assert _flag_values(flags, "--cpus") == ["1.5"]
    assert _flag_values(flags, "--memory") == [str(2**30)]
    assert _flag_values(flags, "--cpu-shares") == ["2"]  # the kubelet's minimum
    bad = dict(c, resources={"limits": {"memory": "lots"}})
    with pytest.raises(ContainerConfigError):
        create_args(
            ENGINE,
            name="n",
            pod=pod,
            container=bad,
            image=ROOT_IMAGE,
            env={},
            mounts=[],
            sandbox=_sandbox(host_network=True),
        )
