"""The one version of kubedl-py, in a module that imports nothing.

pyproject.toml reads it (the package metadata), ``kubedl_py.__version__`` re-exports it, and the install
manifests pin the controller image ``kubedl-py:<version>`` by it. It lives apart from ``kubedl_py/__init__.py``
because that module names the SDK, which the layers below the SDK (templates, the embedded cluster) must not
reach even through an import of the version.
"""

__version__ = "0.1.0"
