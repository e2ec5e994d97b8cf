"""The go.mod restating of another project's replaces (programs.py)."""

from __future__ import annotations

from kubedl_py.local.kubernetes.programs import replace_lines, restated_replaces

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
