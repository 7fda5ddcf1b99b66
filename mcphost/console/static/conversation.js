// A conversation: its transcript and event log side by side, the newest page first, older pages on demand.
import { el, getJson, initPage, params, short, showError, time } from "/console/api.js";

const form = document.getElementById("conversation-form");
const errors = document.getElementById("conversation-error");
const PAGE = 50;

function pager(kind, list, button, item) {
  let before = null;
  let base = "";
  const load = async (reset) => {
    const q = new URLSearchParams({ limit: String(PAGE) });
    const thread = document.getElementById("thread-id").value.trim();
    if (thread) q.set("thread_id", thread);
    if (!reset && before) q.set("before", before);
    const page = await getJson(`${base}/${kind}?${q}`);
    // pages come newest first (`next_cursor` goes on to older items); shown oldest at the top
    const rows = page.items.slice().reverse().map(item);
    if (reset) list.replaceChildren(...rows);
    else list.prepend(...rows);
    before = page.next_cursor;
    button.hidden = !page.has_more;
  };
  button.addEventListener("click", () => load(false).catch((e) => showError(errors, e)));
  return (conversationBase) => {
    base = conversationBase;
    before = null;
    return load(true);
  };
}

const transcript = pager("transcript", document.getElementById("conv-transcript"), document.getElementById("transcript-older"), (t) =>
  el("li", { "data-role": t.role }, [el("span", { class: "role" }, t.role), el("span", { class: "text" }, t.content || short(t.contents)), el("span", { class: "muted" }, ` ${time(t.created_at)}`)]));
const events = pager("events", document.getElementById("conv-events"), document.getElementById("events-older"), (e) =>
  el("li", {}, [
    el("span", { class: "role" }, e.event_type),
    e.run_id ? el("a", { href: `/console/run.html?id=${encodeURIComponent(e.run_id)}` }, e.run_id) : "",
    el("span", { class: "text" }, ` ${short(e.payload, 160)}`),
  ]));

async function show(event) {
  event?.preventDefault();
  const id = document.getElementById("conversation-id").value.trim();
  if (!id) return;
  history.replaceState(null, "", `?id=${encodeURIComponent(id)}`);
  errors.replaceChildren();
  const base = `/v1/conversations/${encodeURIComponent(id)}`;
  try {
    await Promise.all([transcript(base), events(base)]);
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
