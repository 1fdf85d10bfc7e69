"""Command-line entry points."""

from .config import main

__all__ = ["main"]
