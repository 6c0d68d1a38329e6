/* Draws every [data-chart] element from the figure JSON embedded next to it, then redraws it
   from its JSON endpoint every data-chart-refresh seconds (fetch → Plotly.react, no page reload).
   A failed refresh keeps the last figure and says so in the element's title. */
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  function refresh(el) {
    return fetch(el.dataset.chartUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (figure) {
        return Plotly.react(el, figure.data, figure.layout, CONFIG);
      })
      .then(function () {
        el.dataset.refreshes = String(Number(el.dataset.refreshes || 0) + 1);
        el.dataset.refreshedAt = new Date().toISOString();
        el.removeAttribute("title");
      })
      .catch(function (error) {
        el.title = "Could not refresh (" + error.message + "); showing the last figure. Reload the page to retry.";
      });
  }

  function draw(el) {
    var figure = JSON.parse(document.getElementById(el.id + "-figure").textContent);
    Plotly.newPlot(el, figure.data, figure.layout, CONFIG);
    var seconds = Number(el.dataset.chartRefresh);
    if (el.dataset.chartUrl && seconds > 0) {
      setInterval(function () { if (!document.hidden) { refresh(el); } }, seconds * 1000);
    }
  }

  window.HangarCharts = { refresh: refresh };
  document.querySelectorAll("[data-chart]").forEach(draw);
})();
