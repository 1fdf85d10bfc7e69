"""The command line: the worker script (`worker_script`, `blueque-worker`), the admin
command (`admin`, `blueque`) with one module per subject (`queues`, `operators`,
`serving`), and the tables they print (`tables`).

`limpyd_blueque.cli:main` is the `blueque-worker` entry point."""

from .worker_script import main

__all__ = ["main"]

