"""Wrap a container's argv so the process sees the pod's ``/etc/hosts``, hostname and network namespace.

Why wrapping with util-linux tools and not doing it in Python between fork and exec: a ``preexec_fn`` that
calls ``unshare``/``mount``/``setns`` in a multi-threaded asyncio process is fragile, while ``nsenter``,
``unshare`` and ``/bin/sh`` each *exec* the next program, so the chain keeps one PID: the PID the runner
started is the user's program in the end, signals and ``PR_SET_PDEATHSIG`` (kept across a non-setuid exec)
reach it unchanged, and exec failures of the wrappers show up as ordinary exit codes.

The chain (each part only when needed)::

    nsenter --net=/run/netns/<netns> --            # pod network namespace (root only)
    unshare [--user --map-root-user] --mount --propagation private [--uts] --
    /bin/sh -c 'mount --bind "$1" /etc/hosts; hostname "$2"; exec "$@"' ...   # the user's argv follows

``--propagation private`` makes the bind mount invisible to the host and to other pods; the mount namespace
disappears with its last process, so there is nothing to unmount. Without root the user namespace
(``--user --map-root-user``) grants the right to mount inside it; the program then runs as uid 0 *inside*
that namespace, which maps to the unprivileged user outside (files it creates belong to that user).
A pod network namespace cannot be entered without root.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")

# "$1" hosts file ("" = leave /etc/hosts alone), "$2" hostname ("" = keep), "$3" the number of volume mounts,
# then three words per mount (host source, mount path, 1 for read-only); the user's argv follows.
#
# A mount path that does not exist is made here, inside the private mount namespace, never on the host:
# ``shadow`` covers its deepest existing directory (``/run`` for ``/var/run/secrets/...``) with a tmpfs of the
# same mode, puts every entry of the original back (bind mounts through a descriptor of the covered
# directory, symlinks copied; ``mount`` itself may have made ``/run/mount`` meanwhile), and the missing
# directories are then made in the tmpfs. The host never sees
# them, and they vanish with the namespace. A missing path right under ``/`` cannot be made so (a mount over
# ``/`` is not seen by path lookups): the node makes those on the host (volumes.py) and removes them after.
_SETUP_SCRIPT = (
    "shadow() { "
    'exec 9<"$1" || return 1; '
    'mount -t tmpfs -o "mode=$(stat -c %a "$1")" kubedl-mountpoints "$1" || return 1; '
    "for e in /proc/$$/fd/9/* /proc/$$/fd/9/.[!.]* /proc/$$/fd/9/..?*; do "
    '[ -e "$e" ] || [ -L "$e" ] || continue; b="${e##*/}"; '
    'if [ -L "$e" ]; then cp -P "$e" "$1/$b" || return 1; '
    'elif [ -d "$e" ]; then mkdir -p "$1/$b" && mount --no-canonicalize --rbind "$e" "$1/$b" || return 1; '
    'else touch "$1/$b" && mount --no-canonicalize --bind "$e" "$1/$b" || return 1; fi; done; '
    "exec 9<&-; }; "
    "shadowed=' '; "
    "point() { "
    '[ -e "$2" ] && return 0; '
    'a="$(dirname "$2")"; while [ ! -e "$a" ]; do a="$(dirname "$a")"; done; a="$(readlink -f "$a")"; '
    'if [ "$a" = / ]; then echo "kubedl-sandbox: no mount point $2" >&2; return 1; fi; '
    'case "$shadowed" in *" $a "*) ;; *) shadow "$a" || return 1; shadowed="$shadowed$a ";; esac; '
    'if [ -d "$1" ]; then mkdir -p "$2"; else mkdir -p "$(dirname "$2")" && touch "$2"; fi; }; '
    'if [ -n "$1" ]; then mount --bind "$1" /etc/hosts || exit 127; fi; '
    'if [ -n "$2" ]; then hostname "$2" || exit 127; fi; '
    'n="$3"; shift 3; '
    'while [ "$n" -gt 0 ]; do '
    'point "$1" "$2" || exit 127; '
    'mount --bind "$1" "$2" || exit 127; '
    'if [ "$3" = 1 ]; then mount -o remount,bind,ro "$2" || exit 127; fi; '
    "shift 3; n=$((n-1)); done; "
    'exec "$@"'
)


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be set up on this machine (missing tool, privilege, or kernel)."""


