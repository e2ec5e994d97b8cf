"""The go.mod restating of another project's replaces, and build-time patches of a command's package
(programs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubedl_local.kubernetes.binaries import BuildError
from kubedl_local.kubernetes.programs import (
    GoProgram,
    SourcePatch,
    apply_patches,
    program_dir,
    replace_lines,
    restated_replaces,
    write_patched_commands,
)

GO_MOD = """module sigs.k8s.io/scheduler-plugins

go 1.24.0

require (
\tk8s.io/api v0.34.1
\tk8s.io/kubernetes v1.34.1
)

replace (
\tk8s.io/api => k8s.io/api v0.34.1 // pinned with kubernetes
\tk8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.34.1
\tsigs.k8s.io/scheduler-plugins/apis => ./apis
)

replace github.com/example/fork v1.2.0 => github.com/other/fork v1.2.1
replace volcano.sh/apis => ../apis
"""


def test_published_replaces_are_restated_and_local_ones_left_out() -> None:
    assert restated_replaces(GO_MOD) == [
        "k8s.io/api => k8s.io/api v0.34.1",
        "k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.34.1",
        "github.com/example/fork v1.2.0 => github.com/other/fork v1.2.1",
    ]


def test_a_go_mod_without_replaces_restates_nothing() -> None:
    assert restated_replaces("module x\n\ngo 1.26.0\n\nrequire k8s.io/api v0.34.1\n") == []


def test_overrides_replace_the_modules_own_pin_and_its_local_directories() -> None:
    # A partial proxy mirror lacks k8s.io/api v0.34.1; volcano.sh/apis is only a directory of its repository.
    lines = replace_lines(GO_MOD, {"k8s.io/api": "v0.34.0", "volcano.sh/apis": "v1.14.0"})
    assert lines == [
        "k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.34.1",
        "github.com/example/fork v1.2.0 => github.com/other/fork v1.2.1",
        "k8s.io/api => k8s.io/api v0.34.0",
        "volcano.sh/apis => volcano.sh/apis v1.14.0",
    ]


MAIN_GO = """package main

func main() {
\tcfg := ctrl.GetConfigOrDie()
\t_ = cfg
}
"""


def _patched(*patches: SourcePatch, extra: dict[str, str] | None = None, package: str = "") -> GoProgram:
    return GoProgram(
        name="peer",
        module="example.com/peer",
        version="v1.0.0",
        commands={"peer": f"example.com/peer{package}", "other": "example.com/peer/cmd/other"},
        patches=patches,
        extra_files=extra or {},
    )


def test_a_patched_command_is_built_from_a_patched_copy_of_its_package(tmp_path: Path) -> None:
    module = tmp_path / "module"
    (module / "cmd" / "other").mkdir(parents=True)
    (module / "main.go").write_text(MAIN_GO)
    (module / "flags.go").write_text("package main\n")
    (module / "main_test.go").write_text("package main\n")
    program = _patched(
        SourcePatch("main.go", "ctrl.GetConfigOrDie()", "ours(ctrl.GetConfigOrDie())"),
        extra={"ours.go": "package main\n"},
    )
    work = tmp_path / "work"
    # only the patched command is rebuilt from a copy; the other is built from the module as published
    assert write_patched_commands(program, module, work) == {"peer": "./patched/peer"}
    copy = work / "patched" / "peer"
    assert sorted(path.name for path in copy.iterdir()) == ["flags.go", "main.go", "ours.go"]
    assert "cfg := ours(ctrl.GetConfigOrDie())" in (copy / "main.go").read_text()
    assert (module / "main.go").read_text() == MAIN_GO  # the module itself is untouched


def test_only_a_commands_own_package_can_be_patched(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "config.go").write_text(MAIN_GO)
    program = _patched(SourcePatch("pkg/config.go", "GetConfigOrDie", "GetConfig"), package="/cmd/peer")
    with pytest.raises(BuildError, match="only a command's own package"):
        write_patched_commands(program, tmp_path, tmp_path / "work")


@pytest.mark.parametrize("old", ["GetConfig()", "cfg"])  # absent; present twice
def test_a_patch_that_does_not_match_exactly_once_fails_the_build(tmp_path: Path, old: str) -> None:
    (tmp_path / "main.go").write_text(MAIN_GO)
    with pytest.raises(BuildError, match="exactly once"):
        apply_patches(_patched(SourcePatch("main.go", old, "x")), tmp_path)


def test_an_added_file_must_be_new(tmp_path: Path) -> None:
    (tmp_path / "main.go").write_text(MAIN_GO)
    with pytest.raises(BuildError, match=r"already has a file main\.go"):
        apply_patches(_patched(extra={"main.go": "package main\n"}), tmp_path)


def test_a_patched_build_has_a_cache_directory_of_its_own() -> None:
    plain = _patched()
    one = _patched(SourcePatch("main.go", "a", "b"))
    other = _patched(SourcePatch("main.go", "a", "c"))
    assert program_dir(plain).name == "v1.0.0"
    assert program_dir(one).name.startswith("v1.0.0+patched.")
    assert len({program_dir(plain), program_dir(one), program_dir(other)}) == 3
