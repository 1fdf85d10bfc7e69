"""Every Redis key limpyd-blueque reads or writes is spelled here, and only here.

Two families of keys share one prefix (``blueque`` by default):

* ``<prefix>_...``: the Blueque wire keys, exactly as the reference package
  ``blueque`` 1.0.1 names them. Other Blueque clients read and write these.
* ``<prefix>:...``: keys this library adds (leases, wake-up channels, limpyd's own
  keys for the ``Error`` model). No Blueque key contains a ``:`` right after the
  prefix, so the two families can never collide.

Nothing in the library parses a key back into data: callers keep ids alongside.
"""

from __future__ import annotations

import json
import re
from functools import cache

from ..exceptions import InvalidName
from .statuses import ALL, FINISHED, RUNNING, Status

DEFAULT_PREFIX = "blueque"

# -- which structure files the tasks of each status ----------------------------------------
# A structure is named by the `KeySpace` method giving its key from a queue name, and its
# kind: "list" and "zset" hold task ids; "started" is a set whose members are
# "<listener id> <pid> <task id>" (the id is the last word).

#: The structure holding every task a listener holds (a status of `statuses.RUNNING`),
#: reserved or started alike: the lease sorted set of its queue, scored by lease end. (Each
#: listener's reserved list also holds its own held tasks: see `KeySpace.reserved`.)
HELD_STRUCTURE: tuple[str, str] = ("leases", "zset")

#: Where the tasks of each status are listed, per queue: `(KeySpace method, kind)` of each
#: structure, the first being where the status files a task. Pending tasks of priority 0
#: are in the Blueque pending list (every Blueque worker runs them); pending tasks of
#: another priority in the prioritized sorted set (only this library's workers run them).
#: Reserved tasks are listed through the lease sorted set (`HELD_STRUCTURE`, which also
#: holds the started ones); started tasks through the started set. Collection filtering
#: reads each status here; `KeySpace.status_structures` gives the reverse view (each
#: structure with every status its entries may have).
STATUS_STRUCTURES: dict[Status, tuple[tuple[str, str], ...]] = {
    Status.WAITING: (("waiting", "zset"),),
    Status.SCHEDULED: (("scheduled", "zset"),),
    Status.PENDING: (("pending", "list"), ("prioritized", "zset"), ("utube_waiting", "zset"),
                     ("grouped", "zset")),
    Status.RESERVED: (HELD_STRUCTURE,),
    Status.STARTED: (("started", "started"),),
    Status.COMPLETE: (("complete", "list"),),
    Status.FAILED: (("failed", "list"),),
    Status.CANCELED: (("canceled", "list"),),
    Status.BURIED: (("buried", "list"),),
    Status.EXPIRED: (("expired", "list"),),
}

# Queue names end up inside keys and inside `SCAN` patterns, so they are limited to
# characters that are neither glob syntax, nor whitespace, nor our own `:` separator.
QUEUE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
# A listener id is `<host>_<pid>`; the reference splits it on the last `_`. It is part
# of the started-set members `"<listener> <pid> <task id>"`, so it holds no whitespace.
LISTENER_ID_RE = re.compile(r"^[^\s*?\[\]]{1,255}_[0-9]+$")
PREFIX_RE = re.compile(r"^[A-Za-z0-9.-]{1,50}$")


def check_queue_name(name: object) -> str:
    """Return `name` if it is a valid queue name, else raise `InvalidName`."""
    if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
        raise InvalidName(
            f"invalid queue name {name!r}: use 1 to 200 characters among "
            "letters, digits, '.', '_' and '-'"
        )
    return name


def check_listener_id(listener_id: object) -> str:
    """Return `listener_id` if it has the Blueque form `<host>_<pid>`, else raise."""
    if not isinstance(listener_id, str) or not LISTENER_ID_RE.match(listener_id):
        raise InvalidName(
            f"invalid listener id {listener_id!r}: expected '<host>_<pid>', "
            "the host without whitespace or glob characters"
        )
    return listener_id


