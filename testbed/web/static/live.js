// The live page of a testbed run: a server-sent event stream (/api/stream) gives a snapshot of
// the run, then a delta every half second; this keeps them merged and draws the cell chosen.
// Every text that comes from the run (names, labels, problems) goes in as text, never markup.
"use strict";

const S = {
  overview: null, runId: null, run: null, cell: null, follow: true, wanted: "follow",
  status: "connecting", source: null, ended: false, charts: {}, layout: "",
};
const FLUSH_WALL_S = 0.6;  // a client writes its records at least every 0.5 s (RecordWriter)
const COLORS = ["#2f6fdf", "#e8742a", "#1f9d55", "#a335c9", "#d43f3a", "#0d9bb5", "#8c6d1f", "#5a6475"];

// -- small helpers --------------------------------------------------------------------------
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
    else if (k === "text") e.textContent = String(v);
    else e.setAttribute(k, String(v));
  }
  for (const kid of kids) if (kid !== null && kid !== undefined)
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return e;
}
const $ = (id) => document.getElementById(id);
function num(v, digits = 0) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
}
function pct(v, digits = 1) { return v === null || v === undefined ? "–" : `${num(100 * v, digits)} %`; }
function dur(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return h ? `${h} h ${String(m).padStart(2, "0")} min` : m ? `${m} min ${String(sec).padStart(2, "0")} s` : `${sec} s`;
}
function replace(node, ...kids) { node.replaceChildren(...kids.filter((k) => k !== null && k !== undefined)); }

// -- the stream -----------------------------------------------------------------------------
function connect() {
  if (S.source) S.source.close();
  const src = new EventSource(`/api/stream?run=${encodeURIComponent(S.wanted)}`);
  S.source = src;
  src.addEventListener("overview", (e) => { S.overview = JSON.parse(e.data); schedule(); });
  src.addEventListener("snapshot", (e) => { onSnapshot(JSON.parse(e.data)); });
  src.addEventListener("delta", (e) => { onDelta(JSON.parse(e.data)); });
  src.addEventListener("end", () => {
    S.ended = true; src.close(); setStatus(S.run && S.run.head.finished ? "finished" : "ended"); schedule();
  });
  src.onopen = () => { if (!S.ended) setStatus("live"); };
  src.onerror = () => { if (!S.ended) setStatus("reconnecting"); };
}
function setStatus(s) { S.status = s; document.body.dataset.status = s; }

function onSnapshot(msg) {
  S.runId = msg.run;
  S.run = {about: msg.about, plan: msg.plan, head: msg.head, cells: {}};
  for (const c of msg.cells) S.run.cells[c.key] = c;
  if (!S.ended) setStatus(msg.head.finished ? "finished" : "live");
  schedule(true);
}
function merge(arr, from, items) { arr.length = Math.min(arr.length, from); for (const v of items) arr.push(v); }
function onDelta(msg) {
  if (!S.run || msg.run !== S.runId) return;
  const run = S.run;
  run.head = msg.head;
  if (msg.about) { run.about = msg.about; run.plan = msg.plan; }
  for (const d of msg.cells) {
    const c = run.cells[d.key];
    if (!c) { run.cells[d.key] = d; continue; }
    const {services, links, from, net_from} = d;
    if (Object.keys(services).some((k) => services[k].rate.length) || Object.keys(links).length) c.version = (c.version || 0) + 1;
    for (const [k, v] of Object.entries(d)) {
      if (["services", "links", "decisions", "replica_events", "problems", "conditions"].includes(k)) continue;
      if (k.endsWith("_from")) continue;
      c[k] = v;
    }
    for (const [name, series] of Object.entries(services)) {
      const have = c.services[name] || (c.services[name] = {});
      for (const [k, vals] of Object.entries(series)) merge(have[k] || (have[k] = []), from, vals);
    }
    for (const [key, series] of Object.entries(links)) {
      const have = c.links[key] || (c.links[key] = {});
      for (const [k, vals] of Object.entries(series)) merge(have[k] || (have[k] = []), net_from, vals);
    }
    for (const name of ["decisions", "replica_events", "problems", "conditions"])
      merge(c[name], d[`${name}_from`], d[name]);
  }
  if (!S.ended) setStatus(msg.head.finished ? "finished" : "live");
  schedule();
}

