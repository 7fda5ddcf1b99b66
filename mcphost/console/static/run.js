// One run: summary and cancel, its results as they are stored (the client's resumable result stream),
// a timeline of its MCP calls (from the audit) and host model calls (GET /v1/runs/{id}/usage, a row per
// attempt) on one time axis, the model calls with tokens and cost, its MCP calls, its grant by layer, the event, the context projection, transcript rows,
// event-log entries and artifacts (text and JSON previewed inline, at most PREVIEW_BYTES read with a
// byte range; images as <img> from a blob: URL). What the stream does not carry is read again when a
// result arrives. A runner's run has "Cancel run"; an inspection grant (no runner) has "Revoke grant":
// both are POST /v1/runs/{id}/cancel, which revokes a grant. Every call goes through the TypeScript client.
import { APIError, badge, client, count, duration, el, initPage, params, pretty, short, showError, time, usd } from "/console/api.js";

const runId = params().get("id") || "";
const errors = document.getElementById("run-error");
let lastView = null;
let refreshing = null;
let again = false;

const PREVIEW_BYTES = 64 * 1024;
const IMAGE_BYTES = 10 * 1024 * 1024;
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"];

/** "Cancel run" for a runner's run, "Revoke grant" for an inspection grant; disabled once it cannot act. */
function stopButton(view) {
  const run = view.run;
  const grant = run.runner_id === null;
  const done = isTerminal(run.status) || (grant && view.grant.revoked);
  const button = el(
    "button",
    { type: "button", id: grant ? "revoke" : "cancel", class: "danger", disabled: done || null },
    grant ? "Revoke grant" : "Cancel run",
  );
  button.addEventListener("click", onCancel);
  return button;
}

function summary(view) {
  const run = view.run;
  const facts = [
    ["Status", badge(run.status)],
    ["Agent", run.agent_id ?? "(inspection grant)"],
    ["Runner", run.runner_id ?? ""],
    ["Conversation", run.conversation_id ? el("a", { href: `/console/conversation.html?id=${encodeURIComponent(run.conversation_id)}` }, run.conversation_id) : ""],
    ["Event", `${run.event_type} (${run.event_id})`],
    ["Created", time(run.created_at)],
    ["Started", time(run.started_at)],
    ["Ended", time(run.ended_at)],
    ["Took", duration(run.started_at, run.ended_at)],
    ["Deadline", time(run.deadline_at)],
    ["Attempt", `${run.attempt} of ${view.attempts.length}`],
  ];
  if (run.error) facts.push(["Error", el("span", { class: "error", id: "run-error-code" }, `${run.error.code}: ${run.error.message}`)]);
  const usage = usageList(run.usage ?? {});
  if (usage.childElementCount) facts.push(["Usage", usage]);
  return [
    el("h1", {}, ["Run ", el("code", {}, run.run_id)]),
    el("dl", { class: "facts" }, facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    el("p", {}, stopButton(view)),
  ];
}

/** Where a chat channel's event came from (`mcphost.channels.envelope`): hidden for any other event. */
function showOrigin(event) {
  const section = document.getElementById("origin");
  const data = event?.data;
  if (event?.source !== "platform" || typeof data?.channel !== "string") {
    section.hidden = true;
    return;
  }
  const facts = [
    ["Platform", String(data.platform ?? "")],
    ["Channel", el("a", { href: `/console/channels.html#channel-${encodeURIComponent(data.channel)}` }, data.channel)],
    ["Chat", el("code", {}, String(data.chat ?? ""))],
    ["Thread", event.conversation?.thread_id ? el("code", {}, event.conversation.thread_id) : el("span", { class: "muted" }, "none")],
    ["Platform event", el("code", {}, event.source_event_type ?? "")],
  ];
  if (event.actor?.actor_id) facts.push(["Actor", el("code", {}, event.actor.actor_id)]);
  if (event.raw_ref) facts.push(["Raw payload", el("code", {}, event.raw_ref)]);
  document.getElementById("origin-facts").replaceChildren(
    ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-origin": k.toLowerCase().replace(" ", "-") }, v)]),
  );
  section.hidden = false;
}

/** Where a remote run ran (`GET /v1/runs/{id}/runtime`): its runtime, attempt, fence, claim timings and
 * every claim's events; hidden for a run the host executed itself. */
function showPlacement(answer) {
  const section = document.getElementById("placement");
  const p = answer.runtime;
  if (p === null) {
    section.hidden = true;
    return;
  }
  const since = (at, from) => (at === null || from === null ? el("span", { class: "muted" }, "not yet") : `+${duration(from, at)}`);
  const facts = [
    ["Runtime", p.runtime_name === null ? el("span", { class: "muted" }, "none yet (queued)")
      : el("a", { href: `/console/runtimes.html#runtime-${encodeURIComponent(p.runtime_name)}` }, p.runtime_name)],
    ["Runtime id", p.runtime_id === null ? el("span", { class: "muted" }, "none") : el("code", {}, p.runtime_id)],
    ["Attempt", String(p.attempts)],
    ["Fence", String(p.fence)],
    ["State", badge(p.state)],
    ["Claimed", p.claimed_at === null ? el("span", { class: "muted" }, "not yet") : [time(p.claimed_at), " (", since(p.claimed_at, p.queued_at), " after queued)"]],
    ["First result", since(p.first_result_at, p.claimed_at)],
    ["Lease renewals", p.last_renewal_at === null ? String(p.renewals) : [String(p.renewals), " (last ", time(p.last_renewal_at), ")"]],
    ["Output", p.output_artifact_id === null ? el("span", { class: "muted" }, "none posted") : el("code", {}, p.output_artifact_id)],
  ];
  document.getElementById("placement-facts").replaceChildren(
    ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-placement": k.toLowerCase().replace(" ", "-") }, v)]),
  );
  document.querySelector("#placement-events tbody").replaceChildren(...p.events.map((e) => {
    const { event, at, runtime, runtime_id: _id, fence, ...rest } = e;
    const details = Object.entries(rest).filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => `${k}: ${typeof v === "number" && k.endsWith("_at") ? new Date(v * 1000).toISOString() : v}`).join(", ");
    return el("tr", { "data-event": event }, [
      el("td", { "data-label": "Event" }, event),
      el("td", { "data-label": "At" }, time(at)),
      el("td", { "data-label": "Runtime" }, runtime ?? ""),
      el("td", { "data-label": "Fence" }, fence === undefined ? "" : String(fence)),
      el("td", { "data-label": "Details" }, el("span", { class: "raw" }, short(details, 300))),
    ]);
  }));
  section.hidden = false;
}

