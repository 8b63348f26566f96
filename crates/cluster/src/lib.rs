//! A real Kubernetes control plane on loopback, built from upstream's Go modules: etcd,
//! kube-apiserver, kube-controller-manager (without its Deployment controller unless asked),
//! kube-scheduler and KWOK with fake nodes. The layer under `cargo xtask cluster`, the
//! project's end-to-end runs and benchmarks, and under `kctrl-testenv`.
//!
//! It depends on no kctrl crate: editing a library of the workspace does not rebuild it, and it
//! talks to the apiserver through the kubectl of the cached build.
//!
//! * [`versions`]: the supported releases and everything pinned with each;
//! * [`toolchain`]: building the binaries of a release into a cache outside the repository
//!   ([`toolchain::Cache`], [`toolchain::ensure_built`]);
//! * [`pki`]: the CA, serving and client certificates and kubeconfigs (`openssl`);
//! * [`process`]: detached components in their own process groups, pid files, stopping;
//! * [`etcd`]: etcd's health and compaction over its HTTP gateway;
//! * [`stages`]: our KWOK stages for pods;
//! * [`plane`]: starting, inspecting and stopping one plane ([`plane::ensure_up`],
//!   [`plane::start_in`], [`plane::stop`], [`plane::status`]);
//! * [`kind`]: the kind cluster of `cargo xtask e2e --cluster kind`;
//! * [`audit`]: kube-apiserver's audit policy and log on a plane.

pub mod audit;
pub mod etcd;
pub mod kind;
pub mod pki;
pub mod plane;
pub mod process;
pub mod stages;
pub mod toolchain;
pub mod versions;
