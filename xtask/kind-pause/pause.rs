//! The pod sandbox's process in kctrl's offline kind node image (the image
//! `registry.k8s.io/pause:<version>` stands for). It holds the pod's namespaces and does
//! nothing else; containerd stops a sandbox with SIGKILL. Built by `cargo xtask kind
//! node-image` with `rustc` as a static binary (no workspace crate: it must stay tiny).

fn main() {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!("kctrl pause");
        return;
    }
    loop {
        std::thread::park();
    }
}
