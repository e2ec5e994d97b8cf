"""The HTTP face of the embedded cluster: the Kubernetes REST API over aiohttp.

Clients (kubernetes-asyncio, the real kubectl, our controller) cannot tell it from a real kube-apiserver
for the calls they make: paths, verbs, content negotiation (JSON, Table, PartialObjectMetadata), watch
streams as chunked JSON lines, and errors as ``Status`` objects. Object semantics live in :mod:`registry`;
this module only translates HTTP to registry calls and back, and does accounting and fault injection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import re
import ssl
import time
from typing import Any
from urllib.parse import parse_qsl, quote

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from kubedl_local.apiserver import (
    discovery,
    fieldmanager,
    jsonsyntax,
    openapi,
    protobuf,
    reviews,
    serviceaccounts,
    tables,
)
from kubedl_local.apiserver.errors import (
    ApiError,
    FieldError,
    PageNotFound,
    bad_request,
    conflict,
    expired,
    invalid,
    method_not_allowed,
    not_found,
    resource_not_found,
)
from kubedl_local.apiserver.registry import RETURN_DELETED, FieldValidation, Registry, dry_run_errors
from kubedl_local.apiserver.resources import Catalogue, ResourceType, not_served
from kubedl_local.apiserver.selection import FieldSelector, parse_field_selector, parse_label_selector
from kubedl_local.apiserver.typed import Types
from kubedl_local.faults import Faults, RequestInfo, RequestLog, RequestRecord, verb_of
from kubedl_local.storage.store import Event, Obj, Store, Watcher, now_iso, with_disruption

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
JSON_CT = "application/json"
_NS_SUBRESOURCES = ("status", "finalize")
#: subresources PUT and PATCH write through (the object with one part replaced)
_WRITABLE_SUBRESOURCES = (None, "status", "ephemeralcontainers")


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def _not_acceptable() -> ApiError:
    return ApiError(
        406,
        "only the following media types are accepted: application/json, "
        "application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io",
        "NotAcceptable",
    )


def _warning(text: str) -> str:
    """A Warning header's value (RFC 7234: code 299, no agent, the text quoted)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def _json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=_dumps(obj), status=status, content_type=JSON_CT, headers=headers)


#: how Go prints the struct the real server reads apiVersion and kind into first
_TYPE_META_STRUCT = (
    'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "object"


def _unrecognized(rt: ResourceType, why: str, raw: bytes) -> ApiError:
    return bad_request(
        f"the object provided is unrecognized (must be of type {rt.kind}): couldn't get version/kind; "
        f"json parse error: {why} ({jsonsyntax.summarize(raw)})"
    )


def _unsupported_media_type(rt: ResourceType) -> ApiError:
    accepted = "application/json, application/yaml"
    if not rt.custom:
        accepted += f", {protobuf.CONTENT_TYPE}"
    return ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: {accepted}",
        "UnsupportedMediaType",
    )


def _field_validation(req: Request, options: str, patch_type: str | None = None) -> FieldValidation:
    """The request's options as Create/Update/PatchOptions validation sees them (fieldManager, force,
    dryRun, fieldValidation: one 422 for all that are wrong); returns the ``fieldValidation`` (absent: Warn)."""
    q = req.query
    errs: list[FieldError] = []
    manager = q.get("fieldManager", "")
    if patch_type == "application/apply-patch+yaml":
        if not manager:
            errs.append(FieldError("FieldValueRequired", "fieldManager", "is required for apply patch"))
    elif patch_type is not None and "force" in q:
        errs.append(FieldError("FieldValueForbidden", "force", "may not be specified for non-apply patch"))
    if len(manager) > 128:
        errs.append(FieldError("FieldValueTooLong", "fieldManager", "may not be more than 128 bytes"))
    for i, ch in enumerate(manager):
        if not ch.isprintable():
            why = f"invalid character U+{ord(ch):04X} (at position {len(manager[:i].encode())})"
            errs.append(FieldError("FieldValueInvalid", "fieldManager", why, manager))
    if "dryRun" in q:
        errs += dry_run_errors([q["dryRun"]])
    mode = q.get("fieldValidation", "")
    if mode not in ("", "Ignore", "Strict", "Warn"):
        errs.append(
            FieldError(
                "FieldValueNotSupported", "fieldValidation", 'supported values: "", "Ignore", "Strict", "Warn"', mode
            )
        )
    if errs:
        raise invalid(options, "meta.k8s.io", "", "", errs)
    return FieldValidation(mode or "Warn")


def _manager(req: Request, request: web.Request) -> str:
    """managerOrUserAgent: ``?fieldManager=``, else the first word of the User-Agent."""
    return req.query.get("fieldManager") or fieldmanager.manager_from_user_agent(request.headers.get("User-Agent", ""))


def load_yaml(raw: bytes) -> Any:
    """YAML as the real server reads it (sigs.k8s.io/yaml on go-yaml v2, a port of libyaml): libyaml's own
    parser and messages, and YAML 1.1 booleans including y/n; ValueError carries go-yaml's message."""
    import yaml

    try:
        return yaml.load(raw, Loader=_YamlLoader)
    except yaml.MarkedYAMLError as e:
        problem, context = e.problem_mark, e.context_mark
        line = 0
        if problem is not None and problem.line:
            line = problem.line + (1 if isinstance(e, yaml.scanner.ScannerError) else 0)
        elif context is not None and context.line:
            line = context.line
        where = f"line {line}: " if line else ""
        raise ValueError(f"yaml: {where}{e.problem}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"yaml: {e}") from None


def _yaml_loader() -> Any:
    import re as re_

    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc,valid-type]
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re_.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
    Loader.add_constructor("tag:yaml.org,2002:bool", lambda loader, node: loader.construct_scalar(node) in _YAML_TRUE)
    return Loader


