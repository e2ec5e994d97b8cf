"""Our kubeconfig reader (kubedl_py/kube/kubeconfig.py) against a real TLS server: what kubectl reads, read the same.

The server is aiohttp over TLS that may demand a client certificate; it answers each request with the
``Authorization`` and ``Impersonate-*`` headers it got and the common name of the client's certificate, so
every test asserts what reached the server, not what the reader holds.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from kubedl_local import pki
from kubedl_py.kube import errors, kubeconfig, transport
from kubedl_py.kube.client import PODS, ClientSettings, KubeClient
from kubedl_py.kube.kubeconfig import KubeconfigError, read_kubeconfig
from kubedl_py.kube.retry import RetrySettings

NO_RETRY = ClientSettings(retry=RetrySettings(attempts=1))


@dataclass
class Server:
    url: str
    ca: pki.CertificateAuthority
    seen: list[dict[str, Any]]

    def client_pair(self, name: str) -> pki.KeyPair:
        return self.ca.issue(name, client=True)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    ca = pki.CertificateAuthority("test-ca")
    serving = ca.issue("api", sans=["127.0.0.1", "localhost"], server=True)
    context = pki.server_context(serving, client_ca_pem=ca.cert_pem)
    context.verify_mode = ssl.CERT_OPTIONAL  # a token user presents no certificate
    seen: list[dict[str, Any]] = []

    async def answer(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        common_name = next((v for rdn in (peer or {}).get("subject", ()) for k, v in rdn if k == "commonName"), None)
        got = {
            "authorization": request.headers.get("Authorization"),
            "impersonate": [[k, v] for k, v in request.headers.items() if k.startswith("Impersonate-")],
            "cert": common_name,
        }
        seen.append(got)
        if got["authorization"] == "Bearer stale" or (got["authorization"] is None and common_name is None):
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        return web.json_response({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}, "seen": got})

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield Server(f"https://127.0.0.1:{port}", ca, seen)
    finally:
        await runner.cleanup()


def write_config(path: Path, *, cluster: dict[str, Any], user: dict[str, Any], namespace: str | None = None) -> Path:
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": context}],
                "current-context": "x",
            }
        )
    )
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def seen_by(server: Server, config: Path, *, context: str | None = None) -> dict[str, Any]:
    async with KubeClient(kubeconfig=config, context=context, settings=NO_RETRY) as kube:
        pod = await kube.get(PODS, "p", namespace="default")
    seen: dict[str, Any] = pod["seen"]
    return seen


async def test_client_certificate_data_and_the_ca_are_used_and_nothing_is_left_on_disk(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    pair = server.client_pair("alice")
    config = write_config(
        tmp_path / "config",
        cluster={"server": server.url, "certificate-authority-data": b64(server.ca.cert_pem)},
        user={"client-certificate-data": b64(pair.cert_pem), "client-key-data": b64(pair.key_pem)},
    )
    assert (await seen_by(server, config))["cert"] == "alice"
    assert list((tmp_path / "tmp").iterdir()) == []  # the key passed through a file removed at once


async def test_file_paths_are_relative_to_the_kubeconfig_that_names_them(server: Server, tmp_path: Path) -> None:
    pair = server.client_pair("bob")
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(server.ca.cert_pem)
    (tmp_path / "certs" / "bob.crt").write_bytes(pair.cert_pem)
    (tmp_path / "certs" / "bob.key").write_bytes(pair.key_pem)
    config = write_config(
        tmp_path / "config",
        cluster={"server": server.url, "certificate-authority": "certs/ca.crt"},
        user={"client-certificate": "certs/bob.crt", "client-key": "certs/bob.key"},
    )
    assert (await seen_by(server, config))["cert"] == "bob"


async def test_a_server_certificate_from_another_ca_is_refused_unless_verification_is_skipped(
    server: Server, tmp_path: Path
) -> None:
    other = pki.CertificateAuthority("other")
    refused = write_config(
        tmp_path / "a",
        cluster={"server": server.url, "certificate-authority-data": b64(other.cert_pem)},
        user={"token": "t"},
    )
    with pytest.raises(errors.TransportError, match="certificate verify failed"):
        await seen_by(server, refused)
    skipped = write_config(
        tmp_path / "b", cluster={"server": server.url, "insecure-skip-tls-verify": True}, user={"token": "t"}
    )
    assert (await seen_by(server, skipped))["authorization"] == "Bearer t"


async def test_tls_server_name_is_checked_instead_of_the_address(server: Server, tmp_path: Path) -> None:
    ca = b64(server.ca.cert_pem)
    wrong = write_config(
        tmp_path / "a",
        cluster={"server": server.url, "certificate-authority-data": ca, "tls-server-name": "elsewhere"},
        user={"token": "t"},
    )
    with pytest.raises(errors.TransportError, match="elsewhere"):
        await seen_by(server, wrong)
    right = write_config(
        tmp_path / "b",
        cluster={"server": server.url, "certificate-authority-data": ca, "tls-server-name": "localhost"},
        user={"token": "t"},
    )
    assert (await seen_by(server, right))["authorization"] == "Bearer t"


async def test_a_token_file_wins_over_the_token_and_is_read_again(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text("from-file\n")
    config = write_config(
        tmp_path / "config",
        cluster={"server": server.url, "insecure-skip-tls-verify": True},
        user={"token": "inline", "tokenFile": str(token)},
    )
    monkeypatch.setattr(kubeconfig, "TOKEN_FILE_PERIOD", 0.0)
    async with KubeClient(kubeconfig=config, settings=NO_RETRY) as kube:
        first = (await kube.get(PODS, "p", namespace="default"))["seen"]["authorization"]
        token.write_text("rotated")  # as the kubelet rotates a projected token
        second = (await kube.get(PODS, "p", namespace="default"))["seen"]["authorization"]
    assert (first, second) == ("Bearer from-file", "Bearer rotated")


async def test_basic_auth_and_impersonation_reach_the_server(server: Server, tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config",
        cluster={"server": server.url, "insecure-skip-tls-verify": True},
        user={
            "username": "admin",
            "password": "secret",
            "as": "jane",
            "as-groups": ["dev", "ops"],
            "as-user-extra": {"scopes": ["view"]},
        },
    )
    seen = await seen_by(server, config)
    assert seen["authorization"] == "Basic " + b64(b"admin:secret")
    # one header line per group, as kubectl sends them: the API server takes each line as one group
    assert seen["impersonate"] == [
        ["Impersonate-User", "jane"],
        ["Impersonate-Group", "dev"],
        ["Impersonate-Group", "ops"],
        ["Impersonate-Extra-scopes", "view"],
    ]


def exec_plugin(tmp_path: Path, *, token: str, expires_in: float | None, cert: pki.KeyPair | None = None) -> Path:
    """A credential plug-in (a Python script) that counts its runs and records the exec info it was given."""
    expiry = None
    if expires_in is not None:
        expiry = (datetime.now(UTC) + timedelta(seconds=expires_in)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {"token": token} if cert is None else {}
    if cert is not None:
        status = {"clientCertificateData": cert.cert_pem.decode(), "clientKeyData": cert.key_pem.decode()}
    if expiry:
        status["expirationTimestamp"] = expiry
    script = tmp_path / "plugin.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, pathlib
            runs = pathlib.Path({str(tmp_path / "runs")!r})
            runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else "1")
            info = os.environ["KUBERNETES_EXEC_INFO"] + "\\n" + os.environ["EXTRA"]
            pathlib.Path({str(tmp_path / "info")!r}).write_text(info)
            print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                               "status": {status!r}}}))
            """
        )
    )
    return script


