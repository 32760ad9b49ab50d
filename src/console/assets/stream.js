// Follows a session's SSE stream with fetch + a stream reader (an EventSource cannot send the
// Authorization header). Keeps the last event id, reconnects with Last-Event-ID after a drop
// (with a growing delay) and when the server asks (`event: reconnect`), and drops any event
// whose seq it has already delivered.

import { token } from "./api.js";

const MAX_FRAME_CHARS = 8 * 1024 * 1024;

export class SessionStream {
  /**
   * @param {string} sessionId
   * @param {{onEvent: Function, onState: Function, onReconnected: Function}} handlers
   */
  constructor(sessionId, handlers) {
    this.sessionId = sessionId;
    this.handlers = handlers;
    this.lastId = 0;
    this.reconnects = 0;
    this.stopped = false;
    this.controller = null;
  }

  start() {
    this.loop();
  }

  stop() {
    this.stopped = true;
    this.controller?.abort();
  }

  async loop() {
    let delay = 250;
    let first = true;
    while (!this.stopped) {
      const resumedAfter = this.lastId;
      let reason = "closed";
      try {
        this.handlers.onState(first ? "connecting" : "reconnecting");
        reason = await this.connect(() => {
          if (!first) {
            this.reconnects += 1;
            this.handlers.onReconnected(resumedAfter, this.reconnects);
          }
          first = false;
          delay = 250;
          this.handlers.onState("live");
        });
      } catch (error) {
        if (this.stopped) return;
        if (error?.fatal) {
          this.handlers.onState("error", error.message);
          return;
        }
        reason = "dropped";
      }
      if (this.stopped) return;
      first = false;
      this.handlers.onState("reconnecting", reason);
      if (reason !== "server-asked") {
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  /** One connection; resolves with why it ended. */
  async connect(onOpen) {
    this.controller = new AbortController();
    const headers = { Authorization: `Bearer ${token()}`, Accept: "text/event-stream" };
    if (this.lastId > 0) headers["Last-Event-ID"] = String(this.lastId);
    const response = await fetch(`/v1/sessions/${encodeURIComponent(this.sessionId)}/stream`, {
      headers,
      cache: "no-store",
      signal: this.controller.signal,
    });
    if (!response.ok) {
      let message = `stream answered ${response.status}`;
      try {
        message = (await response.json()).message ?? message;
      } catch {
        /* not JSON */
      }
      const error = new Error(message);
      error.fatal = response.status === 401 || response.status === 403 || response.status === 404;
      throw error;
    }
    onOpen();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return "closed";
      buffer += value;
      if (buffer.length > MAX_FRAME_CHARS) throw new Error("frame too large");
      let match;
      while ((match = /\r\n\r\n|\n\n|\r\r/.exec(buffer)) !== null) {
        const raw = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        const frame = parseFrame(raw);
        if (!frame) continue;
        if (frame.event === "reconnect") {
          this.controller.abort();
          return "server-asked";
        }
        const seq = Number(frame.id);
        if (!Number.isFinite(seq) || frame.id === undefined) continue;
        if (seq <= this.lastId) continue; // already delivered
        this.lastId = seq;
        let event;
        try {
          event = JSON.parse(frame.data);
        } catch {
          continue;
        }
        this.handlers.onEvent(event);
      }
    }
  }
}

/** Parses one SSE frame (comments and keep-alives give null). */
export function parseFrame(raw) {
  const frame = { data: "" };
  let hasData = false;
  for (const line of raw.split(/\r\n|\r|\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") {
      frame.data += (hasData ? "\n" : "") + value;
      hasData = true;
    } else if (field === "id") frame.id = value;
    else if (field === "event") frame.event = value;
  }
  return hasData || frame.event ? frame : null;
}
