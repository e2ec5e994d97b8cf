"""The real server's name, label and metadata validation, ported from k8s.io/apimachinery with its messages.

Why a port rather than "a regex that accepts the same names": clients show the server's message to people
(``kubectl label`` prints it), and the differential suite (tests/differential) compares those messages
with the real server's word for word. Each function names the Go function it follows; two families of
messages exist there (``util/validation`` says "characters", ``api/validate/content`` says "bytes") and
both are kept where the real server uses them.
"""

from __future__ import annotations

import re
from typing import Any

from kubedl_local.apiserver.errors import FieldError

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile("^" + _DNS1123_LABEL_FMT + "$")
_DNS1123_SUBDOMAIN = re.compile("^" + _DNS1123_SUBDOMAIN_FMT + "$")
_DNS1035_LABEL = re.compile("^" + _DNS1035_LABEL_FMT + "$")
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character"
)
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character"
)
_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY = re.compile("^" + _LABEL_KEY_FMT + "$")
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE = re.compile("^" + _LABEL_VALUE_FMT + "$")
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)
#: finalizers the core API knows without a domain prefix (pkg/apis/core/helper.standardFinalizers)
STANDARD_FINALIZERS = frozenset({"kubernetes", "orphan", "foregroundDeletion"})
TOTAL_ANNOTATION_SIZE = 256 * 1024


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """validation.RegexError."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    msg += " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += f"'{example}', "
    return msg + f"regex used for validation is '{fmt}')"


def _max_len(length: int, unit: str = "characters") -> str:
    return f"must be no more than {length} {unit}"


def is_dns1123_label(value: str, unit: str = "characters") -> list[str]:
    """validation.IsDNS1123Label."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len(63, unit))
    if not _DNS1123_LABEL.match(value):
        if _DNS1123_SUBDOMAIN.match(value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str, unit: str = "characters") -> list[str]:
    """validation.IsDNS1123Subdomain."""
    errs = []
    if len(value) > 253:
        errs.append(_max_len(253, unit))
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    """validation.IsDNS1035Label."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len(63))
    if not _DNS1035_LABEL.match(value):
        errs.append(regex_error(_DNS1035_LABEL_MSG, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_label_key(value: str) -> list[str]:
    """content.IsLabelKey (validation.IsQualifiedName): a name with an optional DNS subdomain prefix."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in is_dns1123_subdomain(prefix, "bytes")]
    else:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errs.append("name part " + _max_len(63, "bytes"))
    if not _LABEL_KEY.match(name):
        errs.append("name part " + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(value: str) -> list[str]:
    """content.IsLabelValue."""
    errs = []
    if len(value.encode()) > 63:
        errs.append(_max_len(63, "bytes"))
    if not _LABEL_VALUE.match(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


#: how each kind's name is validated (ValidateNameFunc of its strategy); the rest are DNS subdomains
_NAME_RULES = {"namespaces": "label", "services": "label"}


def name_errors(plural: str, name: str, *, prefix: bool = False) -> list[str]:
    """The messages for a bad ``metadata.name`` (``prefix``: a generateName, whose trailing '-' is fine)."""
    if prefix and name.endswith("-"):
        name = name[:-1] + "a"  # maskTrailingDash
    if _NAME_RULES.get(plural) == "label":
        return is_dns1123_label(name)
    return is_dns1123_subdomain(name)


def object_meta(plural: str, md: dict[str, Any], *, kube_finalizers: bool = True) -> list[FieldError]:
    """ValidateObjectMeta of pkg/apis/core/validation: name, generateName, labels, annotations, owner
    references and finalizers (the namespace is the URL's, checked elsewhere). ``kube_finalizers``: the core
    API's rule that a finalizer without a prefix is a standard one (other groups and custom resources only
    warn)."""
    errs: list[FieldError] = []
    gen = md.get("generateName")
    if isinstance(gen, str) and gen:
        errs += [
            FieldError("FieldValueInvalid", "metadata.generateName", m, gen)
            for m in name_errors(plural, gen, prefix=True)
        ]
    name = md.get("name")
    if not name:
        errs.append(FieldError("FieldValueRequired", "metadata.name", "name or generateName is required"))
    elif isinstance(name, str):
        errs += [FieldError("FieldValueInvalid", "metadata.name", m, name) for m in name_errors(plural, name)]
    errs += labels_errors(md.get("labels"), "metadata.labels")
    errs += annotations_errors(md.get("annotations"))
    errs += owner_reference_errors(md.get("ownerReferences"))
    errs += finalizer_errors(md.get("finalizers"), kube=kube_finalizers)
    return errs


def labels_errors(labels: Any, field: str) -> list[FieldError]:
    """v1validation.ValidateLabels."""
    errs: list[FieldError] = []
    if not isinstance(labels, dict):
        return errs
    for k, v in labels.items():
        errs += [FieldError("FieldValueInvalid", field, m, k) for m in is_label_key(str(k))]
        errs += [FieldError("FieldValueInvalid", field, m, v) for m in is_label_value(str(v))]
    return errs


def annotations_errors(annotations: Any) -> list[FieldError]:
    """ValidateAnnotations: keys are qualified names (checked lower-cased), at most 256 KiB in all."""
    errs: list[FieldError] = []
    if not isinstance(annotations, dict):
        return errs
    for k in annotations:
        errs += [FieldError("FieldValueInvalid", "metadata.annotations", m, k) for m in is_label_key(str(k).lower())]
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE:
        errs.append(
            FieldError(
                "FieldValueTooLong", "metadata.annotations", f"may not be more than {TOTAL_ANNOTATION_SIZE} bytes"
            )
        )
    return errs


def owner_reference_errors(refs: Any) -> list[FieldError]:
    """ValidateOwnerReferences."""
    errs: list[FieldError] = []
    if not isinstance(refs, list):
        return errs
    first_controller = ""
    for i, ref in enumerate(refs):
        if not isinstance(ref, dict):
            continue
        path = f"metadata.ownerReferences[{i}]"
        api_version = str(ref.get("apiVersion") or "")
        if not api_version:
            errs.append(FieldError("FieldValueRequired", f"{path}.apiVersion", "must not be empty"))
        elif api_version.count("/") > 1 or api_version.endswith("/"):
            errs.append(
                FieldError(
                    "FieldValueInvalid", f"{path}.apiVersion", "must be <group>/<version> or <version>", api_version
                )
            )
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                errs.append(FieldError("FieldValueRequired", f"{path}.{key}", "must not be empty"))
        if api_version == "v1" and ref.get("kind") == "Event":
            errs.append(FieldError("FieldValueInvalid", path, "/v1, Kind=Event is disallowed from being an owner", ref))
        if ref.get("controller") is True:
            current = f"{ref.get('kind', '')}/{ref.get('name', '')}"
            if first_controller:
                why = (
                    'Only one reference can have Controller set to true. Found "true" in references for '
                    f"{first_controller} and {current}"
                )
                errs.append(FieldError("FieldValueInvalid", "metadata.ownerReferences", why, refs))
            else:
                first_controller = current
    return errs


def finalizer_errors(finalizers: Any, field: str = "metadata.finalizers", *, kube: bool = True) -> list[FieldError]:
    """ValidateFinalizers (qualified names, not both orphan and foregroundDeletion) and the core API's
    check that a name without a prefix is a standard one."""
    errs: list[FieldError] = []
    if not isinstance(finalizers, list):
        return errs
    for f in finalizers:
        errs += [FieldError("FieldValueInvalid", field, m, f) for m in is_label_key(str(f))]
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        errs.append(
            FieldError(
                "FieldValueInvalid", field, "finalizer orphan and foregroundDeletion cannot be both set", finalizers
            )
        )
    for i, f in enumerate(finalizers):
        if kube and "/" not in str(f) and f not in STANDARD_FINALIZERS:
            errs.append(
                FieldError(
                    "FieldValueInvalid",
                    f"{field}[{i}]",
                    "name is neither a standard finalizer name nor is it fully qualified",
                    f,
                )
            )
    return errs


def go_string_set(values: list[str]) -> str:
    """How Go's %#v prints a []string (ValidateNoNewFinalizers' message)."""
    return "[]string{" + ", ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"
