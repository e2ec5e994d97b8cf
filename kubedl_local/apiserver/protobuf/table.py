"""The field table of every built-in kind, compiled from Kubernetes' own published sources.

Why: client-go sends built-in kinds as ``application/vnd.kubernetes.protobuf`` (``kubectl create namespace``,
``create configmap``, any Go controller), and a protobuf body means nothing without the field numbers and
types of the message. Those are not ours to copy into the repository; they are published, per release, in
the Go modules ``k8s.io/api`` and ``k8s.io/apimachinery``. So this module downloads those two module zips
from the Go module proxy at the pinned ``STAGING_VERSION`` (``$GOPROXY`` is honoured), reads two kinds of
file from them, and writes one compiled table under the kubedl-py cache directory, once:

- ``generated.proto`` (a small proto2 subset: ``message``, ``optional``/``repeated``/``required`` fields,
  ``map<k, v>``): message names, field numbers and wire types;
- the Go structs the messages are generated from (``types.go`` and friends): what the proto cannot say but
  the JSON form depends on: the JSON name, ``omitempty``/``omitzero``, pointers (an explicit ``false`` or
  ``0`` is kept, an absent one is not), embedded structs that JSON inlines (``Volume`` carries
  ``VolumeSource`` as field 2 in protobuf, inline in JSON), and named slice types (``ExtraValue``) whose
  protobuf wrapper message is a bare array in JSON.

The table is keyed by proto message name, with ``kinds`` mapping ``apiVersion/kind`` to the message. A build
happens under a file lock and is renamed into place, so concurrent builders never see half a table.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubedl_local.pins import STAGING_VERSION, cache_root

#: bump when the table's layout changes: an older cached table is then rebuilt
FORMAT = 4
MODULES = ("k8s.io/api", "k8s.io/apimachinery")
DEFAULT_PROXY = "https://proxy.golang.org"
#: kinds of meta.k8s.io/v1 every group version also accepts (client-go encodes DeleteOptions in the
#: request's own group version)
META_PACKAGE = "k8s.io.apimachinery.pkg.apis.meta.v1"
FETCH_TIMEOUT = 60.0

Table = dict[str, Any]


class TableUnavailable(RuntimeError):
    """The table is not cached and could not be built (offline); the message says how to get it."""


def table_path(version: str = STAGING_VERSION) -> Path:
    return cache_root() / "protobuf" / f"v{version}" / "table.json"


def how_to_get() -> str:
    return (
        f"the protobuf field table of Kubernetes v{STAGING_VERSION} is not cached at {table_path()} and could "
        f"not be downloaded: run `python -m kubedl_local.sources` (or `make test`) once with access to "
        f"{proxy_url()}, or send application/json"
    )


def proxy_url() -> str:
    """The first HTTP(S) entry of ``$GOPROXY`` (as the go command reads it), else proxy.golang.org."""
    for raw in re.split(r"[,|]", os.environ.get("GOPROXY", "")):
        entry = raw.strip()
        if entry.startswith(("http://", "https://")):
            return entry.rstrip("/")
    return DEFAULT_PROXY


def load_cached(version: str = STAGING_VERSION) -> Table | None:
    path = table_path(version)
    try:
        table: Table = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if table.get("format") != FORMAT or table.get("version") != version:
        return None
    return table


def ensure_table(version: str = STAGING_VERSION, *, fetch: bool = True) -> Table:
    """The compiled table: from the cache, else downloaded and compiled (once, under a lock)."""
    table = load_cached(version)
    if table is not None:
        return table
    if not fetch:
        raise TableUnavailable(how_to_get())
    path = table_path(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent / ".lock"):
        table = load_cached(version)  # built by whoever held the lock before us
        if table is not None:
            return table
        try:
            sources = {module: _download(module, version) for module in MODULES}
        except (OSError, urllib.error.URLError, zipfile.BadZipFile) as exc:
            raise TableUnavailable(f"{how_to_get()} ({exc})") from exc
        table = compile_table(sources, version)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".table-")
        with os.fdopen(fd, "w") as handle:
            json.dump(table, handle, separators=(",", ":"))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return table


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(module: str, version: str) -> dict[str, str]:
    """The files of one module zip this table needs (``generated.proto``, Go sources, ``doc.go``), by path
    inside the module (``core/v1/generated.proto``)."""
    url = f"{proxy_url()}/{module}/@v/v{version}.zip"
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT) as response:
        data = response.read()
    prefix = f"{module}@v{version}/"
    out: dict[str, str] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            if not name.startswith(prefix):
                continue
            rel = name[len(prefix) :]
            wanted = rel.endswith("/generated.proto") or (
                rel.endswith(".go")
                and not rel.endswith(("_test.go", ".pb.go"))
                and not rel.rsplit("/", 1)[-1].startswith("zz_generated")
            )
            if wanted:
                out[rel] = archive.read(name).decode("utf-8", "replace")
    return out


# ------------------------------------------------------------------------------------------ .proto parsing

_TOKEN = re.compile(r'"[^"]*"|[A-Za-z_.][A-Za-z0-9_.]*|\d+|[{}<>;=,\[\]()]')


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


def parse_proto(text: str) -> tuple[str, str, dict[str, list[dict[str, Any]]]]:
    """(package, go_package, {message: [field, ...]}) of one generated.proto.

    Each field: ``name``, ``number``, ``label`` (optional | repeated | map), ``type`` and for maps ``key``.
    Only what go-to-protobuf emits is understood; anything else is an error rather than a silent guess.
    """
    tokens = _TOKEN.findall(_strip_comments(text))
    pos = 0
    package = go_package = ""
    messages: dict[str, list[dict[str, Any]]] = {}

    def take(expected: str | None = None) -> str:
        nonlocal pos
        token: str = tokens[pos]
        pos += 1
        if expected is not None and token != expected:
            raise ValueError(f"expected {expected!r}, got {token!r} near token {pos}")
        return token

    def skip_statement() -> None:
        while take() != ";":
            pass

    while pos < len(tokens):
        token = take()
        if token in ("syntax", "import"):
            skip_statement()
        elif token == "package":
            package = take()
            take(";")
        elif token == "option":
            name = take()
            take("=")
            value = take()
            take(";")
            if name == "go_package":
                go_package = value.strip('"')
        elif token == "message":
            name = take()
            take("{")
            fields: list[dict[str, Any]] = []
            while tokens[pos] != "}":
                fields.append(_parse_field(take, tokens[pos]))
            take("}")
            messages[name] = fields
        else:
            raise ValueError(f"unsupported proto construct {token!r}")
    return package, go_package, messages


def _parse_field(take: Any, lookahead: str) -> dict[str, Any]:
    if lookahead == "map":
        take("map")
        take("<")
        key = take()
        take(",")
        value = take()
        take(">")
        name = take()
        take("=")
        number = int(take())
        take(";")
        return {"name": name, "number": number, "label": "map", "type": value, "key": key}
    label = take()
    if label not in ("optional", "repeated", "required"):
        raise ValueError(f"unsupported field label {label!r}")
    typ = take()
    name = take()
    take("=")
    number = int(take())
    token = take()
    if token == "[":  # field options ([packed = true] and the like): nothing we need
        while take() != "]":
            pass
        token = take()
    if token != ";":
        raise ValueError(f"expected ';' after field {name}, got {token!r}")
    return {"name": name, "number": number, "label": "repeated" if label == "repeated" else "optional", "type": typ}


# ------------------------------------------------------------------------------------------ Go parsing

_STRUCT = re.compile(r"^type\s+(\w+)\s+struct\s*\{\s*$")
_NAMED_SLICE = re.compile(r"^type\s+(\w+)\s+\[\][\w.]+\s*$")
_FIELD = re.compile(r"^\s*(?:(\w+)\s+)?(\*?[\w.\[\]*]+)\s+`([^`]*)`")
_TAG = re.compile(r'(\w+):"([^"]*)"')
_PACKAGE = re.compile(r"^package\s+(\w+)", re.MULTILINE)
_IMPORT = re.compile(r'^\s*(?:import\s+)?(\w+\s+)?"([\w./-]+)"\s*$', re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?")
_GO_BUILTIN = frozenset(
    {"bool", "byte", "string", "rune", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16"}
    | {"uint32", "uint64", "float32", "float64", "map", "any"}
)


def go_type_name(text: str, package: str, imports: dict[str, str]) -> str:
    """A Go type as ``reflect`` prints it in an unmarshal error: package-qualified, pointer dropped
    (``[]Container`` in core/v1 is ``[]v1.Container``, ``metav1.ObjectMeta`` is ``v1.ObjectMeta``)."""

    def qualify(match: re.Match[str]) -> str:
        ident = match.group(0)
        if ident in _GO_BUILTIN:
            return ident
        if "." in ident:
            alias, name = ident.split(".", 1)
            return f"{imports.get(alias, alias)}.{name}"
        return f"{package}.{ident}"

    return _IDENT.sub(qualify, text.lstrip("*"))


_ENUM_TYPE = re.compile(r"^type\s+(\w+)\s+\w+\s*$")
_CONST = re.compile(r'^\s*(?:const\s+)?(\w+)\s+(\w+)\s*=\s*"([^"]*)"')


def parse_enums(text: str) -> dict[str, list[list[str]]]:
    """The ``+enum`` types of a Go file and their constants: type -> [[value, doc comment], ...].

    What openapi-gen turns into ``enum`` and "Possible enum values" in the published OpenAPI."""
    enums: set[str] = set()
    consts: dict[str, list[list[str]]] = {}
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comment.append(stripped[2:].strip())
            continue
        m = _ENUM_TYPE.match(line)
        if m and any(c == "+enum" for c in comment):
            enums.add(m.group(1))
        m = _CONST.match(line)
        if m:
            doc = " ".join(" ".join(c for c in comment if c and not c.startswith("+")).split())
            consts.setdefault(m.group(2), []).append([m.group(3), doc, m.group(1)])
        comment = []
    out: dict[str, list[list[str]]] = {}
    for name in enums:
        values = []
        for value, doc, const in consts.get(name, []):
            text_doc = doc.strip()
            if text_doc.startswith(const):
                text_doc = text_doc[len(const) :].strip()
            values.append([value, text_doc])
        out[name] = sorted(values)
    return out


def parse_go(text: str) -> tuple[dict[str, dict[int, dict[str, Any]]], set[str]]:
    """Struct fields that carry a protobuf tag, by struct and field number, and the named slice types.

    Each field: ``json`` (name, "" when inlined), ``omitempty``, ``omitzero``, ``pointer``, ``embedded``,
    ``go`` (the Go type as an unmarshal error names it) and ``goname`` (the Go field name, which such an
    error shows for an inlined struct)."""
    structs: dict[str, dict[int, dict[str, Any]]] = {}
    slices: set[str] = set()
    m = _PACKAGE.search(text)
    package = m.group(1) if m else ""
    imports: dict[str, str] = {}
    for alias, path in _IMPORT.findall(text.split("\n)", 1)[0] if "import (" in text else text[:4000]):
        imports[alias.strip() or path.rsplit("/", 1)[-1]] = path.rsplit("/", 1)[-1]
    current: str | None = None
    depth = 0
    for line in text.splitlines():
        if current is None:
            m = _STRUCT.match(line)
            if m:
                current, depth = m.group(1), 1
                structs[current] = {}
                continue
            m = _NAMED_SLICE.match(line)
            if m:
                slices.add(m.group(1))
            continue
        code = line.split("//", 1)[0] if "`" not in line else line
        depth += code.count("{") - code.count("}")
        if depth <= 0:
            current = None
            continue
        if depth != 1:
            continue
        m = _FIELD.match(line)
        if not m:
            continue
        go_name, go_type, tag = m.groups()
        tags = dict(_TAG.findall(tag))
        proto = tags.get("protobuf")
        if not proto or proto == "-":
            continue
        parts = proto.split(",")
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        json_tag = tags.get("json", "")
        json_parts = json_tag.split(",")
        json_name = json_parts[0]
        embedded = go_name is None
        if not json_name and not embedded:
            json_name = go_name or ""
        structs[current][int(parts[1])] = {
            "json": json_name,
            "omitempty": "omitempty" in json_parts[1:],
            "omitzero": "omitzero" in json_parts[1:],
            "pointer": go_type.startswith("*"),
            "embedded": embedded,
            "go": go_type_name(go_type, package, imports),
            "goname": go_name or go_type.lstrip("*").rsplit(".", 1)[-1],
        }
    return structs, slices


# ------------------------------------------------------------------------------------------ compiling


def _group_of(doc: str, sources: list[str]) -> str | None:
    """The API group of a package: ``+groupName=`` in doc.go, else ``const GroupName = "..."``."""
    m = re.search(r"^//\s*\+groupName=(\S*)\s*$", doc, re.MULTILINE)
    if m:
        return m.group(1)
    for text in sources:
        m = re.search(r'^\s*(?:const\s+)?GroupName\s*=\s*"([^"]*)"', text, re.MULTILINE)
        if m:
            return m.group(1)
    return None


def compile_table(sources: dict[str, dict[str, str]], version: str) -> Table:
    """Join the proto messages with their Go structs; see the module docstring. ``sources``: module ->
    {path inside the module: text}."""
    messages: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    enums: dict[str, dict[str, list[list[str]]]] = {}
    for module, files in sorted(sources.items()):
        dirs = sorted({path.rsplit("/", 1)[0] for path in files if path.endswith("/generated.proto")})
        for directory in dirs:
            package, go_package, protos = parse_proto(files[f"{directory}/generated.proto"])
            structs: dict[str, dict[int, dict[str, Any]]] = {}
            slices: set[str] = set()
            doc = ""
            go_sources: list[str] = []
            for path, text in files.items():
                if path.rsplit("/", 1)[0] != directory or not path.endswith(".go"):
                    continue
                go_sources.append(text)
                if path.endswith("/doc.go"):
                    doc = text
                found, named = parse_go(text)
                structs.update(found)
                slices |= named
            found_enums = parse_enums("\n".join(go_sources))  # a type and its constants may be in different files
            if found_enums:
                enums[package] = found_enums
            for name, fields in protos.items():
                messages[f"{package}.{name}"] = _compile_message(package, name, fields, structs.get(name, {}), slices)
            group = _group_of(doc, go_sources)
            if module == "k8s.io/api" and group is not None:
                api_version = f"{group}/{directory.rsplit('/', 1)[-1]}" if group else directory.rsplit("/", 1)[-1]
                for name in protos:
                    kinds[f"{api_version}/{name}"] = f"{package}.{name}"
            if go_package == "k8s.io/apimachinery/pkg/apis/meta/v1":
                for name in protos:
                    kinds[f"meta.k8s.io/v1/{name}"] = f"{package}.{name}"
    return {"format": FORMAT, "version": version, "kinds": kinds, "messages": messages, "enums": enums}


def _compile_message(
    package: str,
    name: str,
    fields: list[dict[str, Any]],
    go: dict[int, dict[str, Any]],
    slices: set[str],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in fields:
        info = go.get(field["number"], {})
        typ = field["type"]
        if typ not in _SCALARS:
            typ = typ[1:] if typ.startswith(".") else (f"{package}.{typ}" if "." not in typ else typ)
        entry: dict[str, Any] = {
            "name": info.get("json", field["name"]),
            "label": field["label"],
            "type": typ,
            # Without Go information (a hand-written type): omit what is empty, keep what is sent.
            "omitempty": info.get("omitempty", True),
            "omitzero": info.get("omitzero", False),
            "pointer": info.get("pointer", False),
            "inline": bool(info.get("embedded")) and info.get("json", "x") == "",
            "go": info.get("go", ""),
            "goname": info.get("goname", field["name"]),
        }
        if field["label"] == "map":
            key = field["key"]
            entry["key"] = key
        out[str(field["number"])] = entry
    return {"fields": out, "wrapper": name in slices and [f["name"] for f in fields] == ["items"]}


_SCALARS = {"string", "bytes", "bool", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "double", "float"}
_SCALARS |= {"fixed32", "fixed64", "sfixed32", "sfixed64"}
