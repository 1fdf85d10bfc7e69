"""The limpyd models: `Job` (on `Task`) and `Queue` live on the Blueque keys, `Error`
beside them.

Models hold data and the protocol steps; they never fork or log, and block only in
`Job.wait` (a producer waiting for a task's outcome, `waiting`). Each step
is one call to a script of `protocol.scripts.Scripts`. `use_redis` binds them to a
database.
"""

from .base import BluequeModel
from .binding import use_redis
from .error import Error
from .job import Job, JobModels
from .queue import Queue
from .task import Task, TaskData

__all__ = ["BluequeModel", "Error", "Job", "JobModels", "Queue", "Task", "TaskData", "use_redis"]
