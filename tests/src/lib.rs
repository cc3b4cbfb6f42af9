//! rota-tests: the shared test suites of rota.
//!
//! - [`conformance`]: one documented check per point of the [`BatchStore`](rota_core::BatchStore)
//!   contract; every backend runs the whole list from one small file in `tests/tests/`.
//! - [`faulty`]: [`FaultyStore`](faulty::FaultyStore), a wrapper that fails chosen operations.
//! - [`runner`]: the runner behaviour tests (SPEC §3–§5, §8), generic over the backend.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod conformance;
pub mod faulty;
pub mod runner;
