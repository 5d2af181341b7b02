"""Test support shared by several suites and the bench scripts: a fault-injecting store
wrapper, a reproducible step scheduler, and the concurrency model with its independent
checker (imported as ``tests.support.*`` with the repository root on ``sys.path``)."""
