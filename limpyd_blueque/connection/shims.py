"""Every use of a private or undocumented part of redis-limpyd and redis-py, in one place.

Each function names what it relies on and the versions it was checked on. Checked on:
redis-limpyd 2.1.2 (setup.py allows `>=2.1.2,<2.2`), redis-limpyd-extensions 2.1
(nothing of it is used here), redis-py 5.0.0 and 8.1.0. When one of them changes, this
module is the one to read again; nothing else in the package touches their internals.
"""

from __future__ import annotations

import inspect
from copy import copy
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from limpyd.collection import CollectionManager
from limpyd.fields import PKField, RedisField
from limpyd.indexes import BaseIndex
from limpyd.model import RedisModel
from limpyd.utils import make_key

if TYPE_CHECKING:
    from redis.client import PubSub
    from redis.connection import Connection, ConnectionPool

    # the mixins below are mixed into these classes (at run time they are plain objects,
    # as limpyd's metaclass wants of a mixin: limpyd fields.py `MetaRedisProxy`)
    _FieldBase = RedisField
    _CollectionBase = CollectionManager
else:
    _FieldBase = _CollectionBase = object

M = TypeVar("M", bound=RedisModel)


# -- redis-limpyd: model instances --------------------------------------------------------
def light_instance(model: type[M], pk: Any) -> M:
    """An instance of `model` for `pk`, not connected, whose fields are not built yet.

    Relies on what `RedisModel.__init__` sets (limpyd model.py, 2.1.2): `lockable`,
    `_connected`, `_init_fields`, `get_field`/`get_fields` switched to their instance
    versions, and the pk cached in `_pk` (normalized by the pk field, `_redis_attr_pk`).
    The fields themselves are left to `bind_field`, one by one, when first used.
    """
    instance = model.__new__(model)
    instance.lockable = model.lockable
    instance._connected = False
    instance._init_fields = set()
    instance.get_field = instance.get_instance_field  # type: ignore[method-assign]
    instance.get_fields = instance.get_instance_fields  # type: ignore[method-assign]
    instance._pk = model._redis_attr_pk.normalize(pk)
    return instance


def cached_pk(instance: RedisModel) -> str | None:
    """The pk an instance holds, without building its pk field (None when not set).

    Relies on limpyd caching the pk of an instance in `_pk` (deleted on `delete()`).
    """
    return getattr(instance, "_pk", None)


def pk_field_name(model: type[RedisModel]) -> str:
    """The name of the pk field of `model` ('pk' unless the model names its own).

    Relies on the class attribute `_redis_attr_pk` set by limpyd's `MetaRedisModel`.
    """
    return model._redis_attr_pk.name


def field_names(model: type[RedisModel]) -> list[str]:
    """The names of the fields of `model`, its pk first.

    Relies on the class attribute `_fields` set by limpyd's `MetaRedisModel`.
    """
    return model._fields


def rename_model(model: type[RedisModel], name: str) -> None:
    """Give `model` the key name `name` (`<namespace>:<model name>` by limpyd's rule),
    on its database's list of models too.

    Relies on the class attribute `_name` (limpyd `MetaRedisModel`), which every key of
    the model starts with, and on `RedisDatabase._models`, the models of a database by
    that name (limpyd looks a model up there by its name when it moves it to another
    database).
    """
    old = model._name
    models = getattr(model.database, "_models", None)
    if isinstance(models, dict) and models.get(old) is model:
        models[name] = models.pop(old)
    model._name = name


def model_key(model: type[RedisModel], *parts: object) -> str:
    """A key of `model` as limpyd names its own: `<namespace>:<model name>:<parts...>`.

    Relies on the class attribute `_name` (limpyd `MetaRedisModel`) and `make_key`.
    """
    return make_key(model._name, *parts)


# -- redis-limpyd: fields -------------------------------------------------------------------
def bind_field(field: RedisField, instance: RedisModel) -> None:
    """Attach a copy of a model's field to one instance, as `RedisModel.__init__` does.

    Relies on `RedisField._attach_to_instance` (limpyd fields.py).
    """
    field._attach_to_instance(instance)


def bind_new_field(field: RedisField, model: type[RedisModel], instance: RedisModel) -> None:
    """Attach a field made outside any model class to `model` and then `instance`.

    Relies on `RedisField._attach_to_model` and `_attach_to_instance`, which the
    model metaclass and `__init__` call for declared fields.
    """
    field._attach_to_model(model)
    field._attach_to_instance(instance)


def field_instance(field: RedisField) -> RedisModel:
    """The model instance a field is attached to.

    Relies on `RedisField._instance`, set by `_attach_to_instance`.
    """
    return field._instance