/** A run's usage as numbers: one "name value" pair per counter (nested counters by their dotted path). */
function usageList(usage) {
  const pairs = [];
  const walk = (value, path) => {
    if (value && typeof value === "object" && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walk(v, path ? `${path}.${k}` : k);
    } else if (value !== null && value !== undefined) {
      pairs.push([path.replaceAll("_", " "), typeof value === "number" ? value.toLocaleString("en-US") : String(value)]);
    }
  };
  walk(usage, "");
  return el("span", { class: "usage" }, pairs.map(([k, v]) =>
    el("span", { class: "usage-item", "data-usage": k }, [el("span", { class: "muted" }, k), " ", el("strong", {}, v)])));
}

/** Milliseconds as a short axis label: "0 ms", "850 ms", "1.2 s", "2 min 5 s". */
function span(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/**
 * Each model call attempt as a span: {row, start (epoch s), ms, ttft (ms or null)}. The attempts of one
 * call share its created_at and follow each other, so an attempt starts after the latencies of the
 * attempts before it; a call still in flight (`reserved`) runs until now.
 */
function modelSpans(rows) {
  const spent = new Map(); // created_at → ms taken by the earlier attempts of that call
  return rows.map((m) => {
    const before = spent.get(m.created_at) ?? 0;
    const start = m.created_at + before / 1000;
    // null: in flight (reserved) until now; a failed attempt stored without one, a mark
    const ms = m.latency_ms ?? (m.status === "reserved" ? Math.max(0, Date.now() - start * 1000) : 0);
    spent.set(m.created_at, before + ms);
    return { row: m, start, ms, ttft: m.streamed ? m.ttft_ms : null };
  });
}

/** "model sonnet", with the attempt when it is a fallback. */
function modelLabel(m) {
  return m.attempt > 1 ? `model ${m.model_id} (attempt ${m.attempt})` : `model ${m.model_id}`;
}

/**
 * The run on a time axis, like a trace waterfall: the run from its start to its end (or now), each MCP
 * call from its audit row (started_at and duration_ms; rows stored before started_at was kept are placed
 * by created_at minus the duration) and each model call attempt (`modelSpans`; a mark at its time to first
 * token), in the order they started. Bars are positioned in percent of the run, so it fits any width.
 */
function timeline(run, calls, models) {
  const startOf = (a) => (a.started_at ?? a.created_at - a.duration_ms / 1000);
  const spans = modelSpans(models);
  const starts = [...calls.map(startOf), ...spans.map((s) => s.start)];
  const t0 = run.started_at ?? (starts.length ? Math.min(...starts) : null);
  if (t0 === null) return [el("p", { class: "muted" }, "The run has not started.")];
  const ends = [...calls.map((a) => startOf(a) + a.duration_ms / 1000), ...spans.map((s) => s.start + s.ms / 1000)];
  const t1 = Math.max(run.ended_at ?? Date.now() / 1000, t0 + 0.001, ...ends);
  const total = (t1 - t0) * 1000;
  const pct = (seconds) => `${Math.max(0, Math.min(100, ((seconds - t0) * 1000 / total) * 100)).toFixed(3)}%`;
  const width = (ms) => `${Math.max(0.2, (ms / total) * 100).toFixed(3)}%`;
  // positions go through the CSSOM: the CSP refuses style="" attributes
  const placed = (node, left, size) => {
    node.style.left = left;
    if (size !== undefined) node.style.width = size;
    return node;
  };
  const row = (label, cls, at, ms, attrs = {}, ttft = null) => {
    const bar = placed(el("span", { class: "wf-bar", title: `${label}: ${ms.toFixed(1)} ms at +${span((at - t0) * 1000)}` }), pct(at), width(ms));
    if (ttft !== null && ttft !== undefined && ms > 0) {
      // the first token's moment inside the bar, in percent of the bar
      bar.append(placed(el("span", { class: "wf-ttft", title: `first token after ${ttft.toFixed(1)} ms` }), `${Math.min(100, (ttft / ms) * 100).toFixed(3)}%`));
    }
    return el("div", { class: `wf-row ${cls}`, role: "row", ...attrs }, [
      el("span", { class: "wf-label", role: "cell", title: label }, label),
      el("span", { class: "wf-track", role: "cell" }, bar),
      el("span", { class: "wf-ms", role: "cell" }, `${ms.toFixed(1)} ms`),
    ]);
  };
  const mcpRows = calls.map((a) => ({
    at: startOf(a),
    node: row(a.tool, `wf-call outcome-${a.outcome}`, startOf(a), a.duration_ms, { "data-kind": "mcp", "data-tool": a.tool, "data-outcome": a.outcome }),
  }));
  const modelRows = spans
    .map((s) => ({
      at: s.start,
      node: row(modelLabel(s.row), `wf-model status-${s.row.status}`, s.start, s.ms,
        { "data-kind": "model", "data-model": s.row.model_id, "data-status": s.row.status, "data-attempt": s.row.attempt }, s.ttft),
    }))
    .sort((a, b) => a.at - b.at);
  // merged by start, the MCP calls kept in the audit's order
  const merged = [];
  let m = 0;
  for (const call of mcpRows) {
    while (m < modelRows.length && modelRows[m].at < call.at) merged.push(modelRows[m++].node);
    merged.push(call.node);
  }
  while (m < modelRows.length) merged.push(modelRows[m++].node);
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => placed(el("span", { class: "wf-tick" }, span(total * f)), `${f * 100}%`));
  const rows = [
    el("div", { class: "wf-row wf-axis", role: "row" }, [el("span", { class: "wf-label" }, ""), el("span", { class: "wf-track" }, ticks), el("span", { class: "wf-ms" }, "")]),
    row(`run ${run.status}`, "wf-run", t0, total, { "data-kind": "run" }),
    ...merged,
  ];
  return [el("div", { class: "waterfall", role: "table", "aria-label": "The run's MCP and model calls on a time axis" }, rows)];
}

