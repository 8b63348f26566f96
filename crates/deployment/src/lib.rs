//! The Deployment controller. Its files mirror upstream's
//! `pkg/controller/deployment`: `util` holds the pure rollout arithmetic; `sync`, `rolling`,
//! `recreate` and `progress` hold the strategies' decisions as pure functions returning the
//! writes to perform, so upstream's table tests drive them without an API. `controller` (with
//! `rollback`) reads the caches and applies those decisions through the API, recording
//! `events`, and does not act on a ReplicaSet cache that does not show its own last
//! ReplicaSet writes yet (kctrl-runtime's `own_writes`); `wiring` turns informer notifications into
//! work-queue keys and runs the workers; `sharding` lets several replicas split the
//! Deployments between them by namespace.

pub mod controller;
pub mod events;
pub mod pod_view;
pub mod progress;
pub mod recreate;
pub mod rollback;
pub mod rolling;
pub mod sharding;
pub mod sync;
pub mod util;
pub mod wiring;

#[cfg(test)]
mod fixtures;
