// A conversation: its runs (GET /v1/runs?conversation_id=…), its transcript and event log side by side,
// the newest page first, older pages on demand; "Delete conversation" (DELETE /v1/conversations/{id},
// refused while one of its runs is active) removes its transcript, events, state and artifacts.
import { badge, client, duration, el, initPage, params, short, showError, time } from "/console/api.js";

const form = document.getElementById("conversation-form");
const errors = document.getElementById("conversation-error");
const PAGE = 50;

/** `read(id, query)` is `client.conversations.transcript` or `.events`. */
function pager(read, list, button, item) {
  let before = null;
  let conversationId = "";
  const load = async (reset) => {
    const q = { limit: PAGE };
    const thread = document.getElementById("thread-id").value.trim();
    if (thread) q.thread_id = thread;
    if (!reset && before) q.before = before;
    const page = await read(conversationId, q);
    // pages come newest first (`next_cursor` goes on to older items); shown oldest at the top
    const rows = page.items.slice().reverse().map(item);
    if (reset) list.replaceChildren(...rows);
    else list.prepend(...rows);
    before = page.next_cursor;
    button.hidden = !page.has_more;
  };
  button.addEventListener("click", () => load(false).catch((e) => showError(errors, e)));
  return (id) => {
    conversationId = id;
    before = null;
    return load(true);
  };
}

const transcript = pager(client.conversations.transcript, document.getElementById("conv-transcript"), document.getElementById("transcript-older"), (t) =>
  el("li", { "data-role": t.role }, [el("span", { class: "role" }, t.role), el("span", { class: "text" }, t.content || short(t.contents)), el("span", { class: "muted" }, ` ${time(t.created_at)}`)]));
const events = pager(client.conversations.events, document.getElementById("conv-events"), document.getElementById("events-older"), (e) =>
  el("li", {}, [
    el("span", { class: "role" }, e.event_type),
    e.run_id ? el("a", { href: `/console/run.html?id=${encodeURIComponent(e.run_id)}` }, e.run_id) : "",
    el("span", { class: "text" }, ` ${short(e.payload, 160)}`),
  ]));

let runsCursor = null;
let runsOf = "";

async function runs(id, more = false) {
  const page = await client.runs.list({ conversation_id: id, limit: 50, cursor: more && runsCursor ? runsCursor : undefined });
  const rows = page.items.map((r) =>
    el("tr", { "data-run-id": r.run_id, "data-status": r.status }, [
      el("td", { "data-label": "Run" }, el("a", { href: `/console/run.html?id=${encodeURIComponent(r.run_id)}` }, r.run_id)),
      el("td", { "data-label": "Status" }, badge(r.status)),
      el("td", { "data-label": "Agent" }, r.agent_id ?? ""),
      el("td", { "data-label": "Event" }, r.event_type),
      el("td", { "data-label": "Created" }, time(r.created_at)),
      el("td", { "data-label": "Took" }, duration(r.started_at, r.ended_at)),
    ]));
  const body = document.querySelector("#conv-runs tbody");
  if (more) body.append(...rows);
  else body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: 6 }, "No runs."))]));
  runsCursor = page.next_cursor;
  runsOf = id;
  document.getElementById("runs-older").hidden = !page.has_more;
  document.getElementById("conv-runs-section").hidden = false;
}

document.getElementById("runs-older").addEventListener("click", () => runs(runsOf, true).catch((e) => showError(errors, e)));
document.getElementById("delete-conversation").addEventListener("click", async () => {
  if (!runsOf || !confirm(`Delete conversation ${runsOf}: its transcript, events, state and artifacts?`)) return;
  try {
    const gone = await client.conversations.delete(runsOf);
    errors.replaceChildren(el("p", { class: "muted", id: "deleted" }, `Deleted ${gone.conversation_id}.`));
    await show();
  } catch (error) {
    showError(errors, error);
  }
});

async function show(event) {
  event?.preventDefault();
  const id = document.getElementById("conversation-id").value.trim();
  if (!id) return;
  history.replaceState(null, "", `?id=${encodeURIComponent(id)}`);
  if (event) errors.replaceChildren();
  try {
    await Promise.all([runs(id), transcript(id), events(id)]);
  } catch (error) {
    showError(errors, error);
  }
}

initPage();
form.addEventListener("submit", show);
const id = params().get("id");
if (id) {
  document.getElementById("conversation-id").value = id;
  show();
}
