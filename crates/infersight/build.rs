//! Build step of the `infersight` binary: how it is linked, before anything runs.
//!
//! On Linux the binary is linked as a plain executable, not a position-independent one (PIE).
//! As a PIE, the loader applies about 250,000 relocations (6 MB) at every start and copies the
//! 4 MB of vtables and static tables they touch: `infersight query --data DATA "SELECT 1"` took
//! 21 ms, 10 ms without (bench/README.md, "Process start"). Every CLI command pays it, and
//! `infersight query` is timed as a whole command. The code is compiled position-independent as
//! before (only the final link changes), so the heap, the stacks and the shared libraries are
//! still at random addresses; the binary's own code is not (as with Go's default binaries).
//! `INFERSIGHT_PIE=1` at build time links a PIE again.

fn main() {
    println!("cargo:rerun-if-env-changed=INFERSIGHT_PIE");
    println!("cargo:rerun-if-changed=build.rs");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let pie = std::env::var("INFERSIGHT_PIE").is_ok_and(|v| !v.is_empty() && v != "0");
    if linux && !pie {
        // after rustc's own `-pie`: the C compiler driver that links takes the last one
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
