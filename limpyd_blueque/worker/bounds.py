"""Holding a task to its bounds (see protocol/bounds.py), with what the operating system
offers.

In a forked task's process, around the task's code (`holding`): its CPU time is limited
by `RLIMIT_CPU` (at the limit, SIGXCPU raises `CpuLimitExceeded` in the task; if the
task goes on, the kernel kills it `CPU_GRACE` seconds later), and a timer raises
`SoftTimeLimitExceeded` at its soft time limit. In the worker: the memory of each task's
process group (`group_memory`, read from /proc), and the peak memory and CPU time of a
task process once it ended (`Usage`, from `os.wait4`).

In the worker's own process (in-process tasks): the soft time limit and `max_run_time`
raise in the task (`in_process_limits`); the memory and CPU bounds cannot hold there
(the worker's own memory and CPU time would count), and a worker refuses them at start.
"""

from __future__ import annotations

import math
import os
import resource
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import CpuLimitExceeded, SoftTimeLimitExceeded, TimeLimitExceeded
from ..protocol.bounds import Bounds

if TYPE_CHECKING:
    from ..models import Job

#: CPU seconds a task process has past its `cpu_limit` (SIGXCPU) before the kernel kills it
CPU_GRACE = 2
#: seconds between two reads of the memory of the task processes that have a bound
MEMORY_INTERVAL = 0.5
#: bytes of a kilobyte, as /proc and `ru_maxrss` count them on Linux
_KB = 1024
#: the signals that raise in a task's code (its soft time and CPU limits, its worker's
#: stop): held back while the task process waits for an answer of its worker, so that
#: an exception never leaves an answer unread on the line (see `relay.WorkerLink.ask`)
TASK_SIGNALS = {signal.SIGALRM, signal.SIGXCPU, signal.SIGUSR1}


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold back `TASK_SIGNALS` in this thread until the block ends (then delivered)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, TASK_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@dataclass(frozen=True)
class Usage:
    """What a task process used, as the kernel reported at its end."""

    peak_rss: int  # bytes: its peak resident memory (its waited-for children's included)
    cpu: float  # CPU seconds, user and system

    @classmethod
    def of(cls, rusage: Any) -> Usage:
        return cls(int(rusage.ru_maxrss) * _KB, float(rusage.ru_utime + rusage.ru_stime))


