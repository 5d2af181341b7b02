"""Airflow glue for batchpoint: three DAGs per pipeline (checkpoint, savepoint, restore)
rendered from a `Pipeline` by `dag_factory`, over thin hooks, operators, a sensor and a
trigger. The work is done by the core (`batchpoint.protocol`, `batchpoint.runtime`),
which imports nothing from Airflow.

Public entry points: `batchpoint.airflow.dag_factory.build_pipeline_dags` and
`batchpoint.airflow.config.AirflowDeployment`. Importing this package itself imports
nothing from Airflow, so tools can read the configuration without it.
"""
