"""`blueque.forking_runner` resolving to limpyd-blueque's."""

from limpyd_blueque.forking_runner import ForkingRunner

__all__ = ["ForkingRunner"]
