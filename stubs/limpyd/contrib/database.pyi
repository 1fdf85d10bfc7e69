from typing import Any, Callable

from redis.client import Pipeline

from ..database import RedisDatabase

class PipelineDatabase(RedisDatabase):
    def pipeline(self, transaction: bool = True, share_in_threads: bool = False) -> Pipeline: ...
    def transaction(self, func: Callable[[Pipeline], object], *watches: Any,
                    **kwargs: Any) -> list[Any]: ...
