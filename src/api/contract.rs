//! The error answers every operation shares, added to the OpenAPI document by one modifier
//! ([`CommonResponses`]) from what each operation declares, so the document names every status
//! the middleware and the shared extractors can answer without copy-pasted annotations.
//!
//! | the operation declares …                     | it also documents                                  |
//! |----------------------------------------------|----------------------------------------------------|
//! | anything                                     | `422 INVALID_REQUEST` (a `%00` in the query is refused on every route), `500 INTERNAL` |
//! | `security(("bearer" = []))`                  | `401` (`UNAUTHENTICATED`, `TOKEN_*`), `403 FORBIDDEN_SCOPE`, `503 STORE_UNAVAILABLE` |
//! | `security(("operator" = []))`                | `401 UNAUTHENTICATED` (no or a wrong operator token), `404 NOT_FOUND` (the operator API is off), `503 STORE_UNAVAILABLE` |
//! | a path parameter                             | `404 NOT_FOUND` (unknown, another tenant's, or a `%00` in the path) |
//! | a JSON `request_body` (read with [`AppJson`]) | `400 INVALID_JSON`, `413 PAYLOAD_TOO_LARGE`, `415 UNSUPPORTED_MEDIA_TYPE` |
//!
//! For a new endpoint: declare `security`, `params` and `request_body` as usual and list only
//! the answers of its own (`409`, `429`, `503 SHUTTING_DOWN` …) in `responses(...)`, with a
//! description naming their codes. A status the operation documents itself keeps its
//! description (the shared code is appended when it does not name it); one documented without
//! a description gets the shared one. Every error body is
//! [`ErrorBody`]; every `503` documents `Retry-After`.
//!
//! [`AppJson`]: crate::api::extract::AppJson
//! [`ErrorBody`]: crate::error::ErrorBody

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::{Content, Object, OpenApi, Ref, RefOr, Type};

/// One shared answer: status, component name, description.
struct Shared {
    status: &'static str,
    name: &'static str,
    description: &'static str,
}

const INVALID_JSON: Shared = Shared {
    status: "400",
    name: "InvalidJson",
    description: "`INVALID_JSON`: the body is not JSON.",
};
const UNAUTHENTICATED: Shared = Shared {
    status: "401",
    name: "Unauthenticated",
    description: "`UNAUTHENTICATED` (no, or a malformed, `Authorization: Bearer` header; a bad \
                  signature or algorithm) or `TOKEN_EXPIRED`, `TOKEN_NOT_YET_VALID`, \
                  `TOKEN_INVALID_AUDIENCE`, `TOKEN_INVALID_ISSUER`, `TOKEN_MISSING_TENANT`, \
                  `TOKEN_UNKNOWN_KEY`.",
};
const OPERATOR_UNAUTHENTICATED: Shared = Shared {
    status: "401",
    name: "OperatorUnauthenticated",
    description: "`UNAUTHENTICATED`: no, or a wrong, operator token in `Authorization: Bearer` \
                  (a tenant's JWT is never one).",
};
const OPERATOR_OFF: Shared = Shared {
    status: "404",
    name: "OperatorApiOff",
    description: "`NOT_FOUND`: the operator API is off (the server has no \
                  `operator.token_sha256`), or a `%00` in the path.",
};
const FORBIDDEN: Shared = Shared {
    status: "403",
    name: "ForbiddenScope",
    description: "`FORBIDDEN_SCOPE`: the token lacks the scope this operation needs.",
};
const NOT_FOUND: Shared = Shared {
    status: "404",
    name: "NotFound",
    description: "`NOT_FOUND`: no such resource for the token's tenant (another tenant's is \
                  answered exactly like a missing one).",
};
const PAYLOAD_TOO_LARGE: Shared = Shared {
    status: "413",
    name: "PayloadTooLarge",
    description: "`PAYLOAD_TOO_LARGE`: the body is larger than the server's `max_body_bytes` \
                  (the connection is closed).",
};
const UNSUPPORTED_MEDIA_TYPE: Shared = Shared {
    status: "415",
    name: "UnsupportedMediaType",
    description: "`UNSUPPORTED_MEDIA_TYPE`: the body is not sent as `Content-Type: \
                  application/json` (or `application/*+json`).",
};
const INVALID_REQUEST: Shared = Shared {
    status: "422",
    name: "InvalidRequest",
    description: "`INVALID_REQUEST`: a parameter or body field that does not satisfy the \
                  schema (unknown, missing, wrong type, out of range, a NUL character); \
                  `details.field` names it when known.",
};
const INTERNAL: Shared = Shared {
    status: "500",
    name: "Internal",
    description: "`INTERNAL`: an unexpected server fault (logged; the answer carries no detail).",
};
const STORE_UNAVAILABLE: Shared = Shared {
    status: "503",
    name: "StoreUnavailable",
    description: "`STORE_UNAVAILABLE`: the store does not answer; retry after `Retry-After` \
                  seconds.",
};

