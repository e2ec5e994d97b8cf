"""Defaulting and validation of built-in kinds: what the real API server's strategies and admission do.

Only the rules clients observe are implemented: defaults that show up in objects (restartPolicy,
schedulerName, ClusterIP, ...), the validation errors clients trip over (names, containers, ports), and the
immutability rules of pods and Services. Custom resources are handled by :mod:`schema`.
"""

from __future__ import annotations

import ipaddress
import math
import re
from fractions import Fraction
from typing import Any

from kubedl_local.apiserver import validation
from kubedl_local.apiserver.errors import FieldError
from kubedl_py.api import quantities as quantity

Obj = dict[str, Any]

IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")


def _iana_svc_name(name: Any) -> bool:
    """A named container port: an IANA service name (RFC 6335), as the API server validates it."""
    return (
        isinstance(name, str)
        and bool(IANA_SVC_NAME.match(name))
        and "--" not in name
        and any(ch.isalpha() for ch in name)
    )


def check_name(plural: str, name: str, field: str = "metadata.name") -> list[FieldError]:
    return [FieldError("FieldValueInvalid", field, m, name) for m in validation.name_errors(plural, name)]


def check_metadata(plural: str, md: Obj, *, kube_finalizers: bool = True) -> list[FieldError]:
    return validation.object_meta(plural, md, kube_finalizers=kube_finalizers)


def validate_event(event: Obj) -> list[FieldError]:
    """legacyValidateEvent, what a core/v1 Event gets: its namespace agrees with the involved object's."""
    ns = event["metadata"].get("namespace", "")
    involved = str((event.get("involvedObject") or {}).get("namespace") or "")
    if event.get("eventTime"):
        if not involved and ns not in ("default", "kube-system"):
            return [
                FieldError("FieldValueInvalid", "involvedObject.namespace", "does not match event.namespace", involved)
            ]
        return []
    if (not involved and ns not in ("", "default")) or (involved and involved != ns):
        return [FieldError("FieldValueInvalid", "involvedObject.namespace", "does not match event.namespace", involved)]
    return []


# ---- pods ------------------------------------------------------------------------------------------------


def parse_quantity(v: Any, resource: str = "") -> float:
    """A Kubernetes quantity as a number (cpu in cores), parsed as ``resource.ParseQuantity`` does: the API
    server stores quantities canonical (node capacity ``cpu: 1000`` reads back as ``"1k"``)."""
    del resource  # one grammar for every resource; kept so callers can say what they parse
    if isinstance(v, int | float):
        return float(v)
    parsed = quantity.parse(str(v).strip())
    return float(parsed.unscaled * 10.0**parsed.scale)


def default_pod(pod: Obj, toleration_seconds: int) -> None:
    default_pod_fields(pod)
    admit_pod(pod, toleration_seconds)


def default_pod_fields(pod: Obj) -> None:
    """SetDefaults_Pod/PodSpec and the containers' and volumes' defaults: what decoding a body sets."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        default_containers(spec, key)
    default_volumes(spec)


def admit_pod(pod: Obj, toleration_seconds: int) -> None:
    """What admission and the create strategy add: priority, the ServiceAccount, the not-ready/unreachable
    tolerations, the initial status."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa
    spec["serviceAccount"] = sa
    tolerations = spec.setdefault("tolerations", [])
    if isinstance(tolerations, list):
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(isinstance(t, dict) and t.get("key") == key for t in tolerations):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": toleration_seconds}
                )
    status: Obj = {"phase": "Pending", "qosClass": qos_class(spec)}
    pod["status"] = status


