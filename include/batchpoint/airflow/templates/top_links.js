// A link to a page of Airflow's own (target=_top) from inside the UI's frame: the frame
// is sandboxed without allow-top-navigation, so the browser refuses it as it is. The
// same link clicked in the UI's own document (the same origin) is an ordinary one.
document.addEventListener('click', function (event) {
  var link = event.target.closest && event.target.closest('a[target=_top]');
  if (!link || window.top === window || event.defaultPrevented) return;
  if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
  try {
    var page = window.top.document;
    var twin = page.createElement('a');
    twin.href = link.href;
    page.body.appendChild(twin);
    twin.click();
    twin.remove();
    event.preventDefault();
  } catch (err) {
    // a frame of another origin's page: the browser decides, as for any link
  }
});
