// The p2p swarm dashboard: polls api/state every second and draws it.
// Reads only. No build step: plain browser JavaScript and the vendored uPlot.
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  const page = (window.p2pDashboard = { state: null, charts: {}, polls: 0, failures: 0, keys: "" });

  // Distinct colours beyond 10 nodes: hues a golden angle apart, lightness alternating.
  function colour(i) {
    const hue = (i * 137.508) % 360;
    const light = [42, 30, 55][Math.floor(i / 12) % 3];
    return `hsl(${hue.toFixed(1)}, 70%, ${light}%)`;
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  const pct = (v) => (typeof v === "number" ? (100 * v).toFixed(1) + "%" : "-");
  const num = (v, d) => (typeof v === "number" ? v.toFixed(d) : "-");
  const int = (v) => (typeof v === "number" ? String(Math.round(v)) : "-");

  // Redraw a part only when what it shows changed (the page's own CPU: results/monitoring.md).
  const drawn = {};
  function changed(part, value) {
    const text = JSON.stringify(value);
    if (drawn[part] === text) return false;
    drawn[part] = text;
    return true;
  }

  function renderNodes(state) {
    const body = document.querySelector("#nodes tbody");
    body.replaceChildren();
    state.nodes.forEach((n, i) => {
      const tr = el("tr", { "data-state": n.state, "data-key": n.key });
      const name = el("td");
      const sw = el("span", { class: "swatch" });
      sw.style.background = colour(i);
      name.append(sw, document.createTextNode(n.name || n.label));
      name.title = n.key + (n.id ? "\nid " + n.id : "");
      tr.append(name);
      const st = el("td");
      st.append(el("span", { class: "state" }, n.state));
      tr.append(st);
      const round = n.rounds ? `${int(n.round)} / ${n.rounds}` : int(n.round);
      tr.append(el("td", { class: "num" }, round));
      tr.append(el("td", { class: "num" }, pct(n.accuracy)));
      tr.append(el("td", { class: "num" }, num(n.loss, 3)));
      const weights = Object.entries(n.weights || {}).map(([m, w]) => `${m} ${num(w, 3)}`);
      tr.append(el("td", { class: "num" }, weights.join(", ") || "-"));
      tr.append(el("td", { class: "num" }, int(n.view_size)));
      tr.append(el("td", { class: "num" }, int(n.connections)));
      const models = (n.models || []).join(", ") + (n.group ? `  (group ${n.group})` : "");
      tr.append(el("td", {}, models || "-"));
      let err = n.state === "alive" ? "" : n.error || (n.state === "isolated" ? "no peer known" : "");
      if (n.state === "dead" && typeof n.seen_ago === "number")
        err = `not answering for ${n.seen_ago.toFixed(0)} s: ${err}`;
      tr.append(el("td", { class: "error" }, err));
      body.append(tr);
    });
    const up = state.nodes.filter((n) => n.state === "alive" || n.state === "isolated").length;
    const dead = state.nodes.filter((n) => n.state === "dead").length;
    document.getElementById("summary").textContent =
      `${up} of ${state.nodes.length} nodes answering` + (dead ? `, ${dead} dead` : "");
  }

  function chartData(state, name) {
    const s = state.series;
    return [s.t, ...state.nodes.map((n) => s[name][n.key] || s.t.map(() => null)), s[name + "_mean"]];
  }

  function makeChart(state, name, target, fmt) {
    const box = document.getElementById(target);
    box.replaceChildren();
    const series = [{}];
    state.nodes.forEach((n, i) =>
      series.push({ label: n.name || n.label, stroke: colour(i), width: 1.2, value: (u, v) => fmt(v) }));
    series.push({ label: "mean", stroke: "#111", width: 3, value: (u, v) => fmt(v) });
    const opts = {
      width: Math.max(320, box.clientWidth || 520), height: 220, series,
      axes: [{}, { size: 70, values: (u, vals) => vals.map(fmt) }],
      legend: { show: state.nodes.length <= 16 },
    };
    return new uPlot(opts, chartData(state, name), box);
  }

  function renderCharts(state) {
    const keys = state.nodes.map((n) => n.key).join("|");
    const specs = {
      accuracy: ["chart-accuracy", (v) => (v == null ? "-" : (100 * v).toFixed(0) + "%")],
      loss: ["chart-loss", (v) => (v == null ? "-" : v.toFixed(2))],
      bytes_rate: ["chart-bytes", (v) => (v == null ? "-" : (v / 1e3).toFixed(0) + " kB/s")],
    };
    for (const [name, [target, fmt]] of Object.entries(specs)) {
      if (keys !== page.keys || !page.charts[name]) {
        if (page.charts[name]) page.charts[name].destroy();
        page.charts[name] = makeChart(state, name, target, fmt);
      } else {
        page.charts[name].setData(chartData(state, name));
      }
    }
    page.keys = keys;
  }

  function renderGraph(state) {
    const svg = document.getElementById("graph");
    const ns = "http://www.w3.org/2000/svg";
    svg.replaceChildren();
    const n = state.nodes.length;
    const pos = {};
    state.nodes.forEach((node, i) => {
      const a = (2 * Math.PI * i) / Math.max(1, n) - Math.PI / 2;
      pos[node.key] = [210 + 120 * Math.cos(a), 150 + 120 * Math.sin(a)];
    });
    for (const e of state.graph.edges) {
      const [a, b] = [pos[e.a], pos[e.b]];
      if (!a || !b) continue;
      const line = document.createElementNS(ns, "line");
      for (const [k, v] of Object.entries({ x1: a[0], y1: a[1], x2: b[0], y2: b[1] })) line.setAttribute(k, v);
      line.setAttribute("stroke", "#64748b");
      line.setAttribute("stroke-width", e.models.length ? 2 : 1);
      if (e.relayed) line.setAttribute("class", "relayed");
      const title = document.createElementNS(ns, "title");
      title.textContent = (e.relayed ? "relayed" : "direct") + (e.models.length ? "; holds " + e.models.join(", ") : "");
      line.append(title);
      svg.append(line);
    }
    state.nodes.forEach((node, i) => {
      const [x, y] = pos[node.key];
      const c = document.createElementNS(ns, "circle");
      c.setAttribute("cx", x); c.setAttribute("cy", y); c.setAttribute("r", 9);
      c.setAttribute("fill", node.state === "dead" || node.state === "no-node" ? "#fff" : colour(i));
      c.setAttribute("stroke", node.state === "dead" ? "#dc2626" : node.group ? "#111" : "#fff");
      c.setAttribute("stroke-width", node.group || node.state === "dead" ? 3 : 1);
      const t = document.createElementNS(ns, "title");
      t.textContent = `${node.name || node.label}: ${node.state}; models ${(node.models || []).join(", ")}` +
        (node.group ? `; group ${node.group}` : "");
      c.append(t);
      svg.append(c);
      const label = document.createElementNS(ns, "text");
      label.setAttribute("x", x + 12); label.setAttribute("y", y + 4);
      label.textContent = node.name || node.label;
      svg.append(label);
    });
    document.getElementById("graph-note").textContent =
      `(exchanges in the last ${state.graph.window} s)`;
    document.getElementById("graph-legend").textContent =
      `${state.graph.edges.length} links (thick: the peers share a model; dashed: relayed); ` +
      "black ring: in a semi-local group; white: not answering" +
      (state.graph.outside_peers ? `; ${state.graph.outside_peers} peers outside this dashboard` : "");
  }

  function renderRefusals(state) {
    const body = document.querySelector("#refusals tbody");
    body.replaceChildren();
    const rows = state.refusals.filter((r) => r.count > 0);
    for (const r of rows) {
      const tr = el("tr");
      tr.append(el("td", {}, r.source), el("td", {}, r.reason), el("td", { class: "num" }, r.count));
      body.append(tr);
    }
    if (!rows.length) body.append(el("tr")).append(el("td", { colspan: 3, class: "muted" }, "none so far"));
    const off = document.querySelector("#offences tbody");
    off.replaceChildren();
    for (const [source, count] of Object.entries(state.offences)) {
      const tr = el("tr");
      tr.append(el("td", {}, source), el("td", { class: "num" }, count));
      off.append(tr);
    }
  }

  async function poll() {
    try {
      const reply = await fetch("api/state?token=" + encodeURIComponent(token), { cache: "no-store" });
      if (!reply.ok) throw new Error(`${reply.status}: ${(await reply.text()).trim()}`);
      const state = await reply.json();
      page.state = state;
      page.polls += 1;
      // a dead node's "not answering for N s" counts whole seconds; the rest as is
      const rows = state.nodes.map((n) => ({ ...n, seen_ago: n.state === "dead" ? Math.round(n.seen_ago) : null }));
      if (changed("nodes", rows)) renderNodes(state);
      renderCharts(state);
      if (changed("graph", [state.nodes.map((n) => [n.key, n.name, n.label, n.state, n.group, n.models]), state.graph]))
        renderGraph(state);
      if (changed("refusals", [state.refusals, state.offences])) renderRefusals(state);
      document.getElementById("updated").textContent = "updated " + new Date(state.now * 1000).toLocaleTimeString();
    } catch (err) {
      page.failures += 1;
      document.getElementById("updated").textContent = "dashboard not answering: " + err.message;
    }
  }
  poll();
  // every 2 s: the page's own CPU halves against 1 s (results/monitoring.md); none while
  // the tab is hidden, and at once when it shows again
  setInterval(() => { if (!document.hidden) poll(); }, 2000);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
})();
