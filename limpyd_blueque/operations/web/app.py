"""The dashboard's Flask application: its settings, the rules every response follows
(security headers, trusted hosts, errors as pages) and the server that runs it.

Flask rather than another framework: the dashboard is plain request and response over
the library's synchronous reads, which Flask serves with no adapter; its Jinja2
templates escape every value by default; and it is the framework of rq-dashboard and of
most Python admin pages, so readers know it. It is served by waitress, a production
WSGI server in pure Python.
"""

from __future__ import annotations

import secrets
from typing import Any

from flask import Flask, Response, render_template, request
from redis.exceptions import RedisError

from ...exceptions import (
    ConfigurationError,
    LimpydBluequeError,
    RedisUnavailable,
    TaskNotFound,
    WorkflowNotFound,
)
from ...models.binding import unconverted
from ...protocol.values import printable
from . import acts, pages
from .context import WebSettings, current

#: the host names a dashboard bound to a loopback address answers to: any other `Host`
#: header is refused, so that a web page whose name was made to point at 127.0.0.1
#: (DNS rebinding) cannot read the dashboard through the user's browser
LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1", "[::1]"]
#: every page's Content-Security-Policy: its own scripts and styles only, never inline
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; "
       "object-src 'none'")


def create_app(settings: WebSettings | None = None, host: str = "127.0.0.1") -> Flask:
    """The dashboard for `settings` (default: read-only), served on `host`: a loopback
    host answers only to loopback names (see `LOOPBACK_NAMES`)."""
    settings = settings or WebSettings()
    app = Flask(__name__)
    app.secret_key = secrets.token_bytes(32)  # sessions end when the dashboard restarts
    app.config.update(
        SESSION_COOKIE_NAME="blueque_web", SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_HTTPONLY=True, MAX_CONTENT_LENGTH=64 * 1024,
        TRUSTED_HOSTS=LOOPBACK_NAMES if is_loopback(host) else None)
    app.extensions["blueque"] = settings
    app.register_blueprint(pages.blueprint)
    app.register_blueprint(acts.blueprint)
    app.after_request(secure_headers)
    app.register_error_handler(LimpydBluequeError, error_page)
    app.register_error_handler(RedisError, lambda error: error_page(unconverted(error)))
    app.register_error_handler(403, lambda _: problem(403, f"no action here: {settings.mode}"))
    app.register_error_handler(404, lambda _: problem(404, "no such page"))
    app.register_error_handler(405, lambda _: problem(405, "method not allowed"))
    app.register_error_handler(400, lambda _: problem(400, "bad request"))
    app.register_error_handler(413, lambda _: problem(413, "request too large"))
    app.add_url_rule("/metrics", "metrics", metrics_view)
    app.jinja_env.filters.update(duration=pages.duration, moment=pages.moment,
                                  amount=pages.amount)
    app.context_processor(lambda: {"settings": settings, "csrf_token": acts.csrf_token})
    return app


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_NAMES or host.startswith("127.")


def secure_headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def problem(status: int, message: str) -> Any:
    """An error page (or a JSON error for `/api/` paths) saying `message`."""
    if request.path.startswith("/api/"):
        return {"error": message}, status
    return render_template("problem.html", status=status, message=message), status


def error_page(error: BaseException) -> Any:
    """An error of the library as a page: a mistake in the address is 400, an unknown task
    or workflow 404, Redis out of reach 503, any other 500. Passwords never reach it."""
    from ...connection.errors import mask_secrets

    status = (400 if isinstance(error, ConfigurationError) else 404
              if isinstance(error, (TaskNotFound, WorkflowNotFound)) else 503
              if isinstance(error, RedisUnavailable) else 500)
    return problem(status, printable(mask_secrets(str(error))))


def metrics_view() -> Response:
    """`/metrics`: the Prometheus exposition of `metrics.BluequeCollector`."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from ..metrics import registry

    settings = current()
    body = generate_latest(registry(settings.job_model))
    return Response(body, content_type=CONTENT_TYPE_LATEST)


def serve(settings: WebSettings, host: str, port: int) -> None:
    """Serve the dashboard with waitress until interrupted."""
    import waitress

    waitress.serve(create_app(settings, host), host=host, port=port, threads=8,
                   ident="blueque-web", clear_untrusted_proxy_headers=True)