// drawn at most every 0.8 s, so at least once a second (the stream brings a delta every half
// second): a browser on the run's own machine takes its turns on the cores the run times itself by
const RENDER_EVERY_MS = 800;
let pending = false, rebuild = false, lastRender = 0;
function schedule(full) {
  rebuild = rebuild || !!full;
  if (pending) return;
  pending = true;
  const wait = full ? 0 : Math.max(0, lastRender + RENDER_EVERY_MS - performance.now());
  setTimeout(() => requestAnimationFrame(() => {
    pending = false; lastRender = performance.now();
    const f = rebuild; rebuild = false; render(f);
  }), wait);
}
// a part of the page is rebuilt only when what it shows changed
const drawn = {};
function changed(part, ...what) {
  const key = JSON.stringify(what);
  if (drawn[part] === key) return false;
  drawn[part] = key;
  return true;
}

// -- what to show ---------------------------------------------------------------------------
function currentCell() {
  const run = S.run;
  if (!run) return null;
  const keys = Object.keys(run.cells).sort();
  if (S.follow || !run.cells[S.cell]) {
    S.cell = run.head.progress.current || keys[keys.length - 1] || null;
  }
  return S.cell ? run.cells[S.cell] : null;
}
function rowsOf(cell) {
  // the run's record once written (results.json), else the cell's own figures
  const rec = S.run.head.record;
  if (rec) {
    const [idx, rep] = cell.key.split("/");
    const rows = rec.rows.filter((r) => String(r.cell || "").split("-")[0] === idx && String(r.rep) === rep);
    return {source: "results.json", rows};
  }
  return {source: cell.summary.source === "cell" ? "the cell's rows (as results.json will record them)" :
    "live tally of the requests answered so far", rows: cell.summary.rows};
}

function render(full) {
  const run = S.run;
  renderOverview();
  if (!run) {
    const rep = S.overview && S.overview.mode === "reproduce";
    $("name").textContent = rep ? "reproduce: no scenario run yet" : "waiting for the run to start";
    $("status").textContent = S.status;
    return;
  }
  const cell = currentCell();
  renderHeader(run, cell);
  renderBanners(run);
  renderCellNav(run);
  if (!cell) return;
  const layout = `${S.runId}|${cell.key}|${Object.keys(cell.services).join(",")}|${Object.keys(cell.links).sort().join(",")}`;
  if (full || layout !== S.layout) { buildCharts(cell); S.layout = layout; drawn.charts = null; }
  renderSummary(run, cell);
  if (changed("charts", cell.key, cell.version || 0, cell.status, Math.floor((cell.now_t || 0) / cell.width), cell.decisions.length)) updateCharts(cell);
  renderNet(run, cell);
  renderDecisions(cell);
  renderEnd(run, cell);
}

function renderOverview() {
  const o = S.overview;
  if (!o || o.mode !== "reproduce") return;
  $("reproduce").hidden = false;
  const sel = $("run-select");
  const opts = [el("option", {value: "follow", text: "follow the newest run"}),
    ...o.runs.map((r) => el("option", {value: r.id, text: `${r.id} (${r.finished ? (r.verdict || "done") : `${r.cells_done}/${r.cells_total} cells`})`}))];
  const before = sel.value || S.wanted;
  replace(sel, ...opts);
  sel.value = before;
  const arts = o.artefacts || [];
  const link = $("reproduce-report");
  if (o.report && !link) sel.parentElement.after(el("a", {id: "reproduce-report", href: "/report.html", target: "_blank", text: "the reproduction's report.html"}));
  replace($("artefacts"), el("tr", {}, el("th", {text: "artefact"}), el("th", {text: "verdict"}), el("th", {text: "summary"})),
    ...arts.map((a) => el("tr", {}, el("td", {text: a.artefact}), el("td", {class: `verdict ${a.verdict}`, text: a.verdict}), el("td", {text: a.summary}))));
}

