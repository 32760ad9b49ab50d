//! Store-backed tool state, run against SQLite and Postgres (a fresh database per test): the
//! todo list, the permission-mode override and tenant memory notes at the store level; the
//! TodoWrite, EnterPlanMode / ExitPlanMode and Memory tools on top; tenant isolation of memory
//! (including Postgres row-level security for a query that forgets its tenant filter).

use norma::ids::{SessionId, TenantId};
use norma::permission::{PermissionMode, SelfDecision};
use norma::store::postgres::PgStore;
use norma::store::{
    ConnectOptions, MemoryExpect, ModeOverride, NewSession, Store, StoreError, TodoItem,
    TodoPriority, TodoStatus,
};
use norma::tools::builtin::memory::{MemoryLimits, MemoryTool, codes as memory_codes};
use norma::tools::builtin::plan::{self, codes as plan_codes};
use norma::tools::builtin::todo::codes as todo_codes;
use norma::tools::builtin::{codes as builtin_codes, state_tools};
use norma::tools::schema::CompiledSchema;
use norma::tools::{DynTool, Tool, ToolContext, ToolError};
use serde_json::{Value, json};
use std::sync::Arc;

#[path = "support/pg.rs"]
mod pg;
use pg::fresh_pg_database;

async fn sqlite_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = norma::store::connect(&url, &ConnectOptions::default())
        .await
        .unwrap();
    (store, dir)
}

async fn pg_store() -> Option<Arc<dyn Store>> {
    let url = fresh_pg_database().await?;
    Some(
        norma::store::connect(&url, &ConnectOptions::default())
            .await
            .unwrap(),
    )
}

macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                let (store, _dir) = super::sqlite_store().await;
                super::$name(store).await;
            }
            #[tokio::test]
            async fn postgres() {
                if let Some(store) = super::pg_store().await {
                    super::$name(store).await;
                }
            }
        }
    )*};
}

both_backends!(
    todos_round_trip_and_stay_in_their_tenant,
    mode_override_round_trips_and_stays_in_its_tenant,
    memory_writes_are_compare_and_set,
    memory_is_tenant_scoped_in_the_store,
    todo_write_persists_reports_and_validates,
    plan_mode_enters_and_restores_durably,
    plan_mode_configured_at_creation,
    memory_tool_commands,
    memory_tool_limits,
    memory_tool_tenant_isolation,
    memory_tool_concurrent_appends_lose_nothing,
);

async fn new_session(store: &Arc<dyn Store>, tenant: &str, config: Value) -> SessionId {
    let id = SessionId::generate();
    store
        .create_session(NewSession {
            id: id.clone(),
            tenant: TenantId::new(tenant),
            config,
        })
        .await
        .unwrap();
    id
}

fn todo(id: &str, status: TodoStatus) -> TodoItem {
    TodoItem {
        id: id.into(),
        content: format!("do {id}"),
        status,
        priority: TodoPriority::Medium,
    }
}

fn tool(tools: &[DynTool], name: &str) -> DynTool {
    tools
        .iter()
        .find(|t| t.name() == name)
        .cloned()
        .unwrap_or_else(|| panic!("tool {name}"))
}

async fn call_ok(tool: &dyn Tool, input: Value) -> String {
    match tool.call(input.clone(), &ToolContext::for_tests()).await {
        Ok(out) => out.text,
        Err(error) => panic!("{} {input} failed: {error}", tool.name()),
    }
}

async fn call_err(tool: &dyn Tool, input: Value) -> ToolError {
    match tool.call(input.clone(), &ToolContext::for_tests()).await {
        Ok(out) => panic!("{} {input} succeeded: {}", tool.name(), out.text),
        Err(error) => error,
    }
}

// ---------------------------------------------------------------- store level

