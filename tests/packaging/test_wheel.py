"""batchpoint as an installed Airflow provider, without the repository: the wheel is
built, installed with the `airflow` extra into a fresh venv, and a three-line DAG file in
a folder of its own is parsed by Airflow's DagBag from a process that cannot see this
checkout (working directory elsewhere, no PYTHONPATH). The plugin and provider entry
points are found and the Spark entry point ships inside the installed package. The wheel
itself carries the license, `py.typed` and the project's classifiers, and the library
alone: not the repository's demo or local services.

The `connect` extra alone (with `airflow`: no full pyspark, no JVM) runs a small
pipeline's operator tasks, as an Airflow worker's task process runs them, against a real
Spark Connect server started from this checkout's pyspark: the thin client is
pyspark-client 4.2, the server Spark 4.3.

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
from pathlib import Path, PurePosixPath

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

    # As the dag processor parses a bundle: its folder on sys.path (the user's pipeline
    # module sits beside the DAG file), safe mode on (only files that mention airflow
    # and dag are parsed).
    try:  # Airflow 3.2 and newer
        from airflow.dag_processing.dagbag import BundleDagBag

        bag = BundleDagBag(dag_folder=sys.argv[1], bundle_path=sys.argv[1], safe_mode=True)
    except ImportError:  # 3.0 and 3.1: their processor puts the bundle on sys.path itself
        from airflow.models.dagbag import DagBag

        sys.path.append(sys.argv[1])
        bag = DagBag(dag_folder=sys.argv[1], safe_mode=True, include_examples=False)
    plugins = {ep.name: ep.load() for ep in md.entry_points(group="airflow.plugins")}
    providers = {ep.name: ep.load() for ep in md.entry_points(group="apache_airflow_provider")
                 if ep.dist.name == "batchpoint"}
    info = providers["provider_info"]()

    from airflow.providers_manager import ProvidersManager
    manager = ProvidersManager()
    manager.initialize_providers_list()  # validates the info against Airflow's schema
    from airflow import plugins_manager
    names = [p["name"] for p in plugins_manager.get_plugin_info()]
    # 3.0 and 3.1 keep the errors in a module global; 3.2 and newer behind a function
    plugin_errors = getattr(plugins_manager, "get_import_errors", None)
    plugin_errors = plugin_errors() if plugin_errors else plugins_manager.import_errors

    from batchpoint.airflow.config import AirflowDeployment, default_spark_job
    job = default_spark_job()
    print(json.dumps({
        "airflow": md.version("apache-airflow"),
        "package": batchpoint.__file__,
        "sys_path": sys.path,
        "dags": sorted(bag.dag_ids),
        "errors": bag.import_errors,
        "plugin": getattr(plugins.get("batchpoint"), "name", None),
        "provider": [info["package-name"], info["versions"]],
        "discovered": "batchpoint" in manager.providers,
        "plugin_errors": plugin_errors,
        "plugin_names": names,
        "spark_job": str(job),
        "spark_job_exists": job.is_file(),
        "deployment_job": AirflowDeployment.from_env().spark_job,
        "storage_created": os.path.exists(os.environ["BATCHPOINT_ROOT"][len("file://"):]),
    }))
    """
)


