"""One real node per machine, and the record that lets any later run put the machine back.

Why: the kubelet's ports (10250, 10248), kube-proxy's (10249, 10256), the ``kubepods`` cgroups and the fixed
paths allow one real node on a machine, and a node leaves changes behind it (``host.py``) that only an orderly
stop removes. So:

- a node holds an exclusive lock (``flock`` on :data:`LOCK_PATH`) for as long as the process that started it
  lives: a second start on the machine is refused at once, with the holder's pid, instead of failing halfway
  on a busy port. The kernel drops the lock when the holder dies, even by SIGKILL;
- before changing anything, the node writes a journal (:data:`JOURNAL_PATH`): its data directory, the
  programs it runs, its bridge and CNI network, and the state of everything it may change (iptables chains,
  nftables tables, kernel parameters, which fixed paths existed). :func:`replay` undoes the node from it, in
  order: kill the pods' and the node's processes, unmount, remove rules and tables, the bridge, the cgroups,
  put the kernel parameters back, delete the paths the node created and its data directory. The journal is
  deleted last, so a replay cut short is simply done again;
- a start that finds a journal and can take the lock replays it first: a ``local up`` killed with SIGKILL is
  cleaned up by the next start of a node, which says so in its log.

When the machine is back, the lock file and its directory are removed too (the lock is re-checked after
it is taken, so a starter that opened a file just unlinked tries again).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from kubedl_local.kubernetes.real_node import host

log = logging.getLogger(__name__)

#: where the lock and the journal live: machine-wide, as the node is
STATE_DIR = Path(os.environ.get("KUBEDL_PY_NODE_STATE", "/var/lib/kubedl-py-node"))
LOCK_PATH = STATE_DIR / "lock"
JOURNAL_PATH = STATE_DIR / "journal.json"


class NodeBusy(RuntimeError):
    """Another real node runs on this machine (its holder is named in the message)."""


@dataclass
class Journal:
    """What one node may have changed, written before it changes anything."""

    pid: int
    data_dir: str
    bridge: str
    cni_network: str
    #: the programs whose processes are the node's (kubelet, containerd, its shims, kube-proxy, CoreDNS)
    binaries: list[str]
    #: kube-proxy, for ``kube-proxy --cleanup`` (removes its rules in both modes)
    kube_proxy: str
    #: state before the node: iptables chains per family and table, nftables tables, kernel parameters,
    #: whether each fixed path existed, whether the state directory existed
    chains: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    nft_tables: list[list[str]] = field(default_factory=list)
    nfacct: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    paths: dict[str, bool] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def write(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = JOURNAL_PATH.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(JOURNAL_PATH)

    @classmethod
    def read(cls) -> Journal | None:
        try:
            data: dict[str, Any] = json.loads(JOURNAL_PATH.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise host.HostError(f"{JOURNAL_PATH} is not a journal ({exc}); remove it by hand") from exc
        return cls(**data)


def before_state(paths: tuple[str, ...] = host.FIXED_PATHS) -> dict[str, Any]:
    """The parts of the journal recorded from the machine as it is now."""
    return {
        "chains": {family: host.iptables_chains(family) for family in ("ipv4", "ipv6")},
        "nft_tables": [list(t) for t in host.nft_tables()],
        "nfacct": host.nfacct_names(),
        "sysctls": {name: value for name in host.TOUCHED_SYSCTLS if (value := host.read_sysctl(name)) is not None},
        "paths": {path: os.path.lexists(path) for path in paths},
    }


class MachineLock:
    """The machine's one-node lock, held by an open file descriptor (released when the holder dies)."""

    def __init__(self) -> None:
        self._handle: IO[str] | None = None

    def acquire(self, *, wait: float = 0.0) -> None:
        """Take the lock; wait up to ``wait`` seconds for another node to end, else raise :class:`NodeBusy`."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        handle = open(LOCK_PATH, "a+")  # noqa: SIM115 - held open for the node's lifetime
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(handle, LOCK_PATH):
                    break
                # the holder removed the file on its way out: lock the one that is there now
                handle.close()
                STATE_DIR.mkdir(parents=True, exist_ok=True)
                handle = open(LOCK_PATH, "a+")  # noqa: SIM115
                continue
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "unknown"
                    handle.close()
                    raise NodeBusy(
                        f"a real node already runs on this machine (held by pid {holder}, lock {LOCK_PATH}): "
                        "one kubelet per machine (ports 10250/10248, kube-proxy's 10249/10256, the kubepods "
                        "cgroups). Stop that `kubedl-py local up --runtime kubelet` (Ctrl-C) first."
                    ) from None
                time.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Give the lock up; with no journal left (the machine is back), remove the lock file and directory."""
        if self._handle is None:
            return
        if not JOURNAL_PATH.exists():
            with contextlib.suppress(OSError):
                LOCK_PATH.unlink()
            with contextlib.suppress(OSError):
                STATE_DIR.rmdir()
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None


