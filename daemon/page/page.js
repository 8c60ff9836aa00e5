// page.js - the live page's script (index.html). Polls /locks.json every
// second and redraws the health line, the charts and both tables. Every
// string from the daemon (lock names, labels, addresses) goes into the page
// with textContent, never as markup: labels are whatever clients sent.
"use strict";

(function () {
  var POLL_MS = 1000;
  var HISTORY = 300;            // chart samples: five minutes at one a second
  var history = [];             // {t: ms, grants, waited, timeouts}
  var sorts = {
    holds: { key: "name", dir: 1 },
    waits: { key: "waited_ms", dir: -1 }
  };
  var last = null;              // the latest reply
  var timer = null;
  var inFlight = false;

  function $(id) { return document.getElementById(id); }

  function setText(id, text) { $(id).textContent = text; }

  // 1234 ms -> "1.2 s", "3 min 04 s", "2 h 05 min".
  function duration(ms) {
    if (ms === null || ms === undefined || ms < 0) return "";
    var s = ms / 1000;
    if (s < 10) return s.toFixed(1) + " s";
    if (s < 60) return Math.floor(s) + " s";
    var m = Math.floor(s / 60);
    if (m < 60) return m + " min " + pad(Math.floor(s % 60)) + " s";
    var h = Math.floor(m / 60);
    if (h < 48) return h + " h " + pad(m % 60) + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined || text === "" ? "-" : String(text);
    if (text === null || text === undefined || text === "") td.className = "none";
    if (cls) td.className += (td.className ? " " : "") + cls;
    tr.appendChild(td);
  }

  function compare(a, b, key, numeric) {
    var x = a[key], y = b[key];
    if (x === null || x === undefined) return y === null || y === undefined ? 0 : 1;
    if (y === null || y === undefined) return -1;
    if (key === "token") {       // strings: tokens go past 2^53
      x = BigInt(x); y = BigInt(y);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (numeric) return x - y;
    return x < y ? -1 : x > y ? 1 : 0;
  }

  function sortRows(rows, table) {
    var s = sorts[table];
    var th = document.querySelector("#" + table + " th[data-key='" + s.key + "']");
    var numeric = th && th.hasAttribute("data-num");
    rows.sort(function (a, b) {
      return s.dir * compare(a, b, s.key, numeric) || compare(a, b, "name", false);
    });
    document.querySelectorAll("#" + table + " th").forEach(function (h) {
      h.classList.toggle("asc", h === th && s.dir > 0);
      h.classList.toggle("desc", h === th && s.dir < 0);
    });
  }

  function holdRows(data) {
    var rows = [];
    data.locks.forEach(function (l) {
      l.holds.forEach(function (h) {
        rows.push({ name: l.name, mode: h.mode, holder: h.holder, label: h.label,
                    state: h.kept ? "kept (nobody)" : h.lease_ms !== null ? "lease" : "held",
                    token: h.token, held_ms: h.held_ms, waiters: l.waiters, queue: l.queue,
                    delay_ms: l.delay_ms > 0 ? l.delay_ms : null, lease_ms: h.lease_ms });
      });
    });
    return rows;
  }

  function waitRows(data) {
    var rows = [];
    data.locks.forEach(function (l) {
      l.waits.forEach(function (w) {
        rows.push({ name: l.name, mode: w.mode, holder: w.holder, label: w.label,
                    waited_ms: w.waited_ms, queue: l.queue });
      });
    });
    return rows;
  }

  function fill(table, rows, columns, emptyText) {
    var body = document.querySelector("#" + table + " tbody");
    var fresh = document.createElement("tbody");
    sortRows(rows, table);
    rows.forEach(function (r) {
      var tr = document.createElement("tr");
      columns.forEach(function (c) {
        var v = r[c.key];
        cell(tr, c.ms ? duration(v) : v, "c-" + c.key + (c.num ? " num" : ""));
      });
      fresh.appendChild(tr);
    });
    if (!rows.length) {
      var tr = document.createElement("tr");
      var td = document.createElement("td");
      tr.className = "empty";
      td.colSpan = columns.length;
      td.textContent = emptyText;
      tr.appendChild(td);
      fresh.appendChild(tr);
    }
    body.parentNode.replaceChild(fresh, body);
    setText(table + "-count", "(" + rows.length + ")");
  }

  var HOLD_COLUMNS = [
    { key: "name" }, { key: "mode" }, { key: "state" }, { key: "holder" }, { key: "label" },
    { key: "token", num: true }, { key: "held_ms", ms: true, num: true },
    { key: "waiters", num: true }, { key: "queue", num: true },
    { key: "delay_ms", ms: true, num: true }, { key: "lease_ms", ms: true, num: true }
  ];
  var WAIT_COLUMNS = [
    { key: "name" }, { key: "mode" }, { key: "holder" }, { key: "label" },
    { key: "waited_ms", ms: true, num: true }, { key: "queue", num: true }
  ];

  function renderTables() {
    if (!last) return;
    fill("holds", holdRows(last), HOLD_COLUMNS, "nothing held");
    fill("waits", waitRows(last), WAIT_COLUMNS, "nobody waiting");
  }

  function renderHealth(data) {
    var h = data.health;
    var box = $("health");
    box.className = "health " + (h.ok ? "ok" : "bad");
    setText("daemon", data.daemon);
    setText("health-status", h.ok ? "healthy" : "unhealthy (" + h.status + "): " + h.reason);
    setText("mode", data.mode);
    setText("zk-state", h.zk_state === null ? "n/a" : h.zk_state);
    setText("zk-confirmed", h.zk_session_confirmed === null ? "n/a"
            : h.zk_session_confirmed ? "confirmed" : "NOT confirmed");
    setText("zk-window", h.zk_window_age_ms === null ? "n/a"
            : h.zk_window_age_ms < 0 ? "no session" : duration(h.zk_window_age_ms));
    setText("queue-age", data.mode === "embedded" ? "now"
            : data.queue_age_ms === null ? "not yet" : duration(data.queue_age_ms) + " ago");
    setText("held-count", data.held);
    setText("waiting-count", data.waiting);
    setText("updated", "updated " + new Date(data.now_ms).toLocaleTimeString());
    $("truncated").hidden = !data.truncated;
    setText("limit", data.limit);
  }

  var SVGNS = "http://www.w3.org/2000/svg";

  function svgEl(name, attrs) {
    var e = document.createElementNS(SVGNS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }

  // One chart: a counter's rate between consecutive samples, or a level
  // as sampled (level true).
  function drawChart(key, level) {
    var svg = $("chart-" + key);
    var rates = [];
    for (var i = level ? 0 : 1; i < history.length; i++) {
      if (level) { rates.push(history[i][key]); continue; }
      var dt = (history[i].t - history[i - 1].t) / 1000;
      var dv = history[i][key] - history[i - 1][key];
      rates.push(dt > 0 && dv >= 0 ? dv / dt : 0);
    }
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.appendChild(svgEl("line", { x1: 0, y1: 59, x2: 300, y2: 59, "class": "axis" }));
    var max = Math.max.apply(null, [1].concat(rates));
    var points = rates.map(function (r, j) {
      var x = 300 - (rates.length - 1 - j) * (300 / (HISTORY - 1));
      return x.toFixed(1) + "," + (58 - 54 * r / max).toFixed(1);
    });
    if (points.length > 1)
      svg.appendChild(svgEl("polyline", { points: points.join(" "), "class": "line" }));
    var span = svgEl("text", { x: 2, y: 56 });
    span.textContent = "last " + (HISTORY * POLL_MS / 60000) + " min";
    svg.appendChild(span);
    var label = svgEl("text", { x: 2, y: 9 });
    label.textContent = "max " + (Math.round(max * 10) / 10);
    svg.appendChild(label);
    setText("rate-" + key, rates.length ? (Math.round(rates[rates.length - 1] * 10) / 10)
            : "-");
  }

  function record(data) {
    var c = data.counters;
    var prev = history[history.length - 1];
    // A restarted daemon starts its counters again: so do the charts.
    if (prev && (c.grants < prev.grants || c.timeouts < prev.timeouts)) history = [];
    history.push({ t: data.now_ms, grants: c.grants, timeouts: c.timeouts,
                   waiting: data.waiting });
    if (history.length > HISTORY) history.shift();
    drawChart("grants", false);
    drawChart("waiting", true);
    drawChart("timeouts", false);
  }

  function poll() {
    var match = $("match").value.trim();
    var url = "/locks.json" + (match ? "?match=" + encodeURIComponent(match) : "");
    clearTimeout(timer);
    if (inFlight) return;
    inFlight = true;
    fetch(url, { cache: "no-store" }).then(function (r) {
      if (!r.ok) return r.text().then(function (t) { throw new Error(r.status + " " + t); });
      return r.json();
    }).then(function (data) {
      last = data;
      renderHealth(data);
      record(data);
      renderTables();
    }).catch(function (e) {
      $("health").className = "health unknown";
      setText("health-status", "no answer from the daemon: " + e.message);
    }).then(function () {
      inFlight = false;
      timer = setTimeout(poll, POLL_MS);
    });
  }

  function init() {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      table.querySelectorAll("th").forEach(function (th) {
        th.addEventListener("click", function () {
          var s = sorts[table.id], key = th.getAttribute("data-key");
          if (s.key === key) s.dir = -s.dir;
          else { s.key = key; s.dir = 1; }
          renderTables();
        });
      });
    });
    $("filter").addEventListener("submit", function (e) { e.preventDefault(); poll(); });
    $("match").addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(poll, 250); });
    poll();
  }

  init();
})();
