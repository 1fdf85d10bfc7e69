"""limpyd-blueque: a Redis task queue for very long tasks, on the Blueque protocol."""

from importlib.metadata import PackageNotFoundError, version

from .client import Client
from .connection import BluequeDatabase, use_redis
from .exceptions import (
    ConfigurationError,
    InvalidName,
    InvalidParameters,
    InvalidTransition,
    LimpydBluequeError,
    ParametersTooLarge,
    PartiallyEnqueued,
    ProtocolError,
    QuarantinedTask,
    RedisFull,
    RedisUnavailable,
    TaskExists,
    TaskKilled,
    TaskNotFound,
    TaskTimeout,
    WorkerInterrupted,
)
from .keys import KeySpace
from .models import BluequeModel, Error, Job, Queue, TaskData
from .statuses import Status
from .workers import Worker

try:
    __version__ = version("limpyd-blueque")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "BluequeDatabase", "BluequeModel", "Client", "ConfigurationError", "Error", "InvalidName",
    "InvalidParameters", "InvalidTransition", "Job", "KeySpace", "LimpydBluequeError",
    "ParametersTooLarge", "PartiallyEnqueued", "ProtocolError", "QuarantinedTask", "Queue",
    "RedisFull", "RedisUnavailable", "Status", "TaskData", "TaskExists", "TaskKilled",
    "TaskNotFound", "TaskTimeout", "Worker", "WorkerInterrupted", "__version__", "use_redis",
]
