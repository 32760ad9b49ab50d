//! A session's finished background tasks, waiting for its loop: the task registry's
//! notification channel, read when the loop asks (at its turn boundaries) instead of being
//! forwarded by a task of its own.
//!
//! A forwarding task per session environment woke the runtime's other worker on every
//! session's first run (a spawn) and lived as long as the environment; reading the channel
//! where the notes are consumed costs nothing until a task ends. The channel is the registry's
//! (bounded: a note that does not fit is dropped, see
//! [`TaskRegistry`](crate::tools::builtin::tasks::TaskRegistry)); notes read are kept here as
//! the text the loop hands the model until it takes them.

use crate::tools::builtin::tasks::TaskNotification;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::mpsc;

#[derive(Default)]
struct Notes {
    /// The registry's notifications, when this session's environment took them.
    finished: Option<mpsc::Receiver<TaskNotification>>,
    /// Read and not yet taken by the loop.
    texts: Vec<String>,
}

/// See the module doc.
#[derive(Default)]
pub struct TaskInbox {
    notes: Mutex<Notes>,
}

impl TaskInbox {
    /// An inbox reading `finished` (none: a registry whose notes were taken elsewhere).
    pub fn new(finished: Option<mpsc::Receiver<TaskNotification>>) -> Self {
        Self {
            notes: Mutex::new(Notes {
                finished,
                texts: Vec::new(),
            }),
        }
    }

    /// The notes with every notification received so far read into them.
    fn read(&self) -> MutexGuard<'_, Notes> {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let Notes { finished, texts } = &mut *notes;
        if let Some(finished) = finished {
            while let Ok(note) = finished.try_recv() {
                texts.push(text_of(&note));
            }
        }
        notes
    }

    /// How many notes wait for the loop.
    pub fn pending(&self) -> u32 {
        u32::try_from(self.read().texts.len()).unwrap_or(u32::MAX)
    }

    /// The waiting notes, oldest first; the inbox is empty afterwards.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.read().texts)
    }

    /// Whether no note waits (none received and none kept).
    pub fn is_empty(&self) -> bool {
        self.read().texts.is_empty()
    }
}

/// The text the loop hands the model for a finished task.
fn text_of(note: &TaskNotification) -> String {
    format!(
        "task {} {:?} (exit code {}): {}",
        note.task_id,
        note.status,
        note.exit_code.map_or("none".to_owned(), |c| c.to_string()),
        note.command
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::builtin::tasks::TaskStatus;

    fn note(id: &str, status: TaskStatus, exit_code: Option<i32>) -> TaskNotification {
        TaskNotification {
            task_id: id.into(),
            status,
            exit_code,
            command: format!("run {id}"),
        }
    }

    #[test]
    fn notes_sent_before_the_loop_asks_are_read_in_order_and_taken_once() {
        let (sender, finished) = mpsc::channel(8);
        let inbox = TaskInbox::new(Some(finished));
        assert!(inbox.is_empty());
        assert_eq!(inbox.pending(), 0);
        sender
            .try_send(note("task_1", TaskStatus::Completed, Some(0)))
            .unwrap();
        sender
            .try_send(note("task_2", TaskStatus::Killed, None))
            .unwrap();
        assert!(!inbox.is_empty());
        assert_eq!(inbox.pending(), 2);
        sender
            .try_send(note("task_3", TaskStatus::Completed, Some(3)))
            .unwrap();
        assert_eq!(
            inbox.take(),
            [
                "task task_1 Completed (exit code 0): run task_1",
                "task task_2 Killed (exit code none): run task_2",
                "task task_3 Completed (exit code 3): run task_3",
            ]
        );
        assert_eq!(inbox.pending(), 0);
        assert!(inbox.take().is_empty());
        // The registry gone, what it sent before still counts.
        sender
            .try_send(note("task_4", TaskStatus::Completed, Some(0)))
            .unwrap();
        drop(sender);
        assert_eq!(inbox.pending(), 1);
        assert!(TaskInbox::new(None).is_empty());
    }
}
