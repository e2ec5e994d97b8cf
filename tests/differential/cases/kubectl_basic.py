"""kubectl create/get/describe of the simple kinds: what users type first."""

from __future__ import annotations

from tests.differential.cases.common import configmap, core, make
from tests.differential.harness import Tier, case


@case("kubectl-create-configmap")
async def _(t: Tier) -> None:
    """create configmap from literals, then read it back three ways."""
    await t.kubectl("create", "configmap", "settings", "--from-literal=a=1", "--from-literal=b=two")
    await t.kubectl("get", "configmap", "settings", "-o", "yaml")
    await t.kubectl("get", "configmaps")
    await t.kubectl("get", "configmap", "settings", "-o", "jsonpath={.data}")


@case("kubectl-create-configmap-from-files")
async def _(t: Tier) -> None:
    """create configmap --from-file (a key per file) and --from-env-file."""
    conf = t.file("app.conf", "listen 8080\nworkers 4\n")
    env = t.file("app.env", "# comment\nMODE=fast\nLEVEL=3\n")
    await t.kubectl("create", "configmap", "files", f"--from-file={conf}", f"--from-file=renamed.txt={conf}")
    await t.kubectl("create", "configmap", "envs", f"--from-env-file={env}")
    await t.kubectl("get", "configmap", "files", "envs", "-o", "yaml")


@case("kubectl-create-configmap-duplicate")
async def _(t: Tier) -> None:
    """A second create of the same name: AlreadyExists, exit code 1."""
    await t.kubectl("create", "configmap", "twice", "--from-literal=a=1")
    await t.kubectl("create", "configmap", "twice", "--from-literal=a=2")


@case("kubectl-create-configmap-invalid-key")
async def _(t: Tier) -> None:
    """A key that is not a valid ConfigMap key: kubectl or the server refuses it."""
    await t.kubectl("create", "configmap", "badkey", "--from-literal=a b=1")
    await t.kubectl("create", "configmap", "Bad_Name", "--from-literal=a=1")


@case("kubectl-create-secret-generic")
async def _(t: Tier) -> None:
    """create secret generic: data base64-encoded, type Opaque; describe hides values."""
    await t.kubectl("create", "secret", "generic", "creds", "--from-literal=user=admin", "--from-literal=pass=s3cr3t")
    await t.kubectl("get", "secret", "creds", "-o", "yaml")
    await t.kubectl("describe", "secret", "creds")
    await t.kubectl("get", "secrets")


@case("kubectl-create-secret-docker-registry")
async def _(t: Tier) -> None:
    """create secret docker-registry: type kubernetes.io/dockerconfigjson with .dockerconfigjson."""
    await t.kubectl(
        "create",
        "secret",
        "docker-registry",
        "pull",
        "--docker-server=registry.example.com",
        "--docker-username=u",
        "--docker-password=p",
    )
    await t.kubectl("get", "secret", "pull", "-o", "yaml")


@case("kubectl-create-secret-typed-validation")
async def _(t: Tier) -> None:
    """A typed secret missing its required key: the server's 422."""
    manifest = (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tls-bad\ntype: kubernetes.io/tls\ndata:\n  tls.crt: Zm9v\n"
    )
    await t.kubectl("create", "-f", "-", stdin=manifest)
    manifest = (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: basic\ntype: kubernetes.io/basic-auth\n"
        "stringData:\n  username: u\n"
    )
    await t.kubectl("create", "-f", "-", stdin=manifest)
    await t.kubectl("get", "secret", "basic", "-o", "yaml")


@case("kubectl-create-namespace")
async def _(t: Tier) -> None:
    """create namespace, get it as YAML and as a table."""
    name = t.unique("ns")
    t.extra_namespaces.append(name)
    await t.kubectl("create", "namespace", name)
    await t.kubectl("get", "namespace", name, "-o", "yaml")
    await t.kubectl("get", "namespace", name)
    await t.kubectl("create", "namespace", "Invalid_Name")


