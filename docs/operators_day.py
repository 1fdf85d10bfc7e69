"""Play an operator's day on a private Redis and print what each `blueque` command shows.

docs/operating.rst quotes its output. Run it again after changing a command:

    python3 docs/operators_day.py > /tmp/day.txt

It starts a redis-server of its own (see `limpyd_blueque.connection.embedded`), two `blueque-worker`
processes running the tasks below, then the commands an operator would type.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from limpyd_blueque import Queue, use_redis
from limpyd_blueque.connection.embedded import EmbeddedRedis

HERE = Path(__file__).resolve().parent


def worker(url: str, queues: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "limpyd_blueque.cli", f"--redis-url={url}",
         f"--pythonpath={HERE}", f"--queues={queues}",
         "--job-model=operators_day_jobs.MonthlyReport", "--job-models=operators_day_jobs.Import",
         "--concurrency=3", "--stall-timeout=30", "--on-terminate=requeue",
         "--logger-level=WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def show(url: str, *arguments: str) -> str:
    """Run `blueque ARGUMENTS`, print it as an operator sees it, return its output."""
    command = [sys.executable, "-m", "limpyd_blueque.admin", *arguments]
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "REDIS_URL": url, "COLUMNS": "100"})
    print(f"$ blueque {' '.join(arguments)}")
    print(result.stdout.rstrip() or result.stderr.rstrip())
    print()
    return result.stdout


def main() -> None:
    with EmbeddedRedis() as server:
        url = server.url
        use_redis(url)
        sys.path.insert(0, str(HERE))
        import operators_day_jobs as day  # the names the workers know the models by

        reports, imports = Queue.named("reports"), Queue.named("imports")
        for month in ("2026-08", "2026-09", "2026-10"):
            reports.enqueue({"month": month}, model=day.MonthlyReport)
        for name in ("orders.csv", "stock.xls", "prices.csv", "returns.xls"):
            imports.enqueue({"file": name}, model=day.Import)
        workers = [worker(url, "reports"), worker(url, "imports")]
        try:
            time.sleep(4)
            show(url, "stats")
            show(url, "workers")
            show(url, "watch", "reports", "--iterations=1")
            started = show(url, "tasks", "--queue=reports", "--status=started", "--json")
            ids = [row["id"] for row in json.loads(started)["tasks"]]
            show(url, "tasks", "--queue=reports")
            show(url, "inspect", ids[0])
            show(url, "cancel", ids[-1])
            time.sleep(2)
            show(url, "tasks", "--queue=reports", "--status=canceled")
            show(url, "errors", "--queue=imports", "--type=ValueError")
            server_client = Queue.client()
            server_client.set("demo:xls-supported", 1)  # the fix is deployed
            show(url, "requeue", "--failed", "--queue=imports")
            time.sleep(1)
            show(url, "stats", "imports")
        finally:
            for process in workers:
                process.terminate()
            for process in workers:
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
