"""batchpoint as an installed Airflow provider, without the repository: the wheel is
built, installed with the `airflow` extra into a fresh venv, and a three-line DAG file in
a folder of its own is parsed by Airflow's DagBag from a process that cannot see this
checkout (working directory elsewhere, no PYTHONPATH). The plugin and provider entry
points are found and the Spark entry point ships inside the installed package. The wheel
itself carries the license, `py.typed` and the project's classifiers.

Packages come from uv's cache at the versions of uv.lock (PyPI only for what the cache
lacks), so the run takes about a minute once the cache is warm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROJECT = Path(__file__).resolve().parents[2]
DAG_FILE = """\
from batchpoint.airflow.dags import load_dags

globals().update(load_dags())
"""
# A user's pipeline, beside the DAG file in the same bundle.
PIPELINE = """\
import pyarrow as pa

from batchpoint.runtime.api import Pipeline

EVENTS = pa.schema([pa.field("id", pa.string(), nullable=False)])
orders = Pipeline("orders")
orders.source("events", root="sources/orders", schema=EVENTS, key=["id"])


@orders.operator(inputs=["events"], key=["id"], states={"seen": EVENTS})
def dedup(ctx):
    seen = ctx.state("seen")
    fresh = ctx.input("events").join(seen, "id", "left_anti")
    ctx.set_state("seen", seen.unionByName(fresh))
    return fresh


orders.sink("new_orders", inputs=["dedup"], key=["id"], mode="append")
"""

PROBE = textwrap.dedent(
    """
    import importlib.metadata as md, json, os, sys, warnings
    import batchpoint
    from airflow.dag_processing.dagbag import BundleDagBag

    # As the dag processor parses a bundle: its folder on sys.path (the user's pipeline
    # module sits beside the DAG file), safe mode on (only files that mention airflow
    # and dag are parsed).
    bag = BundleDagBag(dag_folder=sys.argv[1], bundle_path=sys.argv[1], safe_mode=True)
    plugins = {ep.name: ep.load() for ep in md.entry_points(group="airflow.plugins")}
    providers = {ep.name: ep.load() for ep in md.entry_points(group="apache_airflow_provider")
                 if ep.dist.name == "batchpoint"}
    info = providers["provider_info"]()

    from airflow.providers_manager import ProvidersManager
    manager = ProvidersManager()
    manager.initialize_providers_list()  # validates the info against Airflow's schema
    from airflow import plugins_manager
    names = [p["name"] for p in plugins_manager.get_plugin_info()]

    from batchpoint.airflow.config import AirflowDeployment, default_spark_job
    job = default_spark_job()
    print(json.dumps({
        "package": batchpoint.__file__,
        "sys_path": sys.path,
        "dags": sorted(bag.dag_ids),
        "errors": bag.import_errors,
        "plugin": getattr(plugins.get("batchpoint"), "name", None),
        "provider": [info["package-name"], info["versions"]],
        "discovered": "batchpoint" in manager.providers,
        "plugin_errors": plugins_manager.get_import_errors(),
        "plugin_names": names,
        "spark_job": str(job),
        "spark_job_exists": job.is_file(),
        "deployment_job": AirflowDeployment.from_env().spark_job,
        "storage_created": os.path.exists(os.environ["BATCHPOINT_ROOT"][len("file://"):]),
    }))
    """
)


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    if not os.access(found, os.X_OK):
        pytest.skip("uv is not installed (./dev setup installs it)")
    return found


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith(("BATCHPOINT_", "AIRFLOW"))
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("dist")
    _run([_uv(), "build", "--wheel", "--out-dir", str(work), str(PROJECT)], work, _clean_env())
    (built,) = work.glob("batchpoint-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel) -> dict:
    uv = _uv()
    work = tmp_path_factory.mktemp("wheel")
    env = _clean_env()
    # The locked versions, so that everything comes from the cache.
    constraints = work / "constraints.txt"
    _run(
        [uv, "export", "--frozen", "--no-hashes", "--all-extras", "--no-dev",
         "--no-emit-project", "--project", str(PROJECT), "-o", str(constraints)],
        work,
        env,
    )  # fmt: skip
    venv = work / "venv"
    _run([uv, "venv", "--python", sys.executable, str(venv)], work, env)
    python = venv / "bin" / "python"
    _run(
        [uv, "pip", "install", "--python", str(python), "-c", str(constraints),
         f"batchpoint[airflow] @ {wheel.as_uri()}"],
        work,
        env,
    )  # fmt: skip

    dags = work / "dags"
    dags.mkdir()
    (dags / "orders_dags.py").write_text(DAG_FILE)
    (dags / "orders_pipeline.py").write_text(PIPELINE)
    # spark-submit comes from a Spark installation here, not from the airflow extra:
    # parsing only checks that it is an executable file.
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "spark-submit").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "spark-submit").chmod(0o755)
    home = work / "airflow-home"
    probe_env = {
        **env,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "BATCHPOINT_ROOT": (work / "storage").as_uri(),
        "BATCHPOINT_PIPELINE_REF": "orders_pipeline:orders",
        "BATCHPOINT_SPARK_SUBMIT": str(bin_dir / "spark-submit"),
        "BATCHPOINT_SPARK_MODE": "submit",
    }
    out = _run([str(python), "-c", PROBE, str(dags)], work, probe_env)
    return {**json.loads(out.strip().splitlines()[-1]), "venv": str(venv)}


def test_the_package_is_the_installed_one_not_the_checkout(installed):
    assert installed["package"].startswith(installed["venv"])
    assert not any(p.startswith(str(PROJECT)) for p in installed["sys_path"])


def test_a_three_line_dag_file_loads_the_batchpoint_dags(installed):
    assert installed["errors"] == {}
    assert installed["storage_created"] is False  # parsing writes nothing
    assert installed["dags"] == ["orders_checkpoint", "orders_restore", "orders_savepoint"]


def test_the_plugin_and_provider_entry_points_are_found(installed):
    assert installed["plugin"] == "batchpoint"
    assert installed["provider"] == ["batchpoint", ["0.1.0"]]
    assert installed["discovered"] is True
    assert installed["plugin_errors"] == {}
    assert installed["plugin_names"].count("batchpoint") == 1


def test_the_spark_entry_point_ships_inside_the_package(installed):
    job = installed["spark_job"]
    assert job.startswith(installed["venv"]) and job.endswith("batchpoint/jobs/run_operator.py")
    assert installed["spark_job_exists"] is True
    assert installed["deployment_job"] == job


def test_the_wheel_ships_the_license_py_typed_and_classifiers(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert "batchpoint/py.typed" in names  # PEP 561: type checkers read the hints
    templates = PROJECT / "include" / "batchpoint" / "airflow" / "templates"
    shipped = {f"batchpoint/airflow/templates/{p.name}" for p in templates.iterdir()}
    assert shipped and shipped <= names  # the Checkpoints pages render from these
    assert license_text == (PROJECT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text  # the full text, not a notice
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    classifiers = metadata.get_all("Classifier") or []
    assert "Framework :: Apache Airflow :: Provider" in classifiers
    assert "Typing :: Typed" in classifiers
    supported = {c.rsplit(" :: ", 1)[1] for c in classifiers if c.count(".") == 1}
    assert supported == {"3.11", "3.12", "3.13"}  # as requires-python says
    assert metadata["Requires-Python"] == "<3.14,>=3.11"