const ms = (value) => (value === null || value === undefined ? "" : `${value.toFixed(1)} ms`);

/** The run's model call attempts with tokens and cost, and their totals. */
function modelCalls(rows) {
  if (!rows.length) return [el("p", { class: "muted", id: "model-calls-none" }, "No host model calls.")];
  const sum = (key) => rows.reduce((n, r) => n + r[key], 0);
  const totals = el("p", { id: "model-totals" }, [
    `${rows.length} ${rows.length === 1 ? "attempt" : "attempts"}: `,
    el("strong", {}, count(sum("input_tokens"))), " input, ",
    el("strong", {}, count(sum("output_tokens"))), " output, ",
    el("strong", {}, count(sum("cached_tokens"))), " cached tokens; ",
    el("strong", {}, usd(sum("cost_usd"))),
  ]);
  const cell = (label, value) => el("td", { "data-label": label }, value);
  const table = el("table", { id: "model-calls", class: "cards" }, [
    el("thead", {}, el("tr", {}, ["Model", "Upstream", "Attempt", "Status", "Input", "Output", "Cached", "Cost", "Latency", "First token", "At"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) =>
      el("tr", { "data-model": r.model_id, "data-status": r.status, "data-attempt": r.attempt }, [
        cell("Model", el("code", {}, r.model_id)),
        cell("Upstream", el("code", {}, r.response_model ?? r.upstream_model)),
        cell("Attempt", String(r.attempt)),
        cell("Status", [el("span", { class: `badge status-${r.status}` }, r.status), r.http_status && r.status === "failed" ? ` HTTP ${r.http_status}` : ""]),
        cell("Input", count(r.input_tokens)),
        cell("Output", count(r.output_tokens)),
        cell("Cached", count(r.cached_tokens)),
        cell("Cost", usd(r.cost_usd)),
        cell("Latency", ms(r.latency_ms)),
        cell("First token", r.streamed ? ms(r.ttft_ms) : el("span", { class: "muted" }, "not streamed")),
        cell("At", time(r.created_at)),
      ]))),
  ]);
  return [totals, table];
}

