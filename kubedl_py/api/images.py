"""Container image references, checked with the grammar the container tools use.

Why check at all: a reference that is not valid ("my image", an uppercase repository) is accepted by every
YAML tool and fails only when a node tries to pull it -- minutes later, as an ``InvalidImageName`` event
nobody reads. Checking where the reference is typed (``kubedl-py manifests --image``) turns that into one
line naming the flag. The grammar is the distribution reference one (``docker/distribution/reference``):
``[domain[:port]/]path[:tag][@digest]``, with lower-case path components.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["image_reference_problem"]

_DOMAIN_COMPONENT: Final = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN: Final = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG: Final = r"[\w][\w.-]{0,127}"
_DIGEST: Final = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE: Final = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?"
)
_MAX_NAME: Final = 255


def image_reference_problem(reference: str) -> str | None:
    """What is wrong with ``reference`` as an image reference, in a few words; ``None`` when it is valid."""
    if not reference:
        return "is empty"
    if reference != reference.strip() or any(ch.isspace() for ch in reference):
        return "contains white space"
    match = _REFERENCE.fullmatch(reference)
    if match is None:
        if _REFERENCE.fullmatch(reference.lower()) is not None:
            return "has upper-case letters in its repository path (only the registry host may have them)"
        return "is not of the form [registry[:port]/]repository[:tag][@digest]"
    name = (f"{match['domain']}/" if match["domain"] else "") + match["path"]
    if len(name) > _MAX_NAME:
        return f"has a name longer than {_MAX_NAME} characters"
    return None
