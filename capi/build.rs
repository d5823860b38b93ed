//! Gives libdataplane_c.so its soname: `libdataplane_c.so.MAJOR`, or `.0.MINOR` while the
//! major version is 0 (where a minor release may change the ABI). `make install` names
//! the installed file and its links after it.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_default();
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_default();
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdataplane_c.so.{abi}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
