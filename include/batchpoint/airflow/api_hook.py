"""`AirflowApiHook`: Airflow's public REST API, the only way a task can pause another
DAG in Airflow 3 (stop-with-savepoint)."""

from __future__ import annotations

from typing import Any

from batchpoint.airflow.compat import AirflowNotFoundException, BaseHook
from batchpoint.airflow.storage_connection import connection_url
from batchpoint.errors import ConfigError


class AirflowApiHook(BaseHook):
    """Airflow's public REST API with credentials from an http connection: host, port,
    schema (http/https), login and password of a user allowed to pause DAGs."""

    conn_name_attr = "api_conn_id"
    default_conn_name = "batchpoint_airflow_api"
    conn_type = "http"
    hook_name = "Airflow REST API (batchpoint)"

    def __init__(self, api_conn_id: str = default_conn_name, timeout: float = 15.0) -> None:
        super().__init__()
        self.api_conn_id = api_conn_id
        self.timeout = timeout

    def check_configured(self) -> None:
        """Raise ConfigError with how to configure it when the connection is missing."""
        self._connection()

    def _connection(self) -> Any:
        try:
            return self.get_connection(self.api_conn_id)
        except AirflowNotFoundException:
            raise ConfigError(
                f"stopping the pipeline needs the Airflow connection '{self.api_conn_id}' "
                "(type http: host and port of the Airflow API server, login and password of "
                "a user allowed to pause DAGs), e.g. AIRFLOW_CONN_"
                f'{self.api_conn_id.upper()}=\'{{"conn_type": "http", "host": '
                '"airflow-apiserver", "port": 8080, "login": "admin", "password": "..."}\' '
                "or Admin > Connections in the UI"
            ) from None

    def base_url(self, conn: Any | None = None) -> str:
        conn = conn or self._connection()
        if not conn.host:
            raise ConfigError(f"Airflow connection '{self.api_conn_id}' has no host")
        return connection_url(conn)

    def _headers(self, base: str, conn: Any) -> dict[str, str]:
        import httpx

        if not conn.login:
            return {}  # e.g. SimpleAuthManager with all users admin: no token needed
        response = httpx.post(
            f"{base}/auth/token",
            json={"username": conn.login, "password": conn.password or ""},
            timeout=self.timeout,
        )
        if response.status_code >= 400:
            raise ConfigError(
                f"Airflow API at {base} refused the credentials of connection "
                f"'{self.api_conn_id}': HTTP {response.status_code} {response.text[:200]}"
            )
        return {"Authorization": f"Bearer {response.json()['access_token']}"}

    def set_paused(self, dag_id: str, paused: bool = True) -> dict[str, Any]:
        import httpx

        conn = self._connection()
        base = self.base_url(conn)
        response = httpx.patch(
            f"{base}/api/v2/dags/{dag_id}",
            params={"update_mask": "is_paused"},
            json={"is_paused": paused},
            headers=self._headers(base, conn),
            timeout=self.timeout,
        )
        if response.status_code >= 400:
            raise ConfigError(
                f"Airflow API at {base} could not {'pause' if paused else 'unpause'} "
                f"'{dag_id}': HTTP {response.status_code} {response.text[:300]}"
            )
        body = response.json()
        return {"dag_id": body.get("dag_id", dag_id), "is_paused": body.get("is_paused")}
