// The web view of the metrics API: every flow with its status, the selected flow's topics, charts of the
// selected flow's (or topic's) throughput, latency, lag, oldest unreplicated record's age and continuous
// verification's records compared and differences found, and the nodes of an srm run cluster, refreshed every 10 s. Plain script, no build step;
// uPlot (vendored beside this file) draws the charts. The selection lives in the URL's fragment: #/source/target
// or #/source/target/topic. Each chart says how many points it drew in its data-points attribute and its state
// (loading, ready, empty, error) in data-state; <body data-refreshes> counts finished refreshes.
"use strict";
(() => {
  const params = new URLSearchParams(location.search);
  const REFRESH_MS = 1000 * (Number(params.get("refresh")) || 10);
  // The API's routes sit beside the page: /ui locally, /<stage>/ui behind API Gateway.
  const BASE = location.pathname.replace(/ui\/?$/, "");
  const CHARTS = {
    throughput: { metric: "record-rate", series: [{ label: "records/s", pick: (p) => p.value, stroke: "#2f6fde" }] },
    latency: {
      metric: "replication-latency-ms",
      series: [
        { label: "p50 ms", pick: (p) => p.p50, stroke: "#1a9850" },
        { label: "p99 ms", pick: (p) => p.p99, stroke: "#d73027" },
      ],
    },
    lag: { metric: "replication-records-lag", series: [{ label: "records", pick: (p) => p.value, stroke: "#7b3294" }] },
    // a stalled topic's oldest record not yet replicated grows older while the flowing ones' stay near their latency
    age: { metric: "oldest-unreplicated-age-ms", series: [{ label: "ms", pick: (p) => p.value, stroke: "#e66101" }] },
    // continuous verification (verify.interval.seconds): any difference is worth seeing beside the records compared
    verify: {
      metrics: ["verified-records", "verification-differences"],
      series: [
        { label: "records compared", pick: (p) => p.of[0]?.value, stroke: "#2f6fde" },
        { label: "differences", pick: (p) => p.of[1]?.value, stroke: "#d73027" },
      ],
    },
  };
  const plots = {}; // chart name → uPlot instance, while its selection stays
  window.srmCharts = plots; // for the browser test (and a curious console): each plot's data
  const ranges = {}; // chart name → its x range [from, to] in seconds: the series' time range, not its points'
  let plotted = null; // the selection the plots were made for
  let flows = [];
  let flowsLoaded = false;
  let refreshing = false;
  let again = false; // the selection changed during a refresh: refresh once more when it ends
  let refreshes = 0;

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  class ApiError extends Error {
    constructor(path, status, why) {
      super(why);
      Object.assign(this, { path, status, why });
    }
  }

  async function getJson(path) {
    let response;
    try {
      response = await fetch(BASE + path, { headers: { Accept: "application/json" }, cache: "no-store" });
    } catch (e) {
      throw new ApiError(BASE + path, 0, `the API did not answer (${e.message})`);
    }
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      // not JSON: the status line says what happened
    }
    if (!response.ok) {
      const why = body && body.message ? body.message : response.statusText || "no message";
      throw new ApiError(BASE + path, response.status, why);
    }
    if (body === null) throw new ApiError(BASE + path, response.status, "the answer is not JSON");
    return body;
  }

  function selection() {
    const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
    if (parts.length >= 2) return { source: parts[0], target: parts[1], topic: parts[2] || null };
    const active = flows.find((f) => f.status === "ACTIVE") || flows[0];
    return active ? { source: active.source, target: active.target, topic: null } : null;
  }

  function select(source, target, topic) {
    location.hash = "#/" + [source, target, topic].filter((p) => p).map(enc).join("/");
  }

  const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
  const show = {
    count: (v) => (v === null || v === undefined ? "–" : number.format(v)),
    ms: (v) => (v === null || v === undefined ? "–" : v < 1000 ? `${number.format(v)} ms` : `${number.format(v / 1000)} s`),
    time: (v) => (v === null || v === undefined ? "–" : new Date(v).toLocaleTimeString()),
  };

  function cell(row, text, className) {
    const td = row.insertCell();
    if (text instanceof Node) td.append(text);
    else td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function badge(status) {
    const span = document.createElement("span");
    span.className = `status ${status}`;
    span.textContent = status;
    return span;
  }

  // the figures columns the flows and the topics tables share: records/s, latency p50 and p99, lag
  function figureCells(row, figures) {
    cell(row, show.count(figures.record_rate), "number");
    cell(row, show.ms(figures.latency_p50_ms), "number");
    cell(row, show.ms(figures.latency_p99_ms), "number");
    cell(row, show.count(figures.lag), "number");
  }

  function renderFlows(chosen) {
    const body = $("flows").tBodies[0];
    body.replaceChildren();
    for (const f of flows) {
      const row = body.insertRow();
      row.dataset.flow = `${f.source}->${f.target}`;
      row.classList.toggle("selected", !!chosen && chosen.source === f.source && chosen.target === f.target);
      cell(row, `${f.source} → ${f.target}`);
      cell(row, badge(f.status));
      cell(row, show.count(f.topics), "number");
      figureCells(row, f.figures);
      cell(row, show.ms(f.heartbeat_age_ms), "number");
      cell(row, show.time(f.last_checkpoint_ms));
      row.addEventListener("click", () => select(f.source, f.target, null));
    }
    const empty = $("flows-empty");
    empty.hidden = flows.length > 0;
    empty.textContent = flowsLoaded ? "No flows configured yet." : "Could not load the flows (see the error above).";
  }

  function renderNodes(answer) {
    const body = $("nodes").tBodies[0];
    body.replaceChildren();
    const nodes = answer ? answer.nodes : [];
    for (const n of nodes) {
      const row = body.insertRow();
      row.dataset.node = n.node;
      const held = Object.entries(n.partitions).flatMap(([flow, topics]) =>
        Object.entries(topics).map(([topic, parts]) => `${flow} ${topic} ${parts.join(",")}`),
      );
      cell(row, n.node);
      cell(row, n.fencedBy ? `fenced by ${n.fencedBy}` : n.alive ? "yes" : `no (seen ${show.time(Date.parse(n.lastSeen))})`);
      cell(row, `${n.host}:${n.pid}`);
      cell(row, n.leaderOf.join(", ") || "–");
      cell(row, held.join("; ") || "–");
      cell(row, n.lastRebalance ? show.time(Date.parse(n.lastRebalance)) : "–");
    }
    $("nodes-section").hidden = nodes.length === 0;
    $("nodes-group").textContent = answer ? answer.group : "–";
  }

  function renderTopics(chosen, topics, failed = false) {
    const body = $("topics").tBodies[0];
    body.replaceChildren();
    $("topics-flow").textContent = chosen ? `${chosen.source} → ${chosen.target}` : "–";
    for (const t of topics) {
      const row = body.insertRow();
      row.dataset.topic = t.upstream_topic;
      row.classList.toggle("selected", chosen.topic === t.upstream_topic);
      cell(row, t.upstream_topic);
      cell(row, t.remote_topic);
      cell(row, badge(t.status));
      cell(row, show.count(t.partitions), "number");
      figureCells(row, t.figures);
      // a second click on the charted topic goes back to the flow
      const topic = chosen.topic === t.upstream_topic ? null : t.upstream_topic;
      row.addEventListener("click", () => select(chosen.source, chosen.target, topic));
    }
    const empty = $("topics-empty");
    empty.hidden = topics.length > 0;
    empty.textContent = !chosen
      ? "No flow selected."
      : failed
        ? "Could not load the topics (see the error above)."
        : "No topics replicated yet.";
  }

  function chartState(name, state, message, points) {
    const figure = $(`chart-${name}`);
    figure.dataset.state = state;
    figure.dataset.points = String(points);
    figure.querySelector(".plot").hidden = state !== "ready";
    const empty = figure.querySelector(".empty");
    empty.hidden = state === "ready";
    empty.textContent = message;
    if (state !== "ready" && plots[name]) {
      plots[name].destroy();
      delete plots[name];
    }
  }

  function drawChart(name, series) {
    const spec = CHARTS[name];
    const points = series.points;
    if (points.length === 0) {
      chartState(name, "empty", "No data yet.", 0);
      return;
    }
    chartState(name, "ready", "", points.length);
    const data = [points.map((p) => p.timestamp / 1000), ...spec.series.map((s) => points.map((p) => s.pick(p) ?? null))];
    ranges[name] = [series.from_ms / 1000, series.to_ms / 1000];
    if (plots[name]) {
      plots[name].setData(data);
      return;
    }
    const where = $(`chart-${name}`).querySelector(".plot");
    const opts = {
      width: Math.max(where.clientWidth, 300),
      height: 180,
      scales: { x: { time: true, range: (u, min, max) => ranges[name] || [min, max] } },
      series: [{}, ...spec.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 2 }))],
      axes: [{}, { size: 60 }],
    };
    plots[name] = new uPlot(opts, data, where);
  }

  function seriesPath(chosen, metric) {
    const flow = `${enc(chosen.source)}/${enc(chosen.target)}`;
    return chosen.topic
      ? `v2/topic-metrics/${flow}/${enc(chosen.topic)}/${metric}`
      : `v2/cluster-metrics/${flow}/${metric}`;
  }

  // A chart's series: its metric's, or several metrics' joined by window (each point's `of` holds each metric's)
  async function chartSeries(chosen, spec) {
    if (!spec.metrics) return getJson(seriesPath(chosen, spec.metric));
    const answers = await Promise.all(spec.metrics.map((m) => getJson(seriesPath(chosen, m))));
    const windows = new Map();
    answers.forEach((answer, i) => {
      for (const p of answer.points) {
        const at = windows.get(p.timestamp) || { timestamp: p.timestamp, of: [] };
        at.of[i] = p;
        windows.set(p.timestamp, at);
      }
    });
    return { ...answers[0], points: [...windows.values()].sort((a, b) => a.timestamp - b.timestamp) };
  }

  function showErrors(errors) {
    // one line per distinct answer: a missing flow fails its topics and all its charts alike
    const seen = new Map();
    for (const e of errors) {
      const key = `${e.status} ${e.why ?? e.message}`;
      seen.set(key, [...(seen.get(key) || []), e]);
    }
    const list = $("errors");
    list.replaceChildren(
      ...[...seen.values()].map(([first, ...more]) => {
        const item = document.createElement("li");
        if (!(first instanceof ApiError)) {
          item.textContent = `the page failed: ${first.message}`;
          return item;
        }
        const status = first.status ? `HTTP ${first.status}` : "no answer";
        const others = more.length ? ` and ${more.length} more` : "";
        item.textContent = `${first.why} (${status} for GET ${first.path}${others})`;
        return item;
      }),
    );
    list.hidden = errors.length === 0;
  }

  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    again = false;
    const errors = [];
    try {
      try {
        flows = (await getJson("v2/replications")).replications;
        flowsLoaded = true;
      } catch (e) {
        errors.push(e);
      }
      const chosen = selection();
      renderFlows(chosen);
      const nodes = getJson("v2/nodes").then(renderNodes, (e) => errors.push(e));
      const key = JSON.stringify(chosen);
      if (key !== plotted) {
        for (const name of Object.keys(CHARTS)) chartState(name, "loading", "loading…", 0);
        plotted = key;
      }
      $("charted").textContent = chosen
        ? `${chosen.source} → ${chosen.target}${chosen.topic ? ` / ${chosen.topic}` : ""}`
        : "–";
      $("back-to-flow").hidden = !(chosen && chosen.topic);
      if (chosen) $("back-to-flow").href = "#/" + enc(chosen.source) + "/" + enc(chosen.target);
      if (!chosen) {
        renderTopics(null, []);
        for (const name of Object.keys(CHARTS)) chartState(name, "empty", "No flow selected.", 0);
        await nodes;
        return;
      }
      const topics = getJson(`v2/replications/${enc(chosen.source)}/${enc(chosen.target)}/topics`).then(
        (answer) => renderTopics(chosen, answer.topics),
        (e) => {
          errors.push(e);
          renderTopics(chosen, [], true);
        },
      );
      const charts = Object.entries(CHARTS).map(([name, spec]) =>
        chartSeries(chosen, spec).then(
          (series) => drawChart(name, series),
          (e) => {
            errors.push(e);
            chartState(name, "error", "Could not load this chart (see the error above).", 0);
          },
        ),
      );
      await Promise.all([topics, nodes, ...charts]);
    } catch (e) {
      errors.push(e);
    } finally {
      showErrors(errors);
      $("updated").textContent = `updated ${new Date().toLocaleTimeString()} · refreshes every ${REFRESH_MS / 1000} s`;
      refreshing = false;
      document.body.dataset.refreshes = String(++refreshes);
      if (again) refresh();
    }
  }

  window.addEventListener("hashchange", refresh);
  window.addEventListener("resize", () => {
    for (const [name, plot] of Object.entries(plots)) {
      const width = $(`chart-${name}`).querySelector(".plot").clientWidth;
      if (width > 0) plot.setSize({ width, height: 180 });
    }
  });
  refresh();
  setInterval(refresh, REFRESH_MS);
})();
