// Deliveries: the outbound webhook outbox (GET /v1/deliveries), the dead-letter list first by default,
// and Redeliver (POST /v1/deliveries/{id}/redeliver: pending again, due now, same webhook-id).
// Re-read every two seconds.
import { badge, client, el, initPage, liveTable, pretty, short, showError, time } from "/console/api.js";

const errors = document.getElementById("deliveries-error");
const cell = (label, value) => el("td", { "data-label": label }, value);

function row(delivery, refresh) {
  const run = delivery.run_id
    ? el("a", { href: `/console/run.html?id=${encodeURIComponent(delivery.run_id)}` }, delivery.run_id)
    : "";
  const again = el("button", { type: "button", class: "redeliver", disabled: delivery.status === "pending" || null }, "Redeliver");
  again.addEventListener("click", async () => {
    again.disabled = true;
    try {
      await client.deliveries.redeliver(delivery.delivery_id);
    } catch (error) {
      showError(errors, error);
    }
    await refresh();
  });
  const body = el("details", {}, [el("summary", {}, delivery.delivery_id), pretty(delivery.body)]);
  return el("tr", { "data-delivery-id": delivery.delivery_id, "data-status": delivery.status }, [
    cell("Created", time(delivery.created_at)),
    cell("Type", [delivery.type, body]),
    cell("Receiver", el("code", {}, short(delivery.url, 80))),
    cell("Run", run),
    cell("Status", badge(delivery.status)),
    cell("Attempts", String(delivery.attempts)),
    cell("Last error", delivery.last_error ? short(delivery.last_error, 160) : ""),
    cell("Next", delivery.status === "pending" ? time(delivery.next_attempt_at) : time(delivery.delivered_at)),
    cell("", again),
  ]);
}

initPage();
liveTable({
  table: "deliveries",
  list: (query) => client.deliveries.list(query),
  key: (d) => d.delivery_id,
  version: (d) => `${d.status} ${d.attempts} ${d.next_attempt_at}`,
  row,
  columns: 9,
  errors,
});
