"""The embedded API server, laid out as kube-apiserver is: the HTTP face (``server``), the generic registry
of object semantics (``registry``) with admission, validation, typed decoding, CEL, schemas, patches,
server-side apply (``fieldmanager``), selectors, tables, discovery and OpenAPI, and the errors it answers
with. It keeps its objects in ``kubedl_local.storage`` and knows nothing of the controllers, scheduler
or nodes that use it (import-linter's layers contract in pyproject.toml).
"""
