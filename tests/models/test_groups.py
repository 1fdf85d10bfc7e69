"""Groups and limits on a real Redis: tasks of a group wait in their group's line, groups
take fair turns by weight, a limit holds a group back without holding the others, and a
slot is taken with a task's lease and freed with it, whatever ends the task."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from helpers import LISTENER, OTHER
from helpers import take as reserve

from limpyd_blueque import ConfigurationError, Limit, Queue
from limpyd_blueque.protocol.scripts import Lease

QUEUE_NAME = "gq"


@pytest.fixture
def queue(database):
    return Queue.named(QUEUE_NAME)


def take(listener=LISTENER, **options):
    return reserve(QUEUE_NAME, listener, **options)


def groups_of(jobs):
    return [job.group.hget() if job is not None else None for job in jobs]


# -- where a task of a group waits ------------------------------------------------------------
def test_a_task_of_a_group_waits_in_its_groups_line_not_in_the_blueque_list(queue, conn):
    job = queue.enqueue({"n": 1}, group="customer:42")
    assert job.group.hget() == "customer:42"
    assert conn.llen("blueque_pending_tasks_gq") == 0
    assert conn.zrange("blueque:group:gq:customer:42", 0, -1) == [job.task_id]
    assert conn.zrange("blueque:grouped:gq", 0, -1) == [job.task_id]
    assert conn.zrange("blueque:groups:gq", 0, -1) == ["customer:42"]
    assert queue.counts()["pending"] == 1
    taken = take()
    assert taken.task_id == job.task_id and taken.status.hget() == "reserved"
    assert not conn.exists("blueque:group:gq:customer:42", "blueque:grouped:gq",
                           "blueque:groups:gq")
    assert conn.smembers("blueque:slots:gq:customer:42") == {job.task_id}
    assert taken.complete("ok")
    assert not conn.exists("blueque:slots:gq:customer:42")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 201, "*", "{tag}", 42])
def test_a_bad_group_is_refused_before_anything_is_written(queue, conn, bad):
    with pytest.raises(ConfigurationError, match="group must be"):
        queue.enqueue("x", group=bad)
    with pytest.raises(ConfigurationError, match="group must be"):
        queue.enqueue_many(["a", "b"], options=[{}, {"group": bad}])
    assert conn.keys("blueque*") == []


def test_tasks_without_a_group_come_first_then_the_groups(queue):
    grouped = queue.enqueue("g", group="a")
    plain = queue.enqueue("plain")
    assert [take().task_id, take().task_id] == [plain.task_id, grouped.task_id]
    assert take() is None


def test_priorities_order_the_tasks_within_a_group(queue):
    low = queue.enqueue("low", group="a")
    high = queue.enqueue("high", group="a", priority=5)
    front = queue.enqueue("front", group="a", prepend=True)
    assert [take().task_id for _ in range(3)] == [high.task_id, front.task_id, low.task_id]


# -- fair turns ---------------------------------------------------------------------------------
def test_groups_take_turns_whatever_order_their_tasks_came_in(queue):
    queue.enqueue_many(list(range(6)), group="c")
    queue.enqueue_many(list(range(3)), group="b")
    queue.enqueue_many(list(range(2)), group="a")
    order = groups_of(take() for _ in range(11))
    # in turn, each round once each (equal turns go by name), until a group has no more
    assert [sorted(order[n:n + 3]) for n in (0, 3)] == [["a", "b", "c"]] * 2
    assert sorted(order[6:8]) == ["b", "c"] and order[8:] == ["c", "c", "c"]
    assert take() is None


def test_starts_go_to_the_groups_in_proportion_to_their_weights(queue):
    queue.set_limit("heavy", weight=3)
    queue.enqueue_many(list(range(400)), group="heavy")
    queue.enqueue_many(list(range(400)), group="light")
    counts = Counter(groups_of(take() for _ in range(400)))
    assert counts["heavy"] == pytest.approx(300, rel=0.1)
    assert counts["light"] == pytest.approx(100, rel=0.1)


@pytest.mark.parametrize("weight", [1, 3])
def test_a_group_that_joins_takes_the_next_free_slot_not_the_back_of_the_backlog(queue,
                                                                                   weight):
    queue.set_limit("a", max_running=4, weight=weight)
    queue.enqueue_many(list(range(1000)), group="a")
    running = [take() for _ in range(4)]
    assert take() is None  # 4 slots busy
    late = queue.enqueue("late", group="b")
    running[0].complete("ok")
    assert take().task_id == late.task_id


def starts_of_a_group_filled_one_at_a_time(queue, takes=40):
    """Group a has 100 tasks waiting, group b one at a time, enqueued again as soon as one
    starts (b leaves and joins again at each of its starts): b's starts among `takes`."""
    queue.enqueue_many(list(range(100)), group="a")
    queue.enqueue("b", group="b")
    order = []
    for _ in range(takes):
        group = take().group.hget()
        order.append(group)
        if group == "b":
            queue.enqueue("b", group="b")
    return order.count("b")


