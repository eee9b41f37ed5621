// Small progressive enhancements shared by every page; each page works without them.
//  - [data-copy-target]: copy the text of the element with that id to the clipboard.
//  - form[data-confirm]: ask before submitting a destructive action.
//  - details[data-nav-menu]: close the Admin menu on Escape or a click elsewhere.
//  - #pool-form: show only the chosen GPU model's profile checkboxes.
(function () {
  "use strict";

  function announce(button, text) {
    var scope = button.closest("section, .card") || document;
    var status = scope.querySelector("[data-copy-status]");
    if (status) {
      status.textContent = text;
    }
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Older browsers and plain-HTTP pages: copy through a temporary, off-screen text area.
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.left = "-9999px";
      document.body.appendChild(area);
      area.select();
      var ok = document.execCommand("copy");
      document.body.removeChild(area);
      if (ok) {
        resolve();
      } else {
        reject(new Error("copy refused"));
      }
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (!button) {
      return;
    }
    var target = document.getElementById(button.getAttribute("data-copy-target"));
    if (!target) {
      return;
    }
    copyText(target.textContent.trim()).then(
      function () {
        announce(button, "Copied to the clipboard.");
      },
      function () {
        announce(button, "Could not copy; select the text and copy it by hand.");
      }
    );
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  var menus = document.querySelectorAll("details[data-nav-menu]");
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") {
      return;
    }
    menus.forEach(function (menu) {
      if (menu.open) {
        menu.open = false;
        menu.querySelector("summary").focus();
      }
    });
  });
  document.addEventListener("click", function (event) {
    menus.forEach(function (menu) {
      if (menu.open && !menu.contains(event.target)) {
        menu.open = false;
      }
    });
  });

  var poolForm = document.getElementById("pool-form");
  if (poolForm) {
    var modelSelect = poolForm.elements.namedItem("gpu_model");
    var sets = poolForm.querySelectorAll("fieldset[data-gpu-model]");
    var hint = poolForm.querySelector("[data-profiles-empty]");
    var showModel = function () {
      hint.hidden = modelSelect.value !== "";
      sets.forEach(function (set) {
        var chosen = set.getAttribute("data-gpu-model") === modelSelect.value;
        set.hidden = !chosen;
        set.disabled = !chosen; // a disabled fieldset's boxes are not submitted
      });
    };
    modelSelect.addEventListener("change", showModel);
    showModel();
  }
})();
