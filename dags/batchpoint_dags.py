"""batchpoint DAGs: for each pipeline named by BATCHPOINT_PIPELINE_REF (default: the
`payments` demo), its `<pipeline>_checkpoint`, `<pipeline>_savepoint` and
`<pipeline>_restore` DAGs. The same three lines work in any dags folder."""

from batchpoint.airflow.dags import load_dags

globals().update(load_dags())
