//! The words of the domain: a GEMM *problem* `(arch, acc, layout, m, n, k)`.
//!
//! A is row-major M×K and C row-major M×N. `nn`: B is row-major K×N; `tn`: B is
//! stored N×K row-major (column-major K×N). C = A·B with alpha 1, beta 0.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Largest extent of any of M, N, K that the service accepts.
pub const MAX_DIM: u32 = 65_536;

/// Why a problem (or one of its words) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemError {
    #[error("unknown arch `{0}`: expected one of sm_80, sm_86, sm_89, sm_90, sm_90a")]
    Arch(String),
    #[error("unknown accumulator `{0}`: expected `f16` or `f32`")]
    Acc(String),
    #[error("unknown layout `{0}`: expected `nn` or `tn`")]
    Layout(String),
    #[error("shape `{0}` is not of the form MxNxK (e.g. 4096x4096x4096)")]
    ShapeForm(String),
    #[error("{dim} = `{value}` is not a whole number from 1 to {MAX_DIM}")]
    Extent { dim: char, value: String },
    #[error("`{0}` is not {{arch}}/{{acc}}/{{layout}}/MxNxK")]
    Path(String),
}

/// A device class: the GPU model, and its form factor where one model comes in several,
/// that timings belong to (`H100-SXM`, `H100-PCIe`, `H200`), named as the workers name
/// their GPUs.
// Canonical by construction: workers name their GPUs through `gpu::device_class`, and a
// user's spelling becomes a known class through `gpu::resolve_device_class`. Stored and
// serialized as its text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize, ToSchema, sea_orm::DeriveValueType)]
#[serde(transparent)]
#[schema(value_type = String, example = "H200")]
pub struct DeviceClass(String);

impl DeviceClass {
    /// A class by its canonical name; callers name classes the workers reported, a
    /// bundle holds or the operator configured.
    pub fn new(name: impl Into<String>) -> Self {
        DeviceClass(name.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Classes as a reader sees a list of them: `H100-SXM, H200`.
    pub fn list(classes: &[DeviceClass]) -> String {
        classes.iter().map(DeviceClass::as_str).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for DeviceClass {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for DeviceClass {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for DeviceClass {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for DeviceClass {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<DeviceClass> for String {
    fn eq(&self, other: &DeviceClass) -> bool {
        self == &other.0
    }
}

impl From<&str> for DeviceClass {
    fn from(s: &str) -> Self {
        DeviceClass(s.to_string())
    }
}

impl From<&DeviceClass> for sea_orm::Value {
    fn from(c: &DeviceClass) -> Self {
        c.0.as_str().into()
    }
}

impl From<DeviceClass> for serde_json::Value {
    fn from(c: DeviceClass) -> Self {
        c.0.into()
    }
}

impl From<DeviceClass> for String {
    fn from(c: DeviceClass) -> Self {
        c.0
    }
}

impl From<String> for DeviceClass {
    fn from(s: String) -> Self {
        DeviceClass(s)
    }
}

/// The PTX target family a kernel is verified for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub enum Arch {
    #[serde(rename = "sm_80")]
    Sm80,
    #[serde(rename = "sm_86")]
    Sm86,
    #[serde(rename = "sm_89")]
    Sm89,
    #[serde(rename = "sm_90")]
    Sm90,
    #[serde(rename = "sm_90a")]
    Sm90a,
}

impl Arch {
    pub const ALL: [Arch; 5] = [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90, Arch::Sm90a];

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Sm80 => "sm_80",
            Arch::Sm86 => "sm_86",
            Arch::Sm89 => "sm_89",
            Arch::Sm90 => "sm_90",
            Arch::Sm90a => "sm_90a",
        }
    }

    /// Compute capability (major, minor) this target needs.
    pub fn compute_capability(self) -> (u32, u32) {
        match self {
            Arch::Sm80 => (8, 0),
            Arch::Sm86 => (8, 6),
            Arch::Sm89 => (8, 9),
            Arch::Sm90 | Arch::Sm90a => (9, 0),
        }
    }

    /// Whether PTX built for this target runs on a device of compute capability `cc`.
    /// Arch-specific targets (`sm_90a`) run only on their exact capability.
    pub fn runs_on(self, cc: (u32, u32)) -> bool {
        match self {
            Arch::Sm90a => cc == (9, 0),
            _ => cc >= self.compute_capability(),
        }
    }
}

/// The accumulator: `f16` accumulates in fp16; `f32` accumulates in fp32 and writes fp16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Acc {
    F16,
    F32,
}

impl Acc {
    pub const ALL: [Acc; 2] = [Acc::F16, Acc::F32];
    pub fn as_str(self) -> &'static str {
        match self {
            Acc::F16 => "f16",
            Acc::F32 => "f32",
        }
    }
}

/// Storage of B (A and C are always row-major).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    Nn,
    Tn,
}

impl Layout {
    pub const ALL: [Layout; 2] = [Layout::Nn, Layout::Tn];
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Nn => "nn",
            Layout::Tn => "tn",
        }
    }
}

macro_rules! word_impls {
    ($t:ty, $err:ident) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $t {
            type Err = ProblemError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|w| w.as_str() == s)
                    .ok_or_else(|| ProblemError::$err(s.to_string()))
            }
        }
    };
}
word_impls!(Arch, Arch);
word_impls!(Acc, Acc);
word_impls!(Layout, Layout);

/// M, N and K of a GEMM, each in `1..=MAX_DIM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub struct Shape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

