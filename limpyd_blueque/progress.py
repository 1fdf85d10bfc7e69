"""The documented path of task progress and checkpoints, which live in
`limpyd_blueque.models.progress` (this module only re-exports it)."""

from .models.progress import CheckpointRecord, Progress, ProgressReporter

__all__ = ["CheckpointRecord", "Progress", "ProgressReporter"]
