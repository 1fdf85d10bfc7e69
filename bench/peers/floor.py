"""The floor: the Blueque protocol by hand with redis-py, one Lua script per step.

No library, no checks beyond what the protocol needs: what a Blueque queue costs at
the least. Keys are the Blueque wire keys (`blueque_*`). Enqueue publishes on a
channel so that an idle worker wakes at once, as limpyd-blueque does.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import redis

from peers._common import BasePeer, StopFlag, listener_id, main, task_body

ENQUEUE = """
-- KEYS: blueque_queues, pending list, then the hash of each task.
-- ARGV: queue, now, wake-up channel, then (task id, parameters) for each task.
local queue, now = ARGV[1], ARGV[2]
local count = #KEYS - 2
for j = 1, count do
    redis.call('HSET', KEYS[2 + j], 'status', 'pending', 'queue', queue,
        'parameters', ARGV[3 + 2 * j], 'created', now, 'updated', now)
    redis.call('LPUSH', KEYS[2], ARGV[2 + 2 * j])
end
redis.call('ZINCRBY', KEYS[1], 0, queue)
redis.call('PUBLISH', ARGV[3], count)
return count
"""

RESERVE = """
-- KEYS: pending, reserved, started. ARGV: task key prefix, listener, pid, now
local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not id then return false end
local key = ARGV[1] .. id
redis.call('HSET', key, 'status', 'started', 'node', ARGV[2], 'pid', ARGV[3], 'updated', ARGV[4])
redis.call('SADD', KEYS[3], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. id)
return {id, redis.call('HGET', key, 'parameters')}
"""

COMPLETE = """
-- KEYS: task, reserved, started, complete. ARGV: id, listener, pid, result, now
redis.call('LREM', KEYS[2], 1, ARGV[1])
redis.call('SREM', KEYS[3], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'complete', 'result', ARGV[4], 'updated', ARGV[5])
redis.call('LPUSH', KEYS[4], ARGV[1])
return 1
"""


class Peer(BasePeer):
    name = "floor"

    def setup(self) -> None:
        self.r = redis.Redis.from_url(self.url, decode_responses=True)
        self.enqueue_script = self.r.register_script(ENQUEUE)
        self.reserve_script = self.r.register_script(RESERVE)
        self.complete_script = self.r.register_script(COMPLETE)
        self.listener = listener_id()

    # keys
    def k(self, *parts: str) -> str:
        return "_".join(("blueque",) + parts)

    def _enqueue_keys_args(self, items: list) -> tuple[list, list]:
        keys = [self.k("queues"), self.k("pending_tasks", self.queue)]
        args: list = [self.queue, repr(time.time()), f"blueque:wake:{self.queue}"]
        for task_id, params in items:
            keys.append(self.k("task", task_id))
            args += [task_id, params]
        return keys, args

    def enqueue(self, params: dict) -> str:
        task_id = str(uuid.uuid4())
        keys, args = self._enqueue_keys_args([(task_id, json.dumps(params))])
        self.enqueue_script(keys=keys, args=args)
        return task_id

    def enqueue_bulk(self, params: list, chunk: int = 1000) -> None:
        """One script call per `chunk` tasks, all sent in one pipeline."""
        items = [(str(uuid.uuid4()), json.dumps(p)) for p in params]
        with self.r.pipeline(transaction=False) as pipe:
            for start in range(0, len(items), chunk):
                keys, args = self._enqueue_keys_args(items[start:start + chunk])
                self.enqueue_script(keys=keys, args=args, client=pipe)
            pipe.execute()

    def pending_count(self) -> int:
        return self.r.llen(self.k("pending_tasks", self.queue))

    # worker
    def reserve_one(self):
        keys = [self.k("pending_tasks", self.queue), self.k("reserved_tasks", self.queue, self.listener),
                self.k("started_tasks", self.queue)]
        return self.reserve_script(keys=keys, args=[self.k("task", ""), self.listener, os.getpid(),
                                                    repr(time.time())])

    def complete_one(self, reply, result: str = "") -> None:
        task_id = reply[0]
        keys = [self.k("task", task_id), self.k("reserved_tasks", self.queue, self.listener),
                self.k("started_tasks", self.queue), self.k("complete_tasks", self.queue)]
        self.complete_script(keys=keys, args=[task_id, self.listener, os.getpid(), result,
                                              repr(time.time())])

    def worker(self, mode: str) -> None:
        self.setup()
        flag = StopFlag()
        wake = self.r.pubsub(ignore_subscribe_messages=True)
        wake.subscribe(f"blueque:wake:{self.queue}")
        while not flag.stop:
            reply = self.reserve_one()
            if reply is None:
                wake.get_message(timeout=1.0)
                continue
            flag.busy = True
            result = task_body(reply[1])
            self.complete_one(reply, json.dumps(result))
            flag.busy = False


if __name__ == "__main__":
    main(__spec__.name)
