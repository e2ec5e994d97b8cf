"""kubectl apply (client- and server-side), patch, label, annotate, replace, edit, diff, delete."""

from __future__ import annotations

from tests.differential.cases.common import GROUP, IMAGE, configmap, core, make, pod
from tests.differential.harness import Tier, case

CM_V1 = """apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  labels:
    app: demo
data:
  a: "1"
  b: "2"
"""
CM_V2 = """apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  labels:
    app: demo
    stage: two
data:
  a: "10"
"""


def _last_applied(text: str) -> object:
    import yaml

    doc = yaml.safe_load(text)
    return {
        "data": doc.get("data"),
        "labels": doc["metadata"].get("labels"),
        "annotations": doc["metadata"].get("annotations"),
    }


@case("kubectl-apply-client-side")
async def _(t: Tier) -> None:
    """apply creates, re-apply patches (a key dropped from the manifest goes), unchanged says so."""
    await t.kubectl("apply", "-f", "-", stdin=CM_V1)
    await t.kubectl("apply", "-f", "-", stdin=CM_V1)
    await t.kubectl("apply", "-f", "-", stdin=CM_V2)
    await t.kubectl("get", "configmap", "app", "-o", "yaml", out=_last_applied)
    await t.kubectl("apply", "view-last-applied", "configmap/app")


@case("kubectl-apply-multi-document")
async def _(t: Tier) -> None:
    """apply of a stream with a ConfigMap, a Secret and a Service."""
    manifest = (
        CM_V1
        + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  k: v\n"
        + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc\nspec:\n  selector:\n    app: demo\n"
        "  ports:\n  - port: 80\n    targetPort: http\n"
    )
    await t.kubectl("apply", "-f", "-", stdin=manifest)
    await t.kubectl("get", "configmap,secret,service", "-o", "name")
    await t.kubectl("delete", "-f", "-", stdin=manifest)


@case("kubectl-apply-dry-run-server")
async def _(t: Tier) -> None:
    """apply --dry-run=server: the answer as if created, nothing stored."""
    await t.kubectl("apply", "-f", "-", "--dry-run=server", "-o", "yaml", stdin=CM_V1, out=_last_applied)
    await t.kubectl("get", "configmap", "app")


@case("kubectl-apply-unknown-field")
async def _(t: Tier) -> None:
    """apply with a misspelt field: kubectl asks for Strict validation, the server refuses."""
    bad = CM_V1.replace("data:", "datta:")
    await t.kubectl("apply", "-f", "-", stdin=bad)
    await t.kubectl("apply", "-f", "-", "--validate=warn", stdin=bad)
    await t.kubectl("apply", "-f", "-", "--validate=false", stdin=bad.replace("name: app", "name: app2"))


@case("kubectl-apply-wrong-type")
async def _(t: Tier) -> None:
    """apply of a pod whose containerPort is a string: the Go struct's unmarshal error."""
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n"
        f"    image: {IMAGE}\n    ports:\n    - containerPort: http\n"
    )
    await t.kubectl("apply", "-f", "-", stdin=manifest)


@case("kubectl-apply-server-side")
async def _(t: Tier) -> None:
    """apply --server-side: create, re-apply with a removed key (it goes), unchanged."""
    await t.kubectl("apply", "--server-side", "-f", "-", stdin=CM_V1)
    await t.kubectl("apply", "--server-side", "-f", "-", stdin=CM_V2)
    await t.kubectl("get", "configmap", "app", "-o", "yaml", out=_last_applied)
    await t.kubectl("apply", "--server-side", "-f", "-", stdin=CM_V2)


@case("kubectl-apply-server-side-conflict")
async def _(t: Tier) -> None:
    """Two managers apply different values to one field: a conflict naming the other manager;
    --force-conflicts takes the field over."""
    await t.kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-", stdin=CM_V1)
    await t.kubectl("apply", "--server-side", "--field-manager=bob", "-f", "-", stdin=CM_V2)
    await t.kubectl("apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-", stdin=CM_V2)
    await t.kubectl("get", "configmap", "app", "-o", "yaml", out=_last_applied)


