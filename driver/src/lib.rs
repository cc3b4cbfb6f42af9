//! rota: a store-backed batch job runner (the tokio driver).
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod catch;
mod fetch;
mod runner;

pub use fetch::Fetch;
pub use rota_core::*;
pub use runner::{Runner, Submitted};
pub use tokio_util::sync::CancellationToken;
