// Agents and runners: the configured agents (GET /v1/agents) and what binds to each, the runners the
// plugins registered, the manifests they refused with the reason, the plugin processes with their health,
// the knowledge bases with a search box each (GET /v1/knowledge, /v1/knowledge/{kb_id}/search) and the
// upstream tool servers with their state and tools (GET /v1/tools?connect=true). Text is never HTML.
import { badge, client, el, initPage, showError, short, time } from "/console/api.js";

const cell = (label, value) => el("td", { "data-label": label }, value);
const ANY = el("span", { class: "muted" }, "any");
const values = (value) => (value === undefined ? ANY.cloneNode(true) : [].concat(value).join(", "));
const list = (items, none = "none") => (items.length ? items.join(", ") : el("span", { class: "muted" }, none));

function bindingRow(a) {
  const { source, conversation_id: conversation, ...other } = a.match;
  return el("tr", { "data-agent": a.id }, [
    cell("Agent", a.id),
    cell("Event types", a.event_types.join(", ")),
    cell("Sources", values(source)),
    cell("Conversations", values(conversation)),
    cell("Other match keys", Object.keys(other).length ? Object.entries(other).map(([k, v]) => `${k} = ${[].concat(v).join(" | ")}`).join("; ") : ""),
    cell("Hooks", list(a.hooks.map((h) => `/v1/hooks/${h}`))),
  ]);
}

function hit(h) {
  return el("li", { class: "hit" }, [
    el("span", { class: "score", title: "relevance (higher is better)" }, h.score.toPrecision(3)),
    el("div", { class: "body" }, [
      el("div", {}, [el("code", { class: "source" }, h.document), h.metadata.heading ? ` · ${h.metadata.heading}` : ""]),
      el("div", { class: "snippet" }, short(h.text, 400)),
    ]),
  ]);
}

function knowledgeBase(kb) {
  const hits = el("ol", { class: "rows hits", "aria-live": "polite" });
  const errors = el("div");
  const input = el("input", { type: "search", name: "q", required: true, maxlength: 2000, placeholder: "Search this knowledge base", "aria-label": `Search ${kb.name}` });
  const form = el("form", { class: "filters search" }, [input, el("button", { type: "submit" }, "Search")]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    errors.replaceChildren();
    try {
      const answer = await client.knowledge.search(kb.kb_id, input.value, { limit: 10 });
      hits.replaceChildren(...(answer.hits.length ? answer.hits.map(hit) : [el("li", { class: "muted" }, "No passage matches.")]));
    } catch (error) {
      hits.replaceChildren();
      showError(errors, error);
    }
  });
  return el("article", { class: "card", "data-kb": kb.kb_id }, [
    el("h3", {}, [kb.name, " ", el("code", { class: "muted" }, kb.kb_id), " ", el("span", { class: `badge status-${kb.ready ? "ready" : "idle"}` }, kb.ready ? "ready" : "not ingested")]),
    kb.description ? el("p", {}, kb.description) : null,
    el("dl", { class: "facts" }, [
      el("dt", {}, "Sources"), el("dd", {}, list(kb.paths)),
      el("dt", {}, "Documents"), el("dd", {}, `${kb.documents} (${kb.chunks} chunks)`),
      el("dt", {}, "Last ingested"), el("dd", {}, kb.last_ingested_at === null ? el("span", { class: "muted" }, `never: mcphost kb ingest ${kb.kb_id}`) : time(kb.last_ingested_at)),
      el("dt", {}, "Agents"), el("dd", {}, list(kb.agents)),
    ]),
    form, errors, hits,
  ]);
}

function upstream(s) {
  const params = (t) => t.params.map((p) => `${p.name}${p.required ? "" : "?"}: ${p.type || "any"}`).join(", ");
  return el("article", { class: "card", "data-server": s.server }, [
    el("h3", {}, [s.server, " ", badge(s.state)]),
    el("dl", { class: "facts" }, [
      el("dt", {}, "Transport"), el("dd", {}, s.transport),
      el("dt", {}, "Target"), el("dd", {}, el("code", {}, s.target)),
      el("dt", {}, "Connections"), el("dd", {}, String(s.connects)),
      el("dt", {}, "Agents"), el("dd", {}, list(s.agents)),
      ...(s.last_error ? [el("dt", {}, "Last error"), el("dd", { class: "error" }, s.last_error)] : []),
    ]),
    s.tools.length
      ? el("table", { class: "cards tools" }, [
        el("thead", {}, el("tr", {}, ["Tool", "Description", "Parameters", "Agents"].map((h) => el("th", {}, h)))),
        el("tbody", {}, s.tools.map((t) => el("tr", { "data-tool": t.name }, [
          cell("Tool", el("code", {}, t.name)), cell("Description", t.description ?? ""), cell("Parameters", params(t)), cell("Agents", list(t.agents)),
        ]))),
      ])
      : el("p", { class: "muted" }, "No tools listed."),
  ]);
}

async function loadKnowledge() {
  try {
    const { knowledge_bases: bases } = await client.knowledge.list();
    document.getElementById("knowledge").replaceChildren(...(bases.length ? bases.map(knowledgeBase) : [el("p", { class: "muted" }, "None configured: add a [knowledge.<kb_id>] table.")]));
  } catch (error) {
    showError(document.getElementById("knowledge-error"), error);
  }
}

async function loadTools() {
  const where = document.getElementById("tools");
  try {
    const { servers } = await client.tools.list({ connect: true });  // each server bounded by the host's list timeout
    where.replaceChildren(...(servers.length ? servers.map(upstream) : [el("p", { class: "muted" }, "None configured: add a [tools.<server>] table.")]));
  } catch (error) {
    where.replaceChildren();
    showError(document.getElementById("tools-error"), error);
  }
}

async function main() {
  initPage();
  const errors = document.getElementById("agents-error");
  loadKnowledge();
  loadTools();
  try {
    const [agents, runners] = await Promise.all([client.agents.list(), client.runners.list()]);
    document.querySelector("#agents tbody").replaceChildren(...agents.agents.map((a) => el("tr", { "data-agent": a.id }, [
      cell("Agent", el("a", { href: `/console/chat.html?agent=${encodeURIComponent(a.id)}` }, a.id)),
      cell("Runner", el("code", {}, a.runner)),
      cell("Events", a.event_types.join(", ")),
      cell("Match", Object.keys(a.match).length ? JSON.stringify(a.match) : "any"),
      cell("Concurrency", a.concurrency),
      cell("Timeout", a.timeout_s === null ? "default" : `${a.timeout_s} s`),
    ])));
    document.querySelector("#bindings tbody").replaceChildren(...agents.agents.map(bindingRow));
    document.querySelector("#runners tbody").replaceChildren(...runners.runners.map((r) => el("tr", {}, [
      cell("Runner", el("code", {}, r.id)), cell("Name", r.name), cell("Plugin", r.plugin),
    ])));
    document.getElementById("rejected").replaceChildren(...(runners.rejected.length
      ? runners.rejected.map((r) => el("li", {}, [el("code", {}, r.id), ` (${r.plugin}): `, el("span", { class: "error" }, r.reason)]))
      : [el("li", { class: "muted" }, "None.")]));
    document.querySelector("#plugins tbody").replaceChildren(...runners.plugins.map((p) => el("tr", {}, [
      cell("Plugin", p.name), cell("State", badge(p.state)), cell("PID", p.pid ?? ""), cell("Restarts", p.restarts), cell("Last error", p.last_error ?? ""),
    ])));
  } catch (error) {
    showError(errors, error);
  }
}

main();
