"""What the models share: the base model, and fields whose keys are Blueque keys."""

from __future__ import annotations

from copy import copy
from typing import Any

from limpyd import fields
from limpyd.exceptions import DoesNotExist
from limpyd.model import RedisModel

from ..atomic import Scripts
from ..connection import UnboundDatabase
from ..exceptions import ProtocolError
from ..keys import DEFAULT_PREFIX, KeySpace, check_queue_name, keyspace


class BluequeModel(RedisModel):
    """Base of the models: one database, and `namespace` doubles as the key prefix."""

    abstract = True
    namespace = DEFAULT_PREFIX
    database = UnboundDatabase()

    @classmethod
    def keys(cls) -> KeySpace:
        """The key space of this model, named by its namespace."""
        return keyspace(cls.namespace)

    @classmethod
    def scripts(cls) -> Scripts:
        """The protocol scripts on this model's connection (registered once)."""
        cache = cls.database.__dict__.setdefault("_blueque_scripts", {})
        if cls.namespace not in cache:
            cache[cls.namespace] = Scripts(cls.database.connection, cls.keys())
        return cache[cls.namespace]

    @classmethod
    def client(cls):
        """The redis-py client of this model's database."""
        return cls.database.connection

    # -- light instances ----------------------------------------------------------------
    # limpyd builds an instance by copying every field object (about 130 microseconds for
    # a Job), which would be most of what a worker spends per task. An instance made by
    # `lazy_connect` instead gets each field the first time it is used, as limpyd would
    # have made it.
    @classmethod
    def lazy_connect(cls, pk: Any) -> "BluequeModel":
        """An instance for `pk`, not checked for existence (as limpyd's), made lightly."""
        instance = cls.__new__(cls)
        instance.lockable = cls.lockable
        instance._connected = False
        instance._init_fields = set()
        instance.get_field = instance.get_instance_field
        instance.get_fields = instance.get_instance_fields
        instance._pk = cls._redis_attr_pk.normalize(pk)
        return instance

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes not set yet: the fields of a light instance
        cls = type(self)
        if name == "pk":
            name = cls._redis_attr_pk.name
            if name == "pk":
                return self._attach_field("pk")
            return getattr(self, name)
        if not name.startswith("_") and name in cls._fields:
            return self._attach_field(name)
        raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")

    def _attach_field(self, name: str) -> Any:
        field = copy(type(self).get_class_field(name))
        field._attach_to_instance(self)
        self.__dict__[name] = field
        if name == type(self)._redis_attr_pk.name:
            self.__dict__["pk"] = field
        return field


# -- fields whose key is a Blueque key -------------------------------------------------
def _wire_field(base: type) -> type:
    class WireField(base):  # type: ignore[misc, valid-type]
        """A field stored at the Blueque key `KeySpace.<wire>(queue name)`."""

        _copy_conf = copy(base._copy_conf)
        _copy_conf["kwargs"] = _copy_conf["kwargs"] + ["wire"]

        def __init__(self, *args: Any, wire: str, **kwargs: Any) -> None:
            self.wire = wire
            super().__init__(*args, **kwargs)

        @property
        def key(self) -> str:
            return getattr(self._instance.keys(), self.wire)(self._instance.pk.get())

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
        return self._instance.keys().reserved(self._instance.pk.get(), self.listener_id)


class ProtocolField(fields.InstanceHashField):
    """A task field only the protocol steps may change (its value files the task)."""

    def _call_command(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in self.available_modifiers:
            raise ProtocolError(
                f"the {self.name!r} of a task changes only through the protocol steps "
                "(enqueue, reserve, start, complete, fail, delete)"
            )
        return super()._call_command(name, *args, **kwargs)


class TaskIdField(fields.PKField):
    """The task id; a task exists when its Blueque hash exists."""

    def exists(self, value: str | None = None) -> bool:
        try:
            value = value or self.get()
        except (AttributeError, DoesNotExist):
            return False
        return bool(self.connection.exists(self._model.keys().task(value)))

    def set(self, value: str) -> int:
        # A limpyd model adds its pks to a collection set; tasks are listed by the
        # Blueque structures instead, so only the in-memory pk is set.
        if self._set:
            raise ValueError("a task id cannot be changed")
        self._instance._set_pk(self._validate(value))
        self._set = True
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
        return self.connection.zscore(self._model.keys().queues, value) is not None

    def set(self, value: str) -> int:
        raise ProtocolError("queues are created by the protocol steps, not by the ORM")
