"""Build other Go programs of the Kubernetes world (schedulers, Kueue, peer controllers) from their modules.

The control plane itself is built by ``binaries.py``; this is the same idea for everything that runs beside
it in tests and benchmarks: a published Go module, by name and pinned version, compiled once with the
ordinary ``go`` client into ``~/.cache/kubedl-py/<name>/<version>/bin``. Nothing of theirs is committed.

Why a go.mod of ours: ``replace`` directives apply only in the main module, so building another project's
command as a dependency loses the replaces its own go.mod relies on (``k8s.io/kubernetes`` pinned through
``k8s.io/api => k8s.io/api v0.34.1`` and the like). The go.mod written here requires the module and restates
each of its replaces that names a published version; a replace onto a directory of the project's own
repository cannot be restated, and :attr:`GoProgram.extra_requires` names the published module to use
instead when a program needs one. :attr:`GoProgram.replaces` overrides a replace outright: the module proxy a
machine reaches may lack the exact version a project's go.mod pins (a partial mirror), or a project may
require a version of its own API module that was never published; a published neighbour stands in.

Why a go.sum of theirs, when asked (:attr:`GoProgram.seed_go_sum`): the checksum database here mirrors the
module proxy only in part, so a dependency the proxy serves may have no sumdb record (Kueue's
``sigs.k8s.io/scheduler-library`` pre-release: ``verifying module: ... 404 Not Found``). Starting our go.sum
from the module's own go.sum verifies those downloads against the hashes the project itself recorded.

Why build-time patches (:attr:`GoProgram.patches`, :attr:`GoProgram.extra_files`): a benchmark may need to
turn a knob a program has no flag for (a peer controller's client-side rate limit). Copying their source into
our checkout is not allowed, and editing Go's module cache would change the module for everyone. Only a
command's own ``main`` package can be patched: its files are copied (at build time, into the build directory
under ``~/.cache/kubedl-py``, outside the checkout) into a package of our build module, each substitution is
applied there, our added files join them, and that package is compiled against the module's other packages
exactly as published. ``go build -overlay`` would be the lighter tool, but Go refuses an overlay of any file
under GOMODCACHE ("Files beneath GOMODCACHE must not be replaced"). Each substitution must match its file
exactly once, so a module that changed under a pin fails the build loudly instead of building something
unpatched. A patched program's cache directory carries a digest of its patches, so a changed patch is never
served an old build.

The module's own files (CRD manifests, default configurations) are read from Go's module cache:
:func:`module_source` gives the directory ``go mod download`` extracted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kubedl_local.kubernetes.binaries import (
    BuildError,
    Progress,
    _commit,
    _go_directive,
    _go_env,
    _locked,
    _module_info,
    _run,
    _scratch,
    _stamp,
    _stderr,
    _write_tools,
    find_go,
)
from kubedl_local.pins import cache_root


@dataclass(frozen=True)
class SourcePatch:
    """A substitution in one file of a command's own package, applied to a copy of it at build time."""

    #: the file, as a path inside the module (``main.go``, ``cmd/manager/main.go``)
    file: str
    #: the text to replace; it must occur exactly once in the published file
    old: str
    #: what replaces it
    new: str


@dataclass(frozen=True)
class GoProgram:
    """One published Go module and the commands built from it."""

    #: the cache directory's name (``kueue``, ``scheduler-plugins``)
    name: str
    #: the module path, e.g. ``sigs.k8s.io/kueue``
    module: str
    #: the pinned version, with its ``v``
    version: str
    #: binary name -> package path of its ``main``
    commands: dict[str, str]
    #: module path -> version, required besides the module (for replaces onto the project's own directories)
    extra_requires: dict[str, str] = field(default_factory=dict)
    #: module path -> version: ``replace <path> => <path> <version>``, over whatever the module's go.mod says
    replaces: dict[str, str] = field(default_factory=dict)
    #: ``-ldflags`` of the build (version stamps)
    ldflags: str = "-s -w"
    #: Go build tags (``no_btrfs``: containerd's btrfs snapshotter needs cgo, which these builds go without)
    tags: tuple[str, ...] = ()
    #: start our go.sum from the module's own (its recorded hashes verify what the checksum database lacks)
    seed_go_sum: bool = False
    #: substitutions in a command's own package, compiled from a copy of it (module docstring)
    patches: tuple[SourcePatch, ...] = ()
    #: files of ours added to the module's packages at build time: path inside the module -> Go source
    extra_files: dict[str, str] = field(default_factory=dict)

    @property
    def patched(self) -> bool:
        return bool(self.patches or self.extra_files)

    def patch_digest(self) -> str:
        """A short digest of the patches and added files (part of a patched program's cache directory)."""
        record = {
            "patches": [[patch.file, patch.old, patch.new] for patch in self.patches],
            "extra_files": dict(sorted(self.extra_files.items())),
        }
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class BuiltProgram:
    program: GoProgram
    #: binary name -> path
    binaries: dict[str, Path]

    def __getitem__(self, command: str) -> Path:
        return self.binaries[command]


