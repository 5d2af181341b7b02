"""batchpoint DAGs: for each pipeline named by BATCHPOINT_PIPELINE_REF, its
`<pipeline>_checkpoint`, `<pipeline>_savepoint` and `<pipeline>_restore` DAGs, on the
storage root BATCHPOINT_ROOT (both required: without them the import fails naming them).
The same three lines work in any dags folder."""

from batchpoint.airflow.dags import load_dags

globals().update(load_dags())
