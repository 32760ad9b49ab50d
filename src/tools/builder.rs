//! [`ToolBuilder`] (N2): a tool from a name, a schema and an async handler. Every security
//! property left unset closes safe: mutating, exclusive (not concurrency-safe), not a file
//! edit, approval-required ([`SelfDecision::Ask`]), and permission rules match the name only.

use super::registry::is_valid_tool_name;
use super::schema::{CompiledSchema, SchemaError, StaticSchema};
use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::permission::{SelfDecision, Subject};
use async_trait::async_trait;
use futures::future::BoxFuture;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;

/// Why a tool could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolBuildError {
    #[error("invalid tool name {0:?}: use 1 to 64 characters from [A-Za-z0-9_-]")]
    InvalidName(String),
    #[error("tool {0:?} has no input schema")]
    MissingSchema(String),
    #[error("tool {name:?}: {source}")]
    InvalidSchema {
        name: String,
        #[source]
        source: SchemaError,
    },
    #[error("tool {0:?} has no handler")]
    MissingHandler(String),
}

type Handler = Arc<
    dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<ToolOutput, ToolError>> + Send + Sync,
>;
type InputPredicate<T> = Arc<dyn Fn(&Value) -> T + Send + Sync>;

/// Builds a [`BuiltTool`]. See the module docs for the defaults.
#[must_use]
pub struct ToolBuilder {
    name: String,
    description: String,
    prompt: String,
    schema: Option<Schema>,
    raw_input: bool,
    read_only: InputPredicate<bool>,
    concurrency_safe: InputPredicate<bool>,
    file_edit: bool,
    self_decision: InputPredicate<SelfDecision>,
    subject: Subject,
    handler: Option<Handler>,
}

