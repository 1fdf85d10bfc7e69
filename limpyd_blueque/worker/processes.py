"""Processes and waiting: forked task children, the lines between them and their
worker, wake-ups, and the heartbeat thread.

The worker uses these; models never do.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

import redis

from ..connection import shims
from ..exceptions import TaskKilled
from ..protocol.liveness import process_start_time

if TYPE_CHECKING:
    from redis.client import PubSub

#: what a task process is handed (`Reservation.to_payload()` and more), as JSON
Payload = dict[str, Any]

#: exit code of a task process that could not reach Redis to record its start or outcome
EXIT_REDIS_UNAVAILABLE = 75
#: a send to a process that died raises EPIPE, whatever the SIGPIPE handler of the program
_NO_SIGPIPE = getattr(socket, "MSG_NOSIGNAL", 0)


def describe_exit(status: int) -> TaskKilled:
    """Why a task process ended before recording an outcome: its signal, or its exit code."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return TaskKilled(f"the process running the task was killed by {name}", name)
    code = os.WEXITSTATUS(status)
    return TaskKilled(f"the process running the task exited with code {code} "
                      "without recording an outcome", f"exit-{code}")


def fork_child(target: Callable[[], int]) -> int:
    """Fork; the child leaves the worker's session, runs `target` and exits with its code.

    Its own session keeps the child out of the worker's terminal signals (a Ctrl-C
    in the worker's terminal does not reach it), so it can outlive the worker.
    """
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        code = target()
    except BaseException:  # the child must never return into the worker
        logging.getLogger(__name__).exception("task process %d crashed", os.getpid())
        code = 1
    finally:
        for handler in logging.getLogger().handlers + logging.getLogger("limpyd-blueque").handlers:
            try:
                handler.flush()
            except Exception:  # noqa: BLE001
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Channel:
    """One end of the line between a worker and one of its task processes: JSON messages,
    one per line, on a pair of connected Unix sockets (one end in each process).

    The worker sends the task (its payload), then the answers to the task process's
    requests; the task process sends its requests (see `relay`). The task process's side
    blocks; the worker's reads only what has arrived (`receive_ready`), so that it never
    waits on one process. Either side sees the other's death as the end of the line
    (`receive` returns None, `send` False).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()
        self.ended = False  # the other end closed (or the line broke)

    @classmethod
    def pair(cls) -> tuple[Channel, Channel]:
        """The worker's end and the task process's end of a new line."""
        worker_end, task_end = socket.socketpair()
        return cls(worker_end), cls(task_end)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Payload) -> bool:
        """Send `message` whole (blocking); False when the other end is gone."""
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n", _NO_SIGPIPE)
            return True
        except OSError:  # EPIPE, ECONNRESET, or this end closed
            self.ended = True
            return False

    def receive(self) -> Payload | None:
        """The next message (blocking); None once the other end is gone."""
        while b"\n" not in self._buffer:
            if not self._read(0):
                return None
        return self._next()

    def receive_ready(self) -> list[Payload]:
        """The messages that arrived whole, without waiting (`ended` tells when the other
        end is gone)."""
        while self._read(socket.MSG_DONTWAIT):
            pass
        messages = []
        while b"\n" in self._buffer:
            messages.append(self._next())
        return messages

    def _read(self, flags: int) -> bool:
        """Read what is there into the buffer; False when nothing more comes now."""
        if self.ended:
            return False
        try:
            chunk = self.sock.recv(1 << 20, flags)
        except BlockingIOError:
            return False
        except OSError:  # ECONNRESET: the other end died with our data unread
            chunk = b""
        if not chunk:
            self.ended = True
            return False
        self._buffer += chunk
        return True

    def _next(self) -> Payload:
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        message: Payload = json.loads(line)
        return message

    def close(self) -> None:
        self.sock.close()
        self.ended = True


class Spare:
    """A task process forked ahead of its task, waiting for it on its channel.

    Forking costs milliseconds; a worker keeps one spare ready so that a task starts
    as soon as it is reserved, in a process of its own all the same. `body(channel)`
    runs in the spare, with the task process's end of the line; `hand_over` sends it its
    task, and the line then stays open for the task's life (`channel`, the worker's end).
    Closing the line (or the worker's death) makes an idle spare exit. `inherited` are
    the worker's ends of the lines of its other task processes: the spare closes its
    copies at once, so that a task process sees the end of its own line when its worker
    dies, whichever spares the worker forked after it.
    """

    def __init__(self, body: Callable[[Channel], int],
                 inherited: Iterable[Channel] = ()) -> None:
        self.channel, task_end = Channel.pair()
        others = list(inherited)
        self.pid = fork_child(lambda: self._run(task_end, [self.channel, *others], body))
        task_end.close()
        # read now, while the previous task still runs: read at the next reservation it
        # would wait on the path of that task (measured: 263 against 244 tasks/s)
        self._pstart: str | None = process_start_time(self.pid)

    @property
    def pstart(self) -> str | None:
        """The spare's start time, to tell it from a later process with its pid."""
        if self._pstart is None:
            self._pstart = process_start_time(self.pid)
        return self._pstart

    @staticmethod
    def _run(task_end: Channel, workers_ends: list[Channel],
             body: Callable[[Channel], int]) -> int:
        for channel in workers_ends:
            channel.close()
        return body(task_end)

    def hand_over(self, payload: Payload) -> bool:
        """Send the spare its task; False if the spare is gone (its line is then closed)."""
        if self.channel.send(payload):
            return True
        self.close()
        return False

    def close(self) -> None:
        self.channel.close()


class DoneNotices:
    """A pipe on which task processes tell their worker how far they are.

    `RECORDED`: the outcome is in Redis; the worker stops renewing the lease and must
    not take the task for lost (it may have requeued itself). `DONE`: the hooks ran too;
    the worker frees the slot at once, without waiting for the process to exit and be
    reaped (it is reaped later, quietly). `ASKING`: a request follows on the process's
    own channel (see `Channel`): the worker reads that channel, and only that one, until
    the request has come whole.
    """

    RECORDED = "R"
    DONE = "D"
    ASKING = "A"

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        os.set_blocking(self.read, False)

    def notify(self, kind: str) -> None:
        """In a task process: say `kind` (an atomic write of a few bytes)."""
        os.write(self.write, f"{kind}{os.getpid()}\n".encode())

    def collect(self) -> list[tuple[str, int]]:
        """In the worker: the `(kind, pid)` notices given since the last call."""
        data = b""
        try:
            while True:
                chunk = os.read(self.read, 4096)
                if not chunk:
                    break
                data += chunk
        except BlockingIOError:
            pass
        return [(notice[:1].decode(), int(notice[1:])) for notice in data.split()]

    def close(self) -> None:
        for fd in (self.read, self.write):
            os.close(fd)


def reap(pids: Iterable[int]) -> list[tuple[int, int, Any]]:
    """`(pid, wait status, resource usage)` of the given children that have ended,
    without blocking."""
    ended = []
    for pid in list(pids):
        try:
            done, status, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if done:
            ended.append((pid, status, usage))
    return ended


def signal_group(pid: int | None, signum: int) -> bool:
    """Send `signum` to the process group a task child leads; False if it is gone (or
    its pid is not known)."""
    if pid is None:
        return False
    try:
        os.killpg(pid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


class WakeUps:
    """Waits until a task is announced on the worker's queues, a signal arrives, or time passes.

    Enqueue steps publish on each queue's wake-up channel; signals (SIGCHLD, SIGTERM...)
    write to a pipe through `signal.set_wakeup_fd`. One `select` watches both, so an
    idle worker reacts within milliseconds without polling.
    """

    def __init__(self, client: redis.Redis, channels: Iterable[str],
                 also: Callable[[], Iterable[int]] = tuple) -> None:
        self.client = client
        self.channels = list(channels)
        # the other descriptors that end a wait (read by their owner), asked at each wait
        self.also = also
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write)
        self.pubsub: PubSub | None = None
        self._subscribe()

    def _subscribe(self) -> PubSub | None:
        """Subscribe to the channels; None when Redis cannot be reached now."""
        pubsub: PubSub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(*self.channels)
        except (redis.ConnectionError, redis.TimeoutError):
            pubsub.close()
            self.pubsub = None
            return None
        self.pubsub = pubsub
        return pubsub

    def _drain(self, pubsub: PubSub) -> bool:
        woken = False
        try:
            while os.read(self._read, 512):
                woken = True
        except BlockingIOError:
            pass
        while pubsub.get_message(timeout=0) is not None:
            woken = True
        return woken

    def wait(self, timeout: float) -> None:
        """Return when woken up, or after `timeout` seconds."""
        pubsub = self.pubsub if self.pubsub is not None else self._subscribe()
        if pubsub is None:
            time.sleep(min(timeout, 1.0))  # Redis is away: the caller retries later
            return
        try:
            if self._drain(pubsub):
                return
            sock = shims.pubsub_socket(pubsub)
            with selectors.DefaultSelector() as selector:
                selector.register(self._read, selectors.EVENT_READ)
                for fd in self.also():
                    selector.register(fd, selectors.EVENT_READ)
                if sock is not None:
                    selector.register(sock, selectors.EVENT_READ)
                selector.select(max(timeout, 0))
            self._drain(pubsub)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
            if isinstance(error, OSError) and error.errno not in (errno.EBADF, errno.EPIPE, None):
                raise
            # the subscription is lost (Redis restarted): subscribe again at the next wait
            try:
                pubsub.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass
            self.pubsub = None
            time.sleep(min(timeout, 1.0))

    def wake(self) -> None:
        """End the wait in progress (or the next one) at once; any thread may call it."""
        try:
            os.write(self._write, b"!")
        except (BlockingIOError, OSError):
            pass  # the pipe is full (a wake-up is pending anyway) or closed

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        for fd in (self._read, self._write):
            os.close(fd)
        if self.pubsub is not None:
            try:
                self.pubsub.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass


class Heartbeat(threading.Thread):
    """Renews leases: calls `beat` every `interval()` seconds, at once when nudged.

    It runs in the worker process on its own Redis connection, so neither a busy task
    nor a fork ever shares its socket. `interval` is asked again before each wait, so a
    task with a short lease shortens the wait; `nudge` ends the current wait.
    """

    def __init__(self, interval: Callable[[], float], beat: Callable[[], None],
                 name: str = "limpyd-blueque-heartbeat") -> None:
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.beat = beat
        self.stopping = threading.Event()
        self._woken = threading.Event()
        self.waiting = interval()  # the wait in progress (seconds)

    def run(self) -> None:
        while True:
            self.waiting = self.interval()
            self._woken.wait(self.waiting)
            self._woken.clear()
            if self.stopping.is_set():
                return
            try:
                self.beat()
            except Exception:  # a missed beat is retried at the next one
                logging.getLogger(__name__).exception("heartbeat failed; retrying")

    def nudge(self, within: float) -> None:
        """Beat now if the wait in progress is longer than `within` seconds."""
        if self.waiting > within:
            self._woken.set()

    def stop(self) -> None:
        self.stopping.set()
        self._woken.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)
