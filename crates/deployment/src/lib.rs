//! The Deployment controller (work in progress). Its files mirror upstream's
//! `pkg/controller/deployment`: `util` holds the pure rollout arithmetic.

pub mod util;
