// Layout helpers for narrow screens (static/css/fatia.css, "Narrow screens"); every page works
// without them.
//  - The main navigation: a Menu button shows and hides it. Without JavaScript the button stays
//    hidden and the navigation is a plain, always-visible list. The button is a disclosure:
//    aria-expanded says whether the list is shown; Escape closes it and returns focus to the button
//    (an open Admin menu is closed first, by fatia.js).
//  - An open Admin menu that would run past the right edge of the window opens leftwards instead.
//  - Data tables become cards on phones, each cell labelled by its data-label; a cell that a
//    template left without one gets its column's header text here.
(function () {
  "use strict";

  document.querySelectorAll("table.table").forEach(function (table) {
    var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
      return th.textContent.trim();
    });
    table.querySelectorAll("tbody tr").forEach(function (row) {
      Array.prototype.forEach.call(row.children, function (cell, i) {
        if (cell.tagName === "TD" && !cell.hasAttribute("data-label") && heads[i]) {
          cell.setAttribute("data-label", heads[i]);
        }
      });
    });
  });

  var button = document.querySelector("[data-nav-toggle]");
  var nav = button && document.getElementById(button.getAttribute("aria-controls"));
  if (!nav) {
    return;
  }

  function isOpen() {
    return button.getAttribute("aria-expanded") === "true";
  }

  function setOpen(open) {
    button.setAttribute("aria-expanded", open ? "true" : "false");
    nav.toggleAttribute("data-open", open);
  }

  function buttonShown() {
    return button.offsetParent !== null;
  }

  nav.setAttribute("data-collapsible", "");
  button.hidden = false;
  setOpen(false);

  button.addEventListener("click", function () {
    setOpen(!isOpen());
  });

  // Capture phase: runs before fatia.js closes an open Admin menu on the same Escape, so one Escape
  // closes one thing.
  document.addEventListener(
    "keydown",
    function (event) {
      if (event.key !== "Escape" || !isOpen() || !buttonShown()) {
        return;
      }
      if (nav.querySelector("details[data-nav-menu][open]")) {
        return;
      }
      setOpen(false);
      button.focus();
    },
    true
  );

  nav.querySelectorAll("details[data-nav-menu]").forEach(function (menu) {
    var list = menu.querySelector(".nav-menu__list");
    menu.addEventListener("toggle", function () {
      if (!menu.open || !list) {
        return;
      }
      list.classList.remove("nav-menu__list--end");
      if (list.getBoundingClientRect().right > document.documentElement.clientWidth) {
        list.classList.add("nav-menu__list--end");
      }
    });
  });
})();
