"""Renders the install manifests and the Helm chart's templates from one set of jinja2 templates.

Why one source for both: a chart written by hand beside the manifests would be a second copy that drifts
(a new RBAC rule added to one only). Each template here renders two ways:

- **manifests** (``kubedl-py manifests``, ``deploy/``): every option is decided in Python
  (:class:`ManifestOptions`) and the output is plain YAML;
- **chart** (``charts/kubedl-py/templates``, written by :mod:`kubedl_py.templates.chart`): every option becomes
  Go template text reading ``.Values`` (``{{ $.Values.metrics.port }}``, ``{{- if $.Values.watchNamespaces }}``),
  so Helm decides it at install time.

The templates ask for a value or a choice through a few helpers, which answer in the mode being rendered:
``value(path, python_value)`` a scalar, ``block(path, python_value, indent)`` a YAML subtree,
``{% call when(go_condition, python_bool) %}`` a conditional part, ``{% call(x) each(go_list, python_list,
"$var") %}`` a part repeated per item. ``tests/test_chart.py`` renders the chart with the real ``helm
template`` for a range of options and fails when any object differs from :func:`render_manifests` with the
same options (:func:`kubedl_py.templates.chart.chart_values` maps one to the other).

The CRDs are not templates: they are generated from the API models (``kubedl_py.api.crd``) and dumped into
``crds.yaml.j2`` verbatim, so the installed schema is always the one the code validates against (the chart
carries those of ``training.kubedl.io`` in its ``crds/`` directory).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import jinja2
import yaml

from kubedl_py.api import constants as c
from kubedl_py.api.admission import admission_policies
from kubedl_py.api.crd import all_crds
from kubedl_py.api.groups import KUBEDL, KUBEFLOW
from kubedl_py.api.kinds import all_kinds

#: The image ``make image`` builds (kubedl_local/image.py tags it with this name): the manifests of a release
#: pin the controller image of that same release.
DEFAULT_IMAGE = c.DEFAULT_IMAGE
DEFAULT_NAMESPACE = c.DEFAULT_NAMESPACE
DEFAULT_PORT_RANGE = "20000-30000"
DEFAULT_RESOURCES: Mapping[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
GANG_SCHEDULERS = ("volcano", "scheduler-plugins", "kubernetes", "none")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
#: the templates in manifest order; the chart has one file per template (``namespace`` and the CRDs aside)
TEMPLATES = (
    "namespace.yaml.j2",
    "crds.yaml.j2",
    "admission.yaml.j2",
    "rbac.yaml.j2",
    "metrics-rbac.yaml.j2",
    "lease.yaml.j2",
    "deployment.yaml.j2",
    "service.yaml.j2",
    "monitors.yaml.j2",
    "dashboard.yaml.j2",
)
#: where the Grafana dashboard lives in this package (and, copied, in the chart)
DASHBOARD = "dashboard.json"
#: an RFC 1123 label: what a namespace name may be
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PORT_RANGE = re.compile(r"([0-9]{1,5})-([0-9]{1,5})")


@dataclass(frozen=True)
class ManifestOptions:
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    #: the controller's namespace (its Deployment, ServiceAccount, Lease, metrics Service)
    namespace: str = DEFAULT_NAMESPACE
    crds_only: bool = False
    #: controller replicas; more than one needs leader election (only the leader acts)
    replicas: int = 1
    leader_elect: bool = True
    #: a namespaced install: reconcile the jobs of these namespaces only, with Roles there instead of a
    #: ClusterRole (docs/install.md); empty: every namespace
    watch_namespaces: tuple[str, ...] = ()
    #: host ports handed to host-network pods, ``LOW-HIGH``
    host_port_range: str = DEFAULT_PORT_RANGE
    #: host ports one pod may hold: the admission policies refuse more, the controller gets the same flag
    max_host_ports_per_pod: int = c.DEFAULT_MAX_HOST_PORTS_PER_POD
    #: the port of /metrics; HTTPS behind the API server's authorization unless ``metrics_secure`` is False
    metrics_port: int = 8443
    metrics_secure: bool = True
    #: the port of the plain /healthz and /readyz the kubelet probes
    health_port: int = 8081
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    # Extra controller arguments, e.g. ("--workers=32",).
    controller_args: tuple[str, ...] = field(default_factory=tuple)
    #: make a PodGroup per job for this gang scheduler (``volcano``, ``scheduler-plugins``, ``kubernetes``): its RBAC
    #: and flag; ``none``: no gang rights, and the flag; None: the native gang's rights, no flag (gang.py)
    gang_scheduler: str | None = None
    #: also serve the kinds in kubeflow.org/v1: their CRDs, RBAC, and the controller's ``--kubeflow-api``
    kubeflow_api: bool = False
    #: a Prometheus Operator ServiceMonitor for the metrics Service
    service_monitor: bool = False
    #: a Prometheus Operator PodMonitor; with secure metrics it sends the token in this Secret's ``token`` key
    pod_monitor: bool = False
    pod_monitor_token_secret: str = ""
    #: the Grafana dashboard in a ConfigMap labelled ``grafana_dashboard: "1"`` (Grafana's sidecar loads those)
    dashboard_configmap: bool = False


class InvalidOptions(ValueError):
    """An option the manifests cannot be rendered with; the message names it and what to give instead."""


def check_options(options: ManifestOptions) -> None:
    """Refuse what would install a broken controller (the chart's values.schema.json says the same)."""
    if options.replicas < 1:
        raise InvalidOptions(f"replicas must be at least 1, not {options.replicas}")
    if options.replicas > 1 and not options.leader_elect:
        raise InvalidOptions(
            f"replicas {options.replicas} needs leader election: without a Lease every replica would act at once"
        )
    if not _DNS_LABEL.fullmatch(options.namespace):
        raise InvalidOptions(f"namespace {options.namespace!r} is not a namespace name (RFC 1123 label)")
    for name in options.watch_namespaces:
        if not _DNS_LABEL.fullmatch(name):
            raise InvalidOptions(
                f"watch namespace (--watch-namespace, watchNamespaces) {name!r} is not a namespace name: lower-case"
                " letters, digits and '-', at most 63, starting and ending with a letter or digit"
            )
    match = _PORT_RANGE.fullmatch(options.host_port_range)
    if match is None or not 1 <= int(match[1]) <= int(match[2]) <= 65535:
        raise InvalidOptions(
            f"host port range {options.host_port_range!r} must be LOW-HIGH with 1 <= LOW <= HIGH <= 65535"
        )
    if options.max_host_ports_per_pod < 1:
        raise InvalidOptions(f"max host ports per pod must be at least 1, not {options.max_host_ports_per_pod}")
    for what, port in (("metrics port", options.metrics_port), ("health port", options.health_port)):
        if not 1 <= port <= 65535:
            raise InvalidOptions(f"{what} {port} is not a port (1-65535)")
    if options.metrics_port == options.health_port:
        raise InvalidOptions(f"the metrics and health ports must differ, not both {options.metrics_port}")
    if options.gang_scheduler is not None and options.gang_scheduler not in GANG_SCHEDULERS:
        raise InvalidOptions(f"gang scheduler {options.gang_scheduler!r} is not one of {', '.join(GANG_SCHEDULERS)}")
    if options.image_pull_policy not in PULL_POLICIES:
        raise InvalidOptions(
            f"image pull policy {options.image_pull_policy!r} is not one of {', '.join(PULL_POLICIES)}"
        )
    if options.pod_monitor and options.metrics_secure and not options.pod_monitor_token_secret:
        raise InvalidOptions(
            "a PodMonitor of secure metrics needs the name of a Secret whose 'token' key holds the token of a"
            " ServiceAccount bound to the metrics reader role (pod_monitor_token_secret)"
        )


def metrics_reader_role(namespace: str) -> str:
    """The ClusterRole that lets a subject read /metrics (its name carries the install's namespace, so two
    namespaced installs can live in one cluster)."""
    return f"kubedl-py-{namespace}-metrics-reader"


def nodes_role(namespace: str) -> str:
    """The ClusterRole (and binding) of a namespaced install's one cluster-scoped read: a node by name."""
    return f"kubedl-py-{namespace}-nodes"


def metrics_auth_binding(namespace: str) -> str:
    """The ClusterRoleBinding that lets the controller send TokenReviews and SubjectAccessReviews."""
    return f"kubedl-py-{namespace}-metrics-auth"


# ------------------------------------------------------------------------------------------- rendering


def _load_template(name: str) -> str:
    return resources.files("kubedl_py.templates").joinpath(name).read_text(encoding="utf-8")


def dashboard_json() -> str:
    """The Grafana dashboard of the controller's metrics (package data; the chart carries a copy)."""
    return _load_template(DASHBOARD)


def _dump(document: object) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n")


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.splitlines())


