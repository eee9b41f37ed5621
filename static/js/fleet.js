// Fleet overview (templates/dashboard/fleet.html): progressive enhancements of a page that works
// without them (every cell is a link to its node's slot view; every node a <details>).
//  - "Collapse all nodes" / "Expand all nodes";
//  - the cell under the pointer or keyboard focus is described in words above the grid;
//  - one tab stop per pool: the arrow keys move between cells (Left/Right in order, Up/Down to the
//    nearest cell of the row above or below), Home/End to the first/last, Enter opens;
//  - a cell opens its node's slot view in a dialog, scrolled to that GPU (Escape or Close returns
//    to the cell); with a modifier key or without JavaScript it opens as a page.
(function () {
  "use strict";

  var grids = Array.prototype.slice.call(document.querySelectorAll("[data-fleet-grid]"));
  if (!grids.length) {
    return;
  }
  var readout = document.getElementById("fleet-readout");
  var bulk = document.querySelector("[data-fleet-bulk]");
  var dialog = document.getElementById("fleet-dialog");
  var dialogBody = document.getElementById("fleet-dialog-body");
  var dialogTitle = document.getElementById("fleet-dialog-title");
  var dialogPage = document.getElementById("fleet-dialog-page");
  var ITEMS = "summary.fc--node, a.fc";

  function describe(item) {
    if (item.tagName === "SUMMARY") {
      var node = item.closest("details");
      return item.textContent.trim() + (node.open ? " (select to collapse)" : " (collapsed; select to expand)");
    }
    return item.getAttribute("aria-label") || "";
  }

  // A node's handle is always shown; its GPUs only while it is open (the boxes of a closed
  // <details>' content are still measurable, so ask the <details>).
  function shown(item) {
    return item.tagName === "SUMMARY" || item.closest("details").open;
  }

  function items(grid) {
    return Array.prototype.filter.call(grid.querySelectorAll(ITEMS), shown);
  }

  function current(grid) {
    return grid.querySelector('[tabindex="0"]');
  }

  function moveTo(grid, item) {
    var before = current(grid);
    if (before && before !== item) {
      before.setAttribute("tabindex", "-1");
    }
    item.setAttribute("tabindex", "0");
    item.focus();
  }

  // The item in the next (step 1) or previous (step -1) visual row whose centre is nearest.
  function vertical(list, index, step) {
    var from = list[index].getBoundingClientRect();
    var x = from.left + from.width / 2;
    var rowTop = null;
    var best = null;
    var bestDistance = Infinity;
    for (var i = index + step; i >= 0 && i < list.length; i += step) {
      var r = list[i].getBoundingClientRect();
      var beyond = step > 0 ? r.top >= from.bottom : r.bottom <= from.top;
      if (!beyond) {
        continue;
      }
      if (rowTop === null) {
        rowTop = r.top;
      } else if (Math.abs(r.top - rowTop) > r.height) {
        break; // past that row
      }
      var distance = Math.abs(r.left + r.width / 2 - x);
      if (distance < bestDistance) {
        bestDistance = distance;
        best = list[i];
      }
    }
    return best;
  }

  grids.forEach(function (grid) {
    var all = grid.querySelectorAll(ITEMS);
    for (var i = 0; i < all.length; i += 1) {
      all[i].setAttribute("tabindex", i === 0 ? "0" : "-1");
    }

    grid.addEventListener("keydown", function (event) {
      var item = event.target.closest(ITEMS);
      if (!item || event.altKey || event.ctrlKey || event.metaKey) {
        return;
      }
      var list = items(grid);
      var index = list.indexOf(item);
      var next = null;
      if (event.key === "ArrowRight") {
        next = list[index + 1];
      } else if (event.key === "ArrowLeft") {
        next = list[index - 1];
      } else if (event.key === "ArrowDown") {
        next = vertical(list, index, 1);
      } else if (event.key === "ArrowUp") {
        next = vertical(list, index, -1);
      } else if (event.key === "Home") {
        next = list[0];
      } else if (event.key === "End") {
        next = list[list.length - 1];
      } else {
        return;
      }
      event.preventDefault();
      if (next) {
        moveTo(grid, next);
      }
    });

    grid.addEventListener("focusin", function (event) {
      var item = event.target.closest(ITEMS);
      if (item && item.getAttribute("tabindex") !== "0") {
        moveTo(grid, item); // focused by a click: that is where the keyboard continues
      }
    });

    // A collapsed node hides its cells: the tab stop moves to its handle if it was among them.
    grid.addEventListener(
      "toggle",
      function (event) {
        var node = event.target;
        var stop = current(grid);
        if (!node.open && stop && node.contains(stop) && stop.tagName !== "SUMMARY") {
          stop.setAttribute("tabindex", "-1");
          node.querySelector("summary").setAttribute("tabindex", "0");
        }
      },
      true
    );
  });

  if (readout) {
    var say = function (event) {
      var item = event.target.closest && event.target.closest(ITEMS);
      if (item) {
        readout.textContent = describe(item);
      }
    };
    document.addEventListener("pointerover", say);
    document.addEventListener("focusin", say);
  }

  var hint = document.querySelector("[data-fleet-hint]");
  if (hint) {
    hint.hidden = false;
    grids.forEach(function (grid) {
      grid.setAttribute("aria-describedby", hint.id);
    });
  }

  if (bulk) {
    bulk.hidden = false;
    bulk.addEventListener("click", function (event) {
      var button = event.target.closest("[data-fleet-open]");
      if (!button) {
        return;
      }
      var open = button.getAttribute("data-fleet-open") === "true";
      document.querySelectorAll(".fleet-node > details").forEach(function (node) {
        node.open = open;
      });
    });
  }

  if (!dialog || typeof dialog.showModal !== "function") {
    return;
  }
  var opener = null;

  function showSlots(link) {
    var href = link.getAttribute("href");
    var hash = href.indexOf("#");
    var page = hash >= 0 ? href.slice(0, hash) : href;
    var target = hash >= 0 ? href.slice(hash + 1) : "";
    var name = (link.getAttribute("aria-label") || "").split(":")[0];
    opener = link;
    dialogTitle.textContent = name ? "Slot view of " + name : "Slot view";
    dialogPage.setAttribute("href", href);
    dialogBody.textContent = "Loading…";
    dialog.showModal();
    fetch(page + "?fragment=1", { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        dialogBody.innerHTML = html;
        var gpu = target ? document.getElementById(target) : null;
        if (gpu && dialogBody.contains(gpu)) {
          gpu.classList.add("is-target");
          gpu.setAttribute("tabindex", "-1");
          gpu.scrollIntoView({ block: "nearest" });
          gpu.focus();
        }
      })
      .catch(function () {
        dialogBody.textContent = "Could not load the slot view. Use “Open as a page”.";
      });
  }

  grids.forEach(function (grid) {
    grid.addEventListener("click", function (event) {
      var link = event.target.closest("a.fc");
      if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) {
        return;
      }
      event.preventDefault();
      showSlots(link);
    });
  });

  dialog.addEventListener("click", function (event) {
    if (event.target.closest("[data-fleet-close]")) {
      dialog.close();
    }
  });

  dialog.addEventListener("close", function () {
    dialogBody.textContent = "";
    if (opener) {
      opener.focus();
      opener = null;
    }
  });
})();
