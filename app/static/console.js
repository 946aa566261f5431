// Prima web console: a query editor, results with ± errors, a GROUP BY bar chart with 95 % error
// bars, and a budget gauge and ledger per table. Plain JS and SVG: nothing to build or download.
"use strict";
const $ = (id) => document.getElementById(id);
const tokenInput = $("token");
tokenInput.value = sessionStorage.getItem("prima-token") || "";
tokenInput.addEventListener("change", () => { sessionStorage.setItem("prima-token", tokenInput.value); loadTables(); });

function headers() {
  const h = { "Content-Type": "application/json" };
  if (tokenInput.value) h.Authorization = "Bearer " + tokenInput.value;
  return h;
}
async function api(path, body) {
  const res = await fetch(path, body === undefined ? { headers: headers() } : { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(typeof data.detail === "string" ? data.detail : `HTTP ${res.status}`);
  return data;
}
// Large values (counts, sums) without decimals — the noise is far bigger than a fraction; JSON keeps them.
const fmt = (v) => v === null || v === undefined ? "null" : typeof v === "number"
  ? v.toLocaleString(undefined, { maximumFractionDigits: Math.abs(v) >= 100 ? 0 : 2 }) : String(v);
function el(tag, attrs = {}, text) {
  const e = document.createElementNS(tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs)) if (k !== "svg") e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

async function run() {
  const status = $("status");
  status.className = ""; status.textContent = "running…";
  const started = performance.now();
  try {
    const body = { sql: $("sql").value };
    if ($("hide-noise").checked) body.noisy = "null";
    if ($("all-groups").checked) body.outside_groups = "all";
    const result = await api("/v1/query", body);
    status.textContent = `${result.rows.length} row(s) in ${(performance.now() - started).toFixed(0)} ms · cube ${result.cube.strategy}, ${result.cube.currency === "rho" ? `ρ=${result.cube.rho}` : `ε=${result.cube.epsilon}`}`;
    $("output").classList.add("has-result");
    renderTable(result); renderChart(result); renderNotes(result.notes || []);
    loadTables();  // the first query of a table builds its cube: show the new spend
  } catch (err) {
    status.className = "error"; status.textContent = err.message; status.title = err.message;
    $("output").classList.remove("has-result");
    $("result").replaceChildren(); $("chart").replaceChildren(); renderNotes([]);
  }
}

function renderTable(result) {
  const keys = new Set(result.group_columns || []);
  const table = el("table"), head = el("tr");
  result.columns.forEach((c) => head.appendChild(el("th", {}, c)));
  table.appendChild(head);
  result.rows.forEach((row, i) => {
    const tr = el("tr");
    row.forEach((v, j) => {
      const noisy = (result.noisy || [])[i]?.[j] === true;  // the interval is wider than ±50 % of the value
      const td = el("td", noisy ? { class: "noisy", title: "noise: the 95 % interval is wider than ±50 % of the value" } : {}, fmt(v));
      const sd = result.stddev[i][j], ci = result.ci95[i][j];
      // An interval that is not value ± a multiple of the sd (a truncated SUM, a clamped value, a
      // condition cutting a bin, an AVG) is shown as it is, not as ± the sd.
      if (ci && v !== null && Math.abs((ci[1] - v) - (v - ci[0])) > 0.01 * (ci[1] - ci[0])) {
        td.appendChild(el("span", { class: "pm" }, ` 95 %: ${fmt(ci[0])} … ${fmt(ci[1])}`));
      } else if (!keys.has(result.columns[j]) && sd !== null) td.appendChild(el("span", { class: "pm" }, ` ± ${fmt(sd)}`));
      tr.appendChild(td);
    });
    table.appendChild(tr);
  });
  $("result").replaceChildren(table);
}

// Axis numbers: compact ("558 M"), ticks on 1-2-5 multiples, zero always drawn and labelled.
const compact = new Intl.NumberFormat(undefined, { notation: "compact", maximumSignificantDigits: 3 });
function niceTicks(lo, hi, count = 5) {
  const span = hi - lo || Math.abs(hi) || 1;
  const raw = span / count, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const ticks = [], top = Math.ceil(hi / step - 1e-9) * step;
  for (let v = Math.floor(lo / step + 1e-9) * step; v <= top + step * 1e-9; v += step) ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return ticks;
}
const shorten = (text, n = 14) => (text.length > n ? text.slice(0, n - 1) + "…" : text);

function renderChart(result) {
  const keys = result.group_columns || [];
  const chart = $("chart"), picker = $("chart-agg");
  const aggs = result.columns.map((c, j) => j).filter((j) => !keys.includes(result.columns[j]));
  if (!keys.length || !aggs.length || result.rows.length > 200) { chart.replaceChildren(); picker.hidden = true; return; }
  const previous = picker.value;
  picker.replaceChildren(...aggs.map((j) => el("option", { value: String(j) }, result.columns[j])));
  picker.hidden = aggs.length < 2;
  if (aggs.map(String).includes(previous)) picker.value = previous;
  picker.onchange = () => drawChart(result, Number(picker.value));
  drawChart(result, Number(picker.value || aggs[0]));
}

function drawChart(result, j) {
  const keys = result.group_columns || [];
  const keyIdx = keys.map((k) => result.columns.indexOf(k));
  const items = result.rows.map((row, i) => ({
    label: keyIdx.map((k) => row[k]).join(" · "), value: row[j] ?? 0, ci: result.ci95[i][j],
    noisy: (result.noisy || [])[i]?.[j] === true,
  }));
  // Drawn at the container's own width, so text keeps its size on a phone.
  const W = Math.max(340, Math.round($("chart").clientWidth || 900)), H = 300, pad = { l: 56, r: 10, t: 28, b: 78 };
  const ticks = niceTicks(Math.min(0, ...items.map((d) => (d.ci ? d.ci[0] : d.value))),
                          Math.max(0, ...items.map((d) => (d.ci ? d.ci[1] : d.value))));
  const lo = ticks[0], hi = ticks[ticks.length - 1];
  const y = (v) => pad.t + (H - pad.t - pad.b) * (1 - (v - lo) / ((hi - lo) || 1));
  const bw = (W - pad.l - pad.r) / items.length;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${result.columns[j]} by ${keys.join(", ")}` });
  for (const v of ticks) {
    svg.appendChild(el("line", { svg: 1, class: v === 0 ? "zero" : "grid", x1: pad.l, x2: W - pad.r, y1: y(v), y2: y(v) }));
    svg.appendChild(el("text", { svg: 1, class: "tick", x: pad.l - 6, y: y(v) + 4, "text-anchor": "end" }, compact.format(v)));
  }
  items.forEach((d, i) => {
    const x = pad.l + i * bw;
    const bar = el("rect", { svg: 1, class: d.noisy ? "bar noisy" : "bar", x: x + bw * 0.12, width: bw * 0.76, y: Math.min(y(d.value), y(0)), height: Math.abs(y(0) - y(d.value)) });
    bar.appendChild(el("title", { svg: 1 }, `${d.label}: ${fmt(d.value)}${d.noisy ? " (noise)" : ""}`));
    svg.appendChild(bar);
    if (d.ci) svg.appendChild(el("line", { svg: 1, class: "err", x1: x + bw / 2, x2: x + bw / 2, y1: y(d.ci[0]), y2: y(d.ci[1]) }));
    if (items.length <= 40) {
      const label = el("text", { svg: 1, class: "xlabel", x: x + bw / 2, y: H - pad.b + 14, "text-anchor": "end", transform: `rotate(-40 ${x + bw / 2} ${H - pad.b + 14})` }, shorten(String(d.label)));
      label.appendChild(el("title", { svg: 1 }, String(d.label)));
      svg.appendChild(label);
    }
  });
  svg.appendChild(el("text", { svg: 1, x: pad.l, y: 14 }, `${result.columns[j]} (bars: 95 % intervals${items.some((d) => d.noisy) ? "; pale: noise" : ""})`));
  $("chart").replaceChildren(svg);
}

// Notes that say an answer may be far off ("warning: …") go above the result, in a box of their own.
function renderNotes(notes) {
  const warning = (n) => n.toLowerCase().startsWith("warning:");
  $("warnings").replaceChildren(...notes.filter(warning).map((n) => el("p", { class: "warning" }, n)));
  $("notes").replaceChildren(...notes.filter((n) => !warning(n)).map((n) => el("li", {}, n)));
}

async function loadTables() {
  const list = $("budget-list");
  try {
    const { tables } = await api("/v1/tables");
    list.replaceChildren(...tables.map(renderBudget));
    fillExamples(tables);
  } catch (err) { list.textContent = err.message; }
}

function renderBudget(t) {
  const b = t.budget, box = el("div", { class: "budget" });
  box.appendChild(el("div", { class: "name" }, t.name));
  const symbol = b.currency === "rho" ? "ρ" : "ε";
  const gauge = el("div", { class: "gauge", title: `${symbol} spent` }), fill = el("div");
  fill.style.width = `${Math.min(100, (100 * b.spent) / (b.total || 1))}%`;
  gauge.appendChild(fill); box.appendChild(gauge);
  const building = t.cube.status === "building" ? ` (${t.cube.phase}, ${Math.round(100 * (t.cube.fraction || 0))} %)` : "";
  const g = t.growth;  // a growing table: its periods, and what its budget is per
  const growth = g ? ` · ${g.measured} of ${g.periods} ${g.grain}s measured${g.next ? `, next ${g.next}` : ""}` +
    (g.runway_periods !== undefined ? `, runway ${g.runway_periods}` : "") : "";
  const per = b.composition ? ` ${b.composition}` : "";
  box.appendChild(el("small", {}, `${symbol} spent ${fmt(b.spent)} of ${fmt(b.total)}${per} · cube ${t.cube.status}${building}${growth}`));
  if (building) setTimeout(loadTables, 500);  // follow a background build until it is done
  const ledger = el("table", { class: "ledger" });
  box.appendChild(ledger);
  api(`/v1/admin/tables/${encodeURIComponent(t.name)}/ledger`).then(({ entries }) => {
    entries.forEach((e) => {
      // "cube measurement (pairwise): SUM(salary)" → "SUM(salary)"; "clipping histogram (support): m" → "histogram of m"
      const [kind, what] = e.purpose.split(/:\s*/, 2);
      const paid = kind.startsWith("clipping histogram") ? `histogram of ${what}` : (what || kind);
      const tr = el("tr", { title: `${e.purpose} · ${e.at}` });
      const cost = e.epsilon === null ? `ρ ${e.rho.toLocaleString(undefined, { maximumSignificantDigits: 3 })}`
        : `ε ${e.epsilon.toLocaleString(undefined, { maximumSignificantDigits: 3 })}`;
      [e.at.slice(0, 10), paid, cost, e.status].forEach((c) => tr.appendChild(el("td", {}, c)));
      ledger.appendChild(tr);
    });
  }).catch(() => ledger.replaceChildren(el("tr", {}, "ledger: admin token needed")));
  return box;
}

// Names that are not plain SQL identifiers (a dash, a space, a leading digit) are quoted.
const ident = (name) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`);

function fillExamples(tables) {
  const select = $("examples");
  select.replaceChildren(el("option", { value: "" }, "Examples…"));
  for (const raw of tables) {
    const t = { ...raw, name: ident(raw.name), dimensions: raw.dimensions.map((d) => ({ ...d, name: ident(d.name) })),
                measures: raw.measures.map((m) => ({ ...m, name: ident(m.name) })) };
    const dims = t.dimensions, m = t.measures[0];
    const agg = m ? `SUM(${m.name}), AVG(${m.name})` : "COUNT(*)";
    const ex = [`SELECT COUNT(*)${m ? `, SUM(${m.name})` : ""} FROM ${t.name}`];
    if (dims[0]) ex.push(`SELECT ${dims[0].name}, COUNT(*) AS n${m ? `, AVG(${m.name})` : ""} FROM ${t.name} GROUP BY ${dims[0].name}`);
    if (dims[1]) ex.push(`SELECT ${dims[1].name}, ${agg} FROM ${t.name} GROUP BY ${dims[1].name} ORDER BY 2 DESC`);
    if (dims[0] && dims[0].type === "int") ex.push(`SELECT ${agg} FROM ${t.name} WHERE ${dims[0].name} BETWEEN ${dims[0].lo} AND ${Math.round((dims[0].lo + dims[0].hi) / 2)}`);
    ex.forEach((q) => select.appendChild(el("option", { value: q }, q)));
  }
  // The page ships a query on the demo table; a server without it gets one on a table it has
  // (or none, and a word on what to do), unless the analyst has typed already.
  if (!sqlTouched && !tables.some((t) => t.name === "people")) {
    const first = select.options[1];
    $("sql").value = first ? first.value : "";
    $("sql").placeholder = first ? "" : "No table is registered yet: an admin registers one (prima register, or POST /v1/admin/tables).";
  }
}

let sqlTouched = false;
$("sql").addEventListener("input", () => { sqlTouched = true; });

$("examples").addEventListener("change", (e) => { if (e.target.value) { $("sql").value = e.target.value; run(); } });
$("run").addEventListener("click", run);
$("sql").addEventListener("keydown", (e) => { if ((e.ctrlKey || e.metaKey) && e.key === "Enter") run(); });
loadTables();
