"""The reconciler's parse cache (``JobReconciler._parse``): a job is validated and defaulted once per change of
its document, not once per reconcile, and nothing may edit the parsed job it shares between reconciles."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from kubedl_py.api import constants as c
from kubedl_py.controllers import job as job_module
from kubedl_py.controllers.job import VERIFY_PARSE_CACHE
from tests.controllers.building import bare_reconciler

KEY = "team/train"


def document(workers: int = 3, resource_version: str = "10") -> dict[str, Any]:
    container = {"name": "pytorch", "image": "busybox", "command": ["train"]}
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "train",
            "namespace": "team",
            "uid": "u-1",
            "resourceVersion": resource_version,
            "generation": 1,
            "managedFields": [{"manager": "kubedl-py", "operation": "Update", "time": f"t{resource_version}"}],
        },
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [container]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [container]}}},
            }
        },
        "status": {"conditions": [{"type": "Created", "status": "True"}], "lastReconcileTime": resource_version},
    }


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every call of parse_job the reconciler makes."""
    calls: list[Any] = []
    real = job_module.parse_job

    def counted(data: Any, **kwargs: Any) -> Any:
        calls.append(data)
        return real(data, **kwargs)

    monkeypatch.setattr(job_module, "parse_job", counted)
    return calls


def test_a_status_write_does_not_parse_the_job_again(parses: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERIFY_PARSE_CACHE)  # the suite's check parses again on purpose
    reconciler_ = bare_reconciler()
    first, problems = reconciler_._parse(KEY, document(resource_version="10"))
    # our own status write: a new resourceVersion, managedFields and status, the same spec
    again, _ = reconciler_._parse(KEY, document(resource_version="11"))
    assert problems == [] and first is not None
    assert again is first and len(parses) == 1
    # defaulted as before the cache: the Master's restart policy, filled in by with_defaults
    assert first.replica_specs["Master"].restart_policy is not None


def test_a_changed_spec_or_label_is_parsed_again(parses: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERIFY_PARSE_CACHE)
    reconciler_ = bare_reconciler()
    reconciler_._parse(KEY, document(workers=3))
    scaled, _ = reconciler_._parse(KEY, document(workers=5, resource_version="12"))
    assert scaled is not None and scaled.replica_specs["Worker"].replicas == 5
    labelled = document(workers=5, resource_version="13")
    labelled["metadata"]["labels"] = {"team": "vision"}
    with_label, _ = reconciler_._parse(KEY, labelled)
    assert with_label is not None and with_label.metadata.labels == {"team": "vision"}
    assert len(parses) == 3


def test_an_invalid_job_keeps_its_problems_until_it_changes(parses: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VERIFY_PARSE_CACHE)
    reconciler_ = bare_reconciler()
    broken = document()
    broken["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = -1
    job, problems = reconciler_._parse(KEY, broken)
    again, same = reconciler_._parse(KEY, copy.deepcopy(broken))
    assert job is None and again is None and problems and same == problems and len(parses) == 1
    fixed, none = reconciler_._parse(KEY, document())
    assert fixed is not None and none == [] and len(parses) == 2


def test_the_suite_check_catches_a_parsed_job_edited_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERIFY_PARSE_CACHE, "1")
    reconciler_ = bare_reconciler()
    job, _ = reconciler_._parse(KEY, document())
    assert job is not None
    reconciler_._parse(KEY, document(resource_version="11"))  # unchanged: served from the cache, and checked
    job.replica_specs["Worker"].replicas = 99  # what no reconcile step may do
    with pytest.raises(RuntimeError, match="edited in place"):
        reconciler_._parse(KEY, document(resource_version="12"))


def test_the_suite_runs_with_the_check_on() -> None:
    assert os.environ.get(VERIFY_PARSE_CACHE) == "1", "tests/conftest.py sets it for every test and controller"