function isTerminal(status) {
  return ["completed", "failed", "cancelled", "parked"].includes(status);
}

async function onCancel(event) {
  const button = event.currentTarget;
  button.disabled = true;
  try {
    const reason = button.id === "revoke" ? "revoked from the console" : "cancelled from the console";
    await client.runs.cancel(runId, reason);
  } catch (error) {
    if (!(error instanceof APIError && error.status === 409)) showError(errors, error);
  }
  schedule();
}

function list(values) {
  if (values === undefined || values === null) return el("span", { class: "muted" }, "—");
  if (typeof values === "boolean") return values ? "yes" : "no";
  if (!Array.isArray(values)) return short(values, 300);
  return values.length ? values.join(", ") : el("span", { class: "muted" }, "none");
}

function grantTable(grant) {
  const layers = grant.layers;
  const m = layers?.manifest ?? {};
  const names = (items) => (items ? items.map((p) => (typeof p === "string" ? p : JSON.stringify(p))) : undefined);
  const rows = [
    ["Tools", names(m.tools), layers?.tools, "—", grant.tools.concat(grant.host_tool_globs)],
    ["Knowledge", names(m.knowledge), layers?.knowledge_bases, "—", grant.knowledge_bases],
    ["State read", names(m.state), layers?.state_scopes, scopeIds(grant), grant.state_read],
    ["State write", names(m.state), layers ? (layers.state_write ? "allowed" : "refused") : undefined, scopeIds(grant), grant.state_write],
    ["Storage", names(m.storage), layers?.storage_areas, "—", grant.storage_areas],
    ["Artifacts", names(m.artifacts), "—", grant.conversation_id ? `conversation ${grant.conversation_id}` : "—", grant.artifact_create ? "create" : "read"],
  ];
  const table = el("table", { class: "cards grant" }, [
    el("thead", {}, el("tr", {}, ["What", "Manifest", "Agent", "Event", "Granted"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map(([what, ...cells]) =>
      el("tr", {}, [el("th", { scope: "row" }, what), ...cells.map((c, i) => el("td", { "data-label": ["Manifest", "Agent", "Event", "Granted"][i] }, list(c)))]))),
  ]);
  const state = grant.revoked ? "Revoked." : grant.active ? "Active." : "Ended.";
  const note = layers
    ? el("p", { class: "muted" }, `Runner ${layers.runner_id}, agent ${layers.agent_id}. ${state}`)
    : el("p", { class: "muted" }, `An inspection grant: no layers. ${state}`);
  return [note, table];
}

function scopeIds(grant) {
  return ["conversation_id", "thread_id", "actor_id"].filter((k) => grant[k]).map((k) => `${k.replace("_id", "")} ${grant[k]}`);
}

function resultItem(r) {
  const data = r.data ?? {};
  let text;
  switch (r.type) {
    case "message.delta": text = data.chunk?.content ?? short(data.chunk); break;
    case "message.completed": text = data.message?.content ?? short(data.message); break;
    case "tool.call.started": text = `${data.tool_name} ${short(data.parameters ?? {}, 100)}`; break;
    case "tool.call.completed":
      text = `${data.tool_name} ${data.error_code ? `${data.error_code}: ${data.error_message ?? ""}` : short(data.result_preview ?? "ok", 100)}`;
      break;
    case "run.failed": text = `${data.code}: ${data.message}`; break;
    default: text = short(data, 200);
  }
  return el("li", { "data-type": r.type, "data-seq": r.seq }, [
    el("span", { class: "seq" }, r.seq),
    el("span", { class: `type type-${r.type.replace(".", "-")}` }, r.type),
    el("span", { class: "text" }, text),
  ]);
}

function auditRow(a) {
  return el("tr", { "data-tool": a.tool, "data-outcome": a.outcome }, [
    el("td", { "data-label": "#" }, a.seq),
    el("td", { "data-label": "Tool" }, el("code", {}, a.tool)),
    el("td", { "data-label": "Outcome" }, el("span", { class: `badge outcome-${a.outcome}` }, a.outcome)),
    el("td", { "data-label": "Code" }, a.code ?? ""),
    el("td", { "data-label": "Duration" }, `${a.duration_ms.toFixed(1)} ms`),
    el("td", { "data-label": "Bytes in/out" }, `${a.bytes_in} / ${a.bytes_out}`),
    el("td", { "data-label": "At" }, time(a.created_at)),
  ]);
}

function artifactIds(...roots) {
  const found = new Set();
  const walk = (v) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) {
        if ((k === "artifact_id" || k === "raw_ref") && typeof x === "string") found.add(x);
        else walk(x);
      }
    }
  };
  roots.forEach(walk);
  return [...found];
}

