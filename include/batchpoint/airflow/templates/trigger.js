// Posts a trigger form's conf to Airflow's REST API (same origin: the UI's session
// cookie is the credential) and links the run it created. A paused DAG's run only
// waits, queued: the form unpauses the DAG first when its "Unpause on trigger" box is
// ticked (as Airflow's own form does), and the answer says "triggered" only when the
// DAG is not paused, else that the run waits.
async function callApi(url, method, body) {
  var answer = await fetch(url, {
    method: method, credentials: 'same-origin',
    headers: {'Content-Type': 'application/json'},
    body: body === undefined ? undefined : JSON.stringify(body)
  });
  var json = await answer.json().catch(function () { return {}; });
  return {ok: answer.ok, body: json, detail: JSON.stringify(json.detail || json)};
}

// A field that only an unticked box needs (the typed confirmation of a restore without
// the quality gate) is shown, and required, only while that box is unticked.
function showWhenUnticked(form) {
  form.querySelectorAll('label[data-unless]').forEach(function (label) {
    var box = form.querySelector('input[type=checkbox][name="' + label.dataset.unless + '"]');
    if (!box) { return; }
    var sync = function () {
      label.hidden = box.checked;
      label.querySelector('input').required = !box.checked;
    };
    box.addEventListener('change', sync);
    sync();
  });
}

document.querySelectorAll('form.trigger').forEach(function (form) {
  showWhenUnticked(form);
  form.addEventListener('submit', async function (event) {
    event.preventDefault();
    var out = form.querySelector('output');
    var unpause = form.querySelector('input[data-role=unpause]');
    var conf = {};
    try {
      form.querySelectorAll('input').forEach(function (input) {
        if (input === unpause) { return; }
        if (input.type === 'checkbox') { conf[input.name] = input.checked; return; }
        if (input.dataset.kind === 'json') {
          conf[input.name] = input.value.trim() ? JSON.parse(input.value) : null; return;
        }
        conf[input.name] = input.value;
      });
    } catch (err) { out.textContent = 'not valid JSON: ' + err.message; return; }
    if (unpause && unpause.checked) {
      var patched = await callApi(form.dataset.dag, 'PATCH', {is_paused: false});
      if (!patched.ok) { out.textContent = 'refused to unpause: ' + patched.detail; return; }
    }
    var created = await callApi(form.dataset.api, 'POST', {logical_date: null, conf: conf});
    if (!created.ok) { out.textContent = 'refused: ' + created.detail; return; }
    var dag = await callApi(form.dataset.dag, 'GET');
    var runId = created.body.dag_run_id;
    out.innerHTML = '';
    var link = document.createElement('a');
    link.href = form.dataset.runs + encodeURIComponent(runId);
    link.target = '_top';
    out.appendChild(link);
    if (dag.ok && !dag.body.is_paused) { link.textContent = 'triggered ' + runId; return; }
    link.textContent = 'queued ' + runId;
    out.appendChild(document.createTextNode(dag.ok
      ? ': ' + form.dataset.dagId + ' is paused, so the run waits until it is unpaused'
      : ': whether ' + form.dataset.dagId + ' is paused could not be read (' + dag.detail + ')'));
  });
});
