"""What the models share: the base model, and fields whose keys are Blueque keys."""

from __future__ import annotations

from copy import copy
from typing import Any, TypeVar, cast

import redis
from limpyd import fields
from limpyd.contrib.database import PipelineDatabase
from limpyd.exceptions import DoesNotExist
from limpyd.model import RedisModel

from ..connection import shims
from ..connection.clients import UnboundDatabase
from ..exceptions import ProtocolError
from ..protocol.encryption import Keyring
from ..protocol.keys import DEFAULT_PREFIX, KeySpace, check_queue_name, keyspace
from ..protocol.scripts import Scripts

M = TypeVar("M", bound="BluequeModel")


class BluequeModel(RedisModel):
    """Base of the models: one database, and `namespace` doubles as the key prefix."""

    abstract = True
    namespace: str = DEFAULT_PREFIX
    database: PipelineDatabase = UnboundDatabase()
    #: a model whose records belong to no queue (limpyd's own keys, indexes included):
    #: in the cluster key mode every key of it holds the `{prefix}` hash tag, in one slot
    #: beside the workers' records, so that its collections and indexes meet there
    in_one_slot = False

    @classmethod
    def use_database(cls, database: Any) -> Any:
        """Bind this model and its subclasses to `database` (limpyd's), then name the keys
        of each `in_one_slot` model for the database's key mode."""
        used = super().use_database(database)
        for model in (cls, *_subclasses(cls)):
            if model.in_one_slot and not model.__dict__.get("abstract", False):
                _name_keys(model)
        return used

    @classmethod
    def keys(cls) -> KeySpace:
        """The key space of this model, named by its namespace, in its database's key
        mode (the cluster key mode on a Redis Cluster)."""
        return keyspace(cls.namespace, bool(getattr(cls.database, "cluster", False)))

    @classmethod
    def scripts(cls) -> Scripts:
        """The protocol scripts on this model's connection (registered once)."""
        cache: dict[str, Scripts] = cls.database.__dict__.setdefault("_blueque_scripts", {})
        if cls.namespace not in cache:
            cache[cls.namespace] = Scripts(cls.database.connection, cls.keys())
        return cache[cls.namespace]

    @classmethod
    def keyring(cls) -> Keyring | None:
        """The encryption keys of this model's database (`use_redis(encryption_keys=...)`;
        None: its tasks are written clear)."""
        return cast("Keyring | None", getattr(cls.database, "keyring", None))

    @classmethod
    def client(cls) -> redis.Redis:
        """The redis-py client of this model's database."""
        return cls.database.connection

    # -- light instances ----------------------------------------------------------------
    # limpyd builds an instance by copying every field object (about 130 microseconds for
    # a Job), which would be most of what a worker spends per task. An instance made by
    # `lazy_connect` instead gets each field the first time it is used, as limpyd would
    # have made it.
    @classmethod
    def lazy_connect(cls: type[M], pk: Any) -> M:
        """An instance for `pk`, not checked for existence (as limpyd's), made lightly."""
        return shims.light_instance(cls, pk)

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not set yet: the fields of a light instance
        cls = type(self)
        if name == "pk":
            name = shims.pk_field_name(cls)
            if name == "pk":
                return self._attach_field("pk")
            return getattr(self, name)
        if not name.startswith("_") and name in shims.field_names(cls):
            return self._attach_field(name)
        raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")

    def _attach_field(self, name: str) -> Any:
        field = copy(type(self).get_class_field(name))
        shims.bind_field(field, self)
        self.__dict__[name] = field
        if name == shims.pk_field_name(type(self)):
            self.__dict__["pk"] = field
        return field


def _subclasses(model: type[BluequeModel]) -> list[type[BluequeModel]]:
    found: list[type[BluequeModel]] = []
    for sub in model.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _name_keys(model: type[BluequeModel]) -> None:
    """Name the keys of `model` as limpyd does (`<namespace>:<model name>`), with the
    namespace as a hash tag in the cluster key mode (`{<namespace>}:<model name>`)."""
    plain: str = model.__dict__.get("_plain_name") or model._name
    model._plain_name = plain  # type: ignore[attr-defined]
    name = plain[len(model.namespace) + 1:]  # limpyd's: the namespace, ':', the name
    cluster = bool(getattr(model.database, "cluster", False))
    shims.rename_model(model, f"{{{model.namespace}}}:{name}" if cluster else plain)


def _owner(field: fields.RedisField) -> BluequeModel:
    """The instance a field of a Blueque model belongs to."""
    return cast(BluequeModel, shims.field_instance(field))


def _owner_model(field: fields.RedisField) -> type[BluequeModel]:
    """The Blueque model a field belongs to."""
    return cast("type[BluequeModel]", shims.field_model(field))


# -- fields whose key is a Blueque key -------------------------------------------------
F = TypeVar("F", bound=fields.RedisField)


def _wire_field(base: type[F]) -> type[F]:
    class WireField(base):  # type: ignore[valid-type, misc]
        """A field stored at the Blueque key `KeySpace.<wire>(queue name)`."""

        _copy_conf = shims.copy_conf_with(base, "wire")

        def __init__(self, *args: Any, wire: str, **kwargs: Any) -> None:
            self.wire = wire
            super().__init__(*args, **kwargs)

        @property
        def key(self) -> str:
            owner = _owner(self)
            key: str = getattr(owner.keys(), self.wire)(owner.pk.get())
            return key

    WireField.__name__ = f"Wire{base.__name__}"
    return WireField


WireListField = _wire_field(fields.ListField)
WireSetField = _wire_field(fields.SetField)
WireSortedSetField = _wire_field(fields.SortedSetField)


class ReservedListField(fields.ListField):
    """The reserved list of one listener on a queue (`queue.reserved(listener_id)`)."""

    def __init__(self, listener_id: str, *args: Any, **kwargs: Any) -> None:
        self.listener_id = listener_id
        super().__init__(*args, **kwargs)

    @property
    def key(self) -> str:
        owner = _owner(self)
        return owner.keys().reserved(owner.pk.get(), self.listener_id)


class ProtocolField(shims.CommandCheck, fields.InstanceHashField):
    """A task field only the protocol steps may change (its value files the task)."""

    def check_command(self, name: str) -> None:
        if name in self.available_modifiers:
            raise ProtocolError(
                f"the {self.name!r} of a task changes only through the protocol steps "
                "(enqueue, reserve, start, complete, fail, requeue, cancel, delete)"
            )


class TaskIdField(fields.PKField):
    """The task id; a task exists when its Blueque hash exists."""

    def exists(self, value: str | None = None) -> bool:
        try:
            value = value or self.get()
        except (AttributeError, DoesNotExist):
            return False
        return bool(self.connection.exists(_owner_model(self).keys().task(value)))

    def set(self, value: str) -> int:
        # A limpyd model adds its pks to a collection set; tasks are listed by the
        # Blueque structures instead, so only the in-memory pk is set.
        if shims.pk_is_set(self):
            raise ValueError("a task id cannot be changed")
        shims.set_pk_in_memory(self, value)
        return 1


class QueueNameField(fields.PKField):
    """The queue name; a queue exists when `blueque_queues` lists it."""

    def normalize(self, value: Any) -> str:
        return check_queue_name(value)

    def exists(self, value: str | None = None) -> bool:
        try:
            value = value or self.get()
        except (AttributeError, DoesNotExist):
            return False
        return self.connection.zscore(_owner_model(self).keys().queues, value) is not None

    def set(self, value: str) -> int:
        raise ProtocolError("queues are created by the protocol steps, not by the ORM")
