"""`Error`: a stored task failure, to filter by date, type, code, queue or job."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import suppress
from datetime import datetime, timezone
from typing import Any, cast

from limpyd import fields
from limpyd.contrib.collection import ExtendedCollectionManager
from limpyd.indexes import EqualIndex, TextRangeIndex
from redis.exceptions import ResponseError

from ..connection import shims
from ..connection.errors import reaching
from ..exceptions import ConfigurationError
from ..protocol.options import FOREVER
from ..protocol.values import MAX_SECONDS, shown
from .base import BluequeModel
from .job import Job
from .waiting import register_errors


class Error(BluequeModel):
    """A stored task failure, to filter by date, type, code, queue or job.

    Keys are limpyd's own, in this library's key family: `<prefix>:error:...`; in the
    cluster key mode `{<prefix>}:error:...`, every one of them in one slot (so that its
    indexes, collections and sorts meet there; Redis 7.0 or later sorts by a pattern of
    one slot).
    """

    collection_manager = ExtendedCollectionManager
    in_one_slot = True

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
    def error_values(cls, queue_name: str, job: Job | None, error: BaseException,
                     when: datetime | None = None, trace: str | None = None,
                     **additional_fields: Any) -> dict[str, str]:
        """The fields of the `Error` record of `error`, raised by `job` of `queue_name`
        (None: met by the queue itself, no task's; its `job_pk` is then empty)."""
        when = when or datetime.now(timezone.utc)
        values = {
            "queue_name": queue_name,
            "job_pk": job.task_id if job is not None else "",
            # read from the hash only when the job has no reservation (its fields known)
            "identifier": "" if job is None else (
                job.known.get("identifier") if job.task is not None
                else job.identifier.hget()) or "",
            "date": when.strftime("%Y-%m-%d"),
            "time": when.strftime("%H:%M:%S.%f"),
            "timestamp": repr(when.timestamp()),
            "type": type(error).__name__,
            "message": str(error),
            "attempt": job.known.get("attempt", "") if job is not None else "",
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
                  ttl: float | None = None, **additional_fields: Any) -> Error:
        """Store `error` raised by `job` of `queue_name`, at `when` (default: now, UTC).

        `ttl`: seconds after `when` until the error is deleted by the workers' cleaning
        (`-1` or None: kept forever). Two round trips: see `add_errors`.
        """
        values = cls.error_values(queue_name, job, error, when, trace, **additional_fields)
        return cls.lazy_connect(cls.add_errors([values], ttls=[ttl])[0])

    @classmethod
    def add_queue_error(cls, queue_name: str, error: BaseException,
                        ttl: float | None = None) -> Error:
        """Store `error`, met by the queue `queue_name` itself rather than by one of its
        tasks (its `job_pk` is empty); see `add_error`."""
        values = cls.error_values(queue_name, None, error)
        return cls.lazy_connect(cls.add_errors([values], ttls=[ttl])[0])

    @classmethod
    def add_errors(cls, records: Sequence[dict[str, str]],
                   ttls: Sequence[float | None] | None = None) -> list[str]:
        """Store many error records (field values), indexed; return their pks.

        `ttls`, one per record (seconds, `-1` or None: kept forever), give each record its
        deletion time, its `timestamp` plus its ttl, in `expiry_key()` (see
        `retention.clean_errors`). Raises `ConfigurationError` for an unknown field or a
        bad ttl, before anything is written.

        Two round trips whatever their number: one reserves the pks, one transaction
        writes every hash, the collection, every index entry (through limpyd's own index
        objects: limpyd alone would take a lock and several round trips per indexed field
        of each record) and every expiry entry.
        """
        for values in records:
            unknown = [name for name in values if not cls.has_field(name) or name == "pk"]
            if unknown:
                raise ConfigurationError(f"unknown Error field(s): {', '.join(sorted(unknown))}")
        deadlines = cls._deadlines(records, ttls)
        if not records:
            return []
        connection = cls.get_connection()
        with reaching(connection):
            last = connection.incrby(shims.model_key(cls, "max_pk"), len(records))
            pks = [str(pk) for pk in range(last - len(records) + 1, last + 1)]
            collection = cls.get_field("pk").collection_key
            with cls._writing() as pipe:
                for pk, values, deadline in zip(pks, records, deadlines):
                    mapping: dict[Any, str] = values  # redis-py types keys as its own union
                    pipe.hset(shims.model_key(cls, pk, "hash"), mapping=mapping)
                    pipe.sadd(collection, pk)
                    for name, value in values.items():
                        shims.index_value(cls.get_class_field(name), pk, value)
                    if deadline is not None:
                        pipe.zadd(cls.expiry_key(), {pk: deadline})
                pipe.execute()
        return pks

    @classmethod
    def _writing(cls) -> Any:
        """What the records are written in: a transaction on one Redis (limpyd's
        pipeline, which its index objects write into too); in the cluster key mode, where
        neither limpyd's pipeline nor a transaction is offered, each command as it comes,
        on the node of their one slot (a few round trips per record: errors are rare; a
        connection lost midway may leave a record half indexed, which the retention of
        errors deletes as any other)."""
        if cls.keys().cluster:
            return _AtOnce(cls.get_connection())
        return cls.database.pipeline(transaction=True)

    @classmethod
    def _deadlines(cls, records: Sequence[Mapping[str, str]],
                   ttls: Sequence[float | None] | None) -> list[float | None]:
        """When each record is to be deleted (None: never), from its ttl; checks the ttls."""
        if ttls is None:
            return [None] * len(records)
        if len(ttls) != len(records):
            raise ConfigurationError(f"{len(ttls)} error ttl(s) given for {len(records)} "
                                     "error record(s): give one per record")
        deadlines: list[float | None] = []
        for values, ttl in zip(records, ttls):
            if ttl is None or (ttl == FOREVER and not isinstance(ttl, bool)):
                deadlines.append(None)
                continue
            if (isinstance(ttl, bool) or not isinstance(ttl, (int, float))
                    or not 0 <= ttl <= MAX_SECONDS):  # NaN fails the comparison too
                raise ConfigurationError(f"error ttl must be -1 (keep forever) or seconds "
                                         f"from 0 to {MAX_SECONDS}, not {shown(ttl)}")
            deadlines.append(_moment(values.get("timestamp")) + ttl)
        return deadlines

    @classmethod
    def delete_errors(cls, pks: Iterable[str]) -> int:
        """Delete stored errors: each hash, collection membership, index entry and expiry
        entry; returns how many records existed.

        Two round trips whatever their number: one reads the records (to know their index
        entries), one transaction deletes. A pk whose hash holds another type is only
        taken out of the expiry set and the collection (the key is left alone).
        """
        pks = list(pks)
        if not pks:
            return 0
        connection = cls.get_connection()
        with reaching(connection):
            with connection.pipeline(transaction=False) as pipe:
                for pk in pks:
                    pipe.hgetall(shims.model_key(cls, pk, "hash"))
                found = pipe.execute(raise_on_error=False)
            collection = cls.get_field("pk").collection_key
            with cls._writing() as pipe:
                for pk, values in zip(pks, found):
                    pipe.zrem(cls.expiry_key(), pk)
                    pipe.srem(collection, pk)
                    if isinstance(values, dict):
                        pipe.delete(shims.model_key(cls, pk, "hash"))
                        cls._deindex(pk, cast("dict[str, str]", values))
                # an index or collection key of another type fails its own command only
                pipe.execute(raise_on_error=False)
        return sum(1 for values in found if isinstance(values, dict) and values)

    @classmethod
    def _deindex(cls, pk: str, values: Mapping[str, str]) -> None:
        """Remove `pk` with each of its `values` from the indexes of its fields, in the
        pipeline that is open: what `shims.index_value` added.

        Relies, as `shims.index_value` does, on `RedisField._indexes` (the index objects
        of a model field) and `BaseIndex._reset_rollback_cache` (emptied as a field empties
        it, so that no rollback data piles up in a long-running worker).
        """
        for name, value in values.items():
            if name == "pk" or not cls.has_field(name):
                continue
            field = cls.get_class_field(name)
            for index in field._indexes if field.indexable else ():
                # a value an index refuses (ValueError) was not added by it either
                with suppress(ValueError):
                    index.remove(pk, value)
                index._reset_rollback_cache(pk)

    @classmethod
    def expiry_key(cls) -> str:
        """Sorted set of this model's pks, scored by when each is deleted (its
        `error_ttl`): `<prefix>:<model>:expiry`, among the model's own keys (each `Error`
        model numbers its pks from 1)."""
        return shims.model_key(cls, "expiry")

    @classmethod
    def collection_for_job(cls, job: Job | str) -> Any:
        """The errors of a task, newest first."""
        task_id = job if isinstance(job, str) else job.pk.get()
        return cls.newest_first(job_pk=task_id)

    @classmethod
    def newest_first(cls, **filters: Any) -> Any:
        """The collection of the errors matching `filters`, newest first: by their time,
        or in the cluster key mode by the order they were stored in (their pks: a cluster
        sorts by no pattern of other keys before Redis 7, and the pks follow the time the
        errors were stored)."""
        collection = cls.collection(**filters)
        return collection.sort(by="-pk" if cls.keys().cluster else "-timestamp")

    @classmethod
    def newest_values(cls, filters: Mapping[str, Any], names: Sequence[str], start: int,
                      stop: int) -> list[dict[str, Any]]:
        """The fields `names` (and `pk`) of the errors matching `filters`, newest first,
        from `start` to `stop` (see `newest_first`). In the cluster key mode each record's
        hash is read in one pipelined round trip (no sort there reads other keys)."""
        collection = cls.newest_first(**filters)
        if not cls.keys().cluster:
            return cast("list[dict[str, Any]]", collection.values(*names)[start:stop])
        pks = list(collection[start:stop])
        read = [name for name in names if name != "pk"]
        connection = cls.get_connection()
        with connection.pipeline(transaction=False) as pipe:
            for pk in pks:
                pipe.hmget(shims.model_key(cls, pk, "hash"), read)
            replies = pipe.execute(raise_on_error=False)
        return [{**dict(zip(read, reply)), "pk": pk} for pk, reply in zip(pks, replies)
                if isinstance(reply, list)]

    @property
    def datetime(self) -> datetime:
        """When the error happened (UTC)."""
        timestamp = self.timestamp.hget()
        if timestamp is None:
            raise TypeError(f"error {self.pk.get()!r} has no timestamp")
        return datetime.fromtimestamp(float(timestamp), timezone.utc)


register_errors(Error)


class _AtOnce:
    """A stand-in for a pipeline whose commands run as they are called: a command's error
    (a key of another type) is kept as its reply, as a pipeline keeps it, so that the
    commands after it run; `execute` gives the replies (raising the first error unless
    told not to)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.replies: list[Any] = []

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        command = getattr(self.client, name)

        def run(*args: Any, **kwargs: Any) -> _AtOnce:
            try:
                self.replies.append(command(*args, **kwargs))
            except ResponseError as error:
                self.replies.append(error)
            return self
        return run

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        replies, self.replies = self.replies, []
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, ResponseError):
                    raise reply
        return replies


def _moment(text: str | None) -> float:
    """The epoch seconds of a record's `timestamp` field; now when it is not a number."""
    try:
        value = float(text) if text else math.nan
    except ValueError:
        value = math.nan
    return value if math.isfinite(value) else time.time()