def exec_user(script: Path, **extra: Any) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "env": [{"name": "EXTRA", "value": "given"}],
            "interactiveMode": "Never",
            **extra,
        }
    }


async def test_an_exec_plugin_token_is_kept_until_it_expires(server: Server, tmp_path: Path) -> None:
    script = exec_plugin(tmp_path, token="exec-token", expires_in=3600)
    config = write_config(
        tmp_path / "config",
        cluster={"server": server.url, "insecure-skip-tls-verify": True},
        user=exec_user(script, provideClusterInfo=True),
    )
    async with KubeClient(kubeconfig=config, settings=NO_RETRY) as kube:
        for _ in range(3):
            got = await kube.get(PODS, "p", namespace="default")
            assert got["seen"]["authorization"] == "Bearer exec-token"
    assert (tmp_path / "runs").read_text() == "1"
    info, extra = (tmp_path / "info").read_text().splitlines()
    assert extra == "given"
    assert json.loads(info)["spec"]["cluster"]["server"] == server.url


async def test_an_expired_exec_credential_is_fetched_again(server: Server, tmp_path: Path) -> None:
    script = exec_plugin(tmp_path, token="short", expires_in=1)  # within the renewal slack: expired at once
    config = write_config(
        tmp_path / "config", cluster={"server": server.url, "insecure-skip-tls-verify": True}, user=exec_user(script)
    )
    async with KubeClient(kubeconfig=config, settings=NO_RETRY) as kube:
        await kube.get(PODS, "p", namespace="default")
        await kube.get(PODS, "p", namespace="default")
    assert (tmp_path / "runs").read_text() == "2"


async def test_a_401_makes_the_exec_plugin_run_again(server: Server, tmp_path: Path) -> None:
    script = exec_plugin(tmp_path, token="stale", expires_in=None)  # no expiry: kept until refused
    config = write_config(
        tmp_path / "config", cluster={"server": server.url, "insecure-skip-tls-verify": True}, user=exec_user(script)
    )
    async with KubeClient(kubeconfig=config, settings=NO_RETRY) as kube:
        with pytest.raises(errors.Unauthorized):
            await kube.get(PODS, "p", namespace="default")
        with pytest.raises(errors.Unauthorized):
            await kube.get(PODS, "p", namespace="default")
    assert (tmp_path / "runs").read_text() == "2"


