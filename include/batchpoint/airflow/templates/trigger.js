// Posts a trigger form's conf to Airflow's REST API (same origin: the UI's session
// cookie is the credential) and links the run it created.
document.querySelectorAll('form.trigger').forEach(function (form) {
  form.addEventListener('submit', async function (event) {
    event.preventDefault();
    var out = form.querySelector('output');
    var conf = {};
    try {
      form.querySelectorAll('input').forEach(function (input) {
        if (input.type === 'checkbox') { conf[input.name] = input.checked; return; }
        if (input.dataset.kind === 'json') {
          conf[input.name] = input.value.trim() ? JSON.parse(input.value) : null; return;
        }
        conf[input.name] = input.value;
      });
    } catch (err) { out.textContent = 'not valid JSON: ' + err.message; return; }
    var answer = await fetch(form.dataset.api, {
      method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({logical_date: null, conf: conf})
    });
    var body = await answer.json().catch(function () { return {}; });
    if (!answer.ok) { out.textContent = 'refused: ' + JSON.stringify(body.detail || body); return; }
    out.innerHTML = '';
    var link = document.createElement('a');
    link.href = form.dataset.runs + encodeURIComponent(body.dag_run_id);
    link.target = '_top';
    link.textContent = 'triggered ' + body.dag_run_id;
    out.appendChild(link);
  });
});
