//! Skills shipped in a session's workspace: `.norma/skills/<name>/SKILL.md`, read through the
//! workspace's confinement (regular files only, no symlink out, no FIFO), bounded in count
//! and size. Reads are blocking file I/O: call them on the blocking pool.

use super::{
    MAX_FILE_BYTES, MAX_SKILL_BYTES, SKILL_FILE, SkillDefinition, SkillError, WORKSPACE_SKILLS_DIR,
    is_valid_file_path, is_valid_name, parse_skill_md, reasons,
};
use crate::tools::ToolError;
use crate::workspace::Workspace;
use std::path::{Path, PathBuf};

/// The most workspace skills offered (the first by name).
pub const MAX_WORKSPACE_SKILLS: usize = 32;
/// The most directory entries looked at under `.norma/skills`.
const MAX_ENTRIES_SCANNED: usize = 256;

/// What a run's start found in the workspace.
#[derive(Debug, Default)]
pub struct Found {
    /// Valid skills, by name.
    pub skills: Vec<SkillDefinition>,
    /// Directories that hold no valid skill: `(directory name, why)`.
    pub invalid: Vec<(String, String)>,
}

fn skill_path(name: &str, file: &str) -> PathBuf {
    Path::new(WORKSPACE_SKILLS_DIR).join(name).join(file)
}

/// Reads and checks the workspace skill `name` (its `SKILL.md`, whose front matter must name
/// it). A missing skill is `Ok(None)`.
pub fn load(root: &Path, name: &str) -> Result<Option<SkillDefinition>, SkillError> {
    let invalid = |reason, message: String| SkillError {
        reason,
        field: format!("{WORKSPACE_SKILLS_DIR}/{name}/{SKILL_FILE}"),
        message,
    };
    if !is_valid_name(name) {
        return Ok(None);
    }
    let workspace = Workspace::open(root)
        .map_err(|error| invalid(reasons::FRONT_MATTER, format!("workspace: {error}")))?;
    let text = match workspace.read_text(&skill_path(name, SKILL_FILE), MAX_SKILL_BYTES as u64) {
        Ok(text) => text,
        Err(error) if error.code == crate::workspace::codes::FILE_NOT_FOUND => return Ok(None),
        Err(error) if error.code == crate::workspace::codes::FILE_TOO_LARGE => {
            return Err(invalid(
                reasons::TOO_LARGE,
                format!("SKILL.md is over {MAX_SKILL_BYTES} bytes"),
            ));
        }
        Err(error) => return Err(invalid(reasons::FRONT_MATTER, error.message)),
    };
    let definition = parse_skill_md(
        &text,
        &format!("{WORKSPACE_SKILLS_DIR}/{name}/{SKILL_FILE}"),
    )?;
    if definition.name != name {
        return Err(invalid(
            reasons::NAME,
            format!(
                "the front matter names `{}`, the directory `{name}`",
                definition.name
            ),
        ));
    }
    Ok(Some(definition))
}

/// Reads one file of the workspace skill `name` (a valid relative path, at most 24 KiB).
pub fn read_file(root: &Path, name: &str, file: &str) -> Result<String, ToolError> {
    if !is_valid_name(name) || !is_valid_file_path(file) {
        return Err(ToolError::new(
            crate::workspace::codes::PATH_INVALID,
            "not a file of a skill: a relative path of plain names",
        ));
    }
    Workspace::open(root)
        .map_err(|error| {
            ToolError::new(
                crate::workspace::codes::WORKSPACE_UNAVAILABLE,
                error.to_string(),
            )
        })?
        .read_text(&skill_path(name, file), MAX_FILE_BYTES as u64)
}

/// Finds the workspace's skills: each directory of `.norma/skills` with a valid name and a
/// valid `SKILL.md` naming it, at most [`MAX_WORKSPACE_SKILLS`].
pub fn discover(root: &Path) -> Found {
    let mut found = Found::default();
    let Ok(workspace) = Workspace::open(root) else {
        return found;
    };
    let Ok(dir) = workspace.open_dir(Path::new(WORKSPACE_SKILLS_DIR)) else {
        return found;
    };
    let Ok(entries) = dir.entries() else {
        return found;
    };
    let mut names: Vec<String> = entries
        .take(MAX_ENTRIES_SCANNED)
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        if found.skills.len() >= MAX_WORKSPACE_SKILLS {
            found.invalid.push((
                name,
                format!("more than {MAX_WORKSPACE_SKILLS} workspace skills"),
            ));
            continue;
        }
        if !is_valid_name(&name) {
            found.invalid.push((name, "not a valid skill name".into()));
            continue;
        }
        match load(root, &name) {
            Ok(Some(skill)) => found.skills.push(skill),
            Ok(None) => found.invalid.push((name, "no SKILL.md".into())),
            Err(error) => found
                .invalid
                .push((name, format!("{}: {}", error.reason, error.message))),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn discovers_valid_skills_and_reports_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            ".norma/skills/notes/SKILL.md",
            "---\nname: notes\ndescription: Take notes.\ntools: [Glob]\n---\nDo it.\n",
        );
        write(root, ".norma/skills/notes/ref.md", "reference");
        write(
            root,
            ".norma/skills/other/SKILL.md",
            "---\nname: notes2\ndescription: d\n---\n",
        );
        write(root, ".norma/skills/Bad_Name/SKILL.md", "x");
        write(root, ".norma/skills/empty/README", "x");
        write(
            root,
            ".norma/skills/huge/SKILL.md",
            &format!(
                "---\nname: huge\ndescription: d\n---\n{}",
                "x".repeat(MAX_SKILL_BYTES)
            ),
        );
        std::os::unix::fs::symlink("/etc", root.join(".norma/skills/escape")).unwrap();
        let found = discover(root);
        let names: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["notes"]);
        assert_eq!(found.skills[0].tools, ["Glob"]);
        let invalid: Vec<&str> = found.invalid.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(invalid, ["Bad_Name", "empty", "huge", "other"], "{found:?}");
        assert_eq!(read_file(root, "notes", "ref.md").unwrap(), "reference");
        assert!(read_file(root, "notes", "../other/SKILL.md").is_err());
        assert!(!matches!(load(root, "escape"), Ok(Some(_))));
    }

    #[test]
    fn no_directory_is_no_skill() {
        let dir = tempfile::tempdir().unwrap();
        let found = discover(dir.path());
        assert!(found.skills.is_empty() && found.invalid.is_empty());
    }
}
