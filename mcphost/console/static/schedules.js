// Schedules: GET /v1/schedules (the config's first, then the API's), re-read every two seconds; Pause,
// Resume and Delete for the API's (POST /v1/schedules/{id}/pause|resume, DELETE /v1/schedules/{id});
// and a form that creates one (POST /v1/schedules with a cron expression or a period).
import { badge, client, el, initPage, pager, poll, showError, time } from "/console/api.js";

const errors = document.getElementById("schedules-error");
const body = document.querySelector("#schedules tbody");
const cell = (label, value) => el("td", { "data-label": label }, value);

function when(spec) {
  if (spec.cron) return [el("code", {}, spec.cron), spec.timezone === "UTC" ? " UTC" : ` ${spec.timezone}`];
  return ["every ", el("code", {}, String(spec.every))];
}

function action(label, cls, run) {
  const button = el("button", { type: "button", class: cls }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await run();
    } catch (error) {
      showError(errors, error);
    }
    await pages.refresh();
  });
  return button;
}

function row(s) {
  const actions = s.origin === "api"
    ? [
        s.paused
          ? action("Resume", "resume", () => client.schedules.resume(s.id))
          : action("Pause", "pause", () => client.schedules.pause(s.id)),
        " ",
        action("Delete", "danger delete", () => client.schedules.delete(s.id)),
      ]
    : el("span", { class: "muted" }, "config file");
  return el("tr", { "data-schedule-id": s.id, "data-origin": s.origin, "data-paused": String(s.paused) }, [
    cell("Id", el("code", {}, s.id)),
    cell("When", when(s.spec)),
    cell("Agent", s.spec.agent ?? el("span", { class: "muted" }, "by binding")),
    cell("Event", s.spec.event_type),
    cell("Next fire", s.next_fire_at === null ? el("span", { class: "muted" }, s.paused ? "paused" : "none left") : time(s.next_fire_at)),
    cell("Last fire", s.last_fire_at === null ? el("span", { class: "muted" }, "never") : time(s.last_fire_at)),
    cell("State", badge(s.paused ? "paused" : "active")),
    cell("", actions),
  ]);
}

function render(items) {
  body.replaceChildren(...(items.length ? items.map(row) : [el("tr", { class: "empty" }, el("td", { colspan: 8 }, "No schedules yet."))]));
}

const pages = pager({
  load: (cursor) => client.schedules.list(cursor ? { limit: 100, cursor } : { limit: 100 }),
  render,
  more: document.getElementById("more"),
  errors,
});

async function agents() {
  try {
    const listed = await client.agents.list();
    const select = document.getElementById("new-agent");
    for (const agent of listed.agents) select.append(el("option", { value: agent.id }, agent.id));
  } catch (error) {
    showError(errors, error);
  }
}

document.getElementById("create").addEventListener("submit", async (event) => {
  event.preventDefault();
  const element = event.currentTarget; // null once the handler awaits
  const form = new FormData(element);
  const spec = { id: form.get("id"), timezone: form.get("timezone") || "UTC" };
  for (const key of ["cron", "every", "agent", "text"]) {
    const value = String(form.get(key) ?? "").trim();
    if (value) spec[key] = key === "every" && /^\d+$/.test(value) ? Number(value) : value;
  }
  const shown = document.getElementById("create-error");
  try {
    await client.schedules.create(spec);
    shown.replaceChildren();
    element.reset();
  } catch (error) {
    showError(shown, error);
  }
  await pages.refresh();
});

initPage();
agents();
pages.refresh().then(() => poll(pages.refresh, 2000));
