//! Skills (issue 17): the tenant's registry (`/v1/skills`) and the `Skill` tool, end to end
//! through the HTTP API with the scripted provider, on both stores: registering and refusing
//! skills, loading one in a run (its deferred tool unlocked and callable, durably across a
//! restart on the same store), a skill that cannot unlock a denied tool, tenant isolation,
//! and skills shipped in the session's workspace.

use crate::helpers::*;
use crate::on_both_backends;
use secrecy::SecretString;
use serde_json::{Value, json};

const ADMIN: [&str; 4] = [
    "sessions:read",
    "sessions:write",
    "approvals:write",
    "tenant:admin",
];

on_both_backends!(
    skills_are_registered_listed_read_and_deleted_by_admins => crud_and_scopes;
    malformed_skills_are_refused_with_stable_reasons => malformed_skills;
    a_loaded_skill_unlocks_its_deferred_tool => load_unlocks;
    a_skill_never_unlocks_a_denied_tool => denied_tools_stay_denied;
    a_tenant_cannot_see_or_load_another_tenants_skill => tenant_isolation;
    a_skill_shipped_in_the_workspace_loads => workspace_skill;
);

fn skill_md(name: &str, tools: &[&str], body: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: The {name} skill: use it for {name} work.\n\
         tools: [{}]\n---\n{body}\n",
        tools.join(", ")
    )
}

fn body(name: &str, tools: &[&str], instructions: &str) -> Value {
    json!({"content": skill_md(name, tools, instructions)})
}

async fn register(app: &TestApp, tenant: &str, body: &Value) -> reqwest::Response {
    app.post_json("/v1/skills", &app.token_with_scopes(tenant, &ADMIN), body)
        .await
}

async fn registered(app: &TestApp, tenant: &str, body: &Value) {
    let response = register(app, tenant, body).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
}

fn turns(calls: &[(&str, Value)], last: &str) -> Vec<Value> {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(|(name, input)| json!({"tool_calls": [{"name": name, "input": input}]}))
        .collect();
    turns.push(json!({"text": last}));
    turns
}

