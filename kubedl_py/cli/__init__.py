"""The ``kubedl-py`` command line.

Why a package: building the argument parser (``--help``, ``manifests``) must stay fast and must not import
the controller or the HTTP stack, while each command's handler is ordinary, fully typed code with its imports
at the top. So :mod:`.parser` declares every command and names its handler by module; :mod:`.main` parses,
imports the one handler module the command needs, and turns errors into one line and an exit code. The
handlers: :mod:`.local` (``local up``), :mod:`.controller`, :mod:`.manifests`, :mod:`.jobs` (the job
commands over the SDK), with :mod:`.output` formatting their tables.
"""

from kubedl_py.cli.main import main

__all__ = ["main"]
