/* The ezmsg dashboard page: a view of the graph (the JSON of `ezmsg list --json`) arrives by
 * server-sent events once a second (/events); the graph is drawn with d3, the history of each
 * endpoint plotted with Chart.js (its first minutes from /api/history, then one point per
 * event). Everything is served by `ezmsg dashboard` itself: no network is needed. */
(function () {
  "use strict";
  var MAX_POINTS = 300, MAX_CARDS = 60, MAX_DRAWN = 400;
  var charts = {};     /* endpoint id -> {card, rate, lat, kind} */
  var updates = 0;
  var last = null;

  function fmt(x, d) { return x == null ? "-" : Number(x).toFixed(d); }
  function byId(id) { return document.getElementById(id); }
  function short(id) { return id ? String(id).slice(0, 8) : "?"; }
  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }

  /* ---- header, bottlenecks and the topic table ---------------------------------------------- */

  function header(v) {
    var st = byId("status");
    st.className = "status live";
    st.dataset.updates = String(updates);
    st.dataset.timestamp = v.timestamp;
    st.dataset.window = String(v.window_s);
    st.textContent = "live: " + v.timestamp + " (window " + v.window_s + " s)";
    byId("server").textContent = "graph server " + (v.server || "");
  }

  function bottlenecks(v) {
    var items = [];
    v.publishers.forEach(function (p) {
      if (p.bottleneck) items.push("publisher " + p.topic + " (pid " + p.pid + "): " + p.bottleneck);
    });
    v.subscribers.forEach(function (s) {
      if (s.bottleneck)
        items.push("subscriber " + (s.handle || short(s.id)) + " (pid " + s.pid + "): " + s.bottleneck);
    });
    var sel = d3.select("#bottlenecks").selectAll("div").data(items);
    sel.enter().append("div");
    sel.text(function (d) { return "Bottleneck: " + d; });
    sel.exit().remove();
  }

  function topics(v) {
    var rows = d3.select("#topics tbody").selectAll("tr").data(v.topics, function (t) { return t.topic; });
    var tr = rows.enter().append("tr");
    ["topic", "rate num", "bw num", "pubs num", "subs num", "to"].forEach(function (c) {
      tr.append("td").attr("class", c);
    });
    rows.exit().remove();
    rows.order();
    rows.attr("data-topic", function (t) { return t.topic; });
    rows.select("td.topic").text(function (t) { return t.topic; });
    rows.select("td.rate").attr("data-topic", function (t) { return t.topic; })
      .attr("data-rate", function (t) { return t.rate_hz; })
      .text(function (t) { return fmt(t.rate_hz, 1); });
    rows.select("td.bw").text(function (t) { return fmt(t.bytes_per_s / 1e6, 3); });
    rows.select("td.pubs").text(function (t) { return t.publishers; });
    rows.select("td.subs").text(function (t) { return t.subscribers; });
    rows.select("td.to").text(function (t) { return t.to.join(", "); });
  }

  /* ---- the graph ------------------------------------------------------------------------------
   * Columns: publishers, then topics by depth in the topic graph, then channels, then
   * subscribers. Within a column nodes are grouped by process, and each process's nodes of the
   * publisher column, or of the channel and subscriber columns, get a box. */

  function layout(v) {
    var depth = {}, byName = {};
    v.topics.forEach(function (t) { byName[t.topic] = t; depth[t.topic] = 0; });
    for (var pass = 0; pass < v.topics.length; pass++) {
      var moved = false;
      v.topics.forEach(function (t) {
        t.to.forEach(function (n) {
          if (depth[n] < depth[t.topic] + 1) { depth[n] = depth[t.topic] + 1; moved = true; }
        });
      });
      if (!moved) break;
    }
    var maxd = 0;
    v.topics.forEach(function (t) { maxd = Math.max(maxd, depth[t.topic]); });
    var nodes = [], cols = {};
    function add(n, col) { n.col = col; (cols[col] = cols[col] || []).push(n); nodes.push(n); }
    v.publishers.forEach(function (p) {
      add({key: "p:" + p.id, kind: "pub", pid: p.pid, host: p.host, bad: !!p.bottleneck,
           label: p.topic, sub: p.answered ? fmt(p.rate_hz, 1) + " msg/s" : "silent", obj: p}, 0);
    });
    v.topics.forEach(function (t) {
      add({key: "t:" + t.topic, kind: "topic", pid: -1, label: t.topic,
           sub: fmt(t.rate_hz, 1) + " msg/s", obj: t}, 1 + depth[t.topic]);
    });
    v.channels.forEach(function (c) {
      add({key: "c:" + c.id, kind: "chan", pid: c.pid, host: c.host, label: c.transport, obj: c}, maxd + 2);
    });
    v.subscribers.forEach(function (s) {
      add({key: "s:" + s.id, kind: "sub", pid: s.pid, host: s.host, bad: !!s.bottleneck,
           label: s.handle || short(s.id),
           sub: s.num_channels ? fmt(s.rate_hz, 1) + " msg/s" : "idle", obj: s}, maxd + 3);
    });
    /* Rows: on the subscriber side, each process gets as many rows as it has channels or
     * subscribers, its channels and subscribers side by side; on the publisher side, a row per
     * publisher, grouped by process; topics sit at the mean row of their endpoints. */
    var colW = 190, rowH = 54, gap = 0.35;
    function procKey(n) { return n.pid + "/" + (n.host || ""); }
    function groups(list) {
      var g = {}, order = [];
      list.forEach(function (n) {
        var k = procKey(n);
        if (!g[k]) { g[k] = []; order.push(k); }
        g[k].push(n);
      });
      order.sort(function (a, b) { return g[a][0].pid - g[b][0].pid || (a < b ? -1 : a > b); });
      return order.map(function (k) { return g[k]; });
    }
    var subSide = (cols[maxd + 2] || []).concat(cols[maxd + 3] || []), row = 0;
    groups(subSide).forEach(function (g) {
      var ci = 0, si = 0;
      g.sort(function (a, b) { return a.label < b.label ? -1 : a.label > b.label; });
      g.forEach(function (n) { n.row = row + (n.kind === "chan" ? ci++ : si++); });
      row += Math.max(ci, si) + gap;
    });
    var subRows = row;
    row = 0;
    groups(cols[0] || []).forEach(function (g) {
      g.forEach(function (n) { n.row = row++; });
      row += gap;
    });
    var pubRows = row, at0 = {};
    nodes.forEach(function (n) { at0[n.key] = n; });
    v.topics.forEach(function (t) {
      var rows = [];
      v.publishers.forEach(function (p) { if (p.topic === t.topic) rows.push(at0["p:" + p.id].row); });
      v.subscribers.forEach(function (q) { if (q.topic === t.topic) rows.push(at0["s:" + q.id].row); });
      at0["t:" + t.topic].want = rows.length ? rows.reduce(function (a, b) { return a + b; }, 0) / rows.length : 1e9;
    });
    var maxRows = Math.max(subRows, pubRows, 1);
    for (var c = 1; c <= maxd + 1; c++) {
      var list = (cols[c] || []).slice().sort(function (a, b) { return a.want - b.want || (a.label < b.label ? -1 : 1); });
      var next = 0;
      list.forEach(function (n) {
        n.row = Math.max(next, n.want === 1e9 ? next : n.want);
        next = n.row + 1;
      });
      maxRows = Math.max(maxRows, next);
    }
    nodes.forEach(function (n) { n.x = 100 + n.col * colW; n.y = 40 + n.row * rowH; });
    var at = {};
    nodes.forEach(function (n) { at[n.key] = n; });
    var links = [];
    v.publishers.forEach(function (p) {
      links.push({cls: "pubtopic", a: at["p:" + p.id], b: at["t:" + p.topic]});
    });
    v.topics.forEach(function (t) {
      t.to.forEach(function (n) { links.push({cls: "topic", a: at["t:" + t.topic], b: at["t:" + n]}); });
    });
    v.subscribers.forEach(function (s) {
      links.push({cls: "subtopic", a: at["t:" + s.topic], b: at["s:" + s.id]});
    });
    v.channels.forEach(function (c) {
      links.push({cls: "data", a: at["p:" + c.pub_id], b: at["c:" + c.id], label: c.transport});
      c.subscribers.forEach(function (s) { links.push({cls: "data", a: at["c:" + c.id], b: at["s:" + s]}); });
    });
    links = links.filter(function (l) { return l.a && l.b; });
    /* Process boxes: per process, its publishers; and its channels and subscribers. */
    var boxes = {};
    nodes.forEach(function (n) {
      if (n.kind === "topic") return;
      var side = n.kind === "pub" ? "p" : "s", k = n.pid + "/" + (n.host || "") + "/" + side;
      var b = boxes[k] = boxes[k] || {key: k, pid: n.pid, host: n.host, x0: 1e9, y0: 1e9, x1: -1e9, y1: -1e9};
      b.x0 = Math.min(b.x0, n.x - 80); b.x1 = Math.max(b.x1, n.x + 80);
      b.y0 = Math.min(b.y0, n.y - 24); b.y1 = Math.max(b.y1, n.y + 22);
    });
    return {nodes: nodes, links: links, boxes: Object.keys(boxes).map(function (k) { return boxes[k]; }),
            width: 200 + (maxd + 3) * colW + 100, height: 60 + maxRows * rowH};
  }

  function path(l) {
    var x0 = l.a.x + 70, y0 = l.a.y, x1 = l.b.x - 70, y1 = l.b.y;
    if (x1 <= x0) { x0 = l.a.x; x1 = l.b.x; }
    var mx = (x0 + x1) / 2;
    return "M" + x0 + "," + y0 + "C" + mx + "," + y0 + " " + mx + "," + y1 + " " + x1 + "," + y1;
  }

  function graph(v) {
    var svg = d3.select("#graph");
    var n = v.publishers.length + v.subscribers.length + v.channels.length + v.topics.length;
    if (n > MAX_DRAWN) {
      svg.selectAll("*").remove();
      svg.attr("height", 40).append("text").attr("x", 10).attr("y", 24)
        .text(n + " nodes: too many to draw; see the tables below");
      return;
    }
    svg.selectAll("text.toomany").remove();
    var g = layout(v);
    svg.attr("viewBox", "0 0 " + g.width + " " + g.height).attr("height", Math.min(g.height, 900));
    var defs = svg.selectAll("defs").data([0]);
    defs.enter().append("defs").append("marker").attr("id", "arrow").attr("viewBox", "0 0 10 10")
      .attr("refX", 9).attr("refY", 5).attr("markerWidth", 6).attr("markerHeight", 6)
      .attr("orient", "auto").append("path").attr("d", "M0,0L10,5L0,10z");
    var layers = svg.selectAll("g.layer").data(["boxes", "links", "nodes"]);
    layers.enter().append("g").attr("class", function (d) { return "layer " + d; });

    var boxes = svg.select("g.boxes").selectAll("g.box").data(g.boxes, function (b) { return b.key; });
    var be = boxes.enter().append("g").attr("class", "box");
    be.append("rect").attr("class", "proc");
    be.append("text").attr("class", "proclabel");
    boxes.exit().remove();
    boxes.select("rect").attr("x", function (b) { return b.x0; }).attr("y", function (b) { return b.y0; })
      .attr("width", function (b) { return b.x1 - b.x0; }).attr("height", function (b) { return b.y1 - b.y0; });
    boxes.select("text").attr("x", function (b) { return b.x0 + 4; }).attr("y", function (b) { return b.y0 - 3; })
      .text(function (b) { return (b.pid > 0 ? "pid " + b.pid : "process ?") + " @ " + (b.host || "?"); });

    var links = svg.select("g.links").selectAll("g.l").data(g.links, function (l) { return l.a.key + ">" + l.b.key; });
    var le = links.enter().append("g").attr("class", "l");
    le.append("path").attr("marker-end", "url(#arrow)");
    le.append("text").attr("class", "linklabel");
    links.exit().remove();
    links.select("path").attr("class", function (l) { return "link " + l.cls; }).attr("d", path);
    links.select("text").attr("x", function (l) { return (l.a.x + l.b.x) / 2; })
      .attr("y", function (l) { return (l.a.y + l.b.y) / 2 - 4; })
      .text(function (l) { return l.label || ""; });

    var nodes = svg.select("g.nodes").selectAll("g.node").data(g.nodes, function (d) { return d.key; });
    var ne = nodes.enter().append("g");
    ne.each(function (d) {
      var el = d3.select(this);
      if (d.kind === "topic") el.append("rect").attr("x", -70).attr("y", -18).attr("width", 140).attr("height", 36).attr("rx", 8);
      else if (d.kind === "chan") el.append("polygon").attr("points", "-34,0 0,-14 34,0 0,14");
      else el.append("ellipse").attr("rx", 70).attr("ry", 20);
      el.append("text").attr("class", "l1");
      el.append("text").attr("class", "l2");
    });
    nodes.exit().remove();
    nodes.attr("class", function (d) { return "node " + d.kind + (d.bad ? " bottleneck" : ""); })
      .attr("data-kind", function (d) { return d.kind; })
      .attr("data-key", function (d) { return d.key; })
      .attr("transform", function (d) { return "translate(" + d.x + "," + d.y + ")"; });
    nodes.select("text.l1").attr("y", function (d) { return d.sub ? -6 : 0; })
      .text(function (d) { return (d.kind === "pub" ? "pub " : d.kind === "sub" ? "sub " : "") + d.label; });
    nodes.select("text.l2").attr("y", 8).text(function (d) { return d.sub || ""; });
  }

  /* ---- endpoint cards and their charts ------------------------------------------------------ */

  function chart(canvas, sets, right) {
    return new Chart(canvas.getContext("2d"), {
      type: "line",
      data: {labels: [], datasets: sets.map(function (s, i) {
        return {label: s[0], data: [], yAxisID: s[1], borderColor: s[2], backgroundColor: s[2],
                borderWidth: 1.5, pointRadius: 0, spanGaps: false, tension: 0};
      })},
      options: {animation: false, responsive: false, maintainAspectRatio: false,
        plugins: {legend: {labels: {boxWidth: 10, font: {size: 10}}}},
        scales: {x: {ticks: {maxTicksLimit: 6, font: {size: 9}}},
                 y: {position: "left", beginAtZero: true, ticks: {font: {size: 9}}},
                 y2: {position: "right", beginAtZero: true, grid: {drawOnChartArea: false},
                      ticks: {font: {size: 9}}, title: {display: true, text: right, font: {size: 9}}}}}
    });
  }

  function card(id, kind) {
    var div = document.createElement("div");
    div.className = "card";
    div.dataset.id = id;
    div.dataset.kind = kind;
    div.innerHTML = "<h3></h3><div class=now></div><div class=why></div>" +
      "<canvas class=rate width=420 height=120></canvas><canvas class=lat width=420 height=120></canvas>";
    byId("cards").appendChild(div);
    var pub = kind === "pub";
    var c = {card: div, kind: kind,
      rate: chart(div.querySelector("canvas.rate"), pub ?
        [["msg/s", "y", "#1d4ed8"], ["MB/s", "y2", "#9333ea"]] : [["msg/s", "y", "#15803d"]], pub ? "MB/s" : ""),
      lat: chart(div.querySelector("canvas.lat"),
        [["avg ms", "y", "#0891b2"], ["p99 ms", "y", "#ea580c"], ["max ms", "y", "#dc2626"],
         ["in flight", "y2", "#6b7280"]], "in flight")};
    charts[id] = c;
    fetch("api/history?id=" + encodeURIComponent(id)).then(function (r) { return r.ok ? r.json() : null; })
      .then(function (h) { if (h && charts[id] === c) seed(c, h); }).catch(function () {});
    return c;
  }

  function label(ms) { var d = new Date(ms); return d.toTimeString().slice(0, 8); }

  function push(c, t, rate, mb, avg, p99, max, infl) {
    var r = c.rate.data, l = c.lat.data;
    r.labels.push(label(t)); l.labels.push(label(t));
    r.datasets[0].data.push(rate);
    if (r.datasets[1]) r.datasets[1].data.push(mb);
    [avg, p99, max, infl].forEach(function (x, i) { l.datasets[i].data.push(x); });
    [r, l].forEach(function (d) {
      while (d.labels.length > MAX_POINTS) {
        d.labels.shift();
        d.datasets.forEach(function (s) { s.data.shift(); });
      }
    });
  }

  function seed(c, h) {
    var start = c.rate.data.labels.length; /* points that came by events meanwhile stay last */
    var keep = {rl: c.rate.data.labels.splice(0), ll: c.lat.data.labels.splice(0),
      rd: c.rate.data.datasets.map(function (s) { return s.data.splice(0); }),
      ld: c.lat.data.datasets.map(function (s) { return s.data.splice(0); })};
    for (var i = 0; i < h.t_ms.length - start; i++) {
      var mb = h.bytes_per_s[i] == null ? null : h.bytes_per_s[i] / 1e6;
      push(c, h.t_ms[i], h.rate_hz[i], mb, h.avg_ms[i], h.p99_ms[i], h.max_ms[i], h.in_flight[i]);
    }
    c.rate.data.labels = c.rate.data.labels.concat(keep.rl);
    c.lat.data.labels = c.lat.data.labels.concat(keep.ll);
    c.rate.data.datasets.forEach(function (s, k) { s.data = s.data.concat(keep.rd[k]); });
    c.lat.data.datasets.forEach(function (s, k) { s.data = s.data.concat(keep.ld[k]); });
    c.rate.update("none");
    c.lat.update("none");
  }

  function cards(v) {
    var f = byId("filter").value.trim();
    var eps = [];
    v.publishers.forEach(function (p) { if (p.answered) eps.push({id: p.id, kind: "pub", o: p}); });
    v.subscribers.forEach(function (s) { eps.push({id: s.id, kind: "sub", o: s}); });
    var match = eps.filter(function (e) {
      return !f || (e.o.topic || "").indexOf(f) >= 0 || (e.o.handle || "").indexOf(f) >= 0;
    });
    var shown = match.slice(0, MAX_CARDS), want = {};
    byId("shown").textContent = shown.length + " of " + eps.length + " endpoints shown";
    var t = Date.parse(v.timestamp);
    shown.forEach(function (e) {
      want[e.id] = true;
      var c = charts[e.id] || card(e.id, e.kind), o = e.o, pub = e.kind === "pub";
      var lat = pub ? o.backpressure : o.processing;
      c.card.querySelector("h3").textContent = pub ?
        "publisher " + o.topic + "  (pid " + o.pid + ", " + short(o.id) + ")" :
        "subscriber " + (o.handle || short(o.id)) + " on " + o.topic + "  (pid " + o.pid + ", " + o.transport + ")";
      c.card.querySelector(".now").textContent = fmt(o.rate_hz, 1) + " msg/s" +
        (pub ? ", " + fmt(o.bytes_per_s / 1e6, 3) + " MB/s, backpressure" : ", processing") +
        " avg " + fmt(lat.avg_ms, 3) + " / p99 " + fmt(lat.p99_ms, 3) + " / max " + fmt(lat.max_ms, 3) +
        " ms, " + lat.in_flight + " in flight";
      c.card.querySelector(".why").textContent = o.bottleneck ? "BOTTLENECK: " + o.bottleneck : "";
      c.card.classList.toggle("bottleneck", !!o.bottleneck);
      push(c, t, o.rate_hz, pub ? o.bytes_per_s / 1e6 : null, lat.avg_ms, lat.p99_ms, lat.max_ms, lat.in_flight);
      c.rate.update("none");
      c.lat.update("none");
    });
    Object.keys(charts).forEach(function (id) {
      if (want[id]) return;
      charts[id].rate.destroy();
      charts[id].lat.destroy();
      charts[id].card.remove();
      delete charts[id];
    });
  }

  /* ---- the event stream --------------------------------------------------------------------- */

  function update(v) {
    updates++;
    last = v;
    header(v);
    if (v.error) return;
    bottlenecks(v);
    topics(v);
    graph(v);
    cards(v);
  }

  byId("filter").addEventListener("input", function () { if (last) cards(last); });
  var es = new EventSource("events");
  es.onmessage = function (e) {
    try { update(JSON.parse(e.data)); } catch (err) { byId("status").textContent = "bad event: " + err; }
  };
  es.onerror = function () {
    var st = byId("status");
    st.className = "status down";
    st.textContent = "disconnected; retrying...";
  };
})();
