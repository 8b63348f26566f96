//! A rate-limited work queue for Kubernetes controllers (work in progress).
