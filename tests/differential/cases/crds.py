"""Our custom resources (kubedl_py.api.crd.all_crds()): schema defaults, pruning, validation, CEL rules,
status subresource, generation, printer columns; and a throwaway CRD's lifecycle."""

from __future__ import annotations

from typing import Any

from tests.differential.cases.common import GROUP, grouped, make, pytorchjob, replica, tfjob
from tests.differential.harness import Tier, case


@case("crd-pytorchjob-create")
async def _(t: Tier) -> None:
    """POST a PyTorchJob: 201 with generation 1 and the schema's defaults; GET the same."""
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("job", cleanPodPolicy="Running"))
    await t.get(grouped(t, "pytorchjobs", "job"))


@case("crd-tfjob-create")
async def _(t: Tier) -> None:
    """POST a TFJob with PS and Workers."""
    await t.post(grouped(t, "tfjobs"), tfjob("tf"))


@case("crd-unknown-fields-pruned")
async def _(t: Tier) -> None:
    """Unknown fields of a custom resource: Strict refuses, Warn warns and prunes, Ignore prunes."""
    body = pytorchjob("j")
    body["spec"]["nonsense"] = 1
    body["spec"]["pytorchReplicaSpecs"]["Master"]["extra"] = True
    body["metadata"]["bogus"] = "x"
    await t.post(grouped(t, "pytorchjobs", query="fieldValidation=Strict"), body)
    await t.post(
        grouped(t, "pytorchjobs", query="fieldValidation=Warn&dryRun=All"),
        body,
        keep=lambda b: ("nonsense" in b["spec"], sorted(b["spec"]["pytorchReplicaSpecs"]["Master"])),
    )
    await t.post(
        grouped(t, "pytorchjobs", query="fieldValidation=Ignore&dryRun=All"),
        body,
        keep=lambda b: "nonsense" in b["spec"],
    )


@case("crd-schema-types")
async def _(t: Tier) -> None:
    """Schema violations: a string for replicas, a negative backoffLimit, an unknown enum value."""
    bad_replicas = pytorchjob("a", {"Master": dict(replica(1), replicas="one")})
    await t.post(grouped(t, "pytorchjobs"), bad_replicas)
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("b", backoffLimit=-1))
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("c", cleanPodPolicy="Sometimes"))
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("d", {"Master": dict(replica(1), restartPolicy="Sometimes")}))


@case("crd-cel-two-masters")
async def _(t: Tier) -> None:
    """The CEL rule: a PyTorchJob has exactly one Master (create and update)."""
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("two", {"Master": replica(2)}))
    await make(t, grouped(t, "pytorchjobs"), pytorchjob("one", {"Master": replica(1)}))
    await t.patch(grouped(t, "pytorchjobs", "one"), {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 3}}}})


@case("crd-cel-unknown-replica-type")
async def _(t: Tier) -> None:
    """The CEL rule on replica types, and the TFJob Chief-or-Master rule."""
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("x", {"Master": replica(1), "Launcher": replica(1)}))
    await t.post(grouped(t, "tfjobs"), tfjob("y", {"Chief": replica(1), "Master": replica(1)}))


@case("crd-cel-int-or-string")
async def _(t: Tier) -> None:
    """nprocPerNode (int-or-string with a CEL rule): valid and invalid values of both types."""
    for value in (2, "auto", "gpu", 0, "lots", "04"):
        await t.post(
            grouped(t, "pytorchjobs", query="dryRun=All"),
            pytorchjob("n", nprocPerNode=value),
            keep=lambda b: b["spec"]["nprocPerNode"] if b.get("kind") != "Status" else b,
        )


@case("crd-several-errors")
async def _(t: Tier) -> None:
    """A schema error together with a CEL rule: the rules are not checked, the server says so."""
    # one schema error: the real server reports several properties' errors in Go's (random) map order
    await t.post(grouped(t, "pytorchjobs"), pytorchjob("e", {"Master": dict(replica(2), restartPolicy="Bad")}))