async def test_an_exec_plugin_client_certificate_is_presented(server: Server, tmp_path: Path) -> None:
    script = exec_plugin(tmp_path, token="", expires_in=3600, cert=server.client_pair("from-exec"))
    config = write_config(
        tmp_path / "config",
        cluster={"server": server.url, "certificate-authority-data": b64(server.ca.cert_pem)},
        user=exec_user(script),
    )
    seen = await seen_by(server, config)
    assert (seen["cert"], seen["authorization"]) == ("from-exec", None)


async def test_a_failing_exec_plugin_says_what_it_printed(server: Server, tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('please run `login` first', file=sys.stderr)\nsys.exit(3)\n")
    config = write_config(
        tmp_path / "config", cluster={"server": server.url, "insecure-skip-tls-verify": True}, user=exec_user(script)
    )
    with pytest.raises(KubeconfigError, match=r"exited 3: please run `login` first"):
        await seen_by(server, config)


def test_kubeconfig_files_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    """The first file naming an entry wins; the first current-context set wins; each entry keeps its file's
    directory for relative paths."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = tmp_path / "a" / "config"
    first.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "shared", "cluster": {"server": "https://first", "certificate-authority": "ca"}}],
                "users": [],
                "contexts": [{"name": "one", "context": {"cluster": "shared", "user": "u", "namespace": "n1"}}],
            }
        )
    )
    second = tmp_path / "b" / "config"
    second.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "shared", "cluster": {"server": "https://second"}}],
                "users": [{"name": "u", "user": {"tokenFile": "token"}}],
                "contexts": [{"name": "two", "context": {"cluster": "shared", "user": "u"}}],
                "current-context": "two",
            }
        )
    )
    merged = read_kubeconfig(f"{first}:{second}")
    assert merged.current_context == "two"
    assert sorted(merged.contexts) == ["one", "two"]
    access = merged.access("one")
    assert (access.server, access.ca_file) == ("https://first", str(tmp_path / "a" / "ca"))
    assert access.token_file == str(tmp_path / "b" / "token")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"contexts": [{"name": "x", "context": {"cluster": "gone", "user": "u"}}]}, "names cluster 'gone'"),
        (
            {"clusters": [{"name": "c", "cluster": {}}], "contexts": [{"name": "x", "context": {"cluster": "c"}}]},
            "no server",
        ),
        ({"clusters": "c"}, "clusters is not a list"),
        ({"contexts": [{"context": {}}]}, "has no name"),
    ],
)
def test_a_broken_kubeconfig_is_named(tmp_path: Path, document: dict[str, Any], message: str) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({"current-context": "x", **document}))
    with pytest.raises(KubeconfigError, match=message):
        read_kubeconfig(path).access()


async def test_an_auth_provider_user_is_loaded_by_kubernetes_asyncio(tmp_path: Path) -> None:
    """The deprecated auth-provider plug-ins are not read here: kubernetes-asyncio loads them, as before."""
    future = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = write_config(
        tmp_path / "config",
        cluster={"server": "https://127.0.0.1:9"},
        user={"auth-provider": {"name": "gcp", "config": {"access-token": "gcp-token", "expiry": future}}},
    )
    chosen = await transport.open_transport(
        kubeconfig=str(config), context=None, configuration=None, in_cluster=None, max_connections=None
    )
    try:
        assert isinstance(chosen, transport.ConfigurationTransport)
        headers: dict[str, str] = {}
        await chosen.authorize(headers, [])
        assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer gcp-token"
    finally:
        await chosen.close()


async def test_in_cluster_the_service_account_is_read(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(server.ca.cert_pem)
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT_DIR", str(tmp_path))
    monkeypatch.setattr(transport, "SERVICE_ACCOUNT_TOKEN", str(tmp_path / "token"))
    host, port = server.url.removeprefix("https://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    async with KubeClient(settings=NO_RETRY) as kube:
        got = await kube.get(PODS, "p", namespace="default")
    assert got["seen"]["authorization"] == "Bearer sa-token"


def test_no_secret_shows_in_a_repr(tmp_path: Path) -> None:
    """An Access in a log line or a traceback names no token, password or key."""
    config = write_config(
        tmp_path / "config",
        cluster={"server": "https://127.0.0.1:9"},
        user={"token": "s3cret-token", "username": "u", "password": "s3cret-pass", "client-key-data": b64(b"KEY")},
    )
    shown = repr(read_kubeconfig(config).access())
    assert "s3cret" not in shown and "KEY" not in shown, shown
    assert "https://127.0.0.1:9" in shown


def test_an_unchanged_kubeconfig_is_parsed_once_and_a_changed_one_again(tmp_path: Path) -> None:
    """A command reads its kubeconfig twice (the namespace, then the client): the second read is the first's."""
    config = write_config(tmp_path / "config", cluster={"server": "https://a:6443"}, user={"token": "t"})
    first = read_kubeconfig(config)
    assert read_kubeconfig(config) is first
    write_config(config, cluster={"server": "https://elsewhere:6443"}, user={"token": "t"})
    again = read_kubeconfig(config)
    assert again is not first and again.access().server == "https://elsewhere:6443"