# What an operator task's execute runs in connect mode (SparkOperatorJob): its Spark
# settings (the endpoint of its spark_connect connection), then the deployment's launcher;
# the trigger and finalize tasks around them, so that the checkpoint completes.
CONNECT_TASKS = textwrap.dedent(
    """
    import dataclasses, importlib.metadata as md, json, os, sys
    import pyspark
    from batchpoint.airflow.config import AirflowDeployment
    from batchpoint.airflow.hooks import launcher_for
    from batchpoint.airflow.operators.checkpoint import SparkOperatorJob
    from batchpoint.ops.epoch import finalize
    from batchpoint.protocol.sinks import read_sink_table
    from batchpoint.runtime.driver import PipelineDriver
    from batchpoint.runtime.loader import load_pipeline

    ref = os.environ["BATCHPOINT_PIPELINE_REF"]
    deployment = AirflowDeployment.from_env()
    driver = PipelineDriver(load_pipeline(ref), deployment.settings.store_ref)
    checkpoint_id = driver.trigger().checkpoint_id
    jobs = {}
    # The operator's client in the task's own process; the sink's as the task's child
    # (`python -m batchpoint.jobs.run_operator --connect`).
    for name, client in (("dedup", "task"), ("new_orders", "subprocess")):
        where = dataclasses.replace(deployment, connect_client=client)
        task = SparkOperatorJob(task_id=name, pipeline_ref=ref, operator=name, deployment=where)
        settings = task.spark_settings()
        result = launcher_for(where, ref).launch(settings, checkpoint_id, name, "a1", print)
        jobs[name] = {"status": result.status.value, "output": result.output()}
    done = finalize(driver, checkpoint_id)
    table = read_sink_table(driver.store, "orders", "new_orders")
    distributions = {d.metadata["Name"] for d in md.distributions()}
    print(json.dumps({
        "package": sys.modules["batchpoint"].__file__,
        "pyspark": [pyspark.__version__, pyspark.__file__],
        "spark_distributions": sorted(d for d in distributions if "spark" in d or "py4j" in d),
        "jars": os.path.isdir(os.path.join(os.path.dirname(pyspark.__file__), "jars")),
        "remote_variable": os.environ.get("BATCHPOINT_SPARK_REMOTE"),
        "jobs": jobs,
        "status": done.outcome.status.value if done.outcome else None,
        "published": sorted(table.column("id").to_pylist()),
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


def _constraints(uv: str, work: Path, env: dict[str, str], *extras: str) -> Path:
    """The locked versions of `extras` (all but `connect` when none), so that everything
    comes from the cache. `connect` and `spark` conflict: uv.lock resolves them apart."""
    chosen = [f"--extra={e}" for e in extras] or ["--all-extras", "--no-extra=connect"]
    constraints = work / "constraints.txt"
    _run(
        [uv, "export", "--frozen", "--no-hashes", *chosen, "--no-dev",
         "--no-emit-project", "--project", str(PROJECT), "-o", str(constraints)],
        work,
        env,
    )  # fmt: skip
    return constraints


def _venv(uv: str, work: Path, env: dict[str, str], wheel: Path, extras: str) -> Path:
    """A fresh venv with the wheel and `extras` at their locked versions; its python."""
    constraints = _constraints(uv, work, env, *(extras.split(",") if "connect" in extras else ()))
    venv = work / "venv"
    _run([uv, "venv", "--python", sys.executable, str(venv)], work, env)
    python = venv / "bin" / "python"
    _run(
        [uv, "pip", "install", "--python", str(python), "-c", str(constraints),
         f"batchpoint[{extras}] @ {wheel.as_uri()}"],
        work,
        env,
    )  # fmt: skip
    return python


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel) -> dict:
    uv = _uv()
    work = tmp_path_factory.mktemp("wheel")
    env = _clean_env()
    python = _venv(uv, work, env, wheel, "airflow")
    return _parse_dags(python, work, env)


def _parse_dags(python: Path, work: Path, env: dict[str, str]) -> dict:
    """What PROBE finds with `python`, the DAG file and the pipeline in a bundle of
    their own."""
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
    return {**json.loads(out.strip().splitlines()[-1]), "venv": str(python.parent.parent)}


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
    # the DAG's Checkpoints tab (built from ui/): installs need no Node
    assert "batchpoint/airflow/static/checkpoints-tab.js" in names
    # what GX's Data Docs load from CDNs, for the UI to serve them offline
    assets = PROJECT / "include" / "batchpoint" / "airflow" / "static" / "data-docs"
    shipped = {
        f"batchpoint/airflow/static/data-docs/{p.relative_to(assets).as_posix()}"
        for p in assets.rglob("*")
        if p.is_file()
    }
    assert len(shipped) > 20 and shipped <= names
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


#: The repository's own tools (top-level folders of the checkout), never in the wheel.
REPOSITORY_TOOLS = {"demo", "devstack"}


def test_the_wheel_ships_the_library_alone(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {PurePosixPath(n).parts[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"batchpoint"}
    tools = [
        n
        for n in names
        if REPOSITORY_TOOLS & {PurePosixPath(p).stem for p in PurePosixPath(n).parts}
    ]
    assert tools == []
    assert "batchpoint/__init__.py" in names and "batchpoint/jobs/run_operator.py" in names


@pytest.fixture(scope="module")
def connect_tasks(tmp_path_factory, wheel, connect_server) -> dict:
    uv = _uv()
    work = tmp_path_factory.mktemp("connect-extra")
    env = _clean_env()
    python = _venv(uv, work, env, wheel, "connect,airflow")
    bundle = work / "dags"
    bundle.mkdir()
    (bundle / "orders_pipeline.py").write_text(PIPELINE)
    storage = work / "storage"
    partition = storage / "sources" / "orders" / "2026-11-26"
    partition.mkdir(parents=True)
    (partition / "0001.jsonl").write_text("".join(f'{{"id": "{i}"}}\n' for i in "cab"))
    # The server only in the task's spark_connect connection, as a deployment that keeps
    # its address in Airflow has it (BATCHPOINT_SPARK_REMOTE unset).
    host, port = connect_server.url.removeprefix("sc://").split(":")
    task_env = {
        **env,
        "AIRFLOW_HOME": str(work / "airflow-home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_BP_SPARK": json.dumps(
            {"conn_type": "spark_connect", "host": host, "port": int(port)}
        ),
        "BATCHPOINT_ROOT": storage.as_uri(),
        "BATCHPOINT_PIPELINE_REF": "orders_pipeline:orders",
        "BATCHPOINT_SPARK_MODE": "connect",
        "BATCHPOINT_SPARK_CONN_ID": "bp_spark",
        # The pipeline's module where the task and its child job both import it.
        "PYTHONPATH": str(bundle),
    }
    task_env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    # A script file, as a worker's task process has a __main__ file: under `python -c`
    # pyspark.sql.connect takes itself for a doctest run and looks for a SPARK_HOME.
    script = work / "run_tasks.py"
    script.write_text(CONNECT_TASKS)
    out = _run([str(python), str(script)], work, task_env)
    return {**json.loads(out.strip().splitlines()[-1]), "venv": str(python.parent.parent)}


@pytest.mark.spark
def test_the_connect_extra_alone_runs_operator_tasks_on_a_connect_server(connect_tasks):
    import pyspark

    # The thin client, not the full distribution: no jars, no py4j, no pyspark beside it.
    version, location = connect_tasks["pyspark"]
    assert location.startswith(connect_tasks["venv"])
    assert connect_tasks["package"].startswith(connect_tasks["venv"])
    assert connect_tasks["spark_distributions"] == ["pyspark-client"]
    assert connect_tasks["jars"] is False
    # A client of another minor than the server's: what the extra's range allows.
    assert version.split(".")[:2] == ["4", "2"] and pyspark.__version__.startswith("4.3.")
    assert connect_tasks["remote_variable"] is None  # the server came from the connection
    for name, job in connect_tasks["jobs"].items():
        assert job["status"] == "acknowledged", f"{name}: {job['output']}"
    assert connect_tasks["status"] == "COMPLETED"
    assert connect_tasks["published"] == ["a", "b", "c"]


#: The lowest Airflow the `airflow` extra allows (pyproject.toml); the names that moved
#: since come through batchpoint.airflow.compat. bench/compat.py runs the payments
#: pipeline on it (tests/packaging/test_compat.py).
LOWEST_AIRFLOW = "3.0.0"


@pytest.fixture(scope="module")
def on_lowest_airflow(tmp_path_factory, wheel) -> dict:
    """The wheel with the `airflow` extra on LOWEST_AIRFLOW, everything else as the
    resolver picks it for that version (PyPI, or uv's cache)."""
    uv = _uv()
    work = tmp_path_factory.mktemp("lowest-airflow")
    env = _clean_env()
    pinned = work / "lowest.txt"
    pinned.write_text(f"apache-airflow=={LOWEST_AIRFLOW}\n")
    venv = work / "venv"
    _run([uv, "venv", "--python", sys.executable, str(venv)], work, env)
    python = venv / "bin" / "python"
    _run(
        [uv, "pip", "install", "--python", str(python), "-c", str(pinned),
         f"batchpoint[airflow] @ {wheel.as_uri()}"],
        work,
        env,
    )  # fmt: skip
    return _parse_dags(python, work, env)


def test_the_lowest_supported_airflow_parses_the_dags_and_finds_the_provider(on_lowest_airflow):
    found = on_lowest_airflow
    assert found["airflow"] == LOWEST_AIRFLOW
    assert found["errors"] == {}
    assert found["dags"] == ["orders_checkpoint", "orders_restore", "orders_savepoint"]
    assert found["plugin"] == "batchpoint" and found["plugin_errors"] == {}
    assert found["discovered"] is True  # the provider info passes that version's schema
    assert found["provider"] == ["batchpoint", ["0.1.0"]]