@case("crd-status-subresource")
async def _(t: Tier) -> None:
    """PUT /status changes only status (generation kept); PUT on the object ignores status (generation
    moves only with spec)."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("s"))
    status = {
        "conditions": [{"type": "Created", "status": "True", "reason": "JobCreated", "message": "created"}],
        "replicaStatuses": {"Master": {"active": 1}},
    }
    updated = await t.put(
        grouped(t, "pytorchjobs", "s", "status"),
        dict(job, status=status, spec=dict(job["spec"], backoffLimit=9)),
        keep=lambda b: (b.get("status"), b["spec"].get("backoffLimit"), b["metadata"]["generation"]),
    )
    body = dict(updated.body, status={"conditions": []})
    body["spec"] = dict(body["spec"], backoffLimit=2)
    await t.put(
        grouped(t, "pytorchjobs", "s"),
        body,
        keep=lambda b: (b.get("status"), b["spec"].get("backoffLimit"), b["metadata"]["generation"]),
    )
    await t.patch(
        grouped(t, "pytorchjobs", "s"), {"metadata": {"labels": {"a": "b"}}}, keep=lambda b: b["metadata"]["generation"]
    )


@case("crd-update-requires-resource-version")
async def _(t: Tier) -> None:
    """PUT of a custom resource without metadata.resourceVersion: 422 (unlike ConfigMaps)."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("r"))
    job["metadata"] = {k: v for k, v in job["metadata"].items() if k != "resourceVersion"}
    await t.put(grouped(t, "pytorchjobs", "r"), job)


@case("crd-kind-mismatch")
async def _(t: Tier) -> None:
    """A TFJob body posted to pytorchjobs, and a wrong apiVersion: 400 with the real messages."""
    await t.post(grouped(t, "pytorchjobs"), tfjob("t"))
    body = pytorchjob("v")
    body["apiVersion"] = f"{GROUP}/v9"
    await t.post(grouped(t, "pytorchjobs"), body)


@case("crd-list-and-table")
async def _(t: Tier) -> None:
    """List of PyTorchJobs, the Table with the printer columns, kubectl get with them."""
    job = await make(t, grouped(t, "pytorchjobs"), pytorchjob("tab"))
    status = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}
    await t.quiet("PUT", grouped(t, "pytorchjobs", "tab", "status"), dict(job, status=status))
    await t.get(
        grouped(t, "pytorchjobs"),
        keep=lambda b: (b["kind"], b["apiVersion"], [i["metadata"]["name"] for i in b["items"]]),
    )
    await t.get(
        grouped(t, "pytorchjobs"),
        headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
        keep=lambda b: ({c["name"]: c["type"] for c in b["columnDefinitions"]}, [r["cells"][:2] for r in b["rows"]]),
    )
    await t.kubectl("get", "pytorchjobs.training.kubedl.io")
    await t.kubectl("get", "pytorchjob.training.kubedl.io", "tab", "-o", "wide")


@case("crd-kubectl-describe")
async def _(t: Tier) -> None:
    """kubectl describe of a PyTorchJob."""
    await make(t, grouped(t, "pytorchjobs"), pytorchjob("d"))
    await t.kubectl("describe", "pytorchjob.training.kubedl.io", "d")


@case("crd-missing-and-not-found")
async def _(t: Tier) -> None:
    """404s of custom resources: a missing object, a missing subresource, an unknown plural in our group."""
    await t.get(grouped(t, "pytorchjobs", "nope"))
    await t.get(grouped(t, "pytorchjobs", "nope", "status"))
    await t.get(grouped(t, "pytorchjobs", "nope", "scale"))
    await t.get(grouped(t, "nosuchplural"))


def _crd(
    t: Tier, group: str, *, scope: str = "Namespaced", rules: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    spec_schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "size": {"type": "integer", "minimum": 1, "default": 1},
            "color": {"type": "string", "enum": ["red", "green"]},
            "tags": {
                "type": "array",
                "maxItems": 10,
                "items": {"type": "string", "maxLength": 10},
                "x-kubernetes-list-type": "set",
            },
        },
    }
    if rules:
        spec_schema["x-kubernetes-validations"] = rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": spec_schema,
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                }
            ],
        },
    }


