// Runs: the newest runs, filtered, refreshed every second (a new run or a status change shows without a
// reload). Every filter is GET /v1/runs's: agent, conversation, status, and a time window (a recent
// period, or from/to times entered in the browser's time zone and sent as UTC).
import { badge, client, duration, el, initPage, pager, params, poll, short, showError, time } from "/console/api.js";

const POLL_MS = 1000;
const form = document.getElementById("filters");
const body = document.querySelector("#runs tbody");
const errors = document.getElementById("runs-error");

const WINDOWS = { hour: 3600, day: 86400, week: 7 * 86400 }; // "last …" in seconds

function filters() {
  const data = new FormData(form);
  return {
    agent: data.get("agent") || "",
    conversation: (data.get("conversation") || "").trim(),
    status: data.get("status") || "",
    window: data.get("window") || "",
    from: data.get("from") || "",
    to: data.get("to") || "",
  };
}

/** A datetime-local value (the browser's time zone) as ISO 8601 UTC, which /v1 requires. */
function utc(local) {
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString();
}

function load(f, after) {
  const q = { limit: 100 };
  if (f.agent) q.agent = f.agent;
  if (f.conversation) q.conversation_id = f.conversation;
  if (f.status) q.status = f.status;
  if (f.window in WINDOWS) q.since = String(Math.floor(Date.now() / 1000) - WINDOWS[f.window]);
  else if (f.from && utc(f.from)) q.since = utc(f.from);
  if (f.window === "" && f.to && utc(f.to)) q.until = utc(f.to);
  if (after) q.cursor = after;
  return client.runs.list(q);
}

function row(run) {
  const link = el("a", { href: `/console/run.html?id=${encodeURIComponent(run.run_id)}` }, run.run_id);
  const conversation = run.conversation_id
    ? el("a", { href: `/console/conversation.html?id=${encodeURIComponent(run.conversation_id)}` }, run.conversation_id)
    : "";
  return el("tr", { "data-run-id": run.run_id, "data-status": run.status }, [
    el("td", { "data-label": "Created" }, time(run.created_at)),
    el("td", { "data-label": "Run" }, link),
    el("td", { "data-label": "Agent" }, run.agent_id ?? "(grant)"),
    el("td", { "data-label": "Conversation" }, conversation),
    el("td", { "data-label": "Event" }, run.event_type),
    el("td", { "data-label": "Status" }, badge(run.status)),
    el("td", { "data-label": "Took" }, duration(run.started_at, run.ended_at)),
    el("td", { "data-label": "Error" }, run.error ? short(`${run.error.code}: ${run.error.message}`, 80) : ""),
  ]);
}

function render(runs) {
  const seen = new Set();
  const shown = runs.filter((r) => !seen.has(r.run_id) && seen.add(r.run_id));
  const before = new Set([...body.rows].map((tr) => tr.dataset.runId));
  const rows = shown.map(row);
  for (const tr of rows) if (before.size && !before.has(tr.dataset.runId)) tr.classList.add("new");
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", { class: "empty" }, el("td", { colspan: 8 }, "No runs match.")));
}

/** From/to apply when no recent period is chosen. */
function showRange() {
  document.getElementById("filter-range").hidden = Boolean(document.getElementById("filter-window").value);
}

function onFilter() {
  showRange();
  const f = filters();
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  history.replaceState(null, "", q.size ? "?" + q : location.pathname);
  pages.reset();
}

async function loadAgents() {
  const select = document.getElementById("filter-agent");
  const wanted = params().get("agent") || "";
  try {
    const view = await client.agents.list();
    for (const agent of view.agents) select.append(el("option", { value: agent.id }, agent.id));
  } catch (error) {
    showError(errors, error);
  }
  if (wanted && ![...select.options].some((o) => o.value === wanted)) select.append(el("option", { value: wanted }, wanted));
  select.value = wanted;
}

const pages = pager({ load: (after) => load(filters(), after), render, more: document.getElementById("more"), errors });

async function main() {
  initPage();
  const p = params();
  for (const name of ["conversation", "status", "window", "from", "to"]) {
    document.getElementById(`filter-${name}`).value = p.get(name) || "";
  }
  showRange();
  await loadAgents();
  form.addEventListener("change", onFilter);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    onFilter();
  });
  await pages.refresh();
  poll(pages.refresh, POLL_MS);
}

main();
