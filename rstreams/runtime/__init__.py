"""Runtimes: the embedded engine (queues, groups, tasks) and, later, the Spark backend."""