def default_containers(spec: Obj, key: str) -> None:
    """The defaults of one list of containers (``containers``, ``initContainers``, ``ephemeralContainers``)."""
    host_net = bool(spec.get("hostNetwork"))
    if key:
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            image = str(c.get("image", ""))
            tag = image.rsplit("/", 1)[-1]
            latest = ":" not in tag or tag.endswith(":latest")
            c.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            res = c["resources"]
            # As the API server's defaulting: each resource with a limit but no request gets the limit as
            # its request, key by key (a GPU limit next to an explicit cpu request still counts).
            if isinstance(res, dict) and isinstance(res.get("limits"), dict) and res["limits"]:
                requests = res.setdefault("requests", {})
                if isinstance(requests, dict):
                    for name, quantity in res["limits"].items():
                        requests.setdefault(name, quantity)
            for p in c.get("ports") or []:
                if isinstance(p, dict):
                    p.setdefault("protocol", "TCP")
                    if host_net and "hostPort" not in p and "containerPort" in p:
                        p["hostPort"] = p["containerPort"]
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if isinstance(c.get(probe), dict):
                    _default_probe(c[probe])
            lifecycle = c.get("lifecycle")
            if isinstance(lifecycle, dict):
                for hook in lifecycle.values():
                    if isinstance(hook, dict) and isinstance(hook.get("httpGet"), dict):
                        _default_http_get(hook["httpGet"])
            for env in c.get("env") or []:
                if isinstance(env, dict) and isinstance((env.get("valueFrom") or {}).get("fieldRef"), dict):
                    env["valueFrom"]["fieldRef"].setdefault("apiVersion", "v1")


def _default_probe(probe: Obj) -> None:
    """SetDefaults_Probe (and its HTTPGetAction's)."""
    for key, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)):
        if not probe.get(key):
            probe[key] = value
    if isinstance(probe.get("httpGet"), dict):
        _default_http_get(probe["httpGet"])


def _default_http_get(action: Obj) -> None:
    if not action.get("path"):
        action["path"] = "/"
    if not action.get("scheme"):
        action["scheme"] = "HTTP"


#: volume sources with a defaultMode (0644, as SetDefaults_*VolumeSource)
_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")
#: every volume source the API knows (a volume naming none of them is an emptyDir)
_VOLUME_SOURCES = frozenset(
    {
        "hostPath",
        "emptyDir",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "secret",
        "nfs",
        "iscsi",
        "glusterfs",
        "persistentVolumeClaim",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "downwardAPI",
        "fc",
        "azureFile",
        "configMap",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "projected",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "csi",
        "ephemeral",
        "image",
    }
)


def default_volumes(spec: Obj) -> None:
    """SetDefaults_Volume and the defaults inside volume sources."""
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        if not any(key in vol for key in _VOLUME_SOURCES):
            vol["emptyDir"] = {}
        for key in _MODE_SOURCES:
            if isinstance(vol.get(key), dict):
                vol[key].setdefault("defaultMode", 420)
        if isinstance(vol.get("hostPath"), dict):
            vol["hostPath"].setdefault("type", "")
        for item in (vol.get("downwardAPI") or {}).get("items") or []:
            if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
                item["fieldRef"].setdefault("apiVersion", "v1")
        for source in (vol.get("projected") or {}).get("sources") or []:
            if not isinstance(source, dict):
                continue
            if isinstance(source.get("serviceAccountToken"), dict):
                source["serviceAccountToken"].setdefault("expirationSeconds", 3600)
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
                    item["fieldRef"].setdefault("apiVersion", "v1")


