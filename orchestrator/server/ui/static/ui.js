// The run view's live updates. Pages work without this script; with it, an invocation's page follows
// its event stream: progress reports move the bar in place, other events refetch the timeline, which
// the server renders (escaped) as it renders the page. Without an event stream, the page polls.
(function () {
  "use strict";

  var progress = {}; // call id -> its latest tool_call.progress event

  // Show the latest reports on the calls' bars; whether call `shown` (if given) has a bar to show it on.
  function applyProgress(root, shown) {
    var found = false;
    var calls = root.querySelectorAll("[data-call-id]");
    Array.prototype.forEach.call(calls, function (call) {
      var id = call.getAttribute("data-call-id");
      var report = progress[id];
      if (!report) return;
      var bar = call.querySelector("progress");
      if (bar && id === shown) found = true;
      if (bar && typeof report.fraction === "number") bar.value = report.fraction;
      var text = call.querySelector(".progress-message");
      if (text && typeof report.message === "string") text.textContent = report.message;
    });
    return found;
  }

  function isActive(box) {
    var marked = box.querySelector("[data-active]");
    return marked !== null && marked.getAttribute("data-active") === "true";
  }

  // A function fetching `box`'s fragment again; `swapped(before)`, if given, is called after each
  // swap with the ids of the rows shown before it.
  function refresher(box, swapped) {
    var waiting = false;
    var again = false;
    function load() {
      waiting = true;
      again = false;
      var before = {};
      Array.prototype.forEach.call(box.querySelectorAll("[data-invocation]"), function (row) {
        before[row.getAttribute("data-invocation")] = true;
      });
      fetch(box.getAttribute("data-fragment"), { credentials: "same-origin" })
        .then(function (response) {
          if (response.redirected) window.location.reload(); // signed out: the page asks to sign in
          if (!response.ok || response.redirected) throw new Error("status " + response.status);
          return response.text();
        })
        .then(function (text) {
          box.innerHTML = text; // the server's own escaped HTML
          applyProgress(box);
          tick();
          if (swapped) swapped(before);
        })
        .catch(function () {})
        .then(function () {
          waiting = false;
          if (again) load();
        });
    }
    function editing() {
      var focused = document.activeElement;
      return focused && box.contains(focused) && /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(focused.tagName);
    }
    function request() {
      if (editing()) setTimeout(request, 1000); // never swap a form out from under a person
      else if (waiting) again = true;
      else load();
    }
    return request;
  }

  function poll(box, refresh, every) {
    var timer = setInterval(function () {
      if (!isActive(box)) {
        clearInterval(timer);
        return;
      }
      refresh();
    }, every);
  }

  function follow(box) {
    var refresh = refresher(box);
    if (!isActive(box)) return;
    if (!window.EventSource || !box.getAttribute("data-events")) {
      poll(box, refresh, 2000);
      return;
    }
    // the waterfall's running bars and the elapsed times grow between events too
    var growing = setInterval(function () {
      if (!isActive(box)) clearInterval(growing);
      else if (!document.hidden) refresh();
    }, 2000);
    var source = new EventSource(box.getAttribute("data-events"));
    var caughtUp = 0;
    source.addEventListener("tool_call.progress", function (message) {
      var report = JSON.parse(message.data);
      if (report.call_id) {
        progress[report.call_id] = report;
        // a report for a call the page shows no bar for: the page is behind; fetch it again (once a second)
        if (!applyProgress(box, report.call_id) && Date.now() - caughtUp > 1000) {
          caughtUp = Date.now();
          refresh();
        }
      }
    });
    [
      "tool_call.waiting", "tool_call.queued", "tool_call.started", "tool_call.finished",
      "compensation.queued", "compensation.started", "compensation.finished",
      "approval.requested", "invocation.paused", "invocation.resumed",
    ].forEach(function (type) {
      source.addEventListener(type, refresh);
    });
    ["invocation.succeeded", "invocation.failed", "invocation.cancelled"].forEach(function (type) {
      source.addEventListener(type, function () {
        source.close();
        refresh();
      });
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) poll(box, refresh, 2000); // no stream: poll
    };
  }

  // A form with `data-confirm` is sent only once the person confirms (forms the timeline brings
  // in later included).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute ? form.getAttribute("data-confirm") : null;
    if (question && !window.confirm(question)) event.preventDefault();
  });

  // Durations that go on while the page is open (`data-since`: epoch seconds), worded as the server
  // words them (waterfall_axis.py's `duration_text`).
  function duration(seconds) {
    if (seconds < 0.01) return (seconds * 1000).toFixed(1).replace(/\.0$/, "") + " ms";
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 10) return seconds.toFixed(2) + " s";
    if (seconds < 120) return seconds.toFixed(1) + " s";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 120) return minutes + " min " + Math.floor(seconds % 60) + " s";
    var hours = Math.floor(minutes / 60);
    if (hours < 48) return hours + " h " + (minutes % 60) + " min";
    return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
  }

  function tick() {
    var now = Date.now() / 1000;
    var counting = document.querySelectorAll("[data-since]");
    Array.prototype.forEach.call(counting, function (element) {
      var since = parseFloat(element.getAttribute("data-since"));
      if (!isNaN(since)) element.textContent = duration(Math.max(0, now - since));
    });
  }

  // The list of invocations, fetched again every few seconds while the page is shown: new rows come
  // in (marked until the next refresh), states and durations move.
  function keepListed(box) {
    var load = refresher(box, function (before) {
      var rows = box.querySelectorAll("tr[data-invocation]");
      Array.prototype.forEach.call(rows, function (row) {
        if (!before[row.getAttribute("data-invocation")]) row.classList.add("new");
      });
    });
    setInterval(function () {
      if (!document.hidden) load();
    }, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var timeline = document.getElementById("timeline");
    if (timeline) follow(timeline);
    var runs = document.getElementById("runs");
    if (runs) keepListed(runs);
    tick();
    setInterval(tick, 1000);
  });
})();
