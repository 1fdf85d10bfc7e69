"""What every part of the dashboard shares: its settings, found through the app."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from ...models import Error, Job
from ..search import LOOK_LIMIT


@dataclass(frozen=True)
class WebSettings:
    """How a dashboard runs: its action `token` (None: actions are off), `read_only`
    (actions off whatever the token), the models it reads, rows per page, and how many
    tasks of each list of a queue a search looks at (`search.LOOK_LIMIT`)."""

    token: str | None = None
    read_only: bool = False
    job_model: type[Job] = Job
    error_model: type[Error] = Error
    page_size: int = 50
    search_limit: int = LOOK_LIMIT

    @property
    def actions(self) -> bool:
        """True when the dashboard offers actions (each asks for the token once)."""
        return bool(self.token) and not self.read_only

    @property
    def mode(self) -> str:
        """What a page footer says of the actions."""
        if self.read_only:
            return "read-only: no action is offered"
        if not self.token:
            return "read-only: actions need a token (--token or BLUEQUE_WEB_TOKEN)"
        return "actions ask for the token once per session"


def current() -> WebSettings:
    """The settings of the dashboard serving this request."""
    settings: WebSettings = current_app.extensions["blueque"]
    return settings
