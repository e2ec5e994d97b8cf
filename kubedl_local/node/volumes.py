"""Pod volumes for the process runtime: files on the host, bind-mounted in each container's mount namespace.

Why: a real API server's ServiceAccount admission adds a ``kube-api-access-*`` projected volume to every pod,
and in-cluster clients read ``/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}``;
users mount ConfigMaps, Secrets, the downward API and scratch space. The process runtime has no image root
filesystem, so each volume is a directory under the runtime's state directory
(``pods/<uid>/volumes/<name>``) that the sandbox bind-mounts at the container's ``mountPath`` (read-only
when asked) inside the container's private mount namespace; host processes and other pods see nothing.

Supported: ``emptyDir`` (a directory; ``medium``/``sizeLimit`` ignored), ``hostPath``, ``configMap``,
``secret``, ``downwardAPI`` and ``projected`` (``serviceAccountToken``, ``configMap``, ``secret``,
``downwardAPI`` sources), honouring ``items`` (key -> path, per-item ``mode``), ``defaultMode``,
``optional``, and ``subPath`` of a mount. Content is written the kubelet's way (a timestamped directory,
an ``..data`` symlink swapped atomically, and one symlink per entry), so ConfigMap/Secret changes, token
refreshes and changes of the pod's own labels and annotations (its downward API files: ``pod_changed``)
replace files atomically under running containers (``subPath`` mounts do not see updates, as in Kubernetes).
The token comes from the TokenRequest API (``serviceaccounts/{sa}/token`` with the projection's audience,
``expirationSeconds`` and a ``boundObjectRef`` to the pod) and is refreshed once 80% of its lifetime has
passed, as the kubelet does.

Mount points: a process has no container filesystem to create a missing ``mountPath`` in. The sandbox makes
it inside the pod's own mount namespace (``process/sandbox.py``: the deepest existing directory, ``/run`` for
``/var/run/secrets/kubernetes.io/serviceaccount``, is covered by a tmpfs that shows its original entries), so
no host process ever sees a pod's mount points (a left ``/var/run/secrets/kubernetes.io`` made in-cluster
clients on the host, such as ``import kubeflow.training``, take the host for a pod). Only a missing directory
right under ``/`` cannot be made that way: it is created on the host and removed again when the last pod
using it is gone; without root that is impossible, and such a mount is skipped with a warning (the pod
still runs, without that volume). A pod that runs in containers needs none of that (the engine makes
mount points in the container's root filesystem).

As in Kubernetes, ConfigMap, Secret, downward API and projected volumes are mounted read-only whatever the
mount says, and an ``emptyDir`` is writable by everyone. For a container pod (``owners``) the kubelet's
ownership rules apply, since its containers do not run as root: the service account token belongs to the
``runAsUser`` the pod's containers share (``fsUser``; mode 0600), and with ``fsGroup`` every file and
directory belongs to that group and is readable by it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubedl_local.node.env import EnvError, field_ref, resource_field
from kubedl_local.node.logs import parse_time
from kubedl_local.node.process import Mount
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import KubeError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DEFAULT_MODE = 0o644
#: volumes Kubernetes always mounts read-only, whatever the mount says (the kubelet's atomic writer owns them)
ALWAYS_READ_ONLY = ("configMap", "secret", "downwardAPI", "projected")
#: an emptyDir is writable by whoever the containers run as
EMPTY_DIR_MODE = 0o777
DEFAULT_TOKEN_SECONDS = 3600


class VolumeError(Exception):
    """A volume cannot be set up (yet): the pod waits in ContainerCreating with a FailedMount event."""


@dataclass(frozen=True)
class Ownership:
    """Who must be able to read a pod's volume files: the kubelet's ``fsUser`` (the one ``runAsUser`` all
    the pod's containers share, if any) and ``fsGroup`` (the pod's ``securityContext.fsGroup``)."""

    user: int | None = None
    group: int | None = None

    @classmethod
    def of(cls, pod: Obj) -> Ownership:
        spec = pod.get("spec") or {}
        pod_sc = spec.get("securityContext") or {}
        users = {
            (c.get("securityContext") or {}).get("runAsUser", pod_sc.get("runAsUser"))
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
        }
        user = next(iter(users)) if len(users) == 1 else None
        group = pod_sc.get("fsGroup")
        return cls(int(user) if user is not None else None, int(group) if group is not None else None)


@dataclass
class _PodVolumes:
    pod: Obj
    root: Path
    owners: Ownership = field(default_factory=Ownership)
    refs: set[tuple[str, str]] = field(default_factory=set)  # ("configmap"|"secret", name) it reads
    tokens: dict[tuple[str, int], tuple[str, float]] = field(default_factory=dict)  # (aud, secs) -> token, expiry
    created: list[str] = field(default_factory=list)  # mount points it made us create on the host
    targets: dict[str, bool] = field(default_factory=dict)  # mount path -> usable (ensured once per pod)
    refresh: asyncio.TimerHandle | None = None
    #: one writer at a time, so the last write is of the newest pod (a token request may suspend one)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class VolumeManager:
    """Volumes of the pods of one process node. ``lookup(kind, namespace, name)`` reads ConfigMaps and
    Secrets (from the runtime's informers); ``client`` asks for service account tokens."""

    def __init__(
        self,
        root: Path,
        client: KubeClient,
        lookup: Callable[[str, str, str], Obj | None],
        *,
        host_ip: str,
    ) -> None:
        self.root = root
        self.client = client
        self.lookup = lookup
        self.host_ip = host_ip
        self._pods: dict[str, _PodVolumes] = {}
        self._created: dict[str, int] = {}
        self._rootless = os.geteuid() != 0
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- pod lifecycle ------------------------------------------------------------------------------------

    async def setup(
        self, pod: Obj, pod_ip: str, *, host_mount_points: bool = True, owners: Ownership | None = None
    ) -> dict[str, tuple[Mount, ...]]:
        """Write the pod's volumes; the mounts of each container (by name). Raises :class:`VolumeError`.

        ``host_mount_points``: create missing mount points on the host (processes share its root
        filesystem); a container runtime creates them in the container's own. ``owners``: the pod's
        ``fsUser``/``fsGroup`` for files a container running as that user must read (container pods)."""
        uid = pod["metadata"]["uid"]
        pv = self._pods.get(uid)
        if pv is None:
            pv = self._pods[uid] = _PodVolumes(pod, self.root / uid / "volumes")
        pv.pod = pod
        if owners is not None:
            pv.owners = owners
        sources: dict[str, Path] = {}
        read_only: set[str] = set()
        async with pv.lock:
            for vol in (pod.get("spec") or {}).get("volumes") or []:
                sources[vol["name"]] = await self._write_volume(pv, vol, pod_ip)
                if any(kind in vol for kind in ALWAYS_READ_ONLY):
                    read_only.add(vol["name"])
        self._schedule_refresh(pv, pod_ip)
        spec = pod.get("spec") or {}
        mounts: dict[str, tuple[Mount, ...]] = {}
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            out: list[Mount] = []
            for vm in c.get("volumeMounts") or []:
                src = sources.get(vm.get("name", ""))
                if src is None:
                    raise VolumeError(f'volume "{vm.get("name")}" of container {c["name"]} is not defined in the pod')
                if vm.get("subPath"):
                    src = src / vm["subPath"]
                    if not src.exists():
                        src.mkdir(parents=True, exist_ok=True)
                target = str(vm.get("mountPath", ""))
                if not target.startswith("/"):
                    raise VolumeError(f"mountPath {target!r} of container {c['name']} is not absolute")
                if host_mount_points:
                    if target not in pv.targets:
                        pv.targets[target] = self._ensure_target(pv, target, src.is_dir())
                    if not pv.targets[target]:
                        continue
                out.append(Mount(src, target, bool(vm.get("readOnly")) or vm.get("name") in read_only))
            mounts[c["name"]] = tuple(out)
        return mounts

    def teardown(self, uid: str) -> None:
        """The pod is gone: delete its volumes and the mount points made only for it."""
        pv = self._pods.pop(uid, None)
        if pv is not None:
            if pv.refresh is not None:
                pv.refresh.cancel()
            for path in sorted(pv.created, key=len, reverse=True):
                self._created[path] -= 1
                if self._created[path] == 0:
                    del self._created[path]
                    # made for pods alone: the host is left as it was (a file, or an empty directory)
                    with contextlib.suppress(OSError):
                        if os.path.isdir(path) and not os.path.islink(path):
                            os.rmdir(path)
                        else:
                            os.unlink(path)
                    with contextlib.suppress(OSError):
                        if os.path.isdir(path):
                            os.rmdir(path)
                        else:
                            os.unlink(path)
        shutil.rmtree(self.root / uid, ignore_errors=True)

    def object_changed(self, kind: str, namespace: str, name: str) -> None:
        """A ConfigMap/Secret changed: rewrite the volumes of the pods that read it (atomically)."""
        for pv in list(self._pods.values()):
            if pv.pod["metadata"]["namespace"] == namespace and (kind, name) in pv.refs:
                self._spawn(self._rewrite(pv))

    def pod_changed(self, pod: Obj) -> None:
        """The pod object changed: when its labels or annotations did, rewrite its downward API files
        (``downwardAPI`` volumes, ``projected`` ones with a ``downwardAPI`` source) from the new object,
        atomically, as the kubelet does on a pod update. The volumes are the pod's from its setup on."""
        pv = self._pods.get(pod["metadata"]["uid"])
        if pv is None:
            return
        before, after = pv.pod.get("metadata") or {}, pod.get("metadata") or {}
        changed = any((before.get(k) or {}) != (after.get(k) or {}) for k in ("labels", "annotations"))
        pv.pod = pod
        volumes = (pod.get("spec") or {}).get("volumes") or []
        if changed and any(_reads_downward(vol) for vol in volumes):
            self._spawn(self._rewrite(pv, _reads_downward))

    async def close(self) -> None:
        for pv in self._pods.values():
            if pv.refresh is not None:
                pv.refresh.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- writing ------------------------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _rewrite(self, pv: _PodVolumes, which: Callable[[Obj], bool] | None = None) -> None:
        """Write the pod's updatable volumes again (those ``which`` picks, default all of them)."""
        async with pv.lock:
            if pv.pod["metadata"]["uid"] not in self._pods:
                return  # torn down meanwhile
            ip = str((pv.pod.get("status") or {}).get("podIP") or self.host_ip)
            for vol in (pv.pod.get("spec") or {}).get("volumes") or []:
                if any(k in vol for k in ("configMap", "secret", "projected", "downwardAPI")) and (
                    which is None or which(vol)
                ):
                    try:
                        await self._write_volume(pv, vol, ip)
                    except (VolumeError, KubeError) as e:
                        log.warning("updating volume %s of pod %s: %s", vol.get("name"), _pod_name(pv.pod), e)

    async def _write_volume(self, pv: _PodVolumes, vol: Obj, pod_ip: str) -> Path:
        name = str(vol["name"])
        if "hostPath" in vol:
            return _host_path(vol["hostPath"] or {})
        target: Path = pv.root / name
        if "emptyDir" in vol:
            os.makedirs(target, exist_ok=True)
            os.chmod(target, EMPTY_DIR_MODE)
            _own(target, None, pv.owners.group)
            return target
        files: dict[str, tuple[bytes, int]] = {}
        owned: set[str] = set()  # files that belong to fsUser (service account tokens)
        if "configMap" in vol:
            self._object_files(pv, files, "configmap", vol["configMap"] or {}, vol["configMap"].get("defaultMode"))
        elif "secret" in vol:
            src = dict(vol["secret"] or {})
            src["name"] = src.get("secretName", "")
            self._object_files(pv, files, "secret", src, src.get("defaultMode"))
        elif "downwardAPI" in vol:
            dw = vol["downwardAPI"] or {}
            self._downward_files(pv.pod, files, dw.get("items") or [], dw.get("defaultMode"), pod_ip)
        elif "projected" in vol:
            pj = vol["projected"] or {}
            mode = pj.get("defaultMode")
            for source in pj.get("sources") or []:
                if "serviceAccountToken" in source:
                    sat = source["serviceAccountToken"] or {}
                    token = await self._token(pv, str(sat.get("audience") or ""), sat.get("expirationSeconds"))
                    owners = pv.owners
                    # As the kubelet: private to the containers' user (or group) when the pod names one.
                    secret = owners.user is not None or owners.group is not None
                    files[str(sat.get("path", "token"))] = (token.encode(), 0o600 if secret else _mode(mode))
                    owned.add(str(sat.get("path", "token")))
                elif "configMap" in source:
                    self._object_files(pv, files, "configmap", source["configMap"] or {}, mode)
                elif "secret" in source:
                    self._object_files(pv, files, "secret", source["secret"] or {}, mode)
                elif "downwardAPI" in source:
                    self._downward_files(pv.pod, files, (source["downwardAPI"] or {}).get("items") or [], mode, pod_ip)
        else:
            kinds = sorted(k for k in vol if k != "name")
            raise VolumeError(f'volume "{name}": type {", ".join(kinds)} is not supported by the process runtime')
        _atomic_write(target, files, owner=pv.owners, owned=owned)
        return target

    def _object_files(
        self, pv: _PodVolumes, files: dict[str, tuple[bytes, int]], kind: str, src: Obj, default_mode: Any
    ) -> None:
        ns = pv.pod["metadata"]["namespace"]
        name = str(src.get("name", ""))
        pv.refs.add((kind, name))
        obj = self.lookup(kind, ns, name)
        if obj is None:
            if src.get("optional"):
                return
            raise VolumeError(f'{kind} "{name}" not found')
        data: dict[str, bytes] = {}
        if kind == "secret":
            data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        items = src.get("items")
        if not items:
            for k, v in data.items():
                files[k] = (v, _mode(default_mode))
            return
        for item in items:
            key = item.get("key", "")
            if key not in data:
                if src.get("optional"):
                    continue
                raise VolumeError(f'configmap/secret "{name}": key "{key}" not found')
            files[str(item.get("path", key))] = (data[key], _mode(item.get("mode", default_mode)))

    def _downward_files(
        self, pod: Obj, files: dict[str, tuple[bytes, int]], items: list[Obj], default_mode: Any, pod_ip: str
    ) -> None:
        md = pod.get("metadata") or {}
        containers = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
        for item in items:
            path = str(item.get("path", ""))
            mode = _mode(item.get("mode", default_mode))
            if "fieldRef" in item:
                fp = (item["fieldRef"] or {}).get("fieldPath", "")
                if fp in ("metadata.labels", "metadata.annotations"):
                    values = md.get(fp.split(".")[1]) or {}
                    text = "".join(f"{k}={json.dumps(str(v))}\n" for k, v in sorted(values.items()))
                    files[path] = (text.rstrip("\n").encode(), mode)
                    continue
                try:
                    files[path] = (field_ref(pod, fp, pod_ip=pod_ip, host_ip=self.host_ip).encode(), mode)
                except EnvError as e:
                    raise VolumeError(str(e)) from None
            elif "resourceFieldRef" in item:
                ref = item["resourceFieldRef"] or {}
                c: Obj = containers.get(ref.get("containerName", "")) or next(iter(containers.values()), {})
                files[path] = (resource_field(c, ref).encode(), mode)

    async def _token(self, pv: _PodVolumes, audience: str, seconds: Any) -> str:
        secs = int(seconds or DEFAULT_TOKEN_SECONDS)
        cached = pv.tokens.get((audience, secs))
        if cached is not None and time.time() < cached[1]:
            return cached[0]
        md = pv.pod["metadata"]
        sa = (pv.pod.get("spec") or {}).get("serviceAccountName") or "default"
        spec: Obj = {
            "expirationSeconds": secs,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": md["name"], "uid": md["uid"]},
        }
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        path = f"/api/v1/namespaces/{md['namespace']}/serviceaccounts/{sa}/token"
        try:
            answer = await self.client.request("POST", path, body=body)
        except KubeError as e:
            raise VolumeError(f'failed to fetch token for service account "{sa}": {e}') from None
        status = answer.get("status") or {}
        token = str(status.get("token", ""))
        try:
            expiry = parse_time(str(status.get("expirationTimestamp")))
        except ValueError:
            expiry = time.time() + secs
        issued = time.time()
        # Refresh after 80% of the lifetime, as the kubelet's token manager does.
        pv.tokens[(audience, secs)] = (token, issued + 0.8 * max(1.0, expiry - issued))
        return token

    def _schedule_refresh(self, pv: _PodVolumes, pod_ip: str) -> None:
        if not pv.tokens:
            return
        if pv.refresh is not None:
            pv.refresh.cancel()
        due = min(t[1] for t in pv.tokens.values())
        delay = max(1.0, due - time.time())

        def fire() -> None:
            pv.refresh = None
            self._spawn(self._refresh(pv, pod_ip))

        pv.refresh = asyncio.get_running_loop().call_later(delay, fire)

    async def _refresh(self, pv: _PodVolumes, pod_ip: str) -> None:
        if pv.pod["metadata"]["uid"] not in self._pods:
            return
        await self._rewrite(pv)
        self._schedule_refresh(pv, pod_ip)

    # ---- mount points -------------------------------------------------------------------------------------

    def _ensure_target(self, pv: _PodVolumes, target: str, directory: bool) -> bool:
        """A missing mount point is made by the pod's sandbox inside its own mount namespace (sandbox.py), so
        no host process sees it: nothing to do here, unless its first missing directory is right under ``/``
        (``/data/...``), which a mount namespace cannot add. Only those are made on the host, counting the pods
        that use each path we created (the first pod to go does not remove what another still mounts), and
        removed when the last goes. False to skip this mount."""
        chain: list[str] = []
        p = target.rstrip("/")
        while p and p != "/":
            chain.append(p)
            p = os.path.dirname(p)
        missing = [path for path in chain if not os.path.lexists(path) or path in self._created]
        if not missing or os.path.dirname(missing[-1]) != "/":
            return True
        try:
            for path in reversed(chain):
                if os.path.lexists(path):
                    if path not in self._created:
                        continue
                elif path == chain[0] and not directory:
                    Path(path).touch()
                else:
                    os.mkdir(path)
                pv.created.append(path)
                self._created[path] = self._created.get(path, 0) + 1
        except OSError as e:
            if self._rootless:
                log.warning(
                    "pod %s: cannot create mount point %s without root (%s); not mounted", _pod_name(pv.pod), target, e
                )
                return False
            raise VolumeError(f"cannot create mount point {target}: {e}") from None
        return True


def _reads_downward(vol: Obj) -> bool:
    """Whether the volume shows fields of the pod object (the downward API)."""
    if "downwardAPI" in vol:
        return True
    sources = (vol.get("projected") or {}).get("sources") or []
    return any("downwardAPI" in source for source in sources)


def _host_path(hp: Obj) -> Path:
    path = Path(str(hp.get("path", "")))
    kind = hp.get("type") or ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    elif kind and not path.exists():
        raise VolumeError(f"hostPath type check failed: {path} does not exist")
    return path


def _mode(value: Any) -> int:
    return int(value) if isinstance(value, int) else DEFAULT_MODE


def _pod_name(pod: Obj) -> str:
    md = pod.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"


def _own(path: Path, user: int | None, group: int | None) -> None:
    """chown as far as allowed (without root only our own files can change, and only to our groups)."""
    if user is None and group is None:
        return
    with contextlib.suppress(OSError):
        os.lchown(path, -1 if user is None else user, -1 if group is None else group)
    if group is not None and path.is_dir() and not path.is_symlink():
        with contextlib.suppress(OSError):
            os.chmod(path, os.stat(path).st_mode | 0o2050)  # setgid: new files get the group too


def _atomic_write(
    target: Path,
    files: dict[str, tuple[bytes, int]],
    *,
    owner: Ownership | None = None,
    owned: set[str] | frozenset[str] = frozenset(),
) -> None:
    """The kubelet's atomic writer: ``..<time>/`` with the files, ``..data`` -> it (renamed into place),
    and ``<entry>`` -> ``..data/<entry>`` for each top-level entry; older generations are removed.

    With ``owner`` (a container pod's fsUser/fsGroup): the files named in ``owned`` belong to its user, and
    everything to its group, readable by that group (what the kubelet's volume ownership management does)."""
    owner = owner or Ownership()
    target.mkdir(parents=True, exist_ok=True)
    _own(target, None, owner.group)
    generation = target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns() % 1_000_000_000:09d}"
    generation.mkdir()
    _own(generation, None, owner.group)
    for name, (data, mode) in files.items():
        rel = name.strip("/")
        if not rel or ".." in rel.split("/"):
            continue
        path = generation / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode | 0o040 if owner.group is not None else mode)
        _own(path, owner.user if name in owned else None, owner.group)
    tmp = target / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(generation.name)
    tmp.rename(target / "..data")  # atomic: readers see the old or the new generation, never a mix
    top = {rel.strip("/").split("/")[0] for rel in files if rel.strip("/")}
    for entry in top:
        link = target / entry
        if not link.is_symlink():
            link.symlink_to(f"..data/{entry}")
    for child in target.iterdir():
        name = child.name
        if name.startswith("..") and name not in ("..data", generation.name):
            shutil.rmtree(child, ignore_errors=True)
        elif not name.startswith("..") and name not in top and child.is_symlink():
            child.unlink()
