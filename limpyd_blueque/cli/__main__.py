"""`python -m limpyd_blueque.cli` runs the worker script, as `blueque-worker` does."""

import sys

from .worker_script import main

sys.exit(main())
