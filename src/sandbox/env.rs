//! The scrubbed environment a sandboxed command starts with: built from nothing, never
//! inherited, so server secrets (DATABASE_URL, NORMA_*, provider keys, signing keys) cannot leak.

use std::path::Path;

/// The only variables a sandboxed command receives.
pub const ALLOWED_VARS: [&str; 4] = ["PATH", "HOME", "LANG", "TERM"];

/// The fixed search path given to sandboxed commands.
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Builds the environment for a command running in `workspace` with terminal type `term`.
pub fn scrubbed_env(workspace: &Path, term: &str) -> Vec<(String, String)> {
    vec![
        ("PATH".to_string(), SANDBOX_PATH.to_string()),
        ("HOME".to_string(), workspace.to_string_lossy().into_owned()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("TERM".to_string(), term.to_string()),
    ]
}

/// True for variable names that must never reach a sandboxed command, even if someone adds
/// them to the allowlist by mistake.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper == "DATABASE_URL"
        || upper.starts_with("NORMA_")
        || ["_KEY", "_TOKEN", "_SECRET", "_PASSWORD"]
            .iter()
            .any(|suffix| upper.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubbed_env_has_only_allowed_names_and_no_secrets() {
        let env = scrubbed_env(Path::new("/ws"), "dumb");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ALLOWED_VARS);
        assert!(env.iter().all(|(k, _)| !is_secret_name(k)));
        assert!(env.contains(&("HOME".to_string(), "/ws".to_string())));
        assert!(is_secret_name("OPENAI_API_KEY"));
        assert!(is_secret_name("NORMA__DB__URL"));
        assert!(is_secret_name("database_url"));
        assert!(!is_secret_name("PATH"));
    }
}
