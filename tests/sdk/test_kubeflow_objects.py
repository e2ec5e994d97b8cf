"""The Kubeflow-compatible client's objects, without a cluster: Kubeflow and kubernetes models serialised as
the kubernetes client serialises them, the attribute views read as the Kubeflow models are read, the two
layouts, the jobs built from a function, the constants, and the ValueErrors raised before any request."""

from __future__ import annotations

import copy
import datetime
import pickle
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from kubedl_py.api import JobValidationError
from kubedl_py.sdk import ClientSettings, RetrySettings, pytorch_job
from kubedl_py.sdk.kubeflow import KubeObject, TrainingClient, constants, objects
from kubedl_py.sdk.kubeflow.events import events_by_subject
from kubedl_py.sdk.kubeflow.objects import camel, in_group_layout, present, serialize, snake
from tests.sdk.kubeflow_script import import_kubeflow_training

KUBEFLOW = "kubeflow.org/v1"
KUBEDL = "training.kubedl.io/v1alpha1"
UTC = datetime.UTC


class FakeModel:
    """The shape of an OpenAPI-generated model (the Kubeflow SDK's, the kubernetes client's)."""

    openapi_types: ClassVar[dict[str, str]] = {"api_version": "str", "n_proc_per_node": "int", "start": "datetime"}
    attribute_map: ClassVar[dict[str, str]] = {
        "api_version": "apiVersion",
        "n_proc_per_node": "nProcPerNode",
        "start": "startTime",
    }

    def __init__(self, api_version: Any = None, n_proc_per_node: Any = None, start: Any = None) -> None:
        self.api_version = api_version
        self.n_proc_per_node = n_proc_per_node
        self.start = start


def wire_job(api_version: str = KUBEFLOW, **spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}
    return {
        "apiVersion": api_version,
        "kind": "PyTorchJob",
        "metadata": {
            "name": "mnist",
            "namespace": "team",
            "labels": {"app.kubernetes.io/name": "mnist"},
            "creationTimestamp": "2026-01-02T03:04:05Z",
        },
        "spec": {
            **spec,
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}, "Worker": {"replicas": 2}},
        },
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z"},
                {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-01-02T03:05:00Z"},
            ],
            "replicaStatuses": {"Master": {"succeeded": 1}, "Worker": {"succeeded": 2}},
            "startTime": "2026-01-02T03:04:06Z",
        },
    }


WIRE_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "mnist-master-0", "labels": {"training.kubeflow.org/job-role": "master"}},
    "spec": {
        "nodeName": "n1",
        "containers": [{"name": "pytorch", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    },
    "status": {
        "phase": "Succeeded",
        "hostIP": "10.0.0.1",
        "podIPs": [{"ip": "10.1.0.5"}],
        "containerStatuses": [
            {"name": "pytorch", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "x",
             "state": {"terminated": {"exitCode": 0, "finishedAt": "2026-01-02T03:05:00Z"}}},
        ],
    },
}  # fmt: skip


# ---------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("json_name", "attr"),
    [
        ("apiVersion", "api_version"),
        ("pytorchReplicaSpecs", "pytorch_replica_specs"),
        ("nProcPerNode", "n_proc_per_node"),
        ("rdzvId", "rdzv_id"),
        ("hostIP", "host_ip"),
        ("podIPs", "pod_i_ps"),
        ("exec", "_exec"),
        ("continue", "_continue"),
        ("uid", "uid"),
    ],
)
def test_json_names_become_the_generated_models_attribute_names(json_name: str, attr: str) -> None:
    assert snake(json_name) == attr


def test_attributes_set_on_a_view_get_json_names() -> None:
    assert camel("backoff_limit") == "backoffLimit"
    assert camel("ttl_seconds_after_finished") == "ttlSecondsAfterFinished"


# ---------------------------------------------------------------------------------- serialising


def test_models_serialise_as_the_kubernetes_client_does() -> None:
    start = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    model = FakeModel(api_version=KUBEFLOW, start=start)
    assert serialize(model) == {"apiVersion": KUBEFLOW, "startTime": "2026-01-02T03:04:05+00:00"}
    # In a plain dict None stays (JSON null: a merge patch deletes that field), as sanitize_for_serialization
    # keeps it; lists, tuples and nested models are walked.
    nested = {"a": None, "b": [FakeModel(n_proc_per_node=2)], "c": (1, datetime.date(2026, 1, 2))}
    assert serialize(nested) == {"a": None, "b": [{"nProcPerNode": 2}], "c": [1, "2026-01-02"]}
    with pytest.raises(TypeError, match="cannot serialise object"):
        serialize(object())


