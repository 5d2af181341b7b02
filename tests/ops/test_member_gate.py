"""The gate of each pipeline of a cascade (ops.gates.choose_member_gate): the
deployment names one gate; a quality gate built for one pipeline judges only that one,
and the others of the cascade get their files checked only, said in the description."""

from __future__ import annotations

from pathlib import Path

from batchpoint.ops.gates import choose_member_gate, judged_pipeline
from batchpoint.quality.gate import QualityGate
from batchpoint.quality.hook import QualityRestoreGate
from batchpoint.runtime.restore import GateOptions, GateResult
from batchpoint.storage import StoreRef
from demo.payments import build_pipeline
from demo.reports import build_pipeline as build_reports


def _payments_gate(tmp_path: Path) -> QualityRestoreGate:
    gate = QualityGate(build_pipeline(), StoreRef.of(tmp_path.as_uri()))
    return QualityRestoreGate(lambda: gate)


def test_a_quality_gate_judges_its_own_pipeline_only(tmp_path: Path) -> None:
    gate = _payments_gate(tmp_path)
    assert judged_pipeline(gate) == "payments"
    own = choose_member_gate(build_pipeline(), GateOptions(), gate=gate, log=lambda _: None)
    assert own.gate is not None and "quality gate" in own.description

    other = choose_member_gate(
        build_reports(), GateOptions(skip_suites=("payments_seen",)), gate=gate
    )
    assert other.gate is None
    assert "judges pipeline 'payments', not 'reports'" in other.description
    assert other.warnings == ["suites to skip ignored for 'reports': no suite runs"]


def test_any_other_restore_gate_is_asked_about_every_pipeline() -> None:
    def anything(_candidate: object) -> GateResult:
        return GateResult(True)

    assert judged_pipeline(anything) is None
    choice = choose_member_gate(build_reports(), GateOptions(), gate=anything)
    assert choice.gate is not None
    off = choose_member_gate(build_reports(), GateOptions(enabled=False), gate=anything)
    assert off.gate is None and "OFF" in off.description