@case("kubectl-apply-server-side-after-create")
async def _(t: Tier) -> None:
    """apply --server-side over an object kubectl create made: a conflict with kubectl-create's fields."""
    await t.kubectl("create", "configmap", "app", "--from-literal=a=0")
    await t.kubectl("apply", "--server-side", "-f", "-", stdin=CM_V1)
    await t.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=CM_V1)
    await t.kubectl("get", "configmap", "app", "-o", "yaml", out=_last_applied)


@case("kubectl-apply-server-side-managed-fields")
async def _(t: Tier) -> None:
    """The managedFields server-side apply records (managers, operations, field sets; times aside)."""
    await t.kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-", stdin=CM_V1)
    await t.kubectl("label", "configmap", "app", "extra=yes")
    await t.get(core(t, "configmaps", "app"), keep=_managed, managed_fields=True)


def _managed(body: object) -> object:
    assert isinstance(body, dict)
    return [{k: v for k, v in entry.items() if k != "time"} for entry in body["metadata"].get("managedFields") or []]


@case("kubectl-apply-server-side-dry-run")
async def _(t: Tier) -> None:
    """apply --server-side --dry-run=server: the answer, nothing stored."""
    await t.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", "-o", "yaml", stdin=CM_V1, out=_last_applied
    )
    await t.kubectl("get", "configmap", "app")


@case("kubectl-apply-server-side-pytorchjob")
async def _(t: Tier) -> None:
    """apply --server-side of a PyTorchJob (a custom resource): created with the schema's defaults."""
    manifest = f"""apiVersion: {GROUP}/v1alpha1
kind: PyTorchJob
metadata:
  name: ssa
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0
"""
    await t.kubectl("apply", "--server-side", "-f", "-", stdin=manifest)
    await t.kubectl("get", "pytorchjob.training.kubedl.io", "ssa", "-o", "jsonpath={.spec}", out=_json)
    await t.kubectl("apply", "--server-side", "-f", "-", stdin=manifest.replace("replicas: 1", "replicas: 2"))


def _json(text: str) -> object:
    import json

    return json.loads(text)


@case("kubectl-apply-pytorchjob")
async def _(t: Tier) -> None:
    """Client-side apply of a PyTorchJob: create, change, a CEL-refused change."""
    manifest = f"""apiVersion: {GROUP}/v1alpha1
kind: PyTorchJob
metadata:
  name: job
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.3.0
"""
    await t.kubectl("apply", "-f", "-", stdin=manifest)
    await t.kubectl("apply", "-f", "-", stdin=manifest.replace("replicas: 2", "replicas: 4"))
    await t.kubectl("apply", "-f", "-", stdin=manifest.replace("replicas: 1", "replicas: 2"))
    await t.kubectl("get", "pytorchjobs.training.kubedl.io")


@case("kubectl-patch-strategic-pod")
async def _(t: Tier) -> None:
    """patch (strategic, kubectl's default for core kinds): a container's image by name, labels added."""
    await make(t, core(t, "pods"), pod("p", containers=[{"name": "a", "image": IMAGE}, {"name": "b", "image": IMAGE}]))
    await t.kubectl("patch", "pod", "p", "-p", '{"spec":{"containers":[{"name":"b","image":"busybox:1.37"}]}}')
    await t.kubectl("patch", "pod", "p", "-p", '{"metadata":{"labels":{"x":"y"}}}')
    await t.kubectl("get", "pod", "p", "-o", "jsonpath={.spec.containers[*].image} {.metadata.labels}")
    await t.kubectl("patch", "pod", "p", "-p", '{"spec":{"containers":[{"name":"a","ports":[{"containerPort":80}]}]}}')


@case("kubectl-patch-merge")
async def _(t: Tier) -> None:
    """patch --type=merge: keys set, a null removes one, lists replaced whole."""
    await make(t, core(t, "configmaps"), configmap("m", {"a": "1", "b": "2"}))
    await t.kubectl("patch", "configmap", "m", "--type=merge", "-p", '{"data":{"a":null,"c":"3"}}')
    await t.kubectl("patch", "configmap", "m", "--type=merge", "-p", '{"data":{"c":"3"}}')
    await t.kubectl("get", "configmap", "m", "-o", "jsonpath={.data}")
    await t.kubectl("patch", "configmap", "m", "--type=merge", "-p", '{"data":{"n":1}}')


