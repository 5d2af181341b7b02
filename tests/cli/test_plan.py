"""`batchpoint plan`: the deploy plan of the code on the head, a checkpoint or a
savepoint, as text or JSON; exit 0 deployable, 3 refused, 2 a mistake. The epochs are
fake (support/fake_epochs.py): the plan reads records only, never a state file."""

from __future__ import annotations

import pytest

from batchpoint.runtime.driver import PipelineDriver
from support.cli import REF, Cli

VARIANTS = "support.deploy_variants"


def test_the_same_code_plans_deployable(cli: Cli, payments: PipelineDriver) -> None:
    run = cli("plan", "--pipeline-ref", REF)
    assert run.code == 0, run.err
    assert run.out.startswith("deploy plan against checkpoint 3: deployable")
    body = cli("plan", "--pipeline-ref", REF, "--json").json
    assert body["deployable"] is True and body["base_checkpoint"] == 3
    assert {e["verdict"] for e in body["entries"]} == {"kept"}


def test_a_rename_without_uid_exits_3_naming_the_fix(cli: Cli, payments: PipelineDriver) -> None:
    run = cli("plan", "--pipeline-ref", f"{VARIANTS}:renamed_without_uid")
    assert run.code == 3, run.err
    assert "REFUSED (1 problem(s))" in run.out
    assert "declare uid='dedup' on 'dedup2'" in run.out
    body = cli("plan", "--pipeline-ref", f"{VARIANTS}:renamed_without_uid", "--json").json
    assert body["deployable"] is False and len(body["problems"]) == 1
    # with its uid the same rename is kept
    kept = cli("plan", "--pipeline-ref", f"{VARIANTS}:renamed_with_uid", "--json")
    assert kept.code == 0
    renamed = [e for e in kept.json["entries"] if e["verdict"] == "renamed"]
    assert renamed == [
        {
            "kind": "operator",
            "uid": "dedup",
            "name": "dedup2",
            "verdict": "renamed",
            "detail": "'dedup' -> 'dedup2'",
            "refused": False,
        }
    ]


def test_a_removed_sink_is_refused_unless_declared_or_allowed(
    cli: Cli, payments: PipelineDriver
) -> None:
    refused = cli("plan", "--pipeline-ref", f"{VARIANTS}:alerts_removed")
    assert refused.code == 3 and "pipeline.drop_sink('alerts')" in refused.out
    allowed = cli(
        "plan", "--pipeline-ref", f"{VARIANTS}:alerts_removed", "--allow-non-restored-state"
    )
    assert allowed.code == 0, allowed.out
    assert cli("plan", "--pipeline-ref", f"{VARIANTS}:alerts_dropped").code == 0


def test_a_named_checkpoint_is_planned_against(cli: Cli, payments: PipelineDriver) -> None:
    run = cli("plan", "--pipeline-ref", REF, "--checkpoint", "2", "--json")
    assert run.code == 0 and run.json["base_checkpoint"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--checkpoint", "99"), "has no completed checkpoint 99"),
        (("--checkpoint", "0"), "checkpoint ids start at 1"),
        (("--checkpoint", "2", "--savepoint", "x"), "not allowed with argument"),
        (("--savepoint", "savepoints/none"), "is not a savepoint"),
        (("--savepoint", "/etc"), "starts with '/'"),
        (("--savepoint", "file:///etc"), "outside"),
    ],
)
def test_bad_input_is_one_clear_error(
    cli: Cli, payments: PipelineDriver, argv: tuple[str, ...], message: str
) -> None:
    run = cli("plan", "--pipeline-ref", REF, *argv)
    assert run.code == 2, run.out
    assert message in run.err and "Traceback" not in run.err


def test_without_the_code_it_says_how_to_give_it(cli: Cli, payments: PipelineDriver) -> None:
    run = cli("plan")
    assert run.code == 2
    assert "needs the pipeline's code: give --pipeline-ref" in run.err


def test_an_unknown_pipeline_is_a_mistake(cli: Cli, root: str) -> None:
    run = cli("plan", "--pipeline-ref", REF, "--json")
    assert run.code == 2 and "no pipeline 'payments'" in run.json["error"]


def test_a_pipeline_name_no_reference_has_is_named(cli: Cli, payments: PipelineDriver) -> None:
    """Said "0 of the referenced pipelines match: name one with --pipeline" before,
    when --pipeline was what was given."""
    run = cli("plan", "--pipeline-ref", REF, "--pipeline", "other")
    assert run.code == 2
    assert run.err.strip() == "error: no referenced pipeline is named 'other' (they are: payments)"
