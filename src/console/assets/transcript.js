// Renders session events into the transcript list. Every rendered event carries its seq in
// `data-seq`; tool calls are cards updated in place by their later events.

const MAX_RESULT_CHARS = 4000;

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function clip(text) {
  return text.length > MAX_RESULT_CHARS
    ? `${text.slice(0, MAX_RESULT_CHARS)}\n… (${text.length - MAX_RESULT_CHARS} more characters)`
    : text;
}

function textOf(message) {
  return (message?.content ?? [])
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("");
}

/** The run state an event implies, or null. */
export function runStateOf(event) {
  switch (event.type) {
    case "run_started":
    case "run_resumed":
    case "approval_decided":
      return "running";
    case "approval_requested":
      return "waiting";
    case "run_parked":
      return "parked";
    case "terminal":
      return event.payload?.reason === "end_turn" ? "completed"
        : event.payload?.reason === "cancelled" ? "cancelled" : "failed";
    default:
      return null;
  }
}

export class Transcript {
  /**
   * @param {HTMLElement} list
   * @param {{openOutput: Function}} actions
   */
  constructor(list, actions) {
    this.list = list;
    this.actions = actions;
    this.tools = new Map();
    // The bubble deltas append to, and the bubble of the current model turn (kept across its
    // tool calls so the turn's final message replaces the streamed text instead of repeating it).
    this.streaming = null;
    this.turnBubble = null;
  }

  clear() {
    this.list.replaceChildren();
    this.tools.clear();
    this.streaming = null;
    this.turnBubble = null;
  }

  add(node) {
    const atBottom =
      this.list.scrollHeight - this.list.scrollTop - this.list.clientHeight < 80;
    this.list.append(node);
    if (atBottom) this.list.scrollTop = this.list.scrollHeight;
    return node;
  }

  notice(text, kind = "info") {
    return this.add(el("li", { class: `notice ${kind}` }, text));
  }

  item(event, cls, ...children) {
    return this.add(el("li", { class: `event ${cls}`, "data-seq": event.seq, "data-type": event.type }, children));
  }