async fn todos_round_trip_and_stay_in_their_tenant(store: Arc<dyn Store>) {
    let acme = TenantId::new("acme");
    let other = TenantId::new("other");
    let session = new_session(&store, "acme", json!({})).await;
    assert!(store.get_todos(&acme, &session).await.unwrap().is_empty());

    let first = vec![
        todo("a", TodoStatus::Completed),
        todo("b", TodoStatus::InProgress),
    ];
    store.put_todos(&acme, &session, &first).await.unwrap();
    assert_eq!(store.get_todos(&acme, &session).await.unwrap(), first);

    let second = vec![todo("c", TodoStatus::Pending)];
    store.put_todos(&acme, &session, &second).await.unwrap();
    assert_eq!(store.get_todos(&acme, &session).await.unwrap(), second);

    // Another tenant neither sees nor overwrites the list.
    assert!(store.get_todos(&other, &session).await.unwrap().is_empty());
    assert!(matches!(
        store.put_todos(&other, &session, &first).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.put_todos(&acme, &SessionId::generate(), &first).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.get_todos(&acme, &session).await.unwrap(), second);
}

async fn mode_override_round_trips_and_stays_in_its_tenant(store: Arc<dyn Store>) {
    let acme = TenantId::new("acme");
    let other = TenantId::new("other");
    let session = new_session(&store, "acme", json!({})).await;
    assert_eq!(
        store.get_mode_override(&acme, &session).await.unwrap(),
        None
    );

    let plan = ModeOverride {
        mode: PermissionMode::Plan,
        previous: Some(PermissionMode::AcceptEdits),
    };
    store
        .set_mode_override(&acme, &session, plan)
        .await
        .unwrap();
    assert_eq!(
        store.get_mode_override(&acme, &session).await.unwrap(),
        Some(plan)
    );
    let back = ModeOverride {
        mode: PermissionMode::AcceptEdits,
        previous: None,
    };
    store
        .set_mode_override(&acme, &session, back)
        .await
        .unwrap();
    assert_eq!(
        store.get_mode_override(&acme, &session).await.unwrap(),
        Some(back)
    );

    assert_eq!(
        store.get_mode_override(&other, &session).await.unwrap(),
        None
    );
    assert!(matches!(
        store.set_mode_override(&other, &session, plan).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.get_mode_override(&acme, &session).await.unwrap(),
        Some(back)
    );
}

async fn memory_writes_are_compare_and_set(store: Arc<dyn Store>) {
    let t = TenantId::new("acme");
    let created = store
        .memory_put(&t, "notes/a.md", "one", MemoryExpect::Absent)
        .await
        .unwrap();
    assert_eq!((created.version, created.content.as_str()), (1, "one"));
    assert!(matches!(
        store
            .memory_put(&t, "notes/a.md", "again", MemoryExpect::Absent)
            .await,
        Err(StoreError::Conflict(_))
    ));
    let updated = store
        .memory_put(&t, "notes/a.md", "two", MemoryExpect::Version(1))
        .await
        .unwrap();
    assert_eq!(updated.version, 2);
    assert_eq!(updated.created_at, created.created_at);
    // A writer that read version 1 loses.
    assert!(matches!(
        store
            .memory_put(&t, "notes/a.md", "stale", MemoryExpect::Version(1))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store
            .memory_put(&t, "missing", "x", MemoryExpect::Version(1))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let note = store.memory_get(&t, "notes/a.md").await.unwrap().unwrap();
    assert_eq!((note.content.as_str(), note.version), ("two", 2));

    store
        .memory_put(&t, "notes/b.md", "héllo", MemoryExpect::Absent)
        .await
        .unwrap();
    store
        .memory_put(&t, "notesx/c.md", "c", MemoryExpect::Absent)
        .await
        .unwrap();
    let listed: Vec<(String, i64)> = store
        .memory_list(&t, "notes/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.path, e.size_bytes))
        .collect();
    assert_eq!(
        listed,
        vec![("notes/a.md".into(), 3), ("notes/b.md".into(), 6)]
    );
    assert_eq!(store.memory_list(&t, "").await.unwrap().len(), 3);
    // `%` and `_` are not wildcards in a prefix.
    assert!(store.memory_list(&t, "note_/").await.unwrap().is_empty());
    assert!(store.memory_list(&t, "%").await.unwrap().is_empty());

    let usage = store.memory_usage(&t).await.unwrap();
    assert_eq!((usage.notes, usage.bytes), (3, 3 + 6 + 1));
    assert!(store.memory_delete(&t, "notes/a.md").await.unwrap());
    assert!(!store.memory_delete(&t, "notes/a.md").await.unwrap());
    assert_eq!(store.memory_get(&t, "notes/a.md").await.unwrap(), None);
    assert_eq!(store.memory_usage(&t).await.unwrap().notes, 2);
}

async fn memory_is_tenant_scoped_in_the_store(store: Arc<dyn Store>) {
    let a = TenantId::new("tenant-a");
    let b = TenantId::new("tenant-b");
    store
        .memory_put(&a, "shared/path.md", "a's secret", MemoryExpect::Absent)
        .await
        .unwrap();
    assert_eq!(store.memory_get(&b, "shared/path.md").await.unwrap(), None);
    assert!(store.memory_list(&b, "").await.unwrap().is_empty());
    assert_eq!(store.memory_usage(&b).await.unwrap().notes, 0);
    assert!(!store.memory_delete(&b, "shared/path.md").await.unwrap());
    assert!(matches!(
        store
            .memory_put(&b, "shared/path.md", "b", MemoryExpect::Version(1))
            .await,
        Err(StoreError::Conflict(_))
    ));
    // The same path is an independent note in another tenant.
    store
        .memory_put(&b, "shared/path.md", "b's own", MemoryExpect::Absent)
        .await
        .unwrap();
    let a_note = store
        .memory_get(&a, "shared/path.md")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a_note.content, "a's secret");
    assert_eq!(a_note.version, 1);
}

#[tokio::test]
async fn postgres_rls_hides_other_tenants_tool_state() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let pg = PgStore::connect(&url, &ConnectOptions::default())
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(
        PgStore::connect(&url, &ConnectOptions::default())
            .await
            .unwrap(),
    );
    let a = TenantId::new("tenant-a");
    let session = new_session(&store, "tenant-a", json!({})).await;
    store
        .put_todos(&a, &session, &[todo("x", TodoStatus::Pending)])
        .await
        .unwrap();
    store
        .set_mode_override(
            &a,
            &session,
            ModeOverride {
                mode: PermissionMode::Plan,
                previous: None,
            },
        )
        .await
        .unwrap();
    store
        .memory_put(&a, "k", "v", MemoryExpect::Absent)
        .await
        .unwrap();
    for (tenant, expected) in [("tenant-a", 1_i64), ("tenant-b", 0)] {
        let mut tx = pg.tenant_tx(&TenantId::new(tenant)).await.unwrap();
        for table in ["session_todos", "session_modes", "memory_notes"] {
            // No tenant filter: row-level security alone decides what is visible.
            let count: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert_eq!(count, expected, "{tenant} sees {count} rows of {table}");
        }
        // Nor can it write a row claiming another tenant.
        let forged = sqlx::query(
            "INSERT INTO memory_notes (tenant_id, path, content, size_bytes, version) \
             VALUES ('tenant-a', 'forged', 'x', 1, 1)",
        )
        .execute(&mut *tx)
        .await;
        assert_eq!(forged.is_err(), tenant == "tenant-b");
        tx.rollback().await.unwrap();
    }
}

// ---------------------------------------------------------------- tools

#[tokio::test]
async fn state_tool_schemas_compile_and_names_are_stable() {
    let (store, _dir) = sqlite_store().await;
    let tools = state_tools(store, TenantId::new("acme"), SessionId::generate());
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        ["TodoWrite", "EnterPlanMode", "ExitPlanMode", "Memory"]
    );
    for tool in &tools {
        CompiledSchema::compile(tool.input_schema())
            .unwrap_or_else(|e| panic!("{}: {e}", tool.name()));
    }
}

async fn todo_write_persists_reports_and_validates(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let session = new_session(&store, "acme", json!({})).await;
    let tools = state_tools(store.clone(), tenant.clone(), session.clone());
    let todo_write = tool(&tools, "TodoWrite");
    let input = json!({"todos": [
        {"id": "1", "content": "read the code", "status": "completed", "priority": "high"},
        {"id": "2", "content": "write the fix", "status": "in_progress", "priority": "medium"},
        {"id": "3", "content": "run the tests", "status": "pending", "priority": "low"}
    ]});
    assert_eq!(todo_write.self_decision(&input), SelfDecision::Allow);
    assert!(!todo_write.is_read_only(&input));
    let schema = CompiledSchema::compile(todo_write.input_schema()).unwrap();
    schema.validate(&input).unwrap();
    assert!(
        schema
            .validate(&json!({"todos": [{"id": "1", "content": "x", "status": "done", "priority": "low"}]}))
            .is_err()
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut ctx = ToolContext::for_tests();
    ctx.progress = Some(norma::tools::ProgressSink::new(move |report| {
        let _ = tx.send(report);
    }));
    ctx.tool_use_id = "toolu_todo".into();
    let out = todo_write.call(input.clone(), &ctx).await.unwrap();
    assert!(out.text.contains("1/3 completed"), "{}", out.text);
    assert!(
        out.text.contains("[~] 2 (medium) write the fix"),
        "{}",
        out.text
    );

    let progress = rx.try_recv().expect("the new list is reported as progress");
    assert_eq!(progress.tool_use_id, "toolu_todo");
    assert_eq!(progress.data["kind"], "todos");
    assert_eq!(progress.data["todos"], input["todos"]);

    let stored = store.get_todos(&tenant, &session).await.unwrap();
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[1].status, TodoStatus::InProgress);
    assert_eq!(stored[0].priority, TodoPriority::High);

    // Invalid lists change nothing.
    let dup = json!({"todos": [
        {"id": "1", "content": "a", "status": "pending", "priority": "low"},
        {"id": "1", "content": "b", "status": "pending", "priority": "low"}
    ]});
    assert_eq!(
        call_err(todo_write.as_ref(), dup).await.code,
        todo_codes::TODO_DUPLICATE_ID
    );
    let blank =
        json!({"todos": [{"id": "1", "content": "  ", "status": "pending", "priority": "low"}]});
    assert_eq!(
        call_err(todo_write.as_ref(), blank).await.code,
        todo_codes::TODO_INVALID
    );
    let many: Vec<Value> = (0..101)
        .map(|i| json!({"id": i.to_string(), "content": "x", "status": "pending", "priority": "low"}))
        .collect();
    assert_eq!(
        call_err(todo_write.as_ref(), json!({"todos": many}))
            .await
            .code,
        todo_codes::TODO_TOO_MANY
    );
    assert_eq!(store.get_todos(&tenant, &session).await.unwrap(), stored);

    // Clearing the list is allowed.
    let out = call_ok(todo_write.as_ref(), json!({"todos": []})).await;
    assert!(out.contains("cleared"));
    assert!(store.get_todos(&tenant, &session).await.unwrap().is_empty());

    // A tool built for a session of another tenant cannot write this session's list.
    let foreign = state_tools(store.clone(), TenantId::new("other"), session.clone());
    let err = call_err(
        tool(&foreign, "TodoWrite").as_ref(),
        json!({"todos": [{"id": "x", "content": "x", "status": "pending", "priority": "low"}]}),
    )
    .await;
    assert_eq!(err.code, plan_codes::SESSION_NOT_FOUND);
}

async fn plan_mode_enters_and_restores_durably(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let session = new_session(
        &store,
        "acme",
        json!({"permission": {"mode": "acceptEdits"}}),
    )
    .await;
    let tools = state_tools(store.clone(), tenant.clone(), session.clone());
    let enter = tool(&tools, "EnterPlanMode");
    let exit = tool(&tools, "ExitPlanMode");
    assert_eq!(enter.self_decision(&json!({})), SelfDecision::Allow);
    assert_eq!(exit.self_decision(&json!({"plan": "p"})), SelfDecision::Ask);
    let effective = || async {
        plan::effective_mode(
            store.as_ref(),
            &tenant,
            &session,
            PermissionMode::AcceptEdits,
        )
        .await
        .unwrap()
    };
    assert_eq!(effective().await, PermissionMode::AcceptEdits);

    // Leaving plan mode before entering it is an error.
    assert_eq!(
        call_err(exit.as_ref(), json!({"plan": "1. do it"}))
            .await
            .code,
        plan_codes::NOT_IN_PLAN_MODE
    );

    let out = call_ok(enter.as_ref(), json!({})).await;
    assert!(out.contains("was acceptEdits"), "{out}");
    assert_eq!(effective().await, PermissionMode::Plan);

    // Entering twice keeps the original mode to return to.
    let out = call_ok(enter.as_ref(), json!({})).await;
    assert!(out.contains("Already"), "{out}");

    // Durable: a fresh set of tools (as after a restart) sees plan mode.
    let again = state_tools(store.clone(), tenant.clone(), session.clone());
    let exit_again = tool(&again, "ExitPlanMode");
    assert_eq!(
        call_err(exit_again.as_ref(), json!({"plan": "   "}))
            .await
            .code,
        plan_codes::PLAN_INVALID
    );
    assert_eq!(effective().await, PermissionMode::Plan);
    let out = call_ok(exit_again.as_ref(), json!({"plan": "1. edit\n2. test"})).await;
    assert!(out.contains("acceptEdits"), "{out}");
    assert_eq!(effective().await, PermissionMode::AcceptEdits);
    assert_eq!(
        store.get_mode_override(&tenant, &session).await.unwrap(),
        Some(ModeOverride {
            mode: PermissionMode::AcceptEdits,
            previous: None
        })
    );
    assert_eq!(
        call_err(exit.as_ref(), json!({"plan": "again"})).await.code,
        plan_codes::NOT_IN_PLAN_MODE
    );
}

async fn plan_mode_configured_at_creation(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let session = new_session(&store, "acme", json!({"permission": {"mode": "plan"}})).await;
    let tools = state_tools(store.clone(), tenant.clone(), session.clone());
    let out = call_ok(tool(&tools, "EnterPlanMode").as_ref(), json!({})).await;
    assert!(out.contains("Already"), "{out}");
    assert_eq!(
        store.get_mode_override(&tenant, &session).await.unwrap(),
        None
    );
    // Approved: a session created in plan mode continues in `default`.
    call_ok(
        tool(&tools, "ExitPlanMode").as_ref(),
        json!({"plan": "the plan"}),
    )
    .await;
    assert_eq!(
        plan::effective_mode(store.as_ref(), &tenant, &session, PermissionMode::Plan)
            .await
            .unwrap(),
        PermissionMode::Default
    );
}

fn memory(store: &Arc<dyn Store>, tenant: &str) -> MemoryTool {
    MemoryTool::new(store.clone(), TenantId::new(tenant))
}

async fn memory_tool_commands(store: Arc<dyn Store>) {
    let m = memory(&store, "acme");
    assert!(m.is_read_only(&json!({"command": "view", "path": "a"})));
    assert!(m.is_read_only(&json!({"command": "list"})));
    assert!(m.is_concurrency_safe(&json!({"command": "list"})));
    for command in ["create", "str_replace", "append", "delete"] {
        let input = json!({"command": command, "path": "a"});
        assert!(!m.is_read_only(&input), "{command}");
        assert!(!m.is_concurrency_safe(&input), "{command}");
        assert_eq!(m.self_decision(&input), SelfDecision::None, "{command}");
    }
    assert_eq!(
        m.self_decision(&json!({"command": "view", "path": "a"})),
        SelfDecision::Allow
    );

    assert_eq!(
        call_ok(&m, json!({"command": "list"})).await,
        "(no memory notes)"
    );
    call_ok(
        &m,
        json!({"command": "create", "path": "/memories/project/alpha.md", "content": "line one\nline two"}),
    )
    .await;
    let view = call_ok(&m, json!({"command": "view", "path": "project/alpha.md"})).await;
    assert!(
        view.contains("     1\tline one\n     2\tline two"),
        "{view}"
    );
    // A directory view lists its notes.
    let dir = call_ok(&m, json!({"command": "view", "path": "/memories/project/"})).await;
    assert!(dir.contains("project/alpha.md\t17 bytes"), "{dir}");

    let exists = call_err(
        &m,
        json!({"command": "create", "path": "project/alpha.md", "content": "x"}),
    )
    .await;
    assert_eq!(exists.code, memory_codes::MEMORY_EXISTS);
    call_ok(
        &m,
        json!({"command": "create", "path": "project/alpha.md", "content": "alpha beta alpha", "overwrite": true}),
    )
    .await;

    let not_unique = call_err(
        &m,
        json!({"command": "str_replace", "path": "project/alpha.md", "old_str": "alpha", "new_str": "x"}),
    )
    .await;
    assert_eq!(not_unique.code, builtin_codes::EDIT_NOT_UNIQUE);
    let not_found = call_err(
        &m,
        json!({"command": "str_replace", "path": "project/alpha.md", "old_str": "gamma", "new_str": "x"}),
    )
    .await;
    assert_eq!(not_found.code, builtin_codes::EDIT_NOT_FOUND);
    call_ok(
        &m,
        json!({"command": "str_replace", "path": "project/alpha.md", "old_str": "beta", "new_str": "BETA"}),
    )
    .await;
    call_ok(
        &m,
        json!({"command": "append", "path": "project/alpha.md", "content": "tail"}),
    )
    .await;
    let note = store
        .memory_get(&TenantId::new("acme"), "project/alpha.md")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(note.content, "alpha BETA alpha\ntail");
    assert_eq!(note.version, 4);

    // Append creates a missing note; str_replace does not.
    call_ok(
        &m,
        json!({"command": "append", "path": "log", "content": "first"}),
    )
    .await;
    assert_eq!(
        call_err(
            &m,
            json!({"command": "str_replace", "path": "nope", "old_str": "a", "new_str": "b"})
        )
        .await
        .code,
        memory_codes::MEMORY_NOT_FOUND
    );
    let all = call_ok(&m, json!({"command": "list"})).await;
    assert_eq!(all, "log\t5 bytes\nproject/alpha.md\t21 bytes\n");

    call_ok(&m, json!({"command": "delete", "path": "log"})).await;
    assert_eq!(
        call_err(&m, json!({"command": "delete", "path": "log"}))
            .await
            .code,
        memory_codes::MEMORY_NOT_FOUND
    );
    assert_eq!(
        call_err(&m, json!({"command": "view", "path": "log"}))
            .await
            .code,
        memory_codes::MEMORY_NOT_FOUND
    );
    assert_eq!(
        call_err(&m, json!({"command": "create", "path": "x"}))
            .await
            .code,
        memory_codes::MEMORY_INPUT_INVALID
    );
    for bad in [
        "../etc/passwd",
        "a//b",
        "a/./b",
        "a\0b",
        "a\\b",
        "",
        "/",
        "sp ace",
        "ü",
    ] {
        let err = call_err(
            &m,
            json!({"command": "create", "path": bad, "content": "x"}),
        )
        .await;
        assert_eq!(err.code, memory_codes::MEMORY_PATH_INVALID, "{bad:?}");
    }
    let long = "a".repeat(201);
    let err = call_err(
        &m,
        json!({"command": "create", "path": long, "content": "x"}),
    )
    .await;
    assert_eq!(err.code, memory_codes::MEMORY_PATH_INVALID);
}

async fn memory_tool_limits(store: Arc<dyn Store>) {
    let limits = MemoryLimits {
        max_note_bytes: 10,
        max_notes: 2,
        max_total_bytes: 15,
        max_path_bytes: 50,
    };
    let m = MemoryTool::with_limits(store.clone(), TenantId::new("acme"), limits);
    let too_large = call_err(
        &m,
        json!({"command": "create", "path": "a", "content": "0123456789x"}),
    )
    .await;
    assert_eq!(too_large.code, memory_codes::MEMORY_NOTE_TOO_LARGE);
    call_ok(
        &m,
        json!({"command": "create", "path": "a", "content": "0123456789"}),
    )
    .await;
    let grow = call_err(
        &m,
        json!({"command": "append", "path": "a", "content": "x"}),
    )
    .await;
    assert_eq!(grow.code, memory_codes::MEMORY_NOTE_TOO_LARGE);
    let total = call_err(
        &m,
        json!({"command": "create", "path": "b", "content": "012345"}),
    )
    .await;
    assert_eq!(total.code, memory_codes::MEMORY_QUOTA_EXCEEDED);
    call_ok(
        &m,
        json!({"command": "create", "path": "b", "content": "01234"}),
    )
    .await;
    let count = call_err(&m, json!({"command": "create", "path": "c", "content": ""})).await;
    assert_eq!(count.code, memory_codes::MEMORY_QUOTA_EXCEEDED);
    // Replacing within the totals is fine: the old size is released.
    call_ok(
        &m,
        json!({"command": "create", "path": "a", "content": "short", "overwrite": true}),
    )
    .await;
    let usage = store.memory_usage(&TenantId::new("acme")).await.unwrap();
    assert_eq!((usage.notes, usage.bytes), (2, 10));
    // Another tenant's quota is separate.
    let other = MemoryTool::with_limits(store.clone(), TenantId::new("other"), limits);
    call_ok(
        &other,
        json!({"command": "create", "path": "c", "content": "0123456789"}),
    )
    .await;
}

async fn memory_tool_tenant_isolation(store: Arc<dyn Store>) {
    let a = memory(&store, "tenant-a");
    let b = memory(&store, "tenant-b");
    call_ok(
        &a,
        json!({"command": "create", "path": "secrets/plan.md", "content": "a only"}),
    )
    .await;
    assert_eq!(
        call_ok(&b, json!({"command": "list"})).await,
        "(no memory notes)"
    );
    for input in [
        json!({"command": "view", "path": "secrets/plan.md"}),
        json!({"command": "view", "path": "secrets"}),
        json!({"command": "delete", "path": "secrets/plan.md"}),
        json!({"command": "str_replace", "path": "secrets/plan.md", "old_str": "a", "new_str": "b"}),
    ] {
        assert_eq!(
            call_err(&b, input.clone()).await.code,
            memory_codes::MEMORY_NOT_FOUND,
            "{input}"
        );
    }
    // B's append creates B's own note; A's note is untouched.
    call_ok(
        &b,
        json!({"command": "append", "path": "secrets/plan.md", "content": "b"}),
    )
    .await;
    let view = call_ok(&a, json!({"command": "view", "path": "secrets/plan.md"})).await;
    assert!(view.contains("a only") && !view.contains("\tb\n"), "{view}");
    // The session-bound tool set shares the tenant's memory across sessions.
    let s1 = new_session(&store, "tenant-a", json!({})).await;
    let tools = state_tools(store.clone(), TenantId::new("tenant-a"), s1);
    let view = call_ok(
        tool(&tools, "Memory").as_ref(),
        json!({"command": "view", "path": "secrets/plan.md"}),
    )
    .await;
    assert!(view.contains("a only"), "{view}");
}

async fn memory_tool_concurrent_appends_lose_nothing(store: Arc<dyn Store>) {
    let m = Arc::new(memory(&store, "acme"));
    call_ok(
        m.as_ref(),
        json!({"command": "create", "path": "log", "content": "start"}),
    )
    .await;
    let mut handles = Vec::new();
    for i in 0..10 {
        let m = m.clone();
        handles.push(tokio::spawn(async move {
            let line = format!("writer-{i}");
            let result = m
                .call(
                    json!({"command": "append", "path": "log", "content": line}),
                    &ToolContext::for_tests(),
                )
                .await;
            (line, result)
        }));
    }
    let mut succeeded = Vec::new();
    for handle in handles {
        match handle.await.unwrap() {
            (line, Ok(_)) => succeeded.push(line),
            (_, Err(error)) => assert_eq!(error.code, memory_codes::MEMORY_CONFLICT),
        }
    }
    let note = store
        .memory_get(&TenantId::new("acme"), "log")
        .await
        .unwrap()
        .unwrap();
    // Every append that reported success is in the note exactly once; none was lost.
    let lines: Vec<&str> = note.content.lines().collect();
    assert_eq!(lines.len(), 1 + succeeded.len(), "{lines:?}");
    for line in &succeeded {
        assert_eq!(lines.iter().filter(|l| *l == line).count(), 1, "{line}");
    }
    assert_eq!(note.version, 1 + succeeded.len() as i64);
    assert!(
        succeeded.len() >= 2,
        "only {} appends succeeded",
        succeeded.len()
    );
}
