//! CUDA C++ source submissions: the service compiles them with NVRTC (in a
//! `kaas compile-sandbox` child) and queues the PTX like any other; bad source is refused
//! by name. Needs NVRTC and the headers (`scripts/cuda-tools.sh`, as CI runs it); where
//! they are missing the tests print SKIPPED (past the capture) and pass.

use std::path::PathBuf;
use std::time::Duration;

use actix_web::test::{self, TestRequest};
use kaas::api::{ApiSettings, create_app};
use kaas::auth::{self, Role};
use kaas::compile::{self, CompileLimits, CompileOptions};
use kaas::problem::Arch;
use kaas::work::submit::Quotas;

use crate::both_backends;
use crate::common::*;

/// A plain CUDA kernel: the hostile suite's correct one, with its shared helpers.
fn plain_source() -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kernels/hostile");
    let common = std::fs::read_to_string(dir.join("common.cuh")).unwrap();
    let kernel = std::fs::read_to_string(dir.join("correct_naive.cu")).unwrap();
    format!("{common}\n{kernel}")
}

/// A CuTe kernel: a naive TN GEMM over CuTe tensors, instantiated by a name expression.
const CUTE_SOURCE: &str = r#"#include <cute/tensor.hpp>
#include <cuda_fp16.h>
using namespace cute;
template <int BM, int BN>
__global__ void cute_naive(const half* A, const half* B, half* C, int M, int N, int K) {
    Tensor mA = make_tensor(make_gmem_ptr(A), make_shape(M, K), make_stride(K, Int<1>{}));
    Tensor mB = make_tensor(make_gmem_ptr(B), make_shape(N, K), make_stride(K, Int<1>{}));
    Tensor mC = make_tensor(make_gmem_ptr(C), make_shape(M, N), make_stride(N, Int<1>{}));
    int i = blockIdx.y * BM + threadIdx.y, j = blockIdx.x * BN + threadIdx.x;
    if (i < M && j < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += __half2float(mA(i, k)) * __half2float(mB(j, k));
        mC(i, j) = __float2half(acc);
    }
}
"#;

/// An exponential template instantiation: minutes and gigabytes unless stopped.
const TEMPLATE_BOMB: &str = "template <int N, int M> struct B { static constexpr long v = B<N - 1, 2 * M>::v + B<N - 1, 2 * M + 1>::v; };\n\
template <int M> struct B<0, M> { static constexpr long v = M; };\n\
extern \"C\" __global__ void k(long* x) { x[0] = B<40, 1>::v; }\n";

/// A loop unrolled four million times.
const UNROLL_BOMB: &str = "extern \"C\" __global__ void k(float* x) {\n  float a = x[threadIdx.x];\n#pragma unroll\n  for (int i = 0; i < (1 << 22); ++i) a = a * x[i & 1023] + 1.0f;\n  x[0] = a;\n}\n";

/// Why these tests cannot run here, if they cannot.
fn missing_tools(cute: bool) -> Option<String> {
    if let Err(why) = kaas::gpu::nvrtc::available() {
        return Some(format!("no NVRTC ({why}); run `eval \"$(scripts/cuda-tools.sh)\"`"));
    }
    let roots = compile::header_roots();
    if !roots.iter().any(|r| r.join("cuda_fp16.h").is_file()) {
        return Some("no CUDA headers (set KAAS_CUDA_INCLUDE; scripts/cuda-tools.sh does)".into());
    }
    if cute && !roots.iter().any(|r| r.join("cute/tensor.hpp").is_file()) {
        return Some(format!("no CUTLASS/CuTe headers (set {}; scripts/cuda-tools.sh does)", compile::CUTLASS_ENV));
    }
    None
}

