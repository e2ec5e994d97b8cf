"""Renders the install manifests: Namespace, CRDs, admission policies, RBAC, controller Deployment and metrics
Service.

The CRDs are not templates: they are generated from the API models (``kubedl_py.api.crd``) and dumped
into ``crds.yaml.j2`` verbatim, so the installed schema is always the one the code validates against.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources

import jinja2
import yaml

from kubedl_py._version import __version__
from kubedl_py.api import constants as c
from kubedl_py.api.admission import admission_policies
from kubedl_py.api.crd import all_crds
from kubedl_py.api.groups import KUBEDL, KUBEFLOW
from kubedl_py.api.kinds import all_kinds

#: The image ``make image`` builds (kubedl_py/local/image.py tags it with this name): the manifests of a release
#: pin the controller image of that same release.
DEFAULT_IMAGE = f"kubedl-py:{__version__}"
DEFAULT_NAMESPACE = "kubedl-system"
TEMPLATES = (
    "namespace.yaml.j2",
    "crds.yaml.j2",
    "admission.yaml.j2",
    "rbac.yaml.j2",
    "deployment.yaml.j2",
    "service.yaml.j2",
)


@dataclass(frozen=True)
class ManifestOptions:
    image: str = DEFAULT_IMAGE
    namespace: str = DEFAULT_NAMESPACE
    crds_only: bool = False
    metrics_port: int = 8080
    # Extra controller arguments, e.g. ("--gang-scheduler=volcano",).
    controller_args: tuple[str, ...] = field(default_factory=tuple)
    # Extra API groups the controller must reach (PodGroups with a gang scheduler).
    gang_scheduler: str | None = None
    #: also serve the kinds in kubeflow.org/v1: their CRDs, RBAC, and the controller's ``--kubeflow-api``
    kubeflow_api: bool = False
    #: host ports one pod may hold: the admission policies refuse more, the controller gets the same flag
    max_host_ports_per_pod: int = c.DEFAULT_MAX_HOST_PORTS_PER_POD


def _environment() -> jinja2.Environment:
    loader = jinja2.FunctionLoader(_load_template)
    return jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )


def _load_template(name: str) -> str:
    return resources.files("kubedl_py.templates").joinpath(name).read_text(encoding="utf-8")


def _dump(document: object) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n")


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


def render_manifests(options: ManifestOptions | None = None) -> str:
    """The install manifests as one YAML stream, documents separated by ``---``."""
    options = options or ManifestOptions()
    env = _environment()
    env.filters["to_yaml"] = _dump
    env.filters["add_suffix"] = lambda text, suffix: f"{text}{suffix}"
    names = ("crds.yaml.j2",) if options.crds_only else TEMPLATES
    served = [KUBEDL, KUBEFLOW] if options.kubeflow_api else [KUBEDL]
    if options.kubeflow_api and "--kubeflow-api" not in options.controller_args:
        options = replace(options, controller_args=(*options.controller_args, "--kubeflow-api"))
    if options.max_host_ports_per_pod != c.DEFAULT_MAX_HOST_PORTS_PER_POD:
        flag = f"--max-host-ports-per-pod={options.max_host_ports_per_pod}"
        options = replace(options, controller_args=(*options.controller_args, flag))
    context = {
        "options": options,
        "crds": all_crds(kubeflow=options.kubeflow_api),
        "admission": admission_policies(kubeflow=options.kubeflow_api, max_host_ports=options.max_host_ports_per_pod),
        "groups": [
            {"group": group.group, "plurals": [p.framework.plural for p in all_kinds() if group in p.groups]}
            for group in served
        ],
        "owned": _owned_rules(),
    }
    parts = [env.get_template(name).render(**context).strip("\n") for name in names]
    return "\n---\n".join(part for part in parts if part) + "\n"
