"""`Error`: a stored task failure, to filter by date, type, code, queue or job."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from limpyd import fields
from limpyd.contrib.collection import ExtendedCollectionManager
from limpyd.indexes import EqualIndex, TextRangeIndex

from .. import compat
from ..connection import reaching
from ..exceptions import ConfigurationError
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
    def error_values(cls, queue_name: str, job: Job, error: BaseException,
                     when: datetime | None = None, trace: str | None = None,
                     **additional_fields: Any) -> dict[str, str]:
        """The fields of the `Error` record of `error`, raised by `job` of `queue_name`."""
        when = when or datetime.now(timezone.utc)
        values = {
            "queue_name": queue_name,
            "job_pk": job.task_id,
            # read from the hash only when the job has no reservation (its fields known)
            "identifier": (job.known.get("identifier") if job.task is not None
                           else job.identifier.hget()) or "",
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
        values.update({name: str(value) for name, value in additional_fields.items()})
        return values

    @classmethod
    def add_error(cls, queue_name: str, job: Job, error: BaseException,
                  when: datetime | None = None, trace: str | None = None,
                  **additional_fields: Any) -> Error:
        """Store `error` raised by `job` of `queue_name`, at `when` (default: now, UTC).

        Two round trips: see `add_errors`.
        """
        values = cls.error_values(queue_name, job, error, when, trace, **additional_fields)
        return cls.lazy_connect(cls.add_errors([values])[0])

    @classmethod
    def add_errors(cls, records: Sequence[dict[str, str]]) -> list[str]:
        """Store many error records (field values), indexed; return their pks.

        Two round trips whatever their number: one reserves the pks, one transaction
        writes every hash, the collection and every index entry, through limpyd's own
        index objects (limpyd alone would take a lock and several round trips per
        indexed field of each record).
        """
        for values in records:
            unknown = [name for name in values if not cls.has_field(name) or name == "pk"]
            if unknown:
                raise ConfigurationError(f"unknown Error field(s): {', '.join(sorted(unknown))}")
        if not records:
            return []
        connection = cls.get_connection()
        with reaching(connection):
            last = connection.incrby(compat.model_key(cls, "max_pk"), len(records))
            pks = [str(pk) for pk in range(last - len(records) + 1, last + 1)]
            collection = cls.get_field("pk").collection_key
            with cls.database.pipeline(transaction=True) as pipe:
                for pk, values in zip(pks, records):
                    mapping: dict[Any, str] = values  # redis-py types keys as its own union
                    pipe.hset(compat.model_key(cls, pk, "hash"), mapping=mapping)
                    pipe.sadd(collection, pk)
                    for name, value in values.items():
                        compat.index_value(cls.get_class_field(name), pk, value)
                pipe.execute()
        return pks

    @classmethod
    def collection_for_job(cls, job: Job | str) -> Any:
        """The errors of a task, newest first."""
        task_id = job if isinstance(job, str) else job.pk.get()
        return cls.collection(job_pk=task_id).sort(by="-timestamp")

    @property
    def datetime(self) -> datetime:
        """When the error happened (UTC)."""
        timestamp = self.timestamp.hget()
        if timestamp is None:
            raise TypeError(f"error {self.pk.get()!r} has no timestamp")
        return datetime.fromtimestamp(float(timestamp), timezone.utc)
