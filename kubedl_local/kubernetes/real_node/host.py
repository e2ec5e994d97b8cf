"""What a real node changes on the machine, and how it is put back.

Why this module: a kubelet, containerd, kube-proxy and the CNI plugins are written to own the machine they run
on. They set kernel parameters (the kubelet: ``kernel.panic``, ``kernel.panic_on_oops``,
``vm.overcommit_memory``...; the bridge plugin: ``net.ipv4.ip_forward``), add iptables chains and nftables
tables (the kubelet's ``KUBE-FIREWALL`` drops traffic to 127/8 that did not come from loopback), make a
bridge and veths, mount overlays, tmpfs and network namespaces, create ``kubepods`` cgroups, and write to fixed
paths (``/var/lib/kubelet/device-plugins``, ``/run/containerd/s``, ``/var/lib/cni``, ``/var/log/containers``).
kube-proxy also creates nfacct counters (``ct_state_invalid_dropped_pkts``...) that nothing ever deletes, and
``kube-proxy --cleanup`` removes only its own rules. On a machine shared with other work, and after every test
run, all of that must be undone, even when the process that started the node was SIGKILLed.

Two halves:

- :class:`HostState` is a snapshot of what can change (iptables and nftables rules, nfacct counters, sysctls,
  mounts, cgroups, network interfaces, the fixed paths): tests compare one taken before a node with one taken
  after it. (Kernel modules are not compared: the machines here have a kernel without loadable modules.)
- the ``remove_*`` / ``kill_*`` functions undo one kind of change each, scoped to what the node made: chains
  named ``KUBE-*``/``CNI-*`` that did not exist before it, rules that jump to them or carry the CNI network's
  name, nftables tables it created, mounts under its directories, processes in its cgroups or running its
  binaries. They are idempotent: ``journal.py`` replays them after a crash, possibly twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: the kubelet's pod cgroup (``cgroupsPerQOS``), under the root of every hierarchy
KUBEPODS = "kubepods"
#: fixed paths the node's programs may create whatever they are told (and the directory of the lock)
FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/var/run/netns",
    "/usr/libexec/kubernetes",
    "/etc/kubernetes",
    "/opt/containerd",
    "/opt/cni",
    "/etc/cni/net.d",
    "/var/lib/containerd",
    "/run/xtables.lock",
)
#: kernel parameters the kubelet, kube-proxy or the CNI plugins set: recorded before, put back after
TOUCHED_SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv4.conf.default.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.ipv6.conf.all.forwarding",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
#: sysctls that change by themselves (counters, random values): not compared
VOLATILE_SYSCTLS = re.compile(
    r"^(kernel\.random\.|kernel\.ns_last_pid$|kernel\.pty\.nr$|fs\.(dentry-state|inode-nr|inode-state|file-nr|"
    r"aio-nr|quota\.)|net\.netfilter\.nf_conntrack_count$|kernel\.tainted$|net\.ipv4\.tcp_fastopen_key$|"
    r"kernel\.sched_|vm\.stat_|net\.ipv4\.route\.|net\.ipv6\.route\.|user\.|fs\.binfmt_misc\.)"
)
#: per-interface sysctls (``net.ipv4.conf.<if>.x``): compared only for interfaces present in both snapshots
_PER_INTERFACE = re.compile(r"^net\.(ipv4\.conf|ipv6\.conf|ipv4\.neigh|ipv6\.neigh)\.([^.]+)\.")
#: mount points of other tools on a shared machine (podman's storage): not the node's, not compared
FOREIGN_MOUNTS = ("/var/lib/containers/", "/run/containers/", "/run/user/")
#: iptables chain prefixes of the kubelet, kube-proxy and the CNI plugins
CHAIN_PREFIXES = ("KUBE-", "CNI-")
#: nftables tables of kube-proxy (nftables mode) and the kubelet
NFT_TABLES = ("kube-proxy", "kubelet")
#: the tables iptables-nft makes on first use, removed when the node made them and they are empty again
IPTABLES_NFT_TABLES = ("filter", "nat", "mangle", "raw", "security")


class HostError(RuntimeError):
    """The machine could not be put back; the message says what is left and how to remove it."""


# ------------------------------------------------------------------------------------------------ snapshot


@dataclass
class HostState:
    """What a node may change on the machine, as comparable values."""

    iptables: dict[str, list[str]] = field(default_factory=dict)
    nft: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    paths: dict[str, bool] = field(default_factory=dict)
    nfacct: list[str] = field(default_factory=list)

    @classmethod
    def capture(cls) -> HostState:
        return cls(
            iptables={family: iptables_rules(family) for family in ("ipv4", "ipv6")},
            nft=nft_ruleset(),
            sysctls=read_sysctls(),
            mounts=mount_points(),
            cgroups=cgroup_dirs(),
            links=link_names(),
            paths={path: os.path.lexists(path) for path in FIXED_PATHS},
            nfacct=nfacct_names(),
        )

    def differences(self, after: HostState) -> list[str]:
        """Every difference between this snapshot and ``after``, one line each (empty: the same machine)."""
        found: list[str] = []
        for family in sorted(set(self.iptables) | set(after.iptables)):
            found += _set_diff(f"iptables ({family})", self.iptables.get(family, []), after.iptables.get(family, []))
        found += _set_diff("nftables", self.nft, after.nft)
        found += _set_diff("mount", self.mounts, after.mounts)
        found += _set_diff("cgroup", self.cgroups, after.cgroups)
        found += _set_diff("network interface", self.links, after.links)
        found += _set_diff("nfacct counter", self.nfacct, after.nfacct)
        common = set(self.links) & set(after.links)
        for name in sorted(set(self.sysctls) | set(after.sysctls)):
            per_interface = _PER_INTERFACE.match(name)
            if per_interface and per_interface.group(2) not in common | {"all", "default"}:
                continue
            before_value, after_value = self.sysctls.get(name), after.sysctls.get(name)
            if before_value != after_value:
                found.append(f"sysctl {name}: {before_value!r} before, {after_value!r} after")
        for path in sorted(set(self.paths) | set(after.paths)):
            if self.paths.get(path) != after.paths.get(path):
                found.append(
                    f"path {path}: {'present' if self.paths.get(path) else 'absent'} before, "
                    f"{'present' if after.paths.get(path) else 'absent'} after"
                )
        return found


def _set_diff(what: str, before: Sequence[str], after: Sequence[str]) -> list[str]:
    gone, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    return [f"{what} removed: {item}" for item in gone] + [f"{what} added: {item}" for item in new]


def _run(argv: Sequence[str], *, check: bool = False, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=check, timeout=60)


def _tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(Path(d) / name) for d in ("/usr/sbin", "/sbin") if (Path(d) / name).is_file()), None
    )


def iptables_rules(family: str) -> list[str]:
    """``iptables-save`` as ``table chain-or-rule`` lines without counters (empty when iptables is missing)."""
    tool = _tool("iptables-save" if family == "ipv4" else "ip6tables-save")
    if tool is None:
        return []
    result = _run([tool])
    lines: list[str] = []
    table = ""
    for line in result.stdout.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            lines.append(f"{table} {line.split()[0]}")  # the chain, without policy counters
        elif line.startswith("-A"):
            lines.append(f"{table} {line}")
    return lines


def nft_ruleset() -> list[str]:
    """``nft list ruleset`` as lines, handles and counters left out (empty when nft is missing)."""
    tool = _tool("nft")
    if tool is None:
        return []
    result = _run([tool, "list", "ruleset"])
    lines = []
    for line in result.stdout.splitlines():
        text = re.sub(r"\s*(counter packets \d+ bytes \d+|# handle \d+)", "", line).strip()
        if text:
            lines.append(text)
    # One line per rule in its table and chain, so that a set difference says where it is.
    placed: list[str] = []
    scope: list[str] = []
    for text in lines:
        if text.endswith("{"):
            scope.append(text[:-1].strip())
            placed.append(" / ".join(scope))
        elif text == "}":
            if scope:
                scope.pop()
        else:
            placed.append(" / ".join([*scope, text]))
    return placed


def read_sysctls(root: Path = Path("/proc/sys")) -> dict[str, str]:
    """Every readable kernel parameter but the volatile ones."""
    values: dict[str, str] = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for filename in filenames:
            path = Path(dirpath) / filename
            name = str(path.relative_to(root)).replace("/", ".")
            if VOLATILE_SYSCTLS.match(name):
                continue
            try:
                values[name] = " ".join(path.read_text().split())
            except OSError:
                continue  # write-only or refused
    return values


def read_sysctl(name: str) -> str | None:
    try:
        return " ".join((Path("/proc/sys") / name.replace(".", "/")).read_text().split())
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        (Path("/proc/sys") / name.replace(".", "/")).write_text(value + "\n")


def mount_points() -> list[str]:
    """``<mount point> <type>`` of every mount of this mount namespace, but other tools' storage."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point = _unescape(left.split()[4])
        if point.startswith(FOREIGN_MOUNTS):
            continue
        points.append(f"{point} {right.split()[0]}")
    return points


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def cgroup_dirs() -> list[str]:
    """Every cgroup of every hierarchy named ``kubepods*`` or below one, and the hierarchies' top level."""
    found: list[str] = []
    if not CGROUP_ROOT.is_dir():
        return found
    for hierarchy in sorted(CGROUP_ROOT.iterdir()):
        if not hierarchy.is_dir() or hierarchy.is_symlink():
            continue
        with contextlib.suppress(OSError):
            for child in sorted(hierarchy.iterdir()):
                if child.is_dir() and not child.name.startswith("libpod"):
                    found.append(str(child.relative_to(CGROUP_ROOT)))
                    if child.name.startswith(KUBEPODS):
                        found += [str(path.relative_to(CGROUP_ROOT)) for path in _walk_dirs(child)]
    return found


