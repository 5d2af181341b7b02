"""Spark entry points: files spark-submit runs (by path, so nothing else lives here that
a script's folder on sys.path could shadow)."""
