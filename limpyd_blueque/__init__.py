"""limpyd-blueque: a Redis task queue for very long tasks, on the Blueque protocol."""

from .client import Client
from .config import WorkerConfig
from .connection import BluequeDatabase, use_redis
from .exceptions import (
    Canceled,
    ConfigurationError,
    Delay,
    InvalidName,
    InvalidParameters,
    InvalidTransition,
    LimpydBluequeError,
    ParametersTooLarge,
    PartiallyEnqueued,
    ProtocolError,
    QuarantinedTask,
    QueueBusy,
    RedisFull,
    RedisUnavailable,
    TaskExists,
    TaskKilled,
    TaskNotFound,
    TaskTimeout,
    UnknownJobModel,
    WorkerInterrupted,
)
from .keys import KeySpace
from .models import BluequeModel, Error, Job, JobModels, Queue, Task, TaskData
from .options import MAX_PRIORITY
from .periodic import PeriodicTask
from .statuses import Status
from .workers import Worker

#: the version, in this one place: setup.py, the docs and `blueque --version` read it here
__version__ = "0.2.0"

__all__ = [
    "MAX_PRIORITY",
    "BluequeDatabase",
    "BluequeModel",
    "Canceled",
    "Client",
    "ConfigurationError",
    "Delay",
    "Error",
    "InvalidName",
    "InvalidParameters",
    "InvalidTransition",
    "Job",
    "JobModels",
    "KeySpace",
    "LimpydBluequeError",
    "ParametersTooLarge",
    "PartiallyEnqueued",
    "PeriodicTask",
    "ProtocolError",
    "QuarantinedTask",
    "Queue",
    "QueueBusy",
    "RedisFull",
    "RedisUnavailable",
    "Status",
    "Task",
    "TaskData",
    "TaskExists",
    "TaskKilled",
    "TaskNotFound",
    "TaskTimeout",
    "UnknownJobModel",
    "Worker",
    "WorkerConfig",
    "WorkerInterrupted",
    "__version__",
    "use_redis",
]
