"""Limits across real worker processes on a real Redis: sampled every 50 ms, a group never
runs more than its `max_running`, a queue never starts more than its `max_starts` in a
window, and a dead worker's slot comes back within the recovery times."""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers import kill, kill_task_processes, start_worker, wait_for
from jobs import events

from limpyd_blueque import Queue

pytestmark = pytest.mark.timeout(120)


def running_by_group(conn, task_ids):
    """{group: tasks held (reserved or started)}, read in one round trip."""
    with conn.pipeline(transaction=False) as pipe:
        for task_id in task_ids:
            pipe.hmget(f"blueque_task_{task_id}", "status", "group")
        replies = pipe.execute()
    counts: dict[str, int] = {}
    for status, group in replies:
        if status in ("reserved", "started"):
            counts[group or ""] = counts.get(group or "", 0) + 1
    return counts


def test_no_group_ever_runs_more_than_its_limit_across_workers_and_queues(redis_url, database,
                                                                          conn):
    first, second = Queue.named("ga"), Queue.named("gb")
    first.set_limit("*", max_running=2)
    first.set_limit("big", max_running=3)
    second.set_limit("*", max_running=1)
    tasks = []
    for queue in (first, second):
        for group in ("big", "small", "other"):
            tasks += queue.enqueue_many(["0.3"] * 6, group=group)
        tasks += queue.enqueue_many(["0.05"] * 4)  # no group: never held back
    ids = [job.task_id for job in tasks]
    workers = [start_worker(redis_url, "--queues=ga,gb", "--callback=jobs.slow_callback",
                            "--concurrency=3", "--timeout=0.2") for _ in range(3)]
    peaks: dict[tuple[str, str], int] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            for queue in (first, second):
                name = queue.pk.get()
                mine = [job.task_id for job in tasks if job.queue.hget() == name]
                for group, count in running_by_group(conn, mine).items():
                    peaks[(name, group)] = max(peaks.get((name, group), 0), count)
            if sum(queue.counts()["complete"] for queue in (first, second)) == len(ids):
                break
            time.sleep(0.05)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(20)
    assert sum(queue.counts()["complete"] for queue in (first, second)) == len(ids)
    limits = {("ga", "big"): 3, ("ga", "small"): 2, ("ga", "other"): 2,
              ("gb", "big"): 1, ("gb", "small"): 1, ("gb", "other"): 1}
    over = {key: peak for key, peak in peaks.items() if key in limits and peak > limits[key]}
    assert not over, f"groups over their limit: {over}"
    assert peaks[("ga", "big")] == 3 and peaks[("gb", "small")] == 1  # the limits were reached
    print(f"\npeak running per group, sampled every 50 ms: {dict(sorted(peaks.items()))}")


def busiest_window(starts, per):
    """The most starts (their times) within any window of `per` seconds."""
    return max((sum(1 for other in starts if start <= other < start + per)
                for start in starts), default=0)


def test_no_window_holds_more_starts_than_max_starts(redis_url, database):
    queue, group_queue = Queue.named("rate"), Queue.named("grate")
    queue.set_limit(None, max_starts=4, per=1)  # the queue as a whole
    group_queue.set_limit("g", max_starts=2, per=1)  # one group, beside an unlimited one
    jobs = queue.enqueue_many(["0"] * 10) + queue.enqueue_many(["0"] * 6, group="g")
    grouped = group_queue.enqueue_many(["0"] * 6, group="g")
    free = group_queue.enqueue_many(["0"] * 6, group="free")
    workers = [start_worker(redis_url, "--queues=rate,grate", "--callback=jobs.slow_callback",
                            "--concurrency=2", "--timeout=0.1") for _ in range(2)]
    try:
        assert wait_for(lambda: queue.counts()["complete"] == len(jobs)
                        and group_queue.counts()["complete"] == len(grouped) + len(free),
                        timeout=30)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(20)
    starts = sorted(float(job.started_at.hget()) for job in jobs)
    group_starts = sorted(float(job.started_at.hget()) for job in grouped)
    free_starts = [float(job.started_at.hget()) for job in free]
    busiest, group_busiest = busiest_window(starts, 1.0), busiest_window(group_starts, 1.0)
    assert busiest <= 4 and group_busiest <= 2
    assert starts[-1] - starts[0] >= 3  # 16 starts at 4 a second
    assert group_starts[-1] - group_starts[0] >= 2  # 6 starts at 2 a second
    assert max(free_starts) < group_starts[-1]  # the other group was never held back
    print(f"\nthe queue's 16 starts, at most 4 per second: busiest window of 1 s held "
          f"{busiest}; a group's 6, at most 2 per second: {group_busiest}")


