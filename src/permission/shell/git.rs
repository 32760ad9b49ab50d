//! The git model: global options before the subcommand (`-C`, `-c`, `--git-dir`, …), config
//! keys that run programs, and the subcommands' options that run programs or write files.

use super::programs::{BASE, Model, exec_risk, never, risk, scan};
use super::{Risk, View, Word};

/// git global options that change nothing a rule cares about.
const GIT_SAFE_GLOBALS: [&str; 11] = [
    "--no-pager",
    "-P",
    "--no-replace-objects",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-optional-locks",
    "--no-advice",
    "--no-lazy-fetch",
    "--bare",
];

/// git global options that take the next word as their value.
const GIT_VALUED_GLOBALS: [&str; 9] = [
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--config-env",
    "--attr-source",
    "--list-cmds",
];

/// Config keys whose value is a program git runs (or that redirect what git runs).
fn git_key_runs_programs(key: &str) -> bool {
    const PARTS: [&str; 28] = [
        "pager",
        "editor",
        "command",
        "cmd",
        "program",
        "hook",
        "external",
        "textconv",
        "fsmonitor",
        "askpass",
        "proxy",
        "driver",
        "filter.",
        "alias.",
        "helper",
        "include",
        "tool",
        "browser",
        "uploadpack",
        "receivepack",
        "protocol.",
        "insteadof",
        "exec",
        "sendmail",
        "smtpserver",
        "credential",
        "worktree",
        "gitproxy",
    ];
    let key = key.to_ascii_lowercase();
    PARTS.iter().any(|p| key.contains(p))
}

/// Config keys that only change presentation.
fn git_key_is_harmless(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "color.",
        "advice.",
        "i18n.",
        "column.",
        "log.date",
        "log.decorate",
    ]
    .iter()
    .any(|p| key.starts_with(p))
        || matches!(
            key.as_str(),
            "core.quotepath" | "core.abbrev" | "user.name" | "user.email" | "init.defaultbranch"
        )
}

/// Long options of git subcommands that execute or write (matched with abbreviations).
const GIT_RISKY_LONG: [&str; 15] = [
    "config",
    "output",
    "ext-diff",
    "textconv",
    "upload-pack",
    "receive-pack",
    "exec",
    "open-files-in-pager",
    "extcmd",
    "tool",
    "template",
    "output-directory",
    "sendmail-cmd",
    "smtp-server",
    "separate-git-dir",
];

/// Short options that execute or write, per subcommand.
fn git_risky_short(subcommand: &str) -> &'static str {
    match subcommand {
        "grep" => "O",
        "format-patch" | "archive" => "o",
        "rebase" => "x",
        "difftool" => "xt",
        "mergetool" => "t",
        "ls-remote" | "fetch" | "pull" => "u",
        "clone" => "uc",
        _ => "",
    }
}

/// git: global options before the subcommand, then the subcommand's risky options.
pub(super) fn git(words: &[Word]) -> (Vec<Risk>, Option<View>) {
    let mut risks = Vec::new();
    let mut view_ok = true;
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let Some(text) = word.literal() else {
            risks.push(never(i, "a dynamic global option"));
            view_ok = false;
            i += 1;
            continue;
        };
        if !text.starts_with('-') {
            break;
        }
        if text == "--" {
            i += 1;
            break;
        }
        let (name, attached) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ if text.starts_with("-c") && text.len() > 2 => ("-c", Some(text[2..].to_owned())),
            _ if text.starts_with("-C") && text.len() > 2 => ("-C", Some(text[2..].to_owned())),
            _ => (text, None),
        };
        let valued = GIT_VALUED_GLOBALS.contains(&name);
        let value = match (&attached, valued) {
            (Some(v), _) => Some(Word::Literal(v.clone())),
            (None, true) => {
                i += 1;
                words.get(i).cloned()
            }
            (None, false) => None,
        };
        match name {
            "-C" => {}
            "-c" => match value.as_ref().and_then(Word::literal) {
                Some(setting) => {
                    let key = setting.split_once('=').map_or(setting, |(k, _)| k);
                    if git_key_runs_programs(key) {
                        risks.push(never(i, "git config that runs a program"));
                        view_ok = false;
                    } else if !git_key_is_harmless(key) {
                        risks.push(risk(i, "git config"));
                        view_ok = false;
                    }
                }
                None => {
                    risks.push(never(i, "git config that cannot be known"));
                    view_ok = false;
                }
            },
            "--config-env" => {
                risks.push(never(i, "git config from the environment"));
                view_ok = false;
            }
            n if GIT_SAFE_GLOBALS.contains(&n) => {}
            _ => {
                // --exec-path, --git-dir, --work-tree, --namespace, -p, unknown options.
                risks.push(if matches!(name, "--exec-path" | "-p" | "--paginate") {
                    exec_risk(i, "a git global option that runs programs")
                } else {
                    risk(i, "a git global option that changes what git reads")
                });
                view_ok = false;
            }
        }
        i += 1;
    }
    let sub_start = i;
    let subcommand = words.get(sub_start).and_then(Word::literal).unwrap_or("");
    let model = Model {
        risky_long: &GIT_RISKY_LONG,
        exact_safe: &["text", "exec-path"],
        risky_short: git_risky_short(subcommand),
        exec_short: git_risky_short(subcommand).trim_matches('o'),
        // `git status $HOME`: a variable the rules already let through stays allowed.
        dynamic_risk: false,
        ..BASE
    };
    let mut sub_risks = Vec::new();
    if sub_start < words.len() {
        scan(words, sub_start + 1, &model, &mut sub_risks);
        for (j, word) in words.iter().enumerate().skip(sub_start + 1) {
            if word
                .literal()
                .is_some_and(|t| t.starts_with("ext::") || t.starts_with("fd::"))
            {
                sub_risks.push(exec_risk(j, "a git transport that runs a command"));
            }
        }
    }
    risks.extend(sub_risks.iter().cloned());
    if sub_start == 1 {
        return (risks, None);
    }
    let mut view_words = vec![words[0].clone()];
    view_words.extend_from_slice(&words[sub_start..]);
    let shift = sub_start - 1;
    let view_risks = sub_risks
        .into_iter()
        .map(|r| Risk {
            word: r.word - shift,
            ..r
        })
        .collect();
    (
        risks,
        Some(View {
            words: view_words,
            risks: view_risks,
            for_allow: view_ok,
        }),
    )
}