/// Runs one prompt and waits for its run's terminal event; returns the session's events.
async fn run(app: &TestApp, tenant: &str, id: &str, terminals: usize) -> Vec<Value> {
    let token = app.token(tenant);
    let response = app.prompt(&token, id, "go").await;
    assert!(response.status().is_success(), "{}", response.status());
    app.wait_for_events(&token, id, |e| count(e, "terminal") >= terminals)
        .await
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

async fn crud_and_scopes(app: TestApp) {
    let user = app.token("acme");
    let refused = app
        .post_json("/v1/skills", &user, &body("finder", &["Glob"], "Find."))
        .await;
    assert_eq!(error_code(refused).await, (403, "FORBIDDEN_SCOPE".into()));
    let files = json!([{"path": "ref/patterns.md", "content": "**/*.rs"}]);
    let mut with_files = body("finder", &["Glob"], "Find files.");
    with_files["files"] = files.clone();
    let created = register(&app, "acme", &with_files).await;
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["name"], "finder");
    assert_eq!(created["tools"], json!(["Glob"]));
    assert_eq!(created["files"], files);
    let again = register(&app, "acme", &body("finder", &[], "x")).await;
    assert_eq!(error_code(again).await, (409, "CONFLICT".into()));
    registered(&app, "acme", &body("archiver", &[], "Archive.")).await;
    // Reading needs the read scope; the list has no content.
    let listed: Value = app.get("/v1/skills", &user).await.json().await.unwrap();
    let names: Vec<&str> = listed["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["archiver", "finder"]);
    assert!(listed["skills"][1].get("content").is_none(), "{listed}");
    let one: Value = app
        .get("/v1/skills/finder", &user)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(one["content"], with_files["content"]);
    assert_eq!(
        one["description"],
        "The finder skill: use it for finder work."
    );
    // Deleting needs tenant:admin.
    let by_user = app.delete("/v1/skills/finder", &user).await;
    assert_eq!(by_user.status(), 403);
    let admin = app.token_with_scopes("acme", &ADMIN);
    assert_eq!(app.delete("/v1/skills/finder", &admin).await.status(), 204);
    assert_eq!(app.get("/v1/skills/finder", &user).await.status(), 404);
    assert_eq!(app.delete("/v1/skills/finder", &admin).await.status(), 404);
    // A session naming a skill that is not registered is refused.
    let response = app
        .post_json("/v1/sessions", &user, &json!({"skills": ["finder"]}))
        .await;
    assert_eq!(response.status(), 422);
    let refusal: Value = response.json().await.unwrap();
    assert_eq!(refusal["details"]["field"], "skills[0]", "{refusal}");
    for (skills, field) in [
        (json!(["Bad"]), "skills[0]"),
        (json!(["*", "archiver"]), "skills[0]"),
        (json!(["archiver", "archiver"]), "skills[1]"),
    ] {
        let response = app
            .post_json("/v1/sessions", &user, &json!({ "skills": skills }))
            .await;
        assert_eq!(response.status(), 422);
        let refusal: Value = response.json().await.unwrap();
        assert_eq!(refusal["details"]["field"], field, "{refusal}");
    }
}

async fn malformed_skills(app: TestApp) {
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"content": "no front matter"}),
            "content",
            "SKILL_FRONT_MATTER_INVALID",
        ),
        (
            json!({"content": "---\nname: x\ndescription: d\nnested:\n  a: b\n---\n"}),
            "content",
            "SKILL_FRONT_MATTER_INVALID",
        ),
        (body("Bad_Name", &[], ""), "content", "SKILL_NAME_INVALID"),
        (
            json!({"content": format!("---\nname: x\ndescription: {}\n---\n", "d".repeat(1100))}),
            "content",
            "SKILL_DESCRIPTION_INVALID",
        ),
        (body("x", &["Deploy"], ""), "content", "SKILL_UNKNOWN_TOOL"),
        (
            body("x", &["SearchExtraTools"], ""),
            "content",
            "SKILL_UNKNOWN_TOOL",
        ),
        (
            body("x", &[], &"x".repeat(25 * 1024)),
            "content",
            "SKILL_TOO_LARGE",
        ),
        (
            json!({"content": skill_md("x", &[], ""),
                   "files": [{"path": "../escape", "content": "x"}]}),
            "files[0].path",
            "SKILL_FILE_PATH_INVALID",
        ),
        (
            json!({"content": skill_md("x", &[], ""),
                   "files": (0..17).map(|i| json!({"path": format!("f{i}"), "content": ""}))
                       .collect::<Vec<_>>()}),
            "files",
            "SKILL_TOO_MANY",
        ),
        (
            json!({"content": skill_md("x", &[], ""),
                   "files": [{"path": "big", "content": "x".repeat(25 * 1024)}]}),
            "files[0].content",
            "SKILL_TOO_LARGE",
        ),
    ];
    for (body, field, reason) in cases {
        let response = register(&app, "acme", &body).await;
        assert_eq!(response.status(), 422, "{reason}");
        let refusal: Value = response.json().await.unwrap();
        assert_eq!(refusal["code"], "INVALID_REQUEST", "{refusal}");
        assert_eq!(refusal["details"]["field"], field, "{refusal}");
        assert_eq!(refusal["details"]["reason"], reason, "{refusal}");
    }
    // Fields the body does not have, and a body that is not an object.
    for (body, field) in [
        (
            json!({"content": skill_md("x", &[], ""), "extra": 1}),
            "extra",
        ),
        (json!({"files": []}), "(root)"),
        (json!(["x"]), "(root)"),
        (
            json!({"content": skill_md("x", &[], ""), "files": [{"path": "a"}]}),
            "files[0]",
        ),
    ] {
        let response = register(&app, "acme", &body).await;
        assert_eq!(response.status(), 422, "{body}");
        let refusal: Value = response.json().await.unwrap();
        assert_eq!(refusal["details"]["field"], field, "{refusal}");
    }
    // Nothing was stored.
    let listed: Value = app
        .get("/v1/skills", &app.token("acme"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["skills"], json!([]));
}

/// The tenant limit on registered skills: `429 TENANT_LIMIT` with the limit named, and the
/// server still serves another tenant.
async fn skill_count_is_limited(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |settings| settings.limits.skills = 2).await
    else {
        return;
    };
    registered(&app, "acme", &body("one", &[], "")).await;
    registered(&app, "acme", &body("two", &[], "")).await;
    let third = register(&app, "acme", &body("three", &[], "")).await;
    assert_eq!(third.status(), 429);
    let refusal: Value = third.json().await.unwrap();
    assert_eq!(refusal["code"], "TENANT_LIMIT");
    assert_eq!(refusal["details"], json!({"limit": "skills", "max": 2}));
    registered(&app, "globex", &body("three", &[], "")).await;
}