def test_a_group_emptied_and_filled_again_gets_its_share_and_no_more(queue):
    assert starts_of_a_group_filled_one_at_a_time(queue) == pytest.approx(20, abs=2)


def test_a_group_held_back_keeps_the_turns_of_the_others(queue, conn):
    queue.set_limit("h", max_running=1)
    queue.enqueue_many(list(range(3)), group="h")
    assert take().group.hget() == "h"  # h runs one: h is held back from now on
    b_starts = starts_of_a_group_filled_one_at_a_time(queue)
    assert conn.zrange("blueque:held:gq", 0, -1) == ["h"]
    assert b_starts == pytest.approx(20, abs=2)  # its share, not every turn
    assert conn.hget("blueque:fair:gq", "") is not None  # the clock was never reset


def test_an_emptied_group_keeps_its_turn_one_round_then_the_clock_starts_again(queue, conn):
    queue.enqueue_many(list(range(3)), group="a")
    queue.enqueue("b", group="b")
    assert groups_of([take(), take()]) == ["a", "b"]
    assert conn.zscore("blueque:groups:gq", "b") == 1  # emptied: keeps its next turn
    assert groups_of([take(), take()]) == ["a", "a"]  # b's place came round: b left
    assert not conn.exists("blueque:groups:gq", "blueque:fair:gq")  # the clock from 0
    assert take() is None


def test_groups_that_come_and_go_leave_nothing_behind(queue, conn):
    queue.enqueue_many(list(range(300)), group="steady")
    for n in range(200):  # a group of one task at every other start
        queue.enqueue("x", group=f"once:{n}")
        assert groups_of([take(), take()]).count("steady") >= 1
    assert conn.zcard("blueque:groups:gq") <= 3  # steady and the last ones emptied
    assert conn.hlen("blueque:fair:gq") == 1  # the clock only


# -- limits -------------------------------------------------------------------------------------
def test_a_group_at_max_running_is_held_back_and_others_go_on(queue, conn):
    queue.set_limit("a", max_running=2)
    queue.enqueue_many(list(range(5)), group="a")
    queue.enqueue_many(list(range(2)), group="b")
    plain = queue.enqueue("plain")
    taken = [take() for _ in range(6)]
    assert taken[0].task_id == plain.task_id
    assert Counter(groups_of(taken[1:5])) == {"a": 2, "b": 2}
    assert taken[5] is None
    assert conn.zrange("blueque:held:gq", 0, -1) == ["a"]
    assert taken[1].complete("ok")  # a slot of a frees: a takes its turn again
    assert groups_of([take()]) == ["a"]
    assert take() is None


@pytest.mark.parametrize("end", ["complete", "fail", "release", "delay", "bury", "cancel",
                                 "recover"])
def test_a_slot_is_free_the_moment_its_task_ends_in_any_way(queue, conn, end):
    queue.set_limit("a", max_running=1)
    queue.enqueue_many(["first", "second"], group="a")
    first = take()
    assert take(OTHER) is None
    if end == "complete":
        assert first.complete("ok")
    elif end == "fail":
        assert first.fail("boom")
    elif end == "release":
        assert first.release()
    elif end == "delay":
        assert first.release(delay=60)
    elif end == "bury":
        assert first.bury("poison")
    elif end == "cancel":
        assert first.cancel() is True  # running: its holder is asked to stop
        assert first.complete("late")  # filed as canceled
        assert first.status.hget() == "canceled"
    else:  # its holder died: its lease is taken back
        recovered = queue.scripts().upkeep.recover(
            [(QUEUE_NAME, first.task_id, None, None)], time.time(), expired_only=False,
            max_attempts=None, why="holder gone", process_gone=True)
        assert recovered == {first.task_id: "pending"}
    assert conn.scard("blueque:slots:gq:a") == 0
    nxt = take(OTHER)
    assert nxt is not None and nxt.group.hget() == "a"
    assert conn.smembers("blueque:slots:gq:a") == {nxt.task_id}


