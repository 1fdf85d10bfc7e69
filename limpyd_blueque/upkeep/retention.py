"""Retention: finished tasks and stored errors are deleted once their time runs out.

A task filed as complete, failed, canceled or expired gets an entry in its queue's
retention sorted set (`KeySpace.retention`), scored by when it is to be deleted: its
`updated` time plus its `result_ttl` (complete) or `failure_ttl` (the others), each the
task's own field, else its queue's setting, else the worker's; `-1` keeps it forever (no
entry). The finishing scripts write these entries; `index_finished` writes them for the
tasks other Blueque clients finished (they never do). A stored `Error` is given its entry
in the model's `Error.expiry_key` when it is stored with an `error_ttl` (`Error.add_errors`).

The workers' periodic cleaning calls `clean_finished` and `clean_errors`: each reads only
the entries due, at most `limit` per queue per call, so a clean never scans everything,
and a backlog is worked off chunk by chunk. Redis is shared: an entry whose task is gone,
is not finished any more, or lives in another queue is dropped; a key holding another type
skips its queue (logged), and never stops the cleaning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import ResponseError

from ..exceptions import ProtocolError
from ..protocol.options import (
    DEFAULT_ERROR_TTL,
    DEFAULT_FAILURE_TTL,
    DEFAULT_RESULT_TTL,
    FOREVER,
    resolve_ttl,
)
from ..protocol.statuses import FINISHED, Status, in_order
from ..protocol.values import MAX_COUNT, check_number

if TYPE_CHECKING:
    from redis.client import Pipeline

    from ..models import Error, Job, Queue

logger = logging.getLogger(__name__)

#: a ttl keeping a task or an error forever
KEEP_FOREVER = float(FOREVER)
#: most tasks (per queue) or errors one call of a cleaner deletes
CLEAN_CHUNK = 100
#: how many ids of a finished list `index_finished` reads at once
INDEX_PAGE = 500
#: the finished statuses, in `statuses.ALL` order
FINISHED_STATUSES = in_order(FINISHED)
_FINISHED_VALUES = frozenset(status.value for status in FINISHED)


# -- ttls ---------------------------------------------------------------------------------------
def ttl_field(status: Status | str) -> str:
    """The field, and queue setting, of the retention of a finished `status`."""
    return "result_ttl" if Status(status) is Status.COMPLETE else "failure_ttl"


def error_ttl_for(job: Job, queue_settings: Mapping[str, Any],
                  default: float = DEFAULT_ERROR_TTL) -> float:
    """The `error_ttl` of the errors of `job`: its own field, else its queue's setting
    (`queue_settings`, as `Queue.settings` returns them), else `default`; `-1`: forever.

    The field is read from the job's reservation when it has one, else from Redis (one
    round trip; a task key holding another type counts as unset).
    """
    if job.task is not None:
        own: object = job.known.get("error_ttl")
    else:
        try:
            own = job.client().hget(job.key, "error_ttl")
        except ResponseError:
            own = None
    return resolve_ttl(own, queue_settings.get("error_ttl"), default)


# -- deleting what is due -----------------------------------------------------------------------
def clean_finished(queue_model: type[Queue], queues: Iterable[str], now: float,
                   limit: int = CLEAN_CHUNK) -> int:
    """Delete the finished tasks of `queues` whose retention ran out by `now`; how many.

    At most `limit` per queue per call (the oldest deadlines first), each with the
    delete step (`Scripts.delete`, finished tasks only: hash, list entry, identifier,
    retention entry). One round trip reads every queue's due entries, then one per task.
    A queue whose retention set, or one of whose structures, holds another type is
    skipped (logged). `ConfigurationError` for a `limit` that is not a whole number
    from 1.
    """
    check_number("limit", limit, integer=True, minimum=1, maximum=MAX_COUNT)
    names = list(queues)
    if not names:
        return 0
    keys = queue_model.keys()
    with queue_model.client().pipeline(transaction=False) as pipe:
        for name in names:
            pipe.zrangebyscore(keys.retention(name), "-inf", now, start=0, num=limit)
        due = pipe.execute(raise_on_error=False)
    deleted = 0
    for name, task_ids in zip(names, due):
        if isinstance(task_ids, Exception):
            logger.warning("[%s] retention not applied: %s", name, task_ids)
            continue
        deleted += _delete_due(queue_model, name, cast("list[str]", task_ids))
    return deleted


def _delete_due(queue_model: type[Queue], queue: str, task_ids: Sequence[str]) -> int:
    """Delete the due tasks of one queue; an entry whose task is not deleted is dropped."""
    scripts, client, keys = queue_model.scripts(), queue_model.client(), queue_model.keys()
    deleted, gone = 0, []
    try:
        for task_id in task_ids:
            try:
                outcome = scripts.delete(queue, task_id, finished_only=True)
            except ProtocolError as error:
                if client.type(keys.task(task_id)) in ("hash", "none"):  # a structure is broken
                    logger.warning("[%s] retention stopped: %s", queue, error)
                    return deleted
                _forget(queue_model, queue, task_id)  # not a task: its key is left alone
                continue
            if outcome.done:
                deleted += 1
            elif outcome.missing:
                # deleted by another cleaner (which took its entry too), or by another
                # client (which did not): its entry goes, with the others, in one command
                gone.append(task_id)
            else:
                _forget(queue_model, queue, task_id)
    finally:
        if gone:
            client.zrem(keys.retention(queue), *gone)
    return deleted


def _forget(queue_model: type[Queue], queue: str, task_id: str) -> None:
    """Drop the retention entry of a task the delete step refused (gone, not finished, or
    of another queue), unless, looked at again under WATCH, it is a finished task of this
    queue: then it was filed again meanwhile, and its entry is its new deadline."""
    keys = queue_model.keys()
    task_key = keys.task(task_id)

    def step(pipe: Pipeline) -> None:
        try:
            status, own = cast("list[str | None]", pipe.hmget(task_key, "status", "queue"))
        except ResponseError:  # a key of another type: not a task
            status = own = None
        pipe.multi()
        if status not in _FINISHED_VALUES or own != queue:
            pipe.zrem(keys.retention(queue), task_id)

    queue_model.client().transaction(step, task_key)


def clean_errors(error_model: type[Error], now: float, limit: int = CLEAN_CHUNK) -> int:
    """Delete at most `limit` stored errors whose `error_ttl` ran out by `now` (the oldest
    deadlines first), with their index entries, collection membership and expiry entry;
    how many existed. Three round trips (see `Error.delete_errors`). An expiry set of
    another type: nothing is deleted (logged). `limit`: as for `clean_finished`."""
    check_number("limit", limit, integer=True, minimum=1, maximum=MAX_COUNT)
    try:
        pks = error_model.client().zrangebyscore(error_model.expiry_key(), "-inf", now,
                                                 start=0, num=limit)
    except ResponseError as error:
        logger.warning("errors not cleaned: %s", error)
        return 0
    return error_model.delete_errors(cast("list[str]", pks))


# -- indexing tasks finished by other clients ---------------------------------------------------
def index_finished(queue_model: type[Queue], queues: Iterable[str], now: float, *,
                   result_ttl: float = DEFAULT_RESULT_TTL,
                   failure_ttl: float = DEFAULT_FAILURE_TTL, page: int = INDEX_PAGE) -> int:
    """Give each finished task of `queues` that has no retention entry its entry; how many.

    For the tasks other Blueque clients finished (the reference package writes no
    retention entry): each task of the complete, failed, canceled and expired lists gets
    the deadline its `updated` time (else `now`) plus its ttl, resolved as the finishing
    scripts resolve it (task field, queue setting, then `result_ttl` or `failure_ttl`);
    none when kept forever. The lists are read `page` ids at a time, so a list of any
    length costs a bounded memory; an entry written meanwhile is never replaced (ZADD NX).
    A task the pages miss as its list changes under them (ids deleted meanwhile shift the
    others) is found by the next run. A list or retention set of another type is skipped.
    """
    check_number("page", page, integer=True, minimum=1, maximum=MAX_COUNT)
    client, keys = queue_model.client(), queue_model.keys()
    defaults = {"result_ttl": result_ttl, "failure_ttl": failure_ttl}
    added = 0
    for name in queues:
        if client.type(keys.retention(name)) not in ("zset", "none"):
            logger.warning("[%s] retention set holds another type: not indexed", name)
            continue
        try:
            settings = cast("dict[str, str]", client.hgetall(keys.queue_settings(name)))
        except ResponseError:
            settings = {}
        for status in FINISHED_STATUSES:
            field = ttl_field(status)
            default = resolve_ttl(settings.get(field), defaults[field])
            added += _index_list(queue_model, name, status, default, now, page)
    return added


def _index_list(queue_model: type[Queue], queue: str, status: Status, default: float,
                now: float, page: int) -> int:
    """`index_finished` for the list of one status of one queue, page by page."""
    client, keys = queue_model.client(), queue_model.keys()
    added, start = 0, 0
    while True:
        try:
            task_ids = cast("list[str]", client.lrange(keys.finished(queue, status), start,
                                                       start + page - 1))
        except ResponseError:  # a list of another type
            return added
        added += _index_page(queue_model, queue, status, task_ids, default, now)
        if len(task_ids) < page:
            return added
        start += page


def _index_page(queue_model: type[Queue], queue: str, status: Status, task_ids: list[str],
                default: float, now: float) -> int:
    """Give their entry to the tasks of one page that are `status` in `queue` and have none:
    one round trip reads them, one writes."""
    client, keys = queue_model.client(), queue_model.keys()
    retention, field = keys.retention(queue), ttl_field(status)
    with client.pipeline(transaction=False) as pipe:
        for task_id in task_ids:
            pipe.hmget(keys.task(task_id), "status", "queue", "updated", field)
            pipe.zscore(retention, task_id)
        replies = pipe.execute(raise_on_error=False)
    deadlines: dict[str, float] = {}
    for task_id, fields, score in zip(task_ids, replies[::2], replies[1::2]):
        if isinstance(fields, Exception) or isinstance(score, Exception) or score is not None:
            continue
        own_status, own_queue, updated, own_ttl = fields
        ttl = resolve_ttl(own_ttl, default)
        if own_status == status.value and own_queue == queue and ttl != KEEP_FOREVER:
            deadlines[task_id] = _updated(updated, now) + ttl
    if not deadlines:
        return 0
    return int(cast("int", client.zadd(retention, deadlines, nx=True)))


def _updated(text: object, now: float) -> float:
    """A task's `updated` time; `now` when it is not a finite number."""
    try:
        value = float(cast("Any", text))
    except (TypeError, ValueError):
        return now
    return value if math.isfinite(value) else now