def _walk_dirs(top: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, _ in os.walk(top):
        out += [Path(dirpath) / name for name in dirnames]
    return out


def link_names() -> list[str]:
    """The names of this network namespace's interfaces."""
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return []


# ------------------------------------------------------------------------------------------------ undo


def kill_node_processes(binaries: Iterable[Path], *, cgroup_name: str = KUBEPODS) -> int:
    """SIGKILL every process in the kubelet's pod cgroups (containers, sandboxes), then every process running
    one of ``binaries`` (kubelet, containerd, its shims...); wait until they are gone. Returns how many."""
    killed = 0
    for _ in range(50):
        victims = _pod_processes(cgroup_name) | _processes_running(binaries)
        victims.discard(os.getpid())
        if not victims:
            return killed
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.1)
    left = _pod_processes(cgroup_name) | _processes_running(binaries)
    if left:
        raise HostError(f"processes of the node survived SIGKILL: {sorted(left)}")
    return killed


def _pod_processes(cgroup_name: str) -> set[int]:
    pids: set[int] = set()
    if not CGROUP_ROOT.is_dir():
        return pids
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / cgroup_name
        if not top.is_dir():
            continue
        for directory in [top, *_walk_dirs(top)]:
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
    return pids


def _processes_running(binaries: Iterable[Path]) -> set[int]:
    wanted = {str(Path(b).resolve()) for b in binaries}
    pids: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            exe = os.readlink(f"/proc/{entry.name}/exe").removesuffix(" (deleted)")
            if exe in wanted:
                pids.add(int(entry.name))
    return pids


