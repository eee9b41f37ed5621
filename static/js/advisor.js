// The advisor panel of the new-request form (templates/allocations/includes/advisor_panel.html): a "Use this"
// button per pool fills the request form with that pool and its recommended profile (or share size). The panel
// itself is a plain GET form and works without this script; the buttons stay hidden then.
(function () {
  "use strict";

  var form = document.getElementById("request-form");
  if (!form) {
    return;
  }
  var buttons = document.querySelectorAll("[data-advice-use]");
  for (var i = 0; i < buttons.length; i++) {
    buttons[i].hidden = false;
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-advice-use]");
    if (!button) {
      return;
    }
    var pool = form.elements.namedItem("pool");
    pool.value = button.getAttribute("data-pool");
    pool.dispatchEvent(new Event("change", { bubbles: true }));
    var profile = button.getAttribute("data-profile");
    var memory = button.getAttribute("data-memory-gib");
    var field = profile ? form.elements.namedItem("profile") : form.elements.namedItem("memory_gib");
    if (field) {
      field.value = profile || memory;
      field.dispatchEvent(new Event("change", { bubbles: true }));
      field.dispatchEvent(new Event("input", { bubbles: true }));
    }
    form.scrollIntoView({ behavior: "smooth", block: "start" });
    (field || pool).focus();
  });
})();
