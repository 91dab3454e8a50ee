//! The template families behind one interface: the simple kernel ([`SimpleConfig`]), the
//! Ampere-style mma family ([`MmaConfig`]), the Hopper family ([`HopperConfig`]) and the
//! decode family ([`GemvConfig`]). A
//! configuration names one PTX entry and, for a problem, the manifest that launches it;
//! the search and the catalog checks go through this trait, not through each family.

use crate::gpu::GpuError;
use crate::kernels::SimpleConfig;
use crate::manifest::{Launch, Manifest};
use crate::problem::{Acc, Arch, Layout, Problem};

use super::gemv::{self, GemvConfig};
use super::hopper::{self, HopperConfig};
use super::mma::{self, MmaConfig};

/// One configuration of a template family.
pub trait TemplateFamily {
    /// The family's name, for submissions and logs.
    fn family_name(&self) -> &'static str;
    /// The CUDA C++ template the family compiles.
    fn template(&self) -> &'static str;
    /// The PTX entry for an accumulator and layout.
    fn entry(&self, acc: Acc, layout: Layout) -> String;
    /// Whether the family builds this configuration for a layout.
    fn supports(&self, layout: Layout) -> bool;
    /// Compiles the configuration with NVRTC.
    fn compile(&self, arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError>;
    /// The manifest that runs it on a problem (`sm_count`: the device's, for persistent grids).
    fn manifest(&self, p: &Problem, sm_count: u32) -> Manifest;
    fn workspace_bytes(&self, p: &Problem) -> u64;
    /// Dynamic shared memory per block.
    fn shared_mem_bytes(&self, layout: Layout) -> u32;
    /// Split-K slices (1: unsplit); split codes need fp32 accumulators.
    fn split(&self) -> u32;
    fn label(&self) -> String;
    /// The configuration, accumulator and layout of one of the family's launches on a
    /// problem; none for another family's.
    fn of_launch(launch: &Launch, p: &Problem) -> Option<(Self, Acc, Layout)>
    where
        Self: Sized;
}

impl TemplateFamily for HopperConfig {
    fn family_name(&self) -> &'static str {
        "Hopper wgmma + TMA template"
    }
    fn template(&self) -> &'static str {
        hopper::TEMPLATE.as_str()
    }
    fn entry(&self, acc: Acc, layout: Layout) -> String {
        HopperConfig::entry(self, acc, layout)
    }
    fn supports(&self, layout: Layout) -> bool {
        HopperConfig::supports(self, layout)
    }
    fn compile(&self, _arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError> {
        hopper::compile(self, acc, layout)
    }
    fn manifest(&self, p: &Problem, sm_count: u32) -> Manifest {
        HopperConfig::manifest(self, p, sm_count)
    }
    fn workspace_bytes(&self, p: &Problem) -> u64 {
        HopperConfig::workspace_bytes(self, p)
    }
    fn shared_mem_bytes(&self, _layout: Layout) -> u32 {
        HopperConfig::shared_mem_bytes(self)
    }
    fn split(&self) -> u32 {
        self.split
    }
    fn label(&self) -> String {
        HopperConfig::label(self)
    }
    fn of_launch(launch: &Launch, p: &Problem) -> Option<(Self, Acc, Layout)> {
        HopperConfig::of_launch(launch, p)
    }
}

impl TemplateFamily for MmaConfig {
    fn family_name(&self) -> &'static str {
        "Ampere-style mma.sync + cp.async template"
    }
    fn template(&self) -> &'static str {
        mma::TEMPLATE
    }
    fn entry(&self, acc: Acc, layout: Layout) -> String {
        MmaConfig::entry(self, acc, layout)
    }
    fn supports(&self, _layout: Layout) -> bool {
        true
    }
    fn compile(&self, arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError> {
        mma::compile(self, arch, acc, layout)
    }
    fn manifest(&self, p: &Problem, _sm_count: u32) -> Manifest {
        MmaConfig::manifest(self, p)
    }
    fn workspace_bytes(&self, p: &Problem) -> u64 {
        MmaConfig::workspace_bytes(self, p)
    }
    fn shared_mem_bytes(&self, _layout: Layout) -> u32 {
        MmaConfig::shared_mem_bytes(self)
    }
    fn split(&self) -> u32 {
        self.split
    }
    fn label(&self) -> String {
        MmaConfig::label(self)
    }
    fn of_launch(launch: &Launch, _p: &Problem) -> Option<(Self, Acc, Layout)> {
        MmaConfig::of_launch(launch)
    }
}

impl TemplateFamily for SimpleConfig {
    fn family_name(&self) -> &'static str {
        "simple mma.sync template"
    }
    fn template(&self) -> &'static str {
        crate::kernels::SIMPLE_HGEMM_TEMPLATE
    }
    fn entry(&self, acc: Acc, layout: Layout) -> String {
        SimpleConfig::entry(self, acc, layout)
    }
    fn supports(&self, layout: Layout) -> bool {
        self.validate(layout).is_ok()
    }
    /// The simple kernel is one sm_80 PTX for every arch.
    fn compile(&self, arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError> {
        let shape = crate::problem::Shape::new(1, 1, 1).expect("a 1×1×1 shape");
        crate::kernels::compile_simple(&Problem::new(arch, acc, layout, shape), self)
    }
    fn manifest(&self, p: &Problem, _sm_count: u32) -> Manifest {
        crate::kernels::manifest_for(p, self)
    }
    fn workspace_bytes(&self, _p: &Problem) -> u64 {
        0
    }
    fn shared_mem_bytes(&self, layout: Layout) -> u32 {
        SimpleConfig::shared_mem_bytes(self, layout)
    }
    fn split(&self) -> u32 {
        1
    }
    fn label(&self) -> String {
        format!("simple {}x{}x{} w{}x{}", self.bm, self.bn, self.bk, self.warps_m, self.warps_n)
    }
    fn of_launch(launch: &Launch, _p: &Problem) -> Option<(Self, Acc, Layout)> {
        SimpleConfig::from_entry(&launch.entry)
    }
}

impl TemplateFamily for GemvConfig {
    fn family_name(&self) -> &'static str {
        if self.tc { "decode (gemv) tensor-core template" } else { "decode (gemv) fp32-FMA template" }
    }
    fn template(&self) -> &'static str {
        GemvConfig::template(self).0
    }
    fn entry(&self, acc: Acc, layout: Layout) -> String {
        GemvConfig::entry(self, acc, layout)
    }
    fn supports(&self, layout: Layout) -> bool {
        layout == Layout::Tn
    }
    fn compile(&self, arch: Arch, acc: Acc, layout: Layout) -> Result<String, GpuError> {
        gemv::compile(self, arch, acc, layout)
    }
    fn manifest(&self, p: &Problem, _sm_count: u32) -> Manifest {
        GemvConfig::manifest(self, p)
    }
    fn workspace_bytes(&self, _p: &Problem) -> u64 {
        0
    }
    fn shared_mem_bytes(&self, _layout: Layout) -> u32 {
        0
    }
    /// Unsplit; fp32 accumulators only all the same ([`gemv::eligible`], [`gemv::compile`]).
    fn split(&self) -> u32 {
        1
    }
    fn label(&self) -> String {
        GemvConfig::label(self)
    }
    fn of_launch(launch: &Launch, _p: &Problem) -> Option<(Self, Acc, Layout)> {
        GemvConfig::from_entry(&launch.entry)
    }
}
