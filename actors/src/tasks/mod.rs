//! Tasks: a `tools/call` that answers with a task handle and runs on in the background.
//!
//! Two generations share one machinery:
//! - the **tasks extension** of 2026-07-28 (`io.modelcontextprotocol/tasks`, SEP-2663): the
//!   server decides, per call, to answer a caller that declared the extension with a flat
//!   `CreateTaskResult` (`resultType: "task"`); the caller polls `tasks/get` (status, then the
//!   inlined `result` or `error`), answers input requests with `tasks/update`, cancels with
//!   `tasks/cancel`, and may hear `notifications/tasks` on a `subscriptions/listen` stream;
//! - the **experimental tasks** of 2025-11-25: the caller asks with `params.task`, gets
//!   `{task}`, and uses `tasks/get`, `tasks/result` (blocks until terminal), `tasks/list`,
//!   `tasks/cancel`; `notifications/tasks/status` go to the connection that created the task.
//!
//! What a task *is* (status, timestamps, outstanding input requests, its result) lives in a
//! [`TaskStore`], which could be shared by replicas; what only the process running the
//! handler can hold (its future, cancellation token, the waiters of its input requests) lives
//! in the in-process [`Tasks`] table. `docs/semantics.md` ("Tasks") is the contract.
//!
//! One concern per file: `store` (the [`TaskStore`] contract and its types), `memory`
//! ([`InMemoryTaskStore`]), `settings` ([`TaskSettings`]), `table` (the run table),
//! `call` (a `tools/call` that becomes a task) and `methods` (the `tasks/*` handlers).

mod call;
mod memory;
mod methods;
mod settings;
mod store;
mod table;

pub use memory::InMemoryTaskStore;
pub use settings::TaskSettings;
pub use store::{
    NewTask, StoreFuture, TaskGeneration, TaskOutcome, TaskPage, TaskRecord, TaskStore,
    TaskStoreError, TaskUpdate,
};

pub(crate) use call::{
    declares_extension, drive, effective_support, missing_extension, plan_call, plan_handoff,
    CallPlan, TaskHint,
};
pub(crate) use methods::handle;
pub(crate) use table::{TaskLink, TaskRun, Tasks};
