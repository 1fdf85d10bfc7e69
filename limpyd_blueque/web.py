"""The documented path of the web dashboard's Flask application, which lives in
`limpyd_blueque.operations.web` (this module only re-exports it)."""

from .operations.web import WebSettings, create_app, serve

__all__ = ["WebSettings", "create_app", "serve"]
