"""The controller image, built on the machine at hand: ``make image`` (``python -m kubedl_local.image``).

Why this exists: the Dockerfile's default base (python:3.11-slim) comes from a registry, and the development and
CI machines reach none, nor run a Docker engine. They do have podman (with runc) and Debian's package mirror,
so the base is made here: ``debootstrap`` of Debian bookworm (minimal, with python3, its venv module and CA
certificates), imported as :data:`BASE_IMAGE`. Where a Docker engine answers (``docker info``), the image is
built with docker from the Dockerfile's default base, as a user elsewhere would.

Podman on these machines needs flags that a plain ``podman run`` lacks, and every caller needs the same ones
(the build here, the tests that run the image): see :class:`Engine`.

- runc, explicitly: Debian's podman prefers crun when both are installed, and crun fails here.
- ``--cgroup-manager cgroupfs``: no systemd runs as PID 1.
- Explicit ulimits at or below the caller's hard limits: without CAP_SYS_RESOURCE (the VM drops it) runc
  cannot raise a limit, and podman's defaults are above them ("error setting rlimit type 7": its nofile
  1048576 against a hard limit of 20000; nproc above 32768 fails the same way).
- ``--network host`` for the build: container networking may not work, and pip needs PyPI.
- The host's CA bundle for pip during the build: where HTTPS goes through an inspecting proxy, only the host's
  trust store knows its CA. It is mounted into the build stage only, never copied into the image.

The base image is cached: it carries a label with the hash of its recipe, and is built again only when the
recipe changes or ``--rebuild-base`` says so.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from kubedl_py.templates.render import DEFAULT_IMAGE

#: the tag ``make image`` builds: the manifests' default image, ``kubedl-py:<version>``
IMAGE = DEFAULT_IMAGE
BASE_IMAGE = "localhost/kubedl-py-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: what the Dockerfile needs of a base: python3 (3.11 in bookworm) with the venv module (and so pip's wheel),
#: and CA certificates for pip's HTTPS
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
#: left out of the base: apt's downloads and lists (an image is rebuilt, not upgraded), docs, manuals, locales
BASE_PRUNE = (
    "var/cache/apt/archives/*.deb",
    "var/lib/apt/lists/*",
    "var/cache/debconf/*-old",
    "var/log/*.log",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
)
RECIPE_LABEL = "io.kubedl-py.base.recipe"
BASE_CHANGES = ("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 'CMD ["/bin/bash"]')
#: where the build stage finds the host's CA bundle (podman only; see the module docstring)
BUILD_CA_PATH = "/run/kubedl-py-build/ca.crt"
HOST_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
#: ulimits for podman's containers, lowered to the caller's hard limits: plenty for a controller or a pip
#: install. nproc counts every task of the container's uid on the host (root's, during the build): a few
#: hundred on a busy development machine.
NOFILE = 65536
NPROC = 4096
INSTALL_HINT = "apt-get install -y podman runc debootstrap"

EngineName = Literal["docker", "podman"]


class ImageError(Exception):
    """Why the image could not be built (one line, fit for a terminal)."""


@dataclass(frozen=True)
class Engine:
    """A container engine and the flags it needs on this host."""

    name: EngineName

    def command(self, *args: str) -> list[str]:
        """``<engine> [global flags] args...``."""
        if self.name == "docker":
            return ["docker", *args]
        flags = ["--cgroup-manager", "cgroupfs"]
        if shutil.which("runc"):
            flags[:0] = ["--runtime", "runc"]
        return ["podman", *flags, *args]

    def container_flags(self) -> list[str]:
        """Flags for anything that starts a container (``run``, ``build``): the ulimits (podman)."""
        if self.name == "docker":
            return []
        nofile, nproc = _limit(resource.RLIMIT_NOFILE, NOFILE), _limit(resource.RLIMIT_NPROC, NPROC)
        return ["--ulimit", f"nofile={nofile}", "--ulimit", f"nproc={nproc}"]

    def run(self, *args: str) -> list[str]:
        """The command line of ``<engine> run <flags> args...``."""
        return self.command("run", *self.container_flags(), *args)

    def label(self, image: str, name: str) -> str | None:
        """An image's label, or None when the image or the label is missing."""
        result = subprocess.run(
            self.command("image", "inspect", "--format", f'{{{{ index .Config.Labels "{name}" }}}}', image),
            capture_output=True,
            text=True,
            check=False,
        )
        value = result.stdout.strip()
        return value if result.returncode == 0 and value not in ("", "<no value>") else None