def unmount_below(prefixes: Iterable[Path | str]) -> list[str]:
    """Unmount every mount at or below one of ``prefixes``, deepest first; lazily when busy. Returns them."""
    tops = [str(p).rstrip("/") for p in prefixes]
    done: list[str] = []
    for _ in range(5):
        points = [line.split(" ", 1)[0] for line in mount_points_all()]
        mine = sorted(
            {p for p in points if any(p == top or p.startswith(top + "/") for top in tops)}, key=len, reverse=True
        )
        if not mine:
            return done
        for point in mine:
            result = _run(["umount", point])
            if result.returncode != 0:
                _run(["umount", "--lazy", point])
            done.append(point)
    left = [p for p in (line.split(" ", 1)[0] for line in mount_points_all()) if any(p.startswith(t) for t in tops)]
    if left:
        raise HostError(f"cannot unmount {left}: `umount --lazy` them by hand")
    return done


def mount_points_all() -> list[str]:
    return [
        f"{_unescape(line.partition(' - ')[0].split()[4])} {line.partition(' - ')[2].split()[0]}"
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ]


def iptables_chains(family: str) -> dict[str, list[str]]:
    """table -> chain names, from ``iptables-save``."""
    chains: dict[str, list[str]] = {}
    table = ""
    for line in iptables_rules(family):
        table, rest = line.split(" ", 1)
        if rest.startswith(":"):
            chains.setdefault(table, []).append(rest[1:])
    return chains


