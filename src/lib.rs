//! kaas: HGEMM kernels as a service. The library behind the `kaas` binary: the
//! domain words, storage, the HTTP API, the GPU harness and the CLI commands.

pub mod manifest;
pub mod problem;
pub mod gpu;
pub mod kernels;
