// The side panels of a session: pending approvals (answer with updated input, grant scope and
// reason), grants (revoke), runs, hook status and the sandbox report.

import { api } from "./api.js";
import { el, pretty } from "./transcript.js";

export function renderApprovals(container, counter, sessionId, approvals, onDone) {
  counter.textContent = approvals.length ? String(approvals.length) : "";
  counter.className = approvals.length ? "badge waiting" : "badge";
  if (!approvals.length) {
    container.replaceChildren(el("p", { class: "muted small" }, "Nothing pending."));
    return;
  }
  container.replaceChildren(...approvals.map((a) => approvalCard(sessionId, a, onDone)));
}

function approvalCard(sessionId, approval, onDone) {
  const input = el("textarea", { class: "mono small", rows: 4, spellcheck: "false",
    "aria-label": "Updated input (JSON)", "data-role": "updated-input" });
  input.value = pretty(approval.input);
  const scope = el("select", { class: "small", "aria-label": "Grant scope", "data-role": "grant-scope" },
    el("option", { value: "" }, "no grant"),
    el("option", { value: "once" }, "grant once"),
    el("option", { value: "session" }, "grant for session"),
    el("option", { value: "tenant" }, "grant for tenant"));
  const rule = el("input", { class: "small", placeholder: `rule (default ${approval.tool_name})`,
    "aria-label": "Grant rule", "data-role": "grant-rule" });
  const reason = el("input", { class: "small", placeholder: "reason (optional)",
    "aria-label": "Reason", "data-role": "reason", maxlength: 2000 });
  const error = el("p", { class: "error small", role: "alert" });
  const send = async (decision) => {
    error.textContent = "";
    const body = { decision };
    if (reason.value.trim()) body.reason = reason.value.trim();
    if (decision === "allow") {
      let updated;
      try {
        updated = JSON.parse(input.value);
      } catch (e) {
        error.textContent = `Updated input is not JSON: ${e.message}`;
        return;
      }
      if (JSON.stringify(updated) !== JSON.stringify(approval.input)) body.updated_input = updated;
      if (scope.value) {
        body.grant = { scope: scope.value };
        if (rule.value.trim()) body.grant.rule = rule.value.trim();
      }
    }
    try {
      await api.answer(sessionId, approval.id, body);
      onDone();
    } catch (e) {
      error.textContent = `${e.code}: ${e.message}`;
      if (e.code === "APPROVAL_ALREADY_DECIDED" || e.code === "APPROVAL_EXPIRED") onDone();
    }
  };
  return el("div", { class: "approval", "data-approval-id": approval.id },
    el("div", { class: "tool-head" }, el("strong", {}, approval.tool_name),
      el("span", { class: "muted small" }, approval.reason)),
    el("label", { class: "small" }, "Input (edit to allow with an updated input)"), input,
    el("div", { class: "row wrap" }, scope, rule),
    reason,
    el("div", { class: "row" },
      el("button", { type: "button", class: "ok small", "data-role": "allow", onclick: () => send("allow") }, "Allow"),
      el("button", { type: "button", class: "danger small", "data-role": "deny", onclick: () => send("deny") }, "Deny"),
      el("span", { class: "muted small" }, `expires ${new Date(approval.expires_at).toLocaleTimeString()}`)),
    error);
}

export function renderGrants(list, sessionId, grants, onDone) {
  if (!grants.length) {
    list.replaceChildren(el("li", { class: "muted small" }, "No grants."));
    return;
  }
  list.replaceChildren(...grants.map((g) => el("li", { class: "grant", "data-grant-id": g.id },
    el("code", {}, g.rule), " ", el("span", { class: "badge" }, g.scope),
    g.expires_at ? el("span", { class: "muted small" }, ` until ${new Date(g.expires_at).toLocaleString()}`) : null,
    el("button", { type: "button", class: "link small", onclick: async () => {
      try {
        await api.revokeGrant(sessionId, g.id);
      } finally {
        onDone();
      }
    } }, "revoke"))));
}

export function renderRuns(list, runs) {
  if (!runs.length) {
    list.replaceChildren(el("li", { class: "muted small" }, "No runs yet."));
    return;
  }
  list.replaceChildren(...runs.slice(-10).reverse().map((r) => el("li", { class: "small" },
    el("span", { class: `badge ${r.status}` }, r.status), " ",
    el("span", { title: r.id }, (r.prompt ?? "").slice(0, 60)),
    r.terminal?.reason ? el("span", { class: "muted" }, ` · ${r.terminal.reason}`) : null)));
}

export function renderHooks(list, report) {
  const hooks = report?.hooks ?? [];
  if (!hooks.length) {
    list.replaceChildren(el("li", { class: "muted small" }, "No hooks configured."));
    return;
  }
  list.replaceChildren(...hooks.map((h) => el("li", { class: "small" },
    el("strong", {}, h.name ?? "hook"), " ",
    el("span", { class: `badge ${h.status_token === "HOOK_INSTALLED_OK" ? "ok" : "bad"}` }, h.status_token ?? "?"),
    h.missing_reason ? el("span", { class: "muted" }, ` ${h.missing_reason}`) : null)));
}

export function renderSandbox(list, report) {
  if (!report) {
    list.replaceChildren();
    return;
  }
  const items = [];
  for (const [part, value] of Object.entries(report)) {
    if (value && typeof value === "object" && "status" in value) {
      items.push(el("li", { class: "small", title: value.reason ?? "" },
        el("span", { class: `badge ${value.status === "enforced" ? "ok" : value.status === "disabled" ? "" : "bad"}` }, value.status),
        ` ${part}`));
    }
  }
  const commands = report.commands;
  if (commands) {
    items.push(el("li", { class: "small" },
      el("span", { class: `badge ${commands.available ? "ok" : "bad"}` }, commands.available ? "available" : "off"),
      " commands", commands.reason ? el("span", { class: "muted" }, ` — ${commands.reason}`) : null));
  }
  const network = report.session_network;
  if (network) {
    items.push(el("li", { class: "small" }, el("span", { class: "badge" }, network.mode ?? "?"),
      " command network", network.reason ? el("span", { class: "muted" }, ` — ${network.reason}`) : null));
  }
  list.replaceChildren(...items);
}