@dataclass(frozen=True)
class Mount:
    """A volume seen by a container: ``source`` (a host directory or file) bind-mounted at ``target``."""

    source: Path
    target: str
    read_only: bool = False


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """What a container process should see instead of the host's view. All fields optional.

    - ``hosts_file``: bind-mounted over ``/etc/hosts`` in a private mount namespace (see ``hosts.py``).
    - ``netns``: name of a network namespace under ``/run/netns`` (``netns.py`` creates them); root only.
    - ``hostname``: set in a private UTS namespace (pod-network pods are named after the pod in Kubernetes).
    - ``mounts``: volumes bind-mounted in the same private mount namespace, parents first; a missing mount
      point is made inside that namespace only (see ``_SETUP_SCRIPT``).
    - ``rootless``: force the user-namespace variant; ``None`` picks it when not running as root.
    """

    hosts_file: Path | None = None
    netns: str | None = None
    hostname: str | None = None
    mounts: tuple[Mount, ...] = ()
    rootless: bool | None = None

    @property
    def empty(self) -> bool:
        return self.hosts_file is None and self.netns is None and self.hostname is None and not self.mounts


def is_root() -> bool:
    return os.geteuid() == 0


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SandboxUnavailable(f"{name!r} not found in PATH; it is needed to sandbox pod processes (util-linux)")
    return path


def wrap_argv(argv: Sequence[str], sandbox: Sandbox | None) -> list[str]:
    """The argv that runs ``argv`` inside ``sandbox`` (unchanged when there is nothing to isolate)."""
    if sandbox is None or sandbox.empty:
        return list(argv)
    rootless = (not is_root()) if sandbox.rootless is None else sandbox.rootless
    prefix: list[str] = []
    if sandbox.netns is not None:
        if not is_root():
            raise SandboxUnavailable(
                "entering a pod network namespace needs root; run host-network pods without root instead"
            )
        ns_path = NETNS_DIR / sandbox.netns
        if not ns_path.exists():
            raise SandboxUnavailable(f"network namespace {sandbox.netns!r} does not exist ({ns_path})")
        prefix += [_tool("nsenter"), f"--net={ns_path}", "--"]
    if sandbox.hosts_file is not None or sandbox.hostname is not None or sandbox.mounts:
        unshare = [_tool("unshare")]
        if rootless:
            unshare += ["--user", "--map-root-user"]
        unshare += ["--mount", "--propagation", "private"]
        if sandbox.hostname is not None:
            _tool("hostname")
            unshare.append("--uts")
        hosts = str(sandbox.hosts_file) if sandbox.hosts_file is not None else ""
        mounts: list[str] = []
        for m in sorted(sandbox.mounts, key=lambda m: m.target.count("/")):  # parents before children
            mounts += [str(m.source), m.target, "1" if m.read_only else "0"]
        prefix += [
            *unshare,
            "--",
            "/bin/sh",
            "-c",
            _SETUP_SCRIPT,
            "kubedl-sandbox",
            hosts,
            sandbox.hostname or "",
            str(len(sandbox.mounts)),
            *mounts,
        ]
    return prefix + list(argv)


@functools.cache
def check_mount_sandbox(*, rootless: bool) -> str | None:
    """Try the mount-namespace sandbox once; ``None`` when it works, else the reason it does not.

    Rootless user namespaces may be disabled by the distribution (sysctl
    ``kernel.unprivileged_userns_clone=0`` or AppArmor's ``apparmor_restrict_unprivileged_userns``).
    """
    try:
        argv = wrap_argv(["true"], Sandbox(hosts_file=Path("/etc/hosts"), rootless=rootless))
    except SandboxUnavailable as e:
        return str(e)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    if proc.returncode != 0:
        return f"{' '.join(argv[:6])}... failed ({proc.returncode}): {proc.stderr.strip()}"
    return None