def test_a_task_put_back_returns_to_its_groups_line(queue, conn):
    job = queue.enqueue("x", group="a")
    take().release()
    assert conn.llen("blueque_pending_tasks_gq") == 0
    assert conn.zrange("blueque:group:gq:a", 0, -1) == [job.task_id]
    take().bury()
    assert queue.kick(1) == 1
    assert conn.zrange("blueque:group:gq:a", 0, -1) == [job.task_id]
    take().fail("boom")
    assert job.requeue()
    assert conn.zrange("blueque:group:gq:a", 0, -1) == [job.task_id]
    assert conn.llen("blueque_pending_tasks_gq") == 0


def test_a_canceled_or_deleted_waiting_task_leaves_its_line_and_its_group_its_turn(queue, conn):
    one = queue.enqueue("one", group="a")
    two = queue.enqueue("two", group="a")
    assert one.cancel() is True
    assert conn.zrange("blueque:group:gq:a", 0, -1) == [two.task_id]
    queue.delete(two.task_id)
    assert not conn.exists("blueque:group:gq:a", "blueque:grouped:gq", "blueque:groups:gq")
    assert queue.counts()["pending"] == 0


def test_max_starts_per_window_of_a_group_holds_it_back_and_not_the_others(queue, conn):
    queue.set_limit("a", max_starts=2, per=1)
    queue.enqueue_many(list(range(4)), group="a")
    queue.enqueue_many(list(range(4)), group="b")
    order = groups_of(take() for _ in range(7))
    assert order.count("a") == 2 and order.count("b") == 4 and order[-1] is None
    reopens = conn.zscore("blueque:held:gq", "a")
    assert 0.5 < reopens - time.time() <= 1.05
    time.sleep(1.05)
    assert groups_of([take()]) == ["a"]


@pytest.mark.parametrize("group, window", [("a", "blueque:starts:gq:a"),
                                           ("*", "blueque:starts:gq:a"),
                                           (None, "blueque:queue_starts:gq")])
def test_a_longer_window_keeps_the_starts_it_counted_that_long(queue, conn, group, window):
    queue.set_limit(group, max_starts=1, per=1)
    queue.enqueue_many(list(range(2)), group="a")
    assert take() is not None
    assert 0 < conn.pttl(window) <= 2000
    queue.set_limit(group, max_starts=1, per=30)  # the start made above counts for 30 s
    assert 29_000 < conn.pttl(window) <= 31_000
    time.sleep(2.1)  # past the window it was counted in
    assert take() is None
    queue.set_limit(group, max_starts=1, per=1)  # a shorter window keeps its keys as they are
    assert 25_000 < conn.pttl(window) <= 31_000


def test_a_longer_default_window_reaches_the_groups_running_and_the_ones_it_takes_back(
        queue, conn):
    queue.set_limit("*", max_starts=1, per=1)
    queue.set_limit("own", max_starts=5, per=1)
    queue.enqueue("r", group="running")
    queue.enqueue("o", group="own")
    assert take() is not None and take() is not None  # nothing of either waits now
    queue.set_limit("*", max_starts=1, per=30)
    assert conn.pttl("blueque:starts:gq:running") > 29_000  # running, none waiting
    assert conn.pttl("blueque:starts:gq:own") <= 2000  # its own window is unchanged
    queue.remove_limit("own")  # falls back to the default's longer window
    assert conn.pttl("blueque:starts:gq:own") > 29_000


def test_a_groups_own_limit_keeps_the_defaults_other_settings(queue):
    queue.set_limit("*", max_running=1)
    queue.set_limit("premium", weight=3)
    queue.enqueue_many(list(range(3)), group="premium")
    assert take() is not None and take() is None  # still at most 1 running


