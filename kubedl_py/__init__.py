"""kubedl-py: a KubeDL-style training-job controller for Kubernetes, in Python asyncio.

The SDK names are exported here (``from kubedl_py import TrainingClient, PyTorchJob``) but imported lazily:
the controller, the embedded cluster and ``kubedl_py.api`` users must not pay for the SDK's HTTP stack
(kubernetes-asyncio, aiohttp) just by importing the package. The names are those :mod:`kubedl_py.sdk` lists
in its ``__all__``, the one list of them (docs/sdk.md shows them imported from ``kubedl_py``;
tests/sdk/test_public_names.py pins it). It is read from the SDK's source, not by importing the SDK, so asking
the package for a name that is not the SDK's (a submodule, say) does not load the HTTP stack either.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from kubedl_py._version import __version__ as __version__

if TYPE_CHECKING:
    from kubedl_py.sdk import *  # noqa: F403  (for type checkers: the names __getattr__ hands out)


@functools.cache
def _sdk_names() -> tuple[str, ...]:
    """``kubedl_py.sdk.__all__``, read from the module's source without running it."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).parent / "sdk" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "__all__" for target in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise ImportError("kubedl_py.sdk must list its public names in a literal __all__")


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return [*_sdk_names(), "__version__"]
    if name in _sdk_names():
        from kubedl_py import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'kubedl_py' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_sdk_names()})