async function download(id, name) {
  const res = await client.artifacts.content(id);
  const url = URL.createObjectURL(await res.blob());
  const a = el("a", { href: url, download: name || id });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

function isText(mime) {
  const type = (mime || "").split(";")[0].trim().toLowerCase();
  return type.startsWith("text/") || type === "application/json" || type.endsWith("+json") || type === "application/x-ndjson";
}

function isImage(mime) {
  return IMAGE_TYPES.includes((mime || "").split(";")[0].trim().toLowerCase());
}

/** The first PREVIEW_BYTES of a text or JSON artifact (a byte range), pretty-printed when it is whole JSON. */
async function textPreview(meta) {
  const res = await client.artifacts.content(meta.artifact_id, { range: [0, PREVIEW_BYTES - 1] });
  const bytes = new Uint8Array(await res.arrayBuffer());
  const cut = meta.size > bytes.length;
  let text = new TextDecoder().decode(bytes.subarray(0, PREVIEW_BYTES));
  if (!cut && /json/i.test(meta.mime_type)) {
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      // not valid JSON after all: show it as it is
    }
  }
  const note = cut ? el("p", { class: "muted preview-note" }, `The first ${bytes.length} of ${meta.size} bytes.`) : null;
  return el("div", { class: "preview", "data-preview": "text" }, [el("pre", { class: "json" }, text), note]);
}

/** An image artifact as <img> from a blob: URL (the CSP allows images from this origin and blob: only). */
async function imagePreview(meta) {
  if (meta.size > IMAGE_BYTES) return el("p", { class: "muted" }, `An image of ${meta.size} bytes: download it to see it.`);
  const res = await client.artifacts.content(meta.artifact_id);
  const blob = new Blob([await res.arrayBuffer()], { type: meta.mime_type.split(";")[0] });
  return el("div", { class: "preview", "data-preview": "image" }, el("img", { src: URL.createObjectURL(blob), alt: meta.name || meta.artifact_id }));
}

const previews = new Map(); // artifact id → its preview node (artifacts never change)

async function preview(meta) {
  if (!previews.has(meta.artifact_id)) {
    const make = isImage(meta.mime_type) ? imagePreview : isText(meta.mime_type) ? textPreview : null;
    previews.set(meta.artifact_id, make ? make(meta).catch((error) => el("p", { class: "error" }, error.message)) : Promise.resolve(null));
  }
  return previews.get(meta.artifact_id);
}

