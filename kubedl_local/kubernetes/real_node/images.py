"""Images for the real node without a registry: the sandbox (pause) image, and images built here with podman.

Why: no registry can be reached from the machines this project runs on, so nothing is pulled. Every image a
pod of the node uses is put into containerd's store first (namespace ``k8s.io``, the one the CRI plugin
reads), under the name a pod spec means: ``kubedl-py:0.1.0`` is ``docker.io/library/kubedl-py:0.1.0`` to
containerd, as Docker's naming rules say, while podman calls its build ``localhost/kubedl-py:0.1.0``.

- The pause image is made here from the ``pause`` program (``binaries.py``): one layer holding the static
  binary, as a ``docker save`` archive, imported with ``ctr``. Its tag carries the digest of the program's
  source, and containerd pins it (``config.py``), so image garbage collection never removes it.
- Any other image is taken from podman's store (``make image`` builds the controller's, and its Debian base
  ``localhost/kubedl-py-base:bookworm``): ``podman save`` writes an archive, ``ctr images import`` reads it,
  ``ctr images tag`` gives it the normalized name. A pod then runs it with ``imagePullPolicy: IfNotPresent``
  or ``Never``; ``Always`` would ask a registry and fail.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

from kubedl_local.image import Engine
from kubedl_local.kubernetes.real_node.binaries import pause_digest

PAUSE_REPOSITORY = "localhost/kubedl-py/pause"
#: the containerd namespace of the CRI plugin
NAMESPACE = "k8s.io"


class ImageLoadError(RuntimeError):
    """An image could not be put into the node's store; the message says which and how to make it."""


def pause_image() -> str:
    return f"{PAUSE_REPOSITORY}:{pause_digest()}"


def normalized(reference: str) -> str:
    """The fully qualified name containerd gives ``reference`` (Docker's rules): ``kubedl-py:0.1.0`` ->
    ``docker.io/library/kubedl-py:0.1.0``; ``busybox`` -> ``docker.io/library/busybox:latest``."""
    name, _, digest = reference.partition("@")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = "docker.io", name
        if "/" not in path:
            path = f"library/{path}"
    last = path.rsplit("/", 1)[-1]
    if not digest and ":" not in last:
        path += ":latest"
    return f"{domain}/{path}" + (f"@{digest}" if digest else "")


def _architecture() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def pause_archive(pause_binary: Path, target: Path) -> Path:
    """Write the pause image as a ``docker save`` archive at ``target``."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = pause_binary.read_bytes()
        member = tarfile.TarInfo("pause")
        member.size, member.mode, member.mtime = len(data), 0o755, 0
        tar.addfile(member, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    layer_id = hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": _architecture(),
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
        "history": [{"created_by": "kubedl-py: the pod sandbox's process (kubedl_local/kubernetes/real_node)"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    manifest = [{"Config": config_name, "RepoTags": [pause_image()], "Layers": [f"{layer_id}/layer.tar"]}]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, mode="w") as archive:
        for name, payload in (
            (f"{layer_id}/layer.tar", layer_bytes),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(payload), 0o644, 0
            archive.addfile(member, io.BytesIO(payload))
    return target


def archive_tag(archive: Path) -> str:
    """The name a ``docker save`` archive gives its image (what ``ctr images import`` calls it)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        if member is None:
            raise ImageLoadError(f"{archive} has no manifest.json: not a docker-archive")
        manifest = json.loads(member.read())
    tags = manifest[0].get("RepoTags") or [] if manifest else []
    if not tags:
        raise ImageLoadError(f"{archive} names no image (RepoTags is empty)")
    return str(tags[0])


class Images:
    """The node's image store, through ``ctr``."""

    def __init__(self, ctr: Path, socket: Path, work: Path) -> None:
        self.ctr = ctr
        self.socket = socket
        self.work = work

    def _ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.ctr), "--address", str(self.socket), "--namespace", NAMESPACE, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def names(self) -> list[str]:
        result = self._ctr("images", "list", "--quiet")
        return result.stdout.split() if result.returncode == 0 else []

    def import_archive(self, archive: Path, *, source: str, names: Sequence[str] = ()) -> None:
        """Import a ``docker save`` archive whose image is tagged ``source``; tag it with ``names`` too."""
        result = self._ctr("images", "import", "--no-unpack=false", str(archive))
        if result.returncode != 0:
            raise ImageLoadError(f"ctr images import {archive} failed: {(result.stderr or result.stdout).strip()}")
        for name in names:
            if name == source:
                continue
            tagged = self._ctr("images", "tag", "--force", source, name)
            if tagged.returncode != 0:
                raise ImageLoadError(f"ctr images tag {source} {name} failed: {tagged.stderr.strip()}")
        missing = sorted({source, *names} - set(self.names()))
        if missing:
            raise ImageLoadError(f"after importing {archive}, the node's store lacks {', '.join(missing)}")

    def load_pause(self, pause_binary: Path) -> str:
        image = pause_image()
        if image not in self.names():
            self.import_archive(pause_archive(pause_binary, self.work / "pause.tar"), source=image)
        return image

    def load_from_podman(self, reference: str) -> str:
        """Copy ``reference`` from podman's store (``kubedl-py:0.1.0`` is found as ``localhost/kubedl-py:0.1.0``)
        into the node under ``normalized(reference)``; returns that name."""
        engine = Engine("podman")
        candidates = [reference] if reference.startswith("localhost/") else [reference, f"localhost/{reference}"]
        found = None
        for candidate in candidates:
            probe = subprocess.run(
                engine.command("image", "exists", candidate), capture_output=True, check=False, timeout=60
            )
            if probe.returncode == 0:
                found = candidate
                break
        if found is None:
            raise ImageLoadError(
                f"the image {reference} is not in podman's store: build it first (`make image` builds "
                f"kubedl-py:<version>), or load it into the node yourself with `{self.ctr} --address "
                f"{self.socket} -n {NAMESPACE} images import <archive>`"
            )
        archive = self.work / (hashlib.sha256(found.encode()).hexdigest()[:16] + ".tar")
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.unlink(missing_ok=True)
        saved = subprocess.run(
            engine.command("save", "--format", "docker-archive", "--output", str(archive), found),
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if saved.returncode != 0:
            raise ImageLoadError(f"podman save {found} failed: {saved.stderr.strip()}")
        try:
            target = normalized(reference)
            self.import_archive(archive, source=normalized(archive_tag(archive)), names=[target])
        finally:
            archive.unlink(missing_ok=True)
        return target