def test_kubedl_py_jobs_and_views_serialise_to_their_wire_form() -> None:
    job = pytorch_job("mnist", "busybox", ["python", "train.py"], workers=1)
    assert serialize(job) == job.to_dict()
    view = KubeObject(wire_job())
    assert serialize(view) == wire_job()


def test_the_real_kubeflow_models_serialise_exactly_as_the_kubernetes_client_does() -> None:
    kf = import_kubeflow_training()
    from kubernetes.client import ApiClient, V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec

    template = V1PodTemplateSpec(
        metadata=V1ObjectMeta(annotations={"a": "b"}),
        spec=V1PodSpec(containers=[V1Container(name="pytorch", image="busybox", command=["train"])]),
    )
    job = kf.KubeflowOrgV1PyTorchJob(
        api_version=KUBEFLOW,
        kind="PyTorchJob",
        metadata=V1ObjectMeta(name="mnist", creation_timestamp=datetime.datetime(2026, 1, 2, tzinfo=UTC)),
        spec=kf.KubeflowOrgV1PyTorchJobSpec(
            run_policy=kf.KubeflowOrgV1RunPolicy(backoff_limit=3),
            nproc_per_node="auto",
            elastic_policy=kf.KubeflowOrgV1ElasticPolicy(n_proc_per_node=2, rdzv_id="x"),
            pytorch_replica_specs={"Worker": kf.KubeflowOrgV1ReplicaSpec(replicas=2, template=template)},
        ),
    )
    assert serialize(job) == ApiClient().sanitize_for_serialization(job)
    assert serialize(job)["spec"]["elasticPolicy"] == {"nProcPerNode": 2, "rdzvId": "x"}


# ---------------------------------------------------------------------------------------- views


def test_a_view_reads_as_the_kubeflow_models_read() -> None:
    job = KubeObject(present(wire_job()))
    assert job.metadata.name == "mnist"
    assert job.metadata.labels == {"app.kubernetes.io/name": "mnist"}  # keys of maps stay as they are
    assert job.spec.pytorch_replica_specs["Worker"].replicas == 2
    assert job.spec.pytorch_replica_specs["Master"].template.spec.containers[0].name == "pytorch"
    assert job.spec.run_policy.backoff_limit is None  # absent: None, as an unset model attribute
    assert job.status.conditions[-1].type == "Succeeded"
    assert job.status.replica_statuses["Worker"].succeeded == 2
    assert job.status.conditions[0].last_transition_time == datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert job.status.completion_time is None
    pod = KubeObject(WIRE_POD)
    assert (pod.status.host_ip, pod.status.pod_i_ps[0].ip) == ("10.0.0.1", "10.1.0.5")
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0


def test_a_view_is_changed_by_attribute_and_sent_back_as_the_server_wrote_it() -> None:
    job = KubeObject(present(wire_job(KUBEDL, backoffLimit=1)))
    job.spec.run_policy.backoff_limit = 5
    job.spec.run_policy.ttl_seconds_after_finished = 60
    job.metadata.labels = {"team": "vision"}
    job.metadata.resource_version = None
    wire = serialize(job)
    assert wire["spec"]["runPolicy"] == {"backoffLimit": 5, "ttlSecondsAfterFinished": 60}
    assert wire["metadata"]["labels"] == {"team": "vision"}
    assert "resourceVersion" not in wire["metadata"]
    # Times keep the server's spelling while unchanged, and are ISO when set.
    assert wire["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05Z"
    job.status.start_time = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    assert serialize(job)["status"]["startTime"] == "2026-01-01T00:00:00+00:00"


def test_a_view_has_the_models_to_dict_repr_and_equality() -> None:
    job = KubeObject(present(wire_job()))
    as_dict = job.to_dict()
    assert as_dict["api_version"] == KUBEFLOW
    assert as_dict["spec"]["pytorch_replica_specs"]["Worker"] == {"replicas": 2}
    assert as_dict["status"]["start_time"] == datetime.datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)
    assert "'pytorch_replica_specs'" in repr(job)
    assert job == KubeObject(present(wire_job()))
    assert job != KubeObject(present(wire_job(KUBEDL)))
    assert copy.deepcopy(job) == job
    assert pickle.loads(pickle.dumps(job)) == job
    # It is not taken for a model (other code checks for these), and private names are not fields.
    assert not hasattr(job, "openapi_types")
    assert not hasattr(job, "attribute_map")
    with pytest.raises(AttributeError):
        _ = job._private
    assert "metadata" in dir(job)


