"""Enqueueing: tasks with their options, checked whole, then written by the enqueue step
one chunk per script call. `Queue.enqueue`, `Queue.enqueue_many` and `Job.add_job` all
come here."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from redis.exceptions import RedisError

from ..connection.clients import check_value_sizes, maybe_too_large
from ..connection.errors import reaching
from ..exceptions import ConfigurationError, LimpydBluequeError, PartiallyEnqueued
from ..protocol.codecs import codec_named
from ..protocol.encryption import ALGORITHM, context
from ..protocol.keys import KeySpace
from ..protocol.options import TaskOptions, task_options
from ..protocol.values import (
    check_number,
    check_parameters_list,
    check_task_id,
    check_task_ids,
    chunks,
    encode,
)
from . import dependencies
from .task import Task

T = TypeVar("T", bound=Task)

#: the options of a task enqueued with none
PLAIN = TaskOptions()
#: the most characters of parameters sent in one enqueue script call
CHUNK_CHARACTERS = 64 * 1024 * 1024


def per_task_options(job_model: type[Task], count: int, common: Mapping[str, Any],
                     options: Sequence[Mapping[str, Any]] | None, now: float,
                     ) -> list[TaskOptions]:
    """The checked options of each of `count` tasks: `common`, overridden by the task's
    own mapping in `options` (one per task)."""
    if options is None and not common:
        return [PLAIN] * count
    known_model(common.get("model"))
    if options is None:
        checked = task_options(job_model, now, **common)
        return [checked] * count
    if isinstance(options, (str, bytes, Mapping)) or len(options) != count:
        raise ConfigurationError(f"options must be a sequence of {count} mapping(s), one per "
                                 "task")
    result = []
    for index, own in enumerate(options):
        if not isinstance(own, Mapping):
            raise ConfigurationError(f"options[{index}] must be a mapping of options, not "
                                     f"{type(own).__name__}")
        known_model(own.get("model"))
        result.append(task_options(job_model, now, **{**common, **own}))
    return result


def known_model(model: object) -> None:
    """Refuse a job model named by text that no imported `Job` subclass has (a typo would
    otherwise be found only by the worker, which fails the task)."""
    if not isinstance(model, str):
        return
    stack, names = list(Task.__subclasses__()), set()
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        repr_of = getattr(cls, "get_model_repr", None)
        if repr_of is not None:
            names.add(repr_of())
    if model not in names:
        raise ConfigurationError(f"unknown job model {model!r}: no Job subclass of that name is "
                                 "imported here (pass the class, or import its module)")


def model_class(job_model: type[T], model: object) -> type[T]:
    """The class of the instances returned for a task enqueued with option `model`."""
    if isinstance(model, type) and issubclass(model, job_model):
        return model
    return job_model


@dataclass(frozen=True)
class Enqueuing(Generic[T]):
    """Tasks checked whole and ready to write: `tasks` as the enqueue step takes them
    `(id, parameters, options)`, the model class of each, and the `(start, end)` of each
    chunk written by one script call."""

    tasks: list[tuple[str, str, TaskOptions]]
    classes: list[type[T]]
    chunks: list[tuple[int, int]]

    @property
    def texts(self) -> list[str]:
        return [parameters for _, parameters, _ in self.tasks]


def prepare_tasks(job_model: type[T], keys: KeySpace, queue: str, parameters: Sequence[Any],
                  *, task_ids: Sequence[str] | None = None, chunk: int = 1000,
                  options: Sequence[Mapping[str, Any]] | None = None,
                  common: Mapping[str, Any] | None = None) -> Enqueuing[T]:
    """Check and encode tasks to enqueue in `queue` (see `Queue.enqueue_many`), touching
    no server: every mistake is found before anything is written. Their ids are given in
    the key mode of `keys` (see `KeySpace.task_id_in`)."""
    common = dict(common or {})
    values = check_parameters_list(parameters)
    coded = bool(options) or "codec" in common  # (a codec is an option)
    texts = [] if coded else [encode(value) for value in values]
    ids = [keys.task_id_in(queue, task_id) for task_id in (
        [new_task_id() for _ in values] if task_ids is None
        else check_task_ids(task_ids, len(values)))]
    check_number("chunk", chunk, integer=True, minimum=1)
    checked = per_task_options(job_model, len(values), common, options, time.time())
    if coded:  # each with its codec, once the options are known good
        texts = [codec_named((options[index] if options else {}).get(
            "codec", common.get("codec"))).encode(value) for index, value in enumerate(values)]
    keyring = job_model.keyring()
    if keyring is not None:  # sealed, each bound to its task
        texts = [keyring.seal(text, context(task_id, "parameters"))
                 for task_id, text in zip(ids, texts)]
        checked = [replace(own, fields={**own.fields, "encrypted": ALGORITHM})
                   for own in checked]
    classes = ([model_class(job_model, (options[i] if options else {}).get(
        "model", common.get("model"))) for i in range(len(texts))]
        if options or "model" in common else [job_model] * len(texts))
    return Enqueuing(list(zip(ids, texts, checked)), classes,
                     list(chunks(texts, chunk, CHUNK_CHARACTERS)))


def new_task_id() -> str:
    """A new task id: a random UUID (version 4) as `str(uuid.uuid4())` writes it, made in
    half its time (a producer sending tasks one at a time makes one per task)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 4122
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def enqueue_one(job_model: type[T], queue: str, parameters: Any, task_id: str | None,
                options: Mapping[str, Any]) -> T:
    """Enqueue one task in `queue` (see `Queue.enqueue`); its task, as `enqueue_tasks`
    gives it. A task without options (what a producer sending tasks one at a time mostly
    sends) takes a shorter way, with the same checks: its parameters encoded, its id
    checked (else a new one), its parameters small enough for the server."""
    if options or job_model.keyring() is not None:
        return enqueue_tasks(job_model, queue, [parameters],
                             task_ids=None if task_id is None else [task_id], common=options)[0]
    text = encode(parameters)
    checked = new_task_id() if task_id is None else check_task_id(task_id)
    scripts = job_model.scripts()  # (its first use reaches the server: after the checks)
    keys = scripts.keys
    task_id = keys.task_id_in(queue, checked)
    if maybe_too_large((text,)):
        check_value_sizes(job_model.client(), (text,))
    if keys.cluster:  # the cluster-wide index of queues, apart (see `enqueue_tasks`)
        client = job_model.client()
        with reaching(client):
            client.zadd(keys.queues, {queue: 0}, nx=True)
    # (no `reaching` here: the errors of a step are this library's already)
    scripts.enqueue(queue, ((task_id, text, PLAIN),), time.time())
    return job_model.lazy_connect(task_id)