#: owned resources the controller may create but never read (they hold keys)
UNREAD_RESOURCES = frozenset({"secrets"})


def _owned_rules() -> list[dict[str, object]]:
    """RBAC rules for the objects the kinds' jobs own besides pods and Services, per API group: ``create``, and
    ``get`` to check that an object found in the place of one of a job's is the job's own (never for Secrets)."""
    resources: dict[tuple[str, bool], list[str]] = {}
    owners: dict[tuple[str, bool], list[str]] = {}
    for plugin in all_kinds():
        for group, resource in plugin.owned_resources:
            key = (group, resource not in UNREAD_RESOURCES)
            if resource not in resources.setdefault(key, []):
                resources[key].append(resource)
            if plugin.kind not in owners.setdefault(key, []):
                owners[key].append(plugin.kind)
    return [
        {
            "group": group,
            "resources": names,
            "why": ", ".join(owners[(group, readable)]),
            "verbs": ["create", "get"] if readable else ["create"],
        }
        for (group, readable), names in resources.items()
    ]


@dataclass(frozen=True)
class _Mode:
    """The helpers of the templates (module docstring), in manifest mode or chart mode."""

    chart: bool

    def value(self, path: str, python_value: object, *, required: str | None = None) -> str:
        """A scalar; ``required``: chart mode fails with this message when the value is empty."""
        if self.chart:
            if required is not None:
                return f"{{{{ required {json.dumps(required)} $.Values.{path} }}}}"
            return f"{{{{ $.Values.{path} }}}}"
        return str(python_value)

    def block(self, path: str, python_value: object, indent: int) -> str:
        """A YAML subtree after ``key:`` on the same line."""
        if self.chart:
            return f"{{{{- toYaml $.Values.{path} | nindent {indent} }}}}"
        return "\n" + _indent(_dump(python_value), indent)

    def when(self, condition: str | None, enabled: bool, caller: Callable[[], str]) -> str:
        if condition is None:
            return caller() if enabled else ""
        if self.chart:
            return f"\n{{{{- if {condition} }}}}{caller()}\n{{{{- end }}}}"
        return caller() if enabled else ""

    def each(self, items: str, values: Sequence[object], var: str, caller: Callable[[str], str]) -> str:
        if self.chart:
            return f"\n{{{{- range {var} := {items} }}}}{caller(f'{{{{ {var} }}}}')}\n{{{{- end }}}}"
        return "".join(caller(str(value)) for value in values)

    def fail_if(self, condition: str, message: str) -> str:
        """Chart mode: refuse to render when ``condition`` holds (the manifests refuse in :func:`check_options`)."""
        if not self.chart:
            return ""
        return f"\n{{{{- if {condition} }}}}\n{{{{- fail {json.dumps(message)} }}}}\n{{{{- end }}}}"

    def helm_labels(self, indent: int) -> str:
        """Helm's bookkeeping labels (chart mode only; the chart test strips them before comparing)."""
        if not self.chart:
            return ""
        pad = " " * indent
        return (
            f'\n{pad}helm.sh/chart: {{{{ printf "%s-%s" $.Chart.Name $.Chart.Version | replace "+" "_" }}}}'
            f"\n{pad}app.kubernetes.io/managed-by: {{{{ $.Release.Service }}}}"
        )