mod the_number_of_skills_is_a_tenant_limit {
    #[tokio::test]
    async fn sqlite() {
        super::skill_count_is_limited(crate::helpers::Backend::Sqlite).await;
    }
    #[tokio::test]
    async fn postgres() {
        super::skill_count_is_limited(crate::helpers::Backend::Postgres).await;
    }
}

async fn load_unlocks(app: TestApp) {
    let mut finder = body(
        "finder",
        &["Glob", "Read", "WebSearch"],
        "Use Glob to find files.",
    );
    finder["files"] = json!([{"path": "ref/patterns.md", "content": "try **/*.txt"}]);
    registered(&app, "acme", &finder).await;
    let script = turns(
        &[
            ("Glob", json!({"pattern": "*"})),
            ("Skill", json!({"name": "finder"})),
            ("Glob", json!({"pattern": "*"})),
            (
                "Skill",
                json!({"name": "finder", "file": "ref/patterns.md"}),
            ),
            ("Skill", json!({"name": "nope"})),
        ],
        "done",
    );
    let id = app
        .create_session(
            "acme",
            &json!({"skills": ["finder"], "deferred_tools": ["Glob"],
                    "tools": ["Glob", "Read"], "model": {"script": {"turns": script}}}),
        )
        .await;
    let events = run(&app, "acme", &id, 1).await;
    let results = tool_results(&app.messages(&app.token("acme"), &id).await);
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND", "{results:?}");
    let loaded = results[1]["content"].as_str().unwrap();
    assert!(loaded.contains("Use Glob to find files."), "{loaded}");
    assert!(
        loaded.contains("Tools unlocked (call them by name): Glob."),
        "{loaded}"
    );
    assert!(loaded.contains("ref/patterns.md"), "{loaded}");
    assert_eq!(results[2]["is_error"], false, "{results:?}");
    assert_eq!(results[3]["content"], "try **/*.txt");
    assert_eq!(results[4]["code"], "SKILL_NOT_FOUND", "{results:?}");
    let skill_events = of_kind(&events, "skill_loaded");
    assert_eq!(skill_events.len(), 1, "{events:#?}");
    assert_eq!(
        skill_events[0]["payload"],
        json!({"tool_use_id": results[1]["tool_use_id"], "name": "finder",
               "source": "registered", "unlocked": ["Glob"], "available": ["Read"],
               "refused": [{"tool": "WebSearch", "reason": "not_in_session"}]})
    );
    // The event comes before the call's result.
    let seq = |kind: &str| {
        events
            .iter()
            .find(|e| e["type"] == kind && e["payload"]["tool_use_id"] == results[1]["tool_use_id"])
            .map(|e| e["seq"].as_i64().unwrap())
            .unwrap()
    };
    assert!(seq("skill_loaded") < seq("tool_result"));
}