def remove_iptables(family: str, before: dict[str, list[str]], *, network: str) -> list[str]:
    """Remove the chains named ``KUBE-*``/``CNI-*`` that were not in ``before`` (table -> chains), every rule
    jumping to one of them, and every rule the CNI network ``network`` made (their comments name it)."""
    save = _tool("iptables-save" if family == "ipv4" else "ip6tables-save")
    restore = _tool("iptables-restore" if family == "ipv4" else "ip6tables-restore")
    if save is None or restore is None:
        return []
    dump = _run([save]).stdout
    script: list[str] = []
    removed: list[str] = []
    for table, chains, rules in _parse_save(dump):
        ours = {c for c in chains if c.startswith(CHAIN_PREFIXES) and c not in set(before.get(table, []))}
        deletes = []
        for chain, spec in rules:
            if chain in ours:
                continue  # flushed with its chain
            target = re.search(r"\s-[jg]\s+(\S+)", f" {spec}")
            if (target and target.group(1) in ours) or f'name: \\"{network}\\"' in spec or f'"{network}"' in spec:
                deletes.append(f"-D {chain} {spec}")
        if not ours and not deletes:
            continue
        script += [f"*{table}", *deletes, *(f"-F {c}" for c in sorted(ours)), *(f"-X {c}" for c in sorted(ours))]
        script.append("COMMIT")
        removed += [f"{table} {c}" for c in sorted(ours)] + [f"{table} {d}" for d in deletes]
    if script:
        result = _run([restore, "--noflush", "--wait"], stdin="\n".join(script) + "\n")
        if result.returncode != 0:
            raise HostError(f"{restore} failed to remove the node's rules: {result.stderr.strip()}")
    return removed


def _parse_save(dump: str) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    tables: list[tuple[str, list[str], list[tuple[str, str]]]] = []
    for line in dump.splitlines():
        if line.startswith("*"):
            tables.append((line[1:], [], []))
        elif line.startswith(":") and tables:
            tables[-1][1].append(line[1:].split()[0])
        elif line.startswith("-A ") and tables:
            _, chain, spec = line.split(" ", 2)
            tables[-1][2].append((chain, spec))
    return tables


def nft_tables() -> list[tuple[str, str]]:
    """(family, name) of every nftables table."""
    tool = _tool("nft")
    if tool is None:
        return []
    result = _run([tool, "list", "tables"])
    return [tuple(line.split()[1:3]) for line in result.stdout.splitlines() if line.startswith("table ")]  # type: ignore[misc]


def remove_nft_tables(before: Iterable[Sequence[str]]) -> list[str]:
    """Delete the node's nftables tables that were not there before: kube-proxy's and the kubelet's, and the
    iptables-nft tables its rules made, once nothing of anyone is left in them."""
    tool = _tool("nft")
    if tool is None:
        return []
    existed = {tuple(t) for t in before}
    removed = []
    for family, name in nft_tables():
        if (family, name) in existed:
            continue
        if name in NFT_TABLES or (name in IPTABLES_NFT_TABLES and _nft_table_empty(tool, family, name)):
            result = _run([tool, "delete", "table", family, name])
            if result.returncode == 0:
                removed.append(f"{family} {name}")
    return removed


def _nft_table_empty(tool: str, family: str, name: str) -> bool:
    result = _run([tool, "-j", "list", "table", family, name])
    if result.returncode != 0:
        return False
    try:
        items = json.loads(result.stdout).get("nftables", [])
    except ValueError:
        return False
    return not any("rule" in item for item in items)


# nfnetlink_acct (kube-proxy's packet counters, which ``kube-proxy --cleanup`` leaves), over a netlink socket:
# no tool for it is installed by default
_NETLINK_NETFILTER = 12
_NFNL_SUBSYS_ACCT = 7
_ACCT_GET, _ACCT_DEL = 1, 3
_NFACCT_NAME = 1
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_DUMP = 0x1, 0x4, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3


def _nfacct_request(message: int, flags: int, attributes: bytes = b"") -> list[tuple[int, bytes]]:
    """Send one nfnetlink_acct request; (type, payload) of every answer until DONE or the ACK."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER) as sock:
        sock.settimeout(5)
        sock.bind((0, 0))
        body = struct.pack("=BBH", socket.AF_UNSPEC, 0, 0) + attributes
        sock.send(struct.pack("=IHHII", 16 + len(body), (_NFNL_SUBSYS_ACCT << 8) | message, flags, 1, 0) + body)
        answers: list[tuple[int, bytes]] = []
        while True:
            data = sock.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                payload = data[offset + 16 : offset + length]
                answers.append((kind, payload))
                if kind in (_NLMSG_DONE, _NLMSG_ERROR):
                    return answers
                offset += (length + 3) & ~3


def nfacct_names() -> list[str]:
    """The names of the kernel's nfacct counters (empty when the kernel has no nfnetlink_acct)."""
    try:
        answers = _nfacct_request(_ACCT_GET, _NLM_F_REQUEST | _NLM_F_DUMP)
    except OSError:
        return []
    names: list[str] = []
    for kind, payload in answers:
        if kind in (_NLMSG_DONE, _NLMSG_ERROR):
            continue
        offset = 4  # nfgenmsg
        while offset + 4 <= len(payload):
            length, attribute = struct.unpack_from("=HH", payload, offset)
            if attribute & 0x7FFF == _NFACCT_NAME:
                names.append(payload[offset + 4 : offset + length].rstrip(b"\0").decode())
            offset += (length + 3) & ~3
    return sorted(names)


