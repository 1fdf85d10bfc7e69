"""The dashboard's actions: requeue, cancel and delete a task; requeue a queue's failed
tasks, kick its buried tasks, purge a status, pause and resume a queue; tell a worker
to quiet (take no new task) or to stop. Each is asked for on a confirmation page
(`GET /confirm/<action>`), whose buttons say what they do ("Cancel task", "Keep it"),
and done by its form (`POST /act/<action>`), which carries:

- the dashboard's token, the first time in a session (compared in constant time; none
  given is a 401, a wrong one a 403, and nothing is done); the session then remembers it
  until the dashboard restarts;
- a CSRF token bound to the session (a form posted from another site has none: 403).

With `--read-only`, or without a token, there is no action: both routes answer 403.
The steps are those of the `blueque` command (`operations.actions`, `Queue.kick`,
`Queue.pause`, `Queue.resume`, `Queue.tell_worker`).
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
from ...protocol.keys import check_listener_id, check_queue_name
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


#: what an answer to a post without the token says of how to give it (a 401 carries one)
AUTHENTICATE = 'Form realm="blueque dashboard", charset="UTF-8"'


@dataclass(frozen=True)
class Action:
    """An action: what its confirmation page asks (`{task}`, `{queue}`, `{status}`,
    `{count}` and `{worker}` filled in from its fields), the fields it takes, what it
    does (a message, and whether it went as asked), the labels of the page's two
    buttons (the one that acts, the one that leaves things as they are) and what the
    page says of its effect."""

    title: str
    fields: tuple[str, ...]
    run: Callable[[dict[str, Any]], tuple[str, bool]]
    button: str
    keep: str = "Keep it"
    effect: str = ""
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


def paused(values: dict[str, Any]) -> tuple[str, bool]:
    if not Queue.named(values["queue"]).pause():
        return f"queue {values['queue']} was paused already", True
    return (f"queue {values['queue']} paused: workers take none of its tasks within a "
            "second; the running ones go on"), True


def resumed(values: dict[str, Any]) -> tuple[str, bool]:
    if not Queue.named(values["queue"]).resume():
        return f"queue {values['queue']} was not paused", True
    return f"queue {values['queue']} resumed: workers take its tasks again", True


def told(order: str, said: str) -> Callable[[dict[str, Any]], tuple[str, bool]]:
    def tell(values: dict[str, Any]) -> tuple[str, bool]:
        if not Queue.tell_worker(values["worker"], order):
            return f"no live worker {values['worker']}: nothing was told", False
        return f"worker {values['worker']} told to {said}", True
    return tell


ACTIONS = {
    "requeue": Action("Requeue task {task}", ("task",), lambda values: outcome_message(
        acting(values["task"], requeue_one), ("requeued",)), "Requeue task",
        effect="It goes back in line, for a new attempt."),
    "cancel": Action("Cancel task {task}", ("task",), lambda values: outcome_message(
        acting(values["task"], cancel_one), ("canceled", "cancel_requested")), "Cancel task",
        effect="A waiting task is canceled at once; a running one is stopped by its worker.",
        danger=True),
    "delete": Action("Delete task {task}", ("task",), lambda values: outcome_message(
        acting(values["task"], delete_one), ("deleted",)), "Delete task",
        effect="Its record and its stored errors are deleted for good.", danger=True),
    "requeue-failed": Action("Requeue every failed task of queue {queue}", ("queue",),
                             requeued_failed, "Requeue failed tasks", "Keep them",
                             effect="Each goes back in line, oldest failure first."),
    "kick": Action("Kick up to {count} buried task(s) of queue {queue} back in line",
                   ("queue", "count"), kicked, "Kick buried tasks", "Keep them",
                   effect="The oldest buried first."),
    "purge": Action("Delete every {status} task of queue {queue}", ("queue", "status"),
                    purged, "Delete tasks", "Keep them",
                    effect="Their records are deleted for good.", danger=True),
    "pause": Action("Pause queue {queue}", ("queue",), paused, "Pause queue",
                    "Keep it running", effect="Workers take none of its tasks within a "
                    "second; the tasks already running go on, and enqueueing still works."),
    "resume": Action("Resume queue {queue}", ("queue",), resumed, "Resume queue",
                     "Keep it paused", effect="Workers take its tasks again."),
    "quiet": Action("Quiet worker {worker}", ("worker",), told("quiet", "take no new task"),
                    "Quiet worker", "Keep it working",
                    effect="It takes no new task; the tasks it runs go on."),
    "stop": Action("Stop worker {worker}", ("worker",), told("stop", "stop"), "Stop worker",
                   "Keep it running", effect="It stops as on SIGTERM: it takes no new task, "
                   "and its running tasks end as its on_terminate setting says.", danger=True),
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
        elif name == "worker":
            values[name] = check_listener_id(text)
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
    """Do an action: the token first (none given: 401; a wrong one: 403), then the form's
    CSRF token (403), then its fields (400 naming a wrong one), then the action."""
    action = found(name)
    back = next_page(request.form.get("next", "/"))
    if not session.get("authed"):
        token = request.form.get("token", "")
        if not token:
            return refused(name, action, back, 401,
                           "no token given: type the dashboard's token to act")
        if not hmac.compare_digest(token.encode(), str(current().token).encode()):
            return refused(name, action, back, 403, "wrong token")
    sent = request.form.get("csrf", "")
    if not sent or not hmac.compare_digest(sent.encode(), str(session.get("csrf", "")).encode()):
        return refused(name, action, back, 403, "the form expired or came from another "
                       "site: reload the page and confirm again")
    values = action_values(action, request.form)
    if not session.get("authed"):
        session["authed"] = True
        session["csrf"] = secrets.token_urlsafe(32)  # a new one once signed in
    message, fine = action.run(values)
    flash(message, "done" if fine else "problem")
    return redirect(back)


def refused(name: str, action: Action, back: str, status: int, error: str) -> Any:
    """The confirmation page again (or, when the form's fields are wrong too, a page
    saying only `error`), saying why the action was not done, never what token was
    given, with `status`; a 401 says how to authenticate (`AUTHENTICATE`)."""
    headers = {"WWW-Authenticate": AUTHENTICATE} if status == 401 else {}
    try:
        values = action_values(action, request.form)
    except ConfigurationError:
        return render_template("problem.html", status=status, message=error), status, headers
    page = render_template("confirm.html", name=name, action=action, values=values,
                           title=action.title.format(**values),
                           authed=bool(session.get("authed")), error=error, next=back)
    return page, status, headers
