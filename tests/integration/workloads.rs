//! Workload presets through the real app: the list, one model's GEMMs with their catalog
//! states, and the errors.

use actix_web::test;
use kaas::api::{ApiSettings, create_app};

use crate::both_backends;
use crate::common::*;

async fn workloads_list_presets_and_answer_each_gemm_from_the_catalog(backend: Backend) {
    let (db, st, f, _dir) = loaded(backend, ApiSettings::default()).await;
    let app = test::init_service(create_app(st.clone())).await;

    let list = get(&app, "/v1/workloads").await.json();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|w| w["config"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-72b", "mistral-7b", "mixtral-8x7b"]);
    assert_eq!(list[0]["problems"], 4 * 14);

    // The fixture's fast kernel is tn 4096×4096×4096: Llama 3.1 8B's q_proj and o_proj at
    // 4096 tokens. Nothing else of the model is in the fixture.
    let w = get(&app, &format!("/v1/workloads/llama-3.1-8b?device={DEVICE}")).await.json();
    let rows = w["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 56);
    let served: Vec<&serde_json::Value> = rows.iter().filter(|r| r["state"] == "served").collect();
    assert_eq!(served.len(), 1);
    assert_eq!(served[0]["path"], f.fast.path());
    assert_eq!(served[0]["linear"], "q_proj, o_proj");
    assert_eq!(served[0]["tokens"], 4096);
    assert_eq!(served[0]["speedup"], 1.08);
    assert_eq!(served[0]["kernel_median_us"], 900.0);
    assert_eq!(served[0]["device_class"], DEVICE);
    assert!(rows.iter().filter(|r| r["state"] != "served").all(|r| r["state"] == "not_in_catalog"));
    assert_eq!(w["summary"]["served"], 1);
    assert_eq!(w["summary"]["not_in_catalog"], 55);
    assert_eq!(w["summary"]["served_geomean"], 1.08);
    // Another accumulator: nothing served.
    let f16 = get(&app, "/v1/workloads/llama-3.1-8b?acc=f16").await.json();
    assert_eq!(f16["summary"]["served"], 0);

    let r = get(&app, "/v1/workloads/gpt-5").await;
    let p = r.assert_problem(404, "not_found");
    assert!(p["detail"].as_str().unwrap().contains("llama-3.1-8b, llama-3.1-70b"), "{p}");
    get(&app, "/v1/workloads/llama-3.1-8b?acc=f64").await.assert_problem(400, "invalid_query");
    db.cleanup().await;
}

both_backends!(workloads_list_presets_and_answer_each_gemm_from_the_catalog);
