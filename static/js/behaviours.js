/* Small page behaviours without inline handlers (the Content-Security-Policy allows no inline
   script without the page's nonce): [data-confirm] asks before submitting, [data-autosubmit]
   submits its form on change, [data-select-all="selector"] ticks or clears what it names. */
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var asking = event.target.closest("[data-confirm]");
    if (asking && !window.confirm(asking.dataset.confirm)) {
      event.preventDefault();
    }
    var all = event.target.closest("[data-select-all]");
    if (all) {
      document.querySelectorAll(all.dataset.selectAll).forEach(function (box) { box.checked = all.checked; });
    }
  });
  document.addEventListener("change", function (event) {
    if (event.target.matches("[data-autosubmit]") && event.target.form) {
      event.target.form.submit();
    }
  });
})();
