// Explain: POST /v1/explain with an event and named targets; shows the binding (and why each other agent
// does not take the event), the layers, the grant and one verdict per target.
import { client, el, initPage, pretty, showError } from "/console/api.js";

const SAMPLE = {
  event_type: "message.received",
  conversation: { conversation_id: "c1" },
  actor: { actor_id: "u1" },
  input: { text: "hello" },
};

const splitList = (id) => document.getElementById(id).value.split(",").map((s) => s.trim()).filter(Boolean);

function render(x) {
  const out = [];
  out.push(el("h2", {}, "Binding"));
  out.push(el("p", { id: "explain-agent" }, x.agent ? ["Agent ", el("code", {}, x.agent), " on ", el("code", {}, x.runner ?? "?"), `: ${x.binding.why}`] : x.binding.why));
  out.push(el("table", { class: "cards" }, [
    el("thead", {}, el("tr", {}, ["Agent", "Runner", "Takes it", "Why"].map((h) => el("th", {}, h)))),
    el("tbody", {}, x.binding.agents.map((a) => el("tr", {}, [
      el("td", { "data-label": "Agent" }, a.agent),
      el("td", { "data-label": "Runner" }, a.runner),
      el("td", { "data-label": "Takes it" }, a.binds ? "yes" : "no"),
      el("td", { "data-label": "Why" }, a.why),
    ]))),
  ]));
  if (x.checks.length) {
    out.push(el("h2", {}, "Checks"));
    out.push(el("table", { class: "cards", id: "explain-checks" }, [
      el("thead", {}, el("tr", {}, ["Target", "Verdict", "Layer", "Why", "Fix"].map((h) => el("th", {}, h)))),
      el("tbody", {}, x.checks.map((c) => el("tr", { "data-target": c.target, "data-allowed": String(c.allowed) }, [
        el("td", { "data-label": "Target" }, el("code", {}, c.target)),
        el("td", { "data-label": "Verdict" }, el("span", { class: `badge ${c.approval ? "status-pending" : c.allowed ? "status-completed" : "status-failed"}` }, c.approval ? "approval" : c.allowed ? "allowed" : "refused")),
        el("td", { "data-label": "Layer" }, c.layer ?? ""),
        el("td", { "data-label": "Why" }, c.reason ?? ""),
        el("td", { "data-label": "Fix" }, c.fix ?? ""),
      ]))),
    ]));
  }
  if (x.layers) {
    out.push(el("h2", {}, "Layers"));
    const layers = el("div", { class: "layers" });
    for (const name of ["manifest", "agent", "event"]) layers.append(el("section", {}, [el("h3", {}, name), pretty(x.layers[name])]));
    out.push(layers);
  }
  if (x.grant) out.push(el("h2", {}, "Grant"), pretty(x.grant));
  return out;
}

async function explain(event) {
  event.preventDefault();
  const errors = document.getElementById("explain-error");
  errors.replaceChildren();
  let body;
  try {
    body = JSON.parse(document.getElementById("explain-event").value);
  } catch (error) {
    showError(errors, new Error(`Event: ${error.message}`));
    return;
  }
  try {
    const explanation = await client.agents.explain({
      event: body, tools: splitList("explain-tools"), resources: splitList("explain-resources"), state_scopes: splitList("explain-scopes"),
    });
    document.getElementById("explanation").replaceChildren(...render(explanation));
  } catch (error) {
    showError(errors, error);
    document.getElementById("explanation").replaceChildren();
  }
}

initPage();
document.getElementById("explain-event").value = JSON.stringify(SAMPLE, null, 2);
document.getElementById("explain-form").addEventListener("submit", explain);
