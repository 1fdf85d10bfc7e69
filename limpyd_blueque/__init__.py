"""limpyd-blueque: a Redis task queue for very long tasks, on the Blueque protocol."""

# the documented paths of modules that moved into the layers stay attributes of the
# package, as they were (`limpyd_blueque.statuses.RUNNING` after `import limpyd_blueque`)
from . import cleaning as cleaning
from . import config as config
from . import execution as execution
from . import hooks as hooks
from . import messages as messages
from . import options as options
from . import progress as progress
from . import settings as settings
from . import statuses as statuses
from . import values as values
from . import workers as workers
from .cli.worker_script import WorkerConfig
from .client import Client
from .connection.clients import BluequeDatabase
from .exceptions import (
    Canceled,
    ConfigurationError,
    CpuLimitExceeded,
    Delay,
    InvalidName,
    InvalidParameters,
    InvalidTransition,
    LimpydBluequeError,
    MemoryLimitExceeded,
    ParametersTooLarge,
    PartiallyEnqueued,
    ProtocolError,
    QuarantinedTask,
    QueueBusy,
    RedisFull,
    RedisUnavailable,
    Release,
    Retry,
    SoftTimeLimitExceeded,
    TaskCanceled,
    TaskExists,
    TaskFailed,
    TaskKilled,
    TaskNotFound,
    TaskTimeout,
    TimeLimitExceeded,
    UnknownJobModel,
    WorkerInterrupted,
    WorkflowNotFound,
)
from .models import BluequeModel, Error, Job, JobModels, Queue, Task, TaskData, use_redis
from .models.periodic import PeriodicTask
from .models.workflow import Node, Workflow, WorkflowStatus
from .protocol.codecs import UndecodableValue, UnknownCodec, register_codec
from .protocol.encryption import TamperedValue, UnknownEncryptionKey
from .protocol.keys import KeySpace
from .protocol.limits import Limit
from .protocol.options import MAX_PRIORITY
from .protocol.statuses import Status

#: the version, in this one place: setup.py, the docs and `blueque --version` read it here
from .version import __version__
from .worker.worker import Worker

__all__ = [
    "MAX_PRIORITY",
    "BluequeDatabase",
    "BluequeModel",
    "Canceled",
    "Client",
    "ConfigurationError",
    "CpuLimitExceeded",
    "Delay",
    "Error",
    "InvalidName",
    "InvalidParameters",
    "InvalidTransition",
    "Job",
    "JobModels",
    "KeySpace",
    "Limit",
    "LimpydBluequeError",
    "MemoryLimitExceeded",
    "Node",
    "ParametersTooLarge",
    "PartiallyEnqueued",
    "PeriodicTask",
    "ProtocolError",
    "QuarantinedTask",
    "Queue",
    "QueueBusy",
    "RedisFull",
    "RedisUnavailable",
    "Release",
    "Retry",
    "SoftTimeLimitExceeded",
    "Status",
    "TamperedValue",
    "Task",
    "TaskCanceled",
    "TaskData",
    "TaskExists",
    "TaskFailed",
    "TaskKilled",
    "TaskNotFound",
    "TaskTimeout",
    "TimeLimitExceeded",
    "UndecodableValue",
    "UnknownCodec",
    "UnknownEncryptionKey",
    "UnknownJobModel",
    "Worker",
    "WorkerConfig",
    "WorkerInterrupted",
    "Workflow",
    "WorkflowNotFound",
    "WorkflowStatus",
    "__version__",
    "register_codec",
    "use_redis",
]
