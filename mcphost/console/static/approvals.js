// Approvals: what waits for a human (GET /v1/approvals, pending first by default), each request's
// details, and approve or deny with a note (POST /v1/approvals/{id}). Any `kind` is shown the same way:
// its request as JSON. Re-read every two seconds; a row being answered is left alone until it changes.
import { badge, client, el, initPage, liveTable, pretty, short, showError, time } from "/console/api.js";

const errors = document.getElementById("approvals-error");
const cell = (label, value) => el("td", { "data-label": label }, value);

function decision(approval, refresh) {
  if (approval.status !== "pending") {
    return [approval.note ? el("span", {}, approval.note) : el("span", { class: "muted" }, "no note"), " ", time(approval.decided_at)];
  }
  const note = el("input", { name: "note", class: "note", placeholder: "note (optional)", maxlength: "2000", "aria-label": "Note" });
  const decide = (choice) => async (event) => {
    const buttons = event.currentTarget.parentElement.querySelectorAll("button");
    buttons.forEach((b) => (b.disabled = true));
    try {
      const body = { decision: choice, ...(note.value.trim() ? { note: note.value.trim() } : {}) };
      await client.approvals.decide(approval.approval_id, body);
    } catch (error) {
      showError(errors, error); // a 409 says it was decided elsewhere or expired; the row shows which
      buttons.forEach((b) => (b.disabled = false));
    }
    await refresh();
  };
  const approve = el("button", { type: "button", class: "approve" }, "Approve");
  const deny = el("button", { type: "button", class: "danger deny" }, "Deny");
  approve.addEventListener("click", decide("approve"));
  deny.addEventListener("click", decide("deny"));
  return el("div", { class: "decide" }, [note, approve, deny]);
}

function row(approval, refresh) {
  const run = el("a", { href: `/console/run.html?id=${encodeURIComponent(approval.run_id)}` }, approval.run_id);
  const request = el("details", {}, [el("summary", {}, short(approval.request, 80)), pretty(approval.request)]);
  return el("tr", { "data-approval-id": approval.approval_id, "data-status": approval.status, "data-kind": approval.kind }, [
    cell("Created", time(approval.created_at)),
    cell("Kind", approval.kind),
    cell("Request", request),
    cell("Run", run),
    cell("Agent", approval.agent_id ?? ""),
    cell("Status", badge(approval.status)),
    cell("Expires", time(approval.expires_at)),
    cell("Decision", decision(approval, refresh)),
  ]);
}

initPage();
liveTable({
  table: "approvals",
  list: (query) => client.approvals.list(query),
  key: (a) => a.approval_id,
  version: (a) => `${a.status} ${a.decided_at ?? ""}`,
  row,
  columns: 8,
  errors,
});
