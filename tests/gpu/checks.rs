//! The verifier's GPU checks against their host models (`src/verify`).

use super::*;

// ---------------------------------------------------------------------------------------
// The verifier's GPU checks against their host models (src/verify)

/// Every GPU check of the verifier on the same data as its host model, at shapes tiles
/// do not divide, both layouts: generators bit for bit, exact counts, fp32 reference,
/// the reductions, the transpose, the fp16 chain.
#[test]
fn the_gpu_checks_agree_with_the_host_models() {
    use kaas::gpu::checks;
    use kaas::verify::{self, binary, containment, deviation, spot};
    let Some(gpu) = gpu_or_skip() else { return };
    let upload = |v: &[f16]| {
        let buf = gpu.alloc(v.len() * 2).expect("alloc");
        buf.upload_f16(&gpu, v).expect("upload");
        buf
    };
    for (m, n, k) in [(1, 1, 1), (37, 53, 71), (128, 96, 2100), (300, 7, 4097)] {
        for layout in [Layout::Nn, Layout::Tn] {
            let p = problem(Acc::F32, layout, (m, n, k));
            let s = p.shape();
            let (a_len, b_len, c_len) = ((m * k) as usize, (k * n) as usize, (m * n) as usize);
            let (a, b) = (gpu.alloc(a_len * 2).expect("alloc"), gpu.alloc(b_len * 2).expect("alloc"));

            // Binary inputs and exact counts.
            let density = binary::binary_density(k);
            checks::fill_binary(&gpu, &a, a_len, 11, density).expect("fill");
            checks::fill_binary(&gpu, &b, b_len, 12, density).expect("fill");
            let (ha, hb) = (binary::fill_binary(11, a_len, density), binary::fill_binary(12, b_len, density));
            assert_eq!(a.download_f16(&gpu, a_len).expect("download"), ha, "binary A {s}");
            assert_eq!(b.download_f16(&gpu, b_len).expect("download"), hb, "binary B {s}");
            let counts = checks::exact_counts(&gpu, &p, &a, &b).expect("counts");
            let host = verify::BinaryReference::new(s, layout, &ha, &hb).expect("host reference");
            let exact: Vec<f32> = (0..c_len).map(|i| host.count(i / n as usize, i % n as usize) as f32).collect();
            let all: Vec<u64> = (0..c_len as u64).collect();
            assert_eq!(checks::gather_f32(&gpu, &counts, &all).expect("gather"), exact, "exact counts {s} {layout}");

            // A C with three wrong outputs, one unwritten and one infinite.
            let mut c: Vec<f16> = exact.iter().map(|&x| f16::from_f32(x)).collect();
            let mut wrong = vec![c_len / 3, c_len / 2, c_len - 1];
            wrong.dedup();
            for &i in &wrong {
                c[i] = f16::from_f32(c[i].to_f32() + 1.0);
            }
            let c_buf = upload(&c);
            let report = checks::compare_exact(&gpu, &c_buf, &counts, c_len, n as usize, binary::EXACT_LIMIT).expect("compare");
            assert_eq!(report.mismatches as usize, wrong.len(), "{s}");
            assert_eq!(report.checked as usize, c_len);
            let first = report.first_mismatch.expect("a mismatch");
            assert_eq!((first.row as usize * n as usize + first.col as usize), wrong[0]);
            assert_eq!(first.got, first.expected as f32 + 1.0);

            let mut scanned = c.clone();
            scanned[c_len / 2] = containment::poison();
            scanned[c_len - 1] = f16::INFINITY;
            let (unwritten, non_finite) = checks::scan_output(&gpu, &upload(&scanned), c_len, containment::POISON_BITS).expect("scan");
            assert_eq!(unwritten, containment::find_unwritten(&scanned), "{s}");
            if c_len > 1 && c_len / 2 != c_len - 1 {
                assert_eq!(non_finite.map(|f| f.first), Some(c_len - 1));
            }
            assert_eq!(checks::find_changed(&gpu, &c_buf, &upload(&scanned), c_len).expect("changed"), containment::find_changed(&c, &scanned));
            assert_eq!(checks::find_changed(&gpu, &c_buf, &c_buf, c_len).expect("changed"), None);

            // Uniform inputs, the fp32 reference and the largest deviation.
            checks::fill_uniform(&gpu, &a, a_len, 21, -1.0, 1.0).expect("fill");
            checks::fill_uniform(&gpu, &b, b_len, 22, -1.0, 1.0).expect("fill");
            let (ua, ub) = (binary::fill_uniform(21, a_len, -1.0, 1.0), binary::fill_uniform(22, b_len, -1.0, 1.0));
            let (ga, gb) = (a.download_f16(&gpu, a_len).expect("download"), b.download_f16(&gpu, b_len).expect("download"));
            let differ = ga.iter().zip(&ua).filter(|(x, y)| x != y).count() + gb.iter().zip(&ub).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "uniform inputs {s}: {differ} values differ from the host generator");
            let reference = checks::fp32_reference(&gpu, &p, &a, &b).expect("reference");
            let host = deviation::CpuReference::new(s, layout, &ua, &ub).expect("host reference").full();
            let got = checks::gather_f32(&gpu, &reference, &all).expect("gather");
            for (i, (&g, &h)) in got.iter().zip(&host).enumerate() {
                let (row, col) = (i / n as usize, i % n as usize);
                let a_row = &ua[row * k as usize..(row + 1) * k as usize];
                let b_col: Vec<f16> = (0..k as usize).map(|kk| if layout == Layout::Nn { ub[kk * n as usize + col] } else { ub[col * k as usize + kk] }).collect();
                assert_eq!(spot::check_reference(spot::ReferenceKind::Fp32, a_row, &b_col, g), Ok(()), "fp32 reference {s} {layout} at {i} (host {h})");
            }
            let c16: Vec<f16> = host.iter().map(|&x| f16::from_f32(x)).collect();
            let c16_buf = upload(&c16);
            let dev = checks::max_abs_deviation(&gpu, Some(&c16_buf), &reference, c_len).expect("deviation");
            let host_dev = verify::max_abs_deviation(&c16, &got).expect("host deviation");
            assert_eq!(dev.max_abs, host_dev.max_abs, "{s}");
            assert_eq!(dev.index, host_dev.index, "{s}");
            let max_ref = checks::max_abs_deviation(&gpu, None, &reference, c_len).expect("max |ref|");
            assert_eq!(max_ref.max_abs, deviation::max_abs(&got), "{s}");

            // The transpose gives B in the other layout's storage.
            let (rows, cols) = if layout == Layout::Nn { (k as usize, n as usize) } else { (n as usize, k as usize) };
            let t = checks::transpose(&gpu, &b, rows, cols).expect("transpose").download_f16(&gpu, b_len).expect("download");
            for r in [0, rows / 2, rows - 1] {
                for cc in [0, cols / 3, cols - 1] {
                    assert_eq!(t[cc * rows + r], ub[r * cols + cc], "transpose {s} {layout} at {r},{cc}");
                }
            }

            // The fp16 chain, at a few outputs and everywhere.
            let picks: Vec<u64> = vec![0, (c_len / 2) as u64, (c_len - 1) as u64];
            let chain = checks::fp16_chain(&gpu, &p, &a, &b, Some(&picks)).expect("chain").download_f16(&gpu, picks.len()).expect("download");
            let idx: Vec<usize> = picks.iter().map(|&i| i as usize).collect();
            assert_eq!(chain, deviation::fp16_chain_at(s, layout, &ua, &ub, &idx), "fp16 chain {s} {layout}");
            if c_len * (k as usize) < 1 << 24 {
                let everywhere = checks::fp16_chain(&gpu, &p, &a, &b, None).expect("chain").download_f16(&gpu, c_len).expect("download");
                assert_eq!(everywhere, deviation::fp16_chain_at(s, layout, &ua, &ub, &(0..c_len).collect::<Vec<_>>()), "fp16 chain {s} {layout}");
            }
        }
    }
    println!("the GPU checks agree with the host models on 4 shapes × 2 layouts");
}