function renderHeader(run, cell) {
  const a = run.about, p = run.head.progress;
  $("name").textContent = a.name || run.head.run_dir;
  document.title = `${a.name || "run"} · testbed live`;
  $("status").textContent = {live: "live", finished: "finished", ended: "not live", reconnecting: "reconnecting", connecting: "connecting"}[S.status];
  $("meta").textContent = `${a.profile || ""} profile · time scale ${a.time_scale} · ${a.duration_s} s per cell` +
    (a.warmup_s ? ` after ${a.warmup_s} s warm-up` : "") + ` · ${run.head.run_dir}`;
  const frac = p.total_scn_s ? p.elapsed_scn_s / p.total_scn_s : 0;
  $("bar-done").style.width = `${Math.min(100, 100 * (run.head.finished ? 1 : frac))}%`;
  const cur = cell && !run.head.finished && run.cells[p.current];
  const parts = [`${p.cells_done}/${p.cells_total} cells done`];
  if (p.current && run.cells[p.current]) {
    const c = run.cells[p.current];
    parts.push(`now: cell ${c.key.split("/")[0]} (${c.label}), rep ${c.rep + 1}: ${c.phase}` +
      (c.now_t !== null && c.now_t !== undefined ? ` at ${num(c.now_t, 0)} s` : ""));
  }
  parts.push(`scenario time ${dur(p.elapsed_scn_s)} of ${dur(p.total_scn_s)}` + (run.head.finished ? "" : `, ${dur(p.left_scn_s)} left`));
  const est = {mean: "estimate: finished cells' mean start-up and stop", "first cell": "estimate: this cell's start-up", "at least": "at least", done: ""}[p.estimate];
  parts.push(`wall ${dur(p.elapsed_wall_s)} elapsed` + (run.head.finished ? "" : `, ~${dur(p.left_wall_s)} left (${est})`));
  $("progress-text").textContent = parts.join(" · ");
  void cur;
}

function renderBanners(run) {
  const out = [];
  const rec = run.head.record;
  if (!changed("banners", rec ? [rec.verdict, rec.expect.length] : null, run.head.report, run.head.behind,
    run.head.quiet_s ? Math.floor(run.head.quiet_s / 10) : 0, S.status, S.ended)) return;
  if (rec) {
    const b = el("div", {class: `banner ${rec.verdict}`, "data-verdict": rec.verdict},
      "Verdict: ", el("span", {class: `verdict ${rec.verdict}`, text: rec.verdict}),
      rec.failed_cells.length ? ` · failed cell(s): ${rec.failed_cells.join(", ")}` : "",
      rec.interrupted ? " · the run was interrupted" : "",
      ` · ${rec.expect.filter((o) => o.verdict === "PASS").length} of ${rec.expect.length} checks pass`);
    const href = S.overview && S.overview.mode === "reproduce" ? `/runs/${encodeURIComponent(S.runId)}/report.html` : "/report.html";
    if (run.head.report) b.append(el("a", {href, target: "_blank", id: "report-link", text: "report.html"}));
    else b.append(el("span", {class: "muted", text: " (report being written…)"}));
    if (S.status === "ended" || S.status === "finished" && S.ended)
      b.append(el("div", {class: "muted", text: `This page is no longer live: \`testbed watch ${run.head.run_dir}\` serves it again.`}));
    out.push(b);
  }
  for (const x of run.head.behind) {
    out.push(el("div", {class: "banner behind", "data-behind": x.service}, x.why ?
      `MACHINE BEHIND in cell ${x.cell}: ${x.why}` :
      `MACHINE BEHIND${x.final ? "" : " (so far)"}: ${x.service}'s clients in cell ${x.cell} sent ${num(x.lateness_ms, 0)} ms late ` +
      `(p99, scenario time) beyond the ${num(x.bound_ms, 0)} ms bound: this machine does not hold time scale ${run.about.time_scale}.`));
  }
  if (run.head.quiet_s) out.push(el("div", {class: "banner quiet", text: `No new data for ${dur(run.head.quiet_s)}: has the run stopped?`}));
  if (S.status === "ended" && !rec) out.push(el("div", {class: "banner quiet", text: "The server stopped before the run wrote its results."}));
  replace($("banners"), ...out);
}

