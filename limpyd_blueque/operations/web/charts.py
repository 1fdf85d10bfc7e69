"""The throughput charts: per queue, the tasks processed (complete), failed and canceled
in each minute of the last hours, from the per-minute counts the scripts keep
(`KeySpace.throughput`), drawn as an inline SVG the server computes (no script, no
library: the page's Content-Security-Policy allows neither an inline script nor a
remote one, and the dashboard may run where there is no network)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...exceptions import ConfigurationError
from ...models import Job
from ...protocol import statistics
from ...protocol.liveness import server_time
from ..overview import THROUGHPUT_FIELDS, Skipped, failed, pipelined, whole

#: the spans a chart may show, in hours, and the one shown by default
HOURS = (1, 3, 6, 12, 24)
DEFAULT_HOURS = 6
#: the minutes between two marks of the time axis, for each span
TIME_MARKS = {1: 10, 3: 30, 6: 60, 12: 120, 24: 240}
#: the most queues one page of charts draws
MAX_QUEUES = 50
#: each line of a chart: the field of the per-minute hash, and its name in the legend
SERIES = (("complete", "processed (complete)"), ("failed", "failed"), ("canceled", "canceled"))
#: the drawing's size and the margins around the plot, in SVG units (CSS pixels)
WIDTH, HEIGHT = 960, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 24
#: the same, as the template draws the frame, the grid and the axes' labels
FRAME = {"width": WIDTH, "height": HEIGHT, "left": LEFT, "top": TOP, "right": WIDTH - RIGHT,
         "bottom": HEIGHT - BOTTOM, "plot_width": WIDTH - LEFT - RIGHT,
         "plot_height": HEIGHT - TOP - BOTTOM}


@dataclass(frozen=True)
class Line:
    """One series of a chart: its status, its name, its points as SVG `points`, and its
    total over the chart's span."""

    status: str
    label: str
    points: str
    total: int
    peak: int


@dataclass(frozen=True)
class Chart:
    """A queue's chart: `counts` per status, one per minute from `first` (Unix time // 60)
    on, oldest first; the lines and the axes' ticks to draw."""

    queue: str
    first: int
    counts: dict[str, list[int]]
    lines: list[Line]
    top: int
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]

    @property
    def totals(self) -> dict[str, int]:
        return {line.status: line.total for line in self.lines}


def kept_hours() -> float:
    """How many hours back the per-minute counts go (`statistics.THROUGHPUT_TTL`)."""
    return statistics.THROUGHPUT_TTL / 3600


def check_hours(value: str) -> int:
    """The hours of `?hours=` (one of `HOURS`); `ConfigurationError` naming the choices."""
    if not value.isdigit() or int(value) not in HOURS:
        raise ConfigurationError(f"invalid hours {value!r}: use one of "
                                 f"{', '.join(map(str, HOURS))}")
    return int(value)


def throughput_charts(names: Sequence[str], hours: int,
                      job_model: type[Job] = Job) -> tuple[float, list[Chart], list[Skipped]]:
    """The chart of each queue of `names` over the last `hours` (the current minute, not
    over yet, last), read at Redis's time: one round trip for every queue and minute."""
    client, keys = job_model.client(), job_model.keys()
    now = server_time(client)
    minutes = hours * 60
    last = int(now // 60)
    first = last - minutes + 1

    def read_all(pipe: Any) -> None:
        for name in names:
            for minute in range(first, last + 1):
                pipe.hmget(keys.throughput(name, minute), *THROUGHPUT_FIELDS)

    replies = pipelined(client, read_all)
    skipped: list[Skipped] = []
    charts = []
    for index, name in enumerate(names):
        counts: dict[str, list[int]] = {status: [] for status in THROUGHPUT_FIELDS}
        for minute, reply in zip(range(first, last + 1),
                                 replies[index * minutes:(index + 1) * minutes]):
            if failed(skipped, keys.throughput(name, minute), reply):
                reply = [None] * len(THROUGHPUT_FIELDS)
            for status, value in zip(THROUGHPUT_FIELDS, reply):
                counts[status].append(max(whole(value) or 0, 0))
        charts.append(chart(name, first, counts, hours))
    return now, charts, skipped


def nice_top(peak: int) -> int:
    """The top of a chart's scale: the least of 2, 5, 10, 20, 50... at or above `peak`."""
    top = 1
    while True:
        for step in (2, 5, 10):
            if top * step >= peak:
                return top * step
        top *= 10


def chart(queue: str, first: int, counts: dict[str, list[int]], hours: int) -> Chart:
    """The drawing of a queue's counts: a line per status over a scale from 0 to
    `nice_top` of the highest count (marked at whole numbers), and a mark of the time
    (UTC) every `TIME_MARKS` minutes."""
    minutes = hours * 60
    peak = max((max(values, default=0) for values in counts.values()), default=0)
    top = nice_top(peak)
    width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: float) -> float:
        return round(LEFT + index * width / max(minutes - 1, 1), 1)

    def y(value: float) -> float:
        return round(TOP + height - value * height / top, 1)

    lines = [Line(status, label, " ".join(f"{x(i)},{y(v)}" for i, v in
                                          enumerate(counts[status])),
                  sum(counts[status]), max(counts[status], default=0))
             for status, label in SERIES]
    step = top // 5 if str(top).startswith("5") else top // 2  # 0-1-2, 0-1-2-3-4-5, 0-10-20
    y_ticks = [(y(value), str(value)) for value in range(0, top + 1, step)]
    every = TIME_MARKS[hours]
    x_ticks = [(x(minute - first), time.strftime("%H:%M", time.gmtime(minute * 60)))
               for minute in range(first, first + minutes) if minute % every == 0]
    return Chart(queue, first, counts, lines, top, y_ticks, x_ticks)
