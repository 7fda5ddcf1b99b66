// Agents and runners: the configured agents (GET /v1/agents), the runners the plugins registered, the
// manifests they refused with the reason, and the plugin processes with their health.
import { badge, el, getJson, initPage, showError } from "/console/api.js";

const cell = (label, value) => el("td", { "data-label": label }, value);

async function main() {
  initPage();
  const errors = document.getElementById("agents-error");
  try {
    const [agents, runners] = await Promise.all([getJson("/v1/agents"), getJson("/v1/runners")]);
    document.querySelector("#agents tbody").replaceChildren(...agents.agents.map((a) => el("tr", { "data-agent": a.id }, [
      cell("Agent", el("a", { href: `/console/chat.html?agent=${encodeURIComponent(a.id)}` }, a.id)),
      cell("Runner", el("code", {}, a.runner)),
      cell("Events", a.event_types.join(", ")),
      cell("Match", Object.keys(a.match).length ? JSON.stringify(a.match) : "any"),
      cell("Concurrency", a.concurrency),
      cell("Timeout", a.timeout_s === null ? "default" : `${a.timeout_s} s`),
    ])));
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
