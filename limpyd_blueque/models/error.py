"""`Error`: a stored task failure, to filter by date, type, code, queue or job."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from limpyd import fields
from limpyd.contrib.collection import ExtendedCollectionManager
from limpyd.indexes import EqualIndex, TextRangeIndex

from .base import BluequeModel
from .job import Job


class Error(BluequeModel):
    """A stored task failure, to filter by date, type, code, queue or job.

    Keys are limpyd's own, in this library's key family: `<prefix>:error:...`.
    """

    collection_manager = ExtendedCollectionManager

    queue_name = fields.InstanceHashField(indexable=True)
    job_pk = fields.InstanceHashField(indexable=True)
    identifier = fields.InstanceHashField(indexable=True)
    date = fields.InstanceHashField(indexable=True, indexes=[EqualIndex, TextRangeIndex])
    time = fields.InstanceHashField()
    timestamp = fields.InstanceHashField()
    type = fields.InstanceHashField(indexable=True)
    code = fields.InstanceHashField(indexable=True)
    message = fields.InstanceHashField()
    traceback = fields.InstanceHashField()
    attempt = fields.InstanceHashField()

    @classmethod
    def add_error(cls, queue_name: str, job: Job, error: BaseException,
                  when: datetime | None = None, trace: str | None = None,
                  **additional_fields: Any) -> "Error":
        """Store `error` raised by `job` of `queue_name`, at `when` (default: now, UTC)."""
        when = when or datetime.now(timezone.utc)
        values = {
            "queue_name": queue_name,
            "job_pk": job.pk.get(),
            "identifier": job.known.get("identifier") or job.identifier.hget() or "",
            "date": when.strftime("%Y-%m-%d"),
            "time": when.strftime("%H:%M:%S.%f"),
            "timestamp": repr(when.timestamp()),
            "type": type(error).__name__,
            "message": str(error),
            "attempt": job.known.get("attempt", ""),
        }
        code = getattr(error, "code", None)
        if code is not None:
            values["code"] = str(code)
        if trace:
            values["traceback"] = trace
        values.update(additional_fields)
        return cls(**values)

    @classmethod
    def collection_for_job(cls, job: Job | str) -> Any:
        """The errors of a task, newest first."""
        task_id = job if isinstance(job, str) else job.pk.get()
        return cls.collection(job_pk=task_id).sort(by="-timestamp")

    @property
    def datetime(self) -> datetime:
        """When the error happened (UTC)."""
        return datetime.fromtimestamp(float(self.timestamp.hget()), timezone.utc)
