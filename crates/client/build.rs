//! Tells the crate which Kubernetes release its user selected in k8s-openapi.
//!
//! kctrl-client selects no k8s-openapi version feature itself: the binary that uses it does
//! (k8s-openapi's rule for libraries). k8s-openapi reports the one selected to the build
//! scripts of the crates that depend on it (`DEP_K8S_OPENAPI_<crate version>_VERSION`,
//! `0x00_01_MM_00` for 1.MM). From it this script sets `k8s_api_ge = "1.N"` for every
//! release N from the oldest supported up to the selected one, so code that only some
//! releases have (the generated protobuf decoders' newer fields, a field whose Rust type
//! changed) is written once and gated with `#[cfg(k8s_api_ge = "1.N")]`.

/// The releases k8s-openapi 0.29 supports, oldest and newest (minor versions of 1.x).
const OLDEST: u32 = 33;
const NEWEST: u32 = 37;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let values: Vec<String> = (OLDEST..=NEWEST).map(|m| format!("\"1.{m}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(k8s_api_ge, values({}))",
        values.join(", ")
    );
    let reported = std::env::vars()
        .find(|(name, _)| name.starts_with("DEP_K8S_OPENAPI_") && name.ends_with("_VERSION"));
    let Some((name, value)) = reported else {
        // k8s-openapi's own build script stops first when no version is selected, so this
        // is only reached with a k8s-openapi that does not report one.
        panic!(
            "k8s-openapi did not report the Kubernetes version it was built for \
             (no DEP_K8S_OPENAPI_*_VERSION); kctrl-client needs k8s-openapi 0.29"
        );
    };
    let minor = value
        .parse::<u32>()
        .map(|v| (v >> 8) & 0xff)
        .unwrap_or_else(|_| panic!("{name}={value} is not the number k8s-openapi writes"));
    if !(OLDEST..=NEWEST).contains(&minor) {
        panic!(
            "k8s-openapi was built for Kubernetes 1.{minor}; kctrl-client supports 1.{OLDEST} \
             to 1.{NEWEST}: select one of k8s-openapi's features v1_{OLDEST} to v1_{NEWEST}"
        );
    }
    println!("cargo::rustc-env=KCTRL_K8S_API_VERSION=1.{minor}");
    for m in OLDEST..=minor {
        println!("cargo::rustc-cfg=k8s_api_ge=\"1.{m}\"");
    }
}
