"""Great Expectations as a GX user runs it: each state's suite through a
ValidationDefinition (its suite and a Spark batch definition of the state, saved in a GX
context), and once per gate run the actions of a GX Checkpoint on the results of the
verdict that counts, or Data Docs of each candidate's own results.

The context is the user's file context when one is named (`GxProject.root`, what
`gx.get_context(mode="file", project_root_dir=...)` takes), with the actions of the
Checkpoint named there (Slack, email, their Data Docs sites); otherwise an ephemeral
context made for each gate run, whose Checkpoint has one UpdateDataDocsAction to a Data
Docs site built in a local folder, once per judged candidate on its results alone, which
the gate stores beside that candidate's report. Each result names the state it judged
as its data asset, which Data Docs show.

The actions are run by the Checkpoint's own runner on a CheckpointResult made of the
ValidationDefinitions' results, not by `Checkpoint.run`: that gives every definition one
`batch_parameters`, while each state is a DataFrame of its own, and the gate judges up to
`max_candidates` checkpoints, each in up to two passes, of which only the final results
count (the design is in README.md, "GX Checkpoints and Data Docs").

GX is imported inside functions, never when batchpoint is imported.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batchpoint.errors import ConfigError
from batchpoint.storage.base import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: First pass: success only, which GX computes in a few Spark jobs for the whole suite.
QUICK_FORMAT = "BOOLEAN_ONLY"
#: Second pass, only when the first failed: counts and up to 20 unexpected values per
#: expectation, which cost a job or two per expectation.
DETAIL_FORMAT = "SUMMARY"
#: The Data Docs site of the default Checkpoint (ephemeral context only).
SITE = "batchpoint_gate"
#: The name of the Checkpoint whose actions run when the user names none.
DEFAULT_CHECKPOINT = "batchpoint_quality_gate"


@dataclass(frozen=True)
class GxProject:
    """A user's GX file context (`root`, the directory GX's `project_root_dir` is) and
    the Checkpoint in it whose actions run once per gate run. Both None: batchpoint's
    ephemeral context and its default Checkpoint (Data Docs only)."""

    root: str | None = None
    checkpoint: str | None = None

    def __post_init__(self) -> None:
        if self.checkpoint and not self.root:
            raise ConfigError(
                f"quality gate: gx_checkpoint={self.checkpoint!r} needs gx_project, the GX "
                "project directory whose context holds it"
            )

    def open(self) -> Any:
        """The context, checked: a project directory GX has made, holding the named
        Checkpoint (GX would make a new empty project at a mistyped path)."""
        import great_expectations as gx

        if self.root is None:
            return gx.get_context(mode="ephemeral")
        config = Path(self.root) / "gx" / "great_expectations.yml"
        if not config.is_file():
            raise ConfigError(
                f"quality gate: gx_project {self.root!r} is not a GX project: no {config}"
            )
        context = gx.get_context(mode="file", project_root_dir=self.root)
        if self.checkpoint:
            names = sorted(c.name for c in context.checkpoints.all())
            if self.checkpoint not in names:
                raise ConfigError(
                    f"quality gate: GX project {self.root!r} has no Checkpoint "
                    f"{self.checkpoint!r} (it has: {', '.join(names) or 'none'})"
                )
        return context


class GxValidator:
    """One GX context with one Spark data source, reused for every state a gate run
    validates (building a context costs about a second); the final result of each
    suite, by candidate, until the run's actions have seen them."""

    DATASOURCE = "batchpoint"

    def __init__(self, *, detailed: bool = False, project: GxProject | None = None) -> None:
        self.detailed = detailed
        self.project = project or GxProject()
        self._context: Any = None
        self._definitions: dict[tuple[str, str], Any] = {}
        self.results: dict[int, dict[Any, Any]] = {}  # checkpoint id -> result key -> result
        self._run_time = datetime.now(UTC)
        self._run_id: Any = None
        self._pipeline = "batchpoint"
        self._candidate = -1

    def new_run(self, started: float) -> None:
        """A new gate run: no results yet; a fresh ephemeral context, so that its Data
        Docs show this run alone (a user's context keeps what it stored)."""
        self._run_time = datetime.fromtimestamp(started, UTC)
        self.results = {}
        self._run_id = None
        if self.project.root is None:
            self._context = None
            self._definitions = {}

    def candidate(self, pipeline: str, checkpoint_id: int) -> None:
        """The results from now on are `checkpoint_id`'s, under one GX run id per
        candidate: a second pass overwrites the first in GX's results store."""
        from great_expectations.core.run_identifier import RunIdentifier

        self._pipeline = pipeline
        self._candidate = checkpoint_id
        self._run_id = RunIdentifier(
            run_name=f"{pipeline} checkpoint {checkpoint_id}", run_time=self._run_time
        )

    def context(self) -> Any:
        if self._context is None:
            from great_expectations.data_context.types.base import ProgressBarsConfig

            context = self.project.open()
            # Progress bars would fill the task log with one line per metric.
            context.variables.progress_bars = ProgressBarsConfig(globally=False)
            if self.DATASOURCE not in [d.name for d in context.data_sources.all().values()]:
                # persist=False: the validator persists (and unpersists) the state
                # itself; GX would cache every DataFrame it sees for the session's life.
                context.data_sources.add_spark(name=self.DATASOURCE, persist=False)
            self._context = context
        return self._context

    def _definition(self, asset: str, suite: Any) -> Any:
        """The ValidationDefinition of `suite` on the state `asset`, saved in the context
        with its suite and batch definition (added, or updated by name)."""
        key = (asset, suite.name)
        if key not in self._definitions:
            import great_expectations as gx

            context = self.context()
            source = context.data_sources.get(self.DATASOURCE)
            if asset not in [a.name for a in source.assets]:
                source.add_dataframe_asset(name=asset)
            data_asset = source.get_asset(asset)
            if "whole" not in [b.name for b in data_asset.batch_definitions]:
                data_asset.add_batch_definition_whole_dataframe("whole")
            batch = data_asset.get_batch_definition("whole")
            saved = context.suites.add_or_update(suite)
            self._definitions[key] = context.validation_definitions.add_or_update(
                gx.ValidationDefinition(
                    name=f"batchpoint {asset} {suite.name}", data=batch, suite=saved
                )
            )
        return self._definitions[key]

    def validate(
        self, asset: str, df: DataFrame, suite: Any, *, label: str | None = None
    ) -> dict[str, Any]:
        """The suite's result on the whole DataFrame, as JSON: with details (counts,
        examples) when it failed. A passing state, the common case, costs one cheap pass.
        `label` is what Data Docs call the state (`asset`, its key, by default)."""
        if self._run_id is None:
            self.candidate(self._pipeline, self._candidate)
        definition = self._definition(_asset_name(asset), suite)
        params = {"dataframe": df}
        quick = DETAIL_FORMAT if self.detailed else QUICK_FORMAT
        result = definition.run(batch_parameters=params, result_format=quick, run_id=self._run_id)
        if not result.success and not self.detailed:
            result = definition.run(
                batch_parameters=params, result_format=DETAIL_FORMAT, run_id=self._run_id
            )
        key = _result_key(result, self._run_id)
        self._name_asset(key, result, f"{self._pipeline}: {label or asset}")
        self.results.setdefault(self._candidate, {})[key] = result
        # Round-trip through json: GX's dict may hold numpy and Decimal values.
        return json.loads(json.dumps(result.to_json_dict(), default=str))

    def _name_asset(self, key: Any, result: Any, name: str) -> None:
        """Give the result the state's name where Data Docs read it (a DataFrame's batch
        spec has none, so its page says "Data asset: None"), in the context's store too,
        which its pages are built from."""
        spec = result.meta.get("batch_spec")
        if isinstance(spec, MutableMapping):
            spec["data_asset_name"] = name
        else:
            result.meta["batch_spec"] = {"data_asset_name": name}
        self.context().validation_results_store.set(key, result)

    def run_actions(self, pipeline: str, checkpoint_ids: Sequence[int], site: Path) -> str | None:
        """The user's project's Checkpoint actions, once, on the final results of
        `checkpoint_ids` (none validated: no actions). The link to its first Data Docs
        site, or None when it has none (a project that names no Checkpoint gets the
        default one, its site built in `site`)."""
        results = {k: v for cid in checkpoint_ids for k, v in self.results.get(cid, {}).items()}
        if not results:
            return None
        context = self.context()
        if self.project.checkpoint:
            name = self.project.checkpoint
            actions = context.checkpoints.get(name).actions
        else:
            name = DEFAULT_CHECKPOINT
            actions = _site_actions(context, site)
        self._act(name, actions, results, f"{pipeline} quality gate")
        if self.project.root is None:
            return None  # the caller publishes the site it asked for
        urls = context.get_docs_sites_urls()
        return urls[0]["site_url"] if urls else None

    def build_site(self, pipeline: str, checkpoint_id: int, site: Path) -> bool:
        """The default Checkpoint's Data Docs of one candidate's final results alone,
        built in `site`: what its checkpoint's page links, passed or failed. False when
        it has no results (its files failed the integrity checks first)."""
        results = self.results.get(checkpoint_id)
        if not results:
            return False
        actions = _site_actions(self.context(), site)
        self._act(DEFAULT_CHECKPOINT, actions, results, f"{pipeline} checkpoint {checkpoint_id}")
        return True

    def _act(self, name: str, actions: list[Any], results: dict[Any, Any], run: str) -> None:
        """Run `actions` as the Checkpoint `name` would, on `results`."""
        import great_expectations as gx
        from great_expectations.checkpoint.checkpoint import CheckpointResult
        from great_expectations.core.run_identifier import RunIdentifier

        checkpoint = gx.Checkpoint(
            name=name,
            validation_definitions=list(self._definitions.values()),
            actions=actions,
            result_format=DETAIL_FORMAT,
        )
        run_id = RunIdentifier(run_name=run, run_time=self._run_time)
        outcome = CheckpointResult(run_id=run_id, run_results=results, checkpoint_config=checkpoint)
        # The Checkpoint's own runner: its action order (Data Docs first, as the other
        # actions may link to them) and the context each action runs against.
        checkpoint._run_actions(checkpoint_result=outcome)