function renderCellNav(run) {
  const plan = run.plan.length ? run.plan : Object.values(run.cells).map((c) => ({key: c.key, label: c.label, rep: c.rep}));
  if (!changed("nav", plan.map((p) => [p.key, run.cells[p.key] ? run.cells[p.key].status : "planned"]), S.cell, S.follow)) return;
  if (plan.length <= 1) { replace($("cells")); return; }
  const buttons = plan.map((p) => {
    const c = run.cells[p.key];
    const b = el("button", {class: `${c ? c.status : "planned"} ${p.key === S.cell ? "sel" : ""}`, "data-cell": p.key},
      el("span", {class: "dot"}), `${p.label}${run.about.repetitions > 1 ? ` · rep ${p.rep + 1}` : ""}`);
    b.onclick = () => { if (run.cells[p.key]) { S.cell = p.key; S.follow = false; $("follow").checked = false; schedule(true); } };
    return b;
  });
  const follow = el("input", {type: "checkbox", id: "follow"});
  follow.checked = S.follow;
  follow.onchange = () => { S.follow = follow.checked; schedule(true); };
  replace($("cells"), ...buttons, el("label", {}, follow, " follow the current cell"));
}

// -- the services' table --------------------------------------------------------------------
const COLUMNS = [
  ["requests", "requests", (v) => num(v)], ["errors", "errors", (v) => num(v)],
  ["slo_violation_rate", "SLO viol.", (v) => pct(v)], ["mean_latency_ms", "mean ms", (v) => num(v)],
  ["p50_latency_ms", "p50 ms", (v) => num(v)], ["p99_latency_ms", "p99 ms", (v) => num(v)],
  ["mean_replicas", "replicas (mean)", (v) => num(v, 1)], ["p99_lateness_ms", "lateness p99 ms", (v) => num(v)],
];
function last(arr, n = 1, upto = Infinity) {
  // the latest n values before bin `upto` (the bin still filling is left out)
  const out = [];
  for (let i = Math.min((arr || []).length, upto) - 1; i >= 0 && out.length < n; i--) if (arr[i] !== null && arr[i] !== undefined) out.push(arr[i]);
  return out;
}
function renderSummary(run, cell) {
  const {source, rows} = rowsOf(cell);
  const upto0 = Math.floor(((cell.now_t || 0) - FLUSH_WALL_S * cell.time_scale - cell.t0) / cell.width);
  if (!changed("summary", cell.key, source, rows, cell.status, upto0, cell.version || 0)) return;
  $("summary-source").textContent = `figures of the measured window: ${source}`;
  const plan = run.plan.find((p) => p.key === cell.key);
  const policies = plan && plan.policies ? plan.policies : Object.fromEntries((run.about.services || []).map((s) => [s.name, s.policy]));
  const live = cell.status === "running";
  // the bins that are whole: before the one the cell's clock is in
  const upto = cell.now_t === null || cell.now_t === undefined ? 0
    : Math.floor((cell.now_t - FLUSH_WALL_S * cell.time_scale - cell.t0) / cell.width);
  const nowCols = live ? ["req/s now", "p95 ms now", "replicas now", "in flight now"] : ["req/s (window)"];
  const head = el("tr", {}, el("th", {text: "service"}), el("th", {text: "policy"}),
    ...nowCols.map((t) => el("th", {class: "num", text: t})),
    ...COLUMNS.map(([, t]) => el("th", {class: "num", text: t})));
  const body = rows.filter((r) => r.service).map((r) => {
    const s = cell.services[r.service] || {};
    let now;
    if (live) {
      const rate = last(s.rate, 3, upto), p95 = last(s.p95, 1, upto), ready = last(s.ready, 1, upto + 1),
        desired = last(s.desired, 1, upto + 1), infl = last(s.inflight, 1, upto);
      now = [rate.length ? num(rate.reduce((a, b) => a + b, 0) / rate.length, 1) : "–", p95.length ? num(p95[0]) : "–",
        ready.length ? `${ready[0]}/${desired[0] ?? "–"}` : "–", infl.length ? num(infl[0], 2) : "–"];
    } else {
      const rps = r.throughput_rps !== undefined ? r.throughput_rps : null;
      now = [rps === null ? "–" : num(rps, 1)];
    }
    return el("tr", {"data-service": r.service},
      el("td", {text: r.service}), el("td", {class: "muted", text: policies[r.service] || ""}),
      ...now.map((t) => el("td", {class: "num", text: t})),
      ...COLUMNS.map(([k, , f]) => el("td", {class: "num", "data-field": k, "data-value": r[k] === undefined ? null : JSON.stringify(r[k]), text: f(r[k])})));
  });
  replace($("summary"), head, ...body);
}