impl Shape {
    pub fn new(m: u32, n: u32, k: u32) -> Result<Self, ProblemError> {
        for (dim, v) in [('M', m), ('N', n), ('K', k)] {
            if v == 0 || v > MAX_DIM {
                return Err(ProblemError::Extent { dim, value: v.to_string() });
            }
        }
        Ok(Shape { m, n, k })
    }

    /// Floating-point operations of one product (2·M·N·K).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.m, self.n, self.k)
    }
}

impl FromStr for Shape {
    type Err = ProblemError;
    /// Parses `MxNxK`, e.g. `4096x4096x4096`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('x').collect();
        let [m, n, k] = parts[..] else {
            return Err(ProblemError::ShapeForm(s.to_string()));
        };
        let extent = |dim: char, v: &str| -> Result<u32, ProblemError> {
            let bad = || ProblemError::Extent { dim, value: v.to_string() };
            // Digits only: no sign, no whitespace, no leading `+`.
            if v.is_empty() || v.len() > 6 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let x: u32 = v.parse().map_err(|_| bad())?;
            if x == 0 || x > MAX_DIM { Err(bad()) } else { Ok(x) }
        };
        Ok(Shape { m: extent('M', m)?, n: extent('N', n)?, k: extent('K', k)? })
    }
}

/// One GEMM problem: what a kernel computes and for which PTX target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    pub arch: Arch,
    pub acc: Acc,
    pub layout: Layout,
    #[schema(minimum = 1, maximum = 65536)]
    pub m: u32,
    #[schema(minimum = 1, maximum = 65536)]
    pub n: u32,
    #[schema(minimum = 1, maximum = 65536)]
    pub k: u32,
}

impl Problem {
    pub fn new(arch: Arch, acc: Acc, layout: Layout, shape: Shape) -> Self {
        Problem { arch, acc, layout, m: shape.m, n: shape.n, k: shape.k }
    }

    pub fn shape(&self) -> Shape {
        Shape { m: self.m, n: self.n, k: self.k }
    }

    /// Checks the extents of a problem that arrived already split (e.g. from JSON).
    pub fn validate(&self) -> Result<(), ProblemError> {
        Shape::new(self.m, self.n, self.k).map(|_| ())
    }

    /// The URL path segment `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
    pub fn path(&self) -> String {
        format!("{}/{}/{}/{}", self.arch, self.acc, self.layout, self.shape())
    }

    /// A problem from its four path segments, `{arch}`, `{acc}`, `{layout}`, `{m}x{n}x{k}`.
    pub fn from_segments(arch: &str, acc: &str, layout: &str, shape: &str) -> Result<Problem, ProblemError> {
        Ok(Problem::new(arch.parse()?, acc.parse()?, layout.parse()?, shape.parse()?))
    }

    /// The inverse of [`Problem::path`]: `{arch}/{acc}/{layout}/{m}x{n}x{k}`.
    pub fn from_path(path: &str) -> Result<Problem, ProblemError> {
        match path.split('/').collect::<Vec<_>>()[..] {
            [arch, acc, layout, shape] => Problem::from_segments(arch, acc, layout, shape),
            _ => Err(ProblemError::Path(path.to_string())),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_reads_back_as_its_problem_and_a_bad_one_names_its_fault() {
        let p = Problem::new(Arch::Sm90, Acc::F16, Layout::Nn, Shape::new(16, 4096, 14336).expect("shape"));
        assert_eq!(Problem::from_path(&p.path()).expect("its own path"), p);
        assert!(matches!(Problem::from_path("sm_90/f32/tn"), Err(ProblemError::Path(_))));
        assert!(matches!(Problem::from_path("sm_90/f64/tn/1x1x1"), Err(ProblemError::Acc(_))));
        assert!(matches!(Problem::from_segments("sm_90", "f32", "tn", "0x1x1"), Err(ProblemError::Extent { dim: 'M', .. })));
    }

    #[test]
    fn shapes_parse_and_print() {
        let s: Shape = "4096x128x64".parse().unwrap();
        assert_eq!(s, Shape { m: 4096, n: 128, k: 64 });
        assert_eq!(s.to_string(), "4096x128x64");
        assert_eq!("65536x1x1".parse::<Shape>().unwrap().m, 65536);
    }

    #[test]
    fn malformed_shapes_are_refused_with_the_bad_part_named() {
        for bad in ["0x1x1", "1x1", "99999999x1x1", "axbxc", "1x1x1x1", "", "1x-1x1", "1x+1x1", "1x 1x1", "65537x1x1", "x1x1"] {
            assert!(bad.parse::<Shape>().is_err(), "{bad} was accepted");
        }
        assert_eq!(
            "64x0x64".parse::<Shape>().unwrap_err(),
            ProblemError::Extent { dim: 'N', value: "0".into() }
        );
        assert_eq!("1x1".parse::<Shape>().unwrap_err(), ProblemError::ShapeForm("1x1".into()));
    }

    #[test]
    fn words_round_trip_and_unknown_words_fail() {
        for a in Arch::ALL {
            assert_eq!(a.as_str().parse::<Arch>().unwrap(), a);
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{a}\""));
        }
        assert!("sm_70".parse::<Arch>().is_err());
        assert!("F32".parse::<Acc>().is_err());
        assert!("nt".parse::<Layout>().is_err());
    }

    #[test]
    fn arch_specific_targets_run_only_on_their_capability() {
        assert!(Arch::Sm80.runs_on((9, 0)));
        assert!(Arch::Sm90.runs_on((9, 0)));
        assert!(Arch::Sm90a.runs_on((9, 0)));
        assert!(!Arch::Sm90a.runs_on((10, 0)));
        assert!(!Arch::Sm90.runs_on((8, 9)));
    }
}
