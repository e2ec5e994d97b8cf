"""``python -m kubedl_py.cli``: the same as the ``kubedl-py`` command."""

import sys

from kubedl_py.cli.main import main

sys.exit(main())
