"""Spark entry points: files spark-submit runs (by path, so nothing else lives here that
a script's folder on sys.path could shadow: each module's name is its own), and the
Connect server's launcher and warm-up (run with `python -m`)."""