fn limits() -> CompileLimits {
    CompileLimits { exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_kaas"))), ..CompileLimits::default() }
}

fn settings(compile: CompileLimits) -> ApiSettings {
    ApiSettings { quotas: Quotas { compile, ..Quotas::default() }, ..ApiSettings::default() }
}

fn submit_req(token: &str, body: serde_json::Value) -> TestRequest {
    TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {token}"))).set_json(body)
}

/// A template for a one-thread-per-output kernel with params (A, B, C, M, N, K).
fn template(entry: &str) -> serde_json::Value {
    serde_json::json!({
        "abi": "kaas.hgemm.v1", "arch": "sm_90", "acc": "f32", "layout": "tn",
        "launches": [{"entry": entry, "block": [16, 16, 1],
                      "grid": [{"ceil_div": ["N", 16]}, {"ceil_div": ["M", 16]}, 1],
                      "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}]}]
    })
}

fn source_body(source: &str, entry: &str) -> serde_json::Value {
    serde_json::json!({"cuda_source": source, "template": template(entry), "problems": ["256x256x256", "512x256x128"]})
}

async fn plain_and_cute_sources_compile_and_queue_and_rebuild(backend: Backend) {
    if let Some(why) = missing_tools(true) {
        crate::skipped!("source submissions: {why}");
        return;
    }
    let db = TestDb::new(backend).await;
    let app = test::init_service(create_app(state(&db, settings(limits())))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;

    for (source, entry, options) in [
        (plain_source(), "kaas_naive", serde_json::json!({})),
        (CUTE_SOURCE.to_string(), "cute_naive<16, 16>", serde_json::json!({"defines": {"KAAS_TILE": "16"}, "fast_math": true})),
    ] {
        let mut body = source_body(&source, entry);
        body["compile_options"] = options.clone();
        let r = call(&app, submit_req(&t, body.clone())).await;
        assert_eq!(r.status, 202, "{entry}: {}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        // The same source again is the same submission.
        let again = call(&app, submit_req(&t, body)).await;
        assert_eq!((again.status.as_u16(), &again.json()["id"]), (200, &v["id"]), "{entry}");
        assert_eq!(v["jobs"].as_array().unwrap().len(), 2, "{v}");
        assert!(v["jobs"].as_array().unwrap().iter().all(|j| j["state"] == "queued"), "{v}");
        // The source, the options, NVRTC's version and the header set are shown with it.
        assert_eq!(v["source"], source.as_str());
        assert_eq!(v["has_source"], true);
        let build = &v["build"];
        assert_eq!(build["arch"], "compute_90", "{build}");
        assert_eq!(build["options"], options, "{build}");
        assert!(!build["nvrtc_version"].as_str().unwrap().is_empty(), "{build}");
        assert!(!build["header_set"].as_str().unwrap().is_empty(), "{build}");
        let kernel = build["kernels"][entry].as_str().unwrap().to_string();
        if entry.contains('<') {
            assert!(kernel.starts_with("_Z10cute_naiveILi16ELi16E"), "lowered to the mangled instantiation: {kernel}");
        } else {
            assert_eq!(kernel, entry);
        }
        // The stored manifests name the compiled kernel, so workers see an ordinary one.
        let path = v["jobs"][0]["path"].as_str().unwrap();
        let id = v["id"].as_i64().unwrap();
        let stored = manifest_bodies(&db, id).await;
        assert_eq!(stored.len(), 2);
        assert!(stored.iter().all(|b| b.contains(&format!("\"entry\":\"{kernel}\""))), "{path}: {stored:?}");

        // The stored source and options rebuild the same PTX, byte for byte.
        let got = call(&app, TestRequest::get().uri(&format!("/v1/submissions/{id}"))).await.json();
        let opts: CompileOptions = serde_json::from_value(got["build"]["options"].clone()).unwrap();
        let src = got["source"].as_str().unwrap().to_string();
        let rebuilt = tokio::task::spawn_blocking(move || compile::compile_in_sandbox(&src, Arch::Sm90, &opts, &[entry.to_string()], &limits()))
            .await
            .unwrap()
            .expect("rebuilds");
        assert_eq!(kaas::signing::sha256_hex(rebuilt.ptx.as_bytes()), got["artifact"]["sha256"].as_str().unwrap(), "{entry}: same PTX sha256");
        // The same PTX sent as PTX is a submission of its own, with no build to show.
        if !entry.contains('<') {
            let as_ptx = serde_json::json!({"ptx": rebuilt.ptx, "template": template(entry), "problems": ["256x256x256", "512x256x128"]});
            let r = call(&app, submit_req(&t, as_ptx)).await;
            assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
            assert_ne!(r.json()["id"], got["id"]);
            assert!(r.json().get("build").is_none() && r.json().get("source").is_none(), "{}", r.json());
        }
    }
    db.cleanup().await;
}

/// The stored manifests of a submission's jobs, without spaces.
async fn manifest_bodies(db: &TestDb, submission: i64) -> Vec<String> {
    use sea_orm::{ConnectionTrait, Statement};
    let sql = format!("SELECT m.body FROM manifests m JOIN jobs j ON j.manifest_id = m.id WHERE j.submission_id = {submission}");
    let rows = db.db.query_all_raw(Statement::from_string(db.db.get_database_backend(), sql)).await.unwrap();
    rows.iter().map(|r| r.try_get::<String>("", "body").unwrap().replace(' ', "")).collect()
}

both_backends!(plain_and_cute_sources_compile_and_queue_and_rebuild);

/// The refusal's `reason`, after checking it is a 422 `compile_failed`.
fn reason(r: &Reply) -> (String, serde_json::Value) {
    let j = r.assert_problem(422, "compile_failed");
    (j["reason"].as_str().unwrap_or("").to_string(), j)
}

#[actix_web::test]
async fn bad_sources_are_refused_by_name_and_the_service_carries_on() {
    if let Some(why) = missing_tools(false) {
        crate::skipped!("source submissions: {why}");
        return;
    }
    let db = TestDb::new(Backend::Sqlite).await;
    // Small limits so the bombs are stopped in a second or two.
    let small = CompileLimits { max_source_bytes: 64 << 10, wall: Duration::from_secs(2), ..limits() };
    let app = test::init_service(create_app(state(&db, settings(small.clone())))).await;
    let t = auth::create_token(&db.db, "alice", Role::Submitter).await.unwrap().secret;
    let writes = || async { (db.count("submissions").await, db.count("jobs").await, db.count("artifacts").await) };
    let before = writes().await;

    // A compile error: NVRTC's log, with the line.
    let r = call(&app, submit_req(&t, source_body("extern \"C\" __global__ void k(int* x) {\n  x[0] = not_declared;\n}\n", "k"))).await;
    let (why, j) = reason(&r);
    assert_eq!(why, "compile_error", "{j}");
    let log = j["log"].as_str().unwrap();
    assert!(log.contains("kernel.cu(2): error") && log.contains("not_declared"), "{log}");
    // A name expression that matches no kernel.
    let r = call(&app, submit_req(&t, source_body(&plain_source(), "kaas_fast"))).await;
    let (why, j) = reason(&r);
    assert_eq!(why, "no_such_kernel", "{j}");
    assert!(j["detail"].as_str().unwrap().contains("`kaas_fast`"), "{j}");
    // A name that is a device function, not a kernel.
    let dev = "__device__ void helper(int* x) { x[0] = 1; }\nextern \"C\" __global__ void k(int* x) { helper(x); }\n";
    let (why, j) = reason(&call(&app, submit_req(&t, source_body(dev, "helper"))).await);
    assert_eq!(why, "no_such_kernel", "{j}");
    // Includes outside the provided headers, however spelt.
    for src in ["#include </etc/passwd>\n", "#include \"../../secret.h\"\n", "#include <stdio.h>\n", "#define F </etc/hostname>\n#include F\n"] {
        let (why, j) = reason(&call(&app, submit_req(&t, source_body(&format!("{src}extern \"C\" __global__ void k() {{}}\n"), "k"))).await);
        assert_eq!(why, "include_refused", "{src}: {j}");
        assert!(j["detail"].as_str().unwrap().contains("not a header this service provides") || j["detail"].as_str().unwrap().contains("literal"), "{j}");
    }
    // Over the size limit.
    let big = format!("{}extern \"C\" __global__ void k() {{}}\n", "// padding\n".repeat(7000));
    let (why, _) = reason(&call(&app, submit_req(&t, source_body(&big, "k"))).await);
    assert_eq!(why, "source_too_large");
    // Not UTF-8: the body is not even JSON text.
    let mut raw = serde_json::to_vec(&source_body("extern \"C\" __global__ void k() {}  ", "k")).unwrap();
    let at = raw.windows(2).position(|w| w == b"  ").unwrap();
    raw[at] = 0xff;
    let req = TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {t}"))).insert_header(("Content-Type", "application/json")).set_payload(raw);
    let j = call(&app, req).await.assert_problem(400, "invalid_body");
    assert!(j["detail"].as_str().unwrap().contains("UTF-8"), "{j}");
    // Options outside the allowed list.
    let mut opts = source_body(&plain_source(), "kaas_naive");
    opts["compile_options"] = serde_json::json!({"arch": "sm_80"});
    call(&app, submit_req(&t, opts)).await.assert_problem(400, "invalid_body");
    let mut opts = source_body(&plain_source(), "kaas_naive");
    opts["compile_options"] = serde_json::json!({"defines": {"X": "1 -I/etc"}});
    let (why, _) = reason(&call(&app, submit_req(&t, opts)).await);
    assert_eq!(why, "bad_option");
    // `asm` that ptxas rejects: NVRTC passes it through; the static checks refuse it.
    if kaas::ptx::ptxas::locate().is_ok() {
        let asm = "extern \"C\" __global__ void k(float* x) { asm volatile(\"frobnicate.u32 %0, 1;\" :: \"r\"(1)); x[0] = 1; }\n";
        let mut body = source_body(asm, "k");
        body["template"]["launches"][0]["params"] = serde_json::json!([{"ptr": "C"}]);
        let r = call(&app, submit_req(&t, body)).await;
        let j = r.json();
        assert_eq!(r.status, 422, "{j}");
        assert!(j["detail"].as_str().unwrap().contains("frobnicate"), "{j}");
    } else {
        crate::skipped!("the asm case needs ptxas (KAAS_PTXAS)");
    }
    // Compile bombs are killed at their limits, and named.
    for (bomb, name) in [(TEMPLATE_BOMB, "template recursion"), (UNROLL_BOMB, "huge unroll")] {
        let started = std::time::Instant::now();
        let (why, j) = reason(&call(&app, submit_req(&t, source_body(bomb, "k"))).await);
        assert!(["time_limit", "memory_limit", "cpu_limit"].contains(&why.as_str()), "{name}: {j}");
        assert_eq!(j["limit"], why.as_str(), "{j}");
        assert!(started.elapsed() < Duration::from_secs(20), "{name}: stopped at its limit");
    }
    assert_eq!(writes().await, before, "a refused source writes nothing");

    // The service is unaffected: it answers, and a good source still compiles and queues.
    assert_eq!(call(&app, TestRequest::get().uri("/v1/submissions")).await.status, 200);
    let r = call(&app, submit_req(&t, source_body(&plain_source(), "kaas_naive"))).await;
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    db.cleanup().await;
}

#[test]
fn each_limit_is_named() {
    if let Some(why) = missing_tools(false) {
        crate::skipped!("compile limits: {why}");
        return;
    }
    let k = ["k".to_string()];
    let o = CompileOptions::default();
    let time = CompileLimits { wall: Duration::from_millis(800), ..limits() };
    let e = compile::compile_in_sandbox(TEMPLATE_BOMB, Arch::Sm90, &o, &k, &time).unwrap_err();
    assert_eq!(e.reason(), "time_limit", "{e}");
    assert!(e.to_string().contains("wall-clock limit of 0.8 s"), "{e}");
    let memory = CompileLimits { memory_bytes: 256 << 20, ..limits() };
    let e = compile::compile_in_sandbox(TEMPLATE_BOMB, Arch::Sm90, &o, &k, &memory).unwrap_err();
    assert_eq!(e.reason(), "memory_limit", "{e}");
    assert!(e.to_string().contains("256 MiB"), "{e}");
    let cpu = CompileLimits { cpu_secs: 1, memory_bytes: 8 << 30, ..limits() };
    let e = compile::compile_in_sandbox(TEMPLATE_BOMB, Arch::Sm90, &o, &k, &cpu).unwrap_err();
    assert!(["cpu_limit", "memory_limit"].contains(&e.reason()), "{e}");
}

#[test]
fn kaas_compile_shows_the_ptx_and_registers_without_a_server() {
    if let Some(why) = missing_tools(false) {
        crate::skipped!("kaas compile: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("kernel.cu");
    std::fs::write(&src, plain_source()).unwrap();
    let manifest = dir.path().join("m.json");
    std::fs::write(&manifest, template("kaas_naive").to_string()).unwrap();
    let out = dir.path().join("kernel.ptx");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["compile", "--template"])
        .arg(&manifest)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let ptx = std::fs::read_to_string(&out).unwrap();
    assert!(ptx.contains(".entry kaas_naive("), "{ptx}");
    // The same PTX as the service builds from the same source.
    let service = compile::compile_in_sandbox(&plain_source(), Arch::Sm90, &CompileOptions::default(), &["kaas_naive".into()], &limits()).unwrap();
    assert_eq!(ptx, service.ptx);
    assert!(stderr.contains(&kaas::signing::sha256_hex(ptx.as_bytes())), "{stderr}");
    if kaas::ptx::ptxas::locate().is_ok() {
        assert!(stderr.contains("kaas_naive: ") && stderr.contains(" registers"), "{stderr}");
    }
    // A refused include fails the command with the reason.
    std::fs::write(&src, "#include </etc/passwd>\n").unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_kaas")).args(["compile", "--arch", "sm_90", "--entry", "k"]).arg(&src).output().unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("include_refused"), "{}", String::from_utf8_lossy(&run.stderr));
}

#[test]
fn kaas_submit_sends_a_cu_file_as_source() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("kernel.cu");
    std::fs::write(&src, "extern \"C\" __global__ void k() {}\n").unwrap();
    let manifest = dir.path().join("m.json");
    std::fs::write(&manifest, template("k").to_string()).unwrap();
    let args = kaas::client::SubmitArgs {
        ptx: src,
        manifest: vec![manifest],
        problem: vec!["256x256x256".into()],
        source: None,
        name: None,
        description: None,
        devices: vec![],
        no_wait: true,
        json: false,
        compile: kaas::compile::CompileFlags { defines: vec!["TILE=128".into()], fast_math: true, std: None },
    };
    let req = kaas::client::submission_request(&args).unwrap();
    assert!(req.ptx.is_none());
    assert_eq!(req.cuda_source.as_deref(), Some("extern \"C\" __global__ void k() {}\n"));
    let opts = req.compile_options.unwrap();
    assert_eq!(opts.defines.get("TILE").map(String::as_str), Some("128"));
    assert!(opts.fast_math);
}

/// The example kernels in `examples/source/` compile as the service compiles them, with
/// the entries their manifest templates name: WMMA (`<mma.h>`, whose `crt/` headers come
/// from the nvcc wheel), CuTe (CUTLASS's headers) and a plain kernel.
#[test]
fn the_example_sources_compile() {
    if let Some(why) = missing_tools(true) {
        crate::skipped!("example sources: {why}");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/source");
    let mut compiled = Vec::new();
    for file in std::fs::read_dir(&dir).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_none_or(|e| e != "cu") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let template: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path.with_extension("json")).unwrap()).unwrap();
        assert_eq!(template["arch"], "sm_90", "{}", path.display());
        let entries: Vec<String> = template["launches"].as_array().unwrap().iter().map(|l| l["entry"].as_str().unwrap().to_string()).collect();
        let out = compile::compile_in_sandbox(&source, Arch::Sm90, &CompileOptions::default(), &entries, &limits())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for entry in &entries {
            let kernel = &out.build.kernels[entry];
            assert!(out.ptx.contains(&format!(".entry {kernel}(")), "{}: {entry} lowered to {kernel}, which the PTX lacks", path.display());
        }
        compiled.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    compiled.sort();
    assert_eq!(compiled, ["cute_mma_tn.cu", "simt_nn.cu", "wmma_tn.cu"]);
}

/// The README's source path with PTX in hand: `kaas compile` of a template's kernel
/// writes, beside the PTX, the template with the entry as the PTX names it (mangled), and
/// `kaas submit` of that PTX with it is accepted. The template itself names the kernel by
/// its C++ expression, which no PTX holds, and the refusal says where the mangled one is.
#[actix_web::test]
async fn kaas_compile_writes_the_manifest_its_ptx_is_submitted_with() {
    if let Some(why) = missing_tools(false) {
        crate::skipped!("kaas compile: {why}");
        return;
    }
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/source");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wmma_tn.ptx");
    let (source, template) = (examples.join("wmma_tn.cu"), examples.join("wmma_tn.json"));
    let args = [std::ffi::OsStr::new("compile"), source.as_os_str(), "--template".as_ref(), template.as_os_str(), "-o".as_ref(), out.as_os_str()];
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_kaas")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let lowered = dir.path().join("wmma_tn.manifest.json");
    assert!(stderr.contains(&format!("wrote {}", lowered.display())), "{stderr}");
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&lowered).unwrap()).unwrap();
    let entry = written["launches"][0]["entry"].as_str().unwrap().to_string();
    assert!(entry.starts_with("_Z7wmma_tn"), "{entry}");
    assert!(std::fs::read_to_string(&out).unwrap().contains(&format!(".entry {entry}(")));

    let db = TestDb::new(Backend::Sqlite).await;
    let app = test::init_service(create_app(state(&db, ApiSettings::default()))).await;
    let token = auth::create_token(&db.db, "author", Role::Submitter).await.unwrap().secret;
    let submit = |manifest: PathBuf| {
        let args = kaas::client::SubmitArgs { ptx: out.clone(), manifest: vec![manifest], problem: vec!["1024x1024x1024".into()], ..Default::default() };
        kaas::client::submission_request(&args).unwrap()
    };
    let post = |body| TestRequest::post().uri("/v1/submissions").insert_header(("Authorization", format!("Bearer {token}"))).set_json(body);
    let accepted = call(&app, post(submit(lowered.clone()))).await;
    assert_eq!(accepted.status, 202, "{}", String::from_utf8_lossy(&accepted.body));
    let refused = call(&app, post(submit(examples.join("wmma_tn.json")))).await;
    let j = refused.json();
    assert_eq!(refused.status, 422, "{j}");
    assert!(j["detail"].as_str().unwrap().contains("it reads as a C++ name expression") && j["detail"].as_str().unwrap().contains("k.manifest.json"), "{j}");
}