#: chart mode's Go expressions for what the manifests decide in Python
CHART_IMAGE = (
    "{{ $.Values.image.repository }}{{ if $.Values.image.tag }}:{{ $.Values.image.tag }}"
    "{{ else if not $.Values.image.digest }}:{{ $.Chart.AppVersion }}{{ end }}"
    "{{ if $.Values.image.digest }}@{{ $.Values.image.digest }}{{ end }}"
)


def _environment(mode: _Mode) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load_template),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = _dump
    env.filters["add_suffix"] = lambda text, suffix: f"{text}{suffix}"
    env.filters["indent_text"] = _indent
    env.globals.update(
        value=mode.value,
        block=mode.block,
        when=mode.when,
        each=mode.each,
        helm_labels=mode.helm_labels,
        fail_if=mode.fail_if,
        tojson_list=lambda items: yaml.safe_dump(list(items), default_flow_style=True).strip(),
    )
    return env


def _context(options: ManifestOptions, mode: _Mode) -> dict[str, Any]:
    chart = mode.chart
    groups = []
    for group in (KUBEDL, KUBEFLOW):
        plurals = [p.framework.plural for p in all_kinds() if group in p.groups]
        condition = None if group is KUBEDL else "$.Values.kubeflowApi.enabled"
        groups.append(
            {
                "group": group.group,
                "plurals": plurals,
                "condition": condition,
                "enabled": group is KUBEDL or options.kubeflow_api,
            }
        )
    kubeflow_crds = [crd for crd in all_crds(kubeflow=True) if crd["spec"]["group"] == KUBEFLOW.group]
    for crd in kubeflow_crds:
        # kept by `helm uninstall`, as Helm keeps what is in a chart's crds/: deleting a CRD deletes every job
        crd["metadata"].setdefault("annotations", {})["helm.sh/resource-policy"] = "keep"
    namespace = "{{ $.Release.Namespace }}" if chart else options.namespace
    return {
        "admission": _admission(options, chart),
        "default_max_host_ports": c.DEFAULT_MAX_HOST_PORTS_PER_POD,
        "options": options,
        "chart": chart,
        "ns": namespace,
        "image": CHART_IMAGE if chart else options.image,
        "watch_namespaces_csv": '{{ join "," $.Values.watchNamespaces }}'
        if chart
        else ",".join(options.watch_namespaces),
        "kubedl_crds": [] if chart else all_crds(),
        "kubeflow_crds": kubeflow_crds,
        "groups": groups,
        "owned": _owned_rules(),
        "dashboard": '{{ $.Files.Get "dashboards/kubedl-py.json" | indent 4 }}'
        if chart
        else _indent(dashboard_json(), 4),
        "reader_role": metrics_reader_role("{{ $.Release.Namespace }}" if chart else options.namespace),
        "auth_binding": metrics_auth_binding("{{ $.Release.Namespace }}" if chart else options.namespace),
        "nodes_role": nodes_role("{{ $.Release.Namespace }}" if chart else options.namespace),
    }


