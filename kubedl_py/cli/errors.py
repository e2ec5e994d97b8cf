"""Exit codes and one-line errors: the promises the command makes to scripts.

0 success, 1 the job failed (or the cluster refused), 2 usage or validation error, 3 timeout. Errors are one
line on stderr prefixed ``kubedl-py:``; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import sys
import traceback
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_TIMEOUT: Final = 3
#: 128 + SIGINT: Ctrl-C, as a shell reports it
EXIT_INTERRUPTED: Final = 130


class UsageError(Exception):
    """Bad command-line input: one line on stderr, exit code 2."""


def fail(message: str, code: int, debug: bool) -> int:
    """Print ``kubedl-py: message`` (after the traceback with ``--debug``) and return ``code``."""
    if debug:
        traceback.print_exc()
    print(f"kubedl-py: {message}", file=sys.stderr)
    return code
