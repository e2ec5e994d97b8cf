"""One Kubeflow training SDK script, run unchanged by the real Kubeflow SDK and by kubedl-py's drop-in.

The script knows nothing of which client it drives: it takes a ``TrainingClient`` (either one) and a job object
(a Kubeflow model or a dict) and does what a user's script does -- create, wait, inspect, read logs, list,
update, delete -- and the error cases a script relies on. It returns what it saw as plain data with the job's
name replaced by ``<job>``, so runs against either API group and either SDK compare with ``==``.

``import_kubeflow_training`` gives the real Kubeflow SDK, or skips saying why it cannot be had.

It blocks: run it in a worker thread (``asyncio.to_thread``), since the test's event loop serves the cluster.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import io
import os
import time
from collections.abc import Callable
from typing import Any, Final

import pytest

_NAMESPACE_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def import_kubeflow_training() -> Any:
    """The real Kubeflow SDK, or a skip naming why it cannot be imported.

    Its import reads the service account's namespace file whenever ``/var/run/secrets/kubernetes.io`` exists
    (``utils.get_default_target_namespace()`` as a default argument): on a host that has that directory but
    is no pod it raises FileNotFoundError. kubedl-py's process runtime no longer leaves it there (its pods'
    mount points live in their own mount namespaces, issue 36); a host that ran an older version may still
    have it, and is told so."""
    try:
        return importlib.import_module("kubeflow.training")
    except ImportError as exc:
        pytest.skip(f"the Kubeflow training SDK is not installed (pip install kubeflow-training): {exc!r}")
    except FileNotFoundError as exc:
        if exc.filename == _NAMESPACE_FILE and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            pytest.skip(
                f"the Kubeflow training SDK cannot be imported on this host: {os.path.dirname(_NAMESPACE_FILE)} "
                "exists but this is no pod (a leftover of kubedl-py's process runtime before issue 36?); remove it "
                f"with: rmdir -p {os.path.dirname(_NAMESPACE_FILE)}"
            )
        pytest.skip(f"the Kubeflow training SDK cannot be imported here: {exc!r}")


#: how often the real Kubeflow SDK polls in these runs (it sleeps this long between reads)
POLL = 0.2
#: seconds any one wait of the script may take
WAIT = 60


def _raises(call: Callable[[], Any], kind: type[BaseException]) -> str:
    """The message of the exception ``call`` raises, which must be a ``kind``."""
    try:
        call()
    except kind as exc:
        return str(exc)
    except BaseException as exc:
        raise AssertionError(f"expected {kind.__name__}, got {type(exc).__name__}: {exc}") from exc
    raise AssertionError(f"expected {kind.__name__}, nothing was raised")


def _gone(client: Any, name: str) -> bool:
    """Poll (with a deadline) until ``get_job`` says the job is no more."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            client.get_job(name)
        except RuntimeError as exc:
            return "not found" in str(exc).lower()
        time.sleep(POLL)
    return False


