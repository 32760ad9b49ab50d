use super::*;
use pretty_assertions::assert_eq;

fn provenance<'a>(tenant: &'a TenantId, session: &'a SessionId) -> Provenance<'a> {
    Provenance {
        tenant,
        session_id: session,
        tool_name: "Bash",
    }
}

fn policy(head_chars: usize) -> OutputPolicy {
    OutputPolicy {
        head_chars,
        ..OutputPolicy::default()
    }
}

#[test]
fn the_default_head_is_thirty_thousand_characters() {
    assert_eq!(OutputPolicy::default().head_chars, 30_000);
    assert!(OutputPolicy::default().spill);
}

#[test]
fn short_output_is_untouched() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let mut result = ToolResultBlock::ok("tu", "x".repeat(10));
    let before = result.clone();
    assert_eq!(
        cap_result(&policy(10), &mut result, provenance(&tenant, &session)),
        None
    );
    assert_eq!(result, before);
}

#[test]
fn capped_output_is_spilled_with_digest_and_provenance() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let full = format!("{}{}", "a".repeat(30_000), "b".repeat(5_000));
    let mut result = ToolResultBlock::ok("tu_1", full.clone());
    let spill = cap_result(
        &OutputPolicy::default(),
        &mut result,
        provenance(&tenant, &session),
    )
    .unwrap();
    assert_eq!(spill.content, full);
    assert_eq!(
        spill.sha256_hex,
        hex::encode(Sha256::digest(full.as_bytes()))
    );
    assert_eq!(spill.size_bytes, 35_000);
    assert_eq!(spill.tool_use_id, "tu_1");
    assert_eq!(spill.tool_name, "Bash");
    assert_eq!(spill.session_id, session);
    assert_eq!(spill.tenant, tenant);
    assert!(spill.id.is_well_formed());
    assert!(result.capped);
    assert_eq!(result.output_id.as_deref(), Some(spill.id.as_str()));
    assert_eq!(
        result.content,
        format!(
            "{}\n… [output truncated: 30000 of 35000 characters shown; full output id {}]",
            "a".repeat(30_000),
            spill.id
        )
    );
}

#[test]
fn the_digest_is_the_known_sha256() {
    assert_eq!(
        sha256_hex("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn multibyte_text_is_capped_on_a_character_boundary() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    // 3-byte and 4-byte characters: a byte cut would split one.
    let full = "가🦀".repeat(10);
    let mut result = ToolResultBlock::ok("tu", full.clone());
    let spill = cap_result(&policy(5), &mut result, provenance(&tenant, &session)).unwrap();
    assert!(
        result
            .content
            .starts_with("가🦀가🦀가\n… [output truncated: 5 of 20 characters shown")
    );
    assert_eq!(spill.content, full);
    assert_eq!(spill.size_bytes, full.len() as u64);
}

#[test]
fn exactly_the_head_length_is_not_capped() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let mut result = ToolResultBlock::ok("tu", "é".repeat(5));
    assert_eq!(
        cap_result(&policy(5), &mut result, provenance(&tenant, &session)),
        None
    );
    assert!(!result.capped);
}

#[test]
fn marker_like_raw_text_is_still_capped() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let fake = format!(
        "[output truncated: 1 of 1 characters shown; full output id out_{}]",
        "0".repeat(32)
    );
    let full = format!("{fake}{}", "z".repeat(100));
    let mut result = ToolResultBlock::ok("tu", full.clone());
    let spill = cap_result(&policy(20), &mut result, provenance(&tenant, &session)).unwrap();
    assert!(result.capped);
    assert_eq!(spill.content, full);
    assert_eq!(result.output_id.as_deref(), Some(spill.id.as_str()));
    assert!(result.content.starts_with(&fake[..20]));
}

#[test]
fn the_structured_flag_prevents_a_second_cap() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let mut result = ToolResultBlock::ok("tu", "y".repeat(100));
    result.capped = true;
    let before = result.clone();
    assert_eq!(
        cap_result(&policy(10), &mut result, provenance(&tenant, &session)),
        None
    );
    assert_eq!(result, before);
}

#[test]
fn without_spill_the_model_gets_a_marker_and_no_id() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let mut result = ToolResultBlock::ok("tu", "q".repeat(15));
    let policy = OutputPolicy {
        head_chars: 10,
        spill: false,
    };
    assert_eq!(
        cap_result(&policy, &mut result, provenance(&tenant, &session)),
        None
    );
    assert!(result.capped);
    assert_eq!(result.output_id, None);
    assert_eq!(
        result.content,
        format!(
            "{}\n… [output truncated: 10 of 15 characters shown]",
            "q".repeat(10)
        )
    );
}

#[test]
fn error_results_are_capped_too() {
    let tenant = TenantId::new("t");
    let session = SessionId::generate();
    let mut result = ToolResultBlock::error("tu", "TOOL_FAILED", "e".repeat(50));
    let spill = cap_result(&policy(10), &mut result, provenance(&tenant, &session));
    assert!(spill.is_some());
    assert!(result.is_error);
    assert_eq!(result.code.as_deref(), Some("TOOL_FAILED"));
}
