"""The limpyd models: `Job` and `Queue` live on the Blueque keys, `Error` beside them.

Models hold data and the protocol steps; they never fork, sleep or log. Each step
is one call to a script of `atomic.Scripts`.
"""

from .base import BluequeModel
from .error import Error
from .job import Job, TaskData
from .queue import Queue

__all__ = ["BluequeModel", "Error", "Job", "Queue", "TaskData"]