const ALL: [&Shared; 11] = [
    &INVALID_JSON,
    &UNAUTHENTICATED,
    &OPERATOR_UNAUTHENTICATED,
    &OPERATOR_OFF,
    &FORBIDDEN,
    &NOT_FOUND,
    &PAYLOAD_TOO_LARGE,
    &UNSUPPORTED_MEDIA_TYPE,
    &INVALID_REQUEST,
    &INTERNAL,
    &STORE_UNAVAILABLE,
];

/// Adds the shared error answers to every operation of the document (see the module docs).
pub struct CommonResponses;

impl utoipa::Modify for CommonResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for shared in ALL {
            components.responses.insert(
                shared.name.to_owned(),
                RefOr::T(error_response(shared.status, shared.description)),
            );
        }
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                for shared in applicable(operation) {
                    add(operation, shared);
                }
            }
        }
    }
}

/// The shared answers `operation` can give, from what it declares.
fn applicable(operation: &Operation) -> Vec<&'static Shared> {
    let mut shared = vec![&INVALID_REQUEST, &INTERNAL];
    let requires = |scheme: &str| {
        operation.security.iter().flatten().any(|requirement| {
            serde_json::to_value(requirement)
                .ok()
                .is_some_and(|value| value.get(scheme).is_some())
        })
    };
    if requires("bearer") {
        shared.extend([&UNAUTHENTICATED, &FORBIDDEN, &STORE_UNAVAILABLE]);
    }
    // The operator credential has no scopes and no tenant: its path names a target tenant,
    // never a resource that may be missing; `404` means the operator API is off.
    let operator = requires("operator");
    if operator {
        shared.extend([&OPERATOR_UNAUTHENTICATED, &OPERATOR_OFF, &STORE_UNAVAILABLE]);
    }
    let has_path_parameter = operation
        .parameters
        .iter()
        .flatten()
        .any(|parameter| parameter.parameter_in == ParameterIn::Path);
    if has_path_parameter && !operator {
        shared.push(&NOT_FOUND);
    }
    let json_body = operation
        .request_body
        .as_ref()
        .is_some_and(|body| body.content.keys().any(|kind| kind.contains("json")));
    if json_body {
        shared.extend([&INVALID_JSON, &PAYLOAD_TOO_LARGE, &UNSUPPORTED_MEDIA_TYPE]);
    }
    shared
}

/// Documents `shared` on `operation`: a reference to the shared answer, unless the operation
/// describes that status itself (then its description stays and the error body and, for a
/// `503`, `Retry-After` are added when missing).
fn add(operation: &mut Operation, shared: &Shared) {
    let responses = &mut operation.responses.responses;
    let reference = || RefOr::Ref(Ref::from_response_name(shared.name));
    match responses.get_mut(shared.status) {
        None => {
            responses.insert(shared.status.to_owned(), reference());
        }
        Some(RefOr::T(own)) if own.description.trim().is_empty() => {
            responses.insert(shared.status.to_owned(), reference());
        }
        Some(RefOr::T(own)) => {
            let described = own.clone();
            // The shared code (`STORE_UNAVAILABLE` …) is named too when the operation's own
            // description does not mention it.
            let code = shared.description.split('`').nth(1).unwrap_or_default();
            let description = if described.description.contains(code) {
                described.description.clone()
            } else {
                format!(
                    "{} Also: {}",
                    described.description.trim_end(),
                    shared.description
                )
            };
            let mut merged = error_response(shared.status, &description);
            if !described.content.is_empty() {
                merged.content = described.content;
            }
            merged.headers.extend(described.headers);
            *own = merged;
        }
        Some(RefOr::Ref(_)) => {}
    }
}

/// An error answer: [`crate::error::ErrorBody`] as JSON; a `503` says `Retry-After`.
fn error_response(status: &str, description: &str) -> Response {
    let mut response = ResponseBuilder::new().description(description).content(
        "application/json",
        Content::new(Some(Ref::from_schema_name("ErrorBody"))),
    );
    if status == "503" {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Object::with_type(Type::Integer))
                .description(Some("Seconds to wait before retrying."))
                .build(),
        );
    }
    response.build()
}
