//! The OpenAPI document (utoipa), served at `/openapi.json` with Swagger UI at `/docs`,
//! and committed as `openapi/openapi.json` (a test fails when the two drift;
//! `kaas openapi --write` regenerates it).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::SwaggerUi;

use super::routes::{artifacts, catalog, overview, signing, submissions, system, tuning, workloads};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "kaas",
        description = "HGEMM kernels as a service: verified, benchmarked half-precision GEMM kernels per GPU and problem, served as PTX with a launch manifest (ABI kaas.hgemm.v1).",
        license(name = "Apache-2.0")
    ),
    paths(
        system::health, system::ready, system::live, system::metrics, system::whoami, signing::signing_keys,
        catalog::list_problems, catalog::get_kernel, catalog::get_kernel_ptx,
        catalog::problem_leaderboard, catalog::global_leaderboard, overview::get_heatmap, overview::get_stats,
        workloads::list, workloads::get,
        artifacts::get_artifact, artifacts::upload_artifact,
        submissions::create, submissions::list, submissions::get, submissions::events, submissions::cancel, submissions::remove,
        tuning::create, tuning::get, tuning::events, tuning::get_tune,
    ),
    modifiers(&BearerAuth, &BodyRules, &ExprSchema),
    tags(
        (name = "catalog", description = "Problems, best kernels and their PTX"),
        (name = "artifacts", description = "Content-addressed PTX"),
        (name = "submissions", description = "Submit kernels, follow their verification and benchmark, cancel or delete them"),
        (name = "tuning", description = "Ask the service to tune problems (or a workload's), follow the tunes, read their search traces"),
        (name = "leaderboard", description = "Rankings of submitters and runs"),
        (name = "system", description = "Health, metrics, identity, signing keys"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()));
    }
}

/// The rules across a request body's fields, which the derived schemas (every field
/// optional) do not state and the server enforces, so that a client generated from the
/// document cannot build a body the server refuses for its shape. `NewSubmission`
/// (`work::submit`): exactly one kernel (`ptx`, `artifact_sha256` or `cuda_source`),
/// `compile_options` only with `cuda_source` and `source` not with it, and exactly one of
/// non-empty `manifests` or a `template` with non-empty `problems`. `NewTuningRequest`
/// (`work::tune`): exactly one of non-empty `problems` or a `workload`, `tokens` only with
/// a `workload`. A null counts as absent, as serde reads it. A kernel parameter (`Param`)
/// is an object of one key, and a define's name and value are the words `-D` takes.
struct BodyRules;

impl BodyRules {
    fn given(field: &str) -> serde_json::Value {
        serde_json::json!({"required": [field], "properties": {field: {"not": {"type": "null"}}}})
    }

    fn non_empty(field: &str) -> serde_json::Value {
        serde_json::json!({"required": [field], "properties": {field: {"type": "array", "minItems": 1}}})
    }

    fn submission() -> serde_json::Value {
        use serde_json::json;
        let given = Self::given;
        let (manifests, template) = (Self::non_empty("manifests"), given("template"));
        json!([
            {"oneOf": [given("ptx"), given("artifact_sha256"), given("cuda_source")]},
            {"anyOf": [given("cuda_source"), {"not": given("compile_options")}]},
            {"not": {"allOf": [given("cuda_source"), given("source")]}},
            {"oneOf": [
                {"allOf": [manifests, {"not": template}, {"not": Self::non_empty("problems")}]},
                {"allOf": [template, {"not": manifests}, Self::non_empty("problems")]},
            ]},
        ])
    }

    fn tuning_request() -> serde_json::Value {
        use serde_json::json;
        let (problems, workload) = (Self::non_empty("problems"), Self::given("workload"));
        json!([{"oneOf": [
            {"allOf": [problems, {"not": workload}, {"not": Self::given("tokens")}]},
            {"allOf": [workload, {"not": problems}]},
        ]}])
    }
}