def test_a_dead_workers_slot_comes_back_within_the_recovery_time(redis_url, database, conn):
    queue = Queue.named("slot")
    queue.set_limit("only", max_running=1)
    first = queue.enqueue("2", group="only")
    second = queue.enqueue("0", group="only")
    workers = [start_worker(redis_url, "--queues=slot", "--callback=jobs.slow_callback",
                            "--fork", "--timeout=0.2")]
    try:
        assert wait_for(lambda: first.status.hget() == "started", timeout=20)
        workers.append(start_worker(redis_url, "--queues=slot",
                                    "--callback=jobs.slow_callback", "--timeout=0.2"))
        time.sleep(1.0)
        assert second.status.hget() == "pending"  # held back by the running first
        killed = time.monotonic()
        kill(workers[0].pid, signal.SIGKILL)
        kill_task_processes(conn)
        # taken back at the front of its group's line, and run again by the survivor
        assert wait_for(lambda: first.attempt.hget() == "2"
                        and first.status.hget() in ("started", "complete"), timeout=30)
        took = time.monotonic() - killed
        assert wait_for(lambda: second.status.hget() == "complete", timeout=30)
    finally:
        for worker in workers:
            kill(worker.pid)
            worker.wait(20)
    assert took < 5  # about a second on the same machine
    print(f"\nthe slot of a killed worker's task came back: its task ran again "
          f"{took:.2f} s after the kill")


@pytest.mark.recovery
def test_a_dead_workers_slot_comes_back_from_another_machine(redis_url, database, conn):
    """The survivor cannot see the dead worker's processes (another machine identity): the
    slot comes back once the missed beats make the worker dead (liveness_timeout 10 s),
    and the group never runs two tasks on the way."""
    queue = Queue.named("far")
    queue.set_limit("only", max_running=1)
    first = queue.enqueue("60", group="only")
    second = queue.enqueue("0", group="only")
    workers = [start_worker(redis_url, "--queues=far", "--callback=jobs.slow_callback",
                            "--timeout=0.2")]
    try:
        assert wait_for(lambda: first.status.hget() == "started", timeout=20)
        elsewhere = {**os.environ, "LIMPYD_BLUEQUE_MACHINE_ID": "another-machine"}
        workers.append(start_worker(redis_url, "--queues=far", "--callback=jobs.slow_callback",
                                    "--timeout=0.2", env=elsewhere))
        time.sleep(1.0)
        assert second.status.hget() == "pending"  # held back by the running first
        kill(workers[0].pid, signal.SIGKILL)
        kill_task_processes(conn)
        killed = time.monotonic()
        peak = 0
        while time.monotonic() - killed < 60:
            statuses = [job.status.hget() for job in (first, second)]
            peak = max(peak, sum(status in ("reserved", "started") for status in statuses))
            if first.attempt.hget() == "2" and first.status.hget() == "started":
                break
            time.sleep(0.05)
        took = time.monotonic() - killed
        time.sleep(1.0)  # the slot is the first's again: the second still waits
        assert second.status.hget() == "pending"
    finally:
        for worker in workers:
            kill(worker.pid)
            worker.wait(20)
    assert peak <= 1
    assert took < 20  # liveness_timeout (10 s) and a clean after it
    print(f"\nfrom another machine, the slot of a killed worker's task came back "
          f"{took:.2f} s after the kill")


