"""Raw HTTP on built-in kinds: create, update, patch, status, defaulting, quantities, decoding, validation."""

from __future__ import annotations

from typing import Any

from tests.differential.cases.common import IMAGE, configmap, core, make, meta, pod, service
from tests.differential.harness import Tier, case


@case("http-create-configmap")
async def _(t: Tier) -> None:
    """POST a ConfigMap: 201 and the stored object; GET returns the same."""
    await t.post(core(t, "configmaps"), configmap("c", {"a": "1"}, labels={"x": "y"}, annotations={"n": "v"}))
    await t.get(core(t, "configmaps", "c"))


@case("http-create-generate-name")
async def _(t: Tier) -> None:
    """generateName: a name made from the prefix and five random characters."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}
    reply = await t.post(core(t, "configmaps"), body)
    await t.get(core(t, "configmaps", reply.body["metadata"]["name"]))
    await t.post(core(t, "configmaps"), {"metadata": {}})


@case("http-create-without-kind")
async def _(t: Tier) -> None:
    """A body without apiVersion/kind is taken for the URL's kind; YAML bodies work too."""
    await t.post(core(t, "configmaps"), {"metadata": {"name": "bare"}, "data": {"a": "1"}})
    await t.http(
        "POST", core(t, "configmaps"), raw=b"metadata:\n  name: yaml\ndata:\n  k: v\n", content_type="application/yaml"
    )
    await t.get(core(t, "configmaps", "yaml"), keep=lambda b: b["data"])


@case("http-create-invalid-names")
async def _(t: Tier) -> None:
    """Names the server refuses: 422 with the field and the rule."""
    for name in ("UPPER", "a_b", "x" * 254, "-lead", "dot."):
        await t.post(core(t, "configmaps"), configmap(name))
    await t.post(core(t, "services"), service("1abc"))
    await t.post(core(t, "services"), service("a.b"))


@case("http-create-namespace-mismatch")
async def _(t: Tier) -> None:
    """metadata.namespace naming another namespace than the URL: 400."""
    await t.post(core(t, "configmaps"), configmap("c", namespace="elsewhere"))
    await t.post("/api/v1/namespaces/does-not-exist/configmaps", configmap("c"))


@case("http-create-with-resource-version")
async def _(t: Tier) -> None:
    """A create that sets metadata.resourceVersion: the storage layer's 500."""
    await t.post(core(t, "configmaps"), configmap("c", resourceVersion="5"))
    await t.post(core(t, "configmaps", query="dryRun=All"), configmap("c", resourceVersion="5"))


@case("http-create-dry-run")
async def _(t: Tier) -> None:
    """dryRun=All: the answer of a create, nothing stored; an invalid dryRun value."""
    await t.post(core(t, "configmaps", query="dryRun=All"), configmap("dry", {"a": "1"}))
    await t.get(core(t, "configmaps", "dry"))
    await t.post(core(t, "configmaps", query="dryRun=Yes"), configmap("dry2"))


@case("http-update-optimistic-concurrency")
async def _(t: Tier) -> None:
    """PUT with the current resourceVersion, with a stale one (409), without one (allowed for ConfigMaps)."""
    created = await make(t, core(t, "configmaps"), configmap("c", {"a": "1"}))
    body = dict(created, data={"a": "2"})
    first = await t.put(core(t, "configmaps", "c"), body)
    await t.put(core(t, "configmaps", "c"), dict(created, data={"a": "3"}))
    unconditional = dict(first.body, data={"a": "4"})
    unconditional["metadata"] = {k: v for k, v in first.body["metadata"].items() if k != "resourceVersion"}
    await t.put(core(t, "configmaps", "c"), unconditional)


@case("http-update-noop-keeps-version")
async def _(t: Tier) -> None:
    """A PUT that changes nothing keeps the resourceVersion; a real change moves it."""
    created = await make(t, core(t, "configmaps"), configmap("c", {"a": "1"}))
    t.note("created", {"resourceVersion": created["metadata"]["resourceVersion"]})
    await t.put(core(t, "configmaps", "c"), created, keep=meta("resourceVersion"))
    await t.put(core(t, "configmaps", "c"), dict(created, data={"a": "2"}), keep=meta("resourceVersion"))