#: stands for the chart's value of the host ports a pod may hold, in policies rendered for the chart
_MAX_HOST_PORTS_MARK = 987654321


def _admission(options: ManifestOptions, chart: bool) -> str:
    """The jobs' ValidatingAdmissionPolicies and bindings (``kubedl_py.api.admission``), as YAML. They are
    generated, not templates, so for the chart two things are written into the generated text: the bound on
    host ports per pod (a number inside CEL expressions and messages) and the kubeflow.org group of each
    policy's match rule, kept only with ``kubeflowApi.enabled``."""
    if not chart:
        documents = admission_policies(kubeflow=options.kubeflow_api, max_host_ports=options.max_host_ports_per_pod)
        return "\n---\n".join(_dump(doc) for doc in documents)
    documents = admission_policies(kubeflow=True, max_host_ports=_MAX_HOST_PORTS_MARK)
    text = "\n---\n".join(_dump(doc) for doc in documents)
    text = text.replace(str(_MAX_HOST_PORTS_MARK), "{{ int $.Values.hostNetwork.maxHostPortsPerPod }}")
    line = re.compile(rf"^(\s*- {re.escape(KUBEFLOW.group)})$", re.MULTILINE)
    text, found = line.subn(r"{{- if $.Values.kubeflowApi.enabled }}\n\1\n{{- end }}", text)
    if found != len(documents) // 2 or str(_MAX_HOST_PORTS_MARK) in text:  # pragma: no cover - api/admission.py changed
        raise RuntimeError("the admission policies changed shape: teach render._admission the new one")
    return text


def _documents(text: str) -> str:
    """The YAML stream without empty documents (a part whose optional documents were all left out)."""
    parts = [part.strip("\n") for part in re.split(r"^---$", text, flags=re.MULTILINE)]
    return "\n---\n".join(part for part in parts if part.strip())


def render_manifests(options: ManifestOptions | None = None) -> str:
    """The install manifests as one YAML stream, documents separated by ``---``."""
    options = options or ManifestOptions()
    check_options(options)
    if options.kubeflow_api and "--kubeflow-api" in options.controller_args:
        options = replace(options, controller_args=tuple(a for a in options.controller_args if a != "--kubeflow-api"))
    mode = _Mode(chart=False)
    env = _environment(mode)
    context = _context(options, mode)
    names = ("crds.yaml.j2",) if options.crds_only else TEMPLATES
    parts = [_documents(env.get_template(name).render(**context)) for name in names]
    return "\n---\n".join(part for part in parts if part) + "\n"


def render_chart_templates() -> dict[str, str]:
    """The chart's ``templates/<name>.yaml`` files (Go templates), by file name; the CRDs of
    ``training.kubedl.io`` are not among them (they go to the chart's ``crds/``)."""
    mode = _Mode(chart=True)
    env = _environment(mode)
    context = _context(ManifestOptions(), mode)
    files: dict[str, str] = {}
    for name in TEMPLATES:
        if name == "namespace.yaml.j2":
            continue  # Helm installs into a namespace it is given (`--namespace`, `--create-namespace`)
        text = env.get_template(name).render(**context).strip("\n")
        target = "kubeflow-crds.yaml" if name == "crds.yaml.j2" else name.removesuffix(".j2")
        files[target] = text + "\n"
    return files
