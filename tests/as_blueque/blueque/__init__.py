"""`import blueque` resolving to limpyd-blueque: put this folder first on the path to run
code written for the reference package against the drop-in, unchanged."""

from limpyd_blueque.client import Client

__all__ = ["Client"]
