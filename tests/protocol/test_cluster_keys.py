"""The cluster key mode's layout (issue 15): in `KeySpace(cluster=True)` every key of one
queue holds the queue's hash tag, so a step on one queue touches one slot of a Redis
Cluster; the keys of no queue share the prefix's own slot; and the default layout, the
Blueque wire keys, is unchanged (tests/protocol/test_keys.py, tests/interop/test_wire_compat.py)."""

from __future__ import annotations

import inspect
import json

import pytest
from redis.crc import key_slot

from limpyd_blueque.protocol.keys import KeySpace, keyspace

QUEUE_METHODS = [name for name, method in inspect.getmembers(KeySpace, inspect.isfunction)
                 if list(inspect.signature(method).parameters)[1:2] == ["queue"]
                 and name not in {"wake_channel", "tag", "task_id_in", "_structure"}]


def queue_keys(keys, queue):
    """Every key of `queue` (with a task of it, a listener, a utube key, a minute)."""
    found = []
    for name in QUEUE_METHODS:
        method = getattr(keys, name)
        extra = {"reserved": ("host_1",), "utube": ("customer-7",), "throughput": (29_000_000,),
                 "finished": ("complete",), "status_structure": ("failed",),
                 "structures_of": ("pending",), "queue_structures": ("host_1",),
                 "group_line": ("customer:7",), "group_slots": ("customer:7",),
                 "group_starts": ("customer:7",), "after": ("0b8c7d6e",),
                 "children": ("0b8c7d6e",)}.get(name, ())
        result = method(queue, *extra)
        if name in ("group_layout", "dependency_layout"):  # keys, and a channel (no key)
            found += [key for key in json.loads(result) if key != keys.wake_channel(queue)]
        elif isinstance(result, str):
            found.append(result)
        elif isinstance(result, tuple):
            found.append(result[0])
        else:
            found += [entry[0] for entry in result]
    return [*found, keys.task(keys.task_id_in(queue, "0b8c7d6e"))]


def test_every_key_of_a_queue_is_in_one_slot():
    keys = KeySpace(cluster=True)
    for queue in ("thumbnails", "a", "reports.monthly", "x-1_2"):
        found = queue_keys(keys, queue)
        assert len(found) > 25
        assert {key_slot(key.encode()) for key in found} == {key_slot(f"{{{queue}}}".encode())}


def test_the_keys_of_no_queue_share_the_prefixs_slot():
    keys = KeySpace(cluster=True)
    shared = [keys.queues, keys.workers, keys.workers_info, keys.machine_workers("m1")]
    assert {key_slot(key.encode()) for key in shared} == {key_slot(b"{blueque}")}


def test_task_ids_carry_their_queues_tag_once():
    keys = KeySpace(cluster=True)
    first = keys.task_id_in("q", "abc")
    assert first == "{q}abc"
    assert keys.task_id_in("q", first) == first
    assert keys.task(first) == "blueque_task_{q}abc"
    assert KeySpace().task_id_in("q", "abc") == "abc"


def test_the_default_layout_is_the_wire_layout():
    keys = KeySpace()
    assert (keys.pending("q"), keys.reserved("q", "h_1"), keys.leases("q"), keys.queues,
            keys.workers) == ("blueque_pending_tasks_q", "blueque_reserved_tasks_q_h_1",
                              "blueque:leases:q", "blueque_queues", "blueque:workers")
    assert keyspace("blueque") is not keyspace("blueque", True)


@pytest.mark.parametrize("count", [100])
def test_queues_spread_over_three_shards(count):
    keys = KeySpace(cluster=True)
    shards = [0, 0, 0]
    for n in range(count):
        slot = key_slot(keys.pending(f"queue-{n}").encode())
        shards[min(slot * 3 // 16384, 2)] += 1
    assert min(shards) >= count // 6, shards
