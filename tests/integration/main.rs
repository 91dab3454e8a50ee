//! All integration tests in one binary (faster links). Each test runs twice: on a fresh
//! SQLite file and on a fresh Postgres schema (`KAAS_TEST_POSTGRES_URL`, default the
//! local server's `test` database).

mod common;

mod api;
mod breaker;
mod bundle;
mod devices;
mod docs;
mod h200_catalog;
mod signing;
mod downloads;
mod first_hour;
mod fleet;
mod holes;
mod limits;
mod regimes;
mod storage;
mod source;
mod submissions;
mod tuning;
mod ui;
mod webdriver;
mod workloads;
