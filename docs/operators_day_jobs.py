"""The tasks of docs/operators_day.py, in a module its workers import by name."""

from __future__ import annotations

import json
import time

from limpyd_blueque import Job


class MonthlyReport(Job):
    """A long task: 400 pages, a checkpoint every 50, its progress all along."""

    def run(self, queue):
        pages = 1200
        start = self.last_checkpoint() or 0
        for page in range(start, pages):
            time.sleep(0.05)  # rendering one page
            self.set_progress(page + 1, pages, f"page {page + 1} of {pages}")
            if (page + 1) % 50 == 0:
                self.checkpoint(page + 1)
        return {"pages": pages}


class Import(Job):
    """A short task that fails on a file it cannot read."""

    def run(self, queue):
        name = json.loads(self.known["parameters"])["file"]
        if name.endswith(".xls") and not self.connection.exists("demo:xls-supported"):
            raise ValueError(f"{name}: spreadsheet format not supported")
        return {"rows": 120}
