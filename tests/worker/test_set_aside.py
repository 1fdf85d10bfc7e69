"""A structure of a queue holding another type of value no longer stops that queue: its
worker moves the key aside, stores an Error of the queue and logs one line."""

import logging

import pytest

from limpyd_blueque import Error, ProtocolError, Queue, Worker


def done(job, queue):
    return "done"


@pytest.mark.parametrize("key, kind", [("blueque:leases:aside", "zset"),
                                       ("blueque_started_tasks_aside", "set"),
                                       ("blueque_pending_tasks_aside", "list")])
def test_a_worker_sets_a_misfit_key_aside_and_its_queue_goes_on(database, conn, caplog, key,
                                                                kind):
    caplog.set_level(logging.ERROR, logger="limpyd-blueque")
    queue = Queue.named("aside")
    conn.set(key, "not a " + kind)
    if kind == "list":  # no task can be enqueued until the line is set aside
        with pytest.raises(ProtocolError):
            queue.enqueue("x")
        Worker("aside", callback=done, timeout=0.2, max_duration=1).run()
    job = queue.enqueue("x")
    Worker("aside", callback=done, max_loops=1, timeout=0.2, max_duration=10).run()
    assert job.status.hget() == "complete"  # the queue went on
    asides = conn.keys(f"{key}:set_aside:*")
    assert len(asides) == 1 and conn.get(asides[0]) == "not a " + kind
    (error,) = Error.collection(queue_name="aside", type="MisfitKeySetAside").instances()
    assert error.job_pk.hget() == "" and key in error.message.hget()
    assert sum("moved aside" in record.getMessage() for record in caplog.records) == 1