def _site_actions(context: Any, folder: Path) -> list[Any]:
    """The default Checkpoint's one action: update the Data Docs site in `folder`."""
    from great_expectations.checkpoint.actions import UpdateDataDocsAction

    _add_site(context, folder)
    return [UpdateDataDocsAction(name="data_docs", site_names=[SITE])]


def _add_site(context: Any, folder: Path) -> None:
    """The site SITE, built in `folder` (moved there if the context has it already)."""
    known = SITE in (context.config.data_docs_sites or {})
    (context.update_data_docs_site if known else context.add_data_docs_site)(
        SITE,
        {
            "class_name": "SiteBuilder",
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(folder),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )


def _result_key(result: Any, run_id: Any) -> Any:
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    return ValidationResultIdentifier(
        expectation_suite_identifier=ExpectationSuiteIdentifier(name=result.suite_name),
        run_id=run_id,
        batch_identifier=result.batch_id,
    )


def _asset_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", key)


def publish_site(store: ObjectStore, prefix: str, folder: Path) -> str:
    """Upload the site built in `folder` under `prefix`; the URI of its index page."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        store.upload_file(prefix + path.relative_to(folder).as_posix(), path)
    return store.child(prefix + "index.html")


def run_folder_name(started: float) -> str:
    """A gate run's folder: its start (sorts in time order), and a random tail, as two
    runs may start in the same millisecond (or on a clock that stands still)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started))
    return f"{stamp}.{int(started * 1000) % 1000:03d}Z-{uuid.uuid4().hex[:8]}"
