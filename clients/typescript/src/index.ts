export {
  APIConnectionError,
  APIError,
  McphostClient,
  RESULT_TYPES,
  RunStream,
} from "./client.js";
export type {
  Admitted,
  AgentEvent,
  AgentRunResult,
  ApprovalRecord,
  ApprovalsPage,
  CancelAnswer,
  ClientOptions,
  DecisionBody,
  EventsPage,
  ResultEvent,
  Run,
  RunEnd,
  RunsPage,
  RunStatus,
  RunView,
  ScheduleDeleted,
  ScheduleSpec,
  SchedulesPage,
  ScheduleStatus,
  Schemas,
  TranscriptPage,
} from "./client.js";
export { readEvents } from "./sse.js";
export type { ServerSentEvent } from "./sse.js";
export type { components, paths } from "./generated/openapi.js";
