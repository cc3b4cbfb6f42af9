//! rota-core: the types, configuration, pure scheduling machine and store trait of rota, a
//! store-backed batch job runner.
//!
//! Nothing here does I/O, reads a clock or needs an async runtime:
//! - [`types`](crate::Target): what a caller submits and sees ([`Target`], [`Job`],
//!   [`JobView`], …);
//! - [`idem_key`]: the idempotency key of a submit;
//! - [`Config`], [`Hooks`], [`Clock`]: how a runner is set up;
//! - [`JobMachine`]: every scheduling decision, fed inputs and the time by a driver;
//! - [`BatchStore`]: the trait every backend implements, with its contract;
//! - [`claims`]: the store files open in this process, a registry the file stores share.
//!
//! The tokio driver is the `rota` crate, which re-exports everything here.
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod claims;
mod config;
mod error;
mod idem;
pub mod machine;
mod store;
mod types;

pub use config::*;
pub use error::{BackendError, StoreError, SubmitError};
pub use idem::{hex, idem_key};
pub use machine::JobMachine;

pub use store::*;
pub use types::*;
