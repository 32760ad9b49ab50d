use super::*;
use crate::tools::builder::ToolBuilder;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::{Value, json};

fn tool(name: &str, description: &str) -> DynTool {
    let text = description.to_owned();
    Arc::new(
        ToolBuilder::new(name)
            .description(description)
            .schema(json!({"type": "object"}))
            .handler(move |_, _| {
                let text = text.clone();
                async move { Ok(ToolOutput::text(text)) }
            })
            .build()
            .unwrap(),
    )
}

/// A hand-written tool whose schema the builder never saw.
struct BadSchema;

#[async_trait]
impl Tool for BadSchema {
    fn name(&self) -> &str {
        "Bad"
    }
    fn description(&self) -> &str {
        "bad"
    }
    fn input_schema(&self) -> &Value {
        static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| json!({"type": "object", "properties": {"a": {"type": 7}}}))
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::default())
    }
}

#[tokio::test]
async fn a_duplicate_name_replaces_the_earlier_tool_in_place() {
    let mut registry = ToolRegistry::new();
    registry.register(tool("A", "first")).unwrap();
    registry.register(tool("B", "b")).unwrap();
    let replaced = registry.register(tool("A", "second")).unwrap();
    assert_eq!(
        replaced.map(|t| t.description().to_owned()),
        Some("first".into())
    );
    assert_eq!(registry.names().collect::<Vec<_>>(), vec!["A", "B"]);
    let entry = registry.lookup("A").unwrap();
    let output = entry
        .tool
        .call(json!({}), &ToolContext::for_tests())
        .await
        .unwrap();
    assert_eq!(output.text, "second");
}

#[test]
fn invalid_schemas_and_names_are_rejected_at_registration() {
    let mut registry = ToolRegistry::new();
    let Err(error) = registry.register(Arc::new(BadSchema)) else {
        panic!("an invalid schema was accepted");
    };
    assert!(matches!(error, RegistryError::InvalidSchema { ref name, .. } if name == "Bad"));
    assert!(
        error
            .to_string()
            .starts_with("tool \"Bad\": invalid input schema"),
        "{error}"
    );
    assert!(registry.is_empty());
    assert!(!is_valid_tool_name(""));
    assert!(!is_valid_tool_name(&"x".repeat(65)));
    assert!(!is_valid_tool_name("a.b"));
    assert!(is_valid_tool_name("mcp__github__get_issue"));
}

#[test]
fn provider_listing_and_lookup_are_separate_paths() {
    let mut registry = ToolRegistry::new();
    registry.register(tool("Visible", "v")).unwrap();
    registry.register_deferred(tool("Hidden", "h")).unwrap();

    let listed: Vec<_> = registry
        .provider_tools()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(listed, vec!["Visible"]);
    let deferred: Vec<_> = registry
        .deferred_tools()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(deferred, vec!["Hidden"]);

    let none = HashSet::new();
    assert!(registry.lookup_visible("Visible", &none).is_ok());
    assert_eq!(
        registry.lookup_visible("Hidden", &none).err(),
        Some(LookupError::Hidden)
    );
    assert_eq!(
        registry.lookup_visible("Missing", &none).err(),
        Some(LookupError::NotFound)
    );
    let unlocked: HashSet<String> = ["Hidden".to_owned()].into();
    assert!(registry.lookup_visible("Hidden", &unlocked).is_ok());
    // Unlocking never shows the schema to the provider (N12).
    assert_eq!(registry.provider_tools().len(), 1);
    assert!(registry.lookup("Hidden").is_some());
}

#[test]
fn the_shared_provider_list_follows_registrations() {
    let mut registry = ToolRegistry::new();
    registry.register(tool("A", "a")).unwrap();
    let first = registry.provider_tools();
    assert!(
        Arc::ptr_eq(&first, &registry.provider_tools()),
        "built once"
    );
    let before = registry.clone();
    registry.register(tool("B", "b")).unwrap();
    let names = |list: Arc<[ProviderTool]>| list.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(registry.provider_tools()), vec!["A", "B"]);
    assert_eq!(
        names(before.provider_tools()),
        vec!["A"],
        "a clone keeps its own list"
    );
    registry.unregister("A");
    assert_eq!(names(registry.provider_tools()), vec!["B"]);
}

