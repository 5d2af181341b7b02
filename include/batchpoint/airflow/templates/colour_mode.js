// Airflow's UI keeps its colour mode in localStorage under "theme" (same origin as this
// frame): "dark" or "light" is mirrored as a class on <html>, anything else ("system")
// leaves it to prefers-color-scheme. It follows a change made while the page is open.
(function () {
  var root = document.documentElement;
  function follow(mode) {
    root.classList.remove('dark', 'light');
    if (mode === 'dark' || mode === 'light') { root.classList.add(mode); }
  }
  try { follow(window.localStorage.getItem('theme')); } catch (err) { /* storage off */ }
  window.addEventListener('storage', function (event) {
    if (event.key === 'theme') { follow(event.newValue); }
  });
})();
