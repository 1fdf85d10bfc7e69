"""The documented path of task options and retention, which live in
`limpyd_blueque.protocol.options` (this module only re-exports it)."""

from .protocol.options import (
    DEFAULT_ERROR_TTL,
    DEFAULT_FAILURE_TTL,
    DEFAULT_RESULT_TTL,
    DEFAULT_RETENTION,
    FOREVER,
    MAX_PRIORITY,
    Retention,
    TaskOptions,
)

__all__ = ["DEFAULT_ERROR_TTL", "DEFAULT_FAILURE_TTL", "DEFAULT_RESULT_TTL", "DEFAULT_RETENTION",
           "FOREVER", "MAX_PRIORITY", "Retention", "TaskOptions"]