#[test]
fn the_provider_description_includes_the_prompt_and_schema() {
    let mut registry = ToolRegistry::new();
    let with_prompt: DynTool = Arc::new(
        ToolBuilder::new("P")
            .description("Does p.")
            .prompt("Only on Tuesdays.")
            .schema(json!({"type": "object", "properties": {"x": {"type": "string"}}}))
            .handler(|_, _| async { Ok(ToolOutput::default()) })
            .build()
            .unwrap(),
    );
    registry.register(with_prompt).unwrap();
    assert_eq!(
        registry.provider_tools().to_vec(),
        vec![ProviderTool {
            name: "P".into(),
            description: "Does p.\n\nOnly on Tuesdays.".into(),
            input_schema: json!({"type": "object", "properties": {"x": {"type": "string"}}}).into(),
        }]
    );
}

#[test]
fn clones_are_cheap_and_independent() {
    let mut registry = ToolRegistry::new();
    registry.register(tool("A", "a")).unwrap();
    let snapshot = registry.clone();
    assert!(Arc::ptr_eq(&snapshot.table, &registry.table));
    registry.register(tool("B", "b")).unwrap();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(registry.len(), 2);
    assert!(registry.unregister("A").is_some());
    assert_eq!(registry.names().collect::<Vec<_>>(), vec!["B"]);
    assert!(snapshot.lookup("A").is_some());
}

#[test]
fn a_built_in_tool_schema_is_built_compiled_and_listed_once_per_process() {
    let registry = || {
        let mut registry = ToolRegistry::new();
        registry
            .register(Arc::new(crate::tools::builtin::read::ReadTool::new()))
            .unwrap();
        registry
    };
    let (first, second) = (registry(), registry());
    let (a, b) = (first.provider_tools(), second.provider_tools());
    assert_eq!(a[0].input_schema["required"], json!(["file_path"]));
    assert!(
        Arc::ptr_eq(&a[0].input_schema, &b[0].input_schema),
        "two runs' lists share the built-in schema"
    );
    let (x, y) = (
        first.lookup("Read").unwrap(),
        second.lookup("Read").unwrap(),
    );
    assert!(x.schema.shares_validator_with(&y.schema));
    // The shared validator still judges inputs.
    assert!(
        x.schema.validate(&json!({})).is_err(),
        "file_path is required"
    );
    assert!(x.schema.validate(&json!({"file_path": "a.txt"})).is_ok());
}

/// A schema compiled by whoever made the tool (an MCP server's listing, once per tool list)
/// is used as it is by every registry the tool is built into: neither compiled nor copied
/// again, even when it is too large for the process-wide cache.
#[test]
fn a_compiled_schema_is_shared_by_every_registry_it_is_built_into() {
    let properties: serde_json::Map<String, Value> = (0..600)
        .map(|n| {
            (
                format!("field_{n:04}"),
                json!({"type": "string", "maxLength": 10}),
            )
        })
        .collect();
    let schema = json!({"type": "object", "properties": properties});
    assert!(schema.to_string().len() > crate::tools::schema::CACHE_MAX_SCHEMA_BYTES);
    let shared = Arc::new(schema);
    let compiled = crate::tools::schema::CompiledSchema::compile(&shared).unwrap();
    let registry = || {
        let built = ToolBuilder::new("mcp__fx__wide")
            .description("wide")
            .compiled_schema(shared.clone(), compiled.clone())
            .handler(|_input, _ctx| async { Ok(ToolOutput::text("ok")) })
            .build()
            .unwrap();
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(built)).unwrap();
        registry
    };
    let (first, second) = (registry(), registry());
    let (a, b) = (first.provider_tools(), second.provider_tools());
    assert!(Arc::ptr_eq(&a[0].input_schema, &shared));
    assert!(Arc::ptr_eq(&b[0].input_schema, &shared));
    let (x, y) = (
        first.lookup("mcp__fx__wide").unwrap(),
        second.lookup("mcp__fx__wide").unwrap(),
    );
    assert!(x.schema.shares_validator_with(&compiled));
    assert!(y.schema.shares_validator_with(&compiled));
    assert!(
        x.schema
            .validate(&json!({"field_0001": "too long a value"}))
            .is_err()
    );
    assert!(x.schema.validate(&json!({"field_0001": "short"})).is_ok());
}
