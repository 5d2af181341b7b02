// The Checkpoints tab of a DAG in Airflow's UI (the plugin's `react_apps`, see
// include/batchpoint/airflow/plugin.py). Airflow imports this file as an ES module and
// renders `globalThis.AirflowPlugin` with the route's {dagId, runId, taskId, mapIndex};
// it lends its own React and Chakra UI through globals, so the bundle ships neither and
// the tab is drawn with the UI's components in its theme and colour mode.
import { HISTORY_COLUMNS, cell, dagsPipeline } from "./format.js";

const { createElement: h, Fragment, useEffect, useState } = globalThis.React;
const { Badge, Box, Heading, HStack, Link, Table, Text } = globalThis.ChakraUI;

// Relative to the UI's base URL, like the plugin's own links, so a proxy prefix works.
const here = (path) => new URL(`batchpoint/${path}`, document.baseURI).href;

async function getJson(path) {
  // The UI's own credentials: the session cookie the API server set at login.
  const answer = await fetch(here(path), { credentials: "same-origin" });
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    throw new Error(`${answer.status}: ${body.detail ?? answer.statusText}`);
  }
  return answer.json();
}

async function load(dagId) {
  const entry = dagsPipeline(await getJson("api/pipelines"), dagId);
  if (entry === undefined) {
    return { missing: true };
  }
  const page = await getJson(`api/${encodeURIComponent(entry.pipeline)}/checkpoints`);
  return { entry, page };
}

const STATUS_COLOURS = { running: "green", failing: "red", stopping: "orange", stopped: "gray" };

function Status({ overview }) {
  return (
    <HStack gap={3} mb={3} data-testid="batchpoint-status">
      <Badge colorPalette={STATUS_COLOURS[overview.status] ?? "gray"}>{overview.status}</Badge>
      <Text>{overview.status_detail}</Text>
      <Text color="fg.muted">
        latest checkpoint {overview.latest_checkpoint ?? "none"}, latest savepoint{" "}
        {overview.latest_savepoint ?? "none"}, {overview.consecutive_failures} consecutive
        failures
      </Text>
    </HStack>
  );
}

function History({ pipeline, rows }) {
  return (
    <Table.Root size="sm" striped data-testid="batchpoint-history">
      <Table.Header>
        <Table.Row>
          {HISTORY_COLUMNS.map(([key, label]) => (
            <Table.ColumnHeader key={key}>{label}</Table.ColumnHeader>
          ))}
        </Table.Row>
      </Table.Header>
      <Table.Body>
        {rows.map((row) => (
          <Table.Row key={row.checkpoint_id}>
            {HISTORY_COLUMNS.map(([key]) => (
              <Table.Cell key={key}>
                {key === "checkpoint_id" ? (
                  <Link
                    href={here(`${encodeURIComponent(pipeline)}/checkpoints/${row.checkpoint_id}`)}
                  >
                    {cell(row, key)}
                  </Link>
                ) : (
                  cell(row, key)
                )}
              </Table.Cell>
            ))}
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

function CheckpointsTab({ dagId }) {
  const [state, setState] = useState({ loading: true });
  useEffect(() => {
    let live = true;
    load(dagId).then(
      (got) => live && setState(got),
      (error) => live && setState({ error: String(error.message ?? error) }),
    );
    return () => {
      live = false;
    };
  }, [dagId]);

  if (state.loading) {
    return <Text p={4}>Loading checkpoints…</Text>;
  }
  if (state.error) {
    return (
      <Text p={4} color="fg.error" data-testid="batchpoint-error">
        The checkpoints could not be read ({state.error}).
      </Text>
    );
  }
  if (state.missing) {
    return (
      <Text p={4} data-testid="batchpoint-error">
        DAG {dagId} is not a DAG of a batchpoint pipeline you may read.
      </Text>
    );
  }
  const { entry, page } = state;
  const full = here(encodeURIComponent(entry.pipeline));
  return (
    <Box p={4}>
      <HStack justify="space-between" mb={2}>
        <Heading size="md">Checkpoints of {entry.pipeline}</Heading>
        <Link href={full} data-testid="batchpoint-full-page">
          Full checkpoint pages
        </Link>
      </HStack>
      <Status overview={page.overview} />
      <History pipeline={entry.pipeline} rows={page.checkpoints} />
      {page.older !== null ? (
        <Link href={`${full}?before=${page.older}`}>Older checkpoints</Link>
      ) : (
        <Fragment />
      )}
    </Box>
  );
}

globalThis.AirflowPlugin = CheckpointsTab;
