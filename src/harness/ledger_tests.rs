use super::*;
use chrono::TimeZone;
use pretty_assertions::assert_eq;
use serde_json::json;

fn at(second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, second).unwrap()
}

fn run(tenant: &TenantId, session: &SessionId, entries: Vec<Entry>) -> RunLedger {
    RunLedger {
        entries,
        ..RunLedger::new(tenant.clone(), session.clone(), RunId::generate())
    }
}

#[test]
fn usage_is_computed_from_entries() {
    let entries = vec![
        Entry::model_call(100, 20, at(1)),
        Entry::tool_call("Read", true, at(2)),
        Entry::tool_call("Bash", false, at(3)),
        Entry::model_call(150, 30, at(4)),
        Entry::tool_call("Read", true, at(5)),
        Entry::model_call(200, 5, at(6)),
    ];

    let usage = Usage::from_entries(&entries);

    assert_eq!(
        usage,
        Usage {
            input_tokens: 450,
            output_tokens: 55,
            model_calls: 3,
            tool_calls: 3,
            failed_tool_calls: 1,
            subagents: None,
        }
    );
    assert_eq!(usage.total_tokens(), 505);
    assert_eq!(Usage::from_entries(&[]), Usage::default());
}

#[test]
fn extra_requests_count_as_model_calls_not_turns() {
    // One main turn that needed a max-output recovery and a stop-hook continuation is three
    // model calls: usage counts calls, whatever the loop's turn counter says.
    let mut ledger = RunLedger::new(
        TenantId::new("acme"),
        SessionId::generate(),
        RunId::generate(),
    );
    ledger.record_model_call(10, 4_096);
    ledger.record_model_call(20, 100);
    ledger.record_model_call(30, 10);

    assert_eq!(ledger.usage().model_calls, 3);
    assert_eq!(ledger.usage().output_tokens, 4_206);
}

#[test]
fn recording_appends_in_order_with_a_timestamp() {
    let mut ledger = RunLedger::new(
        TenantId::new("acme"),
        SessionId::generate(),
        RunId::generate(),
    );
    let before = Utc::now();
    ledger.record_model_call(1, 2);
    ledger.record_tool_call("Grep", false);
    let after = Utc::now();

    let kinds: Vec<_> = ledger.entries.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            EntryKind::ModelCall {
                input_tokens: 1,
                output_tokens: 2
            },
            EntryKind::ToolCall {
                name: "Grep".into(),
                ok: false
            },
        ]
    );
    assert!(
        ledger
            .entries
            .iter()
            .all(|e| before <= e.at && e.at <= after)
    );
}

#[test]
fn session_and_tenant_usage_are_sums_of_their_runs() {
    let acme = TenantId::new("acme");
    let other = TenantId::new("other");
    let s1 = SessionId::generate();
    let s2 = SessionId::generate();
    let runs = vec![
        run(&acme, &s1, vec![Entry::model_call(10, 1, at(1))]),
        run(
            &acme,
            &s1,
            vec![
                Entry::model_call(20, 2, at(2)),
                Entry::tool_call("Read", true, at(3)),
            ],
        ),
        run(&acme, &s2, vec![Entry::tool_call("Bash", false, at(4))]),
        run(&other, &s1, vec![Entry::model_call(1_000, 1_000, at(5))]),
    ];

    assert_eq!(runs[1].usage().input_tokens, 20);
    assert_eq!(
        session_usage(&runs, &acme, &s1),
        Usage {
            input_tokens: 30,
            output_tokens: 3,
            model_calls: 2,
            tool_calls: 1,
            failed_tool_calls: 0,
            subagents: None,
        }
    );
    assert_eq!(
        tenant_usage(&runs, &acme),
        Usage {
            input_tokens: 30,
            output_tokens: 3,
            model_calls: 2,
            tool_calls: 2,
            failed_tool_calls: 1,
            subagents: None,
        }
    );
    // A tenant never sees another tenant's runs, even under the same session id.
    assert_eq!(tenant_usage(&runs, &other).input_tokens, 1_000);
    assert_eq!(session_usage(&runs, &other, &s1).model_calls, 1);
    assert_eq!(
        tenant_usage(&runs, &TenantId::new("nobody")),
        Usage::default()
    );
    // The tenant total equals the sum of its sessions.
    assert_eq!(
        tenant_usage(&runs, &acme),
        session_usage(&runs, &acme, &s1) + session_usage(&runs, &acme, &s2)
    );
}

#[test]
fn sums_saturate_instead_of_overflowing() {
    let entries = vec![
        Entry::model_call(u64::MAX, 1, at(1)),
        Entry::model_call(5, 1, at(2)),
    ];
    let usage = Usage::from_entries(&entries);
    assert_eq!(usage.input_tokens, u64::MAX);
    assert_eq!(usage.total_tokens(), u64::MAX);
    let mut total = usage;
    total += usage;
    assert_eq!(total.input_tokens, u64::MAX);
    assert_eq!(total.model_calls, 4);
}

#[test]
fn a_ledger_round_trips_through_json() {
    let mut ledger = RunLedger::new(
        TenantId::new("acme"),
        SessionId::generate(),
        RunId::generate(),
    );
    ledger.push(Entry::model_call(7, 8, at(9)));
    ledger.push(Entry::tool_call("Edit", true, at(10)));

    let value = serde_json::to_value(&ledger).unwrap();

    assert_eq!(
        value["entries"],
        json!([
            {"kind": "model_call", "input_tokens": 7, "output_tokens": 8, "at": "2026-01-02T03:04:09Z"},
            {"kind": "tool_call", "name": "Edit", "ok": true, "at": "2026-01-02T03:04:10Z"},
        ])
    );
    assert_eq!(value["tenant"], "acme");
    let back: RunLedger = serde_json::from_value(value).unwrap();
    assert_eq!(back, ledger);
}
