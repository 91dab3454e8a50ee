//! One module per resource; `configure` mounts them all.

pub mod artifacts;
pub mod catalog;
pub mod overview;
pub mod signing;
pub mod submissions;
pub mod system;
pub mod tuning;
pub mod ui;
pub mod workloads;

use actix_web::web;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(system::health)
        .service(system::ready)
        .service(system::live)
        .service(system::metrics)
        .service(system::whoami)
        .service(signing::signing_keys)
        .service(catalog::list_problems)
        .service(catalog::get_kernel_ptx)
        .service(catalog::get_kernel)
        .service(catalog::problem_leaderboard)
        .service(catalog::global_leaderboard)
        .service(overview::get_heatmap)
        .service(overview::get_stats)
        .service(workloads::list)
        .service(workloads::get)
        .service(artifacts::get_artifact)
        .service(artifacts::upload_artifact)
        .service(submissions::create)
        .service(submissions::list)
        .service(submissions::events)
        .service(submissions::cancel)
        .service(submissions::get)
        .service(submissions::remove)
        .service(tuning::create)
        .service(tuning::events)
        .service(tuning::get)
        .service(tuning::get_tune)
        .service(ui::index)
        .service(ui::static_asset)
        .configure(crate::api::openapi::configure);
}