async function artifactItem(id) {
  try {
    const meta = await client.artifacts.get(id);
    const button = el("button", { type: "button", class: "link" }, "download");
    button.addEventListener("click", () => download(id, meta.name).catch((e) => showError(errors, e)));
    const line = el("div", {}, [el("code", {}, meta.name || id), ` ${meta.mime_type ?? ""}, ${meta.size} bytes `, button]);
    return el("li", { "data-artifact-id": id, class: "artifact" }, [line, await preview(meta)]);
  } catch (error) {
    return el("li", { "data-artifact-id": id }, [el("code", {}, id), ` ${error.message}`]);
  }
}

async function refresh() {
  const [view, audit, records, usage, placement] = await Promise.all([
    client.runs.get(runId),
    client.runs.audit(runId, { limit: 1000 }),
    client.runs.records(runId),
    client.runs.usage(runId),
    client.runs.runtime(runId),
  ]);
  showPlacement(placement);
  lastView = view;
  document.title = `Run ${view.run.run_id} · mcphost`;
  document.getElementById("summary").replaceChildren(...summary(view));
  document.querySelector("#audit tbody").replaceChildren(...audit.items.map(auditRow));
  document.getElementById("timeline").replaceChildren(...timeline(view.run, audit.items, usage.items));
  document.getElementById("models").replaceChildren(...modelCalls(usage.items));
  document.getElementById("grant").replaceChildren(...grantTable(view.grant));
  const inbound = records.events.find((e) => e.kind === "inbound");
  const event = inbound?.payload ?? records.context?.event; // the envelope as it came in
  document.getElementById("event").replaceChildren(event ? pretty(event) : el("p", { class: "muted" }, "Not stored yet."));
  showOrigin(event);
  const context = document.getElementById("context");
  context.replaceChildren(context.firstElementChild, records.context ? pretty(records.context) : el("p", { class: "muted" }, "None: the run has not started, or it is an inspection grant."));
  document.getElementById("transcript").replaceChildren(...records.transcript.map((t) =>
    el("li", { "data-role": t.role }, [el("span", { class: "role" }, t.role), el("span", { class: "text" }, t.content || short(t.contents))])));
  document.querySelector("#events tbody").replaceChildren(...records.events.map((e) =>
    el("tr", {}, [
      el("td", { "data-label": "#" }, e.seq),
      el("td", { "data-label": "Type" }, e.event_type),
      el("td", { "data-label": "Kind" }, e.kind),
      el("td", { "data-label": "Payload" }, el("span", { class: "raw" }, short(e.payload, 160))),
    ])));
  const results = [...document.querySelectorAll("#results li")].map((li) => li.dataset.payload && JSON.parse(li.dataset.payload));
  const ids = artifactIds(records.events.map((e) => e.payload), records.transcript.map((t) => t.artifacts), results);
  const output = placement.runtime?.output_artifact_id;
  if (output && !ids.includes(output)) ids.push(output); // the runner's output on its runtime
  const items = await Promise.all(ids.map(artifactItem));
  document.getElementById("artifacts").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "None.")]));
}

/** Refresh now, or once more after the refresh in flight (results may arrive in bursts). */
function schedule() {
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = refresh()
    .catch((error) => showError(errors, error))
    .finally(() => {
      refreshing = null;
      if (again) {
        again = false;
        schedule();
      }
    });
}

/** The run's results as they are stored, through the client's stream (resumed with Last-Event-ID). */
async function follow() {
  const list = document.getElementById("results");
  try {
    for await (const item of client.runs.stream(runId)) {
      const li = resultItem(item.raw);
      li.dataset.payload = JSON.stringify(item.raw.data ?? null);
      list.append(li);
      schedule();
    }
  } catch (error) {
    showError(errors, error);
  }
  schedule();
}

async function main() {
  initPage();
  if (!runId) {
    showError(errors, new Error("No run id: open a run from the runs list."));
    return;
  }
  try {
    await refresh();
  } catch (error) {
    showError(errors, error);
    return;
  }
  await follow();
  // a run still active without a stream (the host restarted): keep its status current
  while (lastView && !isTerminal(lastView.run.status)) {
    await new Promise((r) => setTimeout(r, 2000));
    schedule();
  }
}

main();
