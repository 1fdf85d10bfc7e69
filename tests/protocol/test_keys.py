"""keys.py spells the Blueque wire keys exactly as the protocol and the reference do."""

import pytest

from limpyd_blueque import InvalidName, KeySpace
from limpyd_blueque.protocol.keys import check_listener_id, check_queue_name


def test_wire_keys_are_the_literal_blueque_names():
    k = KeySpace()
    assert k.task("abc") == "blueque_task_abc"
    assert k.queues == "blueque_queues"
    assert k.pending("some.queue") == "blueque_pending_tasks_some.queue"
    assert k.scheduled("q") == "blueque_scheduled_tasks_q"
    assert k.complete("q") == "blueque_complete_tasks_q"
    assert k.failed("q") == "blueque_failed_tasks_q"
    assert k.started("q") == "blueque_started_tasks_q"
    assert k.listeners("q") == "blueque_listeners_q"
    assert k.reserved("q", "host.example.com_42") == "blueque_reserved_tasks_q_host.example.com_42"
    assert k.finished("q", "complete") == k.complete("q")
    assert k.finished("q", "failed") == k.failed("q")


def test_own_keys_never_collide_with_wire_keys():
    k = KeySpace()
    assert k.leases("q") == "blueque:leases:q"
    assert k.wake_channel("q") == "blueque:wake:q"
    assert not k.leases("q").startswith("blueque_")


def test_prefix_is_configurable():
    k = KeySpace("acme")
    assert k.task("1") == "acme_task_1"
    assert k.pending("q") == "acme_pending_tasks_q"
    assert k.leases("q") == "acme:leases:q"


@pytest.mark.parametrize("name", ["", " ", "a b", "a*", "q?", "[q]", "a:b", "x" * 201, None, 3])
def test_ambiguous_queue_names_are_refused(name):
    with pytest.raises(InvalidName, match="invalid queue name"):
        check_queue_name(name)


@pytest.mark.parametrize("name", ["q", "some.queue", "video_transcode", "a-b", "Q9"])
def test_usual_queue_names_are_accepted(name):
    assert check_queue_name(name) == name


@pytest.mark.parametrize("listener", ["host", "host_", "host_x", "ho st_1", "h*_1", ""])
def test_listener_ids_must_be_host_underscore_pid(listener):
    with pytest.raises(InvalidName, match="invalid listener id"):
        check_listener_id(listener)


def test_bad_prefix_is_refused():
    with pytest.raises(InvalidName, match="invalid key prefix"):
        KeySpace("a_b")


def test_every_field_and_key_this_library_adds_is_documented():
    from pathlib import Path

    from limpyd_blueque import Job

    doc = (Path(__file__).parents[2] / "docs" / "keys.rst").read_text()
    for field in Job.OWN_FIELDS:
        assert f"``{field}``" in doc, field
    k = KeySpace()
    for key in (k.leases("<queue>"), k.wake_channel("<queue>"), k.queue_settings("<queue>"),
                k.workers, k.temporary("<random>"), k.prioritized("<queue>"),
                k.identifiers("<queue>"), k.canceled("<queue>"), k.periodic("<queue>"),
                k.periodic_due("<queue>"), k.buried("<queue>"), k.expired("<queue>"),
                k.expiry("<queue>"), k.statistics("<queue>")):
        assert f"``{key}``" in doc, key


def test_every_status_is_filed_in_the_structures_of_the_table():
    from limpyd_blueque.protocol.keys import HELD_STRUCTURE, STATUS_STRUCTURES
    from limpyd_blueque.protocol.statuses import RUNNING, Status

    assert set(STATUS_STRUCTURES) == set(Status)
    assert {kind for structures in STATUS_STRUCTURES.values()
            for _, kind in structures} <= {"list", "zset", "started"}
    k = KeySpace()
    assert k.status_structure("q", "scheduled") == ("blueque_scheduled_tasks_q", "zset")
    assert k.status_structure("q", Status.PENDING) == ("blueque_pending_tasks_q", "list")
    assert k.status_structure("q", "reserved") == ("blueque:leases:q", "zset")
    assert k.status_structure("q", "started") == ("blueque_started_tasks_q", "started")
    assert k.status_structure("q", "complete") == ("blueque_complete_tasks_q", "list")
    assert k.status_structure("q", "failed") == ("blueque_failed_tasks_q", "list")
    assert k.status_structure("q", "canceled") == ("blueque:canceled:q", "list")
    # pending tasks: priority 0 in the Blueque list, the others in the prioritized set,
    # those behind their utube key's task, those of a group (all of them, in one set)
    assert k.structures_of("q", "pending") == [("blueque_pending_tasks_q", "list"),
                                               ("blueque:prioritized:q", "zset"),
                                               ("blueque:utube_waiting:q", "zset"),
                                               ("blueque:grouped:q", "zset")]
    assert k.status_structure("q", "buried") == ("blueque:buried:q", "list")
    assert k.status_structure("q", "expired") == ("blueque:expired:q", "list")
    assert k.held_structure("q") == k.status_structure("q", "reserved")
    assert STATUS_STRUCTURES[Status.RESERVED] == (HELD_STRUCTURE,)
    with pytest.raises(ValueError):
        k.status_structure("q", "paused")
    with pytest.raises(ValueError):
        k.finished("q", "pending")
    # the reverse view: each structure once, with every status its entries may have
    reverse = {key: statuses for key, _, statuses in k.status_structures("q")}
    assert len(reverse) == len({structure for structures in STATUS_STRUCTURES.values()
                                for structure in structures})
    assert set(reverse["blueque:leases:q"]) == set(RUNNING)
    assert reverse["blueque_started_tasks_q"] == (Status.STARTED,)
    assert reverse["blueque_pending_tasks_q"] == (Status.PENDING,)
    assert reverse["blueque:prioritized:q"] == (Status.PENDING,)


@pytest.mark.parametrize("cluster", [False, True])
def test_a_queues_ended_list_is_its_retention_key_with_ended_for_retention(cluster):
    """The finishing steps check a task's `follow` field against this (_finished.lua)."""
    k = KeySpace("acme", cluster)
    assert k.ended("q") == k.retention("q").replace(":retention:", ":ended:", 1)