def qos_class(spec: Obj) -> str:
    requests_any = limits_all = False
    guaranteed = True
    for c in spec.get("containers") or []:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_any = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim.get(r))) != str(lim.get(r)):
                guaranteed = False
        limits_all = limits_all or bool(lim)
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def validate_pod(pod: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [FieldError("FieldValueRequired", "spec")]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errs.append(FieldError("FieldValueRequired", "spec.containers"))
        containers = []
    names: set[str] = set()
    host_net = bool(spec.get("hostNetwork"))
    for key in ("initContainers", "containers", "ephemeralContainers"):
        lst = spec.get(key) or []
        if not isinstance(lst, list):
            errs.append(FieldError("FieldValueInvalid", f"spec.{key}", "must be a list", lst))
            continue
        for i, c in enumerate(lst):
            base = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                errs.append(FieldError("FieldValueInvalid", base, "must be an object", c))
                continue
            name = c.get("name")
            if not name:
                errs.append(FieldError("FieldValueRequired", f"{base}.name"))
            elif not isinstance(name, str) or validation.is_dns1123_label(name):
                for m in validation.is_dns1123_label(str(name)):
                    errs.append(FieldError("FieldValueInvalid", f"{base}.name", m, name))
            elif name in names:
                errs.append(FieldError("FieldValueDuplicate", f"{base}.name", "", name))
            else:
                names.add(name)
            if not c.get("image"):
                errs.append(FieldError("FieldValueRequired", f"{base}.image"))
            if key == "ephemeralContainers":
                if c.get("ports"):
                    errs.append(
                        FieldError("FieldValueForbidden", f"{base}.ports", "cannot be set for an Ephemeral Container")
                    )
                continue
            for j, p in enumerate(c.get("ports") or []):
                pbase = f"{base}.ports[{j}]"
                if not isinstance(p, dict):
                    errs.append(FieldError("FieldValueInvalid", pbase, "must be an object", p))
                    continue
                port_name = p.get("name")
                if port_name is not None and not _iana_svc_name(port_name):
                    errs.append(
                        FieldError(
                            "FieldValueInvalid",
                            f"{pbase}.name",
                            "must be no more than 15 characters, contain only lowercase alphanumeric characters "
                            "or '-', contain at least one letter, and not start, end or have two '-' in a row",
                            port_name,
                        )
                    )
                cp = p.get("containerPort")
                if not isinstance(cp, int) or isinstance(cp, bool) or not 1 <= cp <= 65535:
                    errs.append(
                        FieldError(
                            "FieldValueInvalid" if cp is not None else "FieldValueRequired",
                            f"{pbase}.containerPort",
                            "must be between 1 and 65535, inclusive",
                            cp,
                        )
                    )
                hp = p.get("hostPort")
                if hp is not None and (not isinstance(hp, int) or isinstance(hp, bool) or not 0 <= hp <= 65535):
                    errs.append(
                        FieldError(
                            "FieldValueInvalid", f"{pbase}.hostPort", "must be between 1 and 65535, inclusive", hp
                        )
                    )
                elif host_net and hp is not None and hp != cp:
                    errs.append(
                        FieldError(
                            "FieldValueInvalid",
                            f"{pbase}.hostPort",
                            "must match `containerPort` when `hostNetwork` is true",
                            hp,
                        )
                    )
                if p.get("protocol") not in (None, "TCP", "UDP", "SCTP"):
                    errs.append(
                        FieldError(
                            "FieldValueNotSupported",
                            f"{pbase}.protocol",
                            'supported values: "SCTP", "TCP", "UDP"',
                            p.get("protocol"),
                        )
                    )
            res = c.get("resources") or {}
            if isinstance(res, dict):
                errs += resource_requirements_errors(res, f"{base}.resources")
            for j, e in enumerate(c.get("env") or []):
                if not isinstance(e, dict) or not e.get("name"):
                    errs.append(FieldError("FieldValueRequired", f"{base}.env[{j}].name"))
    rp = spec.get("restartPolicy")
    if rp not in ("Always", "OnFailure", "Never"):
        errs.append(
            FieldError(
                "FieldValueNotSupported", "spec.restartPolicy", 'supported values: "Always", "OnFailure", "Never"', rp
            )
        )
    return errs


#: native resources whose quantities must be whole numbers (helper.IsIntegerResourceName, with extended ones)
_INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)


def _native(name: str) -> bool:
    """helper.IsNativeResource: no domain, or a kubernetes.io one."""
    return "/" not in name or "kubernetes.io/" in name


def _quantity(value: Any) -> quantity.Quantity | None:
    try:
        return quantity.parse(str(value).strip())
    except ValueError:
        return None


def _milli(q: quantity.Quantity) -> int:
    """Quantity.MilliValue: thousandths, rounded up."""
    return math.ceil(Fraction(q.unscaled) * Fraction(10) ** (q.scale + 3))


def _cmp(a: quantity.Quantity, b: quantity.Quantity) -> int:
    x, y = Fraction(a.unscaled) * Fraction(10) ** a.scale, Fraction(b.unscaled) * Fraction(10) ** b.scale
    return (x > y) - (x < y)


