"""The checkpoint protocol, free of Airflow and Spark: records, ids, pending checkpoints,
acks and declines, outcomes, the head pointer, retention, failures, GC and statistics."""
