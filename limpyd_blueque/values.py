"""The documented path of the checks and encodings of task values, which lives in
`limpyd_blueque.protocol.values` (this module only re-exports it)."""

from .protocol.values import check_task_id, encode, printable

__all__ = ["check_task_id", "encode", "printable"]
