//! `ready_or_skip!`: a test's set-up that may be impossible here (not root, no tool, no
//! examples) either gives its value or makes the test say SKIP and why, on stdout and
//! stderr (so the line shows with and without `--nocapture`), and return.

#[allow(unused_macros)] // each test binary uses some of the helpers
macro_rules! ready_or_skip {
    ($what:literal, $setup:expr) => {
        match $setup {
            Ok(ready) => ready,
            Err(why) => {
                println!("SKIP {}: {}", $what, why);
                eprintln!("SKIP {}: {}", $what, why);
                return;
            }
        }
    };
}
