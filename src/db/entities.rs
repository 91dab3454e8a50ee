//! sea-orm entities, one module per table, in the 2.0 dense format. The schema itself is
//! owned by the migrations crate; these mirror it.

pub mod artifact {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "artifacts")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub sha256: String,
        #[sea_orm(column_type = "Text")]
        pub ptx: String,
        pub size_bytes: i64,
        pub ptx_version: String,
        pub target: String,
        pub created_at: DateTimeUtc,
        /// The submitter whose upload or submission first stored it (the storage quota);
        /// null for bundles, the tuner and older rows.
        pub uploader_id: Option<i32>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod problem {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "problems")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub arch: String,
        pub acc: String,
        pub layout: String,
        pub m: i32,
        pub n: i32,
        pub k: i32,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod device_class {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "device_classes")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        pub model: String,
        pub compute_capability: String,
        pub sm_count: Option<i32>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod submitter {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "submitters")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        #[sea_orm(unique)]
        pub name: String,
        pub created_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod api_token {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "api_tokens")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub submitter_id: i32,
        pub role: String,
        #[sea_orm(unique)]
        pub token_hash: String,
        pub prefix: String,
        pub created_at: DateTimeUtc,
        pub revoked_at: Option<DateTimeUtc>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod submission {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "submissions")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub submitter_id: i32,
        pub artifact_sha256: String,
        pub name: String,
        #[sea_orm(column_type = "Text")]
        pub description: String,
        #[sea_orm(column_type = "Text")]
        pub source: Option<String>,
        pub status: String,
        pub created_at: DateTimeUtc,
        /// sha256 over the artifact and the sorted manifest bodies: equal submissions from
        /// one submitter share it, so a repeat is answered with the first.
        pub fingerprint: Option<String>,
        /// Set by a delete; the row and its runs stay (history), hidden from lists.
        pub deleted_at: Option<DateTimeUtc>,
        /// How the service compiled `source` into the artifact (`crate::compile::BuildInfo`
        /// as JSON); null for PTX submissions.
        #[sea_orm(column_type = "Text")]
        pub build: Option<String>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod manifest {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "manifests")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub artifact_sha256: String,
        pub problem_id: i32,
        pub body_sha256: String,
        #[sea_orm(column_type = "Text")]
        pub body: String,
        pub created_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod run {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "runs")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub submission_id: Option<i32>,
        pub manifest_id: i32,
        pub problem_id: i32,
        pub device_class: DeviceClass,
        pub verdict: String,
        #[sea_orm(column_type = "Text")]
        pub message: String,
        #[sea_orm(column_type = "Text")]
        pub timings: Option<String>,
        #[sea_orm(column_type = "Text")]
        pub speedups: Option<String>,
        #[sea_orm(column_type = "Text")]
        pub device: Option<String>,
        pub created_at: DateTimeUtc,
        /// JSON: the stage that decided, every check, ptxas and JIT reports, benchmark meta.
        #[sea_orm(column_type = "Text")]
        pub details: Option<String>,
        /// The cache regime of `timings` and `speedups` (`l2_cold`); null for runs timed
        /// before regimes were named.
        pub regime: Option<String>,
        /// JSON `{regime: {timings, speedups, baselines, buffer_sets, footprint_bytes, …}}`.
        #[sea_orm(column_type = "Text")]
        pub regimes: Option<String>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod baseline {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "baselines")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub problem_id: i32,
        pub device_class: DeviceClass,
        pub library: String,
        pub layout: String,
        pub mode: String,
        pub median_us: f64,
        #[sea_orm(column_type = "Text")]
        pub timing: String,
        #[sea_orm(column_type = "Text")]
        pub config: String,
        pub created_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod catalog_entry {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "catalog_entries")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub device_class: DeviceClass,
        pub problem_id: i32,
        pub run_id: i32,
        pub created_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod job {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "jobs")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        /// The submission of a `verify` job; null for a `tune` job.
        pub submission_id: Option<i32>,
        /// The manifest a `verify` job runs; null for a `tune` job (its kernel is found by it).
        pub manifest_id: Option<i32>,
        pub problem_id: i32,
        pub device_class: Option<DeviceClass>,
        pub state: String,
        pub priority: i32,
        pub attempts: i32,
        pub lease_owner: Option<String>,
        pub lease_expires_at: Option<DateTimeUtc>,
        pub run_id: Option<i32>,
        pub created_at: DateTimeUtc,
        pub updated_at: DateTimeUtc,
        /// What the job is doing now (for the live stream), e.g. `running on H100-SXM`.
        #[sea_orm(column_type = "Text")]
        pub stage: Option<String>,
        /// Why the last attempt ended without a run (lease lost, worker error).
        #[sea_orm(column_type = "Text")]
        pub error: Option<String>,
        pub finished_at: Option<DateTimeUtc>,
        /// `verify` (a submission's kernel) or `tune` (`crate::work::tune`).
        pub kind: String,
        /// The tune a `tune` job works for.
        pub tune_id: Option<i32>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod tune {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    /// One (problem, device class) asked to be tuned; unique on that pair, so every
    /// request for it, from anyone, shares this row and its one job.
    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "tunes")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub problem_id: i32,
        pub device_class: DeviceClass,
        /// `queued`, `tuning`, `verifying`, `served`, `baseline_faster` or `failed`.
        pub state: String,
        pub priority: i32,
        /// The search's time budget.
        pub budget_ms: i64,
        /// The job working for it now (or last).
        pub job_id: Option<i32>,
        /// The winner's verification and benchmark run.
        pub run_id: Option<i32>,
        /// The submitter whose request queued it (its quota counts it); null: anonymous.
        pub requested_by: Option<i32>,
        #[sea_orm(column_type = "Text")]
        pub stage: Option<String>,
        #[sea_orm(column_type = "Text")]
        pub message: Option<String>,
        /// JSON: the search's trace (`crate::work::tune::Trace`).
        #[sea_orm(column_type = "Text")]
        pub trace: Option<String>,
        /// JSON: the winner and the baseline configuration measured (`crate::work::TuneResult`).
        #[sea_orm(column_type = "Text")]
        pub result: Option<String>,
        pub created_at: DateTimeUtc,
        pub updated_at: DateTimeUtc,
        pub finished_at: Option<DateTimeUtc>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod tuning_request {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "tuning_requests")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        /// Null for a request the kernel route made for an anonymous miss.
        pub submitter_id: Option<i32>,
        pub workload: Option<String>,
        pub device_class: DeviceClass,
        pub created_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod tuning_request_item {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "tuning_request_items")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub request_id: i32,
        pub position: i32,
        /// The problem's path, `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
        pub problem: String,
        /// What it is in a workload, e.g. `k_proj, v_proj @ 16 tokens`.
        pub label: Option<String>,
        pub tune_id: Option<i32>,
        /// Why it is not tuned (no tune then).
        #[sea_orm(column_type = "Text")]
        pub refusal: Option<String>,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod worker {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "workers")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: String,
        pub device_class: Option<DeviceClass>,
        pub gpu_name: Option<String>,
        pub compute_capability: Option<String>,
        pub state: String,
        pub job_id: Option<i32>,
        #[sea_orm(column_type = "Text")]
        pub message: Option<String>,
        pub started_at: DateTimeUtc,
        pub last_seen_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod autotune_choice {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "autotune_choices")]
    pub struct Model {
        #[sea_orm(primary_key)]
        pub id: i32,
        pub device_class: DeviceClass,
        pub driver_version: String,
        pub cublas_version: String,
        pub arch: String,
        pub acc: String,
        pub layout: String,
        pub m: i32,
        pub n: i32,
        pub k: i32,
        #[sea_orm(column_type = "Text")]
        pub config: String,
        pub median_us: f64,
        pub heuristic_top1_median_us: Option<f64>,
        pub candidates_offered: i32,
        pub candidates_timed: i32,
        pub tuned_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod service_state {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "service_state")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub key: String,
        #[sea_orm(column_type = "Text")]
        pub value: String,
        pub updated_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}

pub mod signing_key {
    use sea_orm::entity::prelude::*;
    #[allow(unused_imports)]
    use crate::problem::DeviceClass;

    /// Public keys the service has signed with, and the database-kept key used when no
    /// key file is configured (`name` = `generated`, the only row with a `seed`).
    #[sea_orm::model]
    #[derive(Clone, Debug, PartialEq, DeriveEntityModel, Eq)]
    #[sea_orm(table_name = "signing_keys")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub name: String,
        pub key_id: String,
        pub alg: String,
        pub public_key: String,
        #[sea_orm(column_type = "Text")]
        pub seed: Option<String>,
        pub created_at: DateTimeUtc,
    }

    impl ActiveModelBehavior for ActiveModel {}
}
