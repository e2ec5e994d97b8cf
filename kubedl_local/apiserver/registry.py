"""Object semantics shared by every writer: the generic registry of the real API server.

HTTP handlers, the scheduler, kubelets and controllers inside the embedded cluster all change objects
through :class:`Registry`, so uid/resourceVersion/generation bookkeeping, status subresources, optimistic
concurrency, finalizers and graceful deletion behave the same no matter who writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import random
import time
import uuid
from collections.abc import Iterable
from typing import Any

import orjson

from kubedl_local.apiserver import admission, cel, fieldmanager, schema, serviceaccounts, validation
from kubedl_local.apiserver.crd import CRD_CLEANUP_FINALIZER, default_crd, validate_crd
from kubedl_local.apiserver.errors import (
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid,
    not_found,
    stale,
    too_large,
)
from kubedl_local.apiserver.patch import (
    deepcopy_json,
    go_json_patch_text,
    go_merge_patch_text,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from kubedl_local.apiserver.resources import Catalogue, ResourceType
from kubedl_local.apiserver.selection import FieldSelector, LabelSelector
from kubedl_local.apiserver.typed import OBJECT_META, DecodeError, Types
from kubedl_local.storage.store import Event, Obj, Store, now_iso

log = logging.getLogger(__name__)
#: our own generator: background threads must not move the global one (tests seed it; hypothesis checks it)
_RNG = random.Random()

#: a managedFields list (the class's own ``list`` method shadows the builtin in its annotations)
Entries = list[Obj]
MAX_OBJECT_BYTES = 1_572_864
_GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"

# Kinds whose metadata.generation is maintained.
_GENERATION = {("", "pods"), ("apiextensions.k8s.io", "customresourcedefinitions")}
# Built-in kinds whose DELETE answers with the object rather than a success Status (custom resources always do).
RETURN_DELETED = frozenset({("", "pods"), ("", "services")})
#: the namespaces the real server's namespace lifecycle admission refuses to delete
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
# Kinds that PUT may create (AllowCreateOnUpdate in the real strategies).
_CREATE_ON_UPDATE = {("", "endpoints"), ("coordination.k8s.io", "leases"), ("", "events")}


class _DecodeFailure(ApiError):
    """A body that does not decode into the kind's Go struct (a 400; ``detail`` is the decoder's words)."""

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(400, message, "BadRequest")
        self.detail = detail


def _without_managed(obj: Obj) -> Obj:
    md = obj.get("metadata")
    if not isinstance(md, dict) or "managedFields" not in md:
        return obj
    return {**obj, "metadata": {k: v for k, v in md.items() if k != "managedFields"}}


class FieldValidation:
    """What one request's ``fieldValidation`` asks for, and the unknown (or repeated) fields of its body.

    ``Strict``: unknown fields are a 400 (kubectl's default). ``Warn`` (also the default of a request
    without the parameter): each becomes a ``Warning`` header on the response (``warnings``). ``Ignore``:
    nothing is said. Either way they are dropped, as decoding into the Go struct (or pruning) drops them.
    """

    __slots__ = ("events", "mode", "sorted", "unknown", "warnings")

    def __init__(self, mode: str = "Ignore") -> None:
        self.mode = mode
        self.unknown: list[str] = []
        self.warnings: list[str] = []
        #: report unknown fields in name order (custom resources: what structural pruning finds, sorted)
        self.sorted = False
        #: the body's keys in document order with repeats (jsonsyntax.key_events), when it was JSON
        self.events: list[tuple[str, bool]] | None = None

    def check(self, kind: str, version: str) -> None:
        """Report the unknown (and duplicate) fields found so far, as the mode says (raises for Strict),
        in the order the real server meets them: the body's document order."""
        events, self.events = self.events, None
        unknown, self.unknown = self.unknown, []
        messages: list[str] = []
        if self.sorted:
            messages = [f'unknown field "{path}"' for path in sorted(set(unknown))]
            messages += [f'duplicate field "{path}"' for path, repeated in events or () if repeated]
        elif events:
            pending = set(unknown)
            for path, repeated in events:
                if path in pending:
                    messages.append(f'unknown field "{path}"')
                    pending.discard(path)
                if repeated:
                    messages.append(f'duplicate field "{path}"')
            messages += [f'unknown field "{path}"' for path in unknown if path in pending]
        else:
            messages = [f'unknown field "{path}"' for path in unknown]
        if not messages:
            return
        if self.mode == "Strict":
            raise bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: '
                f"strict decoding error: {', '.join(messages)}"
            )
        if self.mode == "Warn":
            self.warnings.extend(messages)


IGNORE = FieldValidation()


def dry_run_errors(dry_run: Any) -> list[FieldError]:
    """ValidateDryRun: "All" is the only value there is."""
    if dry_run is None:
        return []
    values = dry_run if isinstance(dry_run, list) else [dry_run]
    if all(v == "All" for v in values):
        return []
    return [FieldError("FieldValueNotSupported", "dryRun", 'supported values: "All"', values)]


def parse_time(text: str) -> float:
    return dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp()


