//! PDF to text in a confined child process (WebFetch's PDF answers).
//!
//! PDF readers are large parsers of hostile input: a document can hold streams that inflate
//! far beyond its size, deep object graphs and fonts that make a reader panic. The reader
//! (`pdf-extract`) therefore never runs in the server. WebFetch starts the sandbox launcher
//! with the built-in job [`PROGRAM`]: the launcher confines itself like a command (namespaces,
//! no network, Landlock, minimal root) with the job's own rlimits — [`JOB_ADDRESS_SPACE`]
//! of memory, [`JOB_CPU_SECONDS`] of CPU, no file writes — and then reads the PDF from its
//! stdin and writes the text to its stdout instead of `exec`ing a program. The server bounds
//! the exchange from outside too: a wall-clock deadline (the child is killed at it) and at
//! most [`MAX_TEXT_BYTES`] of text read back.
//!
//! It fails closed: without the command sandbox, or with its `rlimits` or `network` part
//! not enforced, PDF answers are refused (`unsupported_content`) rather than read
//! unconfined. Whatever a document does to the reader costs that one child: a panic, an
//! allocation past the limit or a CPU loop ends it, and the fetch is refused with
//! `unsupported_content`.

use super::rlimits::Rlimits;
use super::{Sandbox, SandboxUnavailable};
use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The launcher's program name of the job (never a path: `@` cannot start one here).
pub const PROGRAM: &str = "@pdf-text";
/// Memory the job may map (RLIMIT_AS).
pub const JOB_ADDRESS_SPACE: u64 = 768 << 20;
/// CPU time of the job (RLIMIT_CPU).
pub const JOB_CPU_SECONDS: u64 = 10;
/// Wall-clock time of the job, from start to its last byte of text.
pub const JOB_DEADLINE: Duration = Duration::from_secs(15);
/// Text read back at most (the rest is cut).
pub const MAX_TEXT_BYTES: usize = 2 << 20;
/// PDF bytes the job accepts on its stdin.
pub const MAX_PDF_BYTES: usize = 64 << 20;

/// Why a PDF gave no text.
#[derive(Debug, thiserror::Error)]
pub enum PdfTextError {
    #[error("{0}")]
    Unavailable(#[from] SandboxUnavailable),
    #[error("the PDF reader could not start: {0}")]
    Spawn(std::io::Error),
    #[error("the PDF could not be read within its limits ({0})")]
    Unreadable(String),
    #[error("the PDF reader took longer than {0:?}")]
    Timeout(Duration),
}

/// The job's limits: memory and CPU above, no file writes, one process.
pub fn job_limits() -> Rlimits {
    Rlimits {
        cpu_seconds: Some(JOB_CPU_SECONDS),
        address_space_bytes: Some(JOB_ADDRESS_SPACE),
        max_processes: None,
        file_size_bytes: Some(0),
    }
}

/// The text of `pdf`, read by a confined child (see the module documentation).
pub async fn extract(sandbox: &Sandbox, pdf: Vec<u8>) -> Result<String, PdfTextError> {
    let scratch = tempfile::Builder::new()
        .prefix("norma-pdf-")
        .tempdir()
        .map_err(PdfTextError::Spawn)?;
    let spec = sandbox.job_spec(scratch.path(), PROGRAM, job_limits())?;
    let mut child = tokio::process::Command::new(&spec.program)
        .args(&spec.args)
        .env_clear()
        .envs(spec.env)
        .current_dir(&spec.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(PdfTextError::Spawn)?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(PdfTextError::Unreadable("no pipes".into()));
    };
    let exchange = async {
        let feed = async move {
            // A reader that stops early closes the pipe: not an error of ours.
            let _ = stdin.write_all(&pdf).await;
            drop(stdin);
        };
        let mut text = Vec::new();
        let mut note = Vec::new();
        let read = async {
            stdout
                .take(MAX_TEXT_BYTES as u64)
                .read_to_end(&mut text)
                .await
        };
        let read_note = async { stderr.take(4096).read_to_end(&mut note).await };
        let ((), read, _) = tokio::join!(feed, read, read_note);
        read.map_err(PdfTextError::Spawn)?;
        let status = child.wait().await.map_err(PdfTextError::Spawn)?;
        Ok::<_, PdfTextError>((status, text, note))
    };
    let (status, text, note) = tokio::time::timeout(JOB_DEADLINE, exchange)
        .await
        .map_err(|_| PdfTextError::Timeout(JOB_DEADLINE))??;
    if !status.success() {
        let note = String::from_utf8_lossy(&note);
        let why = note
            .lines()
            .find_map(|l| l.strip_prefix("pdf-text: "))
            .map(str::to_owned)
            .unwrap_or_else(|| describe(status));
        return Err(PdfTextError::Unreadable(why));
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(signal)) => format!("the reader was stopped by signal {signal}"),
        (Some(code), _) => format!("the reader failed with status {code}"),
        (None, None) => "the reader failed".into(),
    }
}

/// The job itself, in the confined launcher process: PDF on stdin, text on stdout. Exits 0
/// with the text, 2 when the document cannot be read (the reason on stderr, prefixed
/// `pdf-text: `). An allocation failure under the address-space limit aborts the process.
pub fn job_main() -> ! {
    let mut pdf = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_PDF_BYTES as u64 + 1)
        .read_to_end(&mut pdf);
    let outcome = match read {
        Err(error) => Err(format!("reading the document: {error}")),
        Ok(_) if pdf.len() > MAX_PDF_BYTES => Err("the document is too large".into()),
        Ok(_) => {
            // The reader is known to panic on malformed documents: a panic is an unreadable
            // document, not a crash report.
            std::panic::set_hook(Box::new(|_| {}));
            match std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem(&pdf)) {
                // Nothing to read (pages of images only, or a content stream the reader gave
                // up inflating at the job's memory limit) is refused with that reason rather
                // than answered with an empty page.
                Ok(Ok(text)) if text.trim().is_empty() => {
                    Err("the document holds no text the reader could extract".into())
                }
                Ok(Ok(text)) => Ok(text),
                Ok(Err(error)) => Err(format!("not a readable PDF: {error}")),
                Err(_) => Err("not a readable PDF (the reader gave up)".into()),
            }
        }
    };
    match outcome {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            let bytes = text.as_bytes();
            let _ = out.write_all(&bytes[..bytes.len().min(MAX_TEXT_BYTES)]);
            let _ = out.flush();
            std::process::exit(0)
        }
        Err(why) => {
            let why: String = why.chars().take(300).collect();
            eprintln!("pdf-text: {}", why.replace('\n', " "));
            std::process::exit(2)
        }
    }
}
