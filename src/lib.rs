//! kaas: HGEMM kernels as a service. The library behind the `kaas` binary: the
//! domain words, storage, the HTTP API, the GPU harness and the CLI commands.

pub mod api;
pub mod auth;
pub mod bench;
pub mod catalog;
pub mod cli;
pub mod client;
pub mod compile;
pub mod config;
pub mod db;
pub mod gpu;
pub mod harness;
pub mod kernels;
pub mod manifest;
pub mod problem;
pub mod ptx;
pub mod sandbox;
pub mod signing;
pub mod tuner;
pub mod verify;
pub mod work;
pub mod workloads;
