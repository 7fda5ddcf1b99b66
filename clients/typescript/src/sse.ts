/**
 * Server-sent events from a fetch body: the WHATWG parsing rules (fields `event`, `data`, `id`, `retry`;
 * comments; `\n`, `\r\n` or `\r` line ends), as a browser's EventSource applies them, over any
 * `ReadableStream<Uint8Array>` (EventSource itself cannot POST or send an Authorization header).
 */

export interface ServerSentEvent {
  /** `message` when the event names none. */
  event: string;
  data: string;
  id: string | null;
}

/** The events of `body`, in order; ends when the body does (a partial event at the end is dropped). */
export async function* readEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerSentEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  let id: string | null = null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      for (;;) {
        const match = /\r\n|\r|\n/.exec(buffer);
        if (match === null) break;
        if (match[0] === "\r" && match.index === buffer.length - 1) break; // maybe the \r of a \r\n
        const line = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        if (line === "") {
          if (data.length > 0) yield { event: event || "message", data: data.join("\n"), id };
          event = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
        else if (field === "id" && !value.includes("\0")) id = value;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
