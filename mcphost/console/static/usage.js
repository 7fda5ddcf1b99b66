// Usage: GET /v1/usage totalled by day, model, agent and actor (four client calls), as numbers in tables
// and the days as a bar chart (inline SVG, no chart library; days without calls drawn as empty bars).
// From/to are UTC days, both included, kept in the address with the chart's metric.
import { client, count, el, initPage, params, showError, usd } from "/console/api.js";

const form = document.getElementById("filters");
const errors = document.getElementById("usage-error");
const GROUPS = ["day", "model", "agent", "actor"];
const MAX_DAYS = 366; // the chart's width in days at most (the newest ones)
const LABELLED_DAYS = 10; // up to this many days, each bar is labelled with its day
const SVG = "http://www.w3.org/2000/svg";
const METRICS = {
  cost_usd: { label: "cost (USD)", of: (t) => t.cost_usd, text: (v) => usd(v) },
  tokens: { label: "tokens (input + output + cached)", of: (t) => t.input_tokens + t.output_tokens + t.cached_tokens, text: (v) => count(v) },
  calls: { label: "calls", of: (t) => t.calls, text: (v) => count(v) },
};


function filters() {
  return {
    from: document.getElementById("filter-from").value,
    to: document.getElementById("filter-to").value,
    metric: document.getElementById("filter-metric").value || "cost_usd",
  };
}

/** A date input's day as the API's bounds: from its start; `to` up to the end of its day. */
function bounds(f) {
  const q = {};
  if (f.from) q.from = `${f.from}T00:00:00Z`;
  if (f.to) {
    const next = new Date(`${f.to}T00:00:00Z`);
    next.setUTCDate(next.getUTCDate() + 1);
    q.to = next.toISOString();
  }
  return q;
}

const TITLES = { day: "Day", model: "Model", agent: "Agent", actor: "Actor" };

function table(group, totals) {
  const num = (label, value) => el("td", { class: "num", "data-label": label }, value);
  const rows = totals.map((t) =>
    el("tr", { "data-key": t.key ?? "" }, [
      el("td", { "data-label": TITLES[group] }, t.key === null ? el("span", { class: "muted" }, "(none)") : el("code", {}, t.key)),
      num("Calls", count(t.calls)),
      num("Failed", count(t.failed)),
      num("Input tokens", count(t.input_tokens)),
      num("Output tokens", count(t.output_tokens)),
      num("Cached tokens", count(t.cached_tokens)),
      num("Cost", usd(t.cost_usd)),
    ]));
  if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colspan: 7 }, "No model calls in this period.")));
  const heads = [TITLES[group], "Calls", "Failed", "Input tokens", "Output tokens", "Cached tokens", "Cost"];
  return el("table", { id: `usage-${group}`, class: "cards" }, [
    el("thead", {}, el("tr", {}, heads.map((h, i) => el("th", { class: i ? "num" : null }, h)))),
    el("tbody", {}, rows),
  ]);
}

function svg(tag, attrs = {}, children = []) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  for (const child of children) node.append(child);
  return node;
}

/** Every UTC day from the first to the last of `days` (sorted "YYYY-MM-DD"), the newest MAX_DAYS. */
function daySpan(days) {
  if (!days.length) return [];
  const all = [];
  const end = new Date(`${days.at(-1)}T00:00:00Z`);
  for (const d = new Date(`${days[0]}T00:00:00Z`); d <= end; d.setUTCDate(d.getUTCDate() + 1)) {
    all.push(d.toISOString().slice(0, 10));
  }
  return all.slice(-MAX_DAYS);
}

/** A bar per day of `metric`, scaled to the largest, with the largest value and the days labelled. */
function chart(byDay, metric) {
  const m = METRICS[metric];
  const values = new Map(byDay.filter((t) => t.key !== null).map((t) => [t.key, m.of(t)]));
  const days = daySpan([...values.keys()].sort());
  const caption = el("figcaption", {}, `${m.label} per UTC day`);
  if (!days.length) return [el("p", { class: "muted" }, "No model calls in this period: nothing to chart."), caption];
  const width = 1000, height = 220, left = 70, bottom = 24, top = 12;
  const peak = Math.max(...days.map((d) => values.get(d) ?? 0), 0);
  const step = (width - left) / days.length;
  const bar = Math.max(1, Math.min(step * 0.8, 60));
  const y = (v) => top + (height - top - bottom) * (1 - (peak ? v / peak : 0));
  const bars = days.map((day, i) => {
    const v = values.get(day) ?? 0;
    const x = left + i * step + (step - bar) / 2;
    const h = Math.max(v > 0 ? 1 : 0, height - bottom - y(v));
    return svg("rect", { class: v ? "bar" : "bar empty", x: x.toFixed(2), y: (height - bottom - h).toFixed(2), width: bar.toFixed(2), height: Math.max(h, 1).toFixed(2), "data-day": day, "data-value": v },
      [svg("title", {}, [`${day}: ${m.text(v)}`])]);
  });
  const label = (x, yy, text, anchor = "start") => svg("text", { x, y: yy, "text-anchor": anchor }, [text]);
  const drawing = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${m.label} per day from ${days[0]} to ${days.at(-1)}` }, [
    svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }),
    svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    label(left - 6, top + 10, m.text(peak), "end"),
    label(left - 6, height - bottom, m.text(0), "end"),
    // a few days: each under its bar; more: the first and the last at the ends of the axis
    ...(days.length <= LABELLED_DAYS
      ? days.map((day, i) => label(left + (i + 0.5) * step, height - 6, day, "middle"))
      : [label(left, height - 6, days[0]), label(width, height - 6, days.at(-1), "end")]),
    ...bars,
  ]);
  return [drawing, caption];
}

async function show(event) {
  event?.preventDefault();
  const f = filters();
  const q = new URLSearchParams(Object.entries(f).filter(([, v]) => v));
  history.replaceState(null, "", q.size ? "?" + q : location.pathname);
  try {
    const answers = await Promise.all(GROUPS.map((group_by) => client.usage.totals({ group_by, ...bounds(f) })));
    const by = Object.fromEntries(answers.map((a) => [a.group_by, a.totals]));
    by.day.sort((a, b) => String(a.key).localeCompare(String(b.key)));
    for (const group of GROUPS) document.getElementById(`by-${group}`).replaceChildren(table(group, by[group]));
    document.getElementById("usage-chart").replaceChildren(...chart(by.day, f.metric));
    const sum = (key) => by.day.reduce((n, t) => n + t[key], 0);
    document.getElementById("usage-total").replaceChildren(
      "In all: ", el("strong", { id: "total-calls" }, count(sum("calls"))), " calls (", count(sum("failed")), " failed), ",
      el("strong", {}, count(sum("input_tokens") + sum("output_tokens") + sum("cached_tokens"))), " tokens, ",
      el("strong", { id: "total-cost" }, usd(sum("cost_usd"))), ".");
    errors.replaceChildren();
  } catch (error) {
    showError(errors, error);
  }
}

initPage();
const p = params();
for (const name of ["from", "to", "metric"]) if (p.get(name)) document.getElementById(`filter-${name}`).value = p.get(name);
form.addEventListener("submit", show);
document.getElementById("filter-metric").addEventListener("change", show);
show();
