"""Install manifests, rendered from the jinja2 templates in this package (see ``render.py``)."""

from kubedl_py.templates.render import ManifestOptions, render_manifests

__all__ = ["ManifestOptions", "render_manifests"]
