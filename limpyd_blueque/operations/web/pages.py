"""The dashboard's pages, each a view of what `overview`, `inspection`, `search` and
`workflows` read: the queues, the running tasks (live, through `/api/running`), a queue's
tasks by status, one task (with the tasks it waits for and those waiting for it), a
workflow's graph (`graph`), the stored errors, the workers, the throughput charts
(`charts`) and the search of a queue's tasks. Nothing here writes to Redis."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from flask import Blueprint, render_template, request

from ...exceptions import ConfigurationError
from ...models import Queue
from ...models.limits import read_limits_and_groups, shown_limits
from ...protocol.keys import check_queue_name
from ...protocol.statuses import RUNNING, Status
from ...protocol.values import check_task_id
from ..inspection import (
    ErrorQuery,
    error_tracebacks,
    error_type_counts,
    inspect_task,
    parse_bound,
    stored_errors,
)
from ..overview import (
    RUNNING_PAGE,
    STOPPING_STATES,
    TaskRow,
    live_workers,
    queue_names,
    queue_overviews,
    running_rows,
    task_page,
)
from ..search import MATCH_LIMIT, QUERY_MAX, search_tasks
from ..workflows import STATUSES, check_workflow_id, read_workflow, task_links
from .charts import (
    DEFAULT_HOURS,
    FRAME,
    HOURS,
    MAX_QUEUES,
    check_hours,
    kept_hours,
    throughput_charts,
)
from .context import current
from .graph import MAX_LINES, MAX_NODES, draw

blueprint = Blueprint("pages", __name__)
#: the tabs of a queue's page: the held tasks together, then each other status
TABS = (RUNNING_PAGE, *(status.value for status in Status if status not in RUNNING))
#: the most running tasks the running page shows
RUNNING_LIMIT = 500
#: the most errors the errors page lists
ERRORS_LIMIT = 200


# -- filters of the templates ------------------------------------------------------------------
def duration(seconds: object) -> str:
    """Seconds as `2d 3h`, `4h 05m`, `3m 07s` or `12.5s`; '-' when unknown."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) \
            or not math.isfinite(seconds):
        return "-"
    seconds = max(float(seconds), 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def amount(value: object) -> str:
    """A progress count: `120` rather than `120.0`, `2.5` as it is; '-' when unknown."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def moment(epoch: object) -> str:
    """Epoch seconds as `2026-11-23 10:30:00 UTC`; '-' when unknown."""
    if not isinstance(epoch, (int, float)) or isinstance(epoch, bool):
        return "-"
    try:
        return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return "-"


# -- pages ---------------------------------------------------------------------------------------
@blueprint.route("/")
def overview() -> str:
    settings = current()
    figures = queue_overviews(job_model=settings.job_model)
    workers = live_workers(settings.job_model)
    paused = Queue.paused_among([row.queue for row in figures.queues])
    return render_template("overview.html", overview=figures, workers=len(workers.workers),
                           statuses=[status.value for status in Status], paused=paused)


@blueprint.route("/running")
def running() -> str:
    return render_template("running.html", rows=running_data(), limit=RUNNING_LIMIT)


@blueprint.route("/api/running")
def running_api() -> dict[str, Any]:
    """The running tasks as JSON, which the running page polls every second."""
    return {"tasks": running_data(), "actions": current().actions}


def running_data() -> list[dict[str, Any]]:
    settings = current()
    rows = running_rows(queue_names(settings.job_model), RUNNING_LIMIT, settings.job_model)
    return [running_row(row, rows.at) for row in rows.tasks]


def running_row(row: TaskRow, now: float) -> dict[str, Any]:
    """A running task as the running page shows it (and `/api/running` sends it)."""
    progress = row.progress or {}
    fraction = progress.get("fraction")
    return {"id": row.id, "queue": row.queue, "worker": row.node, "attempt": row.attempt,
            "status": row.status,
            "fraction": fraction if isinstance(fraction, (int, float)) else None,
            "done": amount(progress.get("done")) if "done" in progress else None,
            "total": amount(progress.get("total")) if progress.get("total") is not None
            else None,
            "message": progress.get("message"),
            "time_left": duration(progress.get("time_left"))
            if progress.get("time_left") is not None else "-",
            "running_for": duration(now - row.started) if row.started is not None else "-",
            "stalled": row.stalled, "cancel_requested": row.cancel_requested}


@blueprint.route("/queues/<queue>")
def queue(queue: str) -> str:
    settings = current()
    name = check_queue_name(queue)
    status = request.args.get("status", RUNNING_PAGE)
    if status not in TABS:
        raise ConfigurationError(f"unknown status {status!r}: use one of {', '.join(TABS)}")
    number = page_number(request.args.get("page", "1"))
    size = settings.page_size
    tasks = task_page(name, status, (number - 1) * size, size, settings.job_model)
    pages = max(1, -(-tasks.total // size))
    figures = queue_overviews([name], settings.job_model).queues[0]
    return render_template("queue.html", queue=name, status=status, tabs=TABS, page=tasks,
                           number=number, pages=pages, figures=figures,
                           paused=Queue.named(name).is_paused(),
                           limits=shown_limits(*read_limits_and_groups(
                               Queue.client(), Queue.keys(), name)))


def page_number(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= 1_000_000:
        raise ConfigurationError(f"invalid page {text!r}: a whole number from 1")
    return int(text)


@blueprint.route("/tasks/<path:task_id>")
def task(task_id: str) -> str:
    settings = current()
    record = inspect_task(check_task_id(task_id), job_model=settings.job_model,
                          error_model=settings.error_model)
    tracebacks = error_tracebacks([error.pk for error in record.errors], settings.error_model)
    fields = dict(sorted(record.fields.items()))
    return render_template("task.html", task=record, fields=fields, tracebacks=tracebacks,
                           held=record.fields.get("status") in {s.value for s in RUNNING},
                           links=task_links(record.id, record.fields, settings.job_model))


@blueprint.route("/workflows/<path:workflow_id>")
def workflow(workflow_id: str) -> str:
    """A workflow's graph, each node's box linking to its task's page, with its nodes
    counted per status (an unknown id: 404)."""
    view = read_workflow(check_workflow_id(workflow_id), current().job_model)
    return render_template("workflow.html", view=view, drawing=draw(view), statuses=STATUSES,
                           max_nodes=MAX_NODES, max_lines=MAX_LINES)


@blueprint.route("/errors")
def errors() -> str:
    settings = current()
    given = {name: request.args.get(name, "").strip() for name in
             ("since", "until", "type", "code", "queue", "job")}
    query = ErrorQuery(
        queue=check_queue_name(given["queue"]) if given["queue"] else None,
        type=given["type"] or None, code=given["code"] or None,
        job=check_task_id(given["job"]) if given["job"] else None,
        since=parse_bound(given["since"]) if given["since"] else None,
        until=parse_bound(given["until"]) if given["until"] else None, limit=ERRORS_LIMIT)
    rows = stored_errors(query, settings.error_model)
    counts, counted, capped = error_type_counts(query, error_model=settings.error_model)
    return render_template("errors.html", rows=rows, given=given, counts=counts,
                           counted=counted, capped=capped, limit=ERRORS_LIMIT)


#: the states a worker says it is in once it has seen each order
ORDER_SEEN = {"quiet": ("quiet", *STOPPING_STATES), "stop": STOPPING_STATES}


@blueprint.route("/workers")
def workers() -> str:
    """The live workers, each with the order it was given and has not yet said it follows
    (`told`), and the actions its state leaves."""
    found = live_workers(current().job_model)
    orders = Queue.worker_orders()
    told = {row.id: orders[row.id] for row in found.workers
            if row.id in orders and row.state not in ORDER_SEEN[orders[row.id]]}
    return render_template("workers.html", workers=found, told=told, orders=orders,
                           seen=ORDER_SEEN)


@blueprint.route("/search")
def search() -> str:
    """`/search?queue=<queue>&q=<text>`: a queue's tasks found by id, identifier or a value
    of their parameters (see `operations.search`); without both, the form alone."""
    settings = current()
    queue = request.args.get("queue", "").strip()
    query = request.args.get("q", "").strip()
    name = check_queue_name(queue) if queue else None
    result = search_tasks(name, query, settings.search_limit, settings.job_model) \
        if name and query else None
    return render_template("search.html", queue=name or "", query=query, result=result,
                           queues=queue_names(settings.job_model),
                           look_limit=settings.search_limit,
                           match_limit=MATCH_LIMIT, query_max=QUERY_MAX)


@blueprint.route("/chart")
def chart() -> str:
    """`/chart?hours=<hours>&queue=<queue>`: the tasks processed, failed and canceled
    per minute, a chart per queue (default: every queue, at most `MAX_QUEUES`)."""
    settings = current()
    hours = check_hours(request.args.get("hours", str(DEFAULT_HOURS)).strip())
    queue = request.args.get("queue", "").strip()
    names = [check_queue_name(queue)] if queue else queue_names(settings.job_model)
    at, charts, skipped = throughput_charts(names[:MAX_QUEUES], hours, settings.job_model)
    return render_template("chart.html", at=at, charts=charts, skipped=skipped, hours=hours,
                           choices=HOURS, queue=queue, left_out=max(len(names) - MAX_QUEUES, 0),
                           kept=kept_hours(), frame=FRAME)