def resource_requirements_errors(res: Obj, path: str) -> list[FieldError]:
    """validateResourceRequirements: non-negative, whole numbers for extended resources, requests within
    (for extended resources: equal to) limits."""
    errs: list[FieldError] = []
    raw_limits, raw_requests = res.get("limits"), res.get("requests")
    limits: Obj = raw_limits if isinstance(raw_limits, dict) else {}
    requests: Obj = raw_requests if isinstance(raw_requests, dict) else {}
    zero = quantity.parse("0")

    def value_errors(name: str, value: Any, field: str) -> None:
        q = _quantity(value)
        if q is None:
            errs.append(FieldError("FieldValueInvalid", field, "must be a valid quantity", value))
            return
        if _cmp(q, zero) < 0:
            errs.append(FieldError("FieldValueInvalid", field, "must be greater than or equal to 0", str(q)))
        if (name in _INTEGER_RESOURCES or not _native(name)) and _milli(q) % 1000:
            errs.append(FieldError("FieldValueInvalid", field, "must be an integer", str(q)))

    for name, value in limits.items():
        value_errors(name, value, f"{path}.limits[{name}]")
    for name, value in requests.items():
        value_errors(name, value, f"{path}.requests[{name}]")
        q, limit = _quantity(value), _quantity(limits.get(name)) if name in limits else None
        overcommit = _native(name) and not name.startswith("hugepages-")
        if q is not None and limit is not None:
            if _cmp(q, limit) != 0 and not overcommit:
                why = f"must be equal to {name} limit of {limit}"
                errs.append(FieldError("FieldValueInvalid", f"{path}.requests", why, str(q)))
            elif _cmp(q, limit) > 0:
                why = f"must be less than or equal to {name} limit of {limit}"
                errs.append(FieldError("FieldValueInvalid", f"{path}.requests", why, str(q)))
        elif name not in limits and not overcommit:
            errs.append(
                FieldError("FieldValueRequired", f"{path}.limits", "Limit must be set for non overcommitable resources")
            )
    return errs


_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")


def validate_pod_update(new: Obj, old: Obj) -> list[FieldError]:
    ns, os_ = dict(new.get("spec") or {}), dict(old.get("spec") or {})
    for k in _POD_MUTABLE:
        ns.pop(k, None)
        os_.pop(k, None)
    errs = _ephemeral_update(ns.pop("ephemeralContainers", None) or [], os_.pop("ephemeralContainers", None) or [])
    if errs:
        return errs

    def strip_images(spec: Obj) -> None:
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                spec[key] = [
                    {kk: vv for kk, vv in c.items() if kk != "image"} if isinstance(c, dict) else c for c in spec[key]
                ]

    strip_images(ns)
    strip_images(os_)
    if ns != os_:
        return [
            FieldError(
                "FieldValueForbidden",
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)",
            )
        ]
    return []


def _ephemeral_update(new: list[Any], old: list[Any]) -> list[FieldError]:
    """Ephemeral containers may be added, never removed or changed (the real server's messages)."""
    by_name = {c.get("name"): c for c in new if isinstance(c, dict)}
    removed = [str(c.get("name")) for c in old if isinstance(c, dict) and c.get("name") not in by_name]
    if removed:
        names = ", ".join(f'"{n}"' for n in removed)
        return [
            FieldError(
                "FieldValueForbidden",
                "spec.ephemeralContainers",
                f"existing ephemeral containers {names} may not be removed\n",
            )
        ]
    for c in old:
        if isinstance(c, dict) and by_name.get(c.get("name")) != c:
            i = new.index(by_name[c.get("name")])
            return [
                FieldError(
                    "FieldValueForbidden",
                    f"spec.ephemeralContainers[{i}]",
                    "existing ephemeral containers may not be changed",
                )
            ]
    return []


# ---- services --------------------------------------------------------------------------------------------


class IPAllocator:
    """Hands out ClusterIPs from a CIDR, as the service IP allocator does."""

    def __init__(self, cidr: str) -> None:
        self.net = ipaddress.ip_network(cidr, strict=False)
        self.used: set[str] = set()
        self._next = 1

    def allocate(self) -> str | None:
        size = self.net.num_addresses
        for _ in range(size):
            i = self._next
            self._next = self._next + 1 if self._next + 1 < size - 1 else 1
            ip = str(self.net.network_address + i)
            if ip not in self.used:
                self.used.add(ip)
                return ip
        return None

    def claim(self, ip: str) -> str | None:
        """None if ``ip`` could be claimed, else why not."""
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return "must be a valid IP address"
        if addr not in self.net:
            return f"failed to allocate IP {ip}: the provided network does not match the current range"
        if ip in self.used:
            return f"failed to allocate IP {ip}: provided IP is already allocated"
        self.used.add(ip)
        return None

    def release(self, ip: str | None) -> None:
        if ip:
            self.used.discard(ip)


