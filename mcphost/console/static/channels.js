// Channels: each [channels.<id>] bot (GET /v1/channels) with its platform and agents, the newest event it
// admitted (with its run), its admitted and ignored counts and the newest ignored reason, and its replies'
// newest outbox row, pending and dead counts and the newest error, in plain words. Re-read every two seconds.
import { badge, cell, client, count, el, initPage, muted, runLink, short, time, wholeTable } from "/console/api.js";

function inbound(c) {
  if (c.last_inbound_at === null) return muted("nothing admitted yet");
  return el("div", { class: "inbound" }, [
    el("div", {}, time(c.last_inbound_at)),
    el("div", {}, [c.last_event_type, " ", el("code", { class: "muted" }, c.last_source_event_type ?? "")]),
    el("div", {}, runLink(c.last_run_id)),
  ]);
}

function ignored(c) {
  if (c.last_ignored_at === null) return muted("none");
  return el("div", {}, [
    el("div", {}, time(c.last_ignored_at)),
    el("div", {}, [el("code", {}, c.last_ignored_reason), c.last_ignored_type ? ` (${c.last_ignored_type})` : ""]),
  ]);
}

function delivery(d) {
  if (d === null) return muted("no reply yet");
  return el("div", {}, [
    badge(d.status), " ", d.type,
    el("div", {}, time(d.delivered_at ?? d.created_at)),
    d.run_id ? el("div", {}, runLink(d.run_id)) : null,
  ]);
}

function failure(d) {
  if (d === null) return muted("none");
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
    cell("Agents", c.agents.length ? c.agents.join(", ") : muted("none bound")),
    cell("Last inbound", inbound(c)),
    cell("Admitted / ignored", `${count(c.accepted)} / ${count(c.ignored)}`),
    cell("Last ignored", ignored(c)),
    cell("Last delivery", delivery(c.last_delivery)),
    cell("Pending", count(c.pending)),
    cell("Dead", dead),
    cell("Last error", failure(c.last_error)),
  ]);
}

initPage();
// a run page links its channel as #channel-<id>
wholeTable({
  table: "channels",
  list: async () => (await client.channels.list()).channels,
  row,
  columns: 9,
  empty: "No channel is configured: add a [channels.<id>] table to mcphost.toml.",
  errors: document.getElementById("channels-error"),
});
