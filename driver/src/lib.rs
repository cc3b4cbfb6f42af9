//! rota: a store-backed batch job runner.
//!
//! A caller submits a *job*: a list of fetch [`Target`]s. A [`Runner`]'s workers (one or two)
//! drain the targets of every live job one at a time, round-robin across jobs (`a1 b1 a2 b2 …`),
//! each job strictly serial, through a [`Fetch`] the embedding program supplies, and store each
//! outcome in a [`BatchStore`]. The runner enforces caps per caller and in total, reuses a job
//! for the same caller and targets (idempotency), cancels, retries a target that was only busy,
//! expires and evicts old jobs, reports metrics through [`Hooks`], and never logs a URL.
//!
//! This crate is the thin tokio driver. Every scheduling decision is made by the pure
//! [`JobMachine`] of `rota-core` (re-exported here with all of `rota-core`'s public types); the
//! driver turns its decisions into store calls, fetch calls, hook calls and wake-ups. Stores
//! live in their own crates: `rota-store-memory`, `rota-store-sqlite`, `rota-store-redb`.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use rota::{
//!     CancellationToken, Caller, CallerClass, Config, FetchError, JobStatus, Runner, Target,
//!     TargetResult,
//! };
//! use rota_store_memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The fetch: any async closure of (caller, target, cancel token).
//! let fetch = |_caller: Arc<Caller>, target: Target, _cancel: CancellationToken| async move {
//!     if target.url.ends_with("/missing") {
//!         return Err(FetchError::Other("not found".into()));
//!     }
//!     Ok(TargetResult {
//!         content: format!("fetched {}", target.url),
//!         meta: Default::default(),
//!     })
//! };
//! let runner = Runner::start(Arc::new(MemoryStore::new()), fetch, Config::default()).await?;
//!
//! let caller = Caller { name: "alice".into(), ..Caller::default() };
//! let targets = vec![
//!     Target { url: "https://example.com/a".into(), ..Target::default() },
//!     Target { url: "https://example.com/missing".into(), ..Target::default() },
//! ];
//! let job = runner.submit(caller, CallerClass::Fleet, targets).await?;
//! assert!(!job.reused);
//!
//! // Wait for the end: poll the stored status (an embedding API would answer a caller's poll).
//! let view = loop {
//!     let view = runner.status(&job.id).await?.ok_or("job vanished")?;
//!     if view.job.status.is_terminal() {
//!         break view;
//!     }
//!     tokio::time::sleep(Duration::from_millis(5)).await;
//! };
//! assert_eq!(view.job.status, JobStatus::Partial);
//! assert_eq!(view.job.targets_done, 2);
//! let first = view.targets[0].result.as_ref().ok_or("no result")?;
//! assert_eq!(first.content, "fetched https://example.com/a");
//! assert_eq!(view.targets[1].error, "not found");
//!
//! runner.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Shape
//!
//! - [`Runner::start`] recovers the store (jobs left live by a previous process fail
//!   `interrupted`: their callers were never persisted) and starts the workers.
//! - [`Runner::submit`] checks idempotency and the caps and stores the job in one atomic store
//!   operation, then wakes a worker. Workers never poll: they sleep until a submit, a cancel, a
//!   stored outcome, or the machine's next retry time.
//! - A target costs two store writes: `start_target` (target and, on the first, job `running`)
//!   and `finish_target` (its outcome and, on the last, the job's terminal status).
//! - No lock is held across an await; store calls run inline on the runtime (backends do short
//!   synchronous work rather than a `spawn_blocking` per call).
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod callers;
mod catch;
mod fetch;
mod guarded;
mod housekeeping;
mod runner;

/// The attribute that implements [`Fetch`] (and [`BatchStore`]) on a type of your own, as the
/// traits are declared with it: re-exported so that an embedder needs no dependency of its own.
pub use async_trait::async_trait;
pub use fetch::Fetch;
pub use rota_core::*;
pub use runner::{Runner, Submitted};
pub use tokio_util::sync::CancellationToken;
