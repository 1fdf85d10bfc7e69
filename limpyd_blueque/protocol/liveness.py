"""Who is alive: this host's identity, process identity, and whether a listener is dead.

One home for these facts, used by the worker (adoption), the cleaning and the drop-in
client alike.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, cast

import psutil
from redis.exceptions import ResponseError

from ..connection.errors import reaching

if TYPE_CHECKING:
    from redis import Redis

    from .keys import KeySpace


def host_name() -> str:
    """This machine's name for listener ids: its FQDN, as the reference uses, unless that
    is a `localhost` alias shared by many machines, then its host name."""
    name = socket.getfqdn()
    if name.split(".")[0] in ("localhost", "localhost6", "ip6-localhost"):
        name = socket.gethostname()
    return name


def is_this_host(name: str) -> bool:
    """True if `name` names this machine, as a worker or the reference client would."""
    return name in {host_name(), socket.getfqdn(), socket.gethostname()}


def listener_id_for(pid: int | None = None, host: str | None = None) -> str:
    """The Blueque listener id of a worker process: `<host>_<pid>`."""
    return f"{host or host_name()}_{os.getpid() if pid is None else pid}"


#: the orders an operator may give a live worker (`Queue.tell_worker`): take no new task,
#: or stop as on SIGTERM
WORKER_ORDERS = ("quiet", "stop")

_OWN_START: dict[int, str | None] = {}


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return None


BOOT_ID = _boot_id()


def _machine_id() -> str:
    """Where pids mean the same processes: the kernel's boot, the pid namespace, the
    installation (`/etc/machine-id`) and the host name, all alike.

    Two containers on one host share a boot id but not their pids, and virtual machines
    cloned from one memory image may share a boot id: a worker must never judge another's
    process by a pid of another machine or namespace. The environment variable
    `LIMPYD_BLUEQUE_MACHINE_ID` overrides it (for platforms where neither can be read).
    """
    given = os.environ.get("LIMPYD_BLUEQUE_MACHINE_ID")
    if given:
        return given
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    try:  # the installation, apart from the boot: VMs cloned from one image share a boot
        with open("/etc/machine-id") as handle:
            installed = handle.read().strip()
    except OSError:
        installed = ""
    return f"{BOOT_ID or ''}/{namespace}/{installed}/{socket.gethostname()}"


#: this machine, as far as pids are concerned (see `_machine_id`)
MACHINE_ID = _machine_id()


def process_start_time(pid: int) -> str | None:
    """A mark of when process `pid` started, or None if there is no such process.

    Two processes given the same pid have different marks. On Linux the mark is the
    boot id and the start in clock ticks since boot (field 22 of /proc/<pid>/stat):
    neither moves when the wall clock is stepped (NTP, a resumed VM), whereas psutil's
    start time is rebuilt from the current boot time and moves with it, which would
    make a days-long task's process look like another one. Elsewhere, psutil's start
    time (epoch seconds).
    """
    if pid == os.getpid():  # asked for each in-process task: read it once per process
        if pid not in _OWN_START:
            _OWN_START[pid] = _read_start_mark(pid)
        return _OWN_START[pid]
    return _read_start_mark(pid)


def _read_start_mark(pid: int) -> str | None:
    if BOOT_ID is not None:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            return None
        # the command name (field 2) may hold spaces and parentheses: count after it
        ticks = stat[stat.rindex(b")") + 2:].split()[19].decode()
        return f"{BOOT_ID}:{ticks}"
    try:
        return repr(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _same_start(mark: str, other: str | None) -> bool:
    if other is None:
        return False
    if ":" in mark or ":" in other:
        return mark == other
    return abs(float(mark) - float(other)) < 0.05  # psutil's epoch seconds


def process_alive(pid: int | None, started: str | None = None) -> bool:
    """True if process `pid` runs and, when `started` is given, is the one started then.

    Comparing start marks (see `process_start_time`) tells a task's process from a later
    one that got its pid.
    """
    if not pid:
        return False
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True
    return started is None or _same_start(started, process_start_time(pid))


# -- is a listener dead? ----------------------------------------------------------------------
def listener_host_and_pid(listener_id: str) -> tuple[str, int | None]:
    """The host and pid of a listener id `<host>_<pid>` (pid None if not digits)."""
    host, _, pid = listener_id.rpartition("_")
    return host, int(pid) if pid.isdigit() else None


def worker_records(client: Redis, keys: KeySpace) -> dict[str, float]:
    """`{listener id: time until which it is alive}` for the workers of this library.

    Read from the sorted set `keys.workers`, where each worker, at every heartbeat, says it
    is alive until its liveness timeout ahead (Redis's clock). No record when that key holds
    another type. `RedisUnavailable` when Redis cannot be reached.
    """
    with reaching(client):
        try:
            pairs = client.zrange(keys.workers, 0, -1, withscores=True)
        except ResponseError:
            return {}
    return dict(cast("list[tuple[str, float]]", pairs))


def server_time(client: Redis) -> float:
    """Redis's clock (`TIME`), which worker records are scored by: hosts' clocks may differ."""
    with reaching(client):
        seconds, micros = client.time()
    return seconds + micros / 1e6


def listener_is_dead(listener_id: str, alive_until: dict[str, float], now: float) -> bool:
    """True when the listener `<host>_<pid>` surely stopped.

    `alive_until` holds the worker records (see `worker_records`), `now` is Redis's time
    (`server_time`): the records are scored by Redis's clock.

    * A listener whose worker record says it is alive (`alive_until[id] > now`) is alive,
      on any host: two machines may share a host name.
    * Otherwise a listener on this host (`is_this_host`) is dead if and only if its pid
      names no live process (`process_alive`); a listener whose pid is not digits is
      never known dead.
    * Otherwise (another host) it is dead if and only if it has an expired worker record:
      a worker of this library that stopped beating. Another client's listener on another
      host, which has no record, is not known dead: nothing here can tell.
    """
    if alive_until.get(listener_id, 0) > now:
        return False
    host, pid = listener_host_and_pid(listener_id)
    if is_this_host(host):
        return pid is not None and not process_alive(pid)
    return listener_id in alive_until
