// The console's entry point: sign-in, the session list, creating sessions, and the session
// view (live transcript, prompts, cancel, approvals, grants, runs, hooks, sandbox).

import { api, setToken, token } from "./api.js";
import { SessionStream } from "./stream.js";
import { Transcript, el, runStateOf } from "./transcript.js";
import { renderApprovals, renderGrants, renderHooks, renderRuns, renderSandbox } from "./panels.js";

const $ = (id) => document.getElementById(id);

const state = {
  cursor: null,
  session: null,
  stream: null,
  transcript: null,
  runId: null,
  refreshTimer: null,
};

function show(view) {
  for (const id of ["create-view", "empty-view", "session-view"]) $(id).hidden = id !== view;
}

function setConn(status, detail) {
  const conn = $("conn");
  conn.hidden = !status;
  conn.className = `conn ${status ?? ""}`;
  const label = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…", error: "stream error" }[status] ?? "";
  conn.textContent = detail && status === "error" ? `${label}: ${detail}` : label;
  conn.setAttribute("data-state", status ?? "");
}

function setRunStatus(status) {
  const badge = $("run-status");
  badge.textContent = status;
  badge.className = `badge ${status}`;
  $("cancel-run").disabled = !state.runId;
}

// ---- sign-in ---------------------------------------------------------------------------

async function signIn(value) {
  setToken(value);
  try {
    await api.listSessions();
  } catch (e) {
    setToken(null);
    throw e;
  }
  enterApp();
}

function signOut() {
  closeSession();
  setToken(null);
  $("app-view").hidden = true;
  $("sign-out").hidden = true;
  $("sign-in-view").hidden = false;
  setConn(null);
  history.replaceState(null, "", "/console/");
}

function enterApp() {
  $("sign-in-view").hidden = true;
  $("app-view").hidden = false;
  $("sign-out").hidden = false;
  $("who").textContent = tenantOf(token());
  loadSessions(true);
  const match = /^#\/sessions\/([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (match) openSession(match[1]);
  else show("empty-view");
}

