"""The documented path of the cleaning of what crashed clients left, which lives in
`limpyd_blueque.upkeep.cleaning` (this module only re-exports it)."""

from .upkeep.cleaning import CleanReport, deep_clean, light_clean, reindex

__all__ = ["CleanReport", "deep_clean", "light_clean", "reindex"]