_YAML_TRUE = frozenset({"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
_YamlLoader = _yaml_loader()


PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def _patch_body(raw: bytes, ctype: str) -> Any:
    """A PATCH body as the real handler reads it: go-restful refuses other media types (415), an apply
    patch is YAML, any other must be valid JSON ("invalid JSON patch")."""
    if ctype not in PATCH_TYPES:
        raise ApiError(415, "415: Unsupported Media Type", "UnsupportedMediaType", {})
    if ctype == "application/apply-patch+yaml":
        try:
            return load_yaml(raw)
        except ValueError as e:
            raise bad_request(f"error decoding YAML: {e}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request("invalid JSON patch") from None


def _fields(text: str | None, rt: ResourceType) -> FieldSelector:
    return parse_field_selector(text, rt.group, rt.plural, custom=rt.custom, namespaced=rt.namespaced)


_GO_INT = re.compile(r"[+-]?[0-9]+")


def go_int(raw: str) -> int:
    """A query parameter read as the real server's conversion does (strconv.ParseInt, base 10, 64 bits),
    with its error as a 400."""
    if not _GO_INT.fullmatch(raw):
        raise bad_request(f'strconv.ParseInt: parsing "{raw}": invalid syntax')
    value = int(raw)
    if not -(2**63) <= value < 2**63:
        raise bad_request(f'strconv.ParseInt: parsing "{raw}": value out of range')
    return value


def _status_ok(details: dict[str, Any] | None = None) -> Obj:
    out: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        out["details"] = details
    return out


class Request:
    """A parsed resource request."""

    __slots__ = ("group", "name", "namespace", "query", "rt", "subresource", "version")

    def __init__(
        self,
        rt: ResourceType,
        version: str,
        namespace: str | None,
        name: str | None,
        *,
        subresource: str | None,
        query: dict[str, str],
    ) -> None:
        self.rt = rt
        self.group = rt.group
        self.version = version
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.query = query


class ApiServer:
    def __init__(
        self,
        store: Store,
        catalogue: Catalogue,
        registry: Registry,
        *,
        kubelet_ssl: ssl.SSLContext | None = None,
        faults: Faults | None = None,
        request_log: RequestLog | None = None,
        bookmark_interval: float = 10.0,
        default_watch_timeout: float = 1800.0,
    ) -> None:
        self.store = store
        self.catalogue = catalogue
        self.registry = registry
        # How this server reaches kubelets (client certificate; kubelets' serving certificates are not
        # verified unless the context says so, as kube-apiserver without --kubelet-certificate-authority).
        self.kubelet_ssl = kubelet_ssl if kubelet_ssl is not None else _unverified_ssl()
        self._kubelet: aiohttp.ClientSession | None = None
        self.faults = faults or Faults()
        self.request_log = request_log or RequestLog()
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = default_watch_timeout
        self.host = "127.0.0.1:0"
        self._streams: set[asyncio.Task[Any]] = set()
        self._types_failed = False
        self._publisher: openapi.Publisher | None = None
        self.closing = False

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def _load_types(self) -> None:
        """The Go structs of the built-in kinds (typed.py), from the protobuf field table, once. Without the
        table (offline, not yet fetched) built-in bodies are stored as sent; said once in the log."""
        if self.registry.types is not None or self._types_failed:
            return
        try:
            self.registry.types = Types(await protobuf.load_table())
        except protobuf.TableUnavailable as e:
            self._types_failed = True
            log.warning("built-in kinds are not type-checked or normalised: %s", e)
        try:
            self.registry.openapi_docs = await asyncio.to_thread(openapi.ensure_specs)
        except openapi.SpecsUnavailable as e:
            log.warning("managedFields and server-side apply treat built-in kinds as untyped: %s", e)

    async def close_streams(self) -> None:
        self.closing = True
        for t in list(self._streams):
            t.cancel()
        if self._streams:
            await asyncio.gather(*self._streams, return_exceptions=True)
        if self._kubelet is not None:
            await self._kubelet.close()
            self._kubelet = None

    # ---- entry --------------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        query = dict(parse_qsl(request.query_string, keep_blank_values=True))
        info = RequestInfo(request.method, request.path, "")
        seen: list[RequestInfo] = []
        status = 500
        try:
            resp, info = await self._dispatch(request, query, info, seen)
            status = resp.status
            return resp
        except PageNotFound:
            status = 404
            return web.Response(
                text="404 page not found\n",
                status=404,
                content_type="text/plain",
                charset="utf-8",
                headers={"X-Content-Type-Options": "nosniff"},
            )
        except ApiError as e:
            status = e.code
            resp = self._error_response(request, e)
            for text in e.warnings:
                resp.headers.add("Warning", _warning(text))
            return resp
        except web.HTTPRequestEntityTooLarge:
            status = 413
            err = ApiError(413, "Request entity too large: limit is 3145728", "RequestEntityTooLarge")
            return _json_response(err.status(), 413)
        except (asyncio.CancelledError, ConnectionResetError):
            status = 499
            raise
        except Exception as e:
            log.exception("internal error serving %s %s", request.method, request.path)
            status = 500
            err = ApiError(500, f"Internal error occurred: {e}", "InternalError")
            return _json_response(err.status(), 500)
        finally:
            info = seen[-1] if seen else info
            self.request_log.add(
                RequestRecord.of(
                    info,
                    query=request.query_string,
                    status=status,
                    started=started,
                    user_agent=request.headers.get("User-Agent", ""),
                )
            )

    async def _dispatch(
        self, request: web.Request, query: dict[str, str], info: RequestInfo, seen: list[RequestInfo]
    ) -> tuple[web.StreamResponse, RequestInfo]:
        parts = [p for p in request.path.split("/") if p]
        method = request.method
        if parts and parts[0] in ("api", "apis") and (len(parts) > 3 if parts[0] == "apis" else len(parts) > 2):
            req = self._parse_resource(parts, query)
            verb = self._verb(method, req)
            info = RequestInfo(
                method,
                request.path,
                verb,
                req.group,
                req.rt.plural,
                req.subresource or "",
                req.namespace or "",
                req.name or "",
            )
            seen.append(info)  # for the request log, also when this request fails
            rule = self.faults.pick(info, "status")
            if rule is not None:
                headers = {"Retry-After": str(rule.retry_after)} if rule.retry_after is not None else None
                message = rule.message or f"injected fault (HTTP {rule.status})"
                raise ApiError(rule.status, message, reason=rule.reason, headers=headers)
            return await self._resource(request, req, verb, info), info
        if method not in ("GET", "HEAD"):
            raise method_not_allowed()
        if parts[:2] == ["openapi", "v3"]:
            return await self._openapi(parts[2:]), info
        return self._nonresource(request, parts), info

    # ---- non-resource paths -------------------------------------------------------------------------------

    def _nonresource(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        cat = self.catalogue
        if parts == ["version"]:
            return _json_response(discovery.VERSION_INFO)
        if parts and parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok", content_type="text/plain")
        if parts in (["api"], ["apis"]) and discovery.wants_aggregated(request.headers.get("Accept", "")):
            body = _dumps(discovery.aggregated(cat, core=parts == ["api"]))
            etag = hashlib.sha512(body).hexdigest().upper()
            headers = {"Vary": "Accept", "Cache-Control": "public", "ETag": f'"{etag}"'}
            return web.Response(body=body, headers={**headers, "Content-Type": discovery.AGGREGATED})
        if parts == ["api"]:
            return _json_response(discovery.api_versions(request.host))
        if parts == ["api", "v1"]:
            return _json_response(discovery.resource_list(cat, "", "v1"))
        if parts == ["apis"]:
            return _json_response(discovery.group_list(cat))
        if len(parts) == 2 and parts[0] == "apis":
            doc = discovery.group(cat, parts[1])
            if doc is not None:
                return _json_response(doc)
        if len(parts) == 3 and parts[0] == "apis":
            doc = discovery.resource_list(cat, parts[1], parts[2])
            if doc is not None:
                return _json_response(doc)
        if parts == ["openapi", "v2"]:
            # An empty document: kubectl then validates on the server (fieldValidation) and builds
            # patches from its compiled-in types, exactly as when a kind is missing from a real server's spec.
            if "protobuf" in request.headers.get("Accept", ""):
                return web.Response(body=b"", content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
            return _json_response(
                {
                    "swagger": "2.0",
                    "info": {"title": "Kubernetes", "version": discovery.VERSION_INFO["gitVersion"]},
                    "paths": {},
                    "definitions": {},
                }
            )
        if parts and parts[0] == "api":
            raise resource_not_found()
        raise PageNotFound()

    async def _openapi(self, parts: list[str]) -> web.Response:
        """``/openapi/v3`` and its documents (openapi.py); the built-in ones are loaded (or fetched) once."""
        if self._publisher is None:
            try:
                specs: dict[str, bytes] | None = await asyncio.to_thread(openapi.ensure_specs)
            except openapi.SpecsUnavailable as e:
                log.warning("built-in kinds get OpenAPI documents without schemas: %s", e)
                specs = None
            try:
                table: dict[str, Any] | None = await protobuf.load_table()
            except protobuf.TableUnavailable:
                table = None
            if self._publisher is None:
                self._publisher = openapi.Publisher(specs, table)
        publisher = self._publisher
        if not parts:
            # the real server labels its JSON index text/plain
            return web.Response(
                body=_dumps(publisher.root(self.catalogue, discovery.openapi_gv)),
                content_type="text/plain",
                charset="utf-8",
            )
        data = publisher.document("/".join(parts), self.catalogue, discovery.openapi_gv)
        if data is None:
            raise PageNotFound()
        return web.Response(body=data, content_type=JSON_CT)

    # ---- resource paths -----------------------------------------------------------------------------------

    def _parse_resource(self, parts: list[str], query: dict[str, str]) -> Request:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in _NS_SUBRESOURCES):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise self._no_such_resource(group)
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        rt = self.catalogue.get(group, version, plural)
        if rt is None:
            refused = self.catalogue.refused(group, version, plural)
            if refused is not None:
                raise ApiError(405, not_served(refused), "MethodNotAllowed", {"group": group, "kind": plural})
            raise self._no_such_resource(group)
        if namespace is not None and not rt.namespaced:
            raise resource_not_found()
        if name is not None and rt.namespaced and namespace is None:
            raise resource_not_found()
        if sub is not None and sub not in rt.subresources:
            if rt.custom and name is not None:
                self.registry.get(rt, namespace or "", name)  # a missing object is named, as on the real server
            raise resource_not_found()
        return Request(rt, version, namespace, name, subresource=sub, query=query)

    def _no_such_resource(self, group: str) -> ApiError:
        """The core group and built-in groups answer a Status; a custom resource's group (served by the
        apiextensions server on the real one) and unknown groups fall through to the mux's plain 404."""
        if not group or any(rt.group == group and not rt.custom for rt in self.catalogue.types.values()):
            return resource_not_found()
        return PageNotFound()

    @staticmethod
    def _verb(method: str, req: Request) -> str:
        return verb_of(method, named=req.name is not None, query=req.query)

    async def _body(
        self, request: web.Request, req: Request, *, patch: bool = False, fv: FieldValidation | None = None
    ) -> Any:
        raw = await request.read()
        # No Content-Type at all is read as JSON, as the real server does.
        ctype = request.content_type if request.headers.get("Content-Type") else JSON_CT
        if patch:
            return _patch_body(raw, ctype)
        if ctype == protobuf.CONTENT_TYPE:
            return await self._protobuf_body(raw, req.rt, "the object provided is unrecognized")
        if ctype not in (JSON_CT, "application/yaml"):
            raise _unsupported_media_type(req.rt)
        if ctype == "application/yaml":
            try:
                return load_yaml(raw)
            except ValueError as e:
                raise bad_request(
                    f"the object provided is unrecognized (must be of type {req.rt.kind}): {e} "
                    f"({jsonsyntax.summarize(raw)})"
                ) from None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            why = jsonsyntax.syntax_error(raw) or str(e)
            raise _unrecognized(req.rt, why, raw) from None
        if body is None:
            return {}  # null decodes as an empty object
        if fv is not None and fv.mode != "Ignore" and ctype == JSON_CT and jsonsyntax.may_repeat_keys(raw, body):
            fv.events = jsonsyntax.key_events(raw)  # duplicate fields, which orjson does not report
        if not isinstance(body, dict):
            kind = "array" if isinstance(body, list) else _json_kind(body)
            why = f"json: cannot unmarshal {kind} into Go value of type {_TYPE_META_STRUCT}"
            raise _unrecognized(req.rt, why, raw)
        return body

    @staticmethod
    async def _protobuf_body(raw: bytes, rt: ResourceType, what: str, kind: str | None = None) -> Any:
        """A protobuf body of a built-in kind as the dict its JSON form would give (see ``protobuf``)."""
        if rt.custom and kind is None:
            # The real server (1.37) crashes the connection on this; a 415 says what works instead.
            raise _unsupported_media_type(rt)
        try:
            return await protobuf.decode_body(raw)
        except protobuf.TableUnavailable as e:
            raise ApiError(415, str(e), "UnsupportedMediaType") from None
        except protobuf.ProtobufError as e:
            raise bad_request(f"{what} (must be of type {kind or rt.kind}): {e} ({raw[:64].hex()})") from None

    async def _resource(self, request: web.Request, req: Request, verb: str, info: RequestInfo) -> web.StreamResponse:
        rt = req.rt
        ns = req.namespace or ""
        dry_run = bool(req.query.get("dryRun"))
        if verb in ("create", "update", "patch") or "protobuf" in request.headers.get("Accept", ""):
            await self._load_types()
        if rt.key in reviews.KEYS:
            return await self._review(request, req, verb)
        if verb in ("create", "update", "patch", "delete") and req.subresource is None and verb not in rt.verbs:
            raise method_not_allowed()  # a read-only kind (quotas, limit ranges)
        if verb == "watch":
            return await self._watch(request, req, info)
        if verb == "list":
            return await self._list(request, req)
        if verb == "get":
            assert req.name is not None
            if req.subresource == "log":
                return await self._log(request, req)
            if req.subresource == "exec":
                return await self._exec(request, req)
            obj = self.registry.get(rt, ns, req.name)
            return self._object_response(request, req, obj)
        if verb == "create":
            if req.name is None:
                if rt.namespaced and req.namespace is None:
                    raise method_not_allowed()
                fv = _field_validation(req, "CreateOptions")
                body = await self._body(request, req, fv=fv)
                obj = self.registry.create(
                    rt, ns, body, req.version, dry_run=dry_run, validation=fv, manager=_manager(req, request)
                )
                return self._object_response(request, req, obj, 201, warnings=fv.warnings)
            if req.subresource == "exec":
                return await self._exec(request, req)
            if req.subresource == "binding":
                return self._binding(req, await self._body(request, req))
            if req.subresource == "eviction":
                return self._eviction(req, await self._body(request, req))
            if req.subresource == "token":
                answer = serviceaccounts.token_request(
                    self.store, ns, req.name, await self._body(request, req), issuer=f"https://{self.host}"
                )
                return _json_response(answer, 201)
            raise method_not_allowed()
        if verb == "update":
            if req.name is None:
                raise method_not_allowed()
            fv = _field_validation(req, "UpdateOptions")
            body = await self._body(request, req, fv=fv)
            if rt.key == ("", "namespaces") and req.subresource == "finalize":
                return self._finalize_namespace(req, body)
            if req.subresource not in _WRITABLE_SUBRESOURCES:
                raise method_not_allowed()
            existed = self.store.get(rt.key, ns if rt.namespaced else "", req.name) is not None
            obj = self.registry.update(
                rt,
                ns,
                req.name,
                body,
                req.subresource,
                version=req.version,
                dry_run=dry_run,
                validation=fv,
                manager=_manager(req, request),
            )
            # a kind that PUT may create (leases, events, endpoints) answers 201 when it did
            return self._object_response(request, req, obj, 200 if existed else 201, warnings=fv.warnings)
        if verb == "patch":
            if req.name is None or req.subresource not in _WRITABLE_SUBRESOURCES:
                raise method_not_allowed()
            fv = _field_validation(req, "PatchOptions", request.content_type)
            body = await self._body(request, req, patch=True)
            if request.content_type == "application/apply-patch+yaml":
                force = req.query.get("force", "")
                obj, created = self.registry.apply(
                    rt,
                    ns,
                    req.name,
                    body,
                    manager=req.query["fieldManager"],
                    force=force == "true",
                    subresource=req.subresource,
                    version=req.version,
                    dry_run=dry_run,
                    validation=fv,
                )
                return self._object_response(request, req, obj, 201 if created else 200, warnings=fv.warnings)
            obj = self.registry.patch(
                rt,
                ns,
                req.name,
                request.content_type,
                body,
                subresource=req.subresource,
                version=req.version,
                dry_run=dry_run,
                validation=fv,
                manager=_manager(req, request),
            )
            return self._object_response(request, req, obj, warnings=fv.warnings)
        if verb == "delete":
            assert req.name is not None
            if req.subresource is not None:
                raise method_not_allowed()
            opts = await self._delete_options(request, req)
            obj, gone = self.registry.delete(rt, ns, req.name, opts)
            if gone and rt.key not in RETURN_DELETED:
                details = {"name": req.name, "group": rt.group, "kind": rt.plural, "uid": obj["metadata"].get("uid")}
                if not rt.group:
                    del details["group"]
                return _json_response(_status_ok(details))
            # As the real server: 200 whether or not the object is gone yet (finalizers, graceful pods,
            # namespaces); 202 only for the deprecated orphanDependents=false.
            accepted = not gone and opts.get("orphanDependents") is False
            return self._object_response(request, req, obj, 202 if accepted else 200)
        if verb == "deletecollection":
            if "deletecollection" not in rt.verbs:
                raise method_not_allowed()
            opts = await self._delete_options(request, req)
            labels = parse_label_selector(req.query.get("labelSelector"))
            fields = _fields(req.query.get("fieldSelector"), rt)
            items = self.registry.list(rt, req.namespace if rt.namespaced else None, labels, fields)
            out = []
            for o in items:
                try:
                    obj, _ = self.registry.delete(rt, o["metadata"].get("namespace", ""), o["metadata"]["name"], opts)
                    out.append(obj)
                except ApiError as e:
                    if e.code != 404:
                        raise
            return _json_response(self._list_doc(req, out, {"resourceVersion": str(self.store.rv)}))
        raise method_not_allowed()

    async def _review(self, request: web.Request, req: Request, verb: str) -> web.StreamResponse:
        """An access, rules or self-subject review (reviews.py): answered, never stored."""
        if verb != "create" or req.name is not None:
            raise method_not_allowed()
        rt = req.rt
        fv = _field_validation(req, "CreateOptions")
        body = await self._body(request, req, fv=fv)
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        decoded = self.registry.decode(rt, body, req.version, fv)
        if rt.kind.endswith("AccessReview"):
            manager = _manager(req, request)
            self.registry.track_new(rt, decoded, manager)
        if rt.kind == "TokenReview":
            token = str(((decoded.get("spec") or {}).get("token")) or "")
            status = serviceaccounts.review_token(self.store, token, issuer=f"https://{self.host}")
        else:
            status = None
        answer = reviews.answer(rt, req.namespace or "", decoded, now_iso(), token_status=status)
        return self._object_response(request, req, answer, 201, warnings=fv.warnings)

    async def _delete_options(self, request: web.Request, req: Request) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.startswith(protobuf.MAGIC):
                body = await self._protobuf_body(raw, req.rt, "the body is not DeleteOptions", "DeleteOptions")
                opts.update(body)
            elif raw.strip():
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError as e:
                    raise bad_request(f"couldn't get version/kind; json parse error: {e}") from None
                if not isinstance(body, dict):
                    raise bad_request("DeleteOptions must be a JSON object")
                opts.update(body)
        q = req.query
        if "gracePeriodSeconds" in q:
            opts["gracePeriodSeconds"] = go_int(q["gracePeriodSeconds"])
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        if q.get("orphanDependents") in ("true", "false"):
            opts["orphanDependents"] = q["orphanDependents"] == "true"
        if q.get("dryRun"):
            opts["dryRun"] = [q["dryRun"]]
        return opts

    # ---- representations ----------------------------------------------------------------------------------

    @staticmethod
    def _accept(request: web.Request) -> str:
        accept = request.headers.get("Accept", "")
        for part in accept.split(","):
            p = part.replace(" ", "")
            if "as=Table" in p:
                return "table"
            if "as=PartialObjectMetadataList" in p or "as=PartialObjectMetadata" in p:
                return "meta"
            if p.startswith(("application/json", "*/*", "application/*")) or p == "":
                return "json"
            if p.startswith("application/yaml"):
                return "json"
        if "protobuf" in accept and "json" not in accept:
            return "protobuf"  # built-in kinds only (_protobuf_response); JSON whenever the client takes it
        return "json"

    def _error_response(self, request: web.Request, e: ApiError) -> web.Response:
        """A Status: in protobuf for a client that takes nothing else (as the real server), else JSON."""
        accept = request.headers.get("Accept", "")
        table = self.registry.types.table if self.registry.types is not None else None
        if table is not None and "protobuf" in accept and "json" not in accept:
            with contextlib.suppress(protobuf.ProtobufError):
                body = protobuf.encode(e.status(), table)
                return web.Response(body=body, status=e.code, content_type=protobuf.CONTENT_TYPE, headers=e.headers)
        return _json_response(e.status(), e.code, e.headers)

    def _protobuf_response(self, req: Request, doc: Obj, status: int) -> web.Response:
        """A protobuf-only client's answer: the object in protobuf (built-in kinds), else 406."""
        table = self.registry.types.table if self.registry.types is not None else None
        if table is not None and not req.rt.custom:
            with contextlib.suppress(protobuf.ProtobufError):
                return web.Response(body=protobuf.encode(doc, table), status=status, content_type=protobuf.CONTENT_TYPE)
        if req.rt.custom:
            # the real server's words for a custom resource (its serializer list), whatever it says elsewhere
            raise ApiError(
                406,
                "only the following media types are accepted: application/json, application/yaml, "
                f"{protobuf.CONTENT_TYPE}",
                "NotAcceptable",
            )
        raise _not_acceptable()

    @staticmethod
    def _versioned(req: Request, obj: Obj) -> Obj:
        if req.rt.custom and req.version != req.rt.version:
            obj = dict(obj)
            obj["apiVersion"] = req.rt.api_version(req.version)
        return obj

    def _object_response(
        self, request: web.Request, req: Request, obj: Obj, status: int = 200, *, warnings: list[str] | None = None
    ) -> web.Response:
        resp = self._object_body(request, req, obj, status)
        for text in warnings or ():
            resp.headers.add("Warning", _warning(text))
        return resp

    def _object_body(self, request: web.Request, req: Request, obj: Obj, status: int) -> web.Response:
        mode = self._accept(request)
        if mode == "table":
            doc = tables.table(
                req.rt,
                req.version,
                [obj],
                {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                include_object=req.query.get("includeObject", "Metadata"),
            )
            return _json_response(doc, status)
        if mode == "meta":
            return _json_response(tables.partial_metadata(obj), status)
        if mode == "protobuf":
            return self._protobuf_response(req, self._versioned(req, obj), status)
        return _json_response(self._versioned(req, obj), status)

    def _list_doc(self, req: Request, items: list[Obj], meta: dict[str, Any]) -> Obj:
        if req.rt.custom:
            if req.version != req.rt.version:
                items = [self._versioned(req, o) for o in items]
        else:
            # the items of a built-in kind's list carry no apiVersion/kind (the typed list's items are structs)
            items = [{k: v for k, v in o.items() if k not in _TYPE_KEYS} for o in items]
        return {
            "kind": req.rt.list_kind,
            "apiVersion": req.rt.api_version(req.version),
            "metadata": meta,
            "items": items,
        }

    async def _list(self, request: web.Request, req: Request) -> web.Response:
        rt = req.rt
        q = req.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = _fields(q.get("fieldSelector"), rt)
        _check_list_options(q, watch=False)
        ns = req.namespace if rt.namespaced else None
        rv_s, cont = q.get("resourceVersion", ""), q.get("continue", "")
        at: int | None = None  # a list served at an older resourceVersion (a later page, or Exact)
        start = ""
        if cont:
            start, at = _decode_continue(cont)
        elif rv_s not in ("", "0"):
            wanted = _parse_rv(rv_s)
            await self._wait_for_rv(wanted)
            if q.get("resourceVersionMatch") == "Exact":
                at = wanted
        if at is not None and at < self.store.rv:
            state = self.store.state_at(rt.key, at, ns)
            if state is None:
                if cont:
                    raise expired(_CONTINUE_EXPIRED)
                raise expired("The resourceVersion for the provided list is too old.")
            items = [
                o for o in state if labels.matches(o["metadata"].get("labels")) and (fields.empty or fields.matches(o))
            ]
            rv = at
        else:
            items = self.registry.list(rt, ns, labels, fields)
            rv = self.store.rv if at is None else at
        items.sort(key=_list_key)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if start:
            items = [o for o in items if _key_path(o, ns) >= start]
        limit_s = q.get("limit")
        if limit_s:
            limit = go_int(limit_s)
            if 0 < limit < len(items):
                token = {"v": "meta.k8s.io/v1", "rv": rv, "start": _key_path(items[limit - 1], ns) + "\x00"}
                meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(token)).decode().rstrip("=")
                if labels.empty and fields.empty:  # the real storage counts the rest only without a selector
                    meta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
        mode = self._accept(request)
        if mode == "table":
            return _json_response(
                tables.table(rt, req.version, items, meta, include_object=req.query.get("includeObject", "Metadata"))
            )
        if mode == "meta":
            return _json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": [tables.partial_metadata(o) for o in items],
                }
            )
        if mode == "protobuf":
            return self._protobuf_response(req, self._list_doc(req, items, meta), 200)
        return _json_response(self._list_doc(req, items, meta))

    async def _wait_for_rv(self, wanted: int) -> None:
        """A resourceVersion newer than the server's: wait a little for it (as the watch cache waits to be
        fresh enough), then the real 504 Too large resource version."""
        deadline = time.monotonic() + _FRESHNESS_WAIT
        while self.store.rv < wanted:
            if time.monotonic() > deadline:
                raise ApiError(
                    504,
                    f"Timeout: Too large resource version: {wanted}, current: {self.store.rv}",
                    "Timeout",
                    {
                        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                        "retryAfterSeconds": 1,
                    },
                )
            await asyncio.sleep(0.05)

    # ---- watch --------------------------------------------------------------------------------------------

    def _frame(self, req: Request, mode: str, include: str, etype: str, ev: Event, *, first: bool) -> bytes:
        variant = (etype, mode, req.version if req.rt.custom else "", include if mode == "table" else "", first)
        cached = ev.frames.get(variant)
        if cached is not None:
            return cached
        obj = ev.obj
        if etype == "DELETED" and ev.type == "MODIFIED" and ev.old is not None:
            # leaving the selector: the object as the watcher last saw it, at the event's resourceVersion
            obj = dict(ev.old, metadata=dict(ev.old["metadata"], resourceVersion=obj["metadata"]["resourceVersion"]))
        if mode == "table":
            out: Any = tables.table(
                req.rt,
                req.version,
                [obj],
                {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                include_object=include,
                headers=first,
            )
        elif mode == "meta":
            out = tables.partial_metadata(obj)
        else:
            out = self._versioned(req, obj)
        frame = _dumps({"type": etype, "object": out}) + b"\n"
        ev.frames[variant] = frame
        return frame

    async def _watch(self, request: web.Request, req: Request, info: RequestInfo) -> web.StreamResponse:
        rt = req.rt
        q = req.query
        labels = parse_label_selector(q.get("labelSelector"))
        fields = _fields(q.get("fieldSelector"), rt)
        mode = self._accept(request)
        if mode == "protobuf":
            raise _not_acceptable()  # watch streams are JSON only
        include = q.get("includeObject", "Metadata")
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1", "True")
        timeout = self.default_watch_timeout
        if q.get("timeoutSeconds"):
            timeout = float(go_int(q["timeoutSeconds"]))
        _check_list_options(q, watch=True)
        rv_s = q.get("resourceVersion", "")
        send_initial = q.get("sendInitialEvents") == "true"
        since: int | None = None
        if rv_s not in ("", "0") and not send_initial:
            since = _parse_rv(rv_s)
        if since is not None and (
            self.store.too_old(rt.key, since) or self.faults.pick(info, "expire-watch") is not None
        ):
            gone = expired(f"too old resource version: {since} ({self.store.window_start(rt.key) + 1})")
            resp = web.StreamResponse(status=200, headers={"Content-Type": JSON_CT})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            await resp.write(_dumps({"type": "ERROR", "object": gone.status()}) + b"\n")
            await resp.write_eof()
            return resp
        cut = self.faults.pick(info, "cut-watch")
        deadline = time.monotonic() + (min(timeout, cut.after_seconds) if cut is not None else timeout)
        w = Watcher(rt.key, req.namespace if rt.namespaced else None, labels, fields)
        initial: list[Obj] = []
        if since is None:
            initial = self.registry.list(rt, w.namespace, labels, fields)
            initial.sort(key=_list_key)  # the watch cache sends what exists in key order
        start_rv = self.store.rv
        self.store.subscribe(w, since)  # no await between the snapshot and subscribing: nothing is missed
        resp = web.StreamResponse(status=200, headers={"Content-Type": JSON_CT})
        resp.enable_chunked_encoding()
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            await resp.prepare(request)
            first = True
            if initial:
                buf = []
                for o in initial:
                    ev = Event("ADDED", rt.key, o, None, start_rv)
                    buf.append(self._frame(req, mode, include, "ADDED", ev, first=first))
                    first = False
                await resp.write(b"".join(buf))
            if send_initial:
                bm = {
                    "kind": rt.kind,
                    "apiVersion": rt.api_version(req.version),
                    "metadata": {
                        "resourceVersion": str(start_rv),
                        "annotations": {"k8s.io/initial-events-end": "true"},
                    },
                }
                await resp.write(_dumps({"type": "BOOKMARK", "object": bm}) + b"\n")
            # as the watch cache: periodically, and once 2 s before the watch times out (so a client resumes
            # from a recent resourceVersion)
            pretimeout = deadline - 2.0
            next_bookmark = time.monotonic() + self.bookmark_interval
            if time.monotonic() <= pretimeout < next_bookmark:
                next_bookmark = pretimeout
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = deadline - now
                if bookmarks:
                    wait = min(wait, max(0.0, next_bookmark - now))
                try:
                    item = await asyncio.wait_for(w.queue.get(), timeout=wait)
                except TimeoutError:
                    if bookmarks and time.monotonic() >= next_bookmark:
                        bm = {
                            "kind": rt.kind,
                            "apiVersion": rt.api_version(req.version),
                            "metadata": {"resourceVersion": str(self.store.rv)},
                        }
                        await resp.write(_dumps({"type": "BOOKMARK", "object": bm}) + b"\n")
                        next_bookmark = time.monotonic() + self.bookmark_interval
                    continue
                if item is None:
                    break
                buf = [self._frame(req, mode, include, item[0], item[1], first=first)]
                first = False
                while not w.queue.empty():
                    more = w.queue.get_nowait()
                    if more is None:
                        await resp.write(b"".join(buf))
                        return resp
                    buf.append(self._frame(req, mode, include, more[0], more[1], first=False))
                await resp.write(b"".join(buf))
            if cut is None:
                await resp.write_eof()
            elif request.transport is not None:
                request.transport.close()  # an abrupt cut, like a dropped connection
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unsubscribe(w)
            self._streams.discard(task)
        return resp

    # ---- pods: log, binding, eviction ---------------------------------------------------------------------

    async def _log(self, request: web.Request, req: Request) -> web.StreamResponse:
        """``pods/{name}/log``: validate as kube-apiserver does, then stream from the node's kubelet over HTTPS."""
        assert req.name is not None
        ns = req.namespace or ""
        pod = self.registry.get(req.rt, ns, req.name)
        spec = pod.get("spec") or {}
        containers = [c.get("name") for c in spec.get("containers") or []]
        init = [c.get("name") for c in spec.get("initContainers") or []]
        q = req.query
        container = q.get("container")
        if not container:
            if len(containers) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {req.name}, choose one of: "
                    f"[{' '.join(str(c) for c in containers)}]"
                )
            container = str(containers[0])
        if container not in containers and container not in init:
            raise bad_request(f"container {container} is not valid for pod {req.name}")
        _validate_log_options(req.name, q)
        node_name = spec.get("nodeName")
        if not node_name:
            return web.Response(status=204)  # not scheduled: no content, as the real one
        node = self.store.get(("", "nodes"), "", str(node_name))
        if node is None:
            raise not_found("", "nodes", str(node_name))
        status = node.get("status") or {}
        ip = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        if not ip or not port:
            raise ApiError(
                500, f"node {node_name} has no kubelet endpoint (InternalIP and daemonEndpoints)", "InternalError"
            )
        params = {k: q[k] for k in _LOG_PARAMS if k in q}
        path = "/".join(quote(part, safe="") for part in (ns, req.name, container))
        url = f"https://{ip}:{port}/containerLogs/{path}"
        session = self._kubelet_session()
        try:
            upstream = await session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=None, connect=10))
        except (aiohttp.ClientError, OSError) as e:
            raise ApiError(500, f'Get "{url}": {e}', "InternalError") from None
        try:
            if upstream.status != 200:
                text = (await upstream.read()).decode("utf-8", "replace")[:4096]
                if upstream.status == 400:
                    raise bad_request(text)
                raise ApiError(upstream.status, text, "NotFound" if upstream.status == 404 else "")
            follow = q.get("follow") in ("true", "1")
            if not follow:
                return web.Response(body=await upstream.read(), content_type="text/plain")
            resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            resp.enable_chunked_encoding()
            task = asyncio.current_task()
            assert task is not None
            self._streams.add(task)
            try:
                await resp.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
            except (ConnectionResetError, asyncio.CancelledError, aiohttp.ClientError):
                pass
            finally:
                self._streams.discard(task)
            return resp
        finally:
            upstream.release()

    async def _exec(self, request: web.Request, req: Request) -> web.StreamResponse:
        """``pods/{name}/exec``: a WebSocket (``v5.channel.k8s.io``) proxied to the node's kubelet ``/exec``, as
        kube-apiserver 1.37 proxies it to a kubelet declaring ``ExtendWebSocketsToKubelet``
        (``kubedl_local.node.execs``). SPDY is not served: kubectl uses WebSockets first."""
        assert req.name is not None
        ns = req.namespace or ""
        pod = self.registry.get(req.rt, ns, req.name)
        spec = pod.get("spec") or {}
        containers = [str(c.get("name")) for c in spec.get("containers") or []]
        container = req.query.get("container") or ""
        if not container:
            if len(containers) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {req.name}, choose one of: [{' '.join(containers)}]"
                )
            container = containers[0]
        if container not in containers:
            raise bad_request(f"container {container} is not valid for pod {req.name}")
        if request.headers.get("Upgrade", "").lower() != "websocket":
            raise bad_request("Upgrade request required")
        node_name = spec.get("nodeName")
        if not node_name:
            raise bad_request(f"pod {req.name} does not have a host assigned")
        ip, port = self._kubelet_endpoint(str(node_name))
        query: list[tuple[str, str]] = [("command", c) for c in request.query.getall("command", [])]
        for ours, theirs in (("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty")):
            if request.query.get(ours, "").lower() in ("1", "true"):
                query.append((theirs, "1"))
        path = "/".join(quote(part, safe="") for part in (ns, req.name, container))
        url = URL(f"https://{ip}:{port}/exec/{path}").with_query(query)
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        try:
            upstream = await self._kubelet_session().ws_connect(url, protocols=offered, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as e:
            raise ApiError(e.status if e.status >= 400 else 500, e.message or str(e), "") from None
        except (aiohttp.ClientError, OSError) as e:
            raise ApiError(500, f'error dialing backend "{url}": {e}', "InternalError") from None
        client = web.WebSocketResponse(protocols=(upstream.protocol,) if upstream.protocol else (), max_msg_size=0)
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            await client.prepare(request)

            async def down() -> None:
                async for message in upstream:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        await client.send_bytes(message.data)
                    elif message.type == aiohttp.WSMsgType.TEXT:
                        await client.send_str(message.data)

            async def up() -> None:
                async for message in client:
                    if message.type == aiohttp.WSMsgType.BINARY:
                        await upstream.send_bytes(message.data)
                    elif message.type == aiohttp.WSMsgType.TEXT:
                        await upstream.send_str(message.data)

            downward = asyncio.create_task(down())
            upward = asyncio.create_task(up())
            # the command's end (the kubelet closes) ends the exec; a client gone ends it too
            await asyncio.wait({downward, upward}, return_when=asyncio.FIRST_COMPLETED)
            for pending in (downward, upward):
                pending.cancel()
            await asyncio.gather(downward, upward, return_exceptions=True)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            await upstream.close()
            await client.close()
            self._streams.discard(task)
        return client

    def _kubelet_endpoint(self, node_name: str) -> tuple[str, int]:
        node = self.store.get(("", "nodes"), "", node_name)
        if node is None:
            raise not_found("", "nodes", node_name)
        status = node.get("status") or {}
        ip = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
        port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        if not ip or not port:
            raise ApiError(
                500, f"node {node_name} has no kubelet endpoint (InternalIP and daemonEndpoints)", "InternalError"
            )
        return str(ip), int(port)

    def _kubelet_session(self) -> aiohttp.ClientSession:
        if self._kubelet is None or self._kubelet.closed:
            self._kubelet = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.kubelet_ssl, limit=64), auto_decompress=False
            )
        return self._kubelet

    def _binding(self, req: Request, body: Any) -> web.Response:
        assert req.name is not None
        if not isinstance(body, dict) or not isinstance(body.get("target"), dict):
            raise bad_request("a Binding needs target")
        node = body["target"].get("name")
        if not node:
            raise bad_request("a Binding needs target.name")
        bind_pod(self.registry, req.namespace or "", req.name, str(node))
        return _json_response({**_status_ok(), "code": 201}, 201)

    def _eviction(self, req: Request, body: Any) -> web.Response:
        assert req.name is not None
        opts = (body.get("deleteOptions") if isinstance(body, dict) else None) or {}
        # As kube-apiserver: the pod is marked as disrupted before it is deleted (gracefully), so its owner can
        # tell an eviction from the program's own end.
        pod = self.registry.get(req.rt, req.namespace or "", req.name)
        marked = with_disruption(pod, "EvictionByEvictionAPI", "Eviction API: evicting")
        if marked is not None:
            marked["metadata"] = dict(pod["metadata"], resourceVersion=str(self.store.next_rv()))
            self.store.put(req.rt.key, marked, pod)
        self.registry.delete(req.rt, req.namespace or "", req.name, opts)
        return _json_response({**_status_ok(), "code": 201}, 201)

    def _finalize_namespace(self, req: Request, body: Any) -> web.Response:
        assert req.name is not None
        rt = req.rt
        old = self.registry.get(rt, "", req.name)
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        new = dict(old)
        new["spec"] = {"finalizers": list((body.get("spec") or {}).get("finalizers") or [])}
        new["metadata"] = dict(old["metadata"])
        if (
            old["metadata"].get("deletionTimestamp")
            and not new["spec"]["finalizers"]
            and not new["metadata"].get("finalizers")
        ):
            self.store.remove(rt.key, old)
            return _json_response(new)
        new["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.key, new, old)
        return _json_response(new)


_TYPE_KEYS = ("apiVersion", "kind")
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of "
    "the results. Continuing with the provided token results in an inconsistent list - objects that were "
    "created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
)
#: how long a list or watch waits for a resourceVersion the server has not reached (the watch cache's 3 s)
_FRESHNESS_WAIT = 3.0