def iso_at(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Registry:
    def __init__(
        self, store: Store, catalogue: Catalogue, *, service_cidr: str = "127.1.0.0/16", toleration_seconds: int = 300
    ) -> None:
        self.store = store
        self.catalogue = catalogue
        #: the Go structs of the built-in kinds (typed.Types), once the API server has loaded the table;
        #: without them built-in bodies are stored as sent
        self.types: Types | None = None
        #: the built-in OpenAPI documents by path (openapi.ensure_specs), once the API server has them: the
        #: types managedFields and server-side apply work with (without them objects are "deduced")
        self.openapi_docs: dict[str, bytes] | None = None
        self._parsed_docs: dict[str, Obj] = {}
        self._field_managers: dict[tuple[Any, ...], tuple[Any, fieldmanager.Manager]] = {}
        self.ips = admission.IPAllocator(service_cidr)
        self.toleration_seconds = toleration_seconds
        self.node_ports: set[int] = set()
        for svc in store.iter(("", "services")):
            ip = (svc.get("spec") or {}).get("clusterIP")
            if ip and ip != "None":
                self.ips.used.add(ip)
            for p in (svc.get("spec") or {}).get("ports") or []:
                if p.get("nodePort"):
                    self.node_ports.add(p["nodePort"])
        store.listeners.append(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if ev.type == "DELETED" and ev.rkey == ("", "services"):
            spec = ev.obj.get("spec") or {}
            self.ips.release(spec.get("clusterIP"))
            for p in spec.get("ports") or []:
                self.node_ports.discard(p.get("nodePort", 0))

    # ---- helpers ------------------------------------------------------------------------------------------

    def resource(self, group: str, plural: str) -> ResourceType:
        rt = self.catalogue.types.get((group, plural))
        if rt is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return rt

    # ---- field management ---------------------------------------------------------------------------------

    def _components(self, key: str) -> dict[str, Obj]:
        doc = self._parsed_docs.get(key)
        if doc is None:
            raw = (self.openapi_docs or {}).get(key)
            doc = orjson.loads(raw) if raw else {}
            self._parsed_docs[key] = doc
        components: dict[str, Obj] = (doc.get("components") or {}).get("schemas") or {}
        return components

    def field_manager(self, rt: ResourceType, version: str | None = None) -> fieldmanager.Manager:
        """The field manager of a kind at a version: its type from the OpenAPI documents (built-in kinds)
        or the CRD's schema (custom resources), ``metadata`` typed as ObjectMeta."""
        version = version or rt.version
        source: Any = rt.schemas.get(version) if rt.custom else None
        key = (rt.key, version, rt.custom)
        cached = self._field_managers.get(key)
        if cached is not None and cached[0] is source:
            return cached[1]
        meta_name = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        if rt.custom:
            schemas = fieldmanager.Schemas(self._components("api/v1"))
            top = schemas.type_of(source) if source else schemas.type_of(None)
        else:
            doc = "api/v1" if not rt.group else f"apis/{rt.group}/{version}"
            schemas = fieldmanager.Schemas(self._components(doc))
            model = next(
                (
                    name
                    for name, sch in schemas.components.items()
                    if {"group": rt.group, "version": version, "kind": rt.kind}
                    in (sch.get("x-kubernetes-group-version-kind") or [])
                ),
                None,
            )
            found = schemas.named(model) if model else None
            top = found if found is not None else schemas.type_of(None)
        meta = schemas.named(meta_name) or fieldmanager.object_meta_fallback()
        manager = fieldmanager.Manager(schemas, fieldmanager.Root(schemas, top, meta), rt.api_version(version), now_iso)
        self._field_managers[key] = (source, manager)
        return manager

    def _track(
        self,
        rt: ResourceType,
        live: Obj | None,
        obj: Obj,
        manager: str,
        *,
        requested: Any,
        subresource: str | None,
    ) -> None:
        """Record an Update by ``manager`` in ``obj``'s managedFields (the real server's field manager:
        what it added or changed is its own, others lose it). ``requested``: the managedFields the request
        carried (used when it sets them, ignored for subresources)."""
        old_entries = (live or {}).get("metadata", {}).get("managedFields")
        if subresource is None and fieldmanager.is_reset(requested):
            base: fieldmanager.Managers = {}
        else:
            base = fieldmanager.decode_managers(requested) if subresource is None else {}
            if not base:
                base = fieldmanager.decode_managers(old_entries)
        md = obj["metadata"]
        if live is not None and not base:
            md.pop("managedFields", None)  # skipNonApplied: an object nobody tracked stays untracked on update
            return
        try:
            entries = self.field_manager(rt).update(
                _without_managed(live) if live is not None else {},
                _without_managed(obj),
                base,
                manager,
                subresource or "",
            )
        except fieldmanager.ItemError:
            # UpdateNoErrors: the live object's entries stay as they were
            if old_entries is not None:
                md["managedFields"] = old_entries
            else:
                md.pop("managedFields", None)
            return
        encoded = fieldmanager.encode_managers(entries)
        if encoded:
            md["managedFields"] = encoded
        else:
            md.pop("managedFields", None)

    def _check_namespace(self, rt: ResourceType, ns: str, creating: bool, name: str) -> None:
        if not rt.namespaced:
            return
        nso = self.store.get(("", "namespaces"), "", ns)
        if nso is None:
            raise not_found("", "namespaces", ns)
        if creating and nso["metadata"].get("deletionTimestamp"):
            err = forbidden(
                rt.group,
                rt.plural,
                name,
                f"unable to create new content in namespace {ns} because it is being terminated",
            )
            assert err.details is not None
            err.details["causes"] = [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {ns} is being terminated",
                    "field": "metadata.namespace",
                }
            ]
            raise err

    def _commit(self, rt: ResourceType, obj: Obj, old: Obj | None) -> Obj:
        obj["metadata"]["resourceVersion"] = str(self.store.next_rv())
        self.store.put(rt.key, obj, old)
        return obj

    def _size_check(self, obj: Obj) -> None:
        if len(orjson.dumps(obj)) > MAX_OBJECT_BYTES:
            raise too_large(f"Request entity too large: limit is {MAX_OBJECT_BYTES}")

    def _check_body(self, rt: ResourceType, body: Any, version: str, fv: FieldValidation = IGNORE) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        api_version = body.get("apiVersion")
        kind = body.get("kind")
        want = rt.api_version(version)
        if rt.custom:
            if api_version is not None and api_version != want:
                sent_group, _, sent_version = str(api_version).rpartition("/")
                if kind == rt.kind and sent_group == rt.group:
                    # Decoding prunes with the schema of the version sent (none for an unknown one: all but
                    # apiVersion, kind and metadata is unknown), before the handler compares versions.
                    removed: list[str] = []
                    copy = deepcopy_json(body)
                    sent_schema = rt.schemas.get(sent_version) or {"type": "object"}
                    schema.prune(copy, sent_schema, root=True, removed=removed)
                    fv.unknown.extend(removed)
                    fv.sorted = True
                    fv.check(rt.kind, sent_version)
                err = bad_request(
                    f"the API version in the data ({api_version}) does not match the expected API version ({want})"
                )
                err.warnings = fv.warnings
                raise err
            if kind is not None and kind != rt.kind:
                # the custom resource validator's ValidateTypeMeta: a 422 naming the kind that was sent
                name = str((body.get("metadata") or {}).get("name") or "")
                why = [FieldError("FieldValueInvalid", "kind", f"must be {rt.kind}", kind)]
                raise invalid(str(kind), rt.group, rt.plural, name, why)
        elif (api_version is not None and api_version != want) or (kind is not None and kind != rt.kind):
            # What the real server's scheme says: an unknown group version/kind, or a known kind of another type.
            data_version = str(api_version or want)
            data_kind = str(kind or rt.kind)
            short = data_version.rsplit("/", 1)[-1]
            known = self.catalogue.by_kind(rt.group, data_kind) is not None and data_version == want
            if not known:
                raise bad_request(
                    f'{data_kind} in version "{short}" cannot be handled as a {rt.kind}: no kind "{data_kind}" is '
                    f'registered for version "{data_version}" in scheme "pkg/runtime/scheme.go:111"'
                )
            internal = rt.group.split(".", 1)[0] if rt.group else "core"
            raise bad_request(
                f'{data_kind} in version "{short}" cannot be handled as a {rt.kind}: converting '
                f"({short}.{data_kind}) to ({internal}.{rt.kind}): unknown conversion"
            )
        if body.get("metadata") is None:
            body["metadata"] = {}
        obj: Obj = self._typed(rt, body, version, fv)
        if not isinstance(obj.get("metadata"), dict):
            raise bad_request("metadata must be an object")
        if rt.custom:
            fv.sorted = True
            self._prepare_custom(rt, obj, fv)  # pruning is part of decoding a custom resource
        fv.check(rt.kind, version)
        obj["apiVersion"] = rt.api_version()  # stored at the storage version; served per request
        obj["kind"] = rt.kind
        return obj

    def decode(self, rt: ResourceType, body: Obj, version: str | None = None, fv: FieldValidation = IGNORE) -> Obj:
        """A body decoded as the real server decodes one (the Go struct and back), unknown fields per ``fv``."""
        obj = self._check_body(rt, body, version or rt.version, fv)
        return obj

    def track_new(self, rt: ResourceType, obj: Obj, manager: str) -> None:
        """The managedFields a create by ``manager`` records (for answers built from the request: reviews)."""
        self._track(rt, None, obj, manager, requested=obj["metadata"].get("managedFields"), subresource=None)

    def _typed(self, rt: ResourceType, body: Obj, version: str, fv: FieldValidation) -> Obj:
        """Decode as the real server does (typed.py): a built-in kind into its Go struct and back, a custom
        resource's metadata into ObjectMeta. Unknown fields are noted in ``fv``."""
        types = self.types
        if types is None:
            return body
        try:
            if rt.custom:
                decoded = types.decode_part(body["metadata"], OBJECT_META, "metadata")
                body["metadata"] = decoded.obj
            else:
                message = types.message_for(rt.api_version(version), rt.kind)
                if message is None:
                    return body
                decoded = types.decode({**body, "apiVersion": rt.api_version(version), "kind": rt.kind}, message)
                body = decoded.obj
        except DecodeError as e:
            raise _DecodeFailure(
                f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: {e}', str(e)
            ) from None
        fv.unknown.extend(decoded.unknown)
        return body

    def _validate(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        plural = rt.plural if not rt.group else ""
        if plural == "events":
            errs = admission.validate_event(obj)  # core/v1 events get only the legacy checks, no ObjectMeta ones
        else:
            errs = admission.check_metadata(rt.plural, obj["metadata"], kube_finalizers=not rt.custom and not rt.group)
        if rt.custom:
            sch = rt.schemas.get(rt.version)
            if sch:
                found = schema.validate_object(obj, sch)
                errs += found
                if rt.rules.get(rt.version):
                    # As the real server: CEL rules run unless the schema found a wrong type or enum value.
                    errs += [cel.not_checked()] if cel.blocking(found) else cel.validate(obj, sch, old)
        elif plural == "pods":
            errs += admission.validate_pod(obj)
            if old is not None:
                errs += admission.validate_pod_update(obj, old)
        elif plural == "services":
            errs += admission.validate_service(obj)
        elif plural == "secrets":
            errs += admission.validate_secret(obj, old)
        elif plural == "configmaps":
            errs += admission.validate_configmap(obj, old)
        elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            errs += validate_crd(obj)
        if old is not None:
            old_fin = set(old["metadata"].get("finalizers") or [])
            added = set(obj["metadata"].get("finalizers") or []) - old_fin
            if old["metadata"].get("deletionTimestamp") and added:
                errs.insert(
                    0,
                    FieldError(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted, found new finalizers "
                        + validation.go_string_set(sorted(added)),
                    ),
                )
        if errs:
            raise invalid(rt.kind, rt.group, rt.plural, obj["metadata"].get("name", ""), errs)

    def _prepare_custom(self, rt: ResourceType, obj: Obj, fv: FieldValidation = IGNORE) -> None:
        sch = rt.schemas.get(rt.version)
        if sch:
            removed: list[str] = []
            schema.prune(obj, sch, root=True, removed=removed)
            fv.unknown.extend(removed)
            schema.apply_defaults(obj, sch)

    # ---- reads --------------------------------------------------------------------------------------------

    def get(self, rt: ResourceType, ns: str, name: str) -> Obj:
        obj = self.store.get(rt.key, ns if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return obj

    def list(self, rt: ResourceType, ns: str | None, labels: LabelSelector, fields: FieldSelector) -> list[Obj]:
        if fields.namespace is not None:
            if ns is not None and ns != fields.namespace:
                return []
            ns = fields.namespace
        if fields.name is not None:
            if ns is not None or not rt.namespaced:
                o = self.store.get(rt.key, ns or "", fields.name)
                cands: Iterable[Obj] = [o] if o is not None else []
            else:
                cands = self.store.iter(rt.key, None)
        else:
            cands = self.store.iter(rt.key, ns if rt.namespaced else None)
        if labels.empty and fields.empty:
            return list(cands)
        return [o for o in cands if labels.matches(o["metadata"].get("labels")) and fields.matches(o)]

    # ---- create -------------------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        ns: str,
        body: Any,
        version: str | None = None,
        *,
        dry_run: bool = False,
        validation: FieldValidation = IGNORE,
        manager: str | None = None,
        managed: Entries | None = None,
    ) -> Obj:
        """Create; ``manager`` (a request's field manager) records an Update in managedFields, ``managed``
        (server-side apply) sets them; in-process writers give neither."""
        obj = self._check_body(rt, body, version or rt.version, validation)
        md = obj["metadata"]
        requested = md.get("managedFields")
        if rt.namespaced:
            body_ns = md.get("namespace")
            if body_ns and body_ns != ns:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if md.get("resourceVersion") and not dry_run:
            # The real server's storage layer refuses this as an internal error, without a reason.
            raise ApiError(500, "resourceVersion should not be set on objects to be created", "")
        name = md.get("name")
        if not name:
            gen = md.get("generateName")
            if not gen:
                raise invalid(
                    rt.kind,
                    rt.group,
                    rt.plural,
                    "",
                    [FieldError("FieldValueRequired", "metadata.name", "name or generateName is required")],
                )
            for _ in range(8):
                name = str(gen)[:58] + "".join(_RNG.choices(_GEN_CHARS, k=5))
                if self.store.get(rt.key, ns if rt.namespaced else "", name) is None:
                    break
            md["name"] = name
        if not isinstance(name, str):
            raise bad_request("metadata.name must be a string")
        self._check_namespace(rt, ns, True, name)
        if self.store.get(rt.key, ns if rt.namespaced else "", name) is not None:
            raise already_exists(rt.group, rt.plural, name)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_iso()
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
            md.pop(k, None)
        if rt.key in _GENERATION or rt.custom:
            md["generation"] = 1
        else:
            md.pop("generation", None)
        if rt.has_status and rt.key != ("", "nodes"):
            obj.pop("status", None)
        self._default(rt, obj)
        if managed is not None:
            if managed:
                md["managedFields"] = managed
        elif manager is not None:
            self._track(rt, None, obj, manager, requested=requested, subresource=None)
        self._admit(rt, obj)
        if rt.key == ("", "pods"):
            serviceaccounts.admit_pod(self.store, obj)  # the ServiceAccount admission plugin's volume
        self._validate(rt, obj, None)
        self._size_check(obj)
        if rt.key == ("", "services"):
            ip, ports = self._allocate_service(obj, dry_run=dry_run)
            if dry_run:  # show what would be allocated, but keep nothing
                self.ips.release(ip)
                self.node_ports.difference_update(ports)
        if dry_run:
            return obj
        return self._commit(rt, obj, None)

    def _default(self, rt: ResourceType, obj: Obj) -> None:
        """The defaults the real server applies when it decodes a body (SetDefaults_*): what the client's
        field manager is taken to have set."""
        if rt.custom:
            self._prepare_custom(rt, obj)
            return
        if rt.group:
            if rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                default_crd(obj)
            return
        if rt.plural == "pods":
            admission.default_pod_fields(obj)
        elif rt.plural == "services":
            admission.default_service(obj)
        elif rt.plural == "secrets":
            admission.default_secret(obj)

    def _admit(self, rt: ResourceType, obj: Obj) -> None:
        """What the create strategies and admission plugins add after decoding (nobody's field manager)."""
        if rt.key == ("", "pods"):
            admission.admit_pod(obj, self.toleration_seconds)
        elif rt.key == ("", "namespaces"):
            admission.default_namespace(obj)

    def _allocate_service(self, svc: Obj, *, dry_run: bool = False) -> tuple[str | None, set[int]]:
        """Reserve the ClusterIP and node ports of a new Service; returns what was reserved."""
        spec = svc["spec"]
        name = svc["metadata"]["name"]
        ip = spec.get("clusterIP")
        if spec.get("type") == "ExternalName":
            return None, set()
        if ip == "None":
            spec["clusterIPs"] = ["None"]
        elif ip:
            why = self.ips.claim(ip)
            if why:
                shown = spec.get("clusterIPs") or [ip]
                raise invalid(
                    "Service", "", "services", name, [FieldError("FieldValueInvalid", "spec.clusterIPs", why, shown)]
                )
            spec["clusterIPs"] = [ip]
        else:
            ip = self.ips.allocate()
            if ip is None:
                raise ApiError(500, "failed to allocate a serviceIP: range is full", "InternalError")
            spec["clusterIP"] = ip
            spec["clusterIPs"] = [ip]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        claimed_ip = ip if ip != "None" else None
        try:
            ports = self._claim_node_ports(svc, set(), dry_run=dry_run)
        except ApiError:
            self.ips.release(claimed_ip)
            raise
        return claimed_ip, ports

    @staticmethod
    def _node_ports_of(svc: Obj) -> set[int]:
        return {
            p["nodePort"]
            for p in (svc.get("spec") or {}).get("ports") or []
            if isinstance(p, dict) and isinstance(p.get("nodePort"), int) and p["nodePort"]
        }

    def _claim_node_ports(self, svc: Obj, held: set[int], *, dry_run: bool = False) -> set[int]:
        """Reserve the node ports a NodePort/LoadBalancer Service needs beyond ``held`` (those its stored
        version already owns): an explicit one must be in range and free (422 otherwise, as the real server),
        a missing one is allocated. Returns the newly reserved ports; nothing stays reserved on error."""
        spec = svc["spec"]
        if spec.get("type") not in ("NodePort", "LoadBalancer"):
            return set()
        ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
        claimed: set[int] = set()

        def refuse(i: int, value: Any, why: str) -> ApiError:
            self.node_ports.difference_update(claimed)
            field = f"spec.ports[{i}].nodePort"
            return invalid(
                "Service", "", "services", svc["metadata"]["name"], [FieldError("FieldValueInvalid", field, why, value)]
            )

        for i, p in enumerate(ports):
            np = p.get("nodePort")
            if not np or np in held or np in claimed or dry_run:  # a dry run allocates nothing it is given
                continue
            if not isinstance(np, int) or isinstance(np, bool) or not 30000 <= np <= 32767:
                raise refuse(i, np, "provided port is not in the valid range. The range of valid ports is 30000-32767")
            if np in self.node_ports:
                raise refuse(i, np, "provided port is already allocated")
            self.node_ports.add(np)
            claimed.add(np)
        for p in ports:
            if not p.get("nodePort"):
                free = next((n for n in range(30000, 32768) if n not in self.node_ports), None)
                if free is None:
                    self.node_ports.difference_update(claimed)
                    raise ApiError(500, "failed to allocate a nodePort: range is full", "InternalError")
                self.node_ports.add(free)
                claimed.add(free)
                p["nodePort"] = free
        return claimed

    # ---- update -------------------------------------------------------------------------------------------

    def update(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        *,
        version: str | None = None,
        dry_run: bool = False,
        validation: FieldValidation = IGNORE,
        manager: str | None = None,
    ) -> Obj:
        sent = body.get("metadata") if isinstance(body, dict) else None
        reset = isinstance(sent, dict) and fieldmanager.is_reset(sent.get("managedFields"))
        obj = self._check_body(rt, body, version or rt.version, validation)
        md = obj["metadata"]
        if reset:
            md["managedFields"] = []  # decoding drops an empty list; it asks for the record to be reset
        if md.get("name") not in (None, name):
            raise bad_request(f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})")
        if rt.namespaced and md.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        old = self.store.get(rt.key, ns if rt.namespaced else "", name)
        if old is None:
            if rt.key in _CREATE_ON_UPDATE and subresource is None:
                md["name"] = name
                md.pop("resourceVersion", None)
                return self.create(rt, ns, obj, version, dry_run=dry_run, manager=manager)
            raise not_found(rt.group, rt.plural, name)
        rv = md.get("resourceVersion")
        if rv:
            if str(rv) != old["metadata"]["resourceVersion"]:
                raise stale(rt.group, rt.plural, name)
        elif rt.custom:
            # the generic registry names the resource, not the kind, in this one
            raise invalid(
                rt.plural,
                rt.group,
                rt.plural,
                name,
                [FieldError("FieldValueInvalid", "metadata.resourceVersion", "must be specified for an update", 0)],
            )
        return self._update(rt, old, obj, subresource, dry_run=dry_run, manager=manager)

    def _update(
        self,
        rt: ResourceType,
        old: Obj,
        obj: Obj,
        subresource: str | None,
        *,
        dry_run: bool = False,
        manager: str | None = None,
        managed: Entries | None = None,
    ) -> Obj:
        omd = old["metadata"]
        requested = obj["metadata"].get("managedFields") if isinstance(obj.get("metadata"), dict) else None
        if subresource == "status":
            new = dict(old)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            new["metadata"] = dict(omd)
            if not rt.custom and rt.key != ("apiextensions.k8s.io", "customresourcedefinitions"):
                # The built-in status strategies keep the object's metadata changes (labels, annotations...):
                # only spec is reset (and a pod's owner references); ResetObjectMetaForStatus is for CRDs.
                md = obj.get("metadata")
                if isinstance(md, dict):
                    for k in ("labels", "annotations", "finalizers", "ownerReferences"):
                        if k == "ownerReferences" and rt.key == ("", "pods"):
                            continue
                        if k in md:
                            new["metadata"][k] = md[k]
                        else:
                            new["metadata"].pop(k, None)
            obj = new
        elif subresource == "ephemeralcontainers":
            # Only spec.ephemeralContainers changes through this subresource (kubectl debug).
            new = dict(old)
            spec = dict(old.get("spec") or {})
            ephemeral = (obj.get("spec") or {}).get("ephemeralContainers")
            if ephemeral:
                spec["ephemeralContainers"] = ephemeral
            else:
                spec.pop("ephemeralContainers", None)
            new["spec"] = spec
            new["metadata"] = dict(omd)
            admission.default_containers(spec, "ephemeralContainers")
            obj = new
        else:
            md = obj["metadata"]
            md["name"] = omd["name"]
            if "namespace" in omd:
                md["namespace"] = omd["namespace"]
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if k in omd:
                    md[k] = omd[k]
                else:
                    md.pop(k, None)
            md.pop("selfLink", None)
            md.pop("managedFields", None)
            if rt.has_status:
                if "status" in old:
                    obj["status"] = old["status"]
                else:
                    obj.pop("status", None)
            if rt.custom:
                self._prepare_custom(rt, obj)
            elif rt.key == ("", "services"):
                self._service_update(obj, old)
            elif rt.key == ("", "secrets"):
                admission.default_secret(obj)
            elif rt.key == ("", "namespaces"):
                obj["spec"] = old.get("spec", {})  # spec.finalizers change only through /finalize
            elif rt.key == ("", "pods"):
                # Binding is the only way to set nodeName; keep defaults that clients drop.
                pod_spec = obj.get("spec")
                if isinstance(pod_spec, dict) and "nodeName" in (old.get("spec") or {}) and "nodeName" not in pod_spec:
                    pod_spec["nodeName"] = old["spec"]["nodeName"]
                if isinstance(pod_spec, dict):  # ephemeral containers change only through their subresource
                    pod_spec.pop("ephemeralContainers", None)
                    if (old.get("spec") or {}).get("ephemeralContainers"):
                        pod_spec["ephemeralContainers"] = old["spec"]["ephemeralContainers"]
        obj["metadata"]["resourceVersion"] = omd["resourceVersion"]
        if managed is not None:
            if managed:
                obj["metadata"]["managedFields"] = managed
            else:
                obj["metadata"].pop("managedFields", None)
        elif manager is not None:
            self._track(rt, old, obj, manager, requested=requested, subresource=subresource)
        elif "managedFields" in omd:
            obj["metadata"]["managedFields"] = omd["managedFields"]  # in-process writers keep the record
        else:
            obj["metadata"].pop("managedFields", None)
        if obj == old:
            return old  # no-op updates do not bump resourceVersion (as the real server)
        if "generation" in omd and self._spec_changed(rt, old, obj):
            obj["metadata"]["generation"] = int(omd["generation"]) + 1
        self._validate(rt, obj, old)
        self._size_check(obj)
        freed: set[int] = set()
        if rt.key == ("", "services") and subresource is None:
            held = self._node_ports_of(old)
            claimed = self._claim_node_ports(obj, held)
            if dry_run:
                self.node_ports.difference_update(claimed)
            freed = held - self._node_ports_of(obj)
        if dry_run:
            return obj
        self.node_ports.difference_update(freed)
        if omd.get("deletionTimestamp") and not obj["metadata"].get("finalizers") and self._may_finish(rt, obj):
            self.store.remove(rt.key, obj)
            return obj
        return self._commit(rt, obj, old)

    def _may_finish(self, rt: ResourceType, obj: Obj) -> bool:
        if rt.key == ("", "namespaces"):
            return not (obj.get("spec") or {}).get("finalizers")
        # As the generic store: the object goes when no finalizer and no grace period is left.
        return not obj["metadata"].get("deletionGracePeriodSeconds")

    @staticmethod
    def _spec_changed(rt: ResourceType, old: Obj, new: Obj) -> bool:
        if rt.custom and not rt.has_status:
            return {k: v for k, v in old.items() if k != "metadata"} != {
                k: v for k, v in new.items() if k != "metadata"
            }
        if rt.custom:
            skip = ("metadata", "status")
            return {k: v for k, v in old.items() if k not in skip} != {k: v for k, v in new.items() if k not in skip}
        return old.get("spec") != new.get("spec")

    def _service_update(self, obj: Obj, old: Obj) -> None:
        spec = obj.setdefault("spec", {})
        ospec = old.get("spec") or {}
        for k in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if not spec.get(k) and ospec.get(k):
                spec[k] = ospec[k]
        spec.setdefault("type", ospec.get("type", "ClusterIP"))
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        admission.default_traffic_policy(spec)
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                if not p.get("targetPort") and "port" in p:  # absent, 0 or "": Go's zero value
                    p["targetPort"] = p["port"]
        self._patch_node_ports(spec, ospec)
        if spec.get("clusterIP") != ospec.get("clusterIP"):
            shown = (
                spec.get("clusterIPs") if spec.get("clusterIPs") != ospec.get("clusterIPs") else [spec.get("clusterIP")]
            )
            raise invalid(
                "Service",
                "",
                "services",
                obj["metadata"]["name"],
                [FieldError("FieldValueInvalid", "spec.clusterIPs[0]", "may not change once set", shown)],
            )

    @staticmethod
    def _patch_node_ports(spec: dict[str, Any], ospec: dict[str, Any]) -> None:
        """As the real server on update: keep a port's node port (by port name) when the client left it out, and
        drop unchanged node ports when the type no longer needs them."""
        needs = ("NodePort", "LoadBalancer")
        new_ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
        old_ports = [p for p in ospec.get("ports") or [] if isinstance(p, dict)]
        if ospec.get("type") in needs and spec.get("type") in needs:
            used = {p.get("nodePort") for p in new_ports} & {p.get("nodePort") for p in old_ports}
            by_name = {p.get("name"): p.get("nodePort") for p in old_ports}
            for p in new_ports:
                old_np = by_name.get(p.get("name"))
                if not p.get("nodePort") and old_np and old_np not in used:
                    p["nodePort"] = old_np
        elif ospec.get("type") in needs and [p.get("nodePort") for p in new_ports] == [
            p.get("nodePort") for p in old_ports
        ]:
            for p in new_ports:
                p.pop("nodePort", None)

    # ---- patch --------------------------------------------------------------------------------------------

    def patch(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        content_type: str,
        patch: Any,
        *,
        subresource: str | None = None,
        version: str | None = None,
        dry_run: bool = False,
        validation: FieldValidation = IGNORE,
        manager: str | None = None,
        force: bool = False,
    ) -> Obj:
        if content_type == "application/apply-patch+yaml":
            obj, _ = self.apply(
                rt,
                ns,
                name,
                patch,
                manager=manager or "",
                force=force,
                subresource=subresource,
                version=version,
                dry_run=dry_run,
                validation=validation,
            )
            return obj
        old = self.get(rt, ns, name)
        base = deepcopy_json(old)
        if version and version != rt.version:
            base["apiVersion"] = rt.api_version(version)
        if content_type == "application/merge-patch+json":
            result = merge_patch(base, patch)
        elif content_type == "application/json-patch+json":
            result = json_patch(base, patch, strict=validation.mode != "Ignore")
        elif content_type == "application/strategic-merge-patch+json":
            if rt.custom:
                raise ApiError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    "UnsupportedMediaType",
                )
            result = strategic_merge_patch(base, patch, rt.kind, rt.group)
        else:
            raise ApiError(415, "415: Unsupported Media Type", "UnsupportedMediaType", {})  # go-restful's answer
        if not isinstance(result, dict):
            raise bad_request("the patched object is not a JSON object")
        md = result.get("metadata")
        if not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        rv = md.get("resourceVersion")
        if rv is not None and str(rv) != old["metadata"]["resourceVersion"]:
            raise stale(rt.group, rt.plural, name)
        if md.get("uid") is not None and md.get("uid") != old["metadata"].get("uid"):
            # ValidateObjectMetaUpdate: a patched uid is a change of an immutable field
            why = [FieldError("FieldValueInvalid", "metadata.uid", "field is immutable", md.get("uid"))]
            raise invalid(rt.kind, rt.group, rt.plural, name, why)
        if md.get("name") != name:
            raise bad_request(f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})")
        result["apiVersion"] = rt.api_version(version)
        result["kind"] = rt.kind
        try:
            obj = self._check_body(rt, result, version or rt.version, validation)
        except _DecodeFailure as e:
            if content_type == "application/strategic-merge-patch+json":
                raise
            # The JSON patchers decode the patched document into the Go struct: a 422 showing that document.
            raise self._undecodable_patch(
                rt, old, version, content_type=content_type, patch=patch, why=e.detail
            ) from None
        return self._update(rt, old, obj, subresource, dry_run=dry_run, manager=manager)

    def _undecodable_patch(
        self, rt: ResourceType, old: Obj, version: str | None, *, content_type: str, patch: Any, why: str
    ) -> ApiError:
        current = deepcopy_json(old)
        current["apiVersion"] = rt.api_version(version)
        if self.types is not None:
            message = self.types.message_for(rt.api_version(version), rt.kind)
            if message is not None:
                with contextlib.suppress(DecodeError):
                    current = self.types.decode(current, message).obj  # the Go struct's field order
        if content_type == "application/merge-patch+json":
            text = go_merge_patch_text(current, patch)
        else:
            text = go_json_patch_text(current, patch)
        err = FieldError("FieldValueInvalid", "patch", why, text)
        causes = [{"reason": err.kind, "message": err.body(), "field": err.field}]
        return ApiError(422, f' "" is invalid: {err.message()}', "Invalid", {"causes": causes})

    def apply(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        config: Any,
        *,
        manager: str,
        force: bool = False,
        subresource: str | None = None,
        version: str | None = None,
        dry_run: bool = False,
        validation: FieldValidation = IGNORE,
    ) -> tuple[Obj, bool]:
        """Server-side apply (fieldmanager.py): the configuration merged into the object (created when
        missing), fields the manager no longer applies removed, conflicts a 409; returns (object, created)."""
        version = version or rt.version
        if not isinstance(config, dict):
            raise bad_request("error decoding YAML: the apply configuration is not an object")
        gvk = f"{rt.group}/{version}, Kind={rt.kind}"
        api_version, kind = str(config.get("apiVersion") or ""), str(config.get("kind") or "")
        group, _, sent_version = api_version.rpartition("/")
        if (group, sent_version, kind) != (rt.group, version, rt.kind):
            raise bad_request(f"invalid object type: {group}/{sent_version}, Kind={kind}")
        md = config.get("metadata")
        if md is not None and not isinstance(md, dict):
            raise bad_request("metadata must be an object")
        md = md or {}
        if md.get("managedFields") is not None:
            raise bad_request("metadata.managedFields must be nil")
        if md.get("name") not in (None, "", name):
            raise bad_request(f"the name of the object ({md.get('name')}) does not match the name on the URL ({name})")
        if rt.namespaced and md.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        fm = self.field_manager(rt, version)
        live = self.store.get(rt.key, ns if rt.namespaced else "", name)
        where = f"{gvk} {ns}/{name}" if rt.namespaced else f"{gvk} {name}"
        if live is None:
            if subresource is not None:
                raise not_found(rt.group, rt.plural, name)
            try:
                merged, managers = fm.apply({}, config, {}, manager, force=force)
            except fieldmanager.ItemError as e:
                raise ApiError(500, f"failed to create typed patch object ({where}): {e}", "InternalError") from None
            merged.setdefault("metadata", {})["name"] = name
            merged.update(apiVersion=rt.api_version(version), kind=rt.kind)
            created = self.create(
                rt,
                ns,
                merged,
                version,
                dry_run=dry_run,
                validation=validation,
                managed=fieldmanager.encode_managers(managers),
            )
            return created, True
        rv = md.get("resourceVersion")
        if rv is not None and str(rv) != live["metadata"]["resourceVersion"]:
            raise stale(rt.group, rt.plural, name)
        current = _without_managed(live)
        if version != rt.version:
            current = dict(current, apiVersion=rt.api_version(version))
        try:
            merged, managers = fm.apply(
                current,
                config,
                fieldmanager.decode_managers(live["metadata"].get("managedFields")),
                manager,
                force=force,
                subresource=subresource or "",
            )
        except fieldmanager.Conflict as e:
            raise ApiError(409, e.message(), "Conflict", {"causes": e.causes()}) from None
        except fieldmanager.ItemError as e:
            raise ApiError(500, f"failed to create typed patch object ({where}): {e}", "InternalError") from None
        merged.update(apiVersion=rt.api_version(version), kind=rt.kind)
        obj = self._check_body(rt, merged, version, validation)
        if rt.custom:
            self._prepare_custom(rt, obj)  # the object defaulter runs on what apply produced
        else:
            self._default(rt, obj)
        updated = self._update(
            rt, live, obj, subresource, dry_run=dry_run, managed=fieldmanager.encode_managers(managers)
        )
        return updated, False

    def _delete_crd(self, rt: ResourceType, old: Obj) -> Obj:
        """As the apiextensions server: the CRD gets its cleanup finalizer and a Terminating condition; the
        CRD controller then removes the instances and the CRD (crd.CRDController)."""
        new = deepcopy_json(old)
        md = new["metadata"]
        md["deletionTimestamp"] = now_iso()
        if CRD_CLEANUP_FINALIZER not in (md.get("finalizers") or []):
            md["finalizers"] = [*(md.get("finalizers") or []), CRD_CLEANUP_FINALIZER]
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "lastTransitionTime": now_iso(),
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            }
        )
        status["conditions"] = conditions
        return self._commit(rt, new, old)

    # ---- delete -------------------------------------------------------------------------------------------

    @staticmethod
    def _needs_kubelet(pod: Obj) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in (
            "Succeeded",
            "Failed",
        )

    def delete(self, rt: ResourceType, ns: str, name: str, options: dict[str, Any] | None = None) -> tuple[Obj, bool]:
        """Delete; returns (object, gone). ``gone`` False means it lingers (finalizers / graceful)."""
        opts = options or {}
        old = self.get(rt, ns, name)
        if rt.key == ("", "namespaces") and name in PROTECTED_NAMESPACES:
            raise forbidden("", "namespaces", name, "this namespace may not be deleted")
        omd = old["metadata"]
        policy = opts.get("propagationPolicy")
        errs: list[FieldError] = []
        if opts.get("orphanDependents") is not None and policy is not None:
            errs.append(
                FieldError(
                    "FieldValueInvalid",
                    "propagationPolicy",
                    "orphanDependents and deletionPropagation cannot be both set",
                    policy,
                )
            )
        if policy is not None and policy not in ("Background", "Foreground", "Orphan"):
            supported = 'supported values: "Foreground", "Background", "Orphan", "nil"'
            errs.append(FieldError("FieldValueNotSupported", "propagationPolicy", supported, policy))
        errs += dry_run_errors(opts.get("dryRun"))
        if errs:
            raise invalid("DeleteOptions", "meta.k8s.io", "", "", errs)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != omd.get("uid"):
            raise conflict(
                rt.group,
                rt.kind,
                name,
                f"the UID in the precondition ({pre['uid']}) does not match the UID in record ({omd.get('uid')}). "
                "The object might have been deleted and then recreated",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != omd["resourceVersion"]:
            raise conflict(
                rt.group,
                rt.kind,
                name,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the "
                f"ResourceVersion in record ({omd['resourceVersion']}). The object might have been modified",
            )
        if policy is None and opts.get("orphanDependents") is True:
            policy = "Orphan"
        grace = opts.get("gracePeriodSeconds")
        if opts.get("dryRun"):
            return old, False
        if rt.key == CRD_KEY and not omd.get("deletionTimestamp"):
            return self._delete_crd(rt, old), False
        finalizers = list(omd.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        elif policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        graceful = False
        if rt.key == ("", "pods"):
            if grace is None:
                grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            graceful = self._needs_kubelet(old) and int(grace) > 0
        if rt.key == ("", "namespaces"):
            graceful = bool((old.get("spec") or {}).get("finalizers"))
        if omd.get("deletionTimestamp"):
            # Already terminating: a pod's grace period can be cut to 0 (the kubelet confirming, or --force).
            if rt.key == ("", "pods") and not graceful and omd.get("deletionGracePeriodSeconds"):
                if not finalizers:
                    ev = self.store.remove(rt.key, old)
                    return ev.obj, True
                new = deepcopy_json(old)
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["finalizers"] = finalizers
                return self._commit(rt, new, old), False
            if set(finalizers) != set(omd.get("finalizers") or []):
                new = deepcopy_json(old)
                new["metadata"]["finalizers"] = finalizers
                return self._commit(rt, new, old), False
            return old, False
        if not finalizers and not graceful:
            ev = self.store.remove(rt.key, old)
            return ev.obj, True
        new = deepcopy_json(old)
        nmd = new["metadata"]
        if graceful and rt.key == ("", "pods"):
            nmd["deletionTimestamp"] = iso_at(time.time() + int(grace or 0))
            nmd["deletionGracePeriodSeconds"] = int(grace or 0)
        else:
            nmd["deletionTimestamp"] = now_iso()
            if rt.key != ("", "namespaces"):  # the namespace strategy sets no grace period
                nmd["deletionGracePeriodSeconds"] = 0
        if finalizers:
            nmd["finalizers"] = finalizers
        if rt.key == ("", "namespaces"):
            new.setdefault("status", {})["phase"] = "Terminating"
        return self._commit(rt, new, old), False