async def _install(t: Tier, crd: dict[str, Any], *, record: bool = True) -> None:
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    t.cluster_objects.append(f"{path}/{crd['metadata']['name']}")
    if record:
        await t.post(path, crd, keep=lambda b: b.get("spec") if b.get("kind") != "Status" else b)
    else:
        await make(t, path, crd)
    await t.poll(
        f"{path}/{crd['metadata']['name']}",
        lambda r: any(
            c["type"] == "Established" and c["status"] == "True" for c in r.body["status"].get("conditions") or []
        ),
        keep=lambda b: sorted((c["type"], c["status"], c.get("reason")) for c in b["status"]["conditions"]),
    )
    group = crd["spec"]["group"]
    await t.poll(f"/apis/{group}/v1", lambda r: r.status == 200, keep=False)


@case("crd-lifecycle", timeout=120)
async def _(t: Tier) -> None:
    """A CRD created, established, served (defaults, printer column), deleted with its objects."""
    group = t.unique_group()
    await _install(t, _crd(t, group))
    widgets = f"/apis/{group}/v1/namespaces/{t.ns}/widgets"
    await t.post(
        widgets, {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"color": "red"}}
    )
    # one bad field each: the real server reports several properties' errors in Go's (random) map order
    for spec in ({"size": 0}, {"color": "blue"}):
        await t.post(
            widgets, {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": spec}
        )
    await t.kubectl("get", f"widgets.{group}")
    await t.delete(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}",
        keep=lambda b: (
            b.get("kind"),
            b.get("status", {}).get("conditions") and sorted(c["type"] for c in b["status"]["conditions"]),
        ),
    )
    await t.poll(widgets, lambda r: r.status == 404, keep=False, within=60)


@case("crd-cel-features", timeout=120)
async def _(t: Tier) -> None:
    """CEL rule features: message, messageExpression, fieldPath, reason, a transition rule."""
    group = t.unique_group()
    rules = [
        {
            "rule": "self.size <= 10",
            "message": "size at most 10",
            "fieldPath": ".size",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "!has(self.tags) || size(self.tags) < 3",
            # bounded (tags have maxLength): the real server refuses rules it estimates too costly, and
            # string(int) in a messageExpression is one (docs/local-cluster.md, CEL)
            "messageExpression": "'too many tags, starting with ' + self.tags[0]",
        },
        {"rule": "!has(oldSelf.color) || self.color == oldSelf.color", "message": "color is immutable"},
    ]
    await _install(t, _crd(t, group, rules=rules), record=False)
    widgets = f"/apis/{group}/v1/namespaces/{t.ns}/widgets"
    body = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 11, "tags": ["a", "b", "c"]},
    }
    await t.post(widgets, body)
    body["spec"] = {"size": 2, "color": "red"}
    await t.post(widgets, body, keep=lambda b: b.get("spec"))
    await t.patch(f"{widgets}/w", {"spec": {"color": "green"}})


@case("crd-validation")
async def _(t: Tier) -> None:
    """CRDs the server refuses: name not plural.group, no storage version, a non-structural schema."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    group = "invalid.example.com"
    crd = _crd(t, group)
    crd["metadata"]["name"] = "wrong.example.com"
    await t.post(path + "?dryRun=All", crd)
    crd = _crd(t, group)
    crd["spec"]["versions"][0]["storage"] = False
    await t.post(path + "?dryRun=All", crd)
    crd = _crd(t, group)
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = {"minimum": 1}
    await t.post(path + "?dryRun=All", crd)


@case("crd-our-definitions")
async def _(t: Tier) -> None:
    """Our installed CRDs as the server stores them (defaults of the CRD itself), status conditions aside."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.training.kubedl.io"
    await t.get(
        path,
        keep=lambda b: {
            "spec": b["spec"],
            "acceptedNames": b["status"]["acceptedNames"],
            "storedVersions": b["status"]["storedVersions"],
        },
    )