/** The tenant claim of a JWT, for display only (the server verifies the token). */
function tenantOf(jwt) {
  try {
    const claims = JSON.parse(atob(jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return claims.tenant ? `tenant ${claims.tenant}` : "";
  } catch {
    return "";
  }
}

// ---- session list ----------------------------------------------------------------------

async function loadSessions(reset) {
  if (reset) {
    state.cursor = null;
    $("session-list").replaceChildren();
  }
  try {
    const page = await api.listSessions(state.cursor);
    for (const s of page.sessions) $("session-list").append(sessionItem(s));
    state.cursor = page.next_cursor ?? null;
    $("more-sessions").hidden = !state.cursor;
  } catch (e) {
    handleAuthError(e);
  }
}

function sessionItem(s) {
  const title = s.config?.title || "(untitled)";
  const item = el("li", { "data-session-id": s.id, class: state.session?.id === s.id ? "active" : "" },
    el("a", { href: `#/sessions/${s.id}` },
      el("span", { class: "title" }, title),
      el("span", { class: "muted small" }, `${new Date(s.created_at).toLocaleString()} · `,
        el("span", { class: `badge ${s.status}` }, s.status))));
  return item;
}

function markActive() {
  for (const li of $("session-list").children) {
    li.classList.toggle("active", li.getAttribute("data-session-id") === state.session?.id);
  }
}

function handleAuthError(e) {
  if (e?.status === 401) signOut();
  return e;
}

// ---- create ----------------------------------------------------------------------------

function createTab(json) {
  $("create-tab-form").classList.toggle("active", !json);
  $("create-tab-json").classList.toggle("active", json);
  $("create-fields").hidden = json;
  $("create-json-fields").hidden = !json;
}

async function createSession(event) {
  event.preventDefault();
  $("create-error").textContent = "";
  let config;
  if (!$("create-json-fields").hidden) {
    try {
      config = JSON.parse($("create-json").value);
    } catch (e) {
      $("create-error").textContent = `Not JSON: ${e.message}`;
      return;
    }
  } else {
    config = { permission: { mode: $("create-mode").value } };
    if ($("create-title").value.trim()) config.title = $("create-title").value.trim();
    if ($("create-system").value.trim()) config.system_prompt = $("create-system").value.trim();
  }
  try {
    const session = await api.createSession(config);
    $("session-list").prepend(sessionItem(session));
    location.hash = `#/sessions/${session.id}`;
  } catch (e) {
    const field = e.details?.field ? ` (${e.details.field})` : "";
    $("create-error").textContent = `${e.code}: ${e.message}${field}`;
  }
}

// ---- session view ----------------------------------------------------------------------

function closeSession() {
  state.stream?.stop();
  state.stream = null;
  state.session = null;
  state.runId = null;
}

async function openSession(id) {
  closeSession();
  show("session-view");
  state.transcript.clear();
  $("session-title").textContent = "…";
  $("session-id").textContent = id;
  let session;
  try {
    session = await api.getSession(id);
  } catch (e) {
    handleAuthError(e);
    state.transcript.notice(`${e.code}: ${e.message}`, "bad");
    return;
  }
  state.session = session;
  markActive();
  $("session-title").textContent = session.config?.title || "(untitled)";
  $("session-status").textContent = session.status;
  $("session-status").className = `badge ${session.status}`;
  setRunStatus("idle");
  renderSandbox($("sandbox"), session.sandbox);
  refreshPanels();
  api.hooks(id).then((r) => renderHooks($("hooks"), r)).catch(() => renderHooks($("hooks"), null));
  const stream = new SessionStream(id, {
    onEvent: (event) => onEvent(event),
    onState: (status, detail) => setConn(status, detail),
    onReconnected: (after, count) => {
      const notice = state.transcript.notice(
        `Stream reconnected (#${count}): resumed after event ${after} with Last-Event-ID.`, "reconnect");
      notice.setAttribute("data-role", "reconnect-notice");
    },
  });
  state.stream = stream;
  stream.start();
  $("prompt-input").focus();
}

function onEvent(event) {
  if (event.type === "run_started") state.runId = event.payload?.run_id ?? state.runId;
  const runState = runStateOf(event);
  if (event.type === "terminal") state.runId = null;
  if (runState) setRunStatus(runState);
  state.transcript.render(event);
  if (["approval_requested", "approval_decided", "run_started", "terminal", "run_parked"].includes(event.type)) {
    scheduleRefresh();
  }
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refreshPanels, 150);
}

async function refreshPanels() {
  const session = state.session;
  if (!session) return;
  const id = session.id;
  const done = () => scheduleRefresh();
  try {
    const [approvals, grants, runs] = await Promise.all([
      api.pendingApprovals(id), api.grants(id), api.listRuns(id)]);
    if (state.session?.id !== id) return;
    renderApprovals($("approvals"), $("approval-count"), id, approvals.approvals, done);
    renderGrants($("grants"), id, grants.grants, done);
    renderRuns($("runs"), runs.runs);
    const active = runs.runs.filter((r) => r.status === "running" || r.status === "queued");
    if (active.length && !state.runId) state.runId = active[0].id;
    $("cancel-run").disabled = !state.runId;
  } catch (e) {
    handleAuthError(e);
  }
}

async function sendPrompt(event) {
  event?.preventDefault();
  const text = $("prompt-input").value;
  if (!text.trim() || !state.session) return;
  $("prompt-error").textContent = "";
  try {
    const run = await api.prompt(state.session.id, text, $("busy-policy").value);
    $("prompt-input").value = "";
    if (run.status !== "queued") state.runId = run.run_id;
    setRunStatus(run.status === "queued" ? "queued" : "running");
  } catch (e) {
    handleAuthError(e);
    $("prompt-error").textContent = `${e.code}: ${e.message}`;
  }
}

async function cancelRun() {
  if (!state.session || !state.runId) return;
  try {
    await api.cancelRun(state.session.id, state.runId);
  } catch (e) {
    $("prompt-error").textContent = `${e.code}: ${e.message}`;
  }
}

async function openOutput(outputId) {
  try {
    const output = await api.output(state.session.id, outputId);
    $("output-title").textContent = `${output.tool_name} · ${output.id} · ${output.size_bytes} bytes · sha256 ${output.sha256.slice(0, 12)}…`;
    $("output-body").textContent = output.content;
  } catch (e) {
    $("output-title").textContent = `${e.code}: ${e.message}`;
    $("output-body").textContent = "";
  }
  $("output-dialog").showModal();
}

// ---- wiring ----------------------------------------------------------------------------

function route() {
  if (!token()) return;
  const match = /^#\/sessions\/([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (match) {
    if (state.session?.id !== match[1]) openSession(match[1]);
  } else if (location.hash === "#/new") {
    closeSession();
    setConn(null);
    show("create-view");
    $("create-title").focus();
  } else {
    closeSession();
    setConn(null);
    show("empty-view");
  }
}

function init() {
  state.transcript = new Transcript($("transcript"), { openOutput });
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    $("sign-in-error").textContent = "";
    const value = $("token-input").value.trim().replace(/^Bearer\s+/i, "");
    try {
      await signIn(value);
      $("token-input").value = "";
    } catch (e) {
      $("sign-in-error").textContent = `${e.code ?? "ERROR"}: ${e.message}`;
    }
  });
  $("sign-out").addEventListener("click", signOut);
  $("new-session").addEventListener("click", () => { location.hash = "#/new"; });
  $("more-sessions").addEventListener("click", () => loadSessions(false));
  $("create-form").addEventListener("submit", createSession);
  $("create-cancel").addEventListener("click", () => { location.hash = ""; });
  $("create-tab-form").addEventListener("click", () => createTab(false));
  $("create-tab-json").addEventListener("click", () => createTab(true));
  $("create-json").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("create-form").requestSubmit();
  });
  $("prompt-form").addEventListener("submit", sendPrompt);
  $("prompt-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("prompt-form").requestSubmit();
    }
  });
  $("cancel-run").addEventListener("click", cancelRun);
  $("close-session").addEventListener("click", async () => {
    if (!state.session) return;
    try {
      await api.closeSession(state.session.id);
      openSession(state.session.id);
      loadSessions(true);
    } catch (e) {
      $("prompt-error").textContent = `${e.code}: ${e.message}`;
    }
  });
  $("output-close").addEventListener("click", () => $("output-dialog").close());
  window.addEventListener("hashchange", route);
  if (token()) enterApp();
  else $("sign-in-view").hidden = false;
}

init();