// -- charts ---------------------------------------------------------------------------------
function marksPlugin(getMarks) {
  return {hooks: {draw: [(u) => {
    const ctx = u.ctx, {top, height, left, width} = u.bbox;
    ctx.save();
    ctx.font = `${10 * devicePixelRatio}px system-ui, sans-serif`;
    let lastX = -1e9;
    for (const m of getMarks()) {
      const x = u.valToPos(m.t, "x", true);
      if (x < left || x > left + width) continue;
      ctx.strokeStyle = m.color; ctx.globalAlpha = m.strong ? 0.9 : 0.35;
      ctx.setLineDash(m.strong ? [] : [3 * devicePixelRatio, 3 * devicePixelRatio]);
      ctx.lineWidth = (m.strong ? 1.5 : 1) * devicePixelRatio;
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + height); ctx.stroke();
      if (m.label && x - lastX > 40 * devicePixelRatio) {
        ctx.globalAlpha = 0.95; ctx.fillStyle = m.color; ctx.fillText(m.label, x + 3 * devicePixelRatio, top + 11 * devicePixelRatio);
        lastX = x;
      }
    }
    ctx.restore();
  }]}};
}
function decisionMarks(cell, service) {
  return (cell.decisions || []).filter((d) => !service || d.service === service).map((d) => {
    const a = d.applied || 0;
    const label = `${a > 0 ? "+" : ""}${a ? a : "hold"} ${service ? "" : d.service + " "}${d.policy || ""}`.trim();
    return {t: d.t, color: a > 0 ? "#1f9d55" : a < 0 ? "#c77c02" : "#8a93a3", strong: a !== 0, label: a !== 0 ? label : null};
  });
}
function chartBox(id, title) {
  const box = el("div", {class: "chart", "data-chart": id, "data-points": 0});
  box.append(el("div", {class: "ctitle", text: title}));
  return box;
}
function makeChart(box, cell, series, axes, marks) {
  const width = Math.max(260, box.clientWidth || box.parentElement.clientWidth / 3 - 12);
  const span = (cell.warmup_s || 0) + (cell.duration_s || 0);
  const opts = {
    width, height: 190, padding: [8, 8, 0, 0], cursor: {drag: {x: true, y: false}},
    scales: {x: {time: false, range: [cell.t0, cell.t0 + Math.max(span, 1)]}, ...axes.scales},
    axes: [{label: "scenario s", labelSize: 18, size: 34, grid: {stroke: "#eef0f4"}}, ...axes.list],
    series: [{label: "t", value: (u, v) => v === null ? "–" : num(v, 0)}, ...series],
    legend: {live: true}, plugins: [marksPlugin(marks)],
  };
  const data = [[], ...series.map(() => [])];
  return new uPlot(opts, data, box);
}
function yAxis(scale, label, side = 3) {
  return {scale, label, labelSize: 18, size: 46, side, grid: {show: side === 3, stroke: "#eef0f4"}};
}
function buildCharts(cell) {
  for (const c of Object.values(S.charts)) c.u.destroy();
  S.charts = {};
  const host = $("services");
  replace(host);
  const stepped = uPlot.paths.stepped ? uPlot.paths.stepped({align: 1}) : undefined;
  for (const name of Object.keys(cell.services).sort()) {
    const slo = cell.slo_ms[name];
    const card = el("section", {class: "card", "data-service-card": name});
    card.append(el("div", {class: "card-head"}, el("h2", {text: name}),
      el("span", {class: "tag", text: `SLO ${num(slo)} ms · bins of ${num(cell.width)} scenario s · marks: the scaler's decisions`})));
    const grid = el("div", {class: "charts"});
    card.append(grid);
    host.append(card);
    const boxes = [chartBox(`${name}:rate`, "requests answered per scenario second, errors, SLO violations"),
      chartBox(`${name}:latency`, "latency p50 / p95 / p99 (scenario ms) and the SLO"),
      chartBox(`${name}:replicas`, "replicas ready / desired, requests in flight")];
    boxes.forEach((b) => grid.append(b));
    const marks = () => decisionMarks(currentCell() || cell, name);
    S.charts[`${name}:rate`] = {box: boxes[0], kind: "rate", service: name, u: makeChart(boxes[0], cell, [
      {label: "req/s", stroke: COLORS[0], width: 2, fill: "rgba(47,111,223,.08)"},
      {label: "errors/s", stroke: COLORS[4], width: 1.5},
      {label: "SLO viol. %", stroke: COLORS[3], width: 1.5, dash: [4, 3], scale: "%"},
    ], {scales: {"%": {range: [0, 100]}}, list: [yAxis("y", "req/s"), yAxis("%", "%", 1)]}, marks)};
    S.charts[`${name}:latency`] = {box: boxes[1], kind: "latency", service: name, slo, u: makeChart(boxes[1], cell, [
      {label: "p50", stroke: COLORS[0], width: 1.5},
      {label: "p95", stroke: COLORS[1], width: 1.5},
      {label: "p99", stroke: COLORS[4], width: 2},
      {label: "SLO", stroke: "#8a93a3", width: 1, dash: [6, 4], points: {show: false}},
    ], {scales: {}, list: [yAxis("y", "ms")]}, marks)};
    S.charts[`${name}:replicas`] = {box: boxes[2], kind: "replicas", service: name, u: makeChart(boxes[2], cell, [
      {label: "ready", stroke: COLORS[2], width: 2, paths: stepped},
      {label: "desired", stroke: "#5a6475", width: 1.5, dash: [5, 4], paths: stepped},
      {label: "in flight", stroke: COLORS[1], width: 1.5, scale: "n"},
    ], {scales: {y: {range: (u, lo, hi) => [0, Math.max(2, Math.ceil(hi) + 1)]}},
      list: [yAxis("y", "replicas"), yAxis("n", "in flight", 1)]}, marks)};
  }
  const net = $("net-charts");
  replace(net);
  for (const dir of ["uplink", "downlink"]) {
    const box = chartBox(`net:${dir}`, `${dir}: Mbit/s per slice (solid) and UE group (dashed); drops/s (right)`);
    net.append(box);
    const keys = Object.keys(cell.links).filter((k) => k.endsWith(`|${dir}`)).sort(linkOrder);
    const series = [];
    keys.forEach((k, i) => {
      const [kind, who] = k.split("|");
      const name = kind === "slice" ? (who === "-" ? "unsliced" : `slice ${who}`) : `group ${who}`;
      series.push({label: `${name} Mbit/s`, stroke: COLORS[i % COLORS.length], width: 2, dash: kind === "group" ? [5, 3] : undefined});
    });
    keys.forEach((k, i) => {
      const [kind, who] = k.split("|");
      const name = kind === "slice" ? (who === "-" ? "unsliced" : `slice ${who}`) : `group ${who}`;
      series.push({label: `${name} drops/s`, stroke: COLORS[i % COLORS.length], width: 1, dash: [2, 3], scale: "d", show: true});
    });
    S.charts[`net:${dir}`] = {box, kind: "net", dir, keys, u: makeChart(box, {...cell, width: cell.net_width}, series,
      {scales: {d: {range: (u, lo, hi) => [0, Math.max(1, hi)]}}, list: [yAxis("y", "Mbit/s"), yAxis("d", "drops/s", 1)]},
      () => [...decisionMarks(currentCell() || cell, null).filter((m) => m.strong),
        ...((currentCell() || cell).conditions || []).map((c) => ({t: c.t, color: "#0d9bb5", strong: true, label: "conditions"}))])};
  }
}
function linkOrder(a, b) {
  const rank = (k) => (k.startsWith("slice|-") ? 1 : k.startsWith("slice") ? 0 : 2);
  return rank(a) - rank(b) || a.localeCompare(b);
}
function xs(t0, width, n) { const out = new Array(n); for (let i = 0; i < n; i++) out[i] = t0 + (i + 0.5) * width; return out; }
function countPoints(data) { let n = 0; for (let i = 1; i < data.length; i++) for (const v of data[i]) if (v !== null && v !== undefined) n++; return n; }
function updateCharts(cell) {
  for (const [id, c] of Object.entries(S.charts)) {
    let data;
    if (c.kind === "net") {
      const n = Math.max(0, ...c.keys.map((k) => (cell.links[k] ? cell.links[k].mbit.length : 0)));
      const x = xs(cell.t0, cell.net_width, n);
      data = [x, ...c.keys.map((k) => pad(cell.links[k].mbit, n)), ...c.keys.map((k) => pad(cell.links[k].drops, n))];
    } else {
      const s = cell.services[c.service] || {};
      let n = (s.rate || []).length;
      if (cell.status !== "running") {
        // an ended cell: its window (the answers after it are the clients' last, in no full bin)
        n = Math.min(n, Math.ceil(((cell.duration_s || 0) - cell.t0) / cell.width));
      } else if (cell.now_t !== null) {
        // a running cell's last bins are still filling (a client flushes its records every half
        // wall second): drawn once whole
        n = Math.max(0, Math.min(n, Math.floor((cell.now_t - FLUSH_WALL_S * cell.time_scale - cell.t0) / cell.width)));
      }
      const x = xs(cell.t0, cell.width, n);
      if (c.kind === "rate") data = [x, pad(s.rate, n), pad(s.errors, n), pad(s.viol, n)];
      else if (c.kind === "latency") data = [x, pad(s.p50, n), pad(s.p95, n), pad(s.p99, n), x.map(() => c.slo)];
      else data = [x, pad(s.ready, n), pad(s.desired, n), pad(s.inflight, n)];
    }
    c.u.setData(data, true);
    c.box.setAttribute("data-points", String(c.kind === "latency" ? countPoints(data.slice(0, 4)) : countPoints(data)));
    void id;
  }
}
function pad(arr, n) { const a = (arr || []).slice(0, n); while (a.length < n) a.push(null); return a; }

