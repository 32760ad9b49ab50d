// The API client: every request carries the bearer token in the Authorization header only.

const TOKEN_KEY = "norma.console.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An API error with the server's stable `code`. */
export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export async function request(method, path, body) {
  const headers = { Authorization: `Bearer ${token()}` };
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    throw new ApiError(
      response.status,
      json?.code ?? `HTTP_${response.status}`,
      json?.message ?? (text || response.statusText),
      json?.details,
    );
  }
  return json;
}

const enc = encodeURIComponent;

export const api = {
  listSessions: (cursor) =>
    request("GET", `/v1/sessions?limit=20${cursor ? `&cursor=${enc(cursor)}` : ""}`),
  createSession: (config) => request("POST", "/v1/sessions", config),
  getSession: (id) => request("GET", `/v1/sessions/${enc(id)}`),
  closeSession: (id) => request("DELETE", `/v1/sessions/${enc(id)}`),
  prompt: (id, text, busy) => request("POST", `/v1/sessions/${enc(id)}/prompts`, { text, busy }),
  cancelRun: (id, run) => request("POST", `/v1/sessions/${enc(id)}/runs/${enc(run)}/cancel`),
  listRuns: (id) => request("GET", `/v1/sessions/${enc(id)}/runs?limit=1000`),
  pendingApprovals: (id) => request("GET", `/v1/sessions/${enc(id)}/approvals?status=pending&limit=1000`),
  answer: (id, approval, body) =>
    request("POST", `/v1/sessions/${enc(id)}/approvals/${enc(approval)}`, body),
  grants: (id) => request("GET", `/v1/sessions/${enc(id)}/grants`),
  revokeGrant: (id, grant) => request("DELETE", `/v1/sessions/${enc(id)}/grants/${enc(grant)}`),
  hooks: (id) => request("GET", `/v1/sessions/${enc(id)}/hooks`),
  output: (id, output) => request("GET", `/v1/sessions/${enc(id)}/outputs/${enc(output)}`),
};
