// Channels: each [channels.<id>] bot (GET /v1/channels) with its platform and agents, the newest event it
// admitted (with its run), its admitted and ignored counts and the newest ignored reason, and its replies'
// newest outbox row, pending and dead counts and the newest error, in plain words. Re-read every two seconds.
import { badge, client, count, el, initPage, poll, showError, short, time } from "/console/api.js";

const errors = document.getElementById("channels-error");
const body = document.querySelector("#channels tbody");
const cell = (label, value) => el("td", { "data-label": label }, value);
const none = (text) => el("span", { class: "muted" }, text);
const runLink = (runId) => el("a", { href: `/console/run.html?id=${encodeURIComponent(runId)}` }, runId);

function inbound(c) {
  if (c.last_inbound_at === null) return none("nothing admitted yet");
  return el("div", { class: "inbound" }, [
    el("div", {}, time(c.last_inbound_at)),
    el("div", {}, [c.last_event_type, " ", el("code", { class: "muted" }, c.last_source_event_type ?? "")]),
    el("div", {}, runLink(c.last_run_id)),
  ]);
}

function ignored(c) {
  if (c.last_ignored_at === null) return none("none");
  return el("div", {}, [
    el("div", {}, time(c.last_ignored_at)),
    el("div", {}, [el("code", {}, c.last_ignored_reason), c.last_ignored_type ? ` (${c.last_ignored_type})` : ""]),
  ]);
}

function delivery(d) {
  if (d === null) return none("no reply yet");
  return el("div", {}, [
    badge(d.status), " ", d.type,
    el("div", {}, time(d.delivered_at ?? d.created_at)),
    d.run_id ? el("div", {}, runLink(d.run_id)) : null,
  ]);
}

function failure(d) {
  if (d === null) return none("none");
  return el("div", { class: "error" }, [
    el("div", { class: "last-error" }, short(d.last_error, 300)),
    el("div", { class: "muted" }, [`${d.status}, ${d.attempts} attempt${d.attempts === 1 ? "" : "s"} · `, d.type, d.run_id ? " · " : "", d.run_id ? runLink(d.run_id) : ""]),
  ]);
}

function row(c) {
  const dead = c.dead
    ? el("a", { href: "/console/deliveries.html?status=dead", class: "error" }, count(c.dead))
    : count(c.dead);
  return el("tr", { id: `channel-${c.channel_id}`, "data-channel": c.channel_id }, [
    cell("Channel", [el("code", {}, c.channel_id), " ", el("span", { class: "muted" }, c.platform)]),
    cell("Agents", c.agents.length ? c.agents.join(", ") : none("none bound")),
    cell("Last inbound", inbound(c)),
    cell("Admitted / ignored", `${count(c.accepted)} / ${count(c.ignored)}`),
    cell("Last ignored", ignored(c)),
    cell("Last delivery", delivery(c.last_delivery)),
    cell("Pending", count(c.pending)),
    cell("Dead", dead),
    cell("Last error", failure(c.last_error)),
  ]);
}

async function refresh() {
  try {
    const answer = await client.channels.list();
    body.replaceChildren(...(answer.channels.length
      ? answer.channels.map(row)
      : [el("tr", { class: "empty" }, el("td", { colspan: 9 }, "No channel is configured: add a [channels.<id>] table to mcphost.toml."))]));
    errors.replaceChildren();
  } catch (error) {
    showError(errors, error);
  }
}

initPage();
refresh().then(() => {
  // a run page links its channel as #channel-<id>: the row exists only now
  if (location.hash) document.getElementById(decodeURIComponent(location.hash.slice(1)))?.scrollIntoView();
  poll(refresh, 2000);
});
