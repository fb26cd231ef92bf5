// ttftlens requests page. Vanilla JS, no dependencies: polls
// /debug/requests, draws the stage breakdown, the end reasons, the request
// tables and the selected request's waterfall (from /debug/requests/{id}).
"use strict";

// Errors are counted on <body data-errors> so a headless test can see them.
(function hookErrors() {
  const pre = () => document.getElementById("js-errors");
  function record(msg) {
    const b = document.body;
    if (b) {
      b.dataset.errors = String(Number(b.dataset.errors || "0") + 1);
      const p = pre();
      if (p) { p.textContent += msg + "\n"; }
    }
  }
  window.addEventListener("error", (e) => record("error: " + (e.message || e.type)));
  window.addEventListener("unhandledrejection", (e) => record("unhandled rejection: " + (e.reason && e.reason.message || e.reason)));
  const orig = console.error.bind(console);
  console.error = (...args) => { record("console.error: " + args.join(" ")); orig(...args); };
})();

const POLL_MS = 1500;
const SVGNS = "http://www.w3.org/2000/svg";

// Okabe–Ito colours (distinguishable with common colour-vision
// deficiencies); unattributed is grey and hatched, as "unknown". A part the
// proxy inferred rather than read from the engine keeps its stage's colour,
// hatched white over it, and says "(inferred)".
const STAGES = ["gateway", "route", "queue", "preparation", "prefill", "first_decode", "unattributed", "transport"];
const COLORS = {
  gateway: "#56B4E9", route: "#0072B2", queue: "#E69F00", preparation: "#F0E442",
  prefill: "#D55E00", first_decode: "#CC79A7", unattributed: "url(#hatch)", transport: "#009E73",
  reasoning: "#88CCEE", decode: "#332288", finish: "#BBBBBB", upstream: "url(#hatch-red)", load: "#882255",
};
const SOLID = Object.assign({}, COLORS, { unattributed: "#A0A0A0", upstream: "#E8A09A" });
const LABELS = { first_decode: "first decode" };
const label = (n) => LABELS[n] || n;

const state = { selected: null, paused: false, list: null, detail: null, lastOK: 0 };

function el(tag, attrs, ...kids) {
  const ns = ["svg", "rect", "text", "line", "g", "defs", "pattern", "path", "title"].includes(tag);
  const e = ns ? document.createElementNS(SVGNS, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.setAttribute("class", v);
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k) e.append(k);
  return e;
}

function fmtMs(v) {
  if (v === undefined || v === null) return "–";
  if (v >= 10000) return (v / 1000).toFixed(1) + " s";
  if (v >= 100) return v.toFixed(0) + " ms";
  if (v >= 10) return v.toFixed(1) + " ms";
  return v.toFixed(2) + " ms";
}

// fmtTick labels an axis tick: as few decimals as the step needs.
function fmtTick(v, step) {
  if (v === 0) return "0";
  if (step >= 1000) return (v / 1000).toFixed(step >= 10000 || step % 1000 === 0 ? 0 : 1) + " s";
  const d = step >= 1 ? 0 : Math.min(3, Math.ceil(-Math.log10(step)));
  return v.toFixed(d) + " ms";
}

function reasonClass(r) {
  if (r === "stop" || r === "length") return "good";
  if (r === "client_cancel") return "client";
  if (r === "policy_block" || r === "invalid_request") return "neutral";
  return "bad";
}