def started_in_order(jobs):
    """The jobs' groups, by the time each started."""
    return [group for _, group in sorted((float(job.started_at.hget()), job.group.hget())
                                         for job in jobs if job.started_at.hget())]


def test_fair_shares_across_workers_follow_the_weights(redis_url, database):
    queues = [Queue.named("fa"), Queue.named("fb")]
    for queue in queues:
        queue.set_limit("heavy", weight=3)
    jobs = []
    for queue in queues:
        jobs += queue.enqueue_many(["0"] * 300, group="heavy")
        jobs += queue.enqueue_many(["0"] * 300, group="light")
    workers = [start_worker(redis_url, "--queues=fa,fb", "--callback=jobs.slow_callback",
                            "--concurrency=2", "--timeout=0.2") for _ in range(2)]
    try:
        assert wait_for(lambda: sum(q.counts()["complete"] for q in queues) == len(jobs),
                        timeout=90)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(20)
    for queue in queues:
        mine = [job for job in jobs if job.queue.hget() == queue.pk.get()]
        first = started_in_order(mine)[:300]  # while both groups still wait (400 starts)
        share = first.count("heavy") / len(first)
        assert 0.75 * 0.9 <= share <= 0.75 * 1.1, (queue.pk.get(), share)
        print(f"\n{queue.pk.get()}: heavy (weight 3) had {share:.0%} of the first "
              f"{len(first)} starts")


def test_a_late_group_starts_at_the_next_free_slot_and_limits_apply_within_a_second(
        redis_url, database, conn):
    queue = Queue.named("late")
    queue.set_limit("a", max_running=1)
    backlog = queue.enqueue_many(["0.3"] * 1000, group="a")
    ids = [job.task_id for job in backlog]

    def running_of_a() -> int:  # the slots a's running tasks hold: one read
        return conn.scard("blueque:slots:late:a")
    workers = [start_worker(redis_url, "--queues=late", "--callback=jobs.slow_callback",
                            "--concurrency=2", "--timeout=0.2") for _ in range(2)]
    try:
        assert wait_for(running_of_a)
        time.sleep(1.0)
        assert running_of_a() == 1
        changed = time.monotonic()
        queue.set_limit("a", max_running=4)  # raised at run time: every slot of a
        assert wait_for(lambda: running_of_a() == 4, timeout=5)
        raised = time.monotonic() - changed
        enqueued = time.time()
        late = queue.enqueue("0", group="b")  # every worker slot busy with a

        def a_started_since() -> list[float]:
            with conn.pipeline(transaction=False) as pipe:
                for task_id in ids:
                    pipe.hget(f"blueque_task_{task_id}", "started_at")
                starts = [float(start) for start in pipe.execute() if start]
            return [start for start in starts if start > enqueued]

        assert wait_for(lambda: late.status.hget() == "complete", timeout=10)
        # it took the next free slot: before any task of a that started after its enqueue
        assert wait_for(a_started_since, timeout=10)
        assert float(late.started_at.hget()) <= min(a_started_since())
        queue.set_limit("a", max_running=1)  # lowered: running tasks end, none starts
        assert wait_for(lambda: running_of_a() <= 1, timeout=5)
        changed = time.monotonic()
        queue.remove_limit("a")
        assert wait_for(lambda: running_of_a() == 4, timeout=5)
        removed = time.monotonic() - changed
    finally:
        for worker in workers:
            kill(worker.pid)
            worker.wait(20)
    assert raised < 1.5 and removed < 1.5
    print(f"\na limit raised at run time applied in {raised:.2f} s, removed in "
          f"{removed:.2f} s; a late group's task started "
          f"{float(late.started_at.hget()) - enqueued:.2f} s after its enqueue, all slots busy")


