// Live request pages (the request list and a request's page): follow the same event stream as the fleet
// dashboard and, when the viewer's requests change, refetch this page through its normal view and swap
// in the regions that differ.
//  - The page marks its live parts with data-live-region="name"; #live-status carries the stream's URL
//    and the event id the page was rendered with (data-live-since), so a change made between rendering
//    and connecting is announced as soon as the stream opens.
//  - The stream (/dashboard/events/) sends `requests` {version} when any request of the viewer's tenants
//    changed; it says nothing else about them. Fetches are coalesced: one at a time, and one more if a
//    change arrived meanwhile.
//  - A region is replaced only when its markup changed (ignoring the per-render CSRF tokens), so a reason
//    being typed into a form is kept unless that form's region itself changed.
//  - Without JavaScript, or without EventSource, the page is a plain server-rendered page.
(function () {
  "use strict";

  var status = document.getElementById("live-status");
  if (!status || !window.EventSource || !window.DOMParser || !window.fetch) {
    return;
  }
  var inFlight = false;
  var again = false;
  var stopped = false;

  function comparable(element) {
    var copy = element.cloneNode(true);
    copy.querySelectorAll('input[name="csrfmiddlewaretoken"]').forEach(function (input) {
      input.removeAttribute("value");
    });
    return copy.innerHTML.replace(/\s+/g, " ").trim();
  }

  function swap(fresh) {
    var changed = [];
    document.querySelectorAll("[data-live-region]").forEach(function (region) {
      var name = region.getAttribute("data-live-region");
      var replacement = fresh.querySelector('[data-live-region="' + name + '"]');
      if (!replacement || comparable(region) === comparable(replacement)) {
        return;
      }
      var activeId = region.contains(document.activeElement) ? document.activeElement.id : "";
      var adopted = document.importNode(replacement, true);
      region.replaceWith(adopted);
      changed.push(name);
      if (activeId) {
        var refocus = document.getElementById(activeId);
        if (refocus) {
          refocus.focus();
        }
      }
    });
    if (changed.length) {
      // Tell screen-reader users what the page now says, in the page's own words (its first heading's
      // status badge when there is one).
      var badge = document.querySelector('[data-live-region="header"] .badge');
      status.textContent = badge ? badge.textContent : "";
      document.dispatchEvent(new CustomEvent("fatia:live-updated", { detail: { regions: changed } }));
    }
  }

  function refresh() {
    if (stopped) {
      return;
    }
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    fetch(window.location.href, {
      credentials: "same-origin",
      headers: { "X-Requested-With": "fetch" },
      redirect: "manual",
    })
      .then(function (response) {
        if (!response.ok) {
          // Gone (404), signed out (a redirect to the login page): leave the page as it is.
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        swap(new DOMParser().parseFromString(html, "text/html"));
      })
      .catch(function () {
        /* the next change tries again */
      })
      .then(function () {
        inFlight = false;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  var url = status.getAttribute("data-events-url");
  var since = status.getAttribute("data-live-since");
  var source = new EventSource(since ? url + "?since=" + encodeURIComponent(since) : url);
  source.addEventListener("requests", refresh);
  source.addEventListener("versions", function () {
    document.documentElement.setAttribute("data-live", "on");
  });
  window.addEventListener("pagehide", function () {
    stopped = true;
    source.close();
  });
})();
