"""The cases of the reference package's own integration test, written for the drop-in.

They are run by the Python of the reference's virtualenv, with `tests/as_blueque` first
on the path so that `import blueque` is limpyd-blueque (see tests/interop/test_dropin.py), against
the Redis in `REDIS_URI`. Each case is what an application written for blueque 1.0.1
observes; none of them knows it is not talking to the reference.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import unittest

import blueque
import redis

QUEUE = "QUEUE-NAME"


class ReferenceIntegrationCases(unittest.TestCase):
    def setUp(self):
        redis.StrictRedis.from_url(os.environ["REDIS_URI"]).flushdb()
        self.producer = blueque.Client(os.environ["REDIS_URI"])
        self.queue = self.producer.get_queue(QUEUE)
        self.worker = blueque.Client(os.environ["REDIS_URI"])
        self.listener = self.worker.get_listener(QUEUE)

    def status(self, task_id):
        return self.producer.get_task(task_id).status

    def test_a_task_goes_through_every_step_to_its_result_then_is_deleted(self):
        task_id = self.queue.enqueue("PARAMETERS")
        self.assertEqual(self.status(task_id), "pending")
        task = self.listener.listen()
        self.assertEqual((task.id, task.parameters), (task_id, "PARAMETERS"))
        self.assertEqual(self.status(task_id), "reserved")
        self.assertEqual(self.producer.get_task(task_id).node,
                         f"{socket.getfqdn()}_{os.getpid()}")
        processor = self.worker.get_processor(task)
        processor.start(123456)
        self.assertEqual(self.status(task_id), "started")
        self.assertEqual(self.producer.get_task(task_id).pid, 123456)
        processor.complete("RESULT")
        done = self.producer.get_task(task_id)
        self.assertEqual((done.status, done.result, done.error), ("complete", "RESULT", None))
        self.queue.delete_task(done)
        self.assertIsNone(self.status(task_id))

    def test_a_task_can_fail_then_be_deleted(self):
        task_id = self.queue.enqueue("PARAMETERS")
        processor = self.worker.get_processor(self.listener.listen())
        processor.start(123456)
        processor.fail("ERROR")
        failed = self.producer.get_task(task_id)
        self.assertEqual((failed.status, failed.error, failed.result), ("failed", "ERROR", None))
        self.queue.delete_task(failed)
        self.assertIsNone(self.status(task_id))

    def test_the_task_of_a_dead_listener_of_this_host_is_claimed(self):
        task_id = self.queue.enqueue("PARAMETERS")
        pid = os.fork()
        if pid == 0:
            task = self.worker.get_listener(QUEUE).listen()
            self.worker.get_processor(task).start(os.getpid())
            os._exit(0)
        os.waitpid(pid, 0)
        orphan = self.listener.claim_orphan()
        self.assertEqual((orphan.id, orphan.status), (task_id, "started"))
        self.assertEqual(self.producer.get_task(task_id).node, f"{socket.getfqdn()}_{pid}")
        self.assertCountEqual(self.queue._redis_queue.get_listeners(),
                              [f"{socket.getfqdn()}_{os.getpid()}"])

    def test_an_unknown_task_reads_as_a_task_whose_fields_are_all_none(self):
        task = self.producer.get_task("no-such-task")
        self.assertEqual(task.id, "no-such-task")
        self.assertEqual([task.status, task.queue, task.parameters, task.result, task.error,
                          task.node, task.pid, task.created, task.updated], [None] * 9)

    def test_refusals_are_the_value_errors_of_the_reference(self):
        task_id = self.queue.enqueue("PARAMETERS")
        with self.assertRaises(ValueError):
            self.queue.delete_task(self.producer.get_task(task_id))  # not finished
        with self.assertRaises(ValueError):
            self.producer.get_queue("OTHER").delete_task(self.producer.get_task(task_id))
        self.assertEqual(self.status(task_id), "pending")

    def test_a_forking_runner_script_runs_tasks_by_its_import_alone(self):
        script = (
            "import os, sys\n"
            "from blueque import Client\n"
            "from blueque.forking_runner import ForkingRunner\n"
            "def callback(task):\n"
            "    return task.parameters.upper() + ' in ' + str(os.getpid())\n"
            "ForkingRunner(Client(os.environ['REDIS_URI']), 'QUEUE-NAME', callback).run()\n")
        runner = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
        try:
            task_id = self.queue.enqueue("hello")
            deadline = time.monotonic() + 20
            while self.status(task_id) != "complete" and time.monotonic() < deadline:
                time.sleep(0.05)
            result = self.producer.get_task(task_id).result
            self.assertTrue(result.startswith("HELLO in "), result)
            self.assertNotEqual(result, f"HELLO in {runner.pid}")  # a process of its own
        finally:
            runner.send_signal(signal.SIGTERM)
            self.assertEqual(runner.wait(timeout=20), 0)


if __name__ == "__main__":
    unittest.main()