// -- slices, decisions, the end ------------------------------------------------------------------
function renderNet(run, cell) {
  const plan = run.plan.find((p) => p.key === cell.key);
  if (!changed("net", cell.key, cell.conditions.length, !!run.head.record, cell.summary.source, cell.status, plan ? 1 : 0)) return;
  const cond = plan ? plan.conditions : null;
  const rows = [el("tr", {}, el("th", {text: "link conditions in force"}), el("th", {class: "num", text: "uplink"}), el("th", {class: "num", text: "downlink"}), el("th", {text: ""}))];
  if (cond) {
    const l = cond.link;
    rows.push(el("tr", {}, el("td", {text: "link"}), el("td", {class: "num", text: `${num(l.uplink_mbit)} Mbit/s`}),
      el("td", {class: "num", text: `${num(l.downlink_mbit)} Mbit/s`}),
      el("td", {class: "muted", text: `slicing ${l.slicing ? "on" : "off"}, delay ${num(l.delay_ms)} ms, uplink loss ${pct(l.uplink_loss, 1)}` +
        (l.flow_queues ? `, ${l.flow_queues} flow queues` : "")})));
    for (const s of cond.slices) rows.push(el("tr", {}, el("td", {text: `slice ${s.name} (sd ${s.sd})`}),
      el("td", {class: "num", text: `≥ ${num(s.guaranteed_mbit)}`}), el("td", {class: "num", text: s.ceiling_mbit ? `≤ ${num(s.ceiling_mbit)}` : "≤ link"}),
      el("td", {class: "muted", text: s.subnet})));
    for (const g of cond.ue_groups) rows.push(el("tr", {class: "sub"}, el("td", {text: `UE group ${g.name} → ${g.slice}`}),
      el("td", {class: "num", text: `AMBR ${num(g.ambr_uplink_mbit)}`}), el("td", {class: "num", text: `AMBR ${num(g.ambr_downlink_mbit)}`}),
      el("td", {text: `${g.count} UE${g.count > 1 ? "s" : ""}, 5QI ${g.five_qi}`})));
    for (const t of l.traces) rows.push(el("tr", {class: "sub"}, el("td", {text: `trace for ${t.target}`}), el("td", {}), el("td", {}), el("td", {text: t.trace})));
  }
  const steps = cell.conditions || [];
  if (steps.length) {
    const s = steps[steps.length - 1];
    rows.push(el("tr", {}, el("td", {text: `conditions step at ${num(s.time_s)} s (trace time)`}), el("td", {}), el("td", {}),
      el("td", {text: Object.entries(s.values).map(([k, v]) => `${k}: ${Object.entries(v).filter(([, x]) => x !== null).map(([a, b]) => `${a} ${b}`).join(", ")}`).join("; ")})));
  }
  replace($("conditions"), ...rows);
  const gp = (run.head.record ? rowsOf(cell).rows : cell.summary.rows).filter((r) => r.slice && r.iperf_goodput_mbit !== undefined);
  replace($("goodput"), el("tr", {}, el("th", {text: "iperf3 cross-traffic"}), el("th", {class: "num", text: "goodput Mbit/s"})),
    ...(gp.length ? gp.map((r) => el("tr", {"data-slice": r.slice}, el("td", {text: `slice ${r.slice} (${r.direction})`}),
      el("td", {class: "num", "data-field": "iperf_goodput_mbit", "data-value": JSON.stringify(r.iperf_goodput_mbit), text: num(r.iperf_goodput_mbit, 1)})))
      : [el("tr", {}, el("td", {class: "muted", text: cell.status === "running" ? "iperf3 reports its goodput when the cell ends"
        : "no iperf3 cross-traffic in this cell"}), el("td", {}))]));
}
function renderDecisions(cell) {
  const ds = cell.decisions || [];
  if (!changed("decisions", cell.key, ds.length)) return;
  $("decisions-note").textContent = `${ds.length} decision${ds.length === 1 ? "" : "s"} in this cell; the latest first`;
  const head = el("tr", {}, ...["t (scenario s)", "service", "policy", "proposed", "applied", "replicas", "reward"].map((t, i) =>
    el("th", {class: [0, 3, 4, 5, 6].includes(i) ? "num" : "", text: t})));
  const body = ds.slice(-30).reverse().map((d) => {
    const a = d.applied || 0;
    return el("tr", {"data-decision": d.service}, el("td", {class: "num", text: num(d.t, 1) + (d.warmup ? " (warm-up)" : "")}), el("td", {text: d.service}),
      el("td", {text: d.policy || ""}), el("td", {class: "num", text: d.proposed > 0 ? `+${d.proposed}` : d.proposed}),
      el("td", {class: `num ${a > 0 ? "act-up" : a < 0 ? "act-down" : "act-hold"}`, text: a > 0 ? `+${a}` : a ? a : "hold"}),
      el("td", {class: "num", text: `${d.before} → ${d.after}`}), el("td", {class: "num", text: num(d.reward, 3)}));
  });
  replace($("decisions"), head, ...body);
}
function renderEnd(run, cell) {
  const rec = run.head.record;
  if (!changed("end", cell.key, !!rec, cell.problems.length, run.about.commit)) return;
  $("expect-card").hidden = !rec || !rec.expect.length;
  if (rec) replace($("expect"), el("tr", {}, el("th", {text: "expect"}), el("th", {text: "result"}), el("th", {text: "value"})),
    ...rec.expect.map((o) => el("tr", {}, el("td", {text: o.text}), el("td", {class: `verdict ${o.verdict}`, text: o.verdict}), el("td", {text: o.value}))));
  const problems = [...(cell.problems || []), ...(rec ? rec.problems.filter((p) => !(cell.problems || []).includes(p)) : [])];
  $("problems-card").hidden = !problems.length;
  replace($("problems"), ...problems.map((p) => el("li", {text: p})));
  const a = run.about;
  $("about").textContent = `${a.description || ""} · seed ${a.seed} · commit ${a.commit || "–"} · started ${a.created || ""}`;
}

$("run-select").onchange = (e) => { S.wanted = e.target.value; S.run = null; S.layout = ""; S.ended = false; connect(); };
window.addEventListener("resize", () => {
  for (const c of Object.values(S.charts)) c.u.setSize({width: Math.max(260, c.box.clientWidth), height: 190});
});
connect();
