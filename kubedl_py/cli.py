"""The ``kubedl-py`` command."""


def main() -> int:
    return 0
