"""Command-line entry points."""

from .config import main

__all__ = ["main"]


if __name__ == "__main__":
    import sys

    sys.exit(main())
