"""`blueque web` (the dashboard, the `web` extra) and `blueque metrics` (Prometheus
metrics, the `metrics` extra): the subcommands that serve pages until interrupted."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..exceptions import ConfigurationError

Handler = Callable[[argparse.Namespace], int]
#: the environment variable holding the dashboard's action token
TOKEN_VARIABLE = "BLUEQUE_WEB_TOKEN"


def port_option(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: a whole number from 1 to 65535")
    return int(text)


def add_parsers(commands: Any) -> None:
    web = commands.add_parser(
        "web", help="serve the web dashboard (needs the web extra)",
        description="Serve the web dashboard: queues, running tasks, errors, workers, and "
        "actions (each confirmed, each asking for the token once per session). Bound to "
        "localhost unless --host says otherwise.")
    web.add_argument("--encryption-keys-file", metavar="FILE", default=argparse.SUPPRESS,
                     help="show encrypted tasks opened with these keys (else (encrypted))")
    web.add_argument("--host", default="127.0.0.1",
                     help="the address to listen on (default: 127.0.0.1)")
    web.add_argument("--port", type=port_option, default=8080, help="default: 8080")
    web.add_argument("--read-only", action="store_true", help="offer no action at all")
    web.add_argument("--token", default=None,
                     help=f"the token actions ask for (default: ${TOKEN_VARIABLE}; "
                     "without one, the dashboard offers no action). Prefer the variable: "
                     "a command line is seen by other users of the host")
    metrics = commands.add_parser(
        "metrics", help="serve Prometheus metrics on /metrics (needs the metrics extra)",
        description="Serve the Prometheus metrics of every queue on /metrics.")
    metrics.add_argument("--host", default="127.0.0.1",
                         help="the address to listen on (default: 127.0.0.1; 0.0.0.0 for "
                         "a Prometheus on another host)")
    metrics.add_argument("--port", type=port_option, default=9808, help="default: 9808")


def hide_token_from_ps(argv: list[str]) -> None:
    """Mask the value of `--token` in this process's arguments (as `ps` shows them)."""
    masked = []
    hide_next = False
    for argument in argv:
        if hide_next:
            masked.append("****")
        elif argument.startswith("--token="):
            masked.append("--token=****")
        else:
            masked.append(argument)
        hide_next = argument == "--token"
    if masked != argv:
        argv[:] = masked
        import setproctitle

        setproctitle.setproctitle(" ".join(masked))


def needing(extra: str, module: str) -> None:
    """`ConfigurationError` naming the extra to install when `module` is missing."""
    try:
        __import__(module)
    except ImportError:
        raise ConfigurationError(f"this command needs the {extra} extra: pip install "
                                 f"'limpyd-blueque[{extra}]'") from None


def web_command(options: argparse.Namespace) -> int:
    """Serve the dashboard; its ready line is printed once its socket listens (a port in
    use is one error line, exit code 2, and no ready line)."""
    needing("web", "flask")
    needing("web", "waitress")
    from waitress.server import create_server

    from ..operations.web import WebSettings, create_app

    token = options.token or os.environ.get(TOKEN_VARIABLE) or None
    settings = WebSettings(token=token, read_only=options.read_only)
    try:
        # as `operations.web.serve` does, in two steps: listen, say so, then serve
        server = create_server(create_app(settings, options.host), host=options.host,
                               port=options.port, threads=8, ident="blueque-web",
                               clear_untrusted_proxy_headers=True)
    except OSError as error:
        raise ConfigurationError(f"cannot listen on {options.host}:{options.port}: "
                                 f"{error.strerror or error}") from None
    print(f"blueque web: http://{display_host(options.host)}:{options.port}/ "
          f"({settings.mode})", file=sys.stderr, flush=True)
    server.run()
    return 0


def display_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def metrics_command(options: argparse.Namespace) -> int:
    needing("metrics", "prometheus_client")
    from prometheus_client import start_http_server

    from ..operations.metrics import registry

    try:
        start_http_server(options.port, addr=options.host, registry=registry())
    except OSError as error:
        raise ConfigurationError(f"cannot listen on {options.host}:{options.port}: "
                                 f"{error.strerror or error}") from None
    print(f"blueque metrics: http://{display_host(options.host)}:{options.port}/metrics",
          file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)


HANDLERS: dict[str, Handler] = {"web": web_command, "metrics": metrics_command}
