/**
 * The mcphost HTTP API from TypeScript: `McphostClient` with its resources (events, runs, approvals,
 * schedules, conversations, deliveries, usage, channels, runtimes, agents, runners, knowledge, tools, explain,
 * artifacts),
 * `APIError` / `APIConnectionError`, and `RunStream`, a run's result stream
 * (SSE) that resumes a dropped connection with `Last-Event-ID`. Uses only `fetch`, so it runs in Node 18+
 * and browsers. The answer types are generated from the API's OpenAPI document, the results' from the
 * protocol's JSON Schema (`src/generated/`, `npm run generate`).
 */

import type { components } from "./generated/openapi.js";
import type { AgentRunResult } from "./generated/protocol.js";
import { readEvents } from "./sse.js";

export type Schemas = components["schemas"];
export type AgentEvent = Schemas["AgentEventEnvelope"];
export type Admitted = Schemas["Admitted"];
export type Run = Schemas["Run"];
export type RunView = Schemas["RunView"];
export type RunsPage = Schemas["RunsPage"];
export type RunStatus = Schemas["RunStatus"];
export type CancelAnswer = Schemas["CancelAnswer"];
export type ApprovalRecord = Schemas["ApprovalRecord"];
export type ApprovalsPage = Schemas["ApprovalsPage"];
export type DecisionBody = Schemas["DecisionBody"];
export type ScheduleSpec = Schemas["ScheduleSpec"];
export type ScheduleStatus = Schemas["ScheduleStatus"];
export type SchedulesPage = Schemas["SchedulesPage"];
export type ScheduleDeleted = Schemas["ScheduleDeleted"];
export type TranscriptPage = Schemas["TranscriptPage"];
export type EventsPage = Schemas["EventsPage"];
export type ConversationsPage = Schemas["ConversationsPage"];
export type ConversationDeleted = Schemas["ConversationDeleted"];
export type AuditPage = Schemas["AuditPage"];
export type RunRecords = Schemas["RunRecords"];
export type DeliveriesPage = Schemas["DeliveriesPage"];
export type DeliveryRecord = Schemas["DeliveryRecord"];
export type UsageGroup = Schemas["UsageAnswer"]["group_by"];
export type UsageAnswer = Schemas["UsageAnswer"];
export type UsageTotal = Schemas["UsageTotal"];
export type RunUsage = Schemas["RunUsage"];
export type ModelCallRecord = Schemas["ModelCallRecord"];
export type AgentsView = Schemas["AgentsView"];
export type ChannelsView = Schemas["ChannelsView"];
export type ChannelView = Schemas["ChannelView"];
export type RuntimesView = Schemas["RuntimesView"];
export type RuntimeView = Schemas["RuntimeView"];
export type RuntimeClaim = Schemas["RuntimeClaim"];
export type RunRuntimeView = Schemas["RunRuntimeView"];
export type RuntimeAudit = Schemas["RuntimeAudit"];
export type RunnersView = Schemas["RunnersView"];
export type KnowledgeView = Schemas["KnowledgeView"];
export type KnowledgeSearchAnswer = Schemas["KnowledgeSearchAnswer"];
export type ToolsView = Schemas["ToolsView"];
export type ExplainRequest = Schemas["ExplainRequest"];
export type Explanation = Schemas["Explanation"];
export type ArtifactRecord = Schemas["ArtifactRecord"];
export type { AgentRunResult };

/** The result types this protocol version defines (`ResultEvent.result` is set for these). */
export const RESULT_TYPES: ReadonlySet<string> = new Set([
  "message.delta",
  "message.completed",
  "tool.call.started",
  "tool.call.completed",
  "artifact.created",
  "state.updated",
  "action.requested",
  "interaction.requested",
  "run.completed",
  "run.failed",
]);

/** The highest result sequence a results stream takes: resumed there, it sends only `event: end`. */
const WAIT_AFTER = 2 ** 31 - 1;

export interface ClientOptions {
  /** The server; default `http://127.0.0.1:8787`. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** How many times in a row a dropped result stream is resumed (default 5). */
  reconnects?: number;
  /** A `fetch` of your own (default: the global one). */
  fetch?: typeof fetch;
}