def run_script(
    client: Any, job: Any, *, name: str, failing_job: Any, failing_name: str, train: Callable[[], None]
) -> dict[str, Any]:
    """Drive ``client`` through a job's life; ``job`` succeeds, ``failing_job`` fails, ``train`` is a function
    for the builder path. Returns what was seen, with names made ``<job>``."""
    seen: dict[str, Any] = {}
    ns = client.namespace

    client.create_job(job)
    states: list[Any] = []
    done = client.wait_for_job_conditions(
        name, expected_conditions={"Succeeded"}, wait_timeout=WAIT, polling_interval=POLL, callback=states.append
    )
    seen["wait"] = {
        "kind": done.kind,
        "name": done.metadata.name,
        "last condition": done.status.conditions[-1].type,
        "callback saw the job": bool(states) and all(s.metadata.name == name for s in states),
        "callback saw it succeed": states[-1].status.conditions[-1].type,
    }
    seen["is"] = {
        "created": client.is_job_created(name),
        "running": client.is_job_running(name),
        "restarting": client.is_job_restarting(name),
        "succeeded": client.is_job_succeeded(name),
        "failed": client.is_job_failed(name),
        "succeeded (job given)": client.is_job_succeeded(job=done),
    }
    # Sorted: the order is the controller's (False ones first here, the Training Operator's keeps Created first).
    seen["conditions"] = sorted((c.type, c.status) for c in client.get_job_conditions(name))

    got = client.get_job(name)
    seen["job"] = {
        "kind": got.kind,
        "run policy present": got.spec.run_policy is not None,
        "replicas": {k: v.replicas for k, v in sorted(got.spec.pytorch_replica_specs.items())},
        "container": got.spec.pytorch_replica_specs["Worker"].template.spec.containers[0].name,
        "succeeded per type": {k: v.succeeded for k, v in sorted((got.status.replica_statuses or {}).items())},
        "start time is a datetime": isinstance(got.status.start_time, datetime.datetime),
        "completion time is a datetime": isinstance(got.status.completion_time, datetime.datetime),
        "condition time is a datetime": isinstance(got.status.conditions[-1].last_transition_time, datetime.datetime),
        "to_dict run policy": "run_policy" in got.to_dict()["spec"],
    }

    pods = client.get_job_pods(name)
    seen["pods"] = {
        "all": sorted((p.metadata.name, p.status.phase) for p in pods),
        "names": sorted(client.get_job_pod_names(name)),
        "master": client.get_job_pod_names(name, is_master=True),
        "workers": [p.metadata.name for p in client.get_job_pods(name, replica_type="worker")],
        "worker 0": client.get_job_pod_names(name, replica_type="worker", replica_index=0),
        "master by type": client.get_job_pod_names(name, replica_type="master"),
    }

    logs, events = client.get_job_logs(name)
    everyone, described = client.get_job_logs(name, is_master=False, verbose=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        followed, _ = client.get_job_logs(name, follow=True)
    seen["logs"] = {
        "master only": sorted(logs),
        "master exited 0": all("exiting with code 0" in text for text in logs.values()),
        "events without verbose": events,
        "all pods": sorted(everyone),
        "event subjects": sorted(k for k in described if k.startswith(("pytorchjob/", "pod/"))),
        "followed": sorted(followed),
        "printed": [line.split("]")[0] + "]" for line in printed.getvalue().splitlines() if line][:1],
    }

    listed = client.list_jobs()
    seen["list"] = sorted((j.kind, j.metadata.name) for j in listed if j.metadata.name == name)

    update = client.get_job(name)
    update.metadata.labels = {**(update.metadata.labels or {}), "team": "vision"}
    update.spec.run_policy.backoff_limit = 5
    # The whole object is merge-patched: without its resourceVersion a status write in between is no conflict.
    update.metadata.resource_version = None
    client.update_job(update, name)
    updated = client.get_job(name)
    seen["update"] = {
        "label": (updated.metadata.labels or {}).get("team"),
        "backoff limit": updated.spec.run_policy.backoff_limit,
    }

    seen["errors"] = {
        "get missing": _raises(lambda: client.get_job("missing"), RuntimeError).split(". Error")[0],
        "create again": _raises(lambda: client.create_job(job), RuntimeError).split(". Error")[0],
        "job and image": _raises(lambda: client.create_job(job, base_image="busybox"), ValueError),
        "unknown condition": _raises(
            lambda: client.wait_for_job_conditions(name, expected_conditions={"Done"}), ValueError
        ).split(" must")[0],
        "unknown replica type": _raises(lambda: client.get_job_pods(name, replica_type="driver"), ValueError)[:27],
        "never fails": _raises(
            lambda: client.wait_for_job_conditions(
                name, expected_conditions={"Failed"}, wait_timeout=1, polling_interval=POLL
            ),
            TimeoutError,
        )[:25],
    }

    client.create_job(failing_job)
    failed = _raises(
        lambda: client.wait_for_job_conditions(failing_name, wait_timeout=WAIT, polling_interval=POLL), RuntimeError
    )
    seen["failing"] = {
        "message": failed.split(" conditions:")[0],
        "is failed": client.is_job_failed(failing_name),
        "job events": sorted(
            k for k in client.get_job_logs(failing_name, verbose=True)[1] if k.startswith("pytorchjob/")
        ),
        "expected failure": client.wait_for_job_conditions(
            failing_name, expected_conditions={"Failed"}, wait_timeout=WAIT, polling_interval=POLL
        )
        .status.conditions[-1]
        .type,
    }

    built = f"{name}-fn"
    client.create_job(name=built, train_func=train, num_workers=2)
    running = client.wait_for_job_conditions(
        built, expected_conditions={"Running"}, wait_timeout=WAIT, polling_interval=POLL
    )
    spec = running.spec.pytorch_replica_specs
    command = spec["Master"].template.spec.containers[0]
    seen["built"] = {
        "replicas": {k: v.replicas for k, v in sorted(spec.items())},
        "command": command.command,
        "runs the function": f"{train.__name__}()" in command.args[0] and "torchrun" in command.args[0],
        "image": command.image,
        "pods": sorted(client.get_job_pod_names(built)),
    }

    for one in (name, failing_name, built):
        client.delete_job(one)
    seen["deleted"] = [_gone(client, one) for one in (name, failing_name, built)]

    return _named(seen, [(failing_name, "<failing>"), (name, "<job>"), (ns, "<ns>")])


def _named(data: Any, names: list[tuple[str, str]]) -> Any:
    """``data`` with every name in ``names`` replaced by its placeholder, in keys and values."""
    if isinstance(data, str):
        for real, placeholder in names:
            data = data.replace(real, placeholder)
        return data
    if isinstance(data, dict):
        return {_named(k, names): _named(v, names) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(_named(item, names) for item in data)
    return data
