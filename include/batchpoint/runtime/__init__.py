"""The task runtime: operators as PySpark micro-jobs that process one epoch, snapshot
their keyed state, acknowledge, and sinks that publish on completion."""
