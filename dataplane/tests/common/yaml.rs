//! `config_yaml!`: a configuration's header (`dataplane: cfg:`, version 1, stream type,
//! master core, and `loopback: "sw"` when asked) in front of a body written as in the
//! file, indented to `cfg:`'s children. A literal, so constants and `format!` strings
//! can use it, and lines keep their numbers: the header is lines 2 to 6 (7 with the
//! loopback), the body follows. Shared by the integration tests (`tests/common`) and the
//! library's unit tests (`lib.rs` includes this file under `cfg(test)`).

#[allow(unused_macros)] // each test binary uses some of the helpers
macro_rules! config_yaml {
    ($stream:ident, $master:literal, loopback, $body:literal) => {
        concat!(
            "\ndataplane:\n  cfg:\n    version: 1\n    stream_type: ",
            stringify!($stream),
            "\n    master_core: ",
            $master,
            "\n    loopback: \"sw\"\n",
            $body
        )
    };
    ($stream:ident, $master:literal, $body:literal) => {
        concat!(
            "\ndataplane:\n  cfg:\n    version: 1\n    stream_type: ",
            stringify!($stream),
            "\n    master_core: ",
            $master,
            "\n",
            $body
        )
    };
}