def _limit(which: int, wanted: int) -> str:
    """``n:n`` with n = ``wanted`` or the caller's hard limit when that is lower (runc cannot go above it)."""
    hard = resource.getrlimit(which)[1]
    value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    return f"{value}:{value}"


def _quiet(command: Sequence[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, check=False, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def detect_engine(name: str | None = None) -> Engine:
    """Docker when its engine answers, else podman when it is installed and works; or the one asked for."""
    if name not in (None, "docker", "podman"):
        raise ImageError(f"unknown container engine {name!r}: use docker or podman")
    docker_works = name in (None, "docker") and shutil.which("docker") and _quiet(["docker", "info"])
    if docker_works:
        return Engine("docker")
    if name in (None, "podman") and shutil.which("podman"):
        engine = Engine("podman")
        if not _quiet(engine.command("info")):
            raise ImageError("podman is installed but `podman info` fails: run it to see why")
        return engine
    if name == "docker":
        raise ImageError("no Docker engine answers (`docker info` failed)")
    raise ImageError(
        f"no container engine: `docker info` failed (no Docker engine) and podman is not installed (`{INSTALL_HINT}`)"
    )


# --------------------------------------------------------------------------------------------- the base image


def base_recipe() -> str:
    """A hash of everything that decides the base image's content, kept in its label to know when it is stale."""
    recipe = "\n".join([DEBIAN_SUITE, *BASE_PACKAGES, *BASE_PRUNE, *BASE_CHANGES, "variant=minbase"])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def ensure_base_image(
    engine: Engine, *, rebuild: bool = False, mirror: str = DEBIAN_MIRROR, out: TextIO = sys.stdout
) -> bool:
    """Build :data:`BASE_IMAGE` unless it is there from the same recipe; True when it was built."""
    if not rebuild and engine.label(BASE_IMAGE, RECIPE_LABEL) == base_recipe():
        _say(out, f"base image {BASE_IMAGE}: up to date (recipe {base_recipe()}; --rebuild-base builds it again)")
        return False
    if shutil.which("debootstrap") is None:
        raise ImageError(f"the base image needs debootstrap, which is not installed (`{INSTALL_HINT}`)")
    if os.geteuid() != 0:
        raise ImageError("debootstrap needs root: run `sudo make image`, or give a base with BASE=python:3.11-slim")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kubedl-py-base.", dir="/var/tmp"))
    rootfs = work / "rootfs"
    try:
        _say(out, f"base image {BASE_IMAGE}: debootstrap {DEBIAN_SUITE} from {mirror} (about a minute)")
        debootstrap = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            DEBIAN_SUITE,
            str(rootfs),
            mirror,
        ]
        _stream(debootstrap, out, log=work / "debootstrap.log", summarize=_debootstrap_progress)
        _prune(rootfs)
        bootstrapped = time.monotonic()
        _say(out, f"base image {BASE_IMAGE}: debootstrap took {bootstrapped - started:.0f} s; importing")
        changes = [*BASE_CHANGES, f"LABEL {RECIPE_LABEL}={base_recipe()}"]
        _import(engine, rootfs, BASE_IMAGE, changes)
    finally:
        _remove_rootfs(work)
    _say(out, f"base image {BASE_IMAGE}: built in {time.monotonic() - started:.0f} s")
    return True


def _remove_rootfs(work: Path) -> None:
    """Delete debootstrap's work directory, but never through a mount: debootstrap mounts /proc and /sys (in a
    container it binds /dev) inside the target, and a run that failed midway can leave them there. Deleting
    the tree then would delete the host's files."""
    below = f"{work}/"
    for _ in range(2):
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        mounted = sorted((mount for mount in mounts if mount.startswith(below)), key=len, reverse=True)
        if not mounted:
            shutil.rmtree(work)
            return
        for mount in mounted:
            subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)
    raise ImageError(f"{work} still has mounts ({', '.join(mounted)}): unmount them, then delete it")


