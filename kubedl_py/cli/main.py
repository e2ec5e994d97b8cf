"""``kubedl-py``'s entry point: parse, set up logging, run the command's handler, map errors to exit codes.

Job commands log only warnings (their output is their answer; ``--debug`` shows everything); the
long-running commands (``local up``, ``controller``) log what they do.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Final

from kubedl_py.cli.errors import EXIT_USAGE, UsageError
from kubedl_py.cli.parser import Handler, build_parser

_CHATTY_COMMANDS: Final = ("local", "controller")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.debug:
        level = logging.DEBUG
    elif args.command in _CHATTY_COMMANDS:
        level = logging.INFO
    else:
        level = logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args)
    except UsageError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
