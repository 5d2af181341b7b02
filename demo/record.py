"""What a demo kept with `./dev demo --keep DIR` records in DIR/demo.json: how to reopen
its S3 (port, bucket, keys) and its Spark Connect server (port), and the deployment as
it was last deployed (its BATCHPOINT_* settings, the pipeline ref the last deploy's, and
Airflow's AIRFLOW_*). `./dev ui DIR` reopens it from there, rewrites the endpoints it
serves at, and prints the `export` block that points the CLI at them.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from batchpoint.errors import ConfigError
from demo.leftovers import MARKER

STATE_FILE = "demo.json"

# Set for one step of the demo, not part of the deployment.
_NOT_SETTINGS = (MARKER, "BATCHPOINT_FAULT")


def deployment_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The BATCHPOINT_* settings of the deployment in `environ`: not the run's marker
    (which would make `./dev ui`'s processes carry the demo's, and its check for
    leftovers blind to them) nor a fault armed for one step."""
    return {
        key: value
        for key, value in environ.items()
        if key.startswith("BATCHPOINT_") and not key.startswith(_NOT_SETTINGS)
    }


@dataclass(frozen=True)
class DemoRecord:
    s3_port: int
    bucket: str
    access_key: str
    secret_key: str
    #: AIRFLOW_* and BATCHPOINT_* of the deployment, as last deployed.
    env: dict[str, str] = field(default_factory=dict)
    #: The Spark Connect server's port (connect mode); None in submit mode, and in the
    #: records of demos kept before it was recorded (then read from the remote).
    spark_port: int | None = None

    @classmethod
    def read(cls, workdir: Path) -> DemoRecord:
        path = workdir / STATE_FILE
        if not path.is_file():
            raise ConfigError(
                f"{path} not found: run `./dev demo --keep {workdir}` first "
                "(it records how to reopen its S3 and Airflow there)"
            )
        raw = json.loads(path.read_text())
        known = {name: raw[name] for name in cls.__dataclass_fields__ if name in raw}
        # Demos kept before deployment_settings recorded their run's marker too.
        env = {k: v for k, v in known.pop("env", {}).items() if not k.startswith(_NOT_SETTINGS)}
        return cls(**known, env=env)

    def write(self, workdir: Path) -> None:
        path = workdir / STATE_FILE
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(asdict(self), indent=2))
        partial.replace(path)  # a reader sees the old record or the new one

    @property
    def pipeline_ref(self) -> str | None:
        return self.env.get("BATCHPOINT_PIPELINE_REF")

    @property
    def spark_connect(self) -> bool:
        return self.env.get("BATCHPOINT_SPARK_MODE", "connect") == "connect"

    def recorded_spark_port(self) -> int | None:
        if self.spark_port is not None:
            return self.spark_port
        remote = self.env.get("BATCHPOINT_SPARK_REMOTE", "")
        tail = remote.rsplit(":", 1)[-1].split("/", 1)[0]
        return int(tail) if tail.isdigit() else None

    def serving_spark(self, remote: str, port: int) -> DemoRecord:
        """This record with the Spark Connect server that serves it now."""
        return replace(self, spark_port=port, env={**self.env, "BATCHPOINT_SPARK_REMOTE": remote})

    def cli_exports(self, project_root: Path, bin_dir: Path) -> list[str]:
        """Shell lines that point the batchpoint CLI at this demo: its settings, the
        project root on PYTHONPATH (the demo's pipelines are imported from there) and the
        environment's bin/ on PATH."""
        lines = [
            f"export {key}={shlex.quote(value)}"
            for key, value in sorted(deployment_settings(self.env).items())
        ]
        root, bin_ = shlex.quote(str(project_root)), shlex.quote(str(bin_dir))
        lines.append(f'export PYTHONPATH={root}"${{PYTHONPATH:+:$PYTHONPATH}}"')
        lines.append(f'export PATH={bin_}:"$PATH" SPARK_LOCAL_IP=127.0.0.1')
        return lines
