//! The Deployment controller (work in progress). Its files mirror upstream's
//! `pkg/controller/deployment`: `util` holds the pure rollout arithmetic; `sync`, `rolling`,
//! `recreate` and `progress` hold the strategies' decisions as pure functions returning the
//! writes to perform, so upstream's table tests drive them without an API.

pub mod progress;
pub mod recreate;
pub mod rolling;
pub mod sync;
pub mod util;

#[cfg(test)]
mod fixtures;
