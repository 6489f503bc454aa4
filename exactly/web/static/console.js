// Times on the console are UTC; hovering one also says it in the browser's time zone.
// Run at load and after every htmx swap (the live parts are re-rendered).
(function () {
  function localize(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (isNaN(moment)) return;
      el.title = "local " + moment.toLocaleString() + " · UTC " + moment.toISOString();
      el.setAttribute("data-local", "");
    });
  }
  document.addEventListener("DOMContentLoaded", function () { localize(document); });
  document.addEventListener("htmx:afterSettle", function (event) { localize(event.target); });
})();