function patterns() {
  return el("defs", null,
    el("pattern", { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      el("rect", { width: 6, height: 6, fill: "#D0D0D0" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#808080", "stroke-width": 2 })),
    el("pattern", { id: "hatch-red", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      el("rect", { width: 6, height: 6, fill: "#F6D5D2" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#B3261E", "stroke-width": 2 })),
    el("pattern", { id: "hatch-over", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#FFFFFF", "stroke-width": 2.5 })));
}

// niceStep returns a tick spacing giving about n ticks over max.
function niceStep(max, n) {
  const raw = max / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * p) return m * p;
  return 10 * p;
}

function axis(svg, x0, width, max, y, height) {
  if (!(max > 0)) return;
  const g = el("g", { class: "axis" });
  const step = niceStep(max, Math.max(2, Math.floor(width / 90)));
  for (let t = 0; t <= max * 1.0001; t += step) {
    const x = x0 + (t / max) * width;
    g.append(el("line", { x1: x, x2: x, y1: y, y2: y + height }));
    g.append(el("text", { x: x + 2, y: y + height + 12, text: fmtTick(t, step) }));
  }
  svg.append(g);
}

function drawBreakdown(agg) {
  const svg = document.getElementById("breakdown");
  const width = Math.max(svg.parentElement.clientWidth, 320);
  const rows = ["p50", "p95"];
  const labelW = 40, rightW = 150, barH = 26, gap = 10, top = 4;
  const barW = width - labelW - rightW;
  const totals = rows.map((r) => STAGES.reduce((s, k) => s + ((agg.stages_ms[r] || {})[k] || 0), 0));
  const max = Math.max(...totals, (agg.ttft_ms || {}).p95 || 0, 0.001);
  const height = top + rows.length * (barH + gap) + 18;
  svg.replaceChildren(patterns());
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  axis(svg, labelW, barW, max, top, rows.length * (barH + gap) - gap);
  rows.forEach((r, i) => {
    const y = top + i * (barH + gap);
    svg.append(el("text", { x: 0, y: y + barH / 2 + 4, text: r }));
    let x = labelW;
    for (const k of STAGES) {
      const v = (agg.stages_ms[r] || {})[k] || 0;
      const w = (v / max) * barW;
      const rect = el("rect", { class: "bar", x, y, width: Math.max(w, 0), height: barH, fill: COLORS[k], "data-stage": k, "data-ms": v },
        el("title", { text: `${label(k)} ${r}: ${fmtMs(v)}` }));
      svg.append(rect);
      if (w > 44) svg.append(el("text", { x: x + 4, y: y + barH / 2 + 4, text: fmtMs(v) }));
      x += w;
    }
    const ttft = (agg.ttft_ms || {})[r];
    svg.append(el("text", { x: labelW + barW + 6, y: y + barH / 2 + 4, text: `TTFT ${r} ${fmtMs(ttft)}` }));
  });
  const legend = document.getElementById("legend");
  legend.replaceChildren(...STAGES.map((k) => el("span", null,
    el("i", { class: "swatch", style: `background:${k === "unattributed" ? "repeating-linear-gradient(45deg,#D0D0D0 0 3px,#808080 3px 5px)" : SOLID[k]}` }),
    document.createTextNode(`${label(k)} ${fmtMs((agg.stages_ms.p50 || {})[k])} / ${fmtMs((agg.stages_ms.p95 || {})[k])}`))));
  document.getElementById("window-note").textContent =
    `(last ${agg.window} requests, ${agg.with_first_token} with a first token; legend: p50 / p95)`;
}

function drawReasons(agg) {
  const tbody = document.querySelector("#reasons tbody");
  const names = Object.keys(agg.end_reasons_total || {}).sort((a, b) => (agg.end_reasons_total[b] - agg.end_reasons_total[a]) || a.localeCompare(b));
  tbody.replaceChildren(...names.map((n) => el("tr", { "data-reason": n },
    el("td", null, el("span", { class: "reason " + reasonClass(n), text: n })),
    el("td", { class: "num" + (agg.end_reasons_total[n] ? "" : " zero"), text: String((agg.end_reasons || {})[n] || 0) }),
    el("td", { class: "num" + (agg.end_reasons_total[n] ? "" : " zero"), text: String(agg.end_reasons_total[n] || 0) }))));
}

function miniBar(row, scale) {
  const d = el("div", { class: "mini", title: row.stages_ms ? STAGES.map((k) => `${label(k)} ${fmtMs(row.stages_ms[k])}`).join("\n") : "no first token" });
  if (!row.stages_ms) return d;
  for (const k of STAGES) {
    const w = (row.stages_ms[k] / scale) * 100;
    if (w > 0) d.append(el("i", { style: `width:${w}%;background:${SOLID[k]}` }));
  }
  return d;
}

function drawTable(id, rows) {
  const table = document.getElementById(id);
  if (!table.tHead.rows.length) {
    table.tHead.append(el("tr", null, ...["time", "request id", "model", "status", "end", "TTFT", "stages", "e2e", "tokens"].map((h, i) =>
      el("th", { scope: "col", class: [5, 7, 8].includes(i) ? "num" : null, text: h }))));
  }
  const scale = Math.max(...rows.map((r) => r.ttft_ms || 0), 0.001);
  table.tBodies[0].replaceChildren(...rows.map((r) => {
    const tr = el("tr", { "data-id": r.request_id, class: r.request_id === state.selected ? "selected" : null, tabindex: 0 },
      el("td", { text: new Date(r.time).toLocaleTimeString() }),
      el("td", { class: "id", title: r.request_id, text: r.request_id }),
      el("td", { text: r.model || "–" }),
      el("td", { class: "num", text: String(r.status) }),
      el("td", null, el("span", { class: "reason " + reasonClass(r.end_reason), title: r.end_detail + (r.phase ? " (" + r.phase + ")" : ""), text: r.end_reason })),
      el("td", { class: "num", text: fmtMs(r.ttft_ms) }),
      el("td", null, miniBar(r, scale)),
      el("td", { class: "num", text: fmtMs(r.e2e_ms) }),
      el("td", { class: "num", text: String(r.tokens_out) }));
    const pick = () => select(r.request_id);
    tr.addEventListener("click", pick);
    tr.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } });
    return tr;
  }));
}

// A model that reasoned first answers after its first token: the page
// marks both moments.
function answerAfterFirstToken(req) {
  return req.first_answer_ms !== undefined && req.ttft_ms !== undefined && req.first_answer_ms > req.ttft_ms;
}

// offText says how far the stage furthest from its prediction was off
// (prediction_off.ms is predicted minus measured).
function offText(off) {
  if (off.ms === 0) return `${label(off.stage)} as predicted`;
  return `${label(off.stage)} ${fmtMs(Math.abs(off.ms))} ${off.ms < 0 ? "longer" : "shorter"} than predicted`;
}

// cachedText puts the prompt tokens the engine reported cached beside the
// ones the prefix index expected, as far as either is known.
function cachedText(req) {
  const got = req.cached_tokens !== undefined ? `${req.cached_tokens} reported` : "not reported";
  return req.cached_tokens_expected !== undefined ? `${got} / ${req.cached_tokens_expected} expected` : got;
}

// drawWaterfall draws the measured bars, one a row, and under them, for a
// request a least_ttft pool routed with a prediction, the predicted stages
// (kind "predicted"): dashed outlines in the stage's colour, from where
// route ended, so each sits under its measured bar's start and the last
// ends at the predicted TTFT, marked across the whole chart.
function drawWaterfall(req) {
  const svg = document.getElementById("waterfall");
  const segs = req.waterfall || [];
  const measured = segs.filter((s) => s.kind !== "predicted");
  const predicted = segs.filter((s) => s.kind === "predicted");
  const predictedTTFT = predicted.length ? predicted[predicted.length - 1].end_ms : undefined;
  const off = req.prediction_off;
  const width = Math.max(svg.parentElement.clientWidth, 480);
  const answerLater = answerAfterFirstToken(req);
  const labelW = predicted.length ? 150 : 110, rightW = predicted.length ? 170 : 90, rowH = 22, sepH = predicted.length ? 10 : 0;
  const top = 22 + (answerLater ? 14 : 0) + (predicted.length ? 14 : 0);
  const barW = width - labelW - rightW;
  const end = Math.max(req.e2e_ms || 0, ...segs.map((s) => s.end_ms), 0.001);
  const bottom = top + segs.length * rowH + sepH;
  svg.replaceChildren(patterns());
  svg.setAttribute("width", width);
  svg.setAttribute("height", bottom + 22);
  svg.dataset.requestId = req.request_id;
  axis(svg, labelW, barW, end, top - 2, bottom - top);
  const xOf = (ms) => labelW + (ms / end) * barW;
  measured.forEach((s, i) => {
    const y = top + i * rowH;
    const x = xOf(s.start_ms);
    const w = (s.dur_ms / end) * barW;
    const name = label(s.name) + (s.kind === "open" ? " (ended)" : "") + (s.inferred ? " (inferred)" : "");
    svg.append(el("text", { x: 0, y: y + 15, text: name }));
    svg.append(el("rect", {
      class: "bar" + (w < 1 ? " zero" : "") + (s.inferred ? " inferred" : ""), x, y: y + 3, width: Math.max(w, 1), height: rowH - 6,
      fill: COLORS[s.name] || SOLID.finish, "data-stage": s.name, "data-kind": s.kind, "data-ms": s.dur_ms, "data-width": w.toFixed(2),
      "data-inferred": s.inferred ? "true" : null,
    }, el("title", { text: `${name}: ${fmtMs(s.dur_ms)} (${fmtMs(s.start_ms)} → ${fmtMs(s.end_ms)})` })));
    if (s.inferred) {
      svg.append(el("rect", { class: "hatch", x, y: y + 3, width: Math.max(w, 1), height: rowH - 6, fill: "url(#hatch-over)", "pointer-events": "none" }));
    }
    svg.append(el("text", { x: x + Math.max(w, 1) + 4, y: y + 15, class: "ms", text: fmtMs(s.dur_ms) }));
  });
  if (predicted.length) {
    const y = top + measured.length * rowH + sepH / 2;
    svg.append(el("line", { class: "sep", x1: 0, x2: labelW + barW, y1: y, y2: y }));
  }
  predicted.forEach((s, i) => {
    const y = top + (measured.length + i) * rowH + sepH;
    const x = xOf(s.start_ms);
    const w = (s.dur_ms / end) * barW;
    const isOff = off && off.stage === s.name;
    const was = (req.stages_ms || {})[s.name];
    const name = "predicted " + label(s.name);
    const text = fmtMs(s.dur_ms) + (was !== undefined ? ` vs ${fmtMs(was)}` : "") + (isOff ? " · furthest off" : "");
    svg.append(el("text", { x: 0, y: y + 15, class: "predicted" + (isOff ? " off" : ""), text: name }));
    svg.append(el("rect", {
      class: "bar predicted" + (w < 1 ? " zero" : ""), x, y: y + 4, width: Math.max(w, 1), height: rowH - 8,
      fill: SOLID[s.name], style: `stroke:${SOLID[s.name]}`,
      "data-stage": s.name, "data-kind": s.kind, "data-ms": s.dur_ms, "data-width": w.toFixed(2), "data-off": isOff ? "true" : null,
    }, el("title", { text: `${name}: ${fmtMs(s.dur_ms)}${was !== undefined ? `, measured ${fmtMs(was)}` : ""} (${fmtMs(s.start_ms)} → ${fmtMs(s.end_ms)})` })));
    svg.append(el("text", { x: x + Math.max(w, 1) + 4, y: y + 15, class: "ms predicted" + (isOff ? " off" : ""), text }));
  });
  const marker = (name, text, at, textY, cls) => {
    const x = xOf(at);
    svg.append(el("line", { class: "marker" + (cls ? " " + cls : ""), "data-mark": name, "data-ms": at, x1: x, x2: x, y1: textY - 8, y2: bottom }));
    const right = x > labelW + barW * 0.7;
    svg.append(el("text", { x: right ? x - 4 : x + 4, y: textY, "text-anchor": right ? "end" : "start", class: cls, text: text + " " + fmtMs(at) }));
  };
  if (req.ttft_ms !== undefined) marker("first_token", "first token", req.ttft_ms, top - 8);
  if (answerLater) marker("first_answer", "first answer", req.first_answer_ms, top - 22);
  if (predictedTTFT !== undefined) marker("predicted_ttft", "predicted TTFT", predictedTTFT, top - (answerLater ? 36 : 22), "predicted");
  const meta = document.getElementById("detail-meta");
  const item = (k, v, attrs) => el("span", attrs, document.createTextNode(k + " "), el("b", { text: v }));
  meta.replaceChildren(...[
    el("span", null, document.createTextNode("request "), el("code", { id: "detail-id", text: req.request_id })),
    item("model", req.model || "–"), item("status", String(req.status)),
    el("span", null, el("span", { class: "reason " + reasonClass(req.end_reason), text: `${req.end_reason} · ${req.end_detail}${req.phase ? " · " + req.phase : ""}` })),
    item("TTFT", fmtMs(req.ttft_ms)),
    answerLater ? item("first answer", fmtMs(req.first_answer_ms)) : null,
    predictedTTFT !== undefined ? item("predicted TTFT", fmtMs(predictedTTFT), { "data-meta": "predicted_ttft" }) : null,
    off ? item("furthest off", offText(off), { "data-meta": "prediction_off" }) : null,
    item("e2e", fmtMs(req.e2e_ms)), item("tokens", String(req.tokens_out)),
    req.reasoning_tokens ? item("reasoning tokens", String(req.reasoning_tokens)) : null,
    req.itl_ms ? item("ITL p50/p99", `${fmtMs(req.itl_ms.p50)} / ${fmtMs(req.itl_ms.p99)}`) : null,
    req.engine_report ? item("engine report", req.engine_report) : item("engine report", "none (upstream unsplit)"),
    req.engine_report_inconsistent ? el("b", { class: "error", text: "engine report inconsistent (clamped)" }) : null,
    req.policy ? item("policy", req.policy, { "data-meta": "policy" }) : null,
    req.prefix_affinity ? item("routed by", "prefix affinity", { "data-meta": "prefix_affinity" }) : null,
    req.probe ? item("routed by", "probe (measured again)", { "data-meta": "probe" }) : null,
    req.cached_tokens !== undefined || req.cached_tokens_expected !== undefined ? item("cached tokens", cachedText(req), { "data-meta": "cached_tokens" }) : null,
    req.ttft_slo_ms !== undefined ? item("TTFT SLO", fmtMs(req.ttft_slo_ms) + (req.ttft_slo_fallback ? " (fallback pool)" : ""), { "data-meta": "ttft_slo" }) : null,
    el("span", null, document.createTextNode("trace "), el("code", { text: req.trace_id })),
  ].filter(Boolean));
  const errP = document.getElementById("detail-error");
  errP.hidden = !req.error;
  errP.textContent = req.error || "";
  document.getElementById("detail-note").textContent = "on the request's own clock, from receipt" +
    (predicted.length ? "; dashed: the stages as predicted when it was routed" : "");
  document.body.dataset.waterfall = req.request_id;
}

async function getJSON(url) {
  const res = await fetch(url, { cache: "no-store" });
  if (!res.ok) {
    const e = new Error(`${url}: ${res.status}`);
    e.status = res.status;
    throw e;
  }
  return res.json();
}

async function loadDetail(id) {
  try {
    const req = await getJSON("/debug/requests/" + encodeURIComponent(id));
    if (id !== state.selected) return;
    state.detail = req;
    drawWaterfall(req);
  } catch (e) {
    if (e.status === 404) {
      document.getElementById("detail-note").textContent = "(no longer kept: showing the last copy)";
      return;
    }
    throw e;
  }
}

function select(id) {
  state.selected = id;
  if (location.hash !== "#" + encodeURIComponent(id)) history.replaceState(null, "", "#" + encodeURIComponent(id));
  for (const tr of document.querySelectorAll("table.requests tbody tr")) tr.classList.toggle("selected", tr.dataset.id === id);
  return loadDetail(id);
}

function setStatus(ok, text) {
  const s = document.getElementById("status");
  s.replaceChildren(el("span", { class: "dot" + (ok ? "" : " stale") }), document.createTextNode(text));
}

async function poll() {
  if (!state.paused && !document.hidden) {
    try {
      const list = await getJSON("/debug/requests?limit=50");
      state.list = list;
      state.lastOK = Date.now();
      drawBreakdown(list.aggregates);
      drawReasons(list.aggregates);
      drawTable("recent", list.recent);
      drawTable("slowest", list.slowest);
      if (!state.selected && list.recent.length) {
        await select(list.recent[0].request_id);
      }
      setStatus(true, `live · ${list.total} requests since start · ${new Date().toLocaleTimeString()}`);
      document.body.dataset.ready = "1";
    } catch (e) {
      setStatus(false, "cannot reach /debug/requests: " + e.message);
    }
  }
  setTimeout(poll, POLL_MS);
}

function init() {
  const pause = document.getElementById("pause");
  pause.addEventListener("click", () => {
    state.paused = !state.paused;
    pause.setAttribute("aria-pressed", String(state.paused));
    pause.textContent = state.paused ? "Resume" : "Pause";
  });
  if (location.hash.length > 1) {
    state.selected = decodeURIComponent(location.hash.slice(1));
    loadDetail(state.selected).catch((e) => console.error(e.message));
  }
  window.addEventListener("resize", () => {
    if (state.list) drawBreakdown(state.list.aggregates);
    if (state.detail) drawWaterfall(state.detail);
  });
  poll();
}

init();