def default_traffic_policy(spec: Obj) -> None:
    """externalTrafficPolicy exists only for Services with node ports (Cluster by default); the real server
    drops it when the type no longer has them."""
    if spec.get("type") in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    else:
        spec.pop("externalTrafficPolicy", None)


def default_service(svc: Obj) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("type") != "ExternalName":  # as SetDefaults_Service: no traffic policy for a CNAME
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec.get("type") == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    default_traffic_policy(spec)
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if not p.get("targetPort") and "port" in p:  # absent, 0 or "": Go's zero value
                p["targetPort"] = p["port"]
    svc["status"] = {"loadBalancer": {}}


def validate_service(svc: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    spec = svc.get("spec")
    if not isinstance(spec, dict):
        return [FieldError("FieldValueRequired", "spec")]
    ports = spec.get("ports")
    headless = spec.get("clusterIP") == "None"
    if spec.get("type") not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        errs.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.type",
                'supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
                spec.get("type"),
            )
        )
    if not ports and not headless and spec.get("type") != "ExternalName":
        errs.append(FieldError("FieldValueRequired", "spec.ports"))
    if ports is not None and not isinstance(ports, list):
        return [*errs, FieldError("FieldValueInvalid", "spec.ports", "must be a list", ports)]
    names: set[str] = set()
    for i, p in enumerate(ports or []):
        base = f"spec.ports[{i}]"
        if not isinstance(p, dict):
            errs.append(FieldError("FieldValueInvalid", base, "must be an object", p))
            continue
        name = p.get("name")
        if len(ports or []) > 1 and not name:
            errs.append(FieldError("FieldValueRequired", f"{base}.name"))
        if name:
            if not isinstance(name, str) or validation.is_dns1123_label(name):
                for m in validation.is_dns1123_label(str(name)):
                    errs.append(FieldError("FieldValueInvalid", f"{base}.name", m, name))
            elif name in names:
                errs.append(FieldError("FieldValueDuplicate", f"{base}.name", "", name))
            names.add(str(name))
        port = p.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            errs.append(
                FieldError(
                    "FieldValueInvalid" if port is not None else "FieldValueRequired",
                    f"{base}.port",
                    "must be between 1 and 65535, inclusive",
                    port,
                )
            )
        tp = p.get("targetPort")
        if isinstance(tp, bool) or (isinstance(tp, int) and not 1 <= tp <= 65535):
            errs.append(
                FieldError("FieldValueInvalid", f"{base}.targetPort", "must be between 1 and 65535, inclusive", tp)
            )
        elif isinstance(tp, str) and not (IANA_SVC_NAME.match(tp) and re.search("[a-z]", tp)):
            errs.append(
                FieldError(
                    "FieldValueInvalid",
                    f"{base}.targetPort",
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                    tp,
                )
            )
        if p.get("protocol") not in ("TCP", "UDP", "SCTP"):
            errs.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{base}.protocol",
                    'supported values: "SCTP", "TCP", "UDP"',
                    p.get("protocol"),
                )
            )
    sel = spec.get("selector")
    if sel is not None and not isinstance(sel, dict):
        errs.append(FieldError("FieldValueInvalid", "spec.selector", "must be a map", sel))
    # duplicate (protocol, port) pairs, shown as the internal Go struct they are keyed by
    seen: set[tuple[Any, Any]] = set()
    for i, p in enumerate(ports or []):
        if not isinstance(p, dict):
            continue
        key = (p.get("protocol"), p.get("port"))
        if key in seen:
            shown = {
                "Name": "",
                "Protocol": key[0],
                "AppProtocol": None,
                "Port": key[1],
                "TargetPort": 0,
                "NodePort": 0,
            }
            errs.append(FieldError("FieldValueDuplicate", f"spec.ports[{i}]", "", shown))
        seen.add(key)
    return errs


# ---- namespaces, secrets ---------------------------------------------------------------------------------


def default_namespace(ns: Obj) -> None:
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns["status"] = {"phase": "Active"}
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = ns["metadata"]["name"]


def default_secret(secret: Obj) -> None:
    import base64

    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict):
        data = secret.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
    secret.setdefault("type", "Opaque")


#: core.MaxSecretSize: the data of a ConfigMap or Secret together
MAX_DATA_SIZE = 1024 * 1024
_CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_KEY = re.compile("^" + _CONFIG_KEY_FMT + "$")
_CONFIG_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
#: secret type -> the keys it must have (ValidateSecret)
_SECRET_KEYS = {
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}


