"""Finding a task of a queue by id, identifier or a value of its parameters (issue 29,
item 8): what matches, in which order, and that the search reads no more than its bound
says, on the tests' real Redis. Its page: tests/operations/test_web.py."""

from __future__ import annotations

import pytest

from limpyd_blueque import Queue, Worker
from limpyd_blueque.exceptions import ConfigurationError
from limpyd_blueque.operations.search import (
    LOOK_LIMIT,
    MATCH_LIMIT,
    matching,
    search_tasks,
)


def found(result):
    return {match.task.id: match.how for match in result.matches}


def failing(job, queue):
    raise ValueError("no")


def test_a_task_is_found_by_its_id_only_in_its_own_queue(conn):
    job = Queue.named("s").enqueue({"image": "cat.jpg"})
    Queue.named("other").enqueue({})
    result = search_tasks("s", job.task_id)
    assert found(result) == {job.task_id: "id"}
    assert result.matches[0].task.status == "pending"
    assert found(search_tasks("other", job.task_id)) == {}
    assert found(search_tasks("s", "no-such-task")) == {}


def test_a_task_is_found_by_its_identifier_waiting_or_finished(conn):
    queue = Queue.named("s")
    waiting = queue.enqueue({"n": 1}, identifier="report-2026-11")
    assert found(search_tasks("s", "report-2026-11")) == {waiting.task_id: "identifier"}
    done = queue.enqueue({"n": 2}, identifier="invoice-7")
    Worker("s", callback=lambda job, queue: None, fork=False, max_loops=2, timeout=0.2).run()
    assert done.status.hget() == "complete"  # out of the identifiers hash, its field kept
    assert found(search_tasks("s", "invoice-7")) == {done.task_id: "identifier"}


def test_parameters_match_by_a_part_of_their_text_or_a_key_and_value(conn):
    queue = Queue.named("s")
    cat = queue.enqueue({"image": "Cat.JPG", "size": {"width": 640}, "n": 3, "ok": True})
    dog = queue.enqueue({"image": "dog.png", "size": {"width": 64}, "n": "3", "ok": None})
    plain = queue.enqueue("resize cat.jpg to 640")
    assert found(search_tasks("s", "cat.jpg")) == {cat.task_id: "parameters",
                                                   plain.task_id: "parameters"}
    assert set(found(search_tasks("s", "image=dog.png"))) == {dog.task_id}
    assert set(found(search_tasks("s", "image = dog.png"))) == {dog.task_id}
    assert set(found(search_tasks("s", "size.width=640"))) == {cat.task_id}
    assert set(found(search_tasks("s", "size.width=64"))) == {dog.task_id}  # 640 is not 64
    assert matching("size.width=640", {"queue": "s", "parameters": cat.parameters.hget()},
                    "s") == "parameters"
    assert matching("size.width=640", {"queue": "t", "parameters": cat.parameters.hget()},
                    "s") is None  # no longer of this queue
    assert set(found(search_tasks("s", "n=3"))) == {cat.task_id, dog.task_id}  # 3 and "3"
    assert set(found(search_tasks("s", "ok=true"))) == {cat.task_id}
    assert set(found(search_tasks("s", "ok=null"))) == {dog.task_id}
    assert found(search_tasks("s", "image=bird.gif")) == {}
    assert found(search_tasks("s", "missing.key=1")) == {}


def test_matches_come_by_id_then_identifier_then_parameters_in_every_status(conn):
    queue = Queue.named("s")
    by_parameters = queue.enqueue({"ref": "abc-1"})
    Worker("s", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    by_identifier = queue.enqueue({}, identifier="abc-1")
    by_id = queue.enqueue({}, task_id="abc-1")
    result = search_tasks("s", "abc-1")
    assert [(match.task.id, match.how) for match in result.matches] == [
        (by_id.task_id, "id"), (by_identifier.task_id, "identifier"),
        (by_parameters.task_id, "parameters")]
    assert result.matches[2].task.status == "failed"
    assert result.matched == 3 and result.complete


def test_the_search_reads_no_more_than_its_bound_and_says_so(conn):
    queue = Queue.named("s")
    jobs = queue.enqueue_many([{"n": n, "tag": "bulk"} for n in range(30)])
    scheduled = queue.enqueue({"tag": "later"}, delay=3600)
    result = search_tasks("s", "bulk", limit=10)
    assert result.looked_at == 11  # 10 pending (the next to run first), 1 scheduled
    assert result.matched == 10
    assert [match.task.id for match in result.matches] == [job.task_id for job in jobs[:10]]
    assert result.beyond == [Queue.keys().pending("s")] and not result.complete
    assert found(search_tasks("s", "n=25", limit=10)) == {}  # beyond the bound
    assert found(search_tasks("s", "n=25")) == {jobs[25].task_id: "parameters"}
    assert found(search_tasks("s", "later", limit=10)) == {scheduled.task_id: "parameters"}
    # an id or an identifier is found whatever the bound: it is read directly
    assert found(search_tasks("s", jobs[29].task_id, limit=1)) == {jobs[29].task_id: "id"}


def test_at_most_the_match_limit_is_returned_all_are_counted(conn):
    Queue.named("s").enqueue_many([{"tag": "many"} for _ in range(MATCH_LIMIT + 5)])
    result = search_tasks("s", "many")
    assert len(result.matches) == MATCH_LIMIT and result.matched == MATCH_LIMIT + 5


def test_the_cost_of_a_search_is_bounded_by_its_limit(conn, count_commands):
    queue = Queue.named("s")
    queue.enqueue_many([{"n": n} for n in range(40)])
    with count_commands() as few:
        search_tasks("s", "nothing", limit=20)
    queue.enqueue_many([{"n": n} for n in range(400)])
    with count_commands() as many:
        search_tasks("s", "nothing", limit=20)
    assert many.count == few.count  # 20 tasks read either way
    assert many.commands.count("HMGET") == 20


@pytest.mark.parametrize(("queue", "query", "limit", "message"), [
    ("s", "", LOOK_LIMIT, "empty search"),
    ("s", "   ", LOOK_LIMIT, "empty search"),
    ("s", "x" * 501, LOOK_LIMIT, "search too long"),
    ("bad name", "x", LOOK_LIMIT, "invalid queue name"),
    ("s", "x", 0, "a search looks at 1 to"),
])
def test_bad_searches_are_refused_naming_the_problem(conn, queue, query, limit, message):
    with pytest.raises(ConfigurationError, match=message):
        search_tasks(queue, query, limit=limit)


def test_a_key_of_another_type_is_left_out_and_named(conn):
    queue = Queue.named("s")
    job = queue.enqueue({"tag": "here"})
    conn.delete(Queue.keys().failed("s"))
    conn.set(Queue.keys().failed("s"), "not a list")
    result = search_tasks("s", "here")
    assert found(result) == {job.task_id: "parameters"}
    assert [item.key for item in result.skipped] == [Queue.keys().failed("s")]


def test_a_stale_identifier_entry_finds_nothing(conn):
    Queue.named("s").enqueue({})
    conn.hset(Queue.keys().identifiers("s"), "gone", "no-such-task")
    result = search_tasks("s", "gone")
    assert result.matches == [] and result.matched == 0
