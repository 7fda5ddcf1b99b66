// Runtimes: each registered runtime (GET /v1/runtimes) with the state an operator allows and whether it
// heartbeats, its last heartbeat, slots in use, the runs it holds (fence, attempt, last lease renewal),
// labels and capabilities, with drain / disable / enable buttons (POST /v1/runtimes/{name}/...). Every
// call goes through the TypeScript client. Re-read every two seconds.
import { badge, cell, client, el, initPage, muted, runLink, showError, short, time, wholeTable } from "/console/api.js";

const errors = document.getElementById("runtimes-error");

function state(r) {
  return el("div", {}, [
    badge(r.state), " ",
    r.alive ? el("span", { "data-alive": "true" }, "alive") : el("span", { class: "error", "data-alive": "false" }, "not heartbeating"),
  ]);
}

function runs(r) {
  if (!r.runs.length) return muted("none");
  return el("ul", { class: "plain" }, r.runs.map((c) =>
    el("li", { "data-run-id": c.run_id }, [
      runLink(c.run_id),
      el("div", { class: "muted" }, `fence ${c.fence}, attempt ${c.attempt}, renewed ${c.last_renewal_at === null ? "not yet" : time(c.last_renewal_at)}`),
    ])));
}

function labels(r) {
  const entries = Object.entries(r.labels);
  if (!entries.length) return muted("none");
  return el("div", {}, entries.map(([k, v]) => el("div", {}, el("code", {}, `${k}=${v}`))));
}

function capabilities(r) {
  const caps = r.capabilities ?? {};
  const harnesses = Object.entries(caps.harnesses ?? {}).map(([name, h]) => `${name} ${h?.version ?? "not installed"}`);
  return el("div", { class: "capabilities" }, [
    el("div", {}, (caps.runners ?? []).length ? (caps.runners ?? []).map((id) => el("div", {}, el("code", {}, id))) : muted("no runners")),
    harnesses.length ? el("div", { class: "muted" }, harnesses.join(" · ")) : null,
    el("div", { class: "muted" }, short([caps.os, caps.python && `Python ${caps.python}`, caps.version && `mcphost ${caps.version}`].filter(Boolean).join(" · "), 200)),
  ]);
}

function button(r, action, label, refresh) {
  const b = el("button", { type: "button", "data-action": action }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await client.runtimes[action](r.name);
      errors.replaceChildren();
      await refresh();
    } catch (error) {
      showError(errors, error);
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

function actions(r, refresh) {
  const buttons = [];
  if (r.state === "online") buttons.push(button(r, "drain", "Drain", refresh));
  if (r.state !== "disabled") buttons.push(button(r, "disable", "Disable", refresh));
  if (r.state !== "online") buttons.push(button(r, "enable", "Enable", refresh));
  return el("div", { class: "actions" }, buttons);
}

function row(r, refresh) {
  return el("tr", { id: `runtime-${r.name}`, "data-runtime": r.name, "data-state": r.state }, [
    cell("Runtime", [el("div", {}, el("strong", {}, r.name)), el("code", { class: "muted" }, r.runtime_id)]),
    cell("State", state(r)),
    cell("Last heartbeat", r.last_heartbeat_at === null ? muted("never") : time(r.last_heartbeat_at)),
    cell("Slots in use", `${r.running} / ${r.slots}`),
    cell("Current runs", runs(r)),
    cell("Labels", labels(r)),
    cell("Capabilities", capabilities(r)),
    cell("Actions", actions(r, refresh)),
  ]);
}

initPage();
// a run page links its runtime as #runtime-<name>
wholeTable({
  table: "runtimes",
  list: async () => (await client.runtimes.list()).runtimes,
  row,
  columns: 8,
  empty: "No runtime is registered: `mcphost runtimes add NAME` prints a token for one.",
  errors,
});