def test_views_have_the_attribute_paths_of_the_real_models() -> None:
    """Every value a Kubeflow (or kubernetes) model shows, the view shows at the same snake_case path."""
    kf = import_kubeflow_training()
    from kubeflow.training.api_client import ApiClient

    from kubedl_py.sdk.kubeflow.objects import _FakeResponse

    api = ApiClient()
    for wire, model in ((present(wire_job(KUBEDL, backoffLimit=2)), "KubeflowOrgV1PyTorchJob"), (WIRE_POD, "V1Pod")):
        real = api.deserialize(_FakeResponse(wire), model).to_dict()
        view = KubeObject(wire).to_dict()
        assert leaves(real) == leaves(view), model
    assert kf.__version__.startswith("1.9")


def leaves(data: Any, path: str = "") -> dict[str, Any]:
    """Every non-None value of a to_dict(), by its dotted path."""
    if isinstance(data, dict):
        found: dict[str, Any] = {}
        for key, value in data.items():
            found.update(leaves(value, f"{path}.{key}"))
        return found
    if isinstance(data, list):
        found = {}
        for i, value in enumerate(data):
            found.update(leaves(value, f"{path}[{i}]"))
        return found
    return {} if data is None else {path: data}


# -------------------------------------------------------------------------------------- layouts


def test_jobs_of_either_group_are_presented_in_the_kubeflow_layout() -> None:
    kubedl = present(wire_job(KUBEDL, backoffLimit=2, cleanPodPolicy="All"))
    assert kubedl["apiVersion"] == KUBEDL
    assert kubedl["spec"]["runPolicy"] == {"backoffLimit": 2, "cleanPodPolicy": "All"}
    assert "backoffLimit" not in kubedl["spec"]
    # At least {}: the Kubeflow models refuse a spec without runPolicy (even the Training Operator's own jobs).
    assert present(wire_job(KUBEFLOW))["spec"]["runPolicy"] == {}
    assert present(wire_job(KUBEDL))["spec"]["runPolicy"] == {}
    # And back: inline in training.kubedl.io, nested in kubeflow.org.
    back = in_group_layout(kubedl, objects.KUBEDL)
    assert (back["spec"]["backoffLimit"], "runPolicy" in back["spec"]) == (2, False)
    nested = present(wire_job(KUBEFLOW, runPolicy={"backoffLimit": 1}))
    assert in_group_layout(nested, objects.KUBEFLOW)["spec"]["runPolicy"] == {"backoffLimit": 1}


def test_a_kubedl_job_becomes_a_real_kubeflow_model() -> None:
    """facts §8.7: the Kubeflow models require spec.runPolicy, which training.kubedl.io jobs never have."""
    kf = import_kubeflow_training()
    from kubeflow.training.api_client import ApiClient

    from kubedl_py.sdk.kubeflow.objects import _FakeResponse

    raw = wire_job(KUBEDL, backoffLimit=2)
    with pytest.raises(ValueError, match="run_policy"):
        ApiClient().deserialize(_FakeResponse(raw), "KubeflowOrgV1PyTorchJob")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(objects, "_SDK", objects._SdkState())
        job = objects.Objects().job(raw, "KubeflowOrgV1PyTorchJob")
    assert isinstance(job, kf.KubeflowOrgV1PyTorchJob)
    assert (job.api_version, job.spec.run_policy.backoff_limit) == (KUBEDL, 2)


def test_without_the_kubeflow_sdk_views_are_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> Any:
        raise FileNotFoundError(2, "No such file", "/var/run/secrets/kubernetes.io/serviceaccount/namespace")

    monkeypatch.setattr(objects, "_SDK", objects._SdkState())
    monkeypatch.setattr(objects.importlib, "import_module", broken)
    assert objects.kubeflow_sdk() is None
    assert isinstance(objects.Objects().job(wire_job(KUBEDL), "KubeflowOrgV1PyTorchJob"), KubeObject)


def test_constants_are_the_kubeflow_sdks() -> None:
    kf = import_kubeflow_training()
    theirs = kf.constants
    shared = [name for name in dir(constants) if name.isupper() and hasattr(theirs, name)]
    assert len(shared) > 60
    for name in shared:
        if name != "JOB_MODELS_TYPE":
            assert getattr(constants, name) == getattr(theirs, name), name