@case("http-update-missing")
async def _(t: Tier) -> None:
    """PUT of a missing ConfigMap: 404 (no create on update); a missing Lease is created."""
    await t.put(core(t, "configmaps", "ghost"), configmap("ghost"))
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "ghost"}, "spec": {}}
    await t.put(f"/apis/coordination.k8s.io/v1/namespaces/{t.ns}/leases/ghost", lease)


@case("http-update-name-mismatch")
async def _(t: Tier) -> None:
    """PUT whose body names another object than the URL: 400."""
    created = await make(t, core(t, "configmaps"), configmap("c"))
    other = dict(created, metadata=dict(created["metadata"], name="d"))
    await t.put(core(t, "configmaps", "c"), other)


@case("http-configmap-immutable")
async def _(t: Tier) -> None:
    """An immutable ConfigMap: data may not change, immutable may not be unset; labels may change."""
    created = await make(t, core(t, "configmaps"), dict(configmap("frozen", {"a": "1"}), immutable=True))
    await t.put(core(t, "configmaps", "frozen"), dict(created, data={"a": "2"}))
    await t.patch(core(t, "configmaps", "frozen"), {"immutable": False})
    await t.patch(core(t, "configmaps", "frozen"), {"metadata": {"labels": {"ok": "yes"}}})