  /** Renders one event. */
  render(event) {
    const p = event.payload ?? {};
    switch (event.type) {
      case "run_started":
        this.streaming = null;
        this.turnBubble = null;
        this.item(event, "user", el("div", { class: "who" }, "You"), el("div", { class: "bubble" }, p.prompt ?? ""),
          el("div", { class: "meta" }, `run ${p.run_id}`));
        break;
      case "assistant_delta": {
        if (!this.streaming) {
          const body = el("div", { class: "bubble streaming" });
          const node = this.item(event, "assistant", el("div", { class: "who" }, "Agent"), body);
          this.streaming = { node, body };
          this.turnBubble = this.streaming;
        } else {
          this.streaming.node.setAttribute("data-last-seq", event.seq);
        }
        this.streaming.body.append(p.text ?? "");
        const list = this.list;
        list.scrollTop = list.scrollHeight;
        break;
      }
      case "assistant_message": {
        const text = textOf(p.message);
        const bubble = this.turnBubble;
        if (bubble) {
          bubble.body.textContent = text;
          bubble.body.classList.remove("streaming");
          bubble.node.setAttribute("data-final-seq", event.seq);
        } else if (text) {
          this.item(event, "assistant", el("div", { class: "who" }, "Agent"), el("div", { class: "bubble" }, text));
        }
        this.streaming = null;
        this.turnBubble = null;
        break;
      }
      case "tool_call": {
        this.streaming = null;
        const status = el("span", { class: "badge pending" }, "requested");
        const log = el("ul", { class: "tool-log" });
        const result = el("div", { class: "tool-result" });
        const node = this.item(event, "tool",
          el("div", { class: "tool-head" }, el("strong", {}, p.name), status,
            el("code", { class: "muted small" }, p.tool_use_id)),
          el("pre", { class: "mono tool-input" }, pretty(p.input)), log, result);
        this.tools.set(p.tool_use_id, { node, status, log, result });
        break;
      }
      case "permission_decision": {
        const d = p.decision ?? {};
        const line = `permission: ${d.stage ?? "?"}${d.rule ? ` · rule ${d.rule}` : ""}${d.grant_id ? ` · grant ${d.grant_id}` : ""}${d.message ? ` — ${d.message}` : ""}`;
        this.toolLine(event, p.tool_use_id, line, `perm-${d.stage}`);
        break;
      }
      case "approval_requested": {
        const a = p.approval ?? {};
        this.toolLine(event, a.tool_use_id, `approval requested (${a.id}): ${a.reason ?? ""}`, "waiting");
        this.toolStatus(a.tool_use_id, "awaiting approval", "waiting");
        break;
      }
      case "approval_decided": {
        const a = p.approval ?? {};
        const reason = a.decision_reason ? ` — ${a.decision_reason}` : "";
        this.toolLine(event, a.tool_use_id, `approval ${a.status} by ${a.decided_by ?? "?"}${reason}`,
          a.status === "allowed" ? "ok" : "bad");
        this.toolStatus(a.tool_use_id, a.status, a.status === "allowed" ? "running" : "bad");
        break;
      }
      case "tool_started":
      case "tool_executing":
        this.toolStatus(p.tool_use_id, "running", "running", event);
        break;
      case "tool_progress":
        this.toolLine(event, p.tool_use_id, `progress: ${JSON.stringify(p.data).slice(0, 300)}`, "info");
        break;
      case "tool_result":
        this.toolResult(event, p);
        break;
      case "egress":
        this.toolLine(event, p.tool_use_id, `egress ${p.decision}: ${p.host}:${p.port}${p.rule ? ` (${p.rule})` : ""}${p.reason ? ` — ${p.reason}` : ""}`,
          p.decision === "allowed" ? "info" : "bad");
        break;
      case "terminal": {
        const state = runStateOf(event);
        const detail = p.code ? ` (${p.code}${p.message ? `: ${p.message}` : ""})` : p.budget ? ` (${p.budget})` : "";
        this.streaming = null;
        this.turnBubble = null;
        this.item(event, `terminal ${state}`, el("span", { class: `badge ${state}` }, `run ${state}`), ` ${p.reason}${detail}`);
        break;
      }
      case "usage":
        this.item(event, "small-line", `usage: ${p.input_tokens} in / ${p.output_tokens} out tokens, ${p.model_calls} model calls, ${p.tool_calls} tool calls`);
        break;
      case "model_request":
        this.streaming = null;
        this.turnBubble = null;
        this.item(event, "small-line hidden-detail", `${event.type} ${JSON.stringify(p)}`);
        break;
      case "tool_results":
      case "continue":
        this.item(event, "small-line hidden-detail", `${event.type} ${JSON.stringify(p)}`);
        break;
      default:
        this.item(event, "small-line", `${event.type}: ${JSON.stringify(p).slice(0, 500)}`);
    }
  }

  toolLine(event, toolUseId, text, cls) {
    const tool = this.tools.get(toolUseId);
    if (!tool) {
      this.item(event, `small-line ${cls}`, text);
      return;
    }
    tool.log.append(el("li", { class: cls, "data-seq": event.seq, "data-type": event.type }, text));
  }

  toolStatus(toolUseId, text, cls, event) {
    const tool = this.tools.get(toolUseId);
    if (!tool) return;
    tool.status.className = `badge ${cls}`;
    tool.status.textContent = text;
    if (event) tool.node.setAttribute(`data-${event.type}-seq`, event.seq);
  }

  toolResult(event, p) {
    const r = p.result ?? {};
    const tool = this.tools.get(p.tool_use_id);
    const body = el("div", { class: `result ${r.is_error ? "bad" : "ok"}`, "data-seq": event.seq, "data-type": event.type },
      el("div", { class: "small" }, r.is_error ? `error${r.code ? ` ${r.code}` : ""}` : "result",
        r.capped ? " · capped" : ""),
      el("pre", { class: "mono" }, clip(r.content ?? "")));
    if (r.output_id) {
      body.append(el("button", { type: "button", class: "link small",
        onclick: () => this.actions.openOutput(r.output_id) }, `full output (${r.output_id})`));
    }
    if (!tool) {
      this.item(event, "tool", body);
      return;
    }
    tool.result.replaceChildren(body);
    this.toolStatus(p.tool_use_id, r.is_error ? "failed" : "done", r.is_error ? "bad" : "ok");
  }
}