def _list_key(o: Obj) -> tuple[str, str]:
    md = o["metadata"]
    return (md.get("namespace", ""), md["name"])


def _key_path(o: Obj, ns: str | None) -> str:
    """An object's etcd key below the list's prefix: ``/name`` in a namespace, ``/ns/name`` across them."""
    md = o["metadata"]
    if ns is None and md.get("namespace"):
        return f"/{md['namespace']}/{md['name']}"
    return f"/{md['name']}"


def _parse_rv(raw: str) -> int:
    if not raw.isdigit():
        raise ApiError(
            500, f'resourceVersion: Invalid value: "{raw}": strconv.ParseUint: parsing "{raw}": invalid syntax', ""
        )
    return int(raw)


def _decode_continue(token: str) -> tuple[str, int]:
    """storage.DecodeContinue: (start key, resourceVersion), with the real server's 400s."""
    prefix = "invalid continue token: continue key is not valid"
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i, ch in enumerate(token):
        if ch not in alphabet:
            raise bad_request(f"{prefix}: illegal base64 data at input byte {i}")
    if len(token) % 4 == 1:
        raise bad_request(f"{prefix}: illegal base64 data at input byte {len(token) - 1}")
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    why = jsonsyntax.syntax_error(raw)
    if why is not None:
        raise bad_request(f"{prefix}: {why}")
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise bad_request(f"{prefix}: invalid continue token") from None
    if not isinstance(parsed, dict):
        raise bad_request(
            f"{prefix}: json: cannot unmarshal {_json_kind(parsed)} into Go value of type storage.continueToken"
        )
    version = parsed.get("v", "")
    if version != "meta.k8s.io/v1":
        raise bad_request(f"{prefix}: server does not recognize this encoded version {version}")
    rv = parsed.get("rv")
    if not isinstance(rv, int) or rv == 0:
        raise bad_request(f"{prefix}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    start = parsed.get("start")
    if not isinstance(start, str) or not start:
        raise bad_request(f"{prefix}: encoded start key empty (version meta.k8s.io/v1)")
    return start, rv


def _check_list_options(q: dict[str, str], *, watch: bool) -> None:
    """ValidateListOptions of the real server (422 ListOptions)."""
    match = q.get("resourceVersionMatch", "")
    initial = q.get("sendInitialEvents")
    errs: list[FieldError] = []
    if watch:
        if initial is not None and match != "NotOlderThan":
            errs.append(
                FieldError(
                    "FieldValueForbidden",
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )
            )
        if match:
            if initial is None:
                errs.append(
                    FieldError(
                        "FieldValueForbidden",
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    )
                )
            if match != "NotOlderThan":
                errs.append(
                    FieldError(
                        "FieldValueNotSupported", "resourceVersionMatch", 'supported values: "NotOlderThan"', match
                    )
                )
            if q.get("continue"):
                errs.append(
                    FieldError(
                        "FieldValueForbidden",
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    )
                )
    else:
        if match:
            if not q.get("resourceVersion"):
                errs.append(
                    FieldError(
                        "FieldValueForbidden",
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    )
                )
            if q.get("continue"):
                errs.append(
                    FieldError(
                        "FieldValueForbidden",
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    )
                )
            if match not in ("Exact", "NotOlderThan"):
                errs.append(
                    FieldError(
                        "FieldValueNotSupported",
                        "resourceVersionMatch",
                        'supported values: "Exact", "NotOlderThan", ""',
                        match,
                    )
                )
            if match == "Exact" and q.get("resourceVersion") == "0":
                errs.append(
                    FieldError(
                        "FieldValueForbidden",
                        "resourceVersionMatch",
                        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                    )
                )
        if initial is not None:
            errs.append(
                FieldError("FieldValueForbidden", "sendInitialEvents", "sendInitialEvents is forbidden for list")
            )
    if errs:
        raise invalid("ListOptions", "meta.k8s.io", "", "", errs)


_LOG_PARAMS = ("follow", "tailLines", "limitBytes", "sinceSeconds", "sinceTime", "timestamps", "previous")


def _unverified_ssl() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _validate_log_options(name: str, q: dict[str, str]) -> None:
    """PodLogOptions validation of kube-apiserver (422 Invalid)."""
    errs: list[FieldError] = []
    for field, minimum in (("tailLines", 0), ("limitBytes", 1), ("sinceSeconds", 1)):
        raw = q.get(field)
        if raw is None or raw == "":
            continue
        value = go_int(raw)
        if value < minimum:
            why = "must be greater than or equal to 0" if minimum == 0 else "must be greater than 0"
            errs.append(FieldError("FieldValueInvalid", field, why, value))
    if q.get("sinceSeconds") and q.get("sinceTime"):
        errs.append(
            FieldError("FieldValueForbidden", "[]", "at most one of `sinceTime` or `sinceSeconds` may be specified")
        )
    if errs:
        raise invalid("PodLogOptions", "", "", name, errs)


def bind_pod(registry: Registry, ns: str, name: str, node: str) -> Obj:
    """Bind a pod to a node (the ``pods/binding`` subresource), setting PodScheduled=True."""
    rt = registry.resource("", "pods")
    pod = registry.get(rt, ns, name)
    spec = pod.get("spec") or {}
    if pod["metadata"].get("deletionTimestamp"):
        raise conflict("", "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
    if spec.get("nodeName"):
        raise conflict("", "pods/binding", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"')
    if registry.store.get(("", "nodes"), "", node) is None:
        raise not_found("", "nodes", node)
    new = dict(pod)
    new["spec"] = dict(spec, nodeName=node)
    status = dict(pod.get("status") or {})
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_iso()})
    status["conditions"] = conds
    new["status"] = status
    new["metadata"] = dict(pod["metadata"], resourceVersion=str(registry.store.next_rv()))
    registry.store.put(rt.key, new, pod)
    return new
