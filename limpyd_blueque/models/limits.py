"""Reading a queue's limits with their live counts (see `protocol.limits`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import redis

from ..connection.errors import reaching
from ..protocol.keys import KeySpace
from ..protocol.limits import DEFAULT_GROUP, Limit, parsed_limit
from ..protocol.statuses import Status


def read_limits(client: redis.Redis, keys: KeySpace, queue: str) -> dict[str | None, Limit]:
    """Every limit of `queue` by group (None: the queue as a whole; `"*"`: the default of
    its groups), each with its running and waiting tasks: a group's own; the queue's (all
    its tasks held by this library's workers, all its pending tasks); for `"*"`, those of
    the groups with tasks waiting or running that have no limit of their own. A stored
    value that is no limit is left out, as the scripts pass it over. Three round trips (the
    groups running are those of the tasks holding a lease)."""
    return read_limits_and_groups(client, keys, queue)[0]


def read_limits_and_groups(client: redis.Redis, keys: KeySpace, queue: str,
                           ) -> tuple[dict[str | None, Limit], list[Limit]]:
    """`read_limits`, and each group that the default (`"*"`) governs, with tasks waiting
    or running: its own `Limit` with the default's settings and its own counts, the
    busiest first (empty when the queue has no default limit)."""
    with reaching(client), client.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.limits(queue))
        pipe.zrange(keys.groups(queue), 0, -1)
        pipe.zrange(keys.groups_held(queue), 0, -1)
        pipe.zrange(keys.leases(queue), 0, -1)
        stored, active, held, running = pipe.execute(raise_on_error=False)
    stored = stored if isinstance(stored, dict) else {}
    running_groups = _groups_of_tasks(client, keys, running if isinstance(running, list)
                                      else [])
    seen = [group for reply in (active, held) if isinstance(reply, list) for group in reply]
    named = [field for field in stored if field not in ("", DEFAULT_GROUP)]
    defaulted = [group for group in dict.fromkeys([*seen, *running_groups])
                 if group not in stored]
    per_group, queue_running, queue_waiting = _counts(client, keys, queue,
                                                      [*named, *defaulted])
    found: dict[str | None, Limit] = {}
    for field, text in stored.items():
        if field == "":
            group, running, waiting = None, queue_running, queue_waiting
        elif field == DEFAULT_GROUP:
            group = DEFAULT_GROUP
            running = sum(per_group[name][0] for name in defaulted)
            waiting = sum(per_group[name][1] for name in defaulted)
        else:
            group, (running, waiting) = field, per_group[field]
        limit = parsed_limit(group, text, running, waiting)
        if limit is not None:
            found[group] = limit
    default = found.get(DEFAULT_GROUP)
    governed = [] if default is None else [
        replace(default, group=name, running=per_group[name][0], waiting=per_group[name][1])
        for name in defaulted if any(per_group[name])]  # (one just emptied keeps its turn)
    return found, busiest_first({limit.group: limit for limit in governed})


def _groups_of_tasks(client: redis.Redis, keys: KeySpace, task_ids: list[str]) -> list[str]:
    """The groups of the tasks `task_ids` (running: their leases), in one round trip; a
    task of no group, or whose hash is of another type, has none."""
    if not task_ids:
        return []
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for task_id in task_ids:
            pipe.hget(keys.task(task_id), "group")
        replies = pipe.execute(raise_on_error=False)
    return [group for group in replies if isinstance(group, str) and group]


def _counts(client: redis.Redis, keys: KeySpace, queue: str, groups: list[str],
            ) -> tuple[dict[str, tuple[int, int]], int, int]:
    """`({group: (running, waiting)}, the queue's running, the queue's waiting)`, in one
    round trip (a key of another type counts none)."""
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for group in groups:
            pipe.scard(keys.group_slots(queue, group))
            pipe.zcard(keys.group_line(queue, group))
        pipe.zcard(keys.leases(queue))
        for key, kind in keys.structures_of(queue, Status.PENDING):
            pipe.llen(key) if kind == "list" else pipe.zcard(key)
        counts = [value if isinstance(value, int) else 0
                  for value in pipe.execute(raise_on_error=False)]
    per_group = {group: (counts[2 * n], counts[2 * n + 1]) for n, group in enumerate(groups)}
    rest = counts[2 * len(groups):]
    return per_group, rest[0], sum(rest[1:])


def held_back(client: redis.Redis, keys: KeySpace, names: list[str], now: float,
              pending: dict[str, int]) -> dict[str, int]:
    """{queue: tasks held back}: those waiting in its groups held back by their limit, or
    all its `pending` tasks while its own limit is reached at `now` (`closed_queues`).
    Two round trips, one fewer when no group is held, one more when a queue has a limit
    of its own (a key of another type counts none)."""
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.zrange(keys.groups_held(name), 0, -1)
        held = [held_groups(reply) for reply in pipe.execute(raise_on_error=False)]
    counts = dict.fromkeys(names, 0)
    if any(held):
        with reaching(client), client.pipeline(transaction=False) as pipe:
            held_lines(pipe, keys, names, held)
            replies = pipe.execute(raise_on_error=False)
        counts = held_counts(names, held, replies)
    return with_closed(counts, closed_queues(client, keys, names, now), pending)


def closed_queues(client: redis.Redis, keys: KeySpace, names: list[str], now: float,
                  ) -> set[str]:
    """The queues of `names` whose own limit (the queue as a whole) is reached at `now`
    (server time): all their tasks wait, held back. One command per queue, then, when
    some have such a limit, one round trip for those. A stored value that is no limit
    (`parsed_limit`), or a key of another type, closes none here (the reserve step passes
    over a queue with a key of another type, and its worker reports it)."""
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hget(keys.limits(name), "")
        texts = pipe.execute(raise_on_error=False)
    limits = [(name, limit) for name, text in zip(names, texts)
              if (limit := parsed_limit(None, text if isinstance(text, str) else None))
              and (limit.max_running is not None or limit.max_starts is not None)]
    if not limits:
        return set()
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for name, limit in limits:
            pipe.zcard(keys.leases(name))
            pipe.zcount(keys.queue_starts(name), now - (limit.per or 0.0), "+inf")
        replies = pipe.execute(raise_on_error=False)
    return {name for (name, limit), running, started
            in zip(limits, replies[::2], replies[1::2])
            if _reached(limit.max_running, running) or _reached(limit.max_starts, started)}


def _reached(most: int | None, count: object) -> bool:
    """Whether a count read (not a count: a key of another type) is at its bound `most`."""
    return most is not None and isinstance(count, int) and count >= most


def with_closed(held: dict[str, int], closed: set[str], pending: dict[str, int],
                ) -> dict[str, int]:
    """{queue: tasks held back}: those of its held groups (`held`), or all its pending
    tasks (`pending`) when its own limit is reached (`closed`, see `closed_queues`)."""
    return {name: pending.get(name, count) if name in closed else count
            for name, count in held.items()}


def held_groups(reply: object) -> list[str]:
    """The groups a `ZRANGE` of a queue's held set (`KeySpace.groups_held`) names; none
    when the read failed (a key of another type)."""
    if not isinstance(reply, list):
        return []
    return [group for group in reply if isinstance(group, str)]


def held_lines(pipe: Any, keys: KeySpace, names: list[str], held: list[list[str]]) -> None:
    """Queue the length of the line of each held group (`held`: those of each queue of
    `names`, as `held_groups` gives them) on a pipeline, for `held_counts`."""
    for name, groups in zip(names, held):
        for group in groups:
            pipe.zcard(keys.group_line(name, group))


def held_counts(names: list[str], held: list[list[str]], replies: list[Any],
                ) -> dict[str, int]:
    """{queue: tasks waiting in its held groups} from the replies of `held_lines` (one
    that is not a count counts none)."""
    counts = iter(replies)
    return {name: sum(count if isinstance(count, int) else 0
                      for count in (next(counts) for _ in groups))
            for name, groups in zip(names, held)}


def busiest_first(limits: dict[str | None, Limit]) -> list[Limit]:
    """The limits of a queue to show: the queue as a whole first, then the busiest groups
    (most running, then most waiting), then by name."""
    return sorted(limits.values(), key=lambda limit: (
        limit.group is not None, -limit.running, -limit.waiting, limit.group or ""))


def shown_limits(found: dict[str | None, Limit], governed: list[Limit], most: int = 20,
                 ) -> tuple[list[tuple[Limit, bool]], int]:
    """The rows of a limits table (`read_limits_and_groups`): each limit, the busiest first
    (see `busiest_first`), the default's row followed by the `most` busiest groups it
    governs (True beside each), and how many more it governs."""
    rows: list[tuple[Limit, bool]] = []
    for limit in busiest_first(found):
        rows.append((limit, False))
        if limit.group == DEFAULT_GROUP:
            rows += [(group, True) for group in governed[:most]]
    return rows, max(len(governed) - most, 0)