class KeySpace:
    """The keys of one Blueque installation, named by its prefix.

    One class, though long: it is the one place that spells a key (one short method per
    structure), so that a key's name, its hash tag and its documentation live together.
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX, cluster: bool = False) -> None:
        if not isinstance(prefix, str) or not PREFIX_RE.match(prefix):
            raise InvalidName(
                f"invalid key prefix {prefix!r}: use 1 to 50 letters, digits, '.' or '-'"
            )
        self.prefix = prefix
        #: the cluster key mode: every key of a queue holds the queue's hash tag (see
        #: `tag`), so that each step touches one slot of a Redis Cluster
        self.cluster = cluster
        self._group_layouts: dict[str, str] = {}  # made once per queue: see group_layout
        self._dependency_layouts: dict[str, str] = {}  # as _group_layouts

    def __repr__(self) -> str:
        return f"KeySpace({self.prefix!r}{', cluster=True' if self.cluster else ''})"

    def tag(self, queue: str) -> str:
        """A queue's part of the keys of its structures: its name, or in the cluster key
        mode `{name}`, a hash tag putting every key of the queue in one slot (queue
        names never hold braces: see `QUEUE_NAME_RE`)."""
        return f"{{{queue}}}" if self.cluster else queue

    def task_id_in(self, queue: str, task_id: str) -> str:
        """The id a task of `queue` is given: `task_id` itself, or in the cluster key mode
        `task_id` after the queue's hash tag (unless it holds it already), so that its
        hash, `task(id)`, is in its queue's slot and is found from the id alone."""
        if not self.cluster or task_id.startswith(self.tag(queue)):
            return task_id
        return self.tag(queue) + task_id

    def queue_structures(self, queue: str, listener_id: str) -> list[tuple[str, str]]:
        """The keys of a queue's own structures that a reserve step by `listener_id` finds
        of their type (see lua/reserve.lua), each with that type."""
        return [(self.pending(queue), "list"), (self.reserved(queue, listener_id), "list"),
                (self.leases(queue), "zset"), (self.started(queue), "set"),
                (self.queue_settings(queue), "hash"), (self.failed(queue), "list"),
                (self.prioritized(queue), "zset"), (self.identifiers(queue), "hash"),
                (self.expiry(queue), "zset"), (self.expired(queue), "list"),
                (self.statistics(queue), "hash"), (self.utubes(queue), "hash"),
                (self.utube_waiting(queue), "zset")]

    def set_aside(self, key: str, stamp: float) -> str:
        """The name a key of another type is moved to, out of the way of its queue:
        `<key>:set_aside:<stamp>` (in the cluster key mode, in its queue's slot still)."""
        return f"{key}:set_aside:{stamp:.6f}"

    # -- Blueque wire keys -------------------------------------------------------------
    def _wire(self, *parts: str) -> str:
        return "_".join((self.prefix, *parts))

    def task(self, task_id: str) -> str:
        """Hash of one task: `blueque_task_<id>`."""
        return self._wire("task", task_id)

    @property
    def task_prefix(self) -> str:
        """What precedes a task id in its key (Lua scripts add the id read from a list)."""
        return self._wire("task", "")

    @property
    def queues(self) -> str:
        """Sorted set of queue names scored by listener count: `blueque_queues`."""
        if self.cluster:  # beside the workers' records, in their slot
            return self._shared("queues")
        return self._wire("queues")

    def queue_of(self, task_id: str) -> str:
        """In the cluster key mode, the queue whose tag a task id carries ('' when none)."""
        if self.cluster and task_id.startswith("{") and "}" in task_id:
            return task_id[1:task_id.index("}")]
        return ""

    def queue_index(self, queue: str) -> str:
        """The index of queues a step on `queue` writes its name to: `queues` itself, or in
        the cluster key mode the queue's own entry, in its slot (`<prefix>:listed:{name}`);
        the cluster-wide `queues` is then written apart, by the producer (see
        `models.producing.enqueue_tasks`)."""
        return self._own("listed", self.tag(queue)) if self.cluster else self.queues

    def pending(self, queue: str) -> str:
        """List of pending task ids, pushed left and popped right."""
        return self._wire("pending_tasks", self.tag(queue))

    def scheduled(self, queue: str) -> str:
        """Sorted set of scheduled task ids scored by their eta."""
        return self._wire("scheduled_tasks", self.tag(queue))

    def complete(self, queue: str) -> str:
        """List of complete task ids, newest first."""
        return self._wire("complete_tasks", self.tag(queue))

    def failed(self, queue: str) -> str:
        """List of failed task ids, newest first."""
        return self._wire("failed_tasks", self.tag(queue))

    def finished(self, queue: str, status: str) -> str:
        """The list of a finished status (`ValueError` for another status)."""
        if Status(status) not in FINISHED:
            raise ValueError(f"{status!r} is not a finished status")
        return self.status_structure(queue, status)[0]

    def started(self, queue: str) -> str:
        """Set of running tasks, members `"<listener id> <pid> <task id>"`."""
        return self._wire("started_tasks", self.tag(queue))

    def listeners(self, queue: str) -> str:
        """Set of the listener ids listening on a queue."""
        return self._wire("listeners", self.tag(queue))

    def reserved(self, queue: str, listener_id: str) -> str:
        """List of the task ids a listener has taken from a queue."""
        return self._wire("reserved_tasks", self.tag(queue), listener_id)

    def reserved_pattern(self, queue: str) -> str:
        """`SCAN` pattern matching every reserved list of a queue."""
        return self._wire("reserved_tasks", self.tag(queue), "*")

    @property
    def task_pattern(self) -> str:
        """`SCAN` pattern matching every task hash."""
        return self._wire("task", "*")

    # -- structures by status (see STATUS_STRUCTURES) -----------------------------------
    def _structure(self, queue: str, structure: tuple[str, str]) -> tuple[str, str]:
        method, kind = structure
        return getattr(self, method)(queue), kind

    def status_structure(self, queue: str, status: Status | str) -> tuple[str, str]:
        """`(key, kind)` of the structure where `status` files the tasks of `queue`.

        Raises `ValueError` for a status outside the protocol.
        """
        return self._structure(queue, STATUS_STRUCTURES[Status(status)][0])

    def structures_of(self, queue: str, status: Status | str) -> list[tuple[str, str]]:
        """`(key, kind)` of every structure listing the tasks of `queue` with `status`."""
        return [self._structure(queue, structure)
                for structure in STATUS_STRUCTURES[Status(status)]]

    def held_structure(self, queue: str) -> tuple[str, str]:
        """`(key, kind)` of the structure holding every held task of `queue`: its lease set."""
        return self._structure(queue, HELD_STRUCTURE)

    def status_structures(self, queue: str) -> list[tuple[str, str, tuple[Status, ...]]]:
        """Each structure of `queue` in `STATUS_STRUCTURES`, once, as `(key, kind, statuses)`.

        `statuses` are the statuses an entry's task may have (in `statuses.ALL` order): the
        one each structure lists, and every held status for `HELD_STRUCTURE`. The
        per-listener reserved lists, which hold held tasks too, are not included (they are
        found with `reserved_pattern`).
        """
        statuses: dict[tuple[str, str], set[Status]] = {}
        for status, structures in STATUS_STRUCTURES.items():
            for structure in structures:
                statuses.setdefault(structure, set()).add(status)
        statuses[HELD_STRUCTURE] |= RUNNING
        return [(*self._structure(queue, structure), tuple(s for s in ALL if s in found))
                for structure, found in statuses.items()]

    # -- keys of this library ----------------------------------------------------------
    def _own(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _shared(self, *parts: str) -> str:
        """A key of no queue (the workers' records): in the cluster key mode, all of them
        in the slot of the prefix's own hash tag."""
        return ":".join((f"{{{self.prefix}}}" if self.cluster else self.prefix, *parts))

    def leases(self, queue: str) -> str:
        """Sorted set of the reserved and started tasks of a queue, scored by lease end.

        A score of `+inf` marks a task held without an expiring lease (taken by a
        client that does not renew leases, such as the reference package).
        """
        return self._own("leases", self.tag(queue))

    def prioritized(self, queue: str) -> str:
        """Sorted set of the pending tasks of a priority other than 0.

        Each score is `-priority * 2**32 + rank`: the lowest score is the highest
        priority, first in line within it (`rank` grows as tasks join the end of their
        priority, and falls for a task put at its front). See `lua/_line.lua`.
        """
        return self._own("prioritized", self.tag(queue))

    def identifiers(self, queue: str) -> str:
        """Hash of the waiting tasks of a queue that have an identifier: identifier -> id."""
        return self._own("identifiers", self.tag(queue))

    def canceled(self, queue: str) -> str:
        """List of canceled task ids, newest first."""
        return self._own("canceled", self.tag(queue))

    def utubes(self, queue: str) -> str:
        """Hash of a queue's busy micro-queues: utube key -> id of the one task of that key
        in line or held (see `lua/_line.lua`)."""
        return self._own("utubes", self.tag(queue))

    def utube_waiting(self, queue: str) -> str:
        """Sorted set of the pending tasks waiting behind the task of their utube key,
        scored by when they joined (each is also in its key's list, `utube`)."""
        return self._own("utube_waiting", self.tag(queue))

    def utube_lists(self, queue: str) -> str:
        """What precedes a utube key in the name of its list (scripts add the key)."""
        return self._own("utube", self.tag(queue), "")

    def utube(self, queue: str, key: str) -> str:
        """List of the pending tasks waiting behind the task of utube `key`, in order
        (pushed left, taken right)."""
        return self.utube_lists(queue) + key

    # -- groups and limits (see lua/_groups.lua) ---------------------------------------
    def grouped(self, queue: str) -> str:
        """Sorted set of every pending task of a queue that has a group, scored as in its
        group's line: where pending tasks of groups are counted and listed."""
        return self._own("grouped", self.tag(queue))

    def group_lines(self, queue: str) -> str:
        """What precedes a group's name in the name of its line (scripts add the name)."""
        return self._own("group", self.tag(queue), "")

    def group_line(self, queue: str, group: str) -> str:
        """Sorted set of the pending tasks of one group of a queue, scored as the
        prioritized set is (`prioritized`): its line."""
        return self.group_lines(queue) + group

    def groups(self, queue: str) -> str:
        """Sorted set of the groups of a queue whose tasks wait and may start, scored by
        their turn (the fair share's virtual time of their next start)."""
        return self._own("groups", self.tag(queue))

    def groups_held(self, queue: str) -> str:
        """Sorted set of the groups of a queue whose tasks wait but whose limit is reached,
        scored by when to look again (earlier: when one of its slots frees, or a limit
        changes)."""
        return self._own("held", self.tag(queue))

    def fair_turns(self, queue: str) -> str:
        """Hash of a queue's fair share: '' -> its virtual time (the turn of the last task
        of a group started); a group's name -> the turn it saved when it left (nothing
        waited in it, or it was held back), taken again when it joins."""
        return self._own("fair", self.tag(queue))

    def limits(self, queue: str) -> str:
        """Hash of a queue's limits: group (`*` the default of its groups, '' the queue as a
        whole) -> `max_running max_starts per weight`, `-` for each unset."""
        return self._own("limits", self.tag(queue))

    def group_slots_prefix(self, queue: str) -> str:
        """What precedes a group's name in the name of its slots set."""
        return self._own("slots", self.tag(queue), "")

    def group_slots(self, queue: str, group: str) -> str:
        """Set of the running tasks (reserved or started, holding a lease) of one group."""
        return self.group_slots_prefix(queue) + group

    def group_starts_prefix(self, queue: str) -> str:
        """What precedes a group's name in the name of its starts set."""
        return self._own("starts", self.tag(queue), "")

    def group_starts(self, queue: str, group: str) -> str:
        """Sorted set of the recent starts of one group (`<id>:<attempt>`), scored by the
        server's time of each: the window of its `max_starts`."""
        return self.group_starts_prefix(queue) + group

    def queue_starts(self, queue: str) -> str:
        """Sorted set of the recent starts of a queue's tasks, for its own `max_starts`."""
        return self._own("queue_starts", self.tag(queue))

    def group_layout(self, queue: str) -> str:
        """The keys and key prefixes of a queue's groups, and its wake-up channel, as the
        scripts read them: one argument, a JSON array (decoded by Redis's C `cjson`, a
        few times cheaper than splitting text in Lua; see `groups_of` in
        lua/_groups.lua). Made once per queue."""
        layout = self._group_layouts.get(queue)
        if layout is None:
            layout = json.dumps(
                [self.grouped(queue), self.groups(queue), self.groups_held(queue),
                 self.fair_turns(queue), self.limits(queue), self.queue_starts(queue),
                 self.group_lines(queue), self.group_slots_prefix(queue),
                 self.group_starts_prefix(queue), self.wake_channel(queue)],
                separators=(",", ":"))
            self._group_layouts[queue] = layout
        return layout

    # -- dependencies and workflows (see models/dependencies.py) -------------------------
    def waiting(self, queue: str) -> str:
        """Sorted set of a queue's tasks `waiting` for other tasks to finish (`after`),
        scored by when each was enqueued: out of every line until released."""
        return self._own("waiting", self.tag(queue))

    def after_sets(self, queue: str) -> str:
        """What precedes a task id in the name of its `after` set (scripts add the id)."""
        return self._own("after", self.tag(queue), "")

    def after(self, queue: str, task_id: str) -> str:
        """Set of the ids a waiting task of `queue` still waits for (its unfinished
        parents); gone once released."""
        return self.after_sets(queue) + task_id

    def children_sets(self, queue: str) -> str:
        """What precedes a task id in the name of its children set."""
        return self._own("children", self.tag(queue), "")

    def children(self, queue: str, task_id: str) -> str:
        """Set of the tasks waiting for a task of `queue`, members `<queue> <task id>` (a
        child may be in another queue)."""
        return self.children_sets(queue) + task_id

    def ended(self, queue: str) -> str:
        """List of the finished tasks of a queue whose followers (the tasks waiting for
        them, their workflow) were not told yet; a task's `follow` field names it."""
        return self._own("ended", self.tag(queue))

    def dependency_layout(self, queue: str) -> str:
        """The keys and key prefixes of a queue's dependencies as the scripts read them:
        one argument, a JSON array (waiting set, after-set prefix, ended list, children-set
        prefix). Made once per queue."""
        layout = self._dependency_layouts.get(queue)
        if layout is None:
            layout = json.dumps([self.waiting(queue), self.after_sets(queue),
                                 self.ended(queue), self.children_sets(queue)],
                                separators=(",", ":"))
            self._dependency_layouts[queue] = layout
        return layout

    def _workflow(self, workflow_id: str, *parts: str) -> str:
        tag = f"{{{workflow_id}}}" if self.cluster else workflow_id
        return self._own("workflow", tag, *parts)

    def workflow(self, workflow_id: str) -> str:
        """Hash of a workflow: `name`, `created`, `state` (`submitting`, `submitted`,
        `canceled`), `done_at` once none of its nodes can run any more (in the cluster key
        mode, in the slot of the workflow's own hash tag)."""
        return self._workflow(workflow_id)

    def workflow_nodes(self, workflow_id: str) -> str:
        """Set of the task ids of a workflow's nodes."""
        return self._workflow(workflow_id, "nodes")

    def workflow_finished(self, workflow_id: str) -> str:
        """Set of the task ids of a workflow's nodes that finished."""
        return self._workflow(workflow_id, "finished")

    def buried(self, queue: str) -> str:
        """List of buried task ids, newest first (`Queue.kick` takes the oldest first)."""
        return self._own("buried", self.tag(queue))

    def expired(self, queue: str) -> str:
        """List of expired task ids, newest first."""
        return self._own("expired", self.tag(queue))

    def expiry(self, queue: str) -> str:
        """Sorted set of the waiting tasks that have a ttl, scored by when they expire."""
        return self._own("expiry", self.tag(queue))

    def retention(self, queue: str) -> str:
        """Sorted set of the finished tasks of a queue (complete, failed, canceled, expired),
        scored by when each is deleted (its `result_ttl` or `failure_ttl`); a task kept
        forever has no entry."""
        return self._own("retention", self.tag(queue))

    def stalled(self, queue: str) -> str:
        """Sorted set of the running tasks of a queue flagged stalled (their progress did
        not move for their `stall_timeout`), scored by when each was flagged."""
        return self._own("stalled", self.tag(queue))

    def canceling(self, queue: str) -> str:
        """Set of the running tasks of a queue whose cancel was asked and not yet applied:
        their holders read it at each beat (one read per queue, however many tasks run)."""
        return self._own("canceling", self.tag(queue))

    def throughput(self, queue: str, minute: int) -> str:
        """Hash of the tasks of a queue finished in one minute (`minute`: Unix time // 60):
        `complete`, `failed`, `canceled`; kept about a day (`statistics.THROUGHPUT_TTL`)."""
        return self._own("stats", self.tag(queue), "m", str(minute))

    def paused(self, queue: str) -> str:
        """String holding when a queue was paused (Unix time): while it exists, this
        library's workers take no task of the queue (`Queue.pause`)."""
        return self._own("paused", self.tag(queue))

    def statistics(self, queue: str) -> str:
        """Hash of a queue's counters, kept by the scripts: `calls.<operation>`."""
        return self._own("stats", self.tag(queue))

    def periodic(self, queue: str) -> str:
        """Hash of the periodic tasks declared on a queue: name -> definition (JSON)."""
        return self._own("periodic", self.tag(queue))

    def periodic_due(self, queue: str) -> str:
        """Sorted set of the periodic tasks of a queue, scored by their next tick."""
        return self._own("periodic_due", self.tag(queue))

    def queue_settings(self, queue: str) -> str:
        """Hash of a queue's settings: default `ttr`, `max_run_time`, `max_attempts`."""
        return self._own("queue", self.tag(queue))

    @property
    def workers(self) -> str:
        """Sorted set of this library's worker listener ids, scored by the time (Redis's
        clock) until which each is alive: its last beat plus its `liveness_timeout`."""
        return self._shared("workers")

    @property
    def workers_info(self) -> str:
        """Hash of each worker's identity: listener id -> JSON with its machine, pid,
        process start mark, host and queues (read to take back a dead worker's tasks)."""
        return self._shared("workers", "info")

    @property
    def worker_orders(self) -> str:
        """Hash of the orders given to workers: listener id -> `quiet` (take no new task)
        or `stop` (stop as on SIGTERM); each worker reads its own twice a second and
        its entry goes with its record."""
        return self._shared("workers", "orders")

    def machine_workers(self, machine: str) -> str:
        """Set of the worker listener ids running on one machine (see `liveness.MACHINE_ID`)."""
        return self._shared("workers", "machine", machine)

    def wake_channel(self, queue: str) -> str:
        """Pub/sub channel told about each new pending task of a queue."""
        return self._own("wake", queue)

    def outcome_channel(self, task_id: str) -> str:
        """Pub/sub channel told when a task someone waits for finishes (its status is the
        message; see `Job.wait`)."""
        return self._own("outcome", task_id)

    def orm(self, *parts: str) -> str:
        """A key of a limpyd model living in this key space (`<prefix>:<part>:...`)."""
        return self._own(*parts)

    def temporary(self, token: str) -> str:
        """A short-lived key for collection filtering; deleted after use."""
        return self._own("tmp", token)


@cache
def keyspace(prefix: str = DEFAULT_PREFIX, cluster: bool = False) -> KeySpace:
    """The shared `KeySpace` for a prefix (and key mode)."""
    return KeySpace(prefix, cluster)
