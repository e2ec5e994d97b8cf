"""The differential harness: one case, the same steps on both control planes, observations compared.

Why this exists next to tests/fidelity/: those tests assert an outcome someone once observed on the real
server, so they only cover what their author thought of checking. Here nothing is expected in advance. A
case is what a user or the controller really does (kubectl invocations and raw HTTP requests, in order);
it runs on the real kube-apiserver and on the embedded one at once, each step's observable result is
recorded (exit code and output, status and body and the headers clients act on, watch event sequences),
the values every server makes up for itself are normalised, and the two records are compared. Whatever
differs is a finding: fixed in the embedded server, or written down in docs/local-cluster.md.

Normalisation replaces what is volatile by placeholders that keep identity: the first uid seen in a case
becomes ``<uid:1>`` wherever it reappears (an ownerReference to it included), the same for object
resourceVersions, IPs, generated names and container IDs, so "this update did not change the
resourceVersion" or "the ownerReference names that owner" still compare. Status codes, reasons, messages,
field values and event types are never blanked: they are the behaviour under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

KUBECTL = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl")

#: how a record step keeps (part of) a body: everything, nothing, or what a function picks
Keep = bool | Callable[[Any], Any]


# ----------------------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    name: str
    func: Callable[[Tier], Awaitable[None]]
    #: what the case shows (its docstring)
    about: str
    #: the case runs pods that must be scheduled and started: it needs a schedulable node
    nodes: bool = False
    #: seconds for the whole case on one control plane
    timeout: float = 90.0
    #: the case changes what other cases would see (compacts history): it runs alone, after the others
    exclusive: bool = False


CASES: dict[str, Case] = {}


def case(
    name: str, *, nodes: bool = False, timeout: float = 90.0, exclusive: bool = False
) -> Callable[[Callable[[Tier], Awaitable[None]]], Any]:
    """Register a case: an async function of one :class:`Tier` that runs its steps through it."""

    def register(func: Callable[[Tier], Awaitable[None]]) -> Callable[[Tier], Awaitable[None]]:
        if name in CASES:
            raise ValueError(f"two differential cases are named {name!r}")
        about = (func.__doc__ or "").strip()
        CASES[name] = Case(name, func, about, nodes=nodes, timeout=timeout, exclusive=exclusive)
        return func

    return register


# ------------------------------------------------------------------------------------------ normalisation

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_CID = re.compile(r"simulated://[0-9a-f]{16,64}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
_PEM = re.compile(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----\n?", re.S)
_B64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]+")
_TIME = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [+-]\d{4} [A-Z]+(?: m=[+-]\d+\.\d+)?"
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
    r"\d\d:\d\d:\d\d [+-]\d{4}"
)
_CIDR = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}/\d{1,2}\b")
_IP = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")
_SERVER = re.compile(r"\bhttps?://127\.0\.0\.1:\d+")
_HOSTPORT = re.compile(r"\b127\.0\.0\.1:\d+")
_TOO_OLD = re.compile(r"too old resource version: \d+ \(\d+\)")
_TOO_LARGE = re.compile(r"(Too large resource version: \d+, current: )\d+")
_RV_IN_RECORD = re.compile(r"(ResourceVersion in (?:the precondition|record) \()(\d+)(\))")
_RV_JSON = re.compile(r'(\\?"resourceVersion\\?":\\?")(\d+)')
_RV_TEXT = re.compile(r'((?:resourceVersion|Resource Version): +"?)(\d+)("?)')
_RV_QUERY = re.compile(r"\b(resourceVersion=)(\d+)")
_CONTINUE_QUERY = re.compile(r"\b(continue=)[A-Za-z0-9_=%-]+")
_HASH_QUERY = re.compile(r"\b(hash=)[0-9A-F]+")
_RV_PRECONDITION = re.compile(r"(ResourceVersion in (?:precondition|object meta)): \d+")
_AGE = re.compile(r"(?<![\w.:/-])(?:\d+(?:y|d|h|m|s|ms))(?:\d+(?:h|m|s))?(?![\w.:/-])|<invalid>")
_COLUMNS = re.compile(r" {2,}")
_GENERATED_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
#: IPs that mean the same on every server
_FIXED_IPS = frozenset({"0.0.0.0", "127.0.0.1"})


class Normaliser:
    """Replaces one control plane's volatile values by placeholders; one per case and control plane.

    ``literals`` are exact strings (the case's namespace, the node's name, the server's address) with their
    placeholders; everything else is found by pattern and numbered by first appearance.
    """

    def __init__(self, literals: dict[str, str]) -> None:
        self.literals = dict(literals)
        self.counters: dict[str, dict[str, str]] = {}
        self.generated: list[str] = ["kube-api-access-"]
        self._literal_re: re.Pattern[str] | None = None

    def token(self, kind: str, value: str) -> str:
        seen = self.counters.setdefault(kind, {})
        if value not in seen:
            seen[value] = f"<{kind}:{len(seen) + 1}>"
        return seen[value]

    def literal(self, value: str, placeholder: str) -> None:
        self.literals[value] = placeholder
        self._literal_re = None

    def generated_prefix(self, prefix: str) -> None:
        """Names made from ``prefix`` + 5 random characters (generateName) are numbered placeholders."""
        if prefix not in self.generated:
            self.generated.append(prefix)

    def _literals(self) -> re.Pattern[str] | None:
        if self._literal_re is None and self.literals:
            alternatives = sorted(self.literals, key=len, reverse=True)
            self._literal_re = re.compile("|".join(re.escape(a) for a in alternatives))
        return self._literal_re

    def text(self, s: str, *, table: bool = False) -> str:
        s = _PEM.sub("<pem>", s)
        s = _B64_PEM.sub("<pem>", s)
        s = _JWT.sub("<token>", s)
        s = _SERVER.sub("<server>", s)
        s = _HOSTPORT.sub("<server>", s)
        literals = self._literals()
        if literals is not None:
            s = literals.sub(lambda m: self.literals[m.group(0)], s)
        for prefix in self.generated:
            s = re.sub(
                re.escape(prefix) + _GENERATED_SUFFIX + r"\b",
                lambda m, prefix=prefix: self.token("gen:" + prefix, m.group(0)),
                s,
            )
        s = _UUID.sub(lambda m: self.token("uid", m.group(0)), s)
        s = _CID.sub(lambda m: self.token("cid", m.group(0)), s)
        s = _TIME.sub("<time>", s)
        s = _TOO_OLD.sub("too old resource version: <rv> (<rv>)", s)
        s = _RV_PRECONDITION.sub(lambda m: f"{m.group(1)}: <rv>", s)
        s = _RV_TEXT.sub(lambda m: m.group(1) + self.token("rv", m.group(2)) + m.group(3), s)
        s = _RV_JSON.sub(lambda m: m.group(1) + self.token("rv", m.group(2)), s)
        s = _RV_IN_RECORD.sub(lambda m: m.group(1) + self.token("rv", m.group(2)) + m.group(3), s)
        s = _TOO_LARGE.sub(r"\1<rv>", s)
        s = _RV_QUERY.sub(lambda m: m.group(1) + self.token("rv", m.group(2)), s)
        s = _CONTINUE_QUERY.sub(r"\1<continue>", s)
        s = _HASH_QUERY.sub(r"\1<hash>", s)
        s = _CIDR.sub("<cidr>", s)
        s = _IP.sub(lambda m: m.group(0) if m.group(0) in _FIXED_IPS else self.token("ip", m.group(0)), s)
        if table:
            s = _AGE.sub("<age>", s)
            s = "\n".join(_COLUMNS.sub("   ", line).rstrip() for line in s.split("\n"))
        return s

    def json(self, value: Any, *, managed_fields: bool = False) -> Any:
        """A decoded JSON document with volatile values replaced (see the module docstring)."""
        self._learn_generated(value)
        return self._json(value, (), managed_fields)

    def _learn_generated(self, value: Any) -> None:
        """Objects made with generateName: their names become placeholders wherever they appear."""
        if isinstance(value, dict):
            md = value.get("metadata")
            if isinstance(md, dict):
                gen, name = md.get("generateName"), md.get("name")
                if isinstance(gen, str) and isinstance(name, str) and name.startswith(gen) and gen:
                    self.generated_prefix(gen)
            for v in value.values():
                self._learn_generated(v)
        elif isinstance(value, list | tuple):
            for v in value:
                self._learn_generated(v)

    def _json(self, value: Any, path: tuple[str, ...], managed_fields: bool) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            is_list = "items" in value and isinstance(value.get("items"), list)
            for k, v in value.items():
                key = self.text(k) if isinstance(k, str) else k
                if k == "metadata" and isinstance(v, dict):
                    out[key] = self._metadata(v, path, managed_fields, list_meta=is_list)
                elif k == "resourceVersion" and isinstance(v, str) and v.isdigit():
                    out[key] = self.token("rv", v)
                elif k == "continue" and isinstance(v, str) and v:
                    out[key] = "<continue>"
                else:
                    out[key] = self._json(v, (*path, str(k)), managed_fields)
            return out
        if isinstance(value, list | tuple):
            return [self._json(v, path, managed_fields) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def _metadata(self, md: dict[str, Any], path: tuple[str, ...], managed_fields: bool, *, list_meta: bool) -> Any:
        out: dict[str, Any] = {}
        for k, v in md.items():
            if k == "managedFields" and not managed_fields:
                continue
            if k == "resourceVersion" and isinstance(v, str) and v:
                out[k] = "<rv>" if list_meta else self.token("rv", v)
            elif k == "continue" and isinstance(v, str) and v:
                out[k] = "<continue>"
            else:
                out[self.text(k)] = self._json(v, (*path, "metadata", k), managed_fields)
        return out


# -------------------------------------------------------------------------------------------- one plane


@dataclass
class Plane:
    """One control plane as the harness reaches it (shared by every case)."""

    tier: str
    url: str
    ssl: ssl.SSLContext | None
    #: the administrator's kubeconfig as a document (each case writes a copy naming its namespace)
    kubeconfig: dict[str, Any]
    #: kubectl's discovery cache, shared by the cases of this plane
    cache_dir: Path
    #: the schedulable node of the run (cases with nodes=True)
    node: str
    #: node names to hide (the node's, and any other this plane has)
    node_names: tuple[str, ...]
    session: aiohttp.ClientSession
    scratch: Path
    #: how a case adds another node (for cases that need more than one) and removes it
    add_node: Callable[[str], Awaitable[str]] | None = None
    remove_node: Callable[[str], Awaitable[None]] | None = None
    #: forget the history older than now (the real one: compact etcd; the embedded one: its watch history)
    compact: Callable[[], Awaitable[None]] | None = None


@dataclass
class Reply:
    status: int
    headers: dict[str, list[str]]
    body: Any
    raw: bytes

    @property
    def json(self) -> Any:
        return self.body


@dataclass
class Run:
    code: int
    out: str
    err: str


@dataclass
class WatchEvent:
    type: str
    object: Any


_RECORDED_HEADERS = ("Content-Type", "Warning")


class Tier:
    """What a case function talks to: one control plane, in the case's own namespace ``ns``.

    Every step is recorded (normalised) in ``log`` unless told otherwise; both control planes run the same
    function, so the two logs compare step by step.
    """

    def __init__(self, plane: Plane, ns: str, kubeconfig: Path) -> None:
        self.plane = plane
        self.tier = plane.tier
        self.ns = ns
        self.node = plane.node
        self.kubeconfig = kubeconfig
        literals = {ns: "<ns>"}
        for n in plane.node_names:
            literals[n] = "<node>"
        self.norm = Normaliser(literals)
        self.log: list[dict[str, Any]] = []
        self._unique = 0
        self.extra_namespaces: list[str] = []
        self.extra_nodes: list[str] = []
        self.cluster_objects: list[str] = []

    # ---- names ------------------------------------------------------------------------------------------

    def unique(self, what: str) -> str:
        """A name of this plane's own for a cluster-scoped object (namespaces, CRD groups, nodes), compared
        as ``<what-N>`` so both planes' names are the same to the comparison."""
        self._unique += 1
        name = f"{what}-{self.ns}-{self._unique}"
        self.norm.literal(name, f"<{what}-{self._unique}>")
        return name

    def file(self, name: str, content: str) -> str:
        """Write a file for kubectl to read (``-f``, ``--from-file``); its directory compares as ``<dir>``."""
        folder = self.plane.scratch / self.tier / self.ns
        folder.mkdir(parents=True, exist_ok=True)
        self.norm.literal(str(folder), "<dir>")
        path = folder / name
        path.write_text(content)
        return str(path)

    def unique_group(self) -> str:
        """An API group of this plane's own (for a throwaway CRD), compared as ``<group-N>.example.com``."""
        self._unique += 1
        group = f"g{self.ns.replace('-', '')}{self._unique}.example.com"
        self.norm.literal(group, f"<group-{self._unique}>.example.com")
        return group

    def hide(self, value: str, placeholder: str) -> None:
        self.norm.literal(value, placeholder)

    # ---- recording --------------------------------------------------------------------------------------

    def note(self, label: str, value: Any) -> None:
        """Record a value the case worked out itself (normalised like a body)."""
        self.log.append({"note": label, "value": self.norm.json(value)})

    def _keep(self, keep: Keep, body: Any, managed_fields: bool) -> Any:
        if keep is True:
            return self.norm.json(body, managed_fields=managed_fields)
        assert callable(keep)
        try:
            picked = keep(body)
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            picked = {"unreadable": f"{type(e).__name__}: {e}", "body": body}
        return self.norm.json(picked, managed_fields=managed_fields)

    # ---- HTTP -------------------------------------------------------------------------------------------

    async def http(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        keep: Keep = True,
        managed_fields: bool = False,
        label: str | None = None,
    ) -> Reply:
        """One request; ``keep`` says what of the body is recorded (True: all, False: only the status)."""
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        sent = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            sent.setdefault("Content-Type", content_type)
        async with self.plane.session.request(
            method, self.plane.url + path, data=data, headers=sent, ssl=self._ssl()
        ) as response:
            text = await response.read()
            got_headers: dict[str, list[str]] = {}
            for name in _RECORDED_HEADERS:
                values = response.headers.getall(name, [])
                if values:
                    got_headers[name] = list(values)
            reply = Reply(response.status, got_headers, _parse(text), text)
        entry: dict[str, Any] = {"http": label or f"{method} {self.norm.text(path)}", "status": reply.status}
        heads = {
            k: [_content_type(x) if k == "Content-Type" else self.norm.text(x) for x in v]
            for k, v in got_headers.items()
        }
        if heads:
            entry["headers"] = heads
        if keep is not False:
            entry["body"] = self._keep(keep, reply.body, managed_fields)
        self.log.append(entry)
        return reply

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.http("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.http("POST", path, body, **kw)

    async def put(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.http("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any, patch_type: str = "merge", **kw: Any) -> Reply:
        types = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "apply": "application/apply-patch+yaml",
        }
        return await self.http("PATCH", path, body, content_type=types[patch_type], **kw)

    async def delete(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.http("DELETE", path, body, **kw)

    def _ssl(self) -> ssl.SSLContext | bool:
        return self.plane.ssl if self.plane.ssl is not None else False

    async def poll(
        self,
        path: str,
        until: Callable[[Reply], bool],
        *,
        within: float = 30.0,
        keep: Keep = True,
        label: str | None = None,
        interval: float = 0.1,
    ) -> Reply:
        """GET ``path`` until ``until(reply)`` holds or ``within`` seconds pass; only the last answer is
        recorded, with whether the condition was met (a deadline, never a bare sleep)."""
        deadline = time.monotonic() + within
        while True:
            reply = await self._quiet_get(path)
            met = _holds(until, reply)
            if met or time.monotonic() > deadline:
                break
            await asyncio.sleep(interval)
        entry: dict[str, Any] = {"poll": label or f"GET {self.norm.text(path)}", "met": met, "status": reply.status}
        if keep is not False:
            entry["body"] = self._keep(keep, reply.body, False)
        self.log.append(entry)
        return reply

    async def _quiet_get(self, path: str) -> Reply:
        async with self.plane.session.get(
            self.plane.url + path, headers={"Accept": "application/json"}, ssl=self._ssl()
        ) as response:
            text = await response.read()
            return Reply(response.status, {}, _parse(text), text)

    async def quiet(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Reply:
        """A request that is not recorded (setup whose answer the case does not compare)."""
        data = orjson.dumps(body) if body is not None else None
        heads = {"Accept": "application/json"}
        if data is not None:
            heads["Content-Type"] = content_type
        async with self.plane.session.request(
            method, self.plane.url + path, data=data, headers=heads, ssl=self._ssl()
        ) as response:
            text = await response.read()
            return Reply(response.status, {}, _parse(text), text)

    # ---- watch ------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watching(self, path: str, *, label: str | None = None) -> AsyncIterator[Watch]:
        """A watch stream open while the block runs; ``await w.collect(...)`` records what arrived."""
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.plane.session.get(
            self.plane.url + path, headers={"Accept": "application/json"}, ssl=self._ssl(), timeout=timeout
        ) as response:
            w = Watch(self, response, label or f"WATCH {self.norm.text(path)}")
            try:
                yield w
            finally:
                w.close()

    # ---- kubectl ----------------------------------------------------------------------------------------

    async def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        keep: bool = True,
        table: bool = True,
        timeout: float = 60.0,  # noqa: ASYNC109
        out: Callable[[str], Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> Run:
        """The real kubectl against this plane (context namespace: the case's); exit code, stdout and stderr
        are recorded (``out`` may pick from stdout what is compared)."""
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.plane.cache_dir),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.plane.scratch), **(env or {})},
        )
        try:
            raw_out, raw_err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raw_out, raw_err = b"", b"<kubectl timed out>"
        run = Run(proc.returncode if proc.returncode is not None else -1, raw_out.decode(), raw_err.decode())
        if keep:
            entry: dict[str, Any] = {
                "kubectl": " ".join(self.norm.text(a) for a in args),
                "exit": run.code,
            }
            if out is not None:
                try:
                    picked = out(run.out)
                except Exception as e:
                    picked = {"unreadable": f"{type(e).__name__}: {e}", "stdout": run.out}
                entry["stdout"] = (
                    self.norm.text(picked, table=table) if isinstance(picked, str) else self.norm.json(picked)
                )
            elif _structured(args) and run.code == 0:
                entry["stdout"] = self._structured(run.out)
            else:
                entry["stdout"] = self.norm.text(run.out, table=table)
            entry["stderr"] = self.norm.text(run.err, table=table)
            self.log.append(entry)
        return run

    def _structured(self, text: str) -> Any:
        """``-o yaml``/``-o json`` output, compared as the documents it holds (normalised like bodies)."""
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError:
            return self.norm.text(text)
        return self.norm.json(docs[0] if len(docs) == 1 else docs)

    async def compact(self) -> None:
        """What a long-running cluster does every few minutes: history older than now is gone (only in
        ``exclusive`` cases, since it changes what every other client can resume from)."""
        assert self.plane.compact is not None
        await self.plane.compact()
        self.log.append({"step": "compact history"})

    # ---- nodes ------------------------------------------------------------------------------------------

    async def extra_node(self) -> str:
        """Another schedulable node for this case (removed when the case ends), compared as ``<node-N>``."""
        assert self.plane.add_node is not None
        self._unique += 1
        name = await self.plane.add_node(f"node-{self.ns}-{self._unique}")
        self.norm.literal(name, f"<node-{self._unique}>")
        self.extra_nodes.append(name)
        return name


class Watch:
    """An open watch stream; events are read as they come."""

    def __init__(self, tier: Tier, response: aiohttp.ClientResponse, label: str) -> None:
        self.tier = tier
        self.response = response
        self.label = label
        self.events: list[WatchEvent] = []
        self.ended = False
        self._buffer = b""

    async def _next(self, deadline: float) -> WatchEvent | None:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                chunk = await asyncio.wait_for(self.response.content.readany(), left)
            except TimeoutError:
                return None
            except (aiohttp.ClientError, ConnectionError):
                self.ended = True
                return None
            if not chunk:
                self.ended = True
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        if not line.strip():
            return await self._next(deadline)
        frame = orjson.loads(line)
        return WatchEvent(frame.get("type", ""), frame.get("object"))

    async def collect(
        self,
        until: Callable[[list[WatchEvent]], bool] | None = None,
        *,
        within: float = 20.0,
        keep: Callable[[WatchEvent], Any] | None = None,
        record: bool = True,
    ) -> list[WatchEvent]:
        """Read events until ``until(events)`` holds, the stream ends, or ``within`` seconds pass; record
        the status, the events (``keep`` picks what of each is compared) and how the wait ended."""
        deadline = time.monotonic() + within
        met = until is not None and until(self.events)
        while not met and not self.ended:
            ev = await self._next(deadline)
            if ev is None:
                break
            self.events.append(ev)
            met = until is not None and until(self.events)
        if record:
            picked = [keep(ev) if keep is not None else _event(ev) for ev in self.events]
            entry: dict[str, Any] = {
                "watch": self.label,
                "status": self.response.status,
                "events": self.tier.norm.json(picked),
                "ended": self.ended,
            }
            if until is not None:
                entry["met"] = met
            self.tier.log.append(entry)
        return self.events

    def close(self) -> None:
        self.response.close()


def _event(ev: WatchEvent) -> dict[str, Any]:
    if ev.type == "BOOKMARK" and isinstance(ev.object, dict):
        md = dict(ev.object.get("metadata") or {})
        md["resourceVersion"] = "<rv>" if md.get("resourceVersion") else md.get("resourceVersion")
        return {"type": ev.type, "object": {**ev.object, "metadata": md}}
    return {"type": ev.type, "object": ev.object}


def _structured(args: tuple[str, ...]) -> bool:
    """Whether kubectl was asked for YAML or JSON documents."""
    for i, a in enumerate(args):
        if a in ("-o", "--output") and i + 1 < len(args) and args[i + 1] in ("yaml", "json"):
            return True
        if a in ("-oyaml", "-ojson", "--output=yaml", "--output=json", "-o=yaml", "-o=json"):
            return True
    return False


def _holds(until: Callable[[Reply], bool], reply: Reply) -> bool:
    try:
        return bool(until(reply))
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


def _parse(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def _content_type(value: str) -> str:
    return value.replace(" ", "").lower()


# ------------------------------------------------------------------------------------------ comparison


@dataclass
class Outcome:
    """One case's result: the two records and whether they match."""

    name: str
    real: list[dict[str, Any]]
    embedded: list[dict[str, Any]]
    seconds: float
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.real == self.embedded

    def diff(self) -> str:
        return render_diff(self.real, self.embedded)

    def differing_steps(self) -> list[int]:
        steps = max(len(self.real), len(self.embedded))
        return [
            i
            for i in range(steps)
            if (self.real[i] if i < len(self.real) else None) != (self.embedded[i] if i < len(self.embedded) else None)
        ]


def dump(log: Iterable[dict[str, Any]]) -> str:
    return yaml.safe_dump(list(log), sort_keys=True, width=1000, allow_unicode=True)


def render_diff(real: list[dict[str, Any]], embedded: list[dict[str, Any]]) -> str:
    lines = difflib.unified_diff(
        dump(real).splitlines(),
        dump(embedded).splitlines(),
        fromfile="kubernetes (real)",
        tofile="embedded",
        lineterm="",
        n=6,
    )
    return "\n".join(lines)