def test_events_are_grouped_by_subject_since_it_was_created() -> None:
    job = {"kind": "PyTorchJob", "metadata": {"name": "mnist", "creationTimestamp": "2026-01-02T03:00:00Z"}}
    pods = [{"metadata": {"name": "mnist-master-0", "creationTimestamp": "2026-01-02T03:00:01Z"}}]

    def event(kind: str, name: str, at: str, message: str) -> dict[str, Any]:
        return {
            "involvedObject": {"kind": kind, "name": name},
            "metadata": {"creationTimestamp": at},
            "message": message,
        }

    events = [
        event("PyTorchJob", "mnist", "2026-01-01T00:00:00Z", "an older job of that name"),
        event("PyTorchJob", "mnist", "2026-01-02T03:00:02Z", "Created pod: mnist-master-0"),
        event("Pod", "mnist-master-0", "2026-01-02T03:00:03Z", "Started container pytorch"),
        event("Pod", "other-0", "2026-01-02T03:00:03Z", "not ours"),
    ]
    assert events_by_subject(job, pods, events) == {
        "pytorchjob/mnist": ["2026-01-02 03:00:02 Created pod: mnist-master-0"],
        "pod/mnist-master-0": ["2026-01-02 03:00:03 Started container pytorch"],
    }


# ------------------------------------------------------------------------ the client, no requests


