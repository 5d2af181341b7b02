"""What each BATCHPOINT_* setting means, keyed by the field it is read into: a field of
`batchpoint.settings.BatchpointEnvironment` (BATCHPOINT_<FIELD>), or an S3 store option
of `batchpoint.storage.s3.S3Settings` that the model passes through
(BATCHPOINT_S3_<OPTION>). Types and defaults are not repeated here: the provider's config
section (`batchpoint.airflow.provider`) reads them from those declarations, and a test
holds these keys to their fields, so a setting cannot be added without its meaning."""

from __future__ import annotations

#: By field of BatchpointEnvironment.
SETTINGS: dict[str, str] = {
    "root": "Storage root: s3://bucket/prefix or file:///absolute/path (a folder, or one "
    "that could be created). Default: file://$PWD/.batchpoint.",
    "s3_endpoint_url": "S3 endpoint, http or https (default: boto3's, from AWS_* or ~/.aws).",
    "s3_region": "S3 region (default: boto3's).",
    "s3_access_key_id": "S3 access key id; with the secret key, both or neither (default: "
    "the standard AWS chain).",
    "s3_secret_access_key": "S3 secret access key; with the key id, both or neither.",
    "s3_session_token": "Session token of short-lived S3 keys.",
    "s3_profile": "AWS profile, instead of keys.",
    "savepoint_roots": "Comma-separated URIs savepoints may be written under and restored "
    "from. Default: the root's savepoints/ folder.",
    "spark_master": "Spark master of the submit- and local-mode jobs and of in-process "
    "sessions (in connect mode the server's own master runs the work).",
    "spark_mode": "How the Airflow tasks reach Spark: connect (thin Spark Connect clients of "
    "the Spark remote), submit (one spark-submit application per operator task) or local "
    "(a local Spark in a child process). Default: connect for Airflow and the demo.",
    "spark_remote": "The Spark Connect server, sc://host:port (optionally /;use_ssl=true;"
    "token=...); required in connect mode.",
    "spark_conn_id": "The Airflow connection of the Spark endpoint, of the apache-spark "
    "provider's types: a spark_connect connection in connect mode, a spark one in submit "
    "mode (default: spark_connect_default, spark_default). Looked up when a task runs; the "
    "Spark remote and master settings are its fallback.",
    "spark_conf": "Spark settings every job's session applies, in connect and submit mode "
    'alike: a JSON object, {"spark.sql.shuffle.partitions": "8"}.',
    "connect_client": "Where a connect-mode operator task runs its Spark Connect client: "
    "task (in the Airflow task's own process) or subprocess (a child process per task).",
    "checkpoint_timeout": "How long a checkpoint may stay pending (seconds, or 90s, 5m, "
    "1.5h, 1d; at most 30 days).",
    "min_pause": "Pause between a completion and the next trigger (a duration).",
    "max_concurrent": "Pending checkpoints at once (at least 1).",
    "tolerable_failed_checkpoints": "Consecutive failures before the pipeline is FAILED.",
    "num_retained": "Completed checkpoints kept (at least 1; savepoints are extra).",
    "verify_checksums": "Re-read every file's bytes at finalize.",
    "restore_verify_checksums": "Check every file's sha256 before a restore (false for "
    "huge states).",
    "history_limit": "Records of settled, no longer retained checkpoints kept.",
    "gc_grace": "How long a discarded checkpoint's files wait for late writers before GC's "
    "last pass (at least the timeout). Default: the larger of 1 hour and the timeout plus "
    "the cleanup grace.",
    "changelog_chain": "Incremental checkpoints: changelog layers a state may stack on its "
    "last full snapshot; 0 writes every state in full each checkpoint.",
    "changelog_min_bytes": "Incremental checkpoints: a state whose files are smaller is "
    "written in full each checkpoint (bytes, or 512KiB / 4MiB / 1GiB; default 4MiB); 0 "
    "lets any state be a changelog.",
    "skip_idle_epochs": "Skip a scheduled checkpoint whose sources have nothing new (reason "
    "no-new-input); false runs every epoch.",
    "quality_gate": "module:attr of the restore quality gate (none by default).",
    "table_catalog": "SQLAlchemy URI of the Iceberg SQL catalog of table sinks. Default: "
    "pyiceberg's config of the sink's catalog, else the root's tables/catalog.db on a "
    "file:// root (required on S3 roots).",
    "pipeline_ref": "module:attr of the pipeline(s) the DAGs are built for, comma-separated "
    "(no default: the DAGs need it).",
    "checkpoint_interval": "Checkpoint DAG schedule: a duration, a cron expression or "
    "preset, none (triggered by hand only), or upstream (after each publish of a sink its "
    "pipeline sources read: Airflow's data-aware scheduling).",
    "checkpoint_intervals": "Checkpoint DAG schedules by pipeline, over "
    'BATCHPOINT_CHECKPOINT_INTERVAL: a JSON object, e.g. {"reports": "upstream"}.',
    "spark_submit": "The spark-submit executable. Default: pyspark's, next to Python.",
    "spark_job": "The Spark entry point file. Default: batchpoint/jobs/run_operator.py in "
    "the installed package.",
    "spark_submit_args": "Extra spark-submit arguments, shell syntax.",
    "pyspark_python": "Python of the Spark driver and executors. Default: Airflow's.",
    "ack_sensor_mode": "How the ack sensor waits: deferrable, reschedule or poke.",
    "ack_poll_interval": "Duration between looks at the acks (at least 0.1 seconds).",
    "task_retries": "Airflow retries of operator tasks.",
    "task_retry_delay": "Duration between retries.",
    "cleanup_grace": "Duration a run may outlive its checkpoint's timeout.",
    "storage_conn_id": "Airflow AWS connection of the storage (optional: without it the "
    "BATCHPOINT_S3_* variables are used).",
    "api_conn_id": "Airflow REST API connection (the savepoint DAG's stop pipeline).",
    "audit": "Audited checkpoints: the pipeline's quality suites run before each completes.",
}

#: By option of S3Settings that is not a field of the model (BATCHPOINT_S3_<OPTION>).
S3_OPTIONS: dict[str, str] = {
    "retry_mode": "botocore's retry mode: standard or adaptive.",
    "max_attempts": "Attempts per S3 request, the first try included.",
    "connect_timeout": "Seconds to wait for an S3 connection (more than 0, at most 3600).",
    "read_timeout": "Seconds to wait for an S3 response (more than 0, at most 3600).",
    "multipart_threshold": "Size from which uploads are multipart (bytes, or 64MiB).",
    "multipart_chunksize": "Size of each multipart part (bytes, or 16MiB).",
    "addressing_style": "path, virtual or auto. Default: path for a custom endpoint, auto for AWS.",
    "probe_conditional_writes": "Before a process's first conditional write, check that "
    "the endpoint refuses a second If-None-Match create and a stale If-Match; refuse the "
    "endpoint if not.",
}
