"""What one task costs the Redis server, counted in CPU instructions rather than timed.

Timings of microseconds move by 15-30 % between two runs on a shared machine; the
number of instructions redis-server executes for the same work does not (within 0.5 %).
This runs redis-server under valgrind's callgrind, with counting switched on only while
the measured steps run, and reads the totals and where they went:

* limpyd-blueque: plain tasks (no option) enqueued untimed, then reserved and completed
  as an in-process worker does (``Queue.reserve_from`` then ``Job.complete``, both with a
  tally), in batches of 50; the reserve step and the finish step are counted in two runs
  of their own, and a third counts both for tasks that all have a group;
* the floor (``peers/floor.py``): the same Blueque steps by hand, one Lua script each.

The breakdown splits a step's instructions by the server function that spent them: the
commands themselves, the script's command calls around them (``redis.call``), the
``KEYS``/``ARGV`` tables made at every call, the conversion of the script's reply, the
functions (closures) a script defines at each call, and the rest of the Lua interpreter;
the Lua garbage collector's share, which runs inside those parts, is given beside them.
Needs valgrind (``apt-get install valgrind``); writes ``bench/results/server_cost.json``,
which docs_page.py puts on the page.

    python3 bench/server_cost.py            # ~1 minute
    python3 bench/server_cost.py --tasks 300
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import redis  # noqa: E402

from limpyd_blueque import Queue, use_redis  # noqa: E402
from limpyd_blueque.embedded import find_redis_server, free_port  # noqa: E402
from limpyd_blueque.protocol.statistics import Tally  # noqa: E402

LISTENER = "bench.cost_1"
BATCH = 50
#: the parts of a step's instructions, each the inclusive count of one server function
#: (callgrind's names), the parts below it subtracted where they nest
PARTS = {
    "commands": "call'2",  # a command run by a script, as Redis runs any command
    "command calls": "luaRedisGenericCommand",  # redis.call / redis.pcall, around them
    "KEYS and ARGV": "luaSetGlobalArray",
    "reply": "luaReplyToRedisReply",
    "garbage collection": "luaC_step",
    "closures": ("luaF_newLclosure", "luaF_findupval", "luaF_close"),
    "script in all": "evalGenericCommand",
}


class Counted:
    """A redis-server under callgrind, counting only between `on()` and `off()`."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="bench-cost-")
        self.output = f"{self.folder}/callgrind.out"
        self.port = free_port()
        self.process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={self.output}", find_redis_server(), "--port",
             str(self.port), "--save", "", "--appendonly", "no", "--dir", self.folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        client = redis.Redis.from_url(self.url)
        for _ in range(600):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        client.close()

    def _control(self, switch: str) -> None:
        subprocess.run(["callgrind_control", "-i", switch, str(self.process.pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    def on(self) -> None:
        self._control("on")

    def off(self) -> None:
        self._control("off")

    def close(self) -> dict[str, int]:
        """Stop the server; the inclusive instructions of each server function."""
        self.process.terminate()
        self.process.wait(60)
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", self.output],
            capture_output=True, text=True, check=True).stdout
        shutil.rmtree(self.folder, ignore_errors=True)
        counts: dict[str, int] = {}
        for line in annotated.splitlines():
            match = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.+)", line)
            if match and match[2].strip() == "PROGRAM TOTALS":
                counts["total"] = int(match[1].replace(",", ""))
            elif match:
                name = match[2].split()[0].split(":")[-1]
                # a compiler's copies of one function (`f.part.0`, `f.constprop.0`) as `f`
                name = re.sub(r"\.(part|constprop|isra)\.\d+", "", name)
                counts[name] = max(counts.get(name, 0), int(match[1].replace(",", "")))
        return counts


def breakdown(counts: dict[str, int], tasks: int) -> dict[str, float]:
    """Instructions per task: the total, each part of `PARTS`, and the rest of Lua."""
    def inclusive(names: str | tuple[str, ...]) -> int:
        return sum(counts.get(name, 0) for name in ((names,) if isinstance(names, str)
                                                     else names))

    parts = {name: inclusive(names) / tasks for name, names in PARTS.items()}
    parts["command calls"] -= parts["commands"]
    # the collector runs where memory is asked for: its line is also counted in the parts
    # where it ran (the calls' replies, KEYS and ARGV, the interpreter)
    parts["rest of Lua"] = parts["script in all"] - sum(
        parts[name] for name in ("commands", "command calls", "KEYS and ARGV", "reply",
                                 "closures"))
    parts["outside scripts"] = counts.get("total", 0) / tasks - parts["script in all"]
    parts["total"] = counts.get("total", 0) / tasks
    return parts


def blueque_steps(tasks: int, counted_step: str, grouped: bool = False) -> dict[str, float]:
    """Instructions per task of `counted_step` ('reserve', 'finish' or 'both')."""
    server = Counted()
    try:
        use_redis(server.url)
        queue = Queue.named("cost")
        tally = Tally(interval=float("inf"))
        options = ([{"group": f"customer:{n % 10}"} for n in range(tasks)]
                   if grouped else None)
        for counting in (False, True):  # a first round loads the scripts, uncounted
            queue.enqueue_many([{"n": n} for n in range(tasks)], options=options)
            for _ in range(tasks // BATCH):
                if counting and counted_step in ("reserve", "both"):
                    server.on()
                jobs = [Queue.reserve_from(["cost"], LISTENER, pid=os.getpid(), tally=tally,
                                           unlimited=("cost",))[0] for _ in range(BATCH)]
                if counting and counted_step == "reserve":
                    server.off()
                if counting and counted_step == "finish":
                    server.on()
                for job in reversed(jobs):
                    job.complete("0", listener_id=LISTENER, tally=tally)
                if counting and counted_step in ("finish", "both"):
                    server.off()
    finally:
        counts = server.close()
    return breakdown(counts, tasks // BATCH * BATCH)


def floor_steps(tasks: int) -> dict[str, float]:
    """Instructions per task of the floor's reserve and complete steps."""
    from peers.floor import COMPLETE, ENQUEUE, RESERVE

    server = Counted()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        enqueue, reserve, complete = (client.register_script(text)
                                      for text in (ENQUEUE, RESERVE, COMPLETE))
        pid = str(os.getpid())

        def key(*parts: str) -> str:
            return "_".join(("blueque", *parts))

        for counting in (False, True):
            for n in range(tasks):
                task_id = str(uuid.uuid4())
                enqueue(keys=[key("queues"), key("pending_tasks", "cost"), key("task", task_id)],
                        args=["cost", repr(time.time()), "blueque:wake:cost", task_id,
                              json.dumps({"n": n})])
            if counting:
                server.on()
            for _ in range(tasks // BATCH):
                ids = [reserve(keys=[key("pending_tasks", "cost"),
                                     key("reserved_tasks", "cost", LISTENER),
                                     key("started_tasks", "cost")],
                               args=["blueque_task_", LISTENER, pid, repr(time.time())])[0]
                       for _ in range(BATCH)]
                for task_id in reversed(ids):
                    complete(keys=[key("task", task_id), key("reserved_tasks", "cost", LISTENER),
                                   key("started_tasks", "cost"), key("complete_tasks", "cost")],
                             args=[task_id, LISTENER, pid, "0", repr(time.time())])
            if counting:
                server.off()
        client.close()
    finally:
        counts = server.close()
    return breakdown(counts, tasks // BATCH * BATCH)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks counted per run")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "server_cost.json")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        print("server_cost: valgrind is not installed (apt-get install valgrind): skipped")
        return 0
    report = {"tasks": args.tasks, "batch": BATCH, "redis_server": find_redis_server(),
              "steps": {"reserve": blueque_steps(args.tasks, "reserve"),
                        "finish": blueque_steps(args.tasks, "finish"),
                        "both": blueque_steps(args.tasks, "both"),
                        "grouped": blueque_steps(args.tasks, "both", grouped=True),
                        "floor": floor_steps(args.tasks)}}
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    steps = report["steps"]
    print(f"instructions per task: reserve {steps['reserve']['total']:,.0f}, finish "
          f"{steps['finish']['total']:,.0f}, both {steps['both']['total']:,.0f} "
          f"({steps['both']['total'] / steps['floor']['total']:.2f} x the floor's "
          f"{steps['floor']['total']:,.0f}); a task of a group {steps['grouped']['total']:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
