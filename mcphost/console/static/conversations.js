// Conversations: GET /v1/conversations, newest activity first, searched by id prefix, agent and actor
// (kept in the address, so a search can be shared), re-read every two seconds; older pages on demand.
import { client, el, initPage, pager, params, poll, showError, time } from "/console/api.js";

const errors = document.getElementById("conversations-error");
const body = document.querySelector("#conversations tbody");
const form = document.getElementById("filters");
const fields = { prefix: "filter-prefix", agent: "filter-agent", actor: "filter-actor" };
const cell = (label, value) => el("td", { "data-label": label }, value);
const link = (page, id) => el("a", { href: `/console/${page}.html?id=${encodeURIComponent(id)}` }, id);

function row(c) {
  return el("tr", { "data-conversation-id": c.conversation_id }, [
    cell("Conversation", link("conversation", c.conversation_id)),
    cell("Last activity", time(c.last_activity_at)),
    cell("Agent", c.agent_id ?? el("span", { class: "muted" }, "—")),
    cell("Actor", c.actor_id ?? el("span", { class: "muted" }, "—")),
    cell("Runs", String(c.runs)),
    cell("Newest run", link("run", c.last_run_id)),
    cell("Began", time(c.created_at)),
  ]);
}

function filters() {
  const q = {};
  for (const [key, id] of Object.entries(fields)) {
    const value = document.getElementById(id).value.trim();
    if (value) q[key] = value;
  }
  return q;
}

const pages = pager({
  load: (cursor) => client.conversations.list({ limit: 50, ...filters(), ...(cursor ? { cursor } : {}) }),
  render: (items) => body.replaceChildren(...(items.length ? items.map(row) : [el("tr", { class: "empty" }, el("td", { colspan: 7 }, "Nothing matches."))])),
  more: document.getElementById("more"),
  errors,
});

async function agents() {
  const select = document.getElementById("filter-agent");
  try {
    for (const agent of (await client.agents.list()).agents) select.append(el("option", { value: agent.id }, agent.id));
  } catch (error) {
    showError(errors, error);
  }
  select.value = params().get("agent") ?? "";
}

function searched(event) {
  event?.preventDefault();
  history.replaceState(null, "", "?" + new URLSearchParams(filters()));
  pages.reset();
}

initPage();
for (const [key, id] of Object.entries(fields)) if (key !== "agent") document.getElementById(id).value = params().get(key) ?? "";
form.addEventListener("submit", searched);
document.getElementById("filter-agent").addEventListener("change", searched);
agents().then(() => pages.refresh()).then(() => poll(pages.refresh, 2000));