@case("http-secret-immutable-and-stringdata")
async def _(t: Tier) -> None:
    """A Secret's stringData is folded into data; an immutable Secret keeps its data."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "stringData": {"k": "v"},
        "immutable": True,
    }
    await t.post(core(t, "secrets"), body)
    await t.patch(core(t, "secrets", "s"), {"stringData": {"k": "w"}})


@case("http-patch-merge-configmap")
async def _(t: Tier) -> None:
    """merge-patch: set, null removes, nested labels merged."""
    await make(t, core(t, "configmaps"), configmap("m", {"a": "1", "b": "2"}, labels={"x": "1"}))
    await t.patch(core(t, "configmaps", "m"), {"data": {"a": None, "c": "3"}, "metadata": {"labels": {"y": "2"}}})


@case("http-patch-json-errors")
async def _(t: Tier) -> None:
    """json-patch failures: a failing test op, removing a missing path, a bad op, a non-array body."""
    await make(t, core(t, "configmaps"), configmap("j", {"a": "1"}))
    await t.patch(core(t, "configmaps", "j"), [{"op": "test", "path": "/data/a", "value": "2"}], "json")
    await t.patch(core(t, "configmaps", "j"), [{"op": "remove", "path": "/data/b"}], "json")
    await t.patch(core(t, "configmaps", "j"), [{"op": "replace", "path": "/data/b", "value": "x"}], "json")
    await t.patch(core(t, "configmaps", "j"), [{"op": "explode", "path": "/data/a"}], "json")
    await t.patch(core(t, "configmaps", "j"), {"op": "add"}, "json")
    await t.patch(core(t, "configmaps", "j"), [{"op": "add", "path": "/data/n", "value": 1}], "json")


@case("http-patch-json-array-ops")
async def _(t: Tier) -> None:
    """json-patch on a list: insert at an index, append with '-', remove by index."""
    await make(t, core(t, "pods"), pod("p", containers=[{"name": "a", "image": IMAGE, "args": ["1", "2"]}]))
    path = "/spec/containers/0/args"
    await t.patch(
        core(t, "pods", "p"),
        [
            {"op": "add", "path": f"{path}/0", "value": "0"},
            {"op": "add", "path": f"{path}/-", "value": "3"},
            {"op": "remove", "path": f"{path}/1"},
        ],
        "json",
        keep=lambda b: b["spec"]["containers"][0].get("args"),
    )


@case("http-patch-strategic-lists")
async def _(t: Tier) -> None:
    """strategic-merge-patch on a pod: containers merged by name, env by name, $patch: delete."""
    await make(
        t,
        core(t, "pods"),
        pod(
            "p",
            containers=[
                {"name": "a", "image": IMAGE, "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": IMAGE},
            ],
        ),
    )
    await t.patch(
        core(t, "pods", "p"),
        {"spec": {"containers": [{"name": "a", "image": "busybox:1.37"}]}, "metadata": {"labels": {"l": "1"}}},
        "strategic",
        keep=lambda b: [(c["name"], c["image"], c.get("env")) for c in b["spec"]["containers"]],
    )
    await t.patch(
        core(t, "pods", "p"),
        {"metadata": {"labels": {"l": None}, "annotations": {"$patch": "replace", "only": "this"}}},
        "strategic",
        keep=lambda b: (b["metadata"].get("labels"), b["metadata"].get("annotations")),
    )


@case("http-patch-strategic-service-ports")
async def _(t: Tier) -> None:
    """strategic-merge-patch of Service ports (merged by port) and selector."""
    await make(
        t,
        core(t, "services"),
        service("s", [{"name": "a", "port": 80}, {"name": "b", "port": 81}], selector={"app": "x"}),
    )
    await t.patch(
        core(t, "services", "s"),
        {
            "spec": {
                "ports": [{"name": "b", "port": 81, "targetPort": 9091}, {"name": "c", "port": 82}],
                "selector": {"tier": "t"},
            }
        },
        "strategic",
        keep=lambda b: (b["spec"]["ports"], b["spec"]["selector"]),
    )
    await t.patch(
        core(t, "services", "s"),
        {"spec": {"$setElementOrder/ports": [{"port": 82}, {"port": 80}], "ports": [{"$patch": "delete", "port": 81}]}},
        "strategic",
        keep=lambda b: [p["port"] for p in b["spec"]["ports"]],
    )


@case("http-patch-unsupported-types")
async def _(t: Tier) -> None:
    """PATCH with an unknown content type; with an empty body; with a body that is not JSON."""
    await make(t, core(t, "configmaps"), configmap("c"))
    await t.http("PATCH", core(t, "configmaps", "c"), {"data": {}}, content_type="application/json")
    await t.http("PATCH", core(t, "configmaps", "c"), raw=b"", content_type="application/merge-patch+json")
    await t.http("PATCH", core(t, "configmaps", "c"), raw=b"{nope", content_type="application/merge-patch+json")


@case("http-patch-preconditions")
async def _(t: Tier) -> None:
    """A patch carrying a stale resourceVersion or another uid: 409."""
    await make(t, core(t, "configmaps"), configmap("c"))
    await t.patch(core(t, "configmaps", "c"), {"metadata": {"resourceVersion": "1"}, "data": {"a": "1"}})
    await t.patch(core(t, "configmaps", "c"), {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"}})


@case("http-patch-missing")
async def _(t: Tier) -> None:
    """PATCH of a missing object: 404 for each patch type."""
    for kind in ("merge", "json", "strategic"):
        body: Any = [{"op": "add", "path": "/data", "value": {}}] if kind == "json" else {"data": {}}
        await t.patch(core(t, "configmaps", "ghost"), body, kind)


@case("http-pod-defaults")
async def _(t: Tier) -> None:
    """The defaults a pod gets on create (dry run: no node involved)."""
    await t.post(core(t, "pods", query="dryRun=All"), pod("d"))


@case("http-pod-defaults-rich")
async def _(t: Tier) -> None:
    """Defaults of a richer pod: init containers, ports, probes, volumes, env from fields, host network."""
    body = pod(
        "rich",
        containers=[
            {
                "name": "main",
                "image": "busybox",
                "ports": [{"containerPort": 8080, "name": "http"}],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }
        ],
        initContainers=[{"name": "init", "image": IMAGE, "command": ["true"]}],
        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}}],
        hostNetwork=True,
    )
    await t.post(core(t, "pods", query="dryRun=All"), body)


@case("http-pod-quantities")
async def _(t: Tier) -> None:
    """Requests and limits come back in canonical form; QoS class from them."""
    resources = {
        "requests": {"cpu": "0.5", "memory": "1024Mi", "ephemeral-storage": "1e3"},
        "limits": {"cpu": "1000m", "memory": "1Gi", "nvidia.com/gpu": "1"},
    }
    reply = await t.post(
        core(t, "pods", query="dryRun=All"),
        pod("q", containers=[{"name": "c", "image": IMAGE, "resources": resources}]),
        keep=lambda b: (b["spec"]["containers"][0]["resources"], b.get("status", {}).get("qosClass")),
    )
    assert reply.status == 201
    guaranteed = {"requests": {"cpu": "2", "memory": "1G"}, "limits": {"cpu": "2", "memory": "1G"}}
    await t.post(
        core(t, "pods", query="dryRun=All"),
        pod("g", containers=[{"name": "c", "image": IMAGE, "resources": guaranteed}]),
        keep=lambda b: (b["spec"]["containers"][0]["resources"], b.get("status", {}).get("qosClass")),
    )


@case("http-pod-quantities-invalid")
async def _(t: Tier) -> None:
    """Quantities the server refuses: malformed, negative, requests above limits, extended fractional."""
    for resources in (
        {"requests": {"cpu": "1.2.3"}},
        {"requests": {"memory": "-1Gi"}},
        {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
        {"limits": {"nvidia.com/gpu": "0.5"}},
        {"requests": {"nvidia.com/gpu": "1"}},
    ):
        await t.post(
            core(t, "pods", query="dryRun=All"),
            pod("bad", containers=[{"name": "c", "image": IMAGE, "resources": resources}]),
        )


@case("http-pod-validation")
async def _(t: Tier) -> None:
    """Pod validation: no containers, duplicate names, bad port, restartPolicy, hostPort with hostNetwork."""
    bodies = [
        pod("a", containers=[]),
        pod("b", containers=[{"name": "x", "image": IMAGE}, {"name": "x", "image": IMAGE}]),
        pod("c", containers=[{"name": "x", "image": IMAGE, "ports": [{"containerPort": 70000}]}]),
        pod("d", restartPolicy="Sometimes"),
        pod(
            "e",
            hostNetwork=True,
            containers=[{"name": "x", "image": IMAGE, "ports": [{"containerPort": 80, "hostPort": 81}]}],
        ),
        pod("f", containers=[{"name": "Bad_Name", "image": IMAGE}]),
    ]
    for body in bodies:
        await t.post(core(t, "pods", query="dryRun=All"), body)


@case("http-pod-update-immutable")
async def _(t: Tier) -> None:
    """Pod spec updates: the image may change, other fields may not (422 with the spec diff message)."""
    created = await make(t, core(t, "pods"), pod("p", nodeSelector={"no-such": "node"}))
    await t.patch(
        core(t, "pods", "p"),
        {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}},
        "strategic",
        keep=lambda b: b["spec"]["containers"][0]["image"] if "spec" in b else b,
    )
    reply = await t.patch(
        core(t, "pods", "p"),
        {"spec": {"restartPolicy": "Never"}},
        "strategic",
        keep=lambda b: {k: b.get(k) for k in ("code", "reason")},
    )
    assert created and reply


@case("http-pod-status-subresource")
async def _(t: Tier) -> None:
    """Pod status through /status only; the main endpoint ignores status; status dropped on create."""
    body = pod("s", nodeSelector={"no-such": "node"})
    body["status"] = {"phase": "Running"}
    await t.post(core(t, "pods"), body, keep=lambda b: b.get("status", {}).get("phase"))
    await t.patch(core(t, "pods", "s"), {"status": {"phase": "Succeeded"}}, keep=lambda b: b["status"].get("phase"))
    await t.patch(
        core(t, "pods", "s", "status"),
        {"status": {"message": "hello"}},
        keep=lambda b: (b["status"].get("message"), b["metadata"].get("generation")),
    )
    await t.patch(
        core(t, "pods", "s", "status"),
        {"metadata": {"labels": {"ignored": "yes"}}},
        keep=lambda b: b["metadata"].get("labels"),
    )


@case("http-service-defaults")
async def _(t: Tier) -> None:
    """Service defaults: type, sessionAffinity, targetPort, protocol, ipFamilies, internalTrafficPolicy."""
    ports = [{"port": 80, "name": "web"}, {"port": 53, "protocol": "UDP", "name": "dns"}]
    await t.post(core(t, "services"), service("s", ports, selector={"app": "a"}))


@case("http-service-types")
async def _(t: Tier) -> None:
    """LoadBalancer and NodePort Services: node ports allocated (their values vary), traffic policies."""

    def shape(b: Any) -> Any:
        if b.get("kind") == "Status":
            return b
        spec = dict(b["spec"])
        spec["ports"] = [dict(p, nodePort=30000 <= p.get("nodePort", 0) <= 32767) for p in spec["ports"]]
        return {"spec": spec, "status": b.get("status")}

    await t.post(core(t, "services"), service("lb", type="LoadBalancer"), keep=shape)
    await t.post(core(t, "services"), service("np", type="NodePort", externalTrafficPolicy="Local"), keep=shape)


@case("http-service-validation")
async def _(t: Tier) -> None:
    """Service validation: port out of range, duplicate ports, unnamed ports among several, bad protocol."""
    for body in (
        service("a", [{"port": 0}]),
        service("b", [{"port": 80, "name": "x"}, {"port": 80, "name": "y"}]),
        service("c", [{"port": 80}, {"port": 81}]),
        service("d", [{"port": 80, "protocol": "HTTP"}]),
        service("e", [{"port": 80, "targetPort": "not_valid"}]),
        service("f", [{"port": 80}], type="Magic"),
        service("g", [{"port": 80, "nodePort": 80}], type="NodePort"),
    ):
        await t.post(core(t, "services", query="dryRun=All"), body)


@case("http-service-cluster-ip")
async def _(t: Tier) -> None:
    """A requested ClusterIP outside the range; a change of clusterIP on update; an update that omits it."""
    await t.post(core(t, "services"), service("out", clusterIP="10.255.255.1"))
    created = await make(t, core(t, "services"), service("s"))
    spec = dict(created["spec"])
    spec.pop("clusterIP")
    spec.pop("clusterIPs")
    await t.put(core(t, "services", "s"), dict(created, spec=spec), keep=lambda b: b["spec"].get("clusterIP"))
    await t.patch(core(t, "services", "s"), {"spec": {"clusterIP": "None"}})


@case("http-namespace-lifecycle")
async def _(t: Tier) -> None:
    """A namespace being deleted: Terminating, creates in it refused (403), then gone."""
    name = t.unique("ns")
    t.extra_namespaces.append(name)
    await t.post(
        "/api/v1/namespaces",
        {"metadata": {"name": name}},
        keep=lambda b: (b["spec"], b["status"], b["metadata"].get("labels")),
    )
    fin = configmap("held", finalizers=["example.com/hold"])
    await t.quiet("POST", f"/api/v1/namespaces/{name}/configmaps", fin)
    await t.delete(f"/api/v1/namespaces/{name}", keep=lambda b: (b["spec"], b["status"].get("phase")))
    await t.post(f"/api/v1/namespaces/{name}/configmaps", configmap("late"))
    await t.poll(
        f"/api/v1/namespaces/{name}",
        lambda r: any(
            c.get("type") == "NamespaceFinalizersRemaining" and c.get("status") == "True"
            for c in (r.body.get("status") or {}).get("conditions") or []
        ),
        keep=lambda b: sorted((c["type"], c["status"], c.get("reason")) for c in b["status"].get("conditions") or []),
    )
    await t.patch(f"/api/v1/namespaces/{name}/configmaps/held", {"metadata": {"finalizers": None}})
    await t.poll(f"/api/v1/namespaces/{name}", lambda r: r.status == 404, keep=False)


@case("http-system-namespaces")
async def _(t: Tier) -> None:
    """default, kube-system and kube-public may not be deleted."""
    for name in ("default", "kube-system", "kube-public"):
        await t.delete(f"/api/v1/namespaces/{name}")


@case("http-events")
async def _(t: Tier) -> None:
    """The controller's events: create a core/v1 Event about a pod, list them by involvedObject."""
    created = await make(t, core(t, "configmaps"), configmap("subject"))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "subject.1", "namespace": t.ns},
        "involvedObject": {
            "kind": "ConfigMap",
            "name": "subject",
            "namespace": t.ns,
            "uid": created["metadata"]["uid"],
            "apiVersion": "v1",
        },
        "reason": "Tested",
        "message": "something happened",
        "type": "Normal",
        "source": {"component": "kubedl-py"},
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    await t.post(core(t, "events"), event)
    await t.get(core(t, "events", query="fieldSelector=involvedObject.name=subject,reason=Tested"))
    await t.kubectl("get", "events", "--field-selector=reason=Tested")
    await t.post(core(t, "events"), dict(event, type="Strange", metadata={"name": "subject.2"}))