def field_model(field: RedisField) -> type[RedisModel]:
    """The model class a field is attached to.

    Relies on `RedisField._model`, set by `_attach_to_model`.
    """
    return field._model


def copy_conf_with(base: type[RedisField], *kwargs: str) -> dict[str, list[Any]]:
    """`base`'s copy configuration, with more constructor keywords to carry over.

    limpyd copies each field for each instance through `RedisField.__copy__`, which
    passes to the constructor only the attributes named in the class attribute
    `_copy_conf['kwargs']`: a field subclass with its own keyword arguments sets
    `_copy_conf = copy_conf_with(Base, "its_kwarg")`.
    """
    conf = copy(base._copy_conf)
    conf["kwargs"] = conf["kwargs"] + list(kwargs)
    return conf


def pk_is_set(field: PKField) -> bool:
    """True once the pk field of an instance was given its value.

    Relies on `PKField._set` (limpyd fields.py).
    """
    return field._set


def set_pk_in_memory(field: PKField, value: Any) -> None:
    """Give an instance its pk, validated, without adding it to the model's collection set.

    What `PKField.set` does but its last step (SADD to `collection_key`). Relies on
    `PKField._validate` (normalize, check unused), `RedisModel._set_pk` (sets `_pk`,
    marks the instance connected, sets defaults) and `PKField._set`.
    """
    field._instance._set_pk(field._validate(value))
    field._set = True