/** The API refused the request: its HTTP status and its error body `{code, message, details}`. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(`${code}: ${message}`);
    this.name = "APIError";
  }

  static async from(response: Response): Promise<APIError> {
    const text = await response.text();
    try {
      const error = (JSON.parse(text) as { error?: { code?: string; message?: string; details?: Record<string, unknown> } }).error;
      if (error && typeof error === "object") {
        return new APIError(response.status, error.code ?? `http_${response.status}`, error.message ?? "", error.details ?? {});
      }
    } catch {
      // not the API's error body (a proxy's page): quoted below
    }
    return new APIError(response.status, `http_${response.status}`, text.slice(0, 200));
  }
}

/** The server could not be reached, or a result stream kept dropping; `cause` says why. */
export class APIConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "APIConnectionError";
  }
}

/** One stored result of a run. */
export interface ResultEvent {
  /** The host's sequence of the result (the SSE `id`). */
  seq: number;
  type: string;
  /** The result typed by the protocol, when `type` is one this version defines. */
  result?: AgentRunResult;
  /** The result as sent: `{seq, type, run_id, data, ...}`. */
  raw: Record<string, unknown>;
}

/** How the run ended (`event: end`). */
export interface RunEnd {
  run_id: string;
  status: RunStatus;
  error: { code: string; message: string; details?: Record<string, unknown> } | null;
}

type Query = Record<string, string | number | boolean | readonly string[] | null | undefined>;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

/** A run's results over SSE: `for await (const item of stream)`, then `stream.end`. */
export class RunStream implements AsyncIterable<ResultEvent> {
  runId: string | null;
  lastSeq: number;
  end: RunEnd | null = null;
  admitted: Admitted | null = null;
  private streamError: APIError | null = null;
  private readonly controller = new AbortController();

  constructor(
    private readonly client: McphostClient,
    private readonly event: AgentEvent | null,
    runId: string | null,
    after: number,
    signal?: AbortSignal,
  ) {
    this.runId = runId;
    this.lastSeq = after;
    signal?.addEventListener("abort", () => this.controller.abort(signal.reason), { once: true });
  }

  /** Stop reading (the connection is closed). */
  close(): void {
    this.controller.abort();
  }

