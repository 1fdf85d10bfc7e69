"""Finding a task of one queue by what an operator knows of it: its id, its identifier,
or a value of its parameters, at a cost bounded whatever the size of the queue.

A search reads, in this order:

1. the task whose id is the text (exactly), if it is a task of the queue;
2. the waiting task the queue's identifiers hash maps the text to (exactly);
3. at most `LOOK_LIMIT` entries of each structure filing the queue's tasks (its pending
   line, prioritized and scheduled sets, lease set, and each list of finished tasks): the
   next to run first, the newest finished first. Each task read is a match when its
   identifier is the text, when the text is part of its parameters (case not minded),
   or, for a text `key=value`, when its parameters are a JSON object whose `key` (dots
   for a nested key: `image.size=2`) holds `value` (a string as it is, any other value
   as JSON: `42`, `true`, `null`).

Nothing past those entries is read: `SearchResult.looked_at` says how many tasks were,
and `SearchResult.beyond` which structures held more (a match among their older
entries is not found). A web page says both. Nothing here writes to Redis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConfigurationError
from ..models import Job
from ..protocol.keys import KeySpace, check_queue_name
from ..protocol.liveness import server_time
from ..protocol.statuses import Status
from .overview import (
    Result,
    Skipped,
    TaskRow,
    failed,
    pipelined,
    read_rows,
    task_fields,
    text,
    whole,
)

#: the most entries of each structure of the queue a search reads
LOOK_LIMIT = 1000
#: the most matches a search returns (it counts every match among what it read)
MATCH_LIMIT = 100
#: the longest text a search takes
QUERY_MAX = 500
#: how many tasks' parameters are read in one round trip
CHUNK = 500
#: the task fields a search reads of each task it looks at
SEARCH_FIELDS = ("parameters", "identifier", "queue")
#: how a task matched, in the order the matches are given
HOW = ("id", "identifier", "parameters")


@dataclass(frozen=True)
class Match(Result):
    """A task found, and how: `id`, `identifier` or `parameters`."""

    TIMES = ()

    how: str
    task: TaskRow

    def as_dict(self) -> dict[str, Any]:
        return {"how": self.how, "task": self.task.as_dict()}


@dataclass(frozen=True)
class SearchResult(Result):
    """What a search of `queue` for `query` found, read at `at` (Redis's clock).

    `matches` holds at most `MATCH_LIMIT` tasks (`matched` counts them all); `looked_at`
    is how many tasks were read, at most `limit` entries of each structure; `beyond`
    names the structures that held more entries than that (their older entries were not
    read: a task there is not found)."""

    at: float
    queue: str
    query: str
    limit: int
    matches: list[Match]
    matched: int
    looked_at: int
    beyond: list[str]
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every task the queue files was looked at."""
        return not self.beyond


def check_query(query: object) -> str:
    """The text of a search, stripped; `ConfigurationError` naming what is wrong with it."""
    if not isinstance(query, str):
        raise ConfigurationError(f"a search is a text, not {type(query).__name__}")
    stripped = query.strip()
    if not stripped:
        raise ConfigurationError("empty search: give a task id, an identifier or a value of "
                                 "the parameters")
    if len(stripped) > QUERY_MAX:
        raise ConfigurationError(f"search too long: {len(stripped)} characters, at most "
                                 f"{QUERY_MAX}")
    return stripped


def check_look_limit(limit: int) -> int:
    """`limit` if a search may read that many entries of each structure, else
    `ConfigurationError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= 10 * LOOK_LIMIT:
        raise ConfigurationError(f"a search looks at 1 to {10 * LOOK_LIMIT} entries of each "
                                 f"structure, not {limit!r}")
    return limit


def _listed(structures: list[tuple[str, str, bool]], reads: list[Any], limit: int,
            skipped: list[Skipped]) -> tuple[list[str], list[str]]:
    """From the size and first entries of each structure (`reads`, two per structure):
    the task ids to look at, each once, in the order of the structures, and the keys of
    the structures that hold more than `limit`."""
    ids: dict[str, None] = {}
    beyond = []
    for index, (key, _, pending) in enumerate(structures):
        size, entries = reads[2 * index], reads[2 * index + 1]
        if failed(skipped, key, size) or failed(skipped, key, entries):
            continue
        if (whole(size) or 0) > limit:
            beyond.append(key)
        listed = [entry for entry in entries if isinstance(entry, str)]
        ids.update(dict.fromkeys(listed[::-1] if pending else listed))
    return list(ids), beyond


def _matched(client: Any, keys: KeySpace, looked: list[str], query: str, name: str,
             skipped: list[Skipped]) -> list[tuple[str, str]]:
    """`(task id, how)` of the tasks of `looked` that `query` matches, their fields read
    `CHUNK` tasks per round trip."""
    found = []
    for start in range(0, len(looked), CHUNK):
        chunk = looked[start:start + CHUNK]
        for task_id, reply in zip(chunk, task_fields(client, keys, chunk, SEARCH_FIELDS)):
            if failed(skipped, keys.task(task_id), reply):
                continue
            how = matching(query, dict(zip(SEARCH_FIELDS, reply)), name)
            if how:
                found.append((task_id, how))
    return found


def search_tasks(queue: str, query: str, limit: int = LOOK_LIMIT,
                 job_model: type[Job] = Job) -> SearchResult:
    """The tasks of `queue` that `query` finds (see the module's docstring), at most
    `limit` entries of each of its structures read. About five round trips, and one more
    per `CHUNK` tasks looked at."""
    name, query, limit = check_queue_name(queue), check_query(query), check_look_limit(limit)
    client, keys = job_model.client(), job_model.keys()
    now = server_time(client)
    structures = _structures(keys, name)
    candidates = list(dict.fromkeys([query, keys.task_id_in(name, query)]))

    def first_reads(pipe: Any) -> None:
        for task_id in candidates:
            pipe.hget(keys.task(task_id), "queue")
        pipe.hget(keys.identifiers(name), query)
        for key, kind, pending in structures:
            if kind == "zset":
                pipe.zcard(key)
                pipe.zrange(key, 0, limit - 1)
            else:  # a pending list is read from its right end, the next to run
                pipe.llen(key)
                pipe.lrange(key, *((-limit, -1) if pending else (0, limit - 1)))

    replies = pipelined(client, first_reads)
    skipped: list[Skipped] = []
    found: dict[str, str] = {}  # task id -> how, in order of finding
    for task_id, reply in zip(candidates, replies):
        if not failed(skipped, keys.task(task_id), reply) and reply == name:
            found.setdefault(task_id, "id")
    identified = replies[len(candidates)]
    if not failed(skipped, keys.identifiers(name), identified) and isinstance(identified, str):
        found.setdefault(identified, "identifier")
    looked, beyond = _listed(structures, replies[len(candidates) + 1:], limit, skipped)
    for task_id, how in _matched(client, keys, looked, query, name, skipped):
        found.setdefault(task_id, how)
    ordered = sorted(found.items(), key=lambda item: HOW.index(item[1]))
    shown = dict(ordered[:MATCH_LIMIT])
    rows = {row.id: row for row in read_rows(client, keys, list(shown), now, skipped)}
    matches = [Match(how, rows[task_id]) for task_id, how in shown.items() if task_id in rows]
    return SearchResult(  # a task gone meanwhile (a stale identifier) is not counted
        at=now, queue=name, query=query, limit=limit, matches=matches,
        matched=len(found) - (len(shown) - len(matches)), looked_at=len(looked),
        beyond=beyond, skipped=skipped)


def _structures(keys: KeySpace, queue: str) -> list[tuple[str, str, bool]]:
    """`(key, kind, pending)` of each structure a search reads: every one filing the
    queue's tasks but the started set (its tasks are in the lease set too)."""
    return [(key, kind, kind == "list" and statuses == (Status.PENDING,))
            for key, kind, statuses in keys.status_structures(queue) if kind != "started"]


def matching(query: str, values: dict[str, Any], queue: str) -> str | None:
    """How a task whose `values` (`SEARCH_FIELDS`) were read matches `query`, if it does:
    `identifier` or `parameters` (None: it does not, or it is no longer of `queue`)."""
    if text(values.get("queue")) != queue:
        return None
    if text(values.get("identifier")) == query:
        return "identifier"
    parameters = text(values.get("parameters"))
    if parameters is None:
        return None
    if query.casefold() in parameters.casefold():
        return "parameters"
    return "parameters" if _holds(parameters, query) else None


def _holds(parameters: str, query: str) -> bool:
    """True when `query` is `key=value` and `parameters` a JSON object whose `key` (dots
    between the keys of nested objects) holds `value`."""
    path, sign, wanted = query.partition("=")
    if not sign or not path.strip():
        return False
    try:
        value: Any = json.loads(parameters)
    except ValueError:
        return False
    for part in path.strip().split("."):
        if not isinstance(value, dict) or part not in value:
            return False
        value = value[part]
    wanted = wanted.strip()
    return (value == wanted) if isinstance(value, str) else json.dumps(value) == wanted
