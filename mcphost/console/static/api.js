// The console's one door to the host: /v1 requests with the API key, the login prompt, SSE over fetch,
// and the few DOM helpers every page uses. The key lives in sessionStorage (this tab, until it closes).
// EventSource cannot send an Authorization header, so streams are read with fetch.

const KEY = "mcphost.apiKey";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

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

async function errorOf(res) {
  try {
    const body = await res.json();
    if (body && body.error) return new ApiError(res.status, body.error.code, body.error.message);
  } catch {
    // not JSON: fall through
  }
  return new ApiError(res.status, "http_" + res.status, `${res.status} ${res.statusText}`);
}

/** A /v1 request; a 401 asks for the key and tries again. Other refusals throw ApiError. */
export async function api(path, { method = "GET", body, accept = "application/json", signal, headers: extra = {} } = {}) {
  for (;;) {
    const headers = { ...extra, Accept: accept };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
    if (res.status === 401) {
      const error = await errorOf(res);
      await login(key ? "That key was refused: " + error.message : "");
      continue;
    }
    if (!res.ok) throw await errorOf(res);
    return res;
  }
}

export async function getJson(path, options) {
  return (await api(path, options)).json();
}

/** The events of an SSE response, as {event, data, id}, until the stream ends. */
export async function* sse(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { event: "message", data: "", id: null };
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event.event = text;
        else if (field === "data") data.push(text);
        else if (field === "id") event.id = text;
      }
      if (data.length) {
        event.data = data.join("\n");
        yield event;
      }
    }
  }
}

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
 * Newest-first pages of one /v1 list. `refresh` re-reads the first page (`query(null)`) and renders it
 * with the older pages the #more button loaded (`query(cursor)`); `reset` drops those (the filters
 * changed) and answers to requests sent before it are ignored.
 */
export function pager({ query, render, more, errors }) {
  let older = [];
  let cursor = null;
  let generation = 0;
  async function refresh() {
    const mine = generation;
    try {
      const page = await getJson(query(null));
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
      const page = await getJson(query(cursor));
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
 * A live table of one /v1 list filtered by `status` (the page's #filters form), re-read every `ms`. A row
 * is rebuilt only when `version(item)` changes, so a note being typed into a row survives the
 * refreshes around it. `row(item, refresh)` builds one; `refresh` is for after an action.
 */
export function liveTable({ table, path, key, version, row, columns, errors, ms = 2000 }) {
  const form = document.getElementById("filters");
  const status = document.getElementById("filter-status");
  const body = document.querySelector(`#${table} tbody`);
  const rows = new Map(); // key → {version, node}
  const wanted = params().get("status");
  if (wanted !== null) status.value = wanted;

  const query = (after) => {
    const q = new URLSearchParams({ limit: "100" });
    if (status.value) q.set("status", status.value);
    if (after) q.set("cursor", after);
    return `${path}?${q}`;
  };

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

  const pages = pager({ query, render, more: document.getElementById("more"), errors });
  form.addEventListener("change", () => {
    history.replaceState(null, "", "?" + new URLSearchParams({ status: status.value }));
    pages.reset();
  });
  form.addEventListener("submit", (e) => e.preventDefault());
  pages.refresh().then(() => poll(pages.refresh, ms));
}