def test_max_starts_per_window_of_the_queue_as_a_whole(queue):
    queue.set_limit(None, max_starts=3, per=1)
    queue.enqueue_many(list(range(4)))
    queue.enqueue("g", group="a")
    started = [take() for _ in range(5)]
    assert sum(job is not None for job in started) == 3
    time.sleep(1.05)
    assert take() is not None


def test_max_running_of_the_queue_as_a_whole_counts_every_held_task(queue):
    queue.set_limit(None, max_running=2)
    queue.enqueue_many(["a", "b"])
    queue.enqueue("c", group="g")
    first, second = take(), take()
    assert second is not None and take() is None
    assert first.complete("ok")
    assert take() is not None


def test_a_limit_changed_or_removed_applies_to_the_next_reservation(queue, conn):
    queue.set_limit("*", max_running=1)
    queue.enqueue_many(list(range(3)), group="a")
    assert take() is not None and take() is None
    assert queue.set_limit("*", max_running=2) is True
    assert take() is not None and take() is None
    assert queue.remove_limit("*") is True
    assert take() is not None
    assert queue.remove_limit("*") is False


def test_limits_give_the_settings_and_the_live_counts(queue):
    queue.set_limit("a", max_running=2, weight=2)
    queue.set_limit("*", max_starts=10, per=60)
    queue.set_limit(None, max_running=50)
    queue.enqueue_many(list(range(3)), group="a")
    queue.enqueue_many(list(range(4)), group="b")
    queue.enqueue("plain")
    take(), take(), take()  # plain, then a and b
    limits = queue.limits()
    assert limits["a"] == Limit("a", max_running=2, weight=2.0, running=1, waiting=2)
    assert limits["*"] == Limit("*", max_starts=10, per=60.0, running=1, waiting=3)
    assert limits[None] == Limit(None, max_running=50, running=3, waiting=5)


@pytest.mark.parametrize("group, settings, message", [
    ("a", {}, "at least one of"),
    ("a", {"max_starts": 3}, "max_starts and per go together"),
    ("a", {"per": 3}, "max_starts and per go together"),
    ("a", {"max_running": -1}, "max_running"),
    ("a", {"max_running": 1.5}, "max_running"),
    ("a", {"max_starts": 0, "per": 1}, "max_starts"),
    ("a", {"max_starts": 1, "per": 0}, "per"),
    ("a", {"weight": 0}, "weight"),
    ("a", {"weight": 0.0001}, "weight"),
    ("a", {"weight": 5000}, "weight"),
    (None, {"weight": 2}, "the queue as a whole"),
    ("a b", {"max_running": 1}, "group must be"),
])
def test_bad_limits_are_refused_before_anything_is_written(queue, conn, group, settings,
                                                            message):
    with pytest.raises(ConfigurationError, match=message):
        queue.set_limit(group, **settings)
    assert conn.keys("blueque*") == []


def test_truncate_and_drop_clear_the_groups(queue, conn):
    queue.set_limit("a", max_running=1, max_starts=5, per=60)
    queue.enqueue_many(list(range(3)), group="a")
    queue.enqueue_many(list(range(3)), group="b")
    running = [take(), take(), take()]  # a, b, then a is held back and b goes on
    assert conn.exists("blueque:held:gq")
    queue.truncate()
    assert not conn.exists("blueque:grouped:gq", "blueque:groups:gq", "blueque:held:gq",
                           "blueque:group:gq:a", "blueque:group:gq:b", "blueque:fair:gq")
    assert queue.counts()["pending"] == 0
    for job in running:
        assert job.complete("ok")
    assert not conn.exists("blueque:slots:gq:a", "blueque:slots:gq:b")
    queue.drop()
    # only the windows of starts are left, each expiring with its window
    assert [key for key in conn.keys("blueque:*gq*") if conn.ttl(key) < 0] == []


def test_leases_of_a_group_renew_as_any_other(queue):
    queue.enqueue("x", group="a")
    job = take(ttr=30)
    renewal = queue.scripts().upkeep.renew([Lease(QUEUE_NAME, job.task_id, 1, 30)])
    assert not renewal.lost
