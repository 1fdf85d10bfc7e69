"""Prometheus metrics of an installation, read at each scrape from the O(1) statistics of
every queue (`statistics.read_counters`), the heads of their lines and the workers'
records: the cost of a scrape grows with the number of queues and workers, never with
the number of tasks.

`BluequeCollector` is a collector of the official `prometheus_client` library (the
`metrics` and `web` extras): `registry()` gives a registry holding only it, which
`blueque metrics` serves on its own port and `blueque web` at `/metrics`. The names,
types and labels are listed in docs/dashboard.rst.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..exceptions import REDIS_AWAY
from ..models import Job, Queue
from ..models.limits import held_back
from ..protocol import statistics
from ..protocol.liveness import server_time, worker_records
from ..protocol.statuses import Status
from .overview import Skipped, oldest_waiting, queue_names, ready

try:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - the extra is not installed: `require` says so
    Collector = object  # type: ignore[assignment,misc]

#: the gauge saying whether Redis answered the scrape: name, help
REDIS_UP = ("blueque_redis_up", "1 when Redis answered this scrape, 0 when it could not be "
            "reached (then no other metric is given).")
#: the counters of finished tasks: metric name, help, the `finished.<status>` counted;
#: `blueque_tasks_finished` gives them all with an `outcome` label (these four stay for
#: the rules written against them)
FINISHED_COUNTERS = (
    ("blueque_tasks_completed", "Tasks completed, per queue.", Status.COMPLETE.value),
    ("blueque_tasks_failed", "Tasks failed for good (not retried), per queue.",
     Status.FAILED.value),
    ("blueque_tasks_canceled", "Tasks canceled, per queue.", Status.CANCELED.value),
    ("blueque_tasks_expired", "Tasks expired past their ttl before running, per queue.",
     Status.EXPIRED.value),
)
#: the histograms: metric name, help, the durations kept by the scripts
HISTOGRAMS = (
    ("blueque_task_wait_seconds", "Time from a task's last move into line (enqueued, due, "
     "requeued) to its reservation, per queue.", "wait"),
    ("blueque_task_run_seconds", "Run time of the tasks their worker finished (complete, "
     "failed or canceled), from start to outcome, per queue.", "run"),
)


def require() -> None:
    """`ImportError` naming the extra when `prometheus_client` is not installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ImportError("the metrics need the prometheus_client library: "
                          "pip install 'limpyd-blueque[metrics]'") from None


class BluequeCollector(Collector):
    """The metrics of every queue `blueque_queues` lists, read at each `collect()`."""

    def __init__(self, job_model: type[Job] = Job) -> None:
        self.job_model = job_model

    def collect(self) -> Iterator[Any]:
        client, keys = self.job_model.client(), self.job_model.keys()
        try:
            names = queue_names(self.job_model)
            now = server_time(client)
            counters = statistics.read_counters(client, keys, names)
            oldest = oldest_waiting(client, keys, names, now, list[Skipped]())
            live = sum(1 for until in worker_records(client, keys).values() if until >= now)
            paused = Queue.paused_among(names)
            held = held_back(client, keys, names, now, {
                queue: figures.tasks["pending"] for queue, figures in counters.items()})
        except REDIS_AWAY:  # the scrape says so, rather than failing
            yield GaugeMetricFamily(*REDIS_UP, value=0)
            return
        yield GaugeMetricFamily(*REDIS_UP, value=1)
        yield from self.gauges(counters, oldest, live, paused, held)
        yield from self.counters(counters)

    @staticmethod
    def counters(counters: dict[str, statistics.Counters]) -> Iterator[Any]:
        """The counters and histograms of each queue: tasks finished by outcome, tasks
        recovered, and the wait and run durations."""
        outcomes = CounterMetricFamily(
            "blueque_tasks_finished", "Tasks finished, per queue and outcome (complete, "
            "failed for good, canceled, expired).", labels=["queue", "outcome"])
        for queue, figures in counters.items():
            for _, _, status in FINISHED_COUNTERS:
                outcomes.add_metric([queue, status], figures.finished[status])
        yield outcomes
        for name, help_text, status in FINISHED_COUNTERS:
            counter = CounterMetricFamily(name, help_text, labels=["queue"])
            for queue, figures in counters.items():
                counter.add_metric([queue], figures.finished[status])
            yield counter
        recovered = CounterMetricFamily(
            "blueque_tasks_recovered", "Tasks taken back from a worker that was gone "
            "(back in line, or failed or canceled), per queue.", labels=["queue"])
        for queue, figures in counters.items():
            recovered.add_metric([queue], figures.recovered)
        yield recovered
        for name, help_text, kind in HISTOGRAMS:
            histogram = HistogramMetricFamily(name, help_text, labels=["queue"])
            for queue, figures in counters.items():
                durations = figures.durations[kind]
                histogram.add_metric([queue], [(_bound(bound), float(count)) for bound, count
                                               in durations.buckets], durations.total)
            yield histogram

    @staticmethod
    def gauges(counters: dict[str, statistics.Counters],
               oldest: dict[str, dict[str, Any] | None], live: int,
               paused: frozenset[str] = frozenset(),
               held: dict[str, int] | None = None) -> Iterator[Any]:
        tasks = GaugeMetricFamily("blueque_tasks", "Tasks per queue and status.",
                                  labels=["queue", "status"])
        ready_now = GaugeMetricFamily("blueque_waiting_tasks", "Tasks ready to run now "
                                      "(pending, less those held back by their group's "
                                      "limit or their queue's), per queue.", labels=["queue"])
        running = GaugeMetricFamily("blueque_running_tasks", "Tasks held by a worker "
                                    "(reserved or started), per queue.", labels=["queue"])
        stalled = GaugeMetricFamily("blueque_stalled_tasks", "Running tasks whose progress "
                                    "did not move within their stall timeout, per queue.",
                                    labels=["queue"])
        oldest_age = GaugeMetricFamily("blueque_oldest_waiting_age_seconds", "Age of the "
                                       "oldest task waiting in line, per queue (absent "
                                       "when none waits).", labels=["queue"])
        pauses = GaugeMetricFamily("blueque_queue_paused", "1 while the queue is paused "
                                   "(workers take none of its tasks), else 0.",
                                   labels=["queue"])
        limited = GaugeMetricFamily("blueque_tasks_held_back", "Tasks waiting, held back by "
                                    "their group's limit or their queue's (max_running or "
                                    "max_starts), per queue.", labels=["queue"])
        for queue, figures in counters.items():
            for status in Status:
                tasks.add_metric([queue, status.value], figures.tasks[status.value])
            held_count = (held or {}).get(queue, 0)
            ready_now.add_metric([queue], ready(figures.tasks, held_count))
            running.add_metric([queue], figures.tasks["taken"])
            stalled.add_metric([queue], figures.tasks["stalled"])
            age = (oldest.get(queue) or {}).get("age")
            if age is not None:
                oldest_age.add_metric([queue], float(age))
            pauses.add_metric([queue], 1 if queue in paused else 0)
            limited.add_metric([queue], held_count)
        yield from (tasks, ready_now, running, stalled, oldest_age, pauses, limited)
        yield GaugeMetricFamily("blueque_live_workers", "Workers whose heartbeat says "
                                "they are alive.", value=live)


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else f"{bound:g}"


def registry(job_model: type[Job] = Job) -> Any:
    """A Prometheus registry holding only a `BluequeCollector` (no metrics of the process
    serving it)."""
    require()
    result = CollectorRegistry(auto_describe=False)
    result.register(BluequeCollector(job_model))
    return result
