// Live fleet dashboard: listen to the server's event stream and refetch only what changed.
//  - "versions" (on connect) and "changed" {pool, version} events come from /dashboard/events/; a pool's
//    version covers what this viewer may see of it (its slot layout, the viewer's tenants' requests);
//  - the stream is opened with the event id the page was rendered with (data-live-since), so a change
//    made between rendering and connecting arrives as "changed" at once;
//  - a changed pool's summary card and, if it is the pool on screen, its node list are refetched as
//    HTML fragments through the same tenancy-scoped views that rendered the page;
//  - EventSource reconnects by itself (the server ends each stream after ~25 s with a retry hint, and
//    a restarted server is simply reconnected to), sending the last event id, so nothing is missed in
//    between; fetches are coalesced, never more than one per pool at a time. Without JavaScript the page
//    is a plain, complete server-rendered page.
(function () {
  "use strict";

  var status = document.getElementById("dash-live");
  if (!status || !window.EventSource) {
    return;
  }
  var inFlight = {};
  var again = {};

  function say(state, text) {
    status.setAttribute("data-state", state);
    status.textContent = text;
  }

  function fetchFragment(url) {
    return fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } }).then(function (r) {
      if (!r.ok) {
        throw new Error("HTTP " + r.status);
      }
      return r.text();
    });
  }

  function replaceWith(element, html) {
    var holder = document.createElement("div");
    holder.innerHTML = html.trim();
    var fresh = holder.firstElementChild;
    if (fresh) {
      element.replaceWith(fresh);
    }
  }

  function refreshPool(pool) {
    if (inFlight[pool]) {
      again[pool] = true;
      return;
    }
    inFlight[pool] = true;
    var jobs = [];
    var card = document.getElementById("pool-" + pool);
    var nodes = document.getElementById("dash-nodes");
    var chosen = nodes ? nodes.getAttribute("data-pool") : "";
    if (card) {
      var url = card.getAttribute("data-summary-url") + "?chosen=" + encodeURIComponent(chosen);
      jobs.push(fetchFragment(url).then(function (html) { replaceWith(card, html); }));
    }
    if (nodes && chosen === String(pool)) {
      var active = document.activeElement;
      var activeId = active && active.getAttribute ? active.getAttribute("data-placement-id") : null;
      jobs.push(
        fetchFragment(nodes.getAttribute("data-nodes-url") + window.location.search).then(function (html) {
          nodes.innerHTML = html;
          // Keep keyboard focus on the slot that had it, if it is still there.
          if (activeId) {
            var refocus = nodes.querySelector('[data-placement-id="' + activeId + '"]');
            if (refocus) {
              refocus.focus();
            }
          }
        })
      );
    }
    Promise.all(jobs)
      .catch(function () {
        say("down", "Could not refresh; retrying with the next change.");
      })
      .then(function () {
        inFlight[pool] = false;
        if (again[pool]) {
          again[pool] = false;
          refreshPool(pool);
        }
      });
  }

  var url = status.getAttribute("data-events-url");
  var since = status.getAttribute("data-live-since");
  var source = new EventSource(since ? url + "?since=" + encodeURIComponent(since) : url);
  source.addEventListener("open", function () {
    say("live", "Live: changes appear within a couple of seconds.");
  });
  source.addEventListener("error", function () {
    // EventSource retries on its own; say so rather than reconnecting by hand.
    say("down", "Reconnecting to live updates…");
  });
  source.addEventListener("versions", function () {
    say("live", "Live: changes appear within a couple of seconds.");
  });
  source.addEventListener("changed", function (event) {
    refreshPool(JSON.parse(event.data).pool);
  });
})();