def program_dir(program: GoProgram) -> Path:
    """``~/.cache/kubedl-py/<name>/<version>``; ``<version>+patched.<digest>`` for a patched build."""
    version = f"{program.version}+patched.{program.patch_digest()}" if program.patched else program.version
    return cache_root() / program.name / version


def find_program(program: GoProgram) -> BuiltProgram | None:
    """The cached build, or None when any of its binaries is missing."""
    bin_dir = program_dir(program) / "bin"
    binaries = {name: bin_dir / name for name in program.commands}
    if all(path.is_file() and os.access(path, os.X_OK) for path in binaries.values()):
        return BuiltProgram(program, binaries)
    return None


def ensure_program(program: GoProgram, *, progress: Progress | None = None, go: str | None = None) -> BuiltProgram:
    """Return the built program, compiling it first if needed (minutes cold; a lock serialises builds)."""
    say = progress or _stderr
    found = find_program(program)
    if found is not None:
        return found
    go_cmd = go or find_go()
    target = program_dir(program)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / ".build.lock", say):
        found = find_program(program)
        if found is not None:
            return found
        say(f"building {program.module}@{program.version} ({', '.join(program.commands)}) into {target} (once)")
        _build(program, go_cmd, target, say)
    found = find_program(program)
    if found is None:  # pragma: no cover - a build that "succeeded" but left no binary
        raise BuildError(f"the build of {program.module} finished but its binaries are missing under {target}")
    return found


def module_source(program: GoProgram, *, go: str | None = None) -> Path:
    """The module's files as ``go mod download`` extracted them (read-only), e.g. for its CRD manifests."""
    go_cmd = go or find_go()
    work = _scratch(program_dir(program).with_name(f"{program.version}.probe"))
    try:
        info = _module_info(go_cmd, f"{program.module}@{program.version}", work, _go_env(work))
    finally:
        for child in work.iterdir():
            child.unlink()
        work.rmdir()
    return Path(info["Dir"])


def restated_replaces(go_mod: str) -> list[str]:
    """The ``replace`` lines of a go.mod that point at a published module version (``old [v] => new v``);
    replaces onto local directories are left out (they exist only in that project's repository)."""
    lines: list[str] = []
    block = re.findall(r"^replace\s*\((.*?)^\)", go_mod, re.MULTILINE | re.DOTALL)
    singles = re.findall(r"^replace\s+([^(\n].*)$", go_mod, re.MULTILINE)
    for raw in [*(line for text in block for line in text.splitlines()), *singles]:
        entry = raw.split("//", 1)[0].strip()
        if "=>" not in entry:
            continue
        _, new = (part.strip() for part in entry.split("=>", 1))
        target = new.split()
        if len(target) == 2 and not target[0].startswith((".", "/")):
            lines.append(entry)
    return lines


def replace_lines(go_mod: str, overrides: dict[str, str]) -> list[str]:
    """Our go.mod's replaces: the module's restated ones, except those ``overrides`` (path -> version) redo."""
    kept = [line for line in restated_replaces(go_mod) if line.split("=>", 1)[0].split()[0] not in overrides]
    return kept + [f"{name} => {name} {version}" for name, version in overrides.items()]


