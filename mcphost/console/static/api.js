// The console's one door to the host: the mcphost TypeScript client (client.js, its browser bundle built
// from clients/typescript by `npm run bundle`) with the API key and the login prompt, and the few DOM
// helpers every page uses. Every /v1 call and stream of every page goes through `client`. The key lives
// in sessionStorage (this tab, until it closes).
import { APIError, McphostClient } from "/console/client.js";

export { APIError };

const KEY = "mcphost.apiKey";

let pendingLogin = null;

/** Ask for the API key (once, however many requests were refused meanwhile). */
function login(reason) {
  if (pendingLogin) return pendingLogin;
  pendingLogin = new Promise((resolve) => {
    const dialog = el("dialog", { id: "login", "aria-labelledby": "login-title" }, [
      el("form", {}, [
        el("h2", { id: "login-title" }, "API key"),
        el("p", { class: "muted" }, "This host needs an API key ([[api_keys]] or [host] api_key); what the console can show and do is what its role allows. It is kept for this browser tab only."),
        el("p", { class: "error", id: "login-reason" }, reason),
        el("input", { type: "password", name: "key", id: "login-key", autocomplete: "current-password", required: "", placeholder: "API key" }),
        el("button", { type: "submit" }, "Sign in"),
      ]),
    ]);
    dialog.addEventListener("cancel", (e) => e.preventDefault()); // nothing works without it
    dialog.querySelector("form").addEventListener("submit", (e) => {
      e.preventDefault();
      const key = dialog.querySelector("input").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      dialog.close();
      dialog.remove();
      pendingLogin = null;
      resolve();
    });
    document.body.append(dialog);
    dialog.showModal();
  });
  return pendingLogin;
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
}

/**
 * The client's `fetch`: adds the tab's key, never answers from the HTTP cache, and on a 401 asks for the
 * key and sends the request again (its body is a string, so it can be sent twice).
 */
async function keyedFetch(url, init = {}) {
  for (;;) {
    const key = sessionStorage.getItem(KEY);
    const headers = { ...(init.headers ?? {}) };
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch(url, { ...init, headers, cache: "no-store" });
    if (res.status !== 401) return res;
    const error = await APIError.from(res);
    await login(key ? "That key was refused: " + error.message : "");
  }
}

/** The host this page came from, through the TypeScript client. */
export const client = new McphostClient({ baseUrl: location.origin, fetch: keyedFetch });

/** document.createElement with attributes and children (strings become text: never HTML). */
export function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of [].concat(children)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function time(epoch) {
  if (epoch === null || epoch === undefined) return "";
  const d = new Date(epoch * 1000);
  return d.toLocaleString(undefined, { hour12: false });
}