def enqueue_tasks(job_model: type[T], queue: str, parameters: Sequence[Any], *,
                  task_ids: Sequence[str] | None = None, chunk: int = 1000,
                  options: Sequence[Mapping[str, Any]] | None = None,
                  common: Mapping[str, Any] | None = None) -> list[T]:
    """Enqueue tasks in `queue` (see `Queue.enqueue_many`); the task of each, in order:
    the new one, or the waiting one its identifier maps to."""
    ready = prepare_tasks(job_model, job_model.keys(), queue, parameters, task_ids=task_ids,
                          chunk=chunk, options=options, common=common)
    client, scripts = job_model.client(), job_model.scripts()
    check_value_sizes(client, ready.texts)
    waiting = [(queue, task_id, checked.after) for task_id, _, checked in ready.tasks
               if checked.after]
    parents = (dependencies.parent_queues(scripts, [parent for _, _, after in waiting
                                                    for parent in after])
               if waiting else {})
    if job_model.keys().cluster:  # the cluster-wide index of queues, apart (an index only)
        with reaching(client):
            client.zadd(job_model.keys().queues, {queue: 0}, nx=True)
    done: list[str] = []
    for start, end in ready.chunks:
        try:
            with reaching(client):
                written = scripts.enqueue(queue, ready.tasks[start:end], time.time())
        except (LimpydBluequeError, RedisError) as error:
            if not done:
                raise
            raise PartiallyEnqueued(done, len(ready.tasks), error) from error
        done += [task_id for task_id, _ in written]
    if waiting:  # (a producer dying before this leaves them to `dependencies.repair`)
        dependencies.register(scripts, waiting, parents)
    return [cls.lazy_connect(task_id) for cls, task_id in zip(ready.classes, done)]