  /** Read the rest of the stream, dropping its results; how the run ended. */
  async untilEnd(): Promise<RunEnd> {
    for await (const _ of this) {
      // results are dropped
    }
    return this.end as RunEnd;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<ResultEvent> {
    let failures = 0;
    let lastFailure: unknown = null;
    for (;;) {
      let response: Response | null = null;
      try {
        response = await this.open();
      } catch (error) {
        if (this.controller.signal.aborted) throw this.controller.signal.reason;
        if (this.runId === null) {
          throw new APIConnectionError(`cannot reach mcphost at ${this.client.baseUrl}: ${String(error)}`, { cause: error });
        }
        lastFailure = error;
      }
      if (response !== null) {
        if (response.status >= 400) throw await APIError.from(response);
        try {
          for await (const sse of readEvents(response.body as ReadableStream<Uint8Array>)) {
            const item = this.feed(sse.event, sse.data);
            if (item !== null) {
              failures = 0;
              yield item;
            }
          }
        } catch (error) {
          if (this.controller.signal.aborted) throw this.controller.signal.reason;
          lastFailure = error;
        }
        if (this.streamError !== null) {
          lastFailure = this.streamError;
          this.streamError = null;
        }
      }
      if (this.end !== null) return;
      failures += 1;
      if (failures > this.client.reconnects) {
        if (lastFailure instanceof APIError) throw lastFailure;
        throw new APIConnectionError(
          `the result stream of run ${this.runId ?? "?"} dropped ${failures} times in a row` +
            (lastFailure ? ` (last: ${String(lastFailure)})` : ""),
          { cause: lastFailure },
        );
      }
      const base = Math.min(200 * 2 ** (failures - 1), 2800);
      await sleep(base + Math.random() * 200, this.controller.signal);
    }
  }

  private open(): Promise<Response> {
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    const signal = this.controller.signal;
    if (this.runId === null) {
      headers["Content-Type"] = "application/json";
      const body = JSON.stringify(this.event);
      return this.client.fetch("POST", "/v1/events", { stream: true }, body, headers, signal);
    }
    headers["Last-Event-ID"] = String(this.lastSeq);
    return this.client.fetch("GET", `/v1/runs/${encodeURIComponent(this.runId)}/results`, {}, undefined, headers, signal);
  }

  private feed(event: string, data: string): ResultEvent | null {
    const payload = (data ? JSON.parse(data) : {}) as Record<string, unknown>;
    if (event === "run") {
      this.admitted = payload as unknown as Admitted;
      this.runId = String(payload.run_id);
      return null;
    }
    if (event === "end") {
      this.end = payload as unknown as RunEnd;
      this.end.error ??= null;
      return null;
    }
    if (event === "error") {
      const error = (payload.error ?? {}) as { code?: string; message?: string; details?: Record<string, unknown> };
      // The stream stopped (the store kept failing); resuming may get past it.
      this.streamError = new APIError(200, error.code ?? "runtime_error", error.message ?? "", error.details ?? {});
      return null;
    }
    const seq = payload.seq;
    if (typeof seq !== "number" || seq <= this.lastSeq) return null; // a replay repeats what was handed out
    this.lastSeq = seq;
    const type = String(payload.type);
    const item: ResultEvent = { seq, type, raw: payload };
    if (RESULT_TYPES.has(type)) {
      const { seq: _seq, ...result } = payload;
      item.result = result as unknown as AgentRunResult;
    }
    return item;
  }
}

function newEventId(): string {
  const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  let time = Date.now();
  let head = "";
  for (let i = 0; i < 10; i++) {
    head = alphabet[time % 32] + head;
    time = Math.floor(time / 32);
  }
  const random = new Uint8Array(16);
  globalThis.crypto.getRandomValues(random);
  return `evt_${head}${Array.from(random, (b) => alphabet[b % 32]).join("")}`;
}

/** A client of one mcphost server. */
export class McphostClient {
  readonly baseUrl: string;
  readonly reconnects: number;
  private readonly apiKey: string | undefined;
  private readonly fetchImpl: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? "http://127.0.0.1:8787").replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.reconnects = options.reconnects ?? 5;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** One HTTP exchange (the API key added); exposed for calls the resources do not cover. */
  fetch(
    method: string,
    path: string,
    query: Query = {},
    body?: string,
    headers: Record<string, string> = {},
    signal?: AbortSignal,
  ): Promise<Response> {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(query)) {
      if (value === null || value === undefined) continue;
      if (Array.isArray(value)) for (const item of value) url.searchParams.append(name, String(item));
      else url.searchParams.set(name, String(value));
    }
    const all = { ...headers };
    if (this.apiKey) all.Authorization = `Bearer ${this.apiKey}`;
    return this.fetchImpl(url, { method, headers: all, body, signal });
  }

  /** One exchange whose refusal (status >= 400) throws `APIError`; the response itself. */
  private async send(
    method: string,
    path: string,
    query: Query = {},
    json?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    let response: Response;
    try {
      const body = json === undefined ? undefined : JSON.stringify(json);
      const all: Record<string, string> = json === undefined ? { ...headers } : { ...headers, "Content-Type": "application/json" };
      response = await this.fetch(method, path, query, body, all);
    } catch (error) {
      throw new APIConnectionError(`cannot reach mcphost at ${this.baseUrl}: ${String(error)}`, { cause: error });
    }
    if (response.status >= 400) throw await APIError.from(response);
    return response;
  }

  private async call<T>(method: string, path: string, query: Query = {}, json?: unknown): Promise<T> {
    return (await (await this.send(method, path, query, json)).json()) as T;
  }

  readonly events = {
    /** `POST /v1/events`: admit the event; the run it made (or the existing one: `created` false). */
    send: (event: AgentEvent): Promise<Admitted> => this.call("POST", "/v1/events", {}, event),
    /** `POST /v1/events?stream=true`: admit the event and follow its run's results. The event gets an
     * `event_id` when it has none, so a POST retried after a drop returns the same run. */
    stream: (event: AgentEvent, options: { signal?: AbortSignal } = {}): RunStream =>
      new RunStream(this, { ...event, event_id: event.event_id || newEventId() }, null, 0, options.signal),
  };

  readonly runs = {
    list: (query: {
      conversation_id?: string;
      status?: RunStatus;
      agent?: string;
      since?: string;
      until?: string;
      limit?: number;
      cursor?: string;
    } = {}): Promise<RunsPage> => this.call("GET", "/v1/runs", query),
    get: (runId: string): Promise<RunView> => this.call("GET", `/v1/runs/${encodeURIComponent(runId)}`),
    cancel: (runId: string, reason?: string): Promise<CancelAnswer> =>
      this.call("POST", `/v1/runs/${encodeURIComponent(runId)}/cancel`, {}, reason === undefined ? {} : { reason }),
    /** `GET /v1/runs/{run_id}/audit`: the run's MCP calls, oldest first, after `after`. */
    audit: (runId: string, query: { after?: number; limit?: number } = {}): Promise<AuditPage> =>
      this.call("GET", `/v1/runs/${encodeURIComponent(runId)}/audit`, query),
    /** `GET /v1/runs/{run_id}/runtime`: where it ran (`runtime` null: on the host itself), its claims and output. */
    runtime: (runId: string): Promise<RunRuntimeView> =>
      this.call("GET", `/v1/runs/${encodeURIComponent(runId)}/runtime`),
    /** `GET /v1/runs/{run_id}/records`: its context, event-log entries and transcript rows. */
    records: (runId: string): Promise<RunRecords> => this.call("GET", `/v1/runs/${encodeURIComponent(runId)}/records`),
    /** `GET /v1/runs/{run_id}/usage`: its host model calls, a row per attempt, oldest first. */
    usage: (runId: string): Promise<RunUsage> => this.call("GET", `/v1/runs/${encodeURIComponent(runId)}/usage`),
    /** `GET /v1/runs/{run_id}/results` as SSE: the results after `after`, then the end. */
    stream: (runId: string, options: { after?: number; signal?: AbortSignal } = {}): RunStream =>
      new RunStream(this, null, runId, options.after ?? 0, options.signal),
    /** Wait until the run has ended (rejects with a `TimeoutError` after `timeoutMs`); the run as it ended. */
    wait: async (runId: string, options: { timeoutMs?: number } = {}): Promise<RunView> => {
      const controller = new AbortController();
      const timer =
        options.timeoutMs === undefined
          ? undefined
          : setTimeout(
              () => controller.abort(new DOMException(`run ${runId} did not end in time`, "TimeoutError")),
              options.timeoutMs,
            );
      try {
        await this.runs.stream(runId, { after: WAIT_AFTER, signal: controller.signal }).untilEnd();
      } finally {
        clearTimeout(timer);
      }
      return this.runs.get(runId);
    },
  };

  readonly approvals = {
    list: (query: { status?: ApprovalRecord["status"]; run_id?: string; limit?: number; cursor?: string } = {}): Promise<ApprovalsPage> =>
      this.call("GET", "/v1/approvals", query),
    get: (approvalId: string): Promise<ApprovalRecord> => this.call("GET", `/v1/approvals/${encodeURIComponent(approvalId)}`),
    decide: (approvalId: string, decision: DecisionBody): Promise<ApprovalRecord> =>
      this.call("POST", `/v1/approvals/${encodeURIComponent(approvalId)}`, {}, decision),
  };

  readonly schedules = {
    list: (query: { limit?: number; cursor?: string } = {}): Promise<SchedulesPage> => this.call("GET", "/v1/schedules", query),
    get: (scheduleId: string): Promise<ScheduleStatus> => this.call("GET", `/v1/schedules/${encodeURIComponent(scheduleId)}`),
    create: (spec: ScheduleSpec): Promise<ScheduleStatus> => this.call("POST", "/v1/schedules", {}, spec),
    delete: (scheduleId: string): Promise<ScheduleDeleted> => this.call("DELETE", `/v1/schedules/${encodeURIComponent(scheduleId)}`),
    pause: (scheduleId: string): Promise<ScheduleStatus> => this.call("POST", `/v1/schedules/${encodeURIComponent(scheduleId)}/pause`),
    resume: (scheduleId: string): Promise<ScheduleStatus> => this.call("POST", `/v1/schedules/${encodeURIComponent(scheduleId)}/resume`),
  };

  readonly conversations = {
    transcript: (
      conversationId: string,
      query: { before?: string; after?: string; limit?: number; thread_id?: string } = {},
    ): Promise<TranscriptPage> => this.call("GET", `/v1/conversations/${encodeURIComponent(conversationId)}/transcript`, query),
    events: (
      conversationId: string,
      query: { before?: string; after?: string; limit?: number; thread_id?: string; event_type?: string[] } = {},
    ): Promise<EventsPage> => this.call("GET", `/v1/conversations/${encodeURIComponent(conversationId)}/events`, query),
    /** `GET /v1/conversations`: newest activity first; by id prefix, agent or actor. */
    list: (query: { prefix?: string; agent?: string; actor?: string; limit?: number; cursor?: string } = {}): Promise<ConversationsPage> =>
      this.call("GET", "/v1/conversations", query),
    /** `DELETE /v1/conversations/{id}`: its runs, events, transcript, state and artifacts (409 while a run is active). */
    delete: (conversationId: string): Promise<ConversationDeleted> =>
      this.call("DELETE", `/v1/conversations/${encodeURIComponent(conversationId)}`),
  };

  readonly deliveries = {
    list: (query: { status?: DeliveryRecord["status"]; run_id?: string; limit?: number; cursor?: string } = {}): Promise<DeliveriesPage> =>
      this.call("GET", "/v1/deliveries", query),
    /** Pending again, due now, the same `webhook-id`. */
    redeliver: (deliveryId: string): Promise<DeliveryRecord> =>
      this.call("POST", `/v1/deliveries/${encodeURIComponent(deliveryId)}/redeliver`),
  };

  readonly usage = {
    /** `GET /v1/usage`: finished model calls totalled per group, costliest first; `from`/`to` as ISO 8601 or epoch seconds. */
    totals: (query: { group_by?: UsageGroup; from?: string; to?: string } = {}): Promise<UsageAnswer> =>
      this.call("GET", "/v1/usage", query),
  };

  readonly channels = {
    /** `GET /v1/channels`: each chat channel's platform, agents, newest inbound event and outbox figures. */
    list: (): Promise<ChannelsView> => this.call("GET", "/v1/channels"),
  };

  readonly runtimes = {
    /** `GET /v1/runtimes`: each runtime's state, liveness, slots, held runs, labels and capabilities. */
    list: (): Promise<RuntimesView> => this.call("GET", "/v1/runtimes"),
    /** `POST /v1/runtimes/{runtime}/drain`: it finishes its runs and claims no new ones. */
    drain: (runtime: string): Promise<RuntimeView> =>
      this.call("POST", `/v1/runtimes/${encodeURIComponent(runtime)}/drain`),
    /** `POST /v1/runtimes/{runtime}/disable`: its token is refused; its runs are requeued when their leases lapse. */
    disable: (runtime: string): Promise<RuntimeView> =>
      this.call("POST", `/v1/runtimes/${encodeURIComponent(runtime)}/disable`),
    /** `POST /v1/runtimes/{runtime}/enable`: it claims runs again. */
    enable: (runtime: string): Promise<RuntimeView> =>
      this.call("POST", `/v1/runtimes/${encodeURIComponent(runtime)}/enable`),
  };

  readonly agents = {
    list: (): Promise<AgentsView> => this.call("GET", "/v1/agents"),
    /** `POST /v1/explain`: the agent an event binds to, its grant, and why each named target is allowed or not. */
    explain: (request: ExplainRequest): Promise<Explanation> => this.call("POST", "/v1/explain", {}, request),
  };

  readonly runners = {
    list: (): Promise<RunnersView> => this.call("GET", "/v1/runners"),
  };

  readonly knowledge = {
    list: (): Promise<KnowledgeView> => this.call("GET", "/v1/knowledge"),
    search: (kbId: string, q: string, options: { limit?: number } = {}): Promise<KnowledgeSearchAnswer> =>
      this.call("GET", `/v1/knowledge/${encodeURIComponent(kbId)}/search`, { q, limit: options.limit }),
  };

  readonly tools = {
    /** `GET /v1/tools`; `connect: true` first connects and lists every server. */
    list: (query: { connect?: boolean } = {}): Promise<ToolsView> => this.call("GET", "/v1/tools", query),
  };

  readonly artifacts = {
    get: (artifactId: string): Promise<ArtifactRecord> => this.call("GET", `/v1/artifacts/${encodeURIComponent(artifactId)}`),
    /** The artifact's bytes as the raw `Response`; `range: [first, last]` asks for those bytes only (206). */
    content: (artifactId: string, options: { range?: [number, number] } = {}): Promise<Response> =>
      this.send(
        "GET",
        `/v1/artifacts/${encodeURIComponent(artifactId)}/content`,
        {},
        undefined,
        options.range ? { Range: `bytes=${options.range[0]}-${options.range[1]}` } : {},
      ),
  };
}