def _same_file(handle: IO[str], path: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino == path.stat().st_ino
    except FileNotFoundError:
        return False


def replay(journal: Journal) -> list[str]:
    """Undo the node ``journal`` describes (its processes must have been stopped, or be killed here); the
    journal is removed once the machine is back. Returns what was done, for the log."""
    done: list[str] = []
    binaries = [Path(b) for b in journal.binaries]
    killed = host.kill_node_processes(binaries)
    if killed:
        done.append(f"killed {killed} processes of the node and its pods")
    data_dir = Path(journal.data_dir)
    unmounted = host.unmount_below([data_dir, "/var/lib/kubelet", "/run/containerd", "/var/run/netns/cni-"])
    if unmounted:
        done.append(f"unmounted {len(unmounted)} mounts")
    if Path(journal.kube_proxy).is_file():
        subprocess.run([journal.kube_proxy, "--cleanup"], capture_output=True, check=False, timeout=60)
    for family in ("ipv4", "ipv6"):
        removed = host.remove_iptables(family, journal.chains.get(family, {}), network=journal.cni_network)
        if removed:
            done.append(f"removed {len(removed)} {family} iptables chains and rules")
    counters = host.remove_nfacct(journal.nfacct)
    if counters:
        done.append(f"removed the nfacct counters {', '.join(counters)}")
    tables = host.remove_nft_tables(journal.nft_tables)
    if tables:
        done.append(f"removed the nftables tables {', '.join(tables)}")
    if host.remove_link(journal.bridge):
        done.append(f"removed the bridge {journal.bridge}")
    if host.remove_cgroups():
        done.append("removed the kubepods cgroups")
    restored = host.restore_sysctls(journal.sysctls)
    if restored:
        done.append(f"restored sysctls: {'; '.join(restored)}")
    _remove_cni_results(journal.cni_network)
    removed_paths = host.remove_paths(list(journal.paths), journal.paths)
    if removed_paths:
        done.append(f"removed {', '.join(removed_paths)}")
    if data_dir.is_dir():
        host.unmount_below([data_dir])
        _rmtree(data_dir)
    JOURNAL_PATH.unlink(missing_ok=True)
    return done


def _remove_cni_results(network: str) -> None:
    """libcni caches each attachment under /var/lib/cni/results (a fixed path); remove the network's."""
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        for entry in results.glob(f"{network}-*"):
            with contextlib.suppress(OSError):
                entry.unlink()


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise host.HostError(f"cannot remove {path} (a mount left below it?)")


def replay_leftovers() -> list[str] | None:
    """Replay the journal of a node that did not stop cleanly, if any (the caller holds the lock)."""
    journal = Journal.read()
    if journal is None:
        return None
    log.warning(
        "a real node started by pid %s did not stop cleanly: putting the machine back from %s",
        journal.pid,
        JOURNAL_PATH,
    )
    return replay(journal)