class CommandCheck(_FieldBase):
    """Mixin for a limpyd field: `check_command(name)` runs before each of its commands.

    Relies on limpyd sending every command of a field (`hget`, `hset`, ..., made by
    `MetaRedisProxy`) through `RedisProxyCommand._call_command(name, *args, **kwargs)`.
    """

    def check_command(self, name: str) -> None:
        """Raise to refuse command `name`; by default every command is allowed."""

    def _call_command(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.check_command(name)
        return super()._call_command(name, *args, **kwargs)


# -- redis-limpyd: indexes and collections -----------------------------------------------------
def index_value(field: RedisField, pk: str, value: str) -> None:
    """Add `pk` with `value` to every index of a model field, in whatever pipeline is open.

    What a field does when it sets an indexed value, less its lock and its uniqueness
    check. Relies on `RedisField._indexes` (the index objects, built once per model
    field) and `BaseIndex._reset_rollback_cache` (emptied as the field empties it, so
    that no rollback data piles up).
    """
    for index in field._indexes if field.indexable else ():
        index.add(pk, value, check_uniqueness=False)
        index._reset_rollback_cache(pk)


def check_accepted_key_types(index: BaseIndex, accepted_key_types: Any) -> None:
    """`ImplementationError` when a collection accepts none of the key types `index` gives.

    Relies on `BaseIndex._check_key_accepted_key_types`, which limpyd's own indexes call
    first in `get_filtered_keys`.
    """
    index._check_key_accepted_key_types(accepted_key_types)


class UnfilteredSet(_CollectionBase):
    """Mixin for a limpyd collection manager: with no filter, read `unfiltered_set()`.

    limpyd reads a model's collection set (`<model>:collection`) when a collection has
    no filter; a mixed-in manager whose `unfiltered_set` returns a temporary set key
    reads that key instead, and deletes it afterwards. Relies on
    `CollectionManager._get_final_set(sets, pk, sort_options) -> (key, delete_after)`.
    """

    def unfiltered_set(self) -> str | None:
        """A temporary set of every pk, or None for limpyd's collection set."""
        return None

    def _get_final_set(self, sets: list[Any], pk: Any,
                       sort_options: dict[str, Any] | None) -> tuple[str | None, bool]:
        if not sets and pk is None:
            everything = self.unfiltered_set()
            if everything is not None:
                final_set, _ = super()._get_final_set([everything], pk, sort_options)
                return final_set, True
        return super()._get_final_set(sets, pk, sort_options)


# -- redis-py -----------------------------------------------------------------------------------
def pool_settings(pool: ConnectionPool) -> dict[str, Any]:
    """The keyword arguments a pool gives each connection (host, port, path, db...).

    Relies on the undocumented `ConnectionPool.connection_kwargs` (an attribute in 5.0,
    a property in 8.1).
    """
    return dict(pool.connection_kwargs)


def pool_uses_tls(pool: ConnectionPool) -> bool:
    """True when the connections of `pool` are TLS ones (a `rediss://` URL).

    Relies on the undocumented `ConnectionPool.connection_class`.
    """
    connection_class = getattr(pool, "connection_class", None)
    return isinstance(connection_class, type) and issubclass(connection_class,
                                                             redis.SSLConnection)


def twin_pool(pool: ConnectionPool) -> ConnectionPool:
    """A new, empty pool of the same class, making the same connections as `pool`.

    Relies on the undocumented `connection_class` and `connection_kwargs` attributes
    (and, for a pool of a sentinel service, those `sentinel.twin` reads).
    """
    from . import sentinel

    if sentinel.is_sentinel_pool(pool):
        new: ConnectionPool = sentinel.twin(pool)
        return new
    return type(pool)(connection_class=pool.connection_class, **pool.connection_kwargs)


def twin_cluster_client(client: Any) -> Any:
    """A new Redis Cluster client with connections of its own, to the same nodes and with
    the same connection settings as `client` (a `RedisCluster`).

    Relies on the undocumented `RedisCluster.nodes_manager.connection_kwargs` (the
    settings every node connection is made with).
    """
    from redis import cluster

    node_class: Any = cluster.ClusterNode
    settings = dict(client.nodes_manager.connection_kwargs)
    for own in ("host", "port", "db", "connection_pool", "startup_nodes"):
        settings.pop(own, None)
    nodes = [node_class(node.host, node.port) for node in client.get_nodes()]
    return cluster.RedisCluster(startup_nodes=nodes, **settings)


def checkout_connection(pool: ConnectionPool) -> Connection:
    """A connection of `pool`, connected (release it with `pool.release`).

    `get_connection()` takes no command name since redis-py 5.3 (8.1 warns when one is
    given); 5.0 requires one.
    """
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3
        return pool.get_connection("PING")


def settled_connect(connection: Connection) -> None:
    """What a new connection sends when it connects (redis-py's `redis_connect_func`
    connection keyword): redis-py's own handshake (`Connection.on_connect`), then, on a
    TLS connection, one PING and its answer.

    A TLS 1.3 server sends its session tickets just after the TLS handshake. When the
    Redis handshake sends no command (no password, database 0, RESP2 and no CLIENT
    SETINFO, as `clients.lean_connection_options` wants), the tickets are still unread
    when the pool checks that the new connection holds no stale reply, and redis-py 8's
    hiredis parser (its `can_read` polls the socket) takes them for one: the pool
    reconnects, finds the same, and fails with "Connection not ready". Reading a reply
    reads the tickets sent before it. Relies on `on_connect`, `send_command` and
    `read_response` of `Connection` (redis-py 5.0.0 and 8.1.0).
    """
    link: Any = connection  # untyped methods of redis-py
    link.on_connect()
    if isinstance(connection, redis.SSLConnection):
        link.send_command("PING", check_health=False)
        link.read_response()


def pubsub_socket(pubsub: PubSub) -> Any:
    """The socket a subscription reads from, to wait on it with `select`; None if none.

    Relies on `PubSub.connection` and its private `Connection._sock` (None until
    connected, and after a disconnect).
    """
    return getattr(pubsub.connection, "_sock", None)


def no_client_setinfo() -> dict[str, Any]:
    """Client options by which a new connection sends no CLIENT SETINFO.

    `driver_info=None` on redis-py 8; `lib_name=None, lib_version=None` before
    (5.0 has no `driver_info`).
    """
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


class SurrogateSafePacker:
    """redis-py's command packer that also sends text holding lone surrogates.

    Replies are decoded with `surrogateescape`, so an id that is not UTF-8 reaches Python
    as text with lone surrogates, and must go back to Redis as the same bytes. hiredis's
    packer refuses such text (`UnicodeEncodeError`) whatever the client's
    `encoding_errors`; this packer then packs the command with redis-py's own Python
    serializer and a `surrogateescape` encoder. Relies on `redis.connection`'s
    `HiredisRespSerializer`, `PythonRespSerializer(buffer_cutoff, encode)` and
    `Encoder(encoding, errors, decode_responses)`, and on the `command_packer` keyword a
    `Connection` takes (redis-py 5.0.0 and 8.1.0).
    """

    def __init__(self) -> None:
        import redis.connection as connection

        Encoder: Any = connection.Encoder  # type: ignore[attr-defined]
        PythonRespSerializer: Any = connection.PythonRespSerializer

        try:
            from redis.connection import HiredisRespSerializer

            self.fast: Any = HiredisRespSerializer() if _hiredis_packs() else None
        except ImportError:
            self.fast = None
        encoder: Any = Encoder("utf-8", "surrogateescape", False)
        self.slow: Any = PythonRespSerializer(6000, encoder.encode)

    def pack(self, *args: Any) -> Any:
        if self.fast is not None:
            try:
                return self.fast.pack(*args)
            except UnicodeEncodeError:
                pass
        return self.slow.pack(*args)


def _hiredis_packs() -> bool:
    try:
        import hiredis
    except ImportError:
        return False
    return hasattr(hiredis, "pack_command")
