// The history table's columns and cells, as the HTML page has them
// (include/batchpoint/airflow/ui_pages.py: HISTORY_COLUMNS and _history_cell).
export const HISTORY_COLUMNS = [
  ["checkpoint_id", "id"],
  ["type", "type"],
  ["status", "status"],
  ["trigger_time", "triggered"],
  ["duration_s", "duration"],
  ["state_size", "size"],
  ["rows", "rows"],
  ["acks", "acks"],
  ["reason", "reason"],
  ["quarantined", "gate"],
  ["restores", "restored to"],
];

export function when(epochS) {
  // 0: unknown (an unreadable record's row in the history)
  if (!epochS) return "";
  return new Date(epochS * 1000).toISOString().slice(0, 19).replace("T", " ");
}

export function size(n) {
  if (n === null || n === undefined) return "";
  for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
  }
  return `${n.toFixed(0)} B`;
}

// What a restore passed over on its way to the target (ops/restore_history.py's words).
function passedOverText(passedOver, quarantined) {
  if (!passedOver?.length) return "";
  const plural = passedOver.length > 1 ? "s" : "";
  const held = quarantined?.length ? ` (quarantined ${quarantined.join(", ")})` : "";
  return `; passed over checkpoint${plural} ${passedOver.join(", ")}${held}`;
}

function restoreText(e) {
  const gate = e.gated ? `gated by the ${e.gate}` : "ungated";
  const walk = passedOverText(e.passed_over, e.quarantined);
  const rewinding = e.in_progress ? ", sinks still rewinding" : "";
  return `restore generation ${e.restore_generation} at ${when(e.restored_at)}, ${gate}${walk}${rewinding}`;
}

export function cell(row, key) {
  const value = row[key];
  switch (key) {
    case "duration_s":
      return value === null ? "" : `${value.toFixed(1)}s`;
    case "trigger_time":
      return when(value);
    case "state_size":
      return size(value);
    case "acks":
      return `${row.acknowledged}/${row.expected}`;
    case "quarantined":
      return value ? "quarantined" : "";
    case "restores":
      return (value ?? []).map(restoreText).join("; ");
    case "reason":
      return row.failure_reason ? `${row.failure_reason}: ${row.failure_message}` : "";
    default:
      return value === null || value === undefined ? "" : String(value);
  }
}

// The pipeline whose checkpoint, savepoint or restore DAG is `dagId`, from /api/pipelines.
export function dagsPipeline(entries, dagId) {
  return entries.find((entry) => Object.values(entry.dags).includes(dagId));
}