@case("http-lease-leader-election")
async def _(t: Tier) -> None:
    """Leader election on a Lease: create, renew with the resourceVersion, a stale renew loses (409)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{t.ns}/leases"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "kubedl-py"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }
    created = await t.post(path, lease)
    renewed = dict(created.body, spec=dict(created.body["spec"], renewTime="2026-01-01T00:00:10.000000Z"))
    await t.put(f"{path}/kubedl-py", renewed)
    stolen = dict(created.body, spec=dict(created.body["spec"], holderIdentity="b", leaseTransitions=1))
    await t.put(f"{path}/kubedl-py", stolen)
    await t.put(f"{path}/kubedl-py", dict(renewed, spec=dict(renewed["spec"], leaseDurationSeconds=0)))


@case("http-serviceaccount-token")
async def _(t: Tier) -> None:
    """TokenRequest: a token with an expiration; a too short one refused; for a missing account 404."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    await t.post(
        core(t, "serviceaccounts", "default", "token"),
        request,
        keep=lambda b: {k: v for k, v in b.items() if k != "status"} | {"status": sorted(b["status"])},
    )
    await t.post(core(t, "serviceaccounts", "default", "token"), dict(request, spec={"expirationSeconds": 60}))
    await t.post(core(t, "serviceaccounts", "nobody", "token"), request)


