"""The worker: the loop people subclass (`worker.Worker`, with its hooks and log lines),
its settings, and its parts, each depending on the small interface of `contract` rather
than on `Worker`: how tasks run (`runners`, `task_process`, `processes`), the running-task
state machine (`running`), the heartbeat and leases (`heartbeat`, `watch`), recovery of
dead holders' tasks (`recovery`), outcomes (`outcomes`) and scheduled tasks
(`scheduling`).
"""