def remove_nfacct(before: Iterable[str]) -> list[str]:
    """Delete the nfacct counters that were not there before (kube-proxy's; its rules that count into them
    must be gone first: the kernel refuses to delete a counter in use)."""
    existed = set(before)
    removed = []
    for name in nfacct_names():
        if name in existed:
            continue
        encoded = name.encode() + b"\0"
        attribute = struct.pack("=HH", 4 + len(encoded), _NFACCT_NAME) + encoded
        attribute += b"\0" * (-len(attribute) % 4)
        answers = _nfacct_request(_ACCT_DEL, _NLM_F_REQUEST | _NLM_F_ACK, attribute)
        error = next((struct.unpack_from("=i", p)[0] for k, p in answers if k == _NLMSG_ERROR), 0)
        if error != 0:
            raise HostError(f"cannot delete the nfacct counter {name}: {os.strerror(-error)}")
        removed.append(name)
    return removed


def remove_cgroups(name: str = KUBEPODS) -> list[str]:
    """rmdir the ``name`` cgroup tree of every hierarchy, deepest first (its processes must be gone)."""
    removed: list[str] = []
    if not CGROUP_ROOT.is_dir():
        return removed
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / name
        if not top.is_dir():
            continue
        for directory in sorted([top, *_walk_dirs(top)], key=lambda p: len(p.parts), reverse=True):
            for _ in range(20):
                try:
                    directory.rmdir()
                    removed.append(str(directory))
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)  # a process just killed may take a moment to leave
    left = [str(hierarchy / name) for hierarchy in CGROUP_ROOT.iterdir() if (hierarchy / name).is_dir()]
    if left:
        raise HostError(f"cannot remove the cgroups {left} (a process still in them?)")
    return removed


def remove_link(name: str) -> bool:
    """Delete a network interface (the CNI bridge); False when it is not there."""
    if not Path(f"/sys/class/net/{name}").exists():
        return False
    result = _run(["ip", "link", "delete", name])
    if result.returncode != 0:
        raise HostError(f"cannot delete the interface {name}: {result.stderr.strip()}")
    return True


def remove_paths(paths: Iterable[str], existed: dict[str, bool]) -> list[str]:
    """Remove each of ``paths`` the node created (absent in ``existed``): files and whole trees."""
    removed = []
    for path in paths:
        if existed.get(path, True) or not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        removed.append(path)
    return removed


#: IP forwarding, which the bridge plugin turns on (and other container networks too)
FORWARDING_SYSCTLS = frozenset(
    {"net.ipv4.ip_forward", "net.ipv4.conf.all.forwarding", "net.ipv4.conf.default.forwarding"}
)
#: iptables chains of other container networks on the machine (podman's netavark, Docker)
_OTHER_NETWORKS = ("NETAVARK", "DOCKER")


def other_forwarders() -> list[str]:
    """The iptables chains of other container networks that rely on IP forwarding (empty on a machine where
    the node is alone)."""
    return sorted(
        {
            chain
            for family in ("ipv4", "ipv6")
            for chains in iptables_chains(family).values()
            for chain in chains
            if chain.startswith(_OTHER_NETWORKS)
        }
    )


def restore_sysctls(before: dict[str, str]) -> list[str]:
    """Put back every recorded kernel parameter that differs now; IP forwarding only when no other container
    network on the machine uses it (turning it off would cut that network's containers off)."""
    changed = []
    others = other_forwarders()
    for name, value in before.items():
        if name in FORWARDING_SYSCTLS and others:
            if read_sysctl(name) != value:
                log.warning("leaving %s as it is: other container networks use it (%s)", name, ", ".join(others))
            continue
        now = read_sysctl(name)
        if now is not None and now != value:
            write_sysctl(name, value)
            changed.append(f"{name}: {now} -> {value}")
    return changed