def _prune(rootfs: Path) -> None:
    for pattern in BASE_PRUNE:
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def _import(engine: Engine, rootfs: Path, tag: str, changes: Iterable[str]) -> None:
    """``tar`` the root filesystem into ``<engine> import``, with numeric owners so no name is remapped."""
    flags = [arg for change in changes for arg in ("--change", change)]
    tar = subprocess.Popen(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    try:
        imported = subprocess.run(
            engine.command("import", *flags, "-", tag), stdin=tar.stdout, capture_output=True, text=True, check=False
        )
    finally:
        assert tar.stdout is not None
        tar.stdout.close()
        tar_code = tar.wait()
    if tar_code != 0 or imported.returncode != 0:
        raise ImageError(f"importing the base image failed (tar exit {tar_code}): {imported.stderr.strip()[-500:]}")


#: debootstrap's per-package messages, and the phase each belongs to (None: not shown)
_PER_PACKAGE: dict[str, str | None] = {
    "Retrieving": "retrieving",
    "Validating": None,
    "Extracting": "extracting",
    "Unpacking": "installing",
    "Configuring": "installing",
}


def _debootstrap_progress(line: str, state: dict[str, str]) -> str | None:
    """debootstrap prints a line or two per package; show one line per phase and its other messages."""
    words = line.split()
    if len(words) >= 2 and words[0] == "I:" and words[1] in _PER_PACKAGE:
        phase = _PER_PACKAGE[words[1]]
        if phase is None or state.get("phase") == phase:
            return None
        state["phase"] = phase
        return f"{phase} packages..."
    state.pop("phase", None)
    return line


# --------------------------------------------------------------------------------------------- the image


def build_image(
    engine: Engine,
    *,
    context: Path,
    tag: str = IMAGE,
    base: str | None = None,
    with_torch: bool = False,
    out: TextIO = sys.stdout,
) -> float:
    """Build the Dockerfile in ``context`` as ``tag``; the seconds it took. ``base`` None: the Dockerfile's own."""
    if not (context / "Dockerfile").is_file():
        raise ImageError(f"no Dockerfile in {context}: run from the kubedl-py checkout")
    command = engine.command("build", *engine.container_flags())
    if engine.name == "podman":
        command += ["--network", "host"]
        if base is not None and base.startswith("localhost/"):
            command += ["--pull=never"]  # a local image: asking a registry for it can only fail
    if base is not None:
        command += ["--build-arg", f"BASE={base}"]
    command += ["--build-arg", f"WITH_TORCH={int(with_torch)}"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kubedl-py-build.") as work:
        _say(out, f"image {tag}: {engine.name} build of {context}" + (f" on {base}" if base else ""))
        if engine.name == "podman":
            command += _host_ca_mounts(Path(work))
            # The build stage on its own first, to learn its id: the layer cache that _remove_old_builds keeps.
            stage = Path(work) / "build-stage.id"
            _stream([*command, "--target", "build", "--iidfile", str(stage), str(context)], out, log=Path(work) / "log")
        _stream([*command, "--tag", tag, str(context)], out, log=Path(work) / "log")
        if engine.name == "podman":
            _remove_old_builds(engine, keep=stage.read_text().strip())
    elapsed = time.monotonic() - started
    _say(out, f"image {tag}: built in {elapsed:.1f} s ({_image_size(engine, tag)})")
    return elapsed


def _remove_old_builds(engine: Engine, *, keep: str) -> None:
    """Remove what earlier builds of the Dockerfile left untagged (its ``io.kubedl-py.image`` label says so).

    After a code change the new image takes the tag, and the old one (its venv alone is 100 MB) and its build
    stage are left untagged: a day of test runs filled gigabytes. Other images are not touched, nor the
    current build stage, whose parent layers are the cache of the dependencies; an image a container still
    uses is refused by the engine and stays.
    """
    listed = subprocess.run(
        engine.command(
            "images", "--quiet", "--no-trunc", "--filter", "dangling=true", "--filter", "label=io.kubedl-py.image"
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    for image in listed.stdout.split():
        if image.removeprefix("sha256:") != keep.removeprefix("sha256:"):
            subprocess.run(engine.command("rmi", image), capture_output=True, check=False)


def _host_ca_mounts(work: Path) -> list[str]:
    """Mounts that make the build stage's pip trust the host's CAs (a bundle with the public roots too)."""
    bundle = next((path for path in HOST_CA_BUNDLES if Path(path).is_file()), None)
    if bundle is None:
        return []
    pip_conf = work / "pip.conf"
    pip_conf.write_text(f"[global]\ncert = {BUILD_CA_PATH}\n")
    return ["--volume", f"{bundle}:{BUILD_CA_PATH}:ro", "--volume", f"{pip_conf}:/etc/pip.conf:ro"]


def _image_size(engine: Engine, image: str) -> str:
    result = subprocess.run(
        engine.command("image", "inspect", "--format", "{{.Size}}", image), capture_output=True, text=True, check=False
    )
    size = result.stdout.strip()
    return f"{int(size) / 1e6:.0f} MB" if size.isdigit() else "size unknown"


# --------------------------------------------------------------------------------------------- helpers


def _say(out: TextIO, message: str) -> None:
    print(f"==> {message}", file=out, flush=True)


def _stream(
    command: Sequence[str],
    out: TextIO,
    *,
    log: Path,
    summarize: Callable[[str, dict[str, str]], str | None] | None = None,
) -> None:
    """Run ``command`` showing its output as it comes (through ``summarize`` when given), the whole of it in
    ``log``; on failure raise with the command and the log's last lines."""
    state: dict[str, str] = {}
    with log.open("w") as saved:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                saved.write(line)
                shown = line.rstrip("\n") if summarize is None else summarize(line.rstrip("\n"), state)
                if shown is not None:
                    print(f"    {shown}", file=out, flush=True)
        code = process.returncode
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-20:])
        raise ImageError(f"`{' '.join(command[:3])} ...` exited {code}; its last lines:\n{tail}")


# --------------------------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kubedl_local.image",
        description=f"Build the controller image {IMAGE} with docker (when its engine answers) or podman "
        f"(on a Debian base made here with debootstrap: {BASE_IMAGE}).",
    )
    parser.add_argument("--engine", choices=["docker", "podman"], default=None, help="default: detect")
    parser.add_argument(
        "--base",
        default=None,
        help=f"base image (default: {BASE_IMAGE} with podman, the Dockerfile's python:3.11-slim with docker)",
    )
    parser.add_argument("--rebuild-base", action="store_true", help=f"debootstrap {BASE_IMAGE} even if present")
    parser.add_argument("--tag", default=IMAGE, help=f"image tag (default {IMAGE})")
    parser.add_argument("--with-torch", action="store_true", help="add PyTorch CPU (the e2e image)")
    parser.add_argument("--context", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    parser.add_argument("--mirror", default=DEBIAN_MIRROR, help=f"Debian mirror (default {DEBIAN_MIRROR})")
    args = parser.parse_args(argv)
    try:
        engine = detect_engine(args.engine)
        base = args.base
        if base is None and engine.name == "podman":
            base = BASE_IMAGE
        if base == BASE_IMAGE:
            ensure_base_image(engine, rebuild=args.rebuild_base, mirror=args.mirror)
        build_image(engine, context=args.context.resolve(), tag=args.tag, base=base, with_torch=args.with_torch)
    except ImageError as error:
        print(f"make image: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
