"""The shell every Checkpoints page is rendered into: its style, and the script that
posts a trigger form's conf to Airflow's REST API. `PAGE` is a str.format template with
`title` and `body`."""

#: Posts a trigger form's conf to Airflow's REST API (same origin: the UI's session
#: cookie is the credential) and links the run it created.
SCRIPT = """
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
"""

PAGE = (
    """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: left; }}
tr.aborted td, .error, li.bad, tr.failing td {{ color: #b00; }}
tr.pending td {{ color: #06c; }}
tr.restored td {{ background: #eef6ff; }}
dl {{ display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }}
dt {{ color: #555; }}
form.trigger {{ border: 1px solid #ddd; padding: 0.5em 1em; margin: 1em 0; }}
</style></head>
<body>
{body}
<script>"""
    + SCRIPT.replace("{", "{{").replace("}", "}}")
    + """</script>
</body></html>
"""
)