@pytest.fixture
def client(tmp_path: Path) -> Any:
    """A client whose cluster does not answer: everything tested here fails (or succeeds) before a request."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with TrainingClient(config_file=str(path), api_group="kubeflow") as made:
        yield made


def test_the_constructor_checks_as_the_kubeflow_one(client: Any, tmp_path: Path) -> None:
    assert (client.namespace, client.job_kind, client.api_group.name) == ("team", "PyTorchJob", "kubeflow")
    with pytest.raises(ValueError, match="Job kind must be one of these"):
        TrainingClient(config_file=str(tmp_path / "kubeconfig"), job_kind="SparkJob")
    with pytest.raises(ValueError, match="api_group must be 'kubeflow'"):
        TrainingClient(config_file=str(tmp_path / "kubeconfig"), api_group="volcano")


def test_create_job_refuses_what_the_kubeflow_sdk_refuses(client: Any) -> None:
    job = wire_job()
    with pytest.raises(ValueError, match="Argument `train_func` must be None"):
        client.create_job(job, train_func=print)
    with pytest.raises(ValueError, match="Job must be one of these types"):
        client.create_job()
    with pytest.raises(ValueError, match="Job must be one of these types"):
        client.create_job("mnist.yaml")
    with pytest.raises(ValueError, match="Job name must be set"):
        client.create_job(base_image="busybox")
    with pytest.raises(ValueError, match="At least one Worker for PyTorchJob must be set"):
        client.create_job(name="x", base_image="busybox", num_workers=0)
    with pytest.raises(ValueError, match="num_procs_per_worker can't be set for TFJob"):
        client.create_job(name="x", base_image="busybox", job_kind="TFJob", num_procs_per_worker=2)
    with pytest.raises(ValueError, match="num_chief_replicas and num_ps_replicas can't be set for PyTorchJob"):
        client.create_job(name="x", base_image="busybox", num_ps_replicas=1)
    with pytest.raises(ValueError, match="Job kind XGBoostJob can't be created using function or image"):
        client.create_job(name="x", base_image="busybox", job_kind="XGBoostJob")
    with pytest.raises(ValueError, match=r"Volumes and VolumeMounts must be the same length: 1 vs\. 0"):
        client.create_job(name="x", base_image="busybox", volumes=[{"name": "data"}])
    with pytest.raises(ValueError, match="Job kind must be one of these"):
        client.create_job({**job, "kind": "SparkJob"})


def test_create_and_update_validate_locally_naming_the_field(client: Any) -> None:
    bad = wire_job(runPolicy={"backoffLimit": -1})
    for call in (lambda: client.create_job(bad), lambda: client.update_job(bad, "mnist")):
        with pytest.raises(JobValidationError, match=r"spec\.runPolicy\.backoffLimit: must be >= 0"):
            call()
    # The layout of the group: training.kubedl.io has the run policy inline, so it is named there.
    with pytest.raises(ValueError, match=r"spec\.backoffLimit: must be >= 0"):
        client.create_job(in_group_layout(present(wire_job(KUBEDL, backoffLimit=-1)), objects.KUBEDL))


def test_other_calls_refuse_what_the_kubeflow_sdk_refuses(client: Any) -> None:
    with pytest.raises(ValueError, match="must be subset of"):
        client.wait_for_job_conditions("mnist", expected_conditions={"Done"})
    with pytest.raises(ValueError, match="PyTorchJob replica type must be one of"):
        client.get_job_pods("mnist", replica_type="Launcher ")
    with pytest.raises(ValueError, match="Job name must be set"):
        client.get_job_conditions()
    with pytest.raises(ValueError, match="Job must be one of these types"):
        client.get_job_conditions(job=KubeObject(present({**wire_job(), "kind": "TFJob"})))
    assert client.is_job_succeeded(job=KubeObject(present(wire_job())))
    assert not client.is_job_running(job=wire_job())  # a dict is read as the job it describes
    with pytest.raises(NotImplementedError, match=r"train\(\) .* is not supported by kubedl-py"):
        client.train("llm")


def test_an_unreachable_cluster_is_a_runtime_error_with_its_cause(tmp_path: Path, client: Any) -> None:
    settings = ClientSettings(retry=RetrySettings(retry_refused=False))
    with TrainingClient(config_file=str(tmp_path / "kubeconfig"), settings=settings, api_group="kubedl") as refused:
        with pytest.raises(RuntimeError, match=r"^Failed to get PyTorchJob: team/mnist\. Error: .*127\.0\.0\.1:1"):
            refused.get_job("mnist")
        with pytest.raises(RuntimeError, match=r"^Failed to list pods for Job: team/mnist\. Error: "):
            refused.get_job_pods("mnist")


def test_jobs_built_from_a_function_are_the_kubeflow_sdks(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """create_job(train_func=...) sends what the real Kubeflow SDK sends, for PyTorch and TF."""
    kf = import_kubeflow_training()
    from kubernetes.client import ApiClient, Configuration

    theirs = kf.TrainingClient(client_configuration=Configuration(), namespace="team")
    sent_by_them: list[Any] = []
    monkeypatch.setattr(theirs.custom_api, "create_namespaced_custom_object", lambda *a, **k: sent_by_them.append(a))
    sent_by_us: list[Any] = []

    async def capture(resource: Any, body: dict[str, Any], namespace: str) -> None:
        sent_by_us.append((resource.plural, namespace, body))

    monkeypatch.setattr(client, "_create", capture)
    for kwargs in (
        {"name": "pt", "train_func": train, "num_workers": 3, "parameters": {"lr": 0.1}, "num_procs_per_worker": 2,
         "resources_per_worker": {"CPU": "1", "gpu": "1"}, "env_vars": {"A": "b"}, "packages_to_install": ["x"],
         "labels": {"l": "v"}, "annotations": {"a": "v"}},
        {"name": "tf", "job_kind": "TFJob", "base_image": "tensorflow", "num_workers": 2, "num_ps_replicas": 1,
         "num_chief_replicas": 1, "env_vars": [{"name": "A", "value": "b"}]},
    ):  # fmt: skip
        theirs.create_job(**kwargs)
        client.create_job(**kwargs)
    sanitize = ApiClient().sanitize_for_serialization
    assert [(plural, ns, body) for plural, ns, body in sent_by_us] == [
        (plural, ns, sanitize(job)) for _group, _version, ns, plural, job in sent_by_them
    ]


def train(parameters: dict[str, Any]) -> None:
    print("training with", parameters)


async def test_without_kubeflow_org_the_client_uses_training_kubedl_io(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery: where kubeflow.org/v1 is not served (404), or not for the kind, training.kubedl.io is used."""
    from kubedl_py.kube.errors import NotFound
    from kubedl_py.sdk.config import ResolvedConfig
    from kubedl_py.sdk.kubeflow.connection import Connection

    answers: list[Any] = [NotFound("no such group", status=404), {"resources": [{"name": "tfjobs"}]}]

    class Kube:
        async def request(self, method: str, path: str) -> Any:
            assert (method, path) == ("GET", "/apis/kubeflow.org/v1")
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    async def kube() -> Any:
        return Kube()

    for served in (False, True):
        connection = Connection(ResolvedConfig(None, None, "default"), None, ClientSettings())
        monkeypatch.setattr(connection, "kube", kube)
        assert (await connection.group("PyTorchJob", None)).name == "kubedl"
        assert (await connection.group("PyTorchJob", None)).name == "kubedl", "asked once per client"
        if served:
            assert (await connection.group("TFJob", None)).name == "kubeflow"