@case("kubectl-patch-json")
async def _(t: Tier) -> None:
    """patch --type=json: add/replace/remove/copy/move/test, and a failing test op."""
    await make(t, core(t, "configmaps"), configmap("j", {"a": "1"}))
    ops = (
        '[{"op":"add","path":"/data/b","value":"2"},{"op":"copy","from":"/data/a","path":"/data/c"},'
        '{"op":"move","from":"/data/b","path":"/data/d"},{"op":"replace","path":"/data/a","value":"9"}]'
    )
    await t.kubectl("patch", "configmap", "j", "--type=json", "-p", ops)
    await t.kubectl("get", "configmap", "j", "-o", "jsonpath={.data}")
    await t.kubectl("patch", "configmap", "j", "--type=json", "-p", '[{"op":"test","path":"/data/a","value":"1"}]')
    await t.kubectl("patch", "configmap", "j", "--type=json", "-p", '[{"op":"remove","path":"/data/zz"}]')
    await t.kubectl("patch", "configmap", "j", "--type=json", "-p", '[{"op":"jump","path":"/data/a"}]')


@case("kubectl-patch-custom-resource")
async def _(t: Tier) -> None:
    """patch of a PyTorchJob: merge works; strategic (kubectl's default) is refused for custom resources."""
    from tests.differential.cases.common import pytorchjob

    await make(t, f"/apis/{GROUP}/v1alpha1/namespaces/{t.ns}/pytorchjobs", pytorchjob("pj"))
    await t.kubectl("patch", "pytorchjob.training.kubedl.io", "pj", "--type=merge", "-p", '{"spec":{"backoffLimit":3}}')
    await t.kubectl("patch", "pytorchjob.training.kubedl.io", "pj", "-p", '{"spec":{"backoffLimit":4}}')
    await t.kubectl(
        "patch", "pytorchjob", "pj", "--type=json", "-p", '[{"op":"replace","path":"/spec/backoffLimit","value":5}]'
    )
    await t.kubectl(
        "get", "pytorchjob.training.kubedl.io", "pj", "-o", "jsonpath={.spec.backoffLimit} {.metadata.generation}"
    )


@case("kubectl-patch-status-subresource")
async def _(t: Tier) -> None:
    """patch --subresource=status of a PyTorchJob: only status changes; the main endpoint ignores status."""
    from tests.differential.cases.common import pytorchjob

    await make(t, f"/apis/{GROUP}/v1alpha1/namespaces/{t.ns}/pytorchjobs", pytorchjob("pj"))
    await t.kubectl(
        "patch",
        "pytorchjob",
        "pj",
        "--type=merge",
        "--subresource=status",
        "-p",
        '{"status":{"conditions":[{"type":"Created","status":"True","reason":"JobCreated"}]}}',
    )
    await t.kubectl(
        "patch", "pytorchjob", "pj", "--type=merge", "-p", '{"status":{"startTime":"2020-01-01T00:00:00Z"}}'
    )
    await t.kubectl(
        "get", "pytorchjob.training.kubedl.io", "pj", "-o", "jsonpath={.status} {.metadata.generation}", out=lambda s: s
    )


@case("kubectl-patch-missing-and-noop")
async def _(t: Tier) -> None:
    """patch of a missing object (NotFound) and a patch that changes nothing ('no change')."""
    await make(t, core(t, "configmaps"), configmap("same", {"a": "1"}))
    await t.kubectl("patch", "configmap", "nope", "--type=merge", "-p", '{"data":{"a":"1"}}')
    await t.kubectl("patch", "configmap", "same", "--type=merge", "-p", '{"data":{"a":"1"}}')


@case("kubectl-label")
async def _(t: Tier) -> None:
    """label: add, refuse to overwrite, --overwrite, remove, --list, invalid values."""
    await make(t, core(t, "configmaps"), configmap("l"))
    await t.kubectl("label", "configmap", "l", "team=ml")
    await t.kubectl("label", "configmap", "l", "team=infra")
    await t.kubectl("label", "configmap", "l", "team=infra", "--overwrite")
    await t.kubectl("label", "configmap", "l", "--list")
    await t.kubectl("label", "configmap", "l", "team-")
    await t.kubectl("label", "configmap", "l", "bad=has space")
    await t.kubectl("label", "configmap", "l", "x" * 64 + "=v")
    await t.kubectl("get", "configmap", "l", "--show-labels")


