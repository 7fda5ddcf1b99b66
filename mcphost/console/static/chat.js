// Debug chat: send an event to a chosen agent (POST /v1/events?stream=true) and show its results as they
// are stored — text deltas, tool calls, the final message and the run's end. The event carries the scope
// the agent's `match` asks for (its first value of each key), so the chosen agent takes it.
import { badge, client, el, initPage, params, short, showError } from "/console/api.js";

const form = document.getElementById("chat-form");
const log = document.getElementById("chat-log");
const errors = document.getElementById("chat-error");
const agentSelect = document.getElementById("chat-agent");
const conversation = document.getElementById("chat-conversation");

function extraBody() {
  const text = document.getElementById("chat-extra").value.trim();
  if (!text) return {};
  const value = JSON.parse(text); // a SyntaxError names the position
  if (!value || typeof value !== "object" || Array.isArray(value)) throw new Error("The event body must be a JSON object.");
  return value;
}

let agents = new Map();

/** The scope an event needs for `agent` to take it: the first value of each of its `match` keys. */
function scopeFor(agent) {
  const conversationScope = { conversation_id: conversation.value.trim() };
  const actor = { actor_id: "console" };
  const out = {};
  for (const [key, expected] of Object.entries(agent?.match ?? {})) {
    const value = Array.isArray(expected) ? expected[0] : expected;
    if (["conversation_id", "thread_id", "bot_id", "workspace_id"].includes(key)) conversationScope[key] = value;
    else if (key === "actor_id" || key === "actor_type") actor[key] = value;
    else if (key === "subject_type" || key === "subject_id") out.subject = { subject_type: "console", subject_id: "console", ...out.subject, [key]: value };
    else if (key === "source") out.source = value;
  }
  return { conversation: conversationScope, actor, ...out };
}

function onAgent() {
  const agent = agents.get(agentSelect.value);
  if (!agent) return;
  const fixed = agent.match.conversation_id;
  if (fixed) conversation.value = Array.isArray(fixed) ? fixed[0] : fixed;
  const type = document.getElementById("chat-event-type");
  if (!agent.event_types.includes("*") && !agent.event_types.includes(type.value)) type.value = agent.event_types[0];
}

async function send(event) {
  event.preventDefault();
  errors.replaceChildren();
  const text = document.getElementById("chat-text").value;
  let extra;
  try {
    extra = extraBody();
  } catch (error) {
    showError(errors, new Error(`Event body: ${error.message}`));
    return;
  }
  const envelope = {
    event_type: document.getElementById("chat-event-type").value.trim(),
    ...scopeFor(agents.get(agentSelect.value)),
    agent_id: agentSelect.value,
    ...(text ? { input: { text } } : {}),
    ...extra,
  };
  const button = document.getElementById("chat-send");
  button.disabled = true;
  if (text) log.append(el("li", { class: "user" }, [el("span", { class: "who" }, "you"), el("span", { class: "text" }, text)]));
  const reply = el("span", { class: "text" });
  const tools = el("ul", { class: "tools" });
  const status = el("span", { class: "status" });
  const bubble = el("li", { class: "assistant", "data-state": "streaming" }, [el("span", { class: "who" }, envelope.agent_id), tools, reply, status]);
  log.append(bubble);
  document.getElementById("chat-text").value = "";
  const calls = new Map();
  try {
    const stream = client.events.stream(envelope);
    const runLink = (runId, state) =>
      status.replaceChildren(el("a", { href: `/console/run.html?id=${encodeURIComponent(runId)}` }, runId), " ", badge(state));
    for await (const item of stream) {
      if (stream.admitted && !status.childElementCount) runLink(stream.admitted.run_id, stream.admitted.status);
      const data = item.raw;
      if (data.type === "message.delta") {
        reply.append(data.data.chunk.content ?? "");
        bubble.dataset.deltas = String(Number(bubble.dataset.deltas || 0) + 1);
      } else if (data.type === "message.completed") {
        reply.textContent = data.data.message.content ?? short(data.data.message.contents ?? "");
        bubble.dataset.final = "true";
      } else if (data.type === "tool.call.started") {
        const item = el("li", { "data-tool": data.data.tool_name }, `${data.data.tool_name} …`);
        calls.set(data.data.tool_call_id, item);
        tools.append(item);
      } else if (data.type === "tool.call.completed") {
        const item = calls.get(data.data.tool_call_id) ?? tools.appendChild(el("li", { "data-tool": data.data.tool_name }));
        item.textContent = `${data.data.tool_name} ${data.data.error_code ? "✗ " + data.data.error_code : "✓"}`;
      }
    }
    const end = stream.end;
    runLink(end.run_id, end.status);
    if (end.error) status.append(el("span", { class: "error" }, ` ${end.error.code}: ${end.error.message}`));
    bubble.dataset.state = end.status;
  } catch (error) {
    showError(errors, error);
    bubble.dataset.state = "error";
  } finally {
    button.disabled = false;
  }
}

async function main() {
  initPage();
  conversation.value = params().get("conversation") || `console-${Math.random().toString(36).slice(2, 8)}`;
  try {
    const view = await client.agents.list();
    agents = new Map(view.agents.map((a) => [a.id, a]));
    for (const agent of view.agents) agentSelect.append(el("option", { value: agent.id }, `${agent.id} (${agent.runner})`));
    const wanted = params().get("agent");
    if (wanted) agentSelect.value = wanted;
    onAgent();
  } catch (error) {
    showError(errors, error);
  }
  agentSelect.addEventListener("change", onAgent);
  form.addEventListener("submit", send);
}

main();
