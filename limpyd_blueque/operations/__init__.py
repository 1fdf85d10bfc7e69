"""What operators read and do, over the models: the overview of queues and workers
(`overview`), inspection of tasks and stored errors (`inspection`), actions on tasks
(`actions`), Prometheus metrics (`metrics`) and the web dashboard (`web`).

Independent of the worker: an operator's process never runs tasks.
"""
