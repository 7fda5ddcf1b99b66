// Drives the client against a real `mcphost serve` whose URL is $MCPHOST_URL (tests/clients/
// test_typescript.py starts it with the echo, misbehave and cron agents and runs `node --test`).
import assert from "node:assert/strict";
import { createServer, connect, type Socket } from "node:net";
import { test } from "node:test";

import { APIConnectionError, APIError, McphostClient, type AgentEvent } from "../index.js";

const url = process.env.MCPHOST_URL;
if (!url) throw new Error("MCPHOST_URL names the mcphost serve these tests drive");
const client = new McphostClient({ baseUrl: url, apiKey: process.env.MCPHOST_API_KEY });

function message(text: string, bot = "echo", conversation = "ts"): AgentEvent {
  return {
    event_type: "message.received",
    conversation: { conversation_id: conversation, bot_id: bot },
    actor: { actor_id: "u1" },
    input: { text },
  } as AgentEvent;
}

test("an event is sent, its run waited for, read and listed", async () => {
  const admitted = await client.events.send(message("hello", "echo", "ts-send"));
  assert.equal(admitted.created, true);
  const ended = await client.runs.wait(admitted.run_id, { timeoutMs: 60_000 });
  assert.equal(ended.run.status, "completed");
  assert.deepEqual(ended.attempts.map((a) => a.run_id), [admitted.run_id]);
  const page = await client.runs.list({ conversation_id: "ts-send" });
  assert.deepEqual(page.items.map((r) => r.run_id), [admitted.run_id]);
});

test("a streamed event yields typed results once each, then its end", async () => {
  const stream = client.events.stream(message("hi there", "echo", "ts-stream"));
  const items = [];
  for await (const item of stream) items.push(item);
  assert.equal(stream.end?.status, "completed");
  assert.equal(stream.end?.run_id, stream.runId);
  assert.deepEqual(items.map((i) => i.seq), items.map((_, n) => n + 1));
  const completed = items.map((i) => i.result).find((r) => r?.type === "message.completed");
  assert.ok(completed && completed.type === "message.completed");
  assert.equal(completed.data.message.content, "hi there");
  assert.equal(items.at(-1)?.result?.type, "run.completed");
});

