"""The public surface of kubedl_py.kube: the reconcilers, SDK and CLI import only these names."""

from __future__ import annotations

import importlib

import pytest

from kubedl_py import kube
from kubedl_py.kube.health import parse_addr


def test_public_names() -> None:
    for name in (
        "KubeClient",
        "Informer",
        "WorkQueue",
        "Manager",
        "Result",
        "Reconciler",
        "LeaderElector",
        "EventRecorder",
        "Metrics",
        "Resource",
        "PODS",
        "SERVICES",
        "EVENTS",
        "LEASES",
        "owner_key",
        "label_key",
        "by_owner_uid",
        "errors",
    ):
        assert name in kube.__all__
        assert hasattr(kube, name)
    assert sorted(kube.__all__) == sorted(set(kube.__all__))


def test_resource_paths() -> None:
    assert kube.PODS.path(namespace="ns", name="p", subresource="log") == "/api/v1/namespaces/ns/pods/p/log"
    assert kube.LEASES.path(namespace="ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert kube.NODES.path(namespace="ignored", name="n1") == "/api/v1/nodes/n1"
    assert kube.LEASES.api_version == "coordination.k8s.io/v1"
    assert kube.object_key({"metadata": {"namespace": "ns", "name": "a"}}) == "ns/a"
    assert kube.split_key("ns/a") == ("ns", "a")
    assert kube.split_key("node-1") == (None, "node-1")


def test_owner_and_label_mappers() -> None:
    pod = {
        "metadata": {
            "namespace": "ns",
            "name": "j-worker-0",
            "labels": {"job": "j"},
            "ownerReferences": [
                {
                    "kind": "PyTorchJob",
                    "name": "j",
                    "uid": "u",
                    "controller": True,
                    "apiVersion": "training.kubedl.io/v1alpha1",
                }
            ],
        }
    }
    assert kube.owner_key("PyTorchJob")(pod) == ["ns/j"]
    assert kube.owner_key("TFJob")(pod) == []
    assert kube.owner_key("PyTorchJob", api_version="other/v1")(pod) == []
    assert kube.label_key("job")(pod) == ["ns/j"]
    assert kube.by_owner_uid(pod) == ["u"]


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_addr(":9090") == ("0.0.0.0", 9090)
    assert parse_addr("[::1]:80") == ("::1", 80)


def test_the_lazy_packages_export_exactly_what_they_list() -> None:
    """kubedl_py.api and kubedl_py.kube hand out their names on first use (kubedl_py/_lazy.py): every name of
    ``__all__`` has a home, every home holds its name, and nothing else is handed out."""
    for package_name in ("kubedl_py.api", "kubedl_py.kube"):
        package = importlib.import_module(package_name)
        where = package._WHERE
        assert sorted(where) == sorted(package.__all__), package_name
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package_name}.{name}"
        with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
            package.not_a_name  # noqa: B018
