"""The documented path of the `blueque` command, which lives in `limpyd_blueque.cli.admin`:
`python -m limpyd_blueque.admin` runs it (this module only re-exports it)."""

import sys

from .cli.admin import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
