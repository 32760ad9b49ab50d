//! Tool input schemas (D1): compiled once at registration with the `jsonschema` crate (full
//! JSON Schema: enum, bounds, pattern, additionalProperties, nested objects and arrays, and
//! formats with format checking ON), then used before every call. Schemas may come from a
//! tenant (an MCP server's tools, an elicitation), so `pattern`s run on the linear-time `regex`
//! engine (no look-around or backreferences: such a schema does not compile) within
//! [`PATTERN_SIZE_LIMIT`], and a failing input's violations are counted to [`MAX_COUNTED`]. A failure lists every
//! failing field (its instance path) and why, so the model can fix its call.
//!
//! Compiled validators are shared through a small process-wide cache keyed by the schema's
//! JSON text: every run registers the built-in tools again, and compiling a schema (its
//! meta-schema check included) costs far more than the lookup. The cache is bounded (at most
//! [`CACHE_ENTRIES`] schemas of at most [`CACHE_MAX_SCHEMA_BYTES`] each; when full it is
//! emptied), so schemas a tenant brings cannot grow it.

use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

/// How many violations one error text lists at most.
const MAX_LISTED: usize = 20;
/// How many violations are counted at most: past it the count says "more than" (an input of
/// a million wrong items is not walked to its end).
const MAX_COUNTED: usize = 1000;
/// The most a schema's `pattern` may compile to, and its lazy DFA's cache: a schema may come
/// from a tenant's MCP server (or an elicitation request), like a Grep pattern from a model.
const PATTERN_SIZE_LIMIT: usize = 2 * 1024 * 1024;
/// Compiled schemas kept in the process-wide cache at most.
pub const CACHE_ENTRIES: usize = 256;
/// Longest schema text (bytes) the cache keeps; longer ones are compiled every time.
pub const CACHE_MAX_SCHEMA_BYTES: usize = 16 * 1024;

type ValidatorCache = Mutex<HashMap<String, Arc<jsonschema::Validator>>>;

fn validator_cache() -> &'static ValidatorCache {
    static CACHE: OnceLock<ValidatorCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// How many compiled schemas the process-wide cache holds.
pub fn cached_schemas() -> usize {
    validator_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .len()
}

/// Why a schema could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("input schema root must be an object with \"type\": \"object\"")]
    NotAnObjectSchema,
    #[error("invalid input schema: {message} (at schema path `{schema_path}`)")]
    Invalid {
        message: String,
        schema_path: String,
    },
}

/// One failing field of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// JSON Pointer to the failing value (`""` for the whole input).
    pub instance_path: String,
    /// Why it failed; never echoes the value itself (inputs may be large or secret).
    pub message: String,
}

/// Every failing field of one input (at most a bounded number are kept, `total` counts them up
/// to one past [`MAX_COUNTED`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaViolations {
    pub violations: Vec<FieldViolation>,
    /// How many violations were found, counted up to one past [`MAX_COUNTED`].
    pub total: usize,
}

impl fmt::Display for SchemaViolations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "input does not match the tool's input schema:")?;
        for violation in &self.violations {
            let path = if violation.instance_path.is_empty() {
                "(input)"
            } else {
                violation.instance_path.as_str()
            };
            write!(f, "\n- {path}: {}", violation.message)?;
        }
        if self.total > MAX_COUNTED {
            write!(
                f,
                "\n- … and more than {} more",
                MAX_COUNTED - self.violations.len()
            )?;
        } else if self.total > self.violations.len() {
            write!(f, "\n- … and {} more", self.total - self.violations.len())?;
        }
        write!(
            f,
            "\nCall the tool again with input that matches the schema."
        )
    }
}

/// A built-in tool's input schema: built once per process (on first use), with the validator
/// compiled for it. Made by [`static_schema!`].
pub struct StaticSchema {
    value: LazyLock<Arc<Value>>,
    compiled: OnceLock<CompiledSchema>,
}

impl StaticSchema {
    pub const fn new(build: fn() -> Arc<Value>) -> Self {
        Self {
            value: LazyLock::new(build),
            compiled: OnceLock::new(),
        }
    }

    /// The schema.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The schema, shared.
    pub fn shared(&self) -> Arc<Value> {
        Arc::clone(&self.value)
    }

    /// Its validator, compiled on the first call.
    pub fn compiled(&self) -> Result<CompiledSchema, SchemaError> {
        if let Some(compiled) = self.compiled.get() {
            return Ok(compiled.clone());
        }
        let compiled = CompiledSchema::compile(&self.value)?;
        Ok(self.compiled.get_or_init(|| compiled).clone())
    }
}

/// A `&'static` [`StaticSchema`] from `json!` tokens (its own static per use).
macro_rules! static_schema {
    ($($json:tt)+) => {{
        static SCHEMA: $crate::tools::schema::StaticSchema =
            $crate::tools::schema::StaticSchema::new(|| {
                std::sync::Arc::new(serde_json::json!($($json)+))
            });
        &SCHEMA
    }};
}
pub(crate) use static_schema;

/// A compiled input schema. Validation is allocation-free when the input is valid.
#[derive(Clone, Debug)]
pub struct CompiledSchema {
    validator: Arc<jsonschema::Validator>,
}

impl CompiledSchema {
    /// Compiles `schema` (checked against its meta-schema, offline: remote `$ref`s are errors).
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(SchemaError::NotAnObjectSchema);
        }
        let key = schema.to_string();
        let cache = validator_cache();
        if let Some(validator) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(Self {
                validator: validator.clone(),
            });
        }
        let validator = Arc::new(
            jsonschema::options()
                .should_validate_formats(true)
                .with_pattern_options(
                    jsonschema::PatternOptions::regex()
                        .size_limit(PATTERN_SIZE_LIMIT)
                        .dfa_size_limit(PATTERN_SIZE_LIMIT),
                )
                .offline()
                .build(schema)
                .map_err(|error| SchemaError::Invalid {
                    message: error.masked().to_string(),
                    schema_path: error.instance_path().to_string(),
                })?,
        );
        if key.len() <= CACHE_MAX_SCHEMA_BYTES {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key, validator.clone());
        }
        Ok(Self { validator })
    }

    /// Whether both use the same compiled validator (shared through the cache).
    pub fn shares_validator_with(&self, other: &CompiledSchema) -> bool {
        Arc::ptr_eq(&self.validator, &other.validator)
    }

    /// Validates one input.
    pub fn validate(&self, input: &Value) -> Result<(), SchemaViolations> {
        if self.validator.is_valid(input) {
            return Ok(());
        }
        let mut violations = Vec::new();
        let mut total = 0;
        for error in self.validator.iter_errors(input).take(MAX_COUNTED + 1) {
            total += 1;
            if violations.len() < MAX_LISTED {
                violations.push(FieldViolation {
                    instance_path: error.instance_path().to_string(),
                    message: error.masked_with("the value").to_string(),
                });
            }
        }
        Err(SchemaViolations { violations, total })
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