def _build(program: GoProgram, go: str, target: Path, say: Progress) -> None:
    work = _scratch(target)
    env = _go_env(work)
    module = f"{program.module}@{program.version}"
    say(f"[1/{len(program.commands) + 1}] resolving {module} and downloading its modules")
    info = _module_info(go, module, work, env)
    their_go_mod = Path(info["GoMod"]).read_text()
    requires = {program.module: program.version, **program.extra_requires}
    replaces = replace_lines(their_go_mod, program.replaces)
    go_mod = [
        f"module kubedl-py.local/{program.name}-build",
        "",
        f"go {_go_directive(their_go_mod)}",
        "",
        "require (",
        *(f"\t{name} {version}" for name, version in requires.items()),
        ")",
        "",
    ]
    if replaces:
        go_mod += ["replace (", *(f"\t{line}" for line in replaces), ")", ""]
    (work / "go.mod").write_text("\n".join(go_mod))
    their_go_sum = Path(info["Dir"]) / "go.sum"
    if program.seed_go_sum and their_go_sum.is_file():
        (work / "go.sum").write_text(their_go_sum.read_text())
    _write_tools(work, list(program.commands.values()))
    _run([go, "mod", "tidy"], work, env, say, what=f"go mod tidy ({program.name})")
    packages = dict(program.commands)
    if program.patched:
        packages.update(write_patched_commands(program, Path(info["Dir"]), work))
        say(f"    patched at build time (copies under {work / PATCHED_DIR}): {', '.join(patched_files(program))}")
    (work / "bin").mkdir()
    for i, (name, package) in enumerate(packages.items(), start=2):
        say(f"[{i}/{len(program.commands) + 1}] compiling {name}")
        output = str(work / "bin" / name)
        tags = ["-tags", ",".join(program.tags)] if program.tags else []
        _run(
            [go, "build", "-trimpath", *tags, "-ldflags", program.ldflags, "-o", output, package],
            work,
            env,
            say,
            what=f"compiling {name}",
        )
    stamp = {"module": program.module, "version": program.version}
    if program.patched:
        stamp["patches"] = program.patch_digest()
    _stamp(work, stamp, go, env)
    (work / "go.mod.used").write_text((work / "go.mod").read_text())
    _commit(work, target)


def patched_files(program: GoProgram) -> list[str]:
    """The module's files a patched build replaces or adds, in order, without repeats."""
    return list(dict.fromkeys([*(patch.file for patch in program.patches), *program.extra_files]))


def apply_patches(program: GoProgram, module_dir: Path) -> dict[str, str]:
    """Path inside the module -> the text the build compiles instead: each patched file with its substitutions
    applied in order (each must match exactly once), and each added file (which must not exist already)."""
    texts: dict[str, str] = {}
    for patch in program.patches:
        if patch.file not in texts:
            source = module_dir / patch.file
            if not source.is_file():
                raise BuildError(f"{program.module}@{program.version} has no file {patch.file} to patch")
            texts[patch.file] = source.read_text()
        found = texts[patch.file].count(patch.old)
        if found != 1:
            raise BuildError(
                f"patching {patch.file} of {program.module}@{program.version}: expected the text {patch.old!r} "
                f"exactly once, found it {found} times (the module is not what the patch was written for)"
            )
        texts[patch.file] = texts[patch.file].replace(patch.old, patch.new)
    for name, text in program.extra_files.items():
        if (module_dir / name).exists() or name in texts:
            raise BuildError(f"{program.module}@{program.version} already has a file {name}; an added file must be new")
        texts[name] = text
    return texts


#: where in the build module the patched commands' packages are copied
PATCHED_DIR = "patched"


def write_patched_commands(program: GoProgram, module_dir: Path, work: Path) -> dict[str, str]:
    """Copy the package of each command with patched or added files into the build module ``work`` (its Go
    files, without tests), apply the patches there and add our files; command -> the package to build
    (``./patched/<command>``). A patch outside a command's own package is refused (module docstring)."""
    texts = apply_patches(program, module_dir)
    prefix = f"{program.module}/"
    directories = {
        name: package[len(prefix) :] if package.startswith(prefix) else "" if package == program.module else None
        for name, package in program.commands.items()
    }
    packages: dict[str, str] = {}
    claimed: set[str] = set()
    for name, directory in directories.items():
        if directory is None:
            continue
        mine = {file for file in texts if str(Path(file).parent) == (directory or ".")}
        if not mine:
            continue
        claimed |= mine
        source = module_dir / directory
        target = work / PATCHED_DIR / name
        target.mkdir(parents=True)
        for original in sorted(source.glob("*.go")):
            if original.name.endswith("_test.go"):
                continue
            text = original.read_text()
            if "//go:embed" in text:
                raise BuildError(f"{original.name} of {program.module} embeds files; its package cannot be patched")
            (target / original.name).write_text(text)
        for file in mine:
            (target / Path(file).name).write_text(texts[file])
        packages[name] = f"./{PATCHED_DIR}/{name}"
    stray = sorted(set(texts) - claimed)
    if stray:
        raise BuildError(
            f"{program.module}: {', '.join(stray)} not in the package of a command; only a command's own package can "
            "be patched (Go refuses overlays of the module cache)"
        )
    return packages


def describe(built: BuiltProgram) -> str:
    """One line for logs: what was built, from which module version."""
    record = program_dir(built.program) / "build.json"
    stamp = json.loads(record.read_text()) if record.is_file() else {}
    return f"{built.program.module}@{built.program.version} ({stamp.get('go', 'go ?')})"
