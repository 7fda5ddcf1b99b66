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
        el("p", { class: "muted" }, "This host needs its API key ([host] api_key). It is kept for this browser tab only."),
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

/** The query-string parameters of this page. */
export function params() {
  return new URLSearchParams(location.search);
}

/** The pages of the shared navigation, in order. */
const PAGES = [
  ["/console/", "Runs"],
  ["/console/chat.html", "Chat"],
  ["/console/explain.html", "Explain"],
  ["/console/conversation.html", "Conversations"],
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