def _config_key_errors(key: str) -> list[str]:
    """validation.IsConfigMapKey."""
    errs = []
    if len(key) > 253:
        errs.append("must be no more than 253 characters")
    if not _CONFIG_KEY.match(key):
        errs.append(validation.regex_error(_CONFIG_KEY_MSG, _CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if key == ".":
        errs.append("must not be '.'")
    elif key == "..":
        errs.append("must not be '..'")
    elif key.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def _decoded_size(value: Any) -> int:
    import base64
    import binascii

    try:
        return len(base64.b64decode(str(value), validate=True))
    except (binascii.Error, ValueError):
        return len(str(value))


def validate_configmap(cm: Obj, old: Obj | None) -> list[FieldError]:
    """ValidateConfigMap / ValidateConfigMapUpdate."""
    errs: list[FieldError] = []
    if old is not None and old.get("immutable"):
        if not cm.get("immutable"):
            errs.append(FieldError("FieldValueForbidden", "immutable", "field is immutable when `immutable` is set"))
        for key in ("data", "binaryData"):
            if (cm.get(key) or None) != (old.get(key) or None):
                errs.append(FieldError("FieldValueForbidden", key, "field is immutable when `immutable` is set"))
    data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
    size = 0
    for key, value in data.items():
        errs += [FieldError("FieldValueInvalid", f"data[{key}]", m, key) for m in _config_key_errors(key)]
        if key in binary:
            errs.append(FieldError("FieldValueInvalid", f"data[{key}]", "duplicate of key present in binaryData", key))
        size += len(str(value).encode())
    for key, value in binary.items():
        errs += [FieldError("FieldValueInvalid", f"binaryData[{key}]", m, key) for m in _config_key_errors(key)]
        size += _decoded_size(value)
    if size > MAX_DATA_SIZE:
        errs.append(FieldError("FieldValueTooLong", "[]", f"may not be more than {MAX_DATA_SIZE} bytes"))
    return errs


def validate_secret(secret: Obj, old: Obj | None = None) -> list[FieldError]:
    """ValidateSecret / ValidateSecretUpdate: keys, size, the keys each type needs, immutability."""
    import base64
    import binascii

    errs: list[FieldError] = []
    if old is not None:
        if secret.get("type") != old.get("type"):
            errs.append(FieldError("FieldValueInvalid", "type", "field is immutable", secret.get("type")))
        if old.get("immutable"):
            if not secret.get("immutable"):
                errs.append(
                    FieldError("FieldValueForbidden", "immutable", "field is immutable when `immutable` is set")
                )
            if (secret.get("data") or None) != (old.get("data") or None):
                errs.append(FieldError("FieldValueForbidden", "data", "field is immutable when `immutable` is set"))
    data = secret.get("data") or {}
    size = 0
    for k, v in data.items():
        errs += [FieldError("FieldValueInvalid", f"data[{k}]", m, k) for m in _config_key_errors(k)]
        try:
            size += len(base64.b64decode(str(v), validate=True))
        except (binascii.Error, ValueError):
            errs.append(FieldError("FieldValueInvalid", f"data[{k}]", "illegal base64 data", "<secret contents>"))
    if size > MAX_DATA_SIZE:
        errs.append(FieldError("FieldValueTooLong", "data", f"may not be more than {MAX_DATA_SIZE} bytes"))
    kind = secret.get("type")
    if kind == "kubernetes.io/service-account-token":
        if not ((secret.get("metadata") or {}).get("annotations") or {}).get("kubernetes.io/service-account.name"):
            errs.append(FieldError("FieldValueRequired", "metadata.annotations[kubernetes.io/service-account.name]"))
    elif kind in _SECRET_KEYS:
        key = _SECRET_KEYS[kind][0]
        if key not in data or (kind == "kubernetes.io/ssh-auth" and not data.get(key)):
            errs.append(FieldError("FieldValueRequired", f"data[{key}]"))
    elif kind == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            errs.append(FieldError("FieldValueRequired", "data[username]"))
            errs.append(FieldError("FieldValueRequired", "data[password]"))
    elif kind == "kubernetes.io/tls":
        for key in ("tls.crt", "tls.key"):
            if key not in data:
                errs.append(FieldError("FieldValueRequired", f"data[{key}]"))
    return errs