/// A built tool's input schema: its own, one shared for the process's life, or one shared
/// and compiled by whoever made the tool.
enum Schema {
    Owned(Value),
    Static(&'static StaticSchema),
    Compiled(Arc<Value>, CompiledSchema),
}

impl Schema {
    fn value(&self) -> &Value {
        match self {
            Self::Owned(value) => value,
            Self::Static(schema) => schema.value(),
            Self::Compiled(value, _) => value,
        }
    }
}

impl ToolBuilder {
    /// A builder with every security property at its closed default.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            prompt: String::new(),
            schema: None,
            raw_input: false,
            read_only: Arc::new(|_| false),
            concurrency_safe: Arc::new(|_| false),
            file_edit: false,
            self_decision: Arc::new(|_| SelfDecision::Ask),
            subject: Subject::Name,
            handler: None,
        }
    }

    /// What the tool does, as the model reads it.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = text.into();
        self
    }

    /// Extra usage guidance shown to the model after the description.
    pub fn prompt(mut self, text: impl Into<String>) -> Self {
        self.prompt = text.into();
        self
    }

    /// The input JSON Schema (required; compiled and checked by [`Self::build`]).
    pub fn schema(mut self, schema: Value) -> Self {
        self.schema = Some(Schema::Owned(schema));
        self
    }

    /// The input JSON Schema as already compiled (`compiled` must be `schema`'s): shared by
    /// every tool built from it, never compiled again.
    pub fn compiled_schema(mut self, schema: Arc<Value>, compiled: CompiledSchema) -> Self {
        self.schema = Some(Schema::Compiled(schema, compiled));
        self
    }

    /// The input JSON Schema, built once per process (see [`super::schema::static_schema!`]).
    pub fn static_schema(mut self, schema: &'static StaticSchema) -> Self {
        self.schema = Some(Schema::Static(schema));
        self
    }

    /// The tool parses its own input: the pipeline skips central validation.
    pub fn raw_input(mut self) -> Self {
        self.raw_input = true;
        self
    }

    /// Whether the tool never changes anything (for every input).
    pub fn read_only(mut self, yes: bool) -> Self {
        self.read_only = Arc::new(move |_| yes);
        self
    }

    /// Read-only depending on the input.
    pub fn read_only_when(mut self, f: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Self {
        self.read_only = Arc::new(f);
        self
    }

    /// Whether calls may run alongside others (for every input).
    pub fn concurrency_safe(mut self, yes: bool) -> Self {
        self.concurrency_safe = Arc::new(move |_| yes);
        self
    }

    /// Concurrency-safe depending on the input.
    pub fn concurrency_safe_when(
        mut self,
        f: impl Fn(&Value) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.concurrency_safe = Arc::new(f);
        self
    }

    /// Marks a file-editing tool (allowed by the `acceptEdits` mode).
    pub fn file_edit(mut self) -> Self {
        self.file_edit = true;
        self
    }

    /// The tool's own permission decision (for every input).
    pub fn self_decision(mut self, decision: SelfDecision) -> Self {
        self.self_decision = Arc::new(move |_| decision);
        self
    }

    /// The tool's own decision depending on the input.
    pub fn self_decision_when(
        mut self,
        f: impl Fn(&Value) -> SelfDecision + Send + Sync + 'static,
    ) -> Self {
        self.self_decision = Arc::new(f);
        self
    }

    /// What `Name(...)` permission rules match in the input.
    pub fn subject(mut self, subject: Subject) -> Self {
        self.subject = subject;
        self
    }

    /// The async body of the tool.
    pub fn handler<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |input, ctx| Box::pin(f(input, ctx))));
        self
    }

    /// Checks the name, the schema and that a handler exists.
    pub fn build(self) -> Result<BuiltTool, ToolBuildError> {
        if !is_valid_tool_name(&self.name) {
            return Err(ToolBuildError::InvalidName(self.name));
        }
        let Some(schema) = self.schema else {
            return Err(ToolBuildError::MissingSchema(self.name));
        };
        let compiled = match &schema {
            Schema::Owned(value) => CompiledSchema::compile(value),
            Schema::Static(schema) => schema.compiled(),
            Schema::Compiled(_, compiled) => Ok(compiled.clone()),
        };
        if let Err(source) = compiled {
            return Err(ToolBuildError::InvalidSchema {
                name: self.name,
                source,
            });
        }
        let Some(handler) = self.handler else {
            return Err(ToolBuildError::MissingHandler(self.name));
        };
        Ok(BuiltTool {
            name: self.name,
            description: self.description,
            prompt: self.prompt,
            schema,
            raw_input: self.raw_input,
            read_only: self.read_only,
            concurrency_safe: self.concurrency_safe,
            file_edit: self.file_edit,
            self_decision: self.self_decision,
            subject: self.subject,
            handler,
        })
    }
}

/// A tool made by [`ToolBuilder`].
pub struct BuiltTool {
    name: String,
    description: String,
    prompt: String,
    schema: Schema,
    raw_input: bool,
    read_only: InputPredicate<bool>,
    concurrency_safe: InputPredicate<bool>,
    file_edit: bool,
    self_decision: InputPredicate<SelfDecision>,
    subject: Subject,
    handler: Handler,
}

#[async_trait]
impl Tool for BuiltTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn prompt(&self) -> &str {
        &self.prompt
    }

    fn input_schema(&self) -> &Value {
        self.schema.value()
    }

    fn static_schema(&self) -> Option<&'static StaticSchema> {
        match self.schema {
            Schema::Static(schema) => Some(schema),
            Schema::Owned(_) | Schema::Compiled(..) => None,
        }
    }

    fn compiled_schema(&self) -> Option<(Arc<Value>, CompiledSchema)> {
        match &self.schema {
            Schema::Compiled(value, compiled) => Some((value.clone(), compiled.clone())),
            Schema::Owned(_) | Schema::Static(_) => None,
        }
    }

    fn raw_input(&self) -> bool {
        self.raw_input
    }

    fn is_read_only(&self, input: &Value) -> bool {
        (self.read_only)(input)
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        (self.concurrency_safe)(input)
    }

    fn is_file_edit(&self) -> bool {
        self.file_edit
    }

    fn self_decision(&self, input: &Value) -> SelfDecision {
        (self.self_decision)(input)
    }

    fn permission_subject(&self) -> Subject {
        self.subject.clone()
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        (self.handler)(input, ctx.clone()).await
    }
}

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;
