//! The Python client's own unit tests (`clients/python/tests`), run from the Rust suite so
//! that `cargo test` covers them. They need only the standard library: no GPU, torch or
//! cuda-python (the torch cases skip, saying so, without torch). The service cases start
//! `kaas serve` themselves: `KAAS_BIN` hands them the binary this build made, so they test
//! this build's service rather than whatever `kaas` they might find. Skips (and says so)
//! where no `python3` is on PATH.

use std::process::Command;

#[test]
fn the_python_client_unit_tests_pass() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python");
    let out = match Command::new("python3").args(["-m", "unittest", "discover", "-s", "tests"]).current_dir(dir).env("PYTHONDONTWRITEBYTECODE", "1").env("KAAS_BIN", env!("CARGO_BIN_EXE_kaas")).output() {
        Ok(o) => o,
        Err(e) => {
            // Straight to stderr: libtest captures eprintln! of a passing test.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED the_python_client_unit_tests_pass: no python3 ({e})");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python client tests failed:\n{stderr}");
    assert!(stderr.contains("OK"), "{stderr}");
    let ran: usize = stderr.lines().find_map(|l| l.strip_prefix("Ran ")).and_then(|l| l.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(ran >= 30, "only {ran} Python tests ran:\n{stderr}");
    // unittest's own skips (no torch, no GPU) pass too: say how many, where a reader looks.
    let skipped = stderr.lines().find_map(|l| l.split("skipped=").nth(1)).and_then(|n| n.trim_end_matches(')').parse::<usize>().ok()).unwrap_or(0);
    if skipped > 0 {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {skipped} of {ran} Python client tests (no torch, transformers or GPU here; `python3 -m unittest discover -s tests -v` in clients/python names each and why)"
        );
    }
}
