//! The kctrl peer of `cargo xtask bench runtime` (see the library's docs for its protocol).

fn main() -> anyhow::Result<()> {
    kctrl_bench_runtime::run(kctrl_bench_runtime::PeerArgs::parse(
        std::env::args().skip(1),
    )?)
}