@case("kubectl-delete-namespace")
async def _(t: Tier) -> None:
    """delete namespace with content: it goes (with what it holds) and kubectl waits for it."""
    name = t.unique("ns")
    t.extra_namespaces.append(name)
    await t.kubectl("create", "namespace", name)
    await t.kubectl("-n", name, "create", "configmap", "inside", "--from-literal=a=1")
    await t.kubectl("delete", "namespace", name, "--timeout=60s")
    await t.kubectl("get", "namespace", name)


@case("kubectl-create-serviceaccount")
async def _(t: Tier) -> None:
    """create serviceaccount; the default one exists too."""
    await t.kubectl("create", "serviceaccount", "robot")
    await t.kubectl("get", "serviceaccounts")
    await t.kubectl("get", "serviceaccount", "robot", "-o", "yaml")


@case("kubectl-create-token")
async def _(t: Tier) -> None:
    """create token (TokenRequest): a token printed; a too short duration refused."""
    await t.kubectl("create", "serviceaccount", "robot")
    await t.kubectl("create", "token", "robot")
    await t.kubectl("create", "token", "robot", "--duration=1m")
    await t.kubectl("create", "token", "nobody")


@case("kubectl-create-service-clusterip")
async def _(t: Tier) -> None:
    """create service clusterip: ports, defaults, an allocated ClusterIP."""
    await t.kubectl("create", "service", "clusterip", "web", "--tcp=80:8080", "--tcp=443:8443")
    await t.kubectl("get", "service", "web", "-o", "yaml")
    await t.kubectl("get", "services")
    await t.kubectl("describe", "service", "web", out=_before_events)


def _before_events(text: str) -> str:
    """``describe`` up to its Events: kube-apiserver's ClusterIP repair loop can race a Service being created
    and record a ``ClusterIPNotAllocated`` Warning on it ("is not allocated; repairing"), seen once in CI."""
    return text.partition("Events:")[0]


@case("kubectl-create-service-headless")
async def _(t: Tier) -> None:
    """create service clusterip --clusterip=None: a headless Service."""
    await t.kubectl("create", "service", "clusterip", "peers", "--clusterip=None", "--tcp=2222")
    await t.kubectl("get", "service", "peers", "-o", "yaml")
    await t.kubectl("get", "service", "peers")


def _node_ports(text: str) -> str:
    """A NodePort's value is picked at random by the real server: keep only that it is in range."""
    import re

    return re.sub(r"\b3[0-2]\d{3}\b", "<nodeport>", text)


@case("kubectl-create-service-nodeport")
async def _(t: Tier) -> None:
    """create service nodeport: a node port allocated from 30000-32767."""
    await t.kubectl("create", "service", "nodeport", "np", "--tcp=80:8080", out=_node_ports)
    await t.kubectl("get", "service", "np", "-o", "yaml", out=_node_ports)
    await t.kubectl("get", "service", "np", out=lambda s: _node_ports(s).split("\n")[0])


@case("kubectl-create-service-externalname")
async def _(t: Tier) -> None:
    """create service externalname: no ClusterIP, type ExternalName."""
    await t.kubectl("create", "service", "externalname", "ext", "--external-name=db.example.com")
    await t.kubectl("get", "service", "ext", "-o", "yaml")
    await t.kubectl("get", "service", "ext")


@case("kubectl-get-missing")
async def _(t: Tier) -> None:
    """get of a missing object: NotFound, exit 1; --ignore-not-found: nothing, exit 0."""
    await t.kubectl("get", "configmap", "nope")
    await t.kubectl("get", "configmap", "nope", "--ignore-not-found")
    await t.kubectl("get", "pods")
    await t.kubectl("get", "nosuchkind")