@case("http-pod-binding")
async def _(t: Tier) -> None:
    """pods/binding for a pod of another scheduler: bound once, a second binding refused."""
    await make(t, core(t, "pods"), pod("b", schedulerName="my-scheduler"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "b"},
        "target": {"kind": "Node", "name": t.node},
    }
    await t.post(core(t, "pods", "b", "binding"), binding)
    await t.post(core(t, "pods", "b", "binding"), binding)
    await t.get(core(t, "pods", "b"), keep=lambda b: b["spec"].get("nodeName"))


@case("http-pod-eviction", nodes=True)
async def _(t: Tier) -> None:
    """pods/eviction (policy/v1): the pod is deleted gracefully."""
    from tests.differential.cases.common import run_pod

    await run_pod(t, pod("e"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "e"}}
    await t.post(core(t, "pods", "e", "eviction"), eviction)
    await t.poll(core(t, "pods", "e"), lambda r: r.status == 404, keep=False)
    await t.post(core(t, "pods", "e", "eviction"), eviction)


@case("http-yaml-and-protobuf-accept")
async def _(t: Tier) -> None:
    """Content negotiation: Accept YAML, Table, PartialObjectMetadata; an unsupported media type."""
    await make(t, core(t, "configmaps"), configmap("c", {"a": "1"}))
    await t.get(
        core(t, "configmaps", "c"), headers={"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}
    )
    await t.get(
        core(t, "configmaps"),
        headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
        keep=lambda b: {
            "columns": [c["name"] for c in b["columnDefinitions"]],
            "rows": [r["cells"][0] for r in b["rows"]],
        },
    )
    await t.http("POST", core(t, "configmaps"), raw=b"<xml/>", content_type="application/xml")