test("an error answer is an APIError with the body's code, message, details and the status", async () => {
  await assert.rejects(client.events.send({ ...message("x"), agent_id: "ghost" } as AgentEvent), (error) => {
    assert.ok(error instanceof APIError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
    assert.match(error.message, /ghost/);
    return true;
  });
  await assert.rejects(client.runs.list({ limit: 1000 }), (error) => {
    assert.ok(error instanceof APIError);
    assert.equal(error.status, 400);
    assert.equal(error.code, "invalid_argument");
    assert.equal((error.details.errors as { loc: string }[])[0]?.loc, "query.limit");
    return true;
  });
});

test("a run is cancelled, and a wait past its deadline rejects with a TimeoutError", async () => {
  const admitted = await client.events.send(message("slow:30", "bad", "ts-slow"));
  const slow = await client.events.send(message("slow:30", "bad", "ts-slow-2"));
  await assert.rejects(client.runs.wait(slow.run_id, { timeoutMs: 300 }), { name: "TimeoutError" });
  const answer = await client.runs.cancel(admitted.run_id, "enough");
  assert.equal(answer.cancel_requested, true);
  const ended = await client.runs.wait(admitted.run_id, { timeoutMs: 60_000 });
  assert.equal(ended.run.status, "cancelled");
  await client.runs.cancel(slow.run_id);
});

test("schedules are created, paused, resumed, listed and deleted; approvals and conversations are read", async () => {
  const created = await client.schedules.create({ id: "ts-nightly", cron: "0 3 * * *", agent: "cron", text: "hi" } as never);
  assert.equal(created.origin, "api");
  assert.equal((await client.schedules.pause("ts-nightly")).paused, true);
  assert.equal((await client.schedules.resume("ts-nightly")).paused, false);
  assert.ok((await client.schedules.list()).items.some((s) => s.id === "ts-nightly"));
  assert.deepEqual(await client.schedules.delete("ts-nightly"), { schedule_id: "ts-nightly", deleted: true });
  assert.deepEqual((await client.approvals.list({ status: "pending" })).items, []);
  await assert.rejects(client.approvals.get("apr_missing"), { name: "APIError", status: 404 });
  const admitted = await client.events.send(message("remember", "echo", "ts-conv"));
  await client.runs.wait(admitted.run_id);
  const transcript = await client.conversations.transcript("ts-conv");
  assert.ok(transcript.items.some((t) => t.role === "user" && t.content === "remember"));
  const events = await client.conversations.events("ts-conv", { event_type: ["message.received"] });
  assert.deepEqual(events.items.map((e) => e.event_id), [admitted.event_id]);
});

/** A loopback proxy to the server that cuts the first `cuts` connections right after `marker`. */
async function cuttingProxy(marker: string, cuts: number) {
  const target = new URL(url as string);
  const requests: string[] = [];
  let cut = 0;
  const server = createServer((client: Socket) => {
    const index = requests.length;
    requests.push("");
    const upstream = connect(Number(target.port), target.hostname);
    client.on("data", (chunk) => {
      requests[index] += chunk.toString("latin1");
      upstream.write(chunk);
    });
    let seen = "";
    upstream.on("data", (chunk) => {
      const text = chunk.toString("latin1");
      const at = (seen + text).indexOf(marker);
      if (index < cuts && at !== -1) {
        client.write(chunk.subarray(0, at + marker.length - seen.length));
        cut += 1;
        client.destroy();
        upstream.destroy();
        return;
      }
      seen += text;
      client.write(chunk);
    });
    upstream.on("end", () => client.end());
    upstream.on("error", () => client.destroy());
    client.on("error", () => upstream.destroy());
    client.on("close", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address && typeof address === "object");
  return {
    url: `http://127.0.0.1:${address.port}`,
    requests,
    cuts: () => cut,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

test("a run's records, audit and model calls, the usage totals, conversations, agents and runners are read", async () => {
  const admitted = await client.events.send(message("read me", "echo", "ts-reads"));
  await client.runs.wait(admitted.run_id, { timeoutMs: 60_000 });
  const records = await client.runs.records(admitted.run_id);
  assert.ok(records.transcript.some((row) => row.role === "user"));
  const audit = await client.runs.audit(admitted.run_id, { limit: 10 });
  assert.ok(Array.isArray(audit.items));
  const usage = await client.runs.usage(admitted.run_id);
  assert.deepEqual(usage, { run_id: admitted.run_id, items: [] }); // echo calls no host model
  const totals = await client.usage.totals({ group_by: "day", from: "2000-01-01T00:00:00Z" });
  assert.equal(totals.group_by, "day");
  const conversations = await client.conversations.list({ prefix: "ts-reads" });
  assert.deepEqual(conversations.items.map((c) => c.conversation_id), ["ts-reads"]);
  const agents = await client.agents.list();
  assert.ok(agents.agents.some((a) => a.id === "echo"));
  const runners = await client.runners.list();
  assert.ok(runners.runners.length > 0);
  await assert.rejects(client.runs.usage("run_nobody"), (error) => error instanceof APIError && error.status === 404);
  const deleted = await client.conversations.delete("ts-reads");
  assert.equal(deleted.conversation_id, "ts-reads");
});

test("a stream cut mid-event resumes with Last-Event-ID and hands each result out once", async () => {
  const proxy = await cuttingProxy("id: 3\n", 2);
  try {
    const through = new McphostClient({ baseUrl: proxy.url, apiKey: process.env.MCPHOST_API_KEY });
    const stream = through.events.stream(message("flood:40", "bad", "ts-cut"));
    const seqs: number[] = [];
    for await (const item of stream) seqs.push(item.seq);
    assert.equal(stream.end?.status, "completed");
    assert.deepEqual(seqs, Array.from({ length: 41 }, (_, n) => n + 1));
    assert.equal(proxy.cuts(), 2);
    assert.match(proxy.requests[0] ?? "", /^POST \/v1\/events\?stream=true /);
    assert.match(proxy.requests[1] ?? "", new RegExp(`^GET /v1/runs/${stream.runId}/results `));
    assert.match((proxy.requests[1] ?? "").toLowerCase(), /\r\nlast-event-id: 2\r\n/);
  } finally {
    await proxy.close();
  }
});

test("a stream cut every time fails with APIConnectionError after its reconnects", async () => {
  const admitted = await client.events.send(message("flood:5", "bad", "ts-doomed"));
  await client.runs.wait(admitted.run_id);
  const proxy = await cuttingProxy("id: 1\n", 1000);
  try {
    const flaky = new McphostClient({ baseUrl: proxy.url, apiKey: process.env.MCPHOST_API_KEY, reconnects: 2 });
    await assert.rejects(flaky.runs.stream(admitted.run_id).untilEnd(), (error) => {
      assert.ok(error instanceof APIConnectionError);
      assert.match(error.message, /dropped 3 times in a row/);
      return true;
    });
    assert.equal(proxy.cuts(), 3);
  } finally {
    await proxy.close();
  }
});

test("a server that is not there is an APIConnectionError", async () => {
  const nowhere = new McphostClient({ baseUrl: "http://127.0.0.1:9" });
  await assert.rejects(nowhere.runs.list(), { name: "APIConnectionError" });
  await assert.rejects(nowhere.events.stream(message("x")).untilEnd(), { name: "APIConnectionError" });
});