@case("kubectl-label-selector-all")
async def _(t: Tier) -> None:
    """label -l and --all over several objects."""
    for i in range(3):
        await make(t, core(t, "configmaps"), configmap(f"c{i}", labels={"batch": "one" if i < 2 else "two"}))
    await t.kubectl("label", "configmaps", "-l", "batch=one", "picked=yes")
    await t.kubectl("label", "configmaps", "--all", "every=one")
    await t.kubectl("get", "configmaps", "-L", "picked,every")


@case("kubectl-annotate")
async def _(t: Tier) -> None:
    """annotate: add, overwrite refused and forced, remove; a too large value."""
    await make(t, core(t, "configmaps"), configmap("an"))
    await t.kubectl("annotate", "configmap", "an", "note=first")
    await t.kubectl("annotate", "configmap", "an", "note=second")
    await t.kubectl("annotate", "configmap", "an", "note=second", "--overwrite")
    await t.kubectl("annotate", "configmap", "an", "note-")
    # over the 256 KiB total in three values (one argument may not exceed 128 KiB on Linux)
    await t.kubectl("annotate", "configmap", "an", *(f"huge{i}=" + "x" * 90_000 for i in range(3)))
    await t.kubectl("get", "configmap", "an", "-o", "jsonpath={.metadata.annotations}")


@case("kubectl-replace")
async def _(t: Tier) -> None:
    """replace -f: a full update; replace of a missing object; replace --force (delete and create)."""
    await t.kubectl("create", "-f", "-", stdin=CM_V1)
    await t.kubectl("replace", "-f", "-", stdin=CM_V2)
    await t.kubectl("get", "configmap", "app", "-o", "jsonpath={.data}")
    await t.kubectl("replace", "-f", "-", stdin=CM_V2.replace("name: app", "name: other"))
    await t.kubectl("replace", "--force", "-f", "-", stdin=CM_V1)


@case("kubectl-edit")
async def _(t: Tier) -> None:
    """edit with an editor that rewrites a value (sed), and one that breaks the name."""
    await make(t, core(t, "configmaps"), configmap("ed", {"key": "old"}))
    await t.kubectl("edit", "configmap", "ed", env={"EDITOR": "sed -i s/old/new/"})
    await t.kubectl("get", "configmap", "ed", "-o", "jsonpath={.data.key}")


@case("kubectl-diff")
async def _(t: Tier) -> None:
    """diff -f: against a missing object, an unchanged one and a changed one (server-side dry runs)."""
    await t.kubectl("diff", "-f", "-", stdin=CM_V1, out=_diff_body)
    await t.kubectl("apply", "-f", "-", stdin=CM_V1)
    await t.kubectl("diff", "-f", "-", stdin=CM_V1, out=_diff_body)
    await t.kubectl("diff", "-f", "-", stdin=CM_V2, out=_diff_body)


def _diff_body(text: str) -> list[str]:
    """The diff's changed lines (its file headers name temporary directories)."""
    return [line for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@case("kubectl-delete-basic")
async def _(t: Tier) -> None:
    """delete of an object, of a missing one, with --ignore-not-found, and a dry run."""
    await make(t, core(t, "configmaps"), configmap("d1"))
    await make(t, core(t, "configmaps"), configmap("d2"))
    await t.kubectl("delete", "configmap", "d1")
    await t.kubectl("delete", "configmap", "d1")
    await t.kubectl("delete", "configmap", "d1", "--ignore-not-found")
    await t.kubectl("delete", "configmap", "d2", "--dry-run=server")
    await t.kubectl("get", "configmap", "d2", "-o", "name")


@case("kubectl-delete-selector")
async def _(t: Tier) -> None:
    """delete -l and --all."""
    for i in range(4):
        await make(t, core(t, "configmaps"), configmap(f"s{i}", labels={"keep": "no" if i % 2 else "yes"}))
    await t.kubectl("delete", "configmaps", "-l", "keep=no")
    await t.kubectl("get", "configmaps", "-l", "keep", "-o", "name")
    await t.kubectl("delete", "configmaps", "-l", "keep", "--all")
    await t.kubectl("delete", "configmaps", "--all")
    # the root CA publisher puts its ConfigMap back
    await t.poll(
        core(t, "configmaps"),
        lambda r: len(r.body["items"]) == 1,
        keep=lambda b: [i["metadata"]["name"] for i in b["items"]],
    )
