"""The dashboard's actions: requeue, cancel and delete a task, requeue a queue's failed
tasks, kick its buried tasks, purge a status. Each is asked for on a confirmation page
(`GET /confirm/<action>`) and done by its form (`POST /act/<action>`), which carries:

- a CSRF token bound to the session (a form posted from another site has none);
- the dashboard's token, the first time in a session (compared in constant time); the
  session then remembers it until the dashboard restarts.

With `--read-only`, or without a token, there is no action: both routes answer 403.
The steps are those of the `blueque` command (`operations.actions`, `Queue.kick`).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, abort, flash, redirect, render_template, request, session

from ...exceptions import ConfigurationError
from ...models import Queue
from ...protocol.keys import check_queue_name
from ...protocol.statuses import Status
from ...protocol.values import check_task_id
from ..actions import (
    PURGEABLE,
    ActionResult,
    acting,
    cancel_one,
    delete_one,
    purge,
    requeue_failed,
    requeue_one,
)
from .context import current

blueprint = Blueprint("acts", __name__)
#: the most buried tasks one kick takes back
MAX_KICK = 100_000


@dataclass(frozen=True)
class Action:
    """An action: what its confirmation page says (`{task}`, `{queue}`, `{status}` and
    `{count}` filled in from its fields), the fields it takes, and what it does (a
    message, and whether it went as asked)."""

    title: str
    fields: tuple[str, ...]
    run: Callable[[dict[str, Any]], tuple[str, bool]]
    danger: bool = False


def outcome_message(outcome: ActionResult, verbs: tuple[str, ...]) -> tuple[str, bool]:
    detail = f": {outcome.detail}" if outcome.detail else ""
    return f"task {outcome.id}: {outcome.outcome.replace('_', ' ')}{detail}", \
        outcome.outcome in verbs


def requeued_failed(values: dict[str, Any]) -> tuple[str, bool]:
    done, left = requeue_failed(values["queue"])
    message = f"requeued {done} failed task(s) of queue {values['queue']}"
    if left:
        message += f"; {len(left)} not requeued, the first ({left[0].id}): {left[0].detail}"
    return message, not left


def purged(values: dict[str, Any]) -> tuple[str, bool]:
    deleted, passed = purge(values["queue"], Status(values["status"]))
    return (f"deleted {deleted} {values['status']} task(s) of queue {values['queue']}"
            + (f"; {passed} entries passed over" if passed else "")), True


def kicked(values: dict[str, Any]) -> tuple[str, bool]:
    count = Queue.named(values["queue"]).kick(values["count"])
    return f"kicked {count} buried task(s) of queue {values['queue']} back in line", True


ACTIONS = {
    "requeue": Action("Requeue task {task}", ("task",), lambda values: outcome_message(
        acting(values["task"], requeue_one), ("requeued",))),
    "cancel": Action("Cancel task {task}", ("task",), lambda values: outcome_message(
        acting(values["task"], cancel_one), ("canceled", "cancel_requested")), danger=True),
    "delete": Action("Delete task {task}", ("task",), lambda values: outcome_message(
        acting(values["task"], delete_one), ("deleted",)), danger=True),
    "requeue-failed": Action("Requeue every failed task of queue {queue}", ("queue",),
                             requeued_failed),
    "kick": Action("Kick up to {count} buried task(s) of queue {queue} back in line",
                   ("queue", "count"), kicked),
    "purge": Action("Delete every {status} task of queue {queue}", ("queue", "status"),
                    purged, danger=True),
}


def action_values(action: Action, given: Any) -> dict[str, Any]:
    """The checked fields of `action` from a request's `given` values;
    `ConfigurationError` naming the first wrong one."""
    values: dict[str, Any] = {}
    for name in action.fields:
        text = str(given.get(name, "")).strip()
        if name == "task":
            values[name] = check_task_id(text)
        elif name == "queue":
            values[name] = check_queue_name(text)
        elif name == "status":
            if text not in PURGEABLE:
                raise ConfigurationError(f"cannot purge status {text!r}: use one of "
                                         f"{', '.join(PURGEABLE)}")
            values[name] = text
        elif not text.isdigit() or not 0 < int(text) <= MAX_KICK:
            raise ConfigurationError(f"invalid count {text!r}: a whole number from 1 to "
                                     f"{MAX_KICK}")
        else:
            values[name] = int(text)
    return values


def csrf_token() -> str:
    """This session's CSRF token, made on first use."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return str(session["csrf"])


def found(name: str) -> Action:
    if not current().actions:
        abort(403)
    if name not in ACTIONS:
        abort(404)
    return ACTIONS[name]


def next_page(text: str) -> str:
    """A page of this dashboard to go back to: a local path, else the overview."""
    parts = urlsplit(text)
    if text.startswith("/") and not text.startswith("//") and not parts.scheme \
            and not parts.netloc and "\\" not in text:
        return text
    return "/"


@blueprint.route("/confirm/<name>")
def confirm(name: str) -> str:
    action = found(name)
    values = action_values(action, request.args)
    return render_template("confirm.html", name=name, action=action, values=values,
                           title=action.title.format(**values), error=None,
                           next=next_page(request.args.get("next", "/")),
                           authed=bool(session.get("authed")))


@blueprint.route("/act/<name>", methods=["POST"])
def act(name: str) -> Any:
    action = found(name)
    values = action_values(action, request.form)
    sent = request.form.get("csrf", "")
    if not sent or not hmac.compare_digest(sent.encode(), str(session.get("csrf", "")).encode()):
        raise ConfigurationError("the form expired or came from another site: reload the "
                                 "page and confirm again")
    if not session.get("authed"):
        token = request.form.get("token", "")
        if not hmac.compare_digest(token.encode(), str(current().token).encode()):
            return render_template("confirm.html", name=name, action=action, values=values,
                                   title=action.title.format(**values), authed=False,
                                   error="wrong token", next=next_page(
                                       request.form.get("next", "/"))), 403
        session["authed"] = True
        session["csrf"] = secrets.token_urlsafe(32)  # a new one once signed in
    message, fine = action.run(values)
    flash(message, "done" if fine else "problem")
    return redirect(next_page(request.form.get("next", "/")))