/// A skill's unlock stays after the server restarts on the same store: a second server
/// started on the first one's data directory and database runs the session's next prompt,
/// whose Glob call works without loading the skill again.
async fn unlock_survives_a_restart(backend: Backend) {
    let data = tempfile::tempdir().unwrap();
    let mut settings = test_settings(data.path());
    if backend == Backend::Postgres {
        let Some(url) = fresh_pg_database().await else {
            return;
        };
        settings.database_url = Some(SecretString::from(url));
    }
    let first = TestApp::start(settings.clone(), backend, tempfile::tempdir().unwrap()).await;
    registered(&first, "acme", &body("finder", &["Glob"], "Use Glob.")).await;
    let script = turns(
        &[
            ("Skill", json!({"name": "finder"})),
            ("Glob", json!({"pattern": "*"})),
        ],
        "first run done",
    );
    let mut script = script;
    script.push(json!({"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}));
    script.push(json!({"tool_calls": [{"name": "ExecuteExtraTool",
                                        "input": {"name": "Glob", "input": {"pattern": "*"}}}]}));
    script.push(json!({"text": "second run done"}));
    let id = first
        .create_session(
            "acme",
            &json!({"skills": ["*"], "deferred_tools": ["Glob"],
                    "model": {"script": {"turns": script}}}),
        )
        .await;
    run(&first, "acme", &id, 1).await;
    drop(first);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = TestApp::start(settings, backend, tempfile::tempdir().unwrap()).await;
    let events = run(&second, "acme", &id, 2).await;
    let results = tool_results(&second.messages(&second.token("acme"), &id).await);
    assert_eq!(results.len(), 4, "{results:?}");
    for (index, result) in results.iter().enumerate() {
        assert_eq!(result["is_error"], false, "{index}: {results:?}");
    }
    // One load in all: the second run did not load the skill again.
    assert_eq!(count(&events, "skill_loaded"), 1);
}

mod the_unlock_survives_a_restart {
    #[tokio::test]
    async fn sqlite() {
        super::unlock_survives_a_restart(crate::helpers::Backend::Sqlite).await;
    }
    #[tokio::test]
    async fn postgres() {
        super::unlock_survives_a_restart(crate::helpers::Backend::Postgres).await;
    }
}

async fn denied_tools_stay_denied(app: TestApp) {
    registered(
        &app,
        "acme",
        &body("writer", &["Write", "Glob"], "Write files."),
    )
    .await;
    let script = turns(
        &[
            ("Skill", json!({"name": "writer"})),
            ("Write", json!({"file_path": "a.txt", "content": "x"})),
            (
                "ExecuteExtraTool",
                json!({"name": "Write", "input": {"file_path": "a.txt", "content": "x"}}),
            ),
            ("Glob", json!({"pattern": "*"})),
            // Finding it unlocks it (deferred tools' own rule); the deny rule still holds.
            ("SearchExtraTools", json!({"query": "Write"})),
            ("Write", json!({"file_path": "a.txt", "content": "x"})),
        ],
        "done",
    );
    let id = app
        .create_session(
            "acme",
            &json!({"skills": ["writer"], "deferred_tools": ["Write", "Glob"],
                    "permission": {"mode": "bypass", "deny": ["Write"]},
                    "model": {"script": {"turns": script}}}),
        )
        .await;
    let events = run(&app, "acme", &id, 1).await;
    let results = tool_results(&app.messages(&app.token("acme"), &id).await);
    let loaded = results[0]["content"].as_str().unwrap();
    assert!(
        loaded.contains("Write (denied by this session's permission rules)"),
        "{loaded}"
    );
    assert_eq!(results[1]["code"], "TOOL_NOT_FOUND", "{results:?}");
    assert_eq!(results[2]["code"], "TOOL_NOT_FOUND", "{results:?}");
    assert_eq!(results[3]["is_error"], false, "{results:?}");
    assert_eq!(results[5]["code"], "PERMISSION_DENIED", "{results:?}");
    let loaded = of_kind(&events, "skill_loaded");
    assert_eq!(loaded[0]["payload"]["unlocked"], json!(["Glob"]));
    assert_eq!(
        loaded[0]["payload"]["refused"],
        json!([{"tool": "Write", "reason": "denied"}])
    );
    assert!(
        !app.data_dir()
            .join("workspaces/acme")
            .join(&id)
            .join("a.txt")
            .exists()
    );

    // A deny rule with an argument part: the tool is unlocked, and the calls the rule names
    // stay denied by the pipeline.
    let script = turns(
        &[
            ("Skill", json!({"name": "writer"})),
            (
                "Write",
                json!({"file_path": "secret/key.txt", "content": "x"}),
            ),
            ("Write", json!({"file_path": "notes.txt", "content": "x"})),
        ],
        "done",
    );
    let id = app
        .create_session(
            "acme",
            &json!({"skills": ["writer"], "deferred_tools": ["Write", "Glob"],
                    "permission": {"mode": "bypass", "deny": ["Write(secret/**)"]},
                    "model": {"script": {"turns": script}}}),
        )
        .await;
    run(&app, "acme", &id, 1).await;
    let results = tool_results(&app.messages(&app.token("acme"), &id).await);
    assert_eq!(results[1]["code"], "PERMISSION_DENIED", "{results:?}");
    assert_eq!(results[2]["is_error"], false, "{results:?}");

    // A session denying `Skill` itself cannot load any.
    let script = turns(&[("Skill", json!({"name": "writer"}))], "done");
    let id = app
        .create_session(
            "acme",
            &json!({"skills": ["writer"], "deferred_tools": ["Write"],
                    "permission": {"deny": ["Skill"]},
                    "model": {"script": {"turns": script}}}),
        )
        .await;
    let events = run(&app, "acme", &id, 1).await;
    let results = tool_results(&app.messages(&app.token("acme"), &id).await);
    assert_eq!(results[0]["code"], "PERMISSION_DENIED", "{results:?}");
    assert_eq!(count(&events, "skill_loaded"), 0);
}

async fn tenant_isolation(app: TestApp) {
    registered(&app, "acme", &body("secret-skill", &["Glob"], "Acme only.")).await;
    let other = app.token("globex");
    assert_eq!(
        app.get("/v1/skills/secret-skill", &other).await.status(),
        404
    );
    let theirs: Value = app.get("/v1/skills", &other).await.json().await.unwrap();
    assert_eq!(theirs["skills"], json!([]));
    let response = app
        .post_json("/v1/sessions", &other, &json!({"skills": ["secret-skill"]}))
        .await;
    assert_eq!(response.status(), 422);
    // With every skill of its own tenant (none), loading acme's by name finds nothing.
    let script = turns(
        &[
            ("Skill", json!({"name": "secret-skill"})),
            ("Glob", json!({"pattern": "*"})),
        ],
        "done",
    );
    let id = app
        .create_session(
            "globex",
            &json!({"skills": ["*"], "deferred_tools": ["Glob"],
                    "model": {"script": {"turns": script}}}),
        )
        .await;
    let events = run(&app, "globex", &id, 1).await;
    let results = tool_results(&app.messages(&other, &id).await);
    assert_eq!(results[0]["code"], "SKILL_NOT_FOUND", "{results:?}");
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .ends_with("available: none"),
        "{results:?}"
    );
    assert_eq!(results[1]["code"], "TOOL_NOT_FOUND", "{results:?}");
    assert_eq!(count(&events, "skill_loaded"), 0);
    // A session without skills has no Skill tool.
    let script = turns(&[("Skill", json!({"name": "secret-skill"}))], "done");
    let id = app
        .create_session("acme", &json!({"model": {"script": {"turns": script}}}))
        .await;
    run(&app, "acme", &id, 1).await;
    let results = tool_results(&app.messages(&app.token("acme"), &id).await);
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND", "{results:?}");
}

async fn workspace_skill(app: TestApp) {
    let notes = "---\nname: notes\ndescription: Keep notes.\ntools: [Glob]\n---\nWrite notes.\n";
    let broken = "---\nname: broken\ndescription: d\ntools: [Deploy]\n---\n";
    let script = turns(
        &[
            (
                "Write",
                json!({"file_path": ".norma/skills/notes/SKILL.md", "content": notes}),
            ),
            (
                "Write",
                json!({"file_path": ".norma/skills/notes/ref.md", "content": "the reference"}),
            ),
            (
                "Write",
                json!({"file_path": ".norma/skills/broken/SKILL.md", "content": broken}),
            ),
            ("Skill", json!({"name": "notes"})),
            ("Glob", json!({"pattern": "*"})),
            ("Skill", json!({"name": "notes", "file": "ref.md"})),
            (
                "Skill",
                json!({"name": "notes", "file": "../broken/SKILL.md"}),
            ),
            ("Skill", json!({"name": "broken"})),
            ("Skill", json!({"name": "missing"})),
        ],
        "done",
    );
    let id = app
        .create_session(
            "acme",
            &json!({"workspace_skills": true, "deferred_tools": ["Glob"],
                    "permission": {"mode": "acceptEdits"},
                    "model": {"script": {"turns": script}}}),
        )
        .await;
    let events = run(&app, "acme", &id, 1).await;
    let results = tool_results(&app.messages(&app.token("acme"), &id).await);
    for result in &results[..3] {
        assert_eq!(result["is_error"], false, "{results:?}");
    }
    let loaded = results[3]["content"].as_str().unwrap();
    assert!(loaded.contains("Write notes."), "{loaded}");
    assert!(loaded.contains(".norma/skills/notes/"), "{loaded}");
    assert_eq!(results[4]["is_error"], false, "{results:?}");
    assert_eq!(results[5]["content"], "the reference");
    assert_eq!(results[6]["is_error"], true, "{results:?}");
    assert_eq!(results[7]["code"], "SKILL_INVALID", "{results:?}");
    assert!(
        results[7]["content"]
            .as_str()
            .unwrap()
            .contains("SKILL_UNKNOWN_TOOL"),
        "{results:?}"
    );
    assert_eq!(results[8]["code"], "SKILL_NOT_FOUND", "{results:?}");
    let loaded = of_kind(&events, "skill_loaded");
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0]["payload"]["source"], "workspace");
    assert_eq!(loaded[0]["payload"]["unlocked"], json!(["Glob"]));
}
