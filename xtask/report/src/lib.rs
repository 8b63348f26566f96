//! xtask's report layer, shared by every activity that reports numbers or test results
//! (`bench *`, `chaos`, `diff`, `conformance`): medians, percentiles and spreads
//! ([`stats`]), the machine a run measured on ([`machine`]), tables and their cells
//! ([`markdown`]: one [`markdown::Table`] for markdown and terminal tables), golden-file checks
//! of reports ([`golden`]) and
//! Ginkgo's JUnit XML ([`junit`]).
//!
//! It depends on no kctrl crate and on no other xtask crate: editing a library of the workspace
//! does not rebuild it.

pub mod golden;
pub mod junit;
pub mod machine;
pub mod markdown;
pub mod stats;
mod table;
