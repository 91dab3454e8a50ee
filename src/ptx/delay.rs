//! Held-back blocks for the race stage: a copy of a module in which every kernel, on
//! entry, makes about half of its blocks wait a set time before running its own code.
//!
//! Why: a kernel whose blocks race (a split-K half that reads C before the other half
//! wrote it, a reduction that assumes block order) is right whenever its blocks run in
//! launch order, which an idle GPU nearly always gives, and co-running kernels change
//! that order only by chance. Holding back random blocks changes it for certain, and a
//! correct kernel cannot tell the difference: CUDA promises nothing about when a block
//! starts, so a late start is a schedule the hardware may produce. The wait is a wait,
//! never a skipped block, so kernels whose blocks wait for each other (semaphores,
//! serial split-K, stream-K fix-up) still finish; only their time grows.
//!
//! Which blocks wait is a hash of the block index and the global timer at the block's
//! start, bucketed to about a millisecond: blocks of one launch share the bucket (so the
//! warps of a block agree), and launches a millisecond apart hold back different halves.

use super::{Lexer, StaticError, Tok};
use std::time::Duration;

/// A copy of `ptx` in which each `.entry` with a body first holds back about half of its
/// blocks for `delay`. Errors are the lexer's: PTX the static checks accepted lexes.
pub fn hold_back_blocks(ptx: &str, delay: Duration) -> Result<String, StaticError> {
    let mut lexer = Lexer::new(ptx);
    let mut depth = 0u32;
    let mut in_entry_header = false;
    let mut bodies: Vec<usize> = Vec::new();
    while let Some(t) = lexer.next_token()? {
        match t.tok {
            Tok::Word(".entry") if depth == 0 => in_entry_header = true,
            // A declaration without a body (`.extern .entry f(...);`).
            Tok::Punct(';') if depth == 0 => in_entry_header = false,
            Tok::Punct('{') => {
                if depth == 0 && in_entry_header {
                    bodies.push(t.at + 1);
                    in_entry_header = false;
                }
                depth += 1;
            }
            Tok::Punct('}') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let nanos = delay.as_nanos().clamp(1, u64::MAX as u128) as u64;
    let mut out = String::with_capacity(ptx.len() + bodies.len() * 1200);
    let mut from = 0;
    for (i, at) in bodies.into_iter().enumerate() {
        out.push_str(&ptx[from..at]);
        out.push_str(&prologue(i, nanos));
        from = at;
    }
    out.push_str(&ptx[from..]);
    Ok(out)
}

/// The wait, in a scope of its own so that its registers and labels cannot meet the
/// kernel's. The hash is murmur3's finalizer over the block index and the timer bucket.
fn prologue(i: usize, nanos: u64) -> String {
    format!(
        "
	{{ // kaas race stage: about half of the blocks start {nanos} ns late
	.reg .b32 %kaasdelay_h<2>;
	.reg .b64 %kaasdelay_t<3>;
	.reg .pred %kaasdelay_p;
	mov.u64 %kaasdelay_t0, %globaltimer;
	shr.u64 %kaasdelay_t1, %kaasdelay_t0, 20;
	cvt.u32.u64 %kaasdelay_h0, %kaasdelay_t1;
	mov.u32 %kaasdelay_h1, %ctaid.x;
	mad.lo.u32 %kaasdelay_h0, %kaasdelay_h1, 0x9E3779B1, %kaasdelay_h0;
	mov.u32 %kaasdelay_h1, %ctaid.y;
	mad.lo.u32 %kaasdelay_h0, %kaasdelay_h1, 0x85EBCA77, %kaasdelay_h0;
	mov.u32 %kaasdelay_h1, %ctaid.z;
	mad.lo.u32 %kaasdelay_h0, %kaasdelay_h1, 0xC2B2AE3D, %kaasdelay_h0;
	shr.u32 %kaasdelay_h1, %kaasdelay_h0, 16;
	xor.b32 %kaasdelay_h0, %kaasdelay_h0, %kaasdelay_h1;
	mul.lo.u32 %kaasdelay_h0, %kaasdelay_h0, 0x85EBCA6B;
	shr.u32 %kaasdelay_h1, %kaasdelay_h0, 13;
	xor.b32 %kaasdelay_h0, %kaasdelay_h0, %kaasdelay_h1;
	mul.lo.u32 %kaasdelay_h0, %kaasdelay_h0, 0xC2B2AE35;
	shr.u32 %kaasdelay_h1, %kaasdelay_h0, 16;
	xor.b32 %kaasdelay_h0, %kaasdelay_h0, %kaasdelay_h1;
	and.b32 %kaasdelay_h0, %kaasdelay_h0, 1;
	setp.eq.u32 %kaasdelay_p, %kaasdelay_h0, 0;
	@%kaasdelay_p bra $kaasdelay_go_{i};
$kaasdelay_wait_{i}:
	nanosleep.u32 1000;
	mov.u64 %kaasdelay_t1, %globaltimer;
	sub.u64 %kaasdelay_t2, %kaasdelay_t1, %kaasdelay_t0;
	setp.lt.u64 %kaasdelay_p, %kaasdelay_t2, {nanos};
	@%kaasdelay_p bra $kaasdelay_wait_{i};
$kaasdelay_go_{i}:
	}}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "
.version 8.0
.target sm_90
.address_size 64
.extern .entry declared(.param .u64 p);
// a comment with { and .entry in it
.visible .entry first(
	.param .u64 first_param_0
)
.maxntid 128, 1, 1
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [first_param_0];
	mov.u32 %r1, 1;
	mov.u32 %r2, 2;
	st.global.v2.u32 [%rd1], {%r1, %r2};
	ret;
}
.visible .entry second(
	.param .u64 second_param_0
)
{
	ret;
}
";

    #[test]
    fn each_kernel_body_gets_one_wait_and_nothing_else_changes() {
        let out = hold_back_blocks(TWO, Duration::from_micros(50)).unwrap();
        assert_eq!(out.matches("kaas race stage").count(), 2, "{out}");
        assert!(out.contains("$kaasdelay_go_0:") && out.contains("$kaasdelay_go_1:"));
        assert!(out.contains("setp.lt.u64 %kaasdelay_p, %kaasdelay_t2, 50000;"));
        // The waits sit right after each body's opening brace, before the kernel's code.
        let first = out.find(".maxntid 128, 1, 1\n{").unwrap();
        assert!(out[first..].trim_start_matches(".maxntid 128, 1, 1\n{").trim_start().starts_with("{ // kaas race stage"));
        // Removing the inserted text gives the module back, byte for byte.
        let mut back = out.clone();
        for i in 0..2 {
            let start = back.find("\n\t{ // kaas race stage").unwrap();
            let end_marker = format!("$kaasdelay_go_{i}:\n\t}}\n");
            let end = back.find(&end_marker).unwrap() + end_marker.len();
            back.replace_range(start..end, "");
        }
        assert_eq!(back, TWO);
    }

    #[test]
    fn the_instrumented_module_assembles() {
        let Ok(ptxas) = crate::ptx::ptxas::locate() else {
            eprintln!("skipping: no ptxas");
            return;
        };
        let out = hold_back_blocks(TWO, Duration::from_micros(50)).unwrap();
        // The oldest target a submission may name, and Hopper's.
        for arch in ["sm_80", "sm_90a"] {
            let module = out.replace(".target sm_90", &format!(".target {arch}"));
            let report = crate::ptx::ptxas::run(&ptxas, &module, arch, crate::ptx::ptxas::DEFAULT_TIMEOUT).expect("the instrumented module assembles");
            assert!(report.entry("first").is_some() && report.entry("second").is_some(), "{arch}: {report:?}");
        }
        // And shipped kernels of each family (wgmma with clusters and split-K, mma, simple).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels/h100/ptx");
        let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        for path in names.iter().step_by(names.len() / 4) {
            let ptx = std::fs::read_to_string(path).unwrap();
            let out = hold_back_blocks(&ptx, Duration::from_micros(50)).unwrap();
            assert!(out.matches("kaas race stage").count() >= 1, "{}", path.display());
            crate::ptx::ptxas::run(&ptxas, &out, "sm_90a", crate::ptx::ptxas::DEFAULT_TIMEOUT)
                .unwrap_or_else(|e| panic!("{} with held-back blocks: {e}", path.display()));
        }
    }
}