export function duration(start, end) {
  if (start === null || start === undefined) return "";
  const s = (end ?? Date.now() / 1000) - start;
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`;
}

/** A count with thousands separators: "12,345". */
export function count(value) {
  return value.toLocaleString("en-US");
}

/** US dollars to the micro-dollar, trailing zeros past the cents dropped: "$7.00", "$0.00025". */
export function usd(value) {
  return `$${value.toFixed(6).replace(/0{1,4}$/, "")}`;
}

export function short(value, max = 120) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text === undefined) return "";
  return text.length > max ? text.slice(0, max - 1) + "…" : text;
}

export function badge(status) {
  return el("span", { class: `badge status-${status}`, "data-status": status }, status);
}

export function pretty(value) {
  return el("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

export function showError(where, error) {
  where.replaceChildren(el("p", { class: "error", role: "alert" }, error.message || String(error)));
}

/** Call `refresh` every `ms` while the tab is visible (after the call before it has ended). */
export function poll(refresh, ms) {
  (async function loop() {
    for (;;) {
      await new Promise((r) => setTimeout(r, ms));
      if (!document.hidden) await refresh();
    }
  })();
}

/** A table cell; `data-label` names its column where the narrow layout stacks a row's cells. */
export function cell(label, value) {
  return el("td", { "data-label": label }, value);
}

/** Muted text standing for an empty value: "none", "never". */
export function muted(text) {
  return el("span", { class: "muted" }, text);
}

/** A link to the run's page. */
export function runLink(runId) {
  return el("a", { href: `/console/run.html?id=${encodeURIComponent(runId)}` }, runId);
}

/** The query-string parameters of this page. */
export function params() {
  return new URLSearchParams(location.search);
}

/** The pages of the shared navigation, in order. */
const PAGES = [
  ["/console/", "Runs"],
  ["/console/chat.html", "Chat"],
  ["/console/explain.html", "Explain"],
  ["/console/conversations.html", "Conversations"],
  ["/console/approvals.html", "Approvals"],
  ["/console/schedules.html", "Schedules"],
  ["/console/deliveries.html", "Deliveries"],
  ["/console/channels.html", "Channels"],
  ["/console/runtimes.html", "Runtimes"],
  ["/console/usage.html", "Usage"],
  ["/console/agents.html", "Agents"],
];

/** Fill the page's <header> with the shared navigation (the current page marked) and the "forget key" button. */
export function initPage() {
  const links = PAGES.map(([href, label]) =>
    el("a", { href, "aria-current": href === location.pathname ? "page" : null }, label),
  );
  const forget = el(
    "button",
    { type: "button", id: "forget-key", class: "link", title: "Forget the API key kept for this tab" },
    "Forget key",
  );
  forget.addEventListener("click", () => {
    forgetKey();
    location.reload();
  });
  document.querySelector("body > header").replaceChildren(
    el("a", { class: "brand", href: "/console/" }, "mcphost"),
    el("nav", {}, links),
    forget,
  );
}

/**
 * Newest-first pages of one /v1 list. `refresh` re-reads the first page (`load(null)`, a client call) and
 * renders it with the older pages the #more button loaded (`load(cursor)`); `reset` drops those (the
 * filters changed) and answers to requests sent before it are ignored.
 */
export function pager({ load, render, more, errors }) {
  let older = [];
  let cursor = null;
  let generation = 0;
  async function refresh() {
    const mine = generation;
    try {
      const page = await load(null);
      if (mine !== generation) return;
      if (!older.length) {
        cursor = page.next_cursor;
        more.hidden = !page.has_more;
      }
      render([...page.items, ...older]);
      errors.replaceChildren();
    } catch (error) {
      if (mine === generation) showError(errors, error);
    }
  }
  more.addEventListener("click", async () => {
    const mine = generation;
    try {
      const page = await load(cursor);
      if (mine !== generation) return;
      older = [...older, ...page.items];
      cursor = page.next_cursor;
      more.hidden = !page.has_more;
      await refresh();
    } catch (error) {
      showError(errors, error);
    }
  });
  return {
    refresh,
    reset() {
      generation += 1;
      older = [];
      return refresh();
    },
  };
}

/**
 * A live table of one /v1 list (`list(query)`, a client call) filtered by `status` (the page's #filters
 * form), re-read every `ms`. A row is rebuilt only when `version(item)` changes, so a note being typed
 * into a row survives the refreshes around it. `row(item, refresh)` builds one; `refresh` is for after
 * an action.
 */
export function liveTable({ table, list, key, version, row, columns, errors, ms = 2000 }) {
  const form = document.getElementById("filters");
  const status = document.getElementById("filter-status");
  const body = document.querySelector(`#${table} tbody`);
  const rows = new Map(); // key → {version, node}
  const wanted = params().get("status");
  if (wanted !== null) status.value = wanted;

  const load = (after) => list({ limit: 100, status: status.value || undefined, cursor: after || undefined });

  function render(items) {
    const seen = new Set();
    const nodes = [];
    for (const item of items) {
      const id = key(item);
      if (seen.has(id)) continue;
      seen.add(id);
      let kept = rows.get(id);
      if (!kept || kept.version !== version(item)) {
        kept = { version: version(item), node: row(item, () => pages.refresh()) };
        rows.set(id, kept);
      }
      nodes.push(kept.node);
    }
    for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
    if (!nodes.length) nodes.push(el("tr", { class: "empty" }, el("td", { colspan: columns }, "Nothing matches.")));
    const same = nodes.length === body.children.length && nodes.every((n, i) => body.children[i] === n);
    if (!same) body.replaceChildren(...nodes);
  }

  const pages = pager({ load, render, more: document.getElementById("more"), errors });
  form.addEventListener("change", () => {
    history.replaceState(null, "", "?" + new URLSearchParams({ status: status.value }));
    pages.reset();
  });
  form.addEventListener("submit", (e) => e.preventDefault());
  pages.refresh().then(() => poll(pages.refresh, ms));
}

/**
 * A table of one whole /v1 list (no pages, no filters), re-read every `ms`. `list()` (a client call)
 * answers the items; `row(item, refresh)` builds each (`refresh` is for after an action); with none,
 * one row over `columns` cells says `empty`. Once the first answer is shown, the row the URL's
 * #fragment names (`#<kind>-<id>`: how other pages link a row) is scrolled to.
 */
export function wholeTable({ table, list, row, columns, empty, errors, ms = 2000 }) {
  const body = document.querySelector(`#${table} tbody`);
  async function refresh() {
    try {
      const items = await list();
      body.replaceChildren(...(items.length
        ? items.map((item) => row(item, refresh))
        : [el("tr", { class: "empty" }, el("td", { colspan: columns }, empty))]));
      errors.replaceChildren();
    } catch (error) {
      showError(errors, error);
    }
  }
  refresh().then(() => {
    // the row exists only now
    if (location.hash) document.getElementById(decodeURIComponent(location.hash.slice(1)))?.scrollIntoView();
    poll(refresh, ms);
  });
}