def cpu_used() -> float:
    """CPU seconds this process used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_memory() -> int:
    """The peak resident memory of this process or of a child it waited for (bytes)."""
    return max(resource.getrusage(who).ru_maxrss
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) * _KB


@contextmanager
def holding(bounds: Bounds, job: Job) -> Iterator[None]:
    """In a task process, around the task's code: its CPU limit and soft time limit; its
    peak memory is noted on `job` once it returned, for its outcome."""
    previous: dict[int, Any] = {}
    limit = None
    try:
        if bounds.cpu_limit is not None:
            limit = _limit_cpu(bounds.cpu_limit, previous)
        if bounds.soft_time_limit is not None:
            _arm_soft_limit(bounds.soft_time_limit, previous)
        yield
    finally:
        # what follows (the outcome, the hooks) is not cut short by a late signal: held
        # back, then ignored (which drops one pending), then the handlers of before
        with signals_deferred():
            signal.setitimer(signal.ITIMER_REAL, 0)
            for signum in previous:
                signal.signal(signum, signal.SIG_IGN)
        for signum, handler in previous.items():
            if signum != signal.SIGXCPU:
                signal.signal(signum, handler)
        job.measured_peak = peak_memory()
        if limit is not None:  # the grace left for what follows: up to the hard limit
            try:
                resource.setrlimit(resource.RLIMIT_CPU, (limit[1], limit[1]))
            except (ValueError, OSError):
                pass


def _limit_cpu(seconds: float, previous: dict[int, Any]) -> tuple[int, int]:
    """Set RLIMIT_CPU to `seconds` from now (the kernel counts whole seconds: rounded
    up), SIGXCPU raising `CpuLimitExceeded`; the limits set."""
    start = cpu_used()

    def over(signum: int, frame: Any) -> None:
        raise CpuLimitExceeded(seconds, cpu_used() - start)

    soft = math.ceil(start + seconds)
    hard = soft + CPU_GRACE
    _, current_hard = resource.getrlimit(resource.RLIMIT_CPU)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    previous[signal.SIGXCPU] = signal.signal(signal.SIGXCPU, over)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    return soft, hard


def _arm_soft_limit(seconds: float, previous: dict[int, Any]) -> None:
    def expire(signum: int, frame: Any) -> None:
        raise SoftTimeLimitExceeded(f"the task ran past its soft_time_limit of {seconds:g} "
                                    "seconds")

    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


@contextmanager
def in_process_limits(soft_time_limit: float | None,
                      max_run_time: float | None) -> Iterator[None]:
    """In the worker's own process: raise `SoftTimeLimitExceeded` in the task at its soft
    time limit, then `TimeLimitExceeded` at its `max_run_time` (one timer for both)."""
    deadlines = sorted((seconds, kind) for seconds, kind in (
        (soft_time_limit, "soft"), (max_run_time, "hard")) if seconds)
    if not deadlines:
        yield
        return
    pending = list(deadlines)
    elapsed = [0.0]

    def expire(signum: int, frame: Any) -> None:
        seconds, kind = pending.pop(0)
        elapsed[0] = seconds
        if kind == "hard":
            pending.clear()  # nothing after the hard limit
        if pending:
            signal.setitimer(signal.ITIMER_REAL, max(pending[0][0] - seconds, 0.001))
        if kind == "soft":
            raise SoftTimeLimitExceeded(f"the task ran past its soft_time_limit of "
                                        f"{seconds:g} seconds")
        raise TimeLimitExceeded(seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, deadlines[0][0])
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- in the worker: the memory of process groups ------------------------------------------
def group_members(groups: Iterable[int]) -> dict[int, list[int]]:
    """The pids of the processes of each process group in `groups` (a task process leads
    its own group: it and every process it started that did not leave it)."""
    wanted = set(groups)
    members: dict[int, list[int]] = {group: [] for group in wanted}
    if not wanted:
        return members
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:  # ended meanwhile
            continue
        # the name (in parentheses) may hold spaces: the fields follow its last ')'
        fields = text[text.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) in wanted:
            members[int(fields[2])].append(int(entry.name))
    return members


def private_memory(pid: int) -> int | None:
    """The bytes of memory `pid` holds on its own (private pages, resident or swapped
    out), not those it shares (as a forked task shares the worker's pages until it
    writes them); None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            lines = rollup.read().splitlines()
    except FileNotFoundError:
        return _statm_private(pid) if os.path.exists(f"/proc/{pid}") else None
    except OSError:
        return None
    total = 0
    for line in lines:
        name, _, rest = line.partition(b":")
        if name in (b"Private_Clean", b"Private_Dirty", b"Swap"):
            total += int(rest.split()[0]) * _KB
    return total


def _statm_private(pid: int) -> int | None:
    """Without smaps_rollup (Linux before 4.14): resident pages that are not shared."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            _, resident, shared = (int(value) for value in statm.read().split()[:3])
    except (OSError, ValueError):
        return None
    return max(resident - shared, 0) * os.sysconf("SC_PAGE_SIZE")


def group_memory(groups: Iterable[int]) -> dict[int, int]:
    """The private memory of each process group in `groups`, summed over its processes
    (bytes; 0 for a group with no process left)."""
    return {group: sum(private_memory(pid) or 0 for pid in pids)
            for group, pids in group_members(groups).items()}


def can_watch_memory() -> bool:
    """True where the memory of processes can be read (/proc, Linux)."""
    return os.path.isdir("/proc/self") and os.path.exists("/proc/self/stat")