def has_status(job, status):
    return lambda: job.status.hget() == status


def test_a_slot_is_free_the_moment_its_task_ends_in_any_way_on_a_real_worker(
        redis_url, database, conn):
    queue = Queue.named("ends")
    queue.set_limit("a", max_running=1)
    worker = start_worker(redis_url, "--queues=ends", "--callback=jobs.ending_callback",
                          "--concurrency=2", "--timeout=0.2", "--fork")
    waits = {}
    try:
        for end in ("complete", "fail", "release", "delay", "bury", "cancel"):
            first = queue.enqueue({"end": end, "sleep": 30 if end == "cancel" else 1.0},
                                  group="a", max_attempts=1)
            second = queue.enqueue({"end": "complete", "sleep": 0}, group="a")
            assert wait_for(has_status(first, "started"))
            time.sleep(0.2)  # a worker slot is free: only the limit holds the second back
            assert second.status.hget() == "pending"
            if end == "cancel":
                assert first.cancel() is True  # its worker stops it, then files it
            assert wait_for(has_status(second, "complete"), timeout=5)
            # (the events of these two tasks only: a task process of an earlier test may
            # still be ending)
            mine = [entry for entry in events(conn)
                    if entry["task"] in (first.task_id, second.task_id)]
            begins = [entry["at"] for entry in mine if entry["event"] == "begin"]
            if end == "cancel":  # filed canceled (the step's time) when its process stopped
                assert first.status.hget() == "canceled"
                ended = float(first.updated.hget())
            else:
                ended = next(entry["at"] for entry in mine if entry["event"] == "end")
            assert begins[0] < ended and all(at > ended for at in begins[1:]), (end, begins)
            waits[end] = begins[1] - ended  # the group's next start: the slot was free
            if end == "release":  # it went back to the front of its line, and ran again
                assert wait_for(has_status(first, "complete"), timeout=5)
            if end == "delay":  # back in 60 s: out of the way
                assert first.status.hget() == "scheduled"
                first.delete()
            assert wait_for(lambda: conn.scard("blueque:slots:ends:a") == 0)
    finally:
        kill(worker.pid)
        worker.wait(20)
    assert all(wait < 1.0 for wait in waits.values()), waits
    print("\nthe group's next start after its running task ended: "
          + ", ".join(f"{end} {wait * 1000:.0f} ms" for end, wait in waits.items()))


def test_a_queues_own_limit_set_and_removed_at_run_time_applies_within_a_second(
        redis_url, database, conn):
    queue = Queue.named("whole")
    ids = [job.task_id for job in queue.enqueue_many(["0.3"] * 60)]
    worker = start_worker(redis_url, "--queues=whole", "--callback=jobs.slow_callback",
                          "--concurrency=3", "--timeout=0.2")
    try:
        assert wait_for(lambda: running_by_group(conn, ids).get("") == 3)
        queue.set_limit(None, max_running=1)
        # within a second the worker has read it (it reads which of its queues have a limit
        # of their own twice a second), and the tasks of 0.3 s started before have ended;
        # a loaded machine may take longer to end them: none starts meanwhile
        time.sleep(1.0)
        assert wait_for(lambda: running_by_group(conn, ids).get("", 0) <= 1, timeout=5)
        peak = 0
        for _ in range(20):  # sampled every 50 ms for a second
            peak = max(peak, running_by_group(conn, ids).get("", 0))
            time.sleep(0.05)
        changed = time.monotonic()
        queue.remove_limit(None)
        assert wait_for(lambda: running_by_group(conn, ids).get("") == 3, timeout=5)
        removed = time.monotonic() - changed
    finally:
        kill(worker.pid)
        worker.wait(20)
    assert peak == 1 and removed < 1.5, (peak, removed)
    print(f"\na queue's own limit removed at run time applied in {removed:.2f} s")
