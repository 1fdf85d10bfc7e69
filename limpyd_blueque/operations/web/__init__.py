"""`blueque web`: the dashboard (the `web` extra). See docs/dashboard.rst."""

from .app import create_app, serve
from .context import WebSettings

__all__ = ["WebSettings", "create_app", "serve"]