@case("kubectl-get-output-formats")
async def _(t: Tier) -> None:
    """get -o name / wide / json / custom-columns / --show-labels / -L / --sort-by."""
    for i, tier in enumerate(["gold", "silver", "bronze"]):
        await make(t, core(t, "configmaps"), configmap(f"cm-{i}", {"k": str(i)}, labels={"tier": tier, "idx": str(i)}))
    await t.kubectl("get", "configmaps", "-l", "tier", "-o", "name")
    await t.kubectl("get", "configmaps", "-l", "tier", "-o", "wide")
    await t.kubectl("get", "configmaps", "-l", "tier", "--show-labels")
    await t.kubectl("get", "configmaps", "-l", "tier", "-L", "tier,idx")
    await t.kubectl("get", "configmaps", "-l", "tier", "--sort-by=.metadata.labels.tier")
    await t.kubectl("get", "configmaps", "-l", "tier", "-o", "custom-columns=NAME:.metadata.name,K:.data.k")
    await t.kubectl("get", "configmaps", "-l", "tier", "-o", "json")
    await t.kubectl("get", "configmap", "cm-1", "-o", "go-template={{.metadata.name}}:{{.data.k}}")


@case("kubectl-get-selectors")
async def _(t: Tier) -> None:
    """get with label selectors (set-based, negation) and field selectors."""
    for i, tier in enumerate(["gold", "silver", "bronze"]):
        await make(t, core(t, "configmaps"), configmap(f"cm-{i}", labels={"tier": tier}))
    await make(t, core(t, "configmaps"), configmap("plain"))
    await t.kubectl("get", "configmaps", "-l", "tier in (gold,bronze)", "-o", "name")
    await t.kubectl("get", "configmaps", "-l", "tier notin (gold),tier", "-o", "name")
    await t.kubectl("get", "configmaps", "-l", "!tier", "-o", "name")
    await t.kubectl("get", "configmaps", "-l", "tier!=silver", "-o", "name")
    await t.kubectl("get", "configmaps", "--field-selector", "metadata.name=cm-2", "-o", "name")
    await t.kubectl("get", "configmaps", "--field-selector", "metadata.name!=cm-2,metadata.name!=plain", "-o", "name")
    await t.kubectl("get", "configmaps", "--field-selector", "data.k=1")
    await t.kubectl("get", "configmaps", "-l", "tier in (gold")


@case("kubectl-describe-configmap")
async def _(t: Tier) -> None:
    """describe of a configmap and of a missing one."""
    await make(t, core(t, "configmaps"), configmap("described", {"a": "1", "long": "x" * 40}, labels={"l": "v"}))
    await t.kubectl("describe", "configmap", "described")
    await t.kubectl("describe", "configmap", "absent")


@case("kubectl-describe-namespace")
async def _(t: Tier) -> None:
    """describe namespace: labels, status, quota and limit range sections."""
    await t.kubectl("describe", "namespace", t.ns)


@case("kubectl-get-all")
async def _(t: Tier) -> None:
    """get all: the 'all' category of the namespace."""
    await t.kubectl("create", "service", "clusterip", "web", "--tcp=80")
    await t.kubectl("get", "all")


@case("kubectl-get-raw")
async def _(t: Tier) -> None:
    """get --raw of an object path and of a missing path."""
    await make(t, core(t, "configmaps"), configmap("raw", {"a": "1"}))
    await t.kubectl("get", "--raw", f"/api/v1/namespaces/{t.ns}/configmaps/raw", out=_json_text)
    await t.kubectl("get", "--raw", f"/api/v1/namespaces/{t.ns}/configmaps/none")
    await t.kubectl("get", "--raw", "/healthz")


def _json_text(text: str) -> object:
    import json

    return json.loads(text)


@case("kubectl-cluster-info")
async def _(t: Tier) -> None:
    """cluster-info: where the control plane runs, and no add-on Services."""
    await t.kubectl("cluster-info")


@case("kubectl-version")
async def _(t: Tier) -> None:
    """version: the server's release (build details aside)."""

    def release(text: str) -> object:
        import json

        server = json.loads(text)["serverVersion"]
        return {k: server[k] for k in ("major", "minor", "gitVersion", "gitTreeState", "platform")}

    await t.kubectl("version", "-o", "json", out=release)


@case("kubectl-api-resources-core")
async def _(t: Tier) -> None:
    """api-resources of the core group and of our group."""
    await t.kubectl("api-resources", "--api-group=", "-o", "name")
    await t.kubectl("api-resources", "--api-group=training.kubedl.io")


@case("kubectl-api-versions")
async def _(t: Tier) -> None:
    """api-versions: every served group version."""
    await t.kubectl("api-versions")