impl Modify for BodyRules {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{RefOr, schema::Schema};
        let Some(schemas) = openapi.components.as_mut().map(|c| &mut c.schemas) else { return };
        // A kernel parameter is one key (`{"ptr": "A"}`): serde refuses a map with two.
        if let Some(RefOr::T(Schema::OneOf(one))) = schemas.get_mut("Param") {
            for item in &mut one.items {
                if let RefOr::T(Schema::Object(o)) = item {
                    o.additional_properties = Some(Box::new(utoipa::openapi::schema::AdditionalProperties::FreeForm(false)));
                }
            }
        }
        // A define is `-D NAME=VALUE`: NAME a C identifier, VALUE a short plain word
        // (`compile::nvrtc_options`).
        let defines = serde_json::json!({
            "type": "object",
            "description": "`-D NAME=VALUE`: NAME a C identifier, VALUE letters, digits and `_ . + -` (may be empty); at most 64 each.",
            "propertyNames": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$"},
            "additionalProperties": {"type": "string", "pattern": "^[A-Za-z0-9_.+-]{0,64}$"},
        });
        if let (Some(RefOr::T(Schema::Object(o))), Ok(defines)) = (schemas.get_mut("CompileOptions"), serde_json::from_value::<Schema>(defines)) {
            o.properties.insert("defines".into(), RefOr::T(defines));
        }
        for (name, rules) in [("NewSubmission", Self::submission()), ("NewTuningRequest", Self::tuning_request())] {
            if let Some(RefOr::T(Schema::Object(o))) = schemas.get_mut(name) {
                // One key (`allOf`): the extensions map is a HashMap, so a second key would
                // print in no fixed order and the committed document would drift.
                o.extensions.get_or_insert_with(Default::default).insert("allOf".into(), rules);
            }
        }
    }
}

/// A manifest template's expression of M, N and K (`manifest::template::Expr`), which the
/// generator cannot write (it recurses): a non-negative integer, `"M"`, `"N"` or `"K"`, or an
/// object of one operator over expressions (`ceil_div` of two, `product`, `sum`, `min`,
/// `max` of one or more), as the component `Expr`; the template's `workspace_bytes` and
/// grid point to it. The depth limit (8) and the arithmetic's range are the server's.
struct ExprSchema;

impl ExprSchema {
    fn schema() -> serde_json::Value {
        use serde_json::json;
        let of = |op: &str, min: u32, max: Option<u32>| {
            let mut list = json!({"type": "array", "items": {"$ref": "#/components/schemas/Expr"}, "minItems": min});
            if let Some(max) = max {
                list["maxItems"] = max.into();
            }
            json!({"type": "object", "required": [op], "properties": {op: list}, "additionalProperties": false})
        };
        json!({
            "description": "An expression of M, N and K: a non-negative integer, `M`, `N` or `K`, or one operator over expressions (`{\"ceil_div\": [a, b]}`, `product`, `sum`, `min`, `max` of one or more), nested at most 8 deep.",
            "oneOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "enum": ["M", "N", "K"]},
                of("ceil_div", 2, Some(2)), of("product", 1, None), of("sum", 1, None), of("min", 1, None), of("max", 1, None),
            ]
        })
    }
}

impl Modify for ExprSchema {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{ArrayItems, Schema};
        use utoipa::openapi::{Ref, RefOr};
        let Some(schemas) = openapi.components.as_mut().map(|c| &mut c.schemas) else { return };
        let Ok(expr) = serde_json::from_value::<Schema>(Self::schema()) else { return };
        schemas.insert("Expr".into(), RefOr::T(expr));
        // The derived properties (`value_type = Object`) keep their descriptions and bounds;
        // only what they hold becomes the component.
        let expr_ref = |description: String| {
            let mut r = Ref::from_schema_name("Expr");
            r.description = description;
            RefOr::Ref(r)
        };
        if let Some(RefOr::T(Schema::Object(o))) = schemas.get_mut("ManifestTemplate") {
            if let Some(RefOr::T(Schema::Object(w))) = o.properties.get("workspace_bytes") {
                let description = w.description.clone().unwrap_or_default();
                o.properties.insert("workspace_bytes".into(), expr_ref(description));
            }
        }
        if let Some(RefOr::T(Schema::Object(o))) = schemas.get_mut("LaunchTemplate") {
            if let Some(RefOr::T(Schema::Array(grid))) = o.properties.get_mut("grid") {
                grid.items = ArrayItems::RefOrSchema(Box::new(expr_ref(String::new())));
            }
        }
    }
}

/// The document as committed: pretty JSON with a trailing newline.
pub fn document_text() -> String {
    ApiDoc::openapi().to_pretty_json().map(|s| s + "\n").unwrap_or_default()
}

pub fn configure(cfg: &mut actix_web::web::ServiceConfig) {
    cfg.service(SwaggerUi::new("/docs/{_:.*}").url("/openapi.json", ApiDoc::openapi()))
        // Swagger UI lives under `/docs/`; the bare path is what people type.
        .service(actix_web::web::redirect("/docs", "/docs/").permanent());
}
