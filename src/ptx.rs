//! Static checks on submitted PTX, before anything touches a GPU: the text is
//! bounded UTF-8, its `.version`/`.target`/`.address_size` header parses, and every
//! entry the manifest launches exists with a parameter list that matches the
//! manifest's `params`. `ptxas` (see [`ptxas`]) then assembles it for the target.
//!
//! The parser reads only the module's top level (header directives and `.entry`
//! signatures); kernel bodies are skipped by brace depth, so instructions never need
//! to be understood here — `ptxas` judges those.

pub mod delay;
pub mod ptxas;

use std::fmt;

use crate::manifest::{Manifest, Param};
use crate::problem::Arch;

/// Largest PTX text accepted. Real HGEMM kernels are tens to hundreds of KiB; the
/// limit only keeps storage, ptxas and the driver JIT away from pathological inputs.
pub const MAX_PTX_BYTES: usize = 16 << 20;

/// Newest PTX ISA the service's driver and ptxas (CUDA 12.9) understand.
pub const DEFAULT_MAX_PTX_VERSION: PtxVersion = PtxVersion { major: 8, minor: 8 };

/// Bytes and alignment of a `CUtensorMap` passed by value.
pub const TENSOR_MAP_BYTES: u64 = 128;
pub const TENSOR_MAP_ALIGN: u32 = 64;

/// Limits the static check enforces; [`StaticLimits::default`] is the service's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticLimits {
    pub max_bytes: usize,
    pub max_version: PtxVersion,
}

impl Default for StaticLimits {
    fn default() -> Self {
        StaticLimits { max_bytes: MAX_PTX_BYTES, max_version: DEFAULT_MAX_PTX_VERSION }
    }
}

/// PTX ISA version from `.version X.Y`; orders by major, then minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PtxVersion {
    pub major: u32,
    pub minor: u32,
}

impl fmt::Display for PtxVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Suffix of an `sm_XX` target: `a` is arch-specific (runs only on that exact
/// capability), `f` family-specific (PTX 8.8+). Plain targets run on any newer GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetSuffix {
    Plain,
    ArchSpecific,
    FamilySpecific,
}

/// The `sm_XX[a|f]` of a `.target` directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PtxTarget {
    /// `10 * major + minor`, e.g. 90 for `sm_90a`, 100 for `sm_100`.
    pub sm: u32,
    pub suffix: TargetSuffix,
}

impl PtxTarget {
    fn parse(word: &str) -> Option<Self> {
        let rest = word.strip_prefix("sm_")?;
        let (digits, suffix) = match rest.as_bytes().last()? {
            b'a' => (&rest[..rest.len() - 1], TargetSuffix::ArchSpecific),
            b'f' => (&rest[..rest.len() - 1], TargetSuffix::FamilySpecific),
            _ => (rest, TargetSuffix::Plain),
        };
        if digits.len() < 2 || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(PtxTarget { sm: digits.parse().ok()?, suffix })
    }

    pub fn of_arch(arch: Arch) -> Self {
        let (major, minor) = arch.compute_capability();
        let suffix = if arch == Arch::Sm90a { TargetSuffix::ArchSpecific } else { TargetSuffix::Plain };
        PtxTarget { sm: 10 * major + minor, suffix }
    }

    /// Whether a kernel whose PTX targets `self` may be filed under `arch`.
    ///
    /// `problem.arch` names the target family a kernel is verified and served for,
    /// so the PTX target must equal it — except that a plain `sm_XX` kernel may be
    /// filed under a higher plain arch, because the driver JIT runs plain PTX on every
    /// newer GPU and a client of that arch can use it unchanged. Arch-specific PTX
    /// (`sm_90a`, with wgmma and setmaxnreg) runs on compute capability 9.0 only, which is
    /// every GPU the `sm_90` catalog's device classes name (H100, H200, GH200): it may be
    /// filed under `sm_90` as well as `sm_90a`, so that the `sm_90` catalog can hold the
    /// kernels Hopper needs to beat cuBLAS. Timings belong to a device class, so a client
    /// on another class never gets it as that class's kernel, and the artifact's `target`
    /// says `sm_90a`. `sm_90a` takes only `sm_90a` PTX.
    pub fn serves(self, arch: Arch) -> bool {
        let wanted = PtxTarget::of_arch(arch);
        match (self.suffix, wanted.suffix) {
            (TargetSuffix::Plain, TargetSuffix::Plain) => self.sm <= wanted.sm,
            (TargetSuffix::ArchSpecific, TargetSuffix::Plain) => self.sm == wanted.sm,
            _ => self == wanted,
        }
    }
}

impl fmt::Display for PtxTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = match self.suffix {
            TargetSuffix::Plain => "",
            TargetSuffix::ArchSpecific => "a",
            TargetSuffix::FamilySpecific => "f",
        };
        write!(f, "sm_{}{suffix}", self.sm)
    }
}

/// Class of a PTX fundamental type: `.u32` is `Unsigned` of 32 bits, and so on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeClass {
    Unsigned,
    Signed,
    Bits,
    Float,
}

/// A PTX fundamental type as it appears in a parameter, e.g. `.u64` or `.b8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScalarType {
    pub class: TypeClass,
    pub bits: u32,
}

impl ScalarType {
    fn parse(word: &str) -> Option<Self> {
        let rest = word.strip_prefix('.')?;
        let (class, bits) = rest.split_at_checked(1)?;
        let class = match class {
            "u" => TypeClass::Unsigned,
            "s" => TypeClass::Signed,
            "b" => TypeClass::Bits,
            "f" => TypeClass::Float,
            _ => return None,
        };
        let bits: u32 = match (class, bits) {
            (TypeClass::Float, "16" | "32" | "64") => bits.parse().ok()?,
            (TypeClass::Float, _) => return None,
            (_, "8" | "16" | "32" | "64") => bits.parse().ok()?,
            (TypeClass::Bits, "128") => 128,
            _ => return None,
        };
        Some(ScalarType { class, bits })
    }

    fn is_integer_like(self) -> bool {
        self.class != TypeClass::Float
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = match self.class {
            TypeClass::Unsigned => 'u',
            TypeClass::Signed => 's',
            TypeClass::Bits => 'b',
            TypeClass::Float => 'f',
        };
        write!(f, ".{c}{}", self.bits)
    }
}

/// One `.param` of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxParam {
    pub name: String,
    pub ty: ScalarType,
    /// `.align N`; for a `.ptr` parameter it is the pointee's alignment.
    pub align: Option<u32>,
    /// Element count of an array parameter (`name[128]`), dimensions multiplied.
    pub array_len: Option<u64>,
    /// Carries the `.ptr` qualifier (a pointer hint; the value is still a `.u64`).
    pub ptr: bool,
}

impl PtxParam {
    pub fn size_bytes(&self) -> u64 {
        (self.ty.bits as u64 / 8) * self.array_len.unwrap_or(1)
    }
}

impl fmt::Display for PtxParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(".param")?;
        if let Some(a) = self.align.filter(|_| !self.ptr) {
            write!(f, " .align {a}")?;
        }
        write!(f, " {}", self.ty)?;
        if self.ptr {
            f.write_str(" .ptr")?;
        }
        write!(f, " {}", self.name)?;
        if let Some(n) = self.array_len {
            write!(f, "[{n}]")?;
        }
        Ok(())
    }
}

/// One `.entry` (kernel) of the module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxEntry {
    pub name: String,
    pub params: Vec<PtxParam>,
    /// False for a declaration without a body (`.extern .entry f(...);`), which the
    /// driver cannot launch.
    pub defined: bool,
    /// 1-based line of the `.entry` directive, for messages.
    pub line: u32,
}

/// What the static parser learned about a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxInfo {
    pub version: PtxVersion,
    pub target: PtxTarget,
    /// Other words of the `.target` list (`texmode_independent`, `debug`, …).
    pub target_options: Vec<String>,
    pub address_size: u32,
    pub entries: Vec<PtxEntry>,
}

impl PtxInfo {
    pub fn entry(&self, name: &str) -> Option<&PtxEntry> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// The first static fault found, phrased so that a kernel author can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StaticError {
    #[error("PTX is {bytes} bytes; the limit is {limit}")]
    TooLarge { bytes: usize, limit: usize },
    #[error("PTX is not UTF-8 text (first bad byte at offset {offset})")]
    NotUtf8 { offset: usize },
    #[error("PTX contains a NUL byte at offset {offset}; the driver would silently stop reading there")]
    NulByte { offset: usize },
    #[error("line {line}: {message}")]
    Syntax { line: u32, message: String },
    #[error("PTX has no `.version` directive; start the module with e.g. `.version 8.0`")]
    MissingVersion,
    #[error("PTX has no `.target` directive; add e.g. `.target sm_90a` after `.version`")]
    MissingTarget,
    #[error("PTX has no `.address_size 64`; kernels receive 64-bit pointers, so a 64-bit module is required")]
    MissingAddressSize,
    #[error("`.address_size {0}`: only 64-bit modules are accepted")]
    AddressSize(u32),
    #[error("PTX ISA {found} is newer than {max}, the newest this service's driver and ptxas accept")]
    VersionTooNew { found: PtxVersion, max: PtxVersion },
    #[error("`.entry {0}` is defined twice")]
    DuplicateEntry(String),
    #[error("PTX `.target {target}` cannot be filed under arch {arch}: {hint}")]
    TargetMismatch { target: PtxTarget, arch: Arch, hint: String },
    #[error("launch {launch}: entry `{entry}` is not a `.entry` in the PTX (entries: {available})")]
    MissingEntry { launch: usize, entry: String, available: String },
    #[error("launch {launch}: entry `{entry}` is only declared in the PTX, never defined")]
    EntryNotDefined { launch: usize, entry: String },
    #[error("launch {launch}: entry `{entry}` has {ptx} parameters in the PTX but the manifest gives {manifest}")]
    ParamCount { launch: usize, entry: String, ptx: usize, manifest: usize },
    #[error("launch {launch}: parameter {index} of `{entry}` is `{found}` in the PTX, but the manifest passes {expected}")]
    ParamKind { launch: usize, entry: String, index: usize, found: String, expected: &'static str },
    #[error("ptxas rejected the PTX:\n{log}")]
    Ptxas { log: String },
    #[error("launch {launch}: {message}")]
    DeviceLimit { launch: usize, message: String },
    #[error(
        "line {line}: `{opcode}` uses the module-scope `.global` variable `{name}` other than by loading it; a kernel may not keep state in module memory between launches (state that outlives a launch lets a kernel behave differently when it is timed than when it is verified). Tables belong in `.const` (`__constant__`), scratch in the manifest's workspace"
    )]
    ModuleState { line: u32, name: String, opcode: String },
}

/// Checks size and encoding, then parses the module header and entry signatures.
pub fn parse(bytes: &[u8], limits: &StaticLimits) -> Result<PtxInfo, StaticError> {
    if bytes.len() > limits.max_bytes {
        return Err(StaticError::TooLarge { bytes: bytes.len(), limit: limits.max_bytes });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| StaticError::NotUtf8 { offset: e.valid_up_to() })?;
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        return Err(StaticError::NulByte { offset });
    }
    let info = Parser::new(text).module()?;
    check_module_state(text)?;
    Ok(info)
}

/// Refuses module-scope `.global` variables that the kernels may write.
///
/// Invariant: the only device memory a verified kernel can change between launches is C
/// and its workspace, both of which the verifier and the timed-sequence check control
/// (poison, perturbation, zeroing). A module-scope `.global` variable would be memory no
/// one checks: a flag "already computed", a cache, the time of the previous launch. So
/// such a variable may appear only as the address of a load (`ld`, `ldu`); any other use
/// — a store, an atomic, or taking its address into a register (`mov`, `cvta`), through
/// which it could be written — is refused, as is an initializer naming another symbol.
/// Read-only tables that the compiler leaves in `.global` (unreferenced constants, a
/// table loaded at a fixed offset) still pass.
fn check_module_state(text: &str) -> Result<(), StaticError> {
    // Cheap pre-test: most kernels declare no module-scope `.global` variable at all.
    let declares = text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with(".global") || ((l.starts_with(".visible") || l.starts_with(".weak")) && l.contains(".global"))
    });
    if !declares {
        return Ok(());
    }
    let mut lexer = Lexer::new(text);
    let mut globals: Vec<&str> = Vec::new();
    let mut depth = 0u32;
    // The statement being read inside a body: its first word (the opcode, after any
    // `@%p` guard) and the global it names, if any.
    let mut opcode: Option<&str> = None;
    let mut named: Option<(&str, u32)> = None;
    let mut guard = false;
    while let Some(Token { tok, line, .. }) = lexer.next_token()? {
        match tok {
            // Braces open and close scopes only between statements; inside one they
            // group a vector operand (`st.global.v2.u32 [x], {%r1, %r2};`).
            Tok::Punct('{') if opcode.is_none() => depth += 1,
            Tok::Punct('}') if opcode.is_none() => depth = depth.saturating_sub(1),
            Tok::Word(".global") if depth == 0 => {
                // `.global [.align N] .type name[dims] [= initializer];`
                let mut name: Option<&str> = None;
                let mut in_initializer = false;
                while let Some(Token { tok, line, .. }) = lexer.next_token()? {
                    match tok {
                        Tok::Punct(';') => break,
                        Tok::Punct('=') => in_initializer = true,
                        Tok::Word(w) if !w.starts_with('.') && !w.starts_with('%') && w != "generic" => {
                            if in_initializer {
                                return Err(StaticError::ModuleState { line, name: w.to_string(), opcode: format!("the initializer of `{}`", name.unwrap_or("?")) });
                            }
                            name.get_or_insert(w);
                        }
                        _ => {}
                    }
                }
                globals.extend(name);
            }
            _ if depth == 0 => {}
            Tok::Punct(';' | ':') => {
                if let (Some((name, line)), Some(op)) = (named, opcode)
                    && !(op == "ld" || op.starts_with("ld.") || op.starts_with("ldu"))
                {
                    return Err(StaticError::ModuleState { line, name: name.to_string(), opcode: op.to_string() });
                }
                (opcode, named, guard) = (None, None, false);
            }
            Tok::Punct('@') if opcode.is_none() => guard = true,
            Tok::Word(w) if opcode.is_none() => {
                // The word after `@` is the guard predicate (`@%p1`, `@!%p1`).
                if guard {
                    guard = false;
                } else {
                    opcode = Some(w);
                }
            }
            Tok::Word(w) if named.is_none() && globals.contains(&w) => named = Some((w, line)),
            _ => {}
        }
    }
    Ok(())
}

/// Checks a parsed module against the manifest that will launch it, with the
/// service's default limits.
pub fn check_against_manifest(info: &PtxInfo, manifest: &Manifest) -> Result<(), StaticError> {
    check_against_manifest_with(info, manifest, &StaticLimits::default())
}

/// Parses `bytes` and checks them against `manifest`: the whole static step short of
/// ptxas and the device limits.
pub fn check(bytes: &[u8], manifest: &Manifest, limits: &StaticLimits) -> Result<PtxInfo, StaticError> {
    let info = parse(bytes, limits)?;
    check_against_manifest_with(&info, manifest, limits)?;
    Ok(info)
}

pub fn check_against_manifest_with(info: &PtxInfo, manifest: &Manifest, limits: &StaticLimits) -> Result<(), StaticError> {
    if info.version > limits.max_version {
        return Err(StaticError::VersionTooNew { found: info.version, max: limits.max_version });
    }
    let arch = manifest.problem.arch;
    if !info.target.serves(arch) {
        return Err(StaticError::TargetMismatch { target: info.target, arch, hint: target_hint(info.target, arch) });
    }
    for (launch, l) in manifest.launches.iter().enumerate() {
        let Some(entry) = info.entry(&l.entry) else {
            let names: Vec<String> = info.entries.iter().map(|e| format!("`{}`", e.name)).collect();
            let available = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            return Err(StaticError::MissingEntry { launch, entry: l.entry.clone(), available });
        };
        if !entry.defined {
            return Err(StaticError::EntryNotDefined { launch, entry: entry.name.clone() });
        }
        if entry.params.len() != l.params.len() {
            return Err(StaticError::ParamCount {
                launch,
                entry: entry.name.clone(),
                ptx: entry.params.len(),
                manifest: l.params.len(),
            });
        }
        for (index, (p, m)) in entry.params.iter().zip(&l.params).enumerate() {
            if let Err(expected) = param_matches(p, m) {
                return Err(StaticError::ParamKind {
                    launch,
                    entry: entry.name.clone(),
                    index,
                    found: p.to_string(),
                    expected,
                });
            }
        }
    }
    Ok(())
}

/// What the worker's GPU allows, read from its device attributes by the GPU layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    /// Opt-in maximum of static plus dynamic shared memory per block.
    pub max_shared_mem_per_block: u64,
    pub max_registers_per_block: u64,
    /// Largest cluster (8 portable; 16 on Hopper with the non-portable opt-in).
    pub max_cluster_blocks: u32,
}

impl DeviceLimits {
    /// H100/H200 (compute capability 9.0).
    pub const HOPPER: DeviceLimits = DeviceLimits {
        max_threads_per_block: 1024,
        max_block: [1024, 1024, 64],
        max_grid: [i32::MAX as u32, 65_535, 65_535],
        max_shared_mem_per_block: 232_448,
        max_registers_per_block: 65_536,
        max_cluster_blocks: 16,
    };
}

/// Checks every launch's shape and resources against the device. With a ptxas report,
/// static shared memory and registers count too; without one (no ptxas here), only
/// what the manifest states. Registers are checked as `registers × threads`, a lower
/// bound of what the driver allocates (it rounds per warp): a launch that passes
/// here can still fail to launch, but one that fails here certainly would.
pub fn check_device_limits(manifest: &Manifest, report: Option<&ptxas::PtxasReport>, device: &DeviceLimits) -> Result<(), StaticError> {
    for (launch, l) in manifest.launches.iter().enumerate() {
        let fail = |message: String| Err(StaticError::DeviceLimit { launch, message });
        let threads = l.block.iter().map(|&b| b as u64).product::<u64>();
        if threads > device.max_threads_per_block as u64 || l.block.iter().zip(device.max_block).any(|(&b, max)| b > max) {
            return fail(format!("block {:?} exceeds the device's {:?} (at most {} threads)", l.block, device.max_block, device.max_threads_per_block));
        }
        if l.grid.iter().zip(device.max_grid).any(|(&g, max)| g > max) {
            return fail(format!("grid {:?} exceeds the device's {:?}", l.grid, device.max_grid));
        }
        let cluster = l.cluster.iter().map(|&c| c as u64).product::<u64>();
        if cluster > device.max_cluster_blocks as u64 {
            return fail(format!("cluster {:?} has {cluster} blocks; the device allows {}", l.cluster, device.max_cluster_blocks));
        }
        let resources = report.and_then(|r| r.entry(&l.entry));
        let static_smem = resources.map_or(0, |r| r.shared_mem_bytes);
        let smem = static_smem + l.shared_mem_bytes as u64;
        if smem > device.max_shared_mem_per_block {
            return fail(format!(
                "needs {smem} bytes of shared memory per block ({} dynamic + {static_smem} static); the device allows {}",
                l.shared_mem_bytes, device.max_shared_mem_per_block
            ));
        }
        if let Some(r) = resources {
            let regs = r.registers as u64 * threads;
            if regs > device.max_registers_per_block {
                return fail(format!(
                    "{} registers × {threads} threads = {regs} registers per block; the device has {}",
                    r.registers, device.max_registers_per_block
                ));
            }
        }
    }
    Ok(())
}

fn target_hint(target: PtxTarget, arch: Arch) -> String {
    let wanted = PtxTarget::of_arch(arch);
    match (target.suffix, wanted.suffix) {
        (TargetSuffix::Plain, TargetSuffix::Plain) => {
            format!("plain PTX is filed under its own arch or a higher one; use `.target {wanted}` or lower, or file it under arch sm_{}", target.sm)
        }
        (_, TargetSuffix::ArchSpecific) => format!("arch {arch} takes only `.target {wanted}` PTX; file plain PTX under a plain arch"),
        _ => format!("arch-specific PTX runs only on its own GPU; file `.target {target}` only under a matching arch"),
    }
}

/// The PTX shape each manifest param kind needs; `Err` names it for the message.
fn param_matches(p: &PtxParam, m: &Param) -> Result<(), &'static str> {
    match m {
        Param::Ptr(_) => {
            let ok = p.array_len.is_none() && p.ty.bits == 64 && p.ty.is_integer_like();
            if ok { Ok(()) } else { Err("a device pointer (`.param .u64 NAME`)") }
        }
        Param::I32(_) => {
            let ok = p.array_len.is_none() && !p.ptr && p.ty.bits == 32 && p.ty.is_integer_like();
            if ok { Ok(()) } else { Err("a 32-bit integer (`.param .u32 NAME` or `.s32`)") }
        }
        // Any element type will do as long as the bytes and alignment are a CUtensorMap's:
        // nvcc writes `.b8 [128]`, hand-written PTX sometimes `.b64 [16]`.
        Param::TensorMap(_) => {
            let ok = !p.ptr
                && p.array_len.is_some()
                && p.size_bytes() == TENSOR_MAP_BYTES
                && p.align.is_some_and(|a| a >= TENSOR_MAP_ALIGN);
            if ok { Ok(()) } else { Err("a 128-byte CUtensorMap by value (`.param .align 64 .b8 NAME[128]`)") }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// Directives, types, identifiers and instructions: `.entry`, `.u64`, `foo`, `ld.global.u32`.
    Word(&'a str),
    /// Anything starting with a digit: `8.8`, `128`, `0x10`, `0f3F800000`.
    Number(&'a str),
    Str,
    Punct(char),
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    tok: Tok<'a>,
    line: u32,
    /// Byte offset of the token's first character.
    at: usize,
}

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || matches!(c, '_' | '$' | '%' | '.')
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.')
}

/// Splits PTX into tokens, dropping whitespace and both kinds of comment. Strings are
/// kept opaque so that a `//` inside `.file 1 "a//b.cu"` is not taken for a comment.
/// Tokens are produced on demand: a 16 MiB module is millions of tokens, and only
/// the header and signatures need looking at.
struct Lexer<'a> {
    text: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    line: u32,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Self {
        Lexer { text, chars: text.char_indices().peekable(), line: 1 }
    }

    fn next_token(&mut self) -> Result<Option<Token<'a>>, StaticError> {
        while let Some((start, c)) = self.chars.next() {
            match c {
                '\n' => self.line += 1,
                c if c.is_whitespace() => {}
                '/' if matches!(self.chars.peek(), Some((_, '/'))) => {
                    while self.chars.next_if(|&(_, c)| c != '\n').is_some() {}
                }
                '/' if matches!(self.chars.peek(), Some((_, '*'))) => self.block_comment()?,
                '"' => {
                    self.string()?;
                    return Ok(Some(Token { tok: Tok::Str, line: self.line, at: start }));
                }
                c if is_word_start(c) || c.is_ascii_digit() => {
                    let mut end = start + c.len_utf8();
                    while let Some((i, c)) = self.chars.next_if(|&(_, c)| is_word_char(c)) {
                        end = i + c.len_utf8();
                    }
                    let s = &self.text[start..end];
                    let tok = if c.is_ascii_digit() { Tok::Number(s) } else { Tok::Word(s) };
                    return Ok(Some(Token { tok, line: self.line, at: start }));
                }
                c => return Ok(Some(Token { tok: Tok::Punct(c), line: self.line, at: start })),
            }
        }
        Ok(None)
    }

    fn block_comment(&mut self) -> Result<(), StaticError> {
        let opened = self.line;
        self.chars.next();
        let mut prev = ' ';
        loop {
            match self.chars.next() {
                Some((_, '/')) if prev == '*' => return Ok(()),
                Some((_, c)) => {
                    if c == '\n' {
                        self.line += 1;
                    }
                    prev = c;
                }
                None => return Err(syntax(opened, "`/*` comment is never closed")),
            }
        }
    }

    fn string(&mut self) -> Result<(), StaticError> {
        loop {
            match self.chars.next() {
                Some((_, '"')) => return Ok(()),
                Some((_, '\\')) => {
                    self.chars.next_if(|&(_, c)| c != '\n');
                }
                Some((_, '\n')) | None => return Err(syntax(self.line, "string literal is never closed")),
                Some(_) => {}
            }
        }
    }
}

fn syntax(line: u32, message: impl Into<String>) -> StaticError {
    StaticError::Syntax { line, message: message.into() }
}

fn parse_uint(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

struct Parser<'a> {
    lexer: Lexer<'a>,
    ahead: Option<Token<'a>>,
    /// Line of the last token seen, for messages at the end of input.
    line: u32,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser { lexer: Lexer::new(text), ahead: None, line: 1 }
    }

    fn peek(&mut self) -> Result<Option<Tok<'a>>, StaticError> {
        if self.ahead.is_none() {
            self.ahead = self.lexer.next_token()?;
            if let Some(t) = self.ahead {
                self.line = t.line;
            }
        }
        Ok(self.ahead.map(|t| t.tok))
    }

    fn next(&mut self) -> Result<Option<Tok<'a>>, StaticError> {
        let t = self.peek()?;
        self.ahead = None;
        Ok(t)
    }

    /// Line of the next token (or of the last one, at the end).
    fn line(&mut self) -> u32 {
        // A lexing error here will be met again by the next `peek`.
        let _ = self.peek();
        self.line
    }

    fn eat_punct(&mut self, c: char) -> Result<bool, StaticError> {
        if self.peek()? == Some(Tok::Punct(c)) {
            self.ahead = None;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn module(mut self) -> Result<PtxInfo, StaticError> {
        let mut version = None;
        let mut target = None;
        let mut target_options = Vec::new();
        let mut address_size = None;
        let mut entries: Vec<PtxEntry> = Vec::new();
        let mut depth = 0u32;
        while let Some(tok) = self.next()? {
            let line = self.line;
            match tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth = depth.checked_sub(1).ok_or_else(|| syntax(line, "`}` without a matching `{`"))?,
                _ if depth > 0 => {}
                Tok::Word(".version") => {
                    if version.is_some() {
                        return Err(syntax(line, "second `.version` directive"));
                    }
                    version = Some(self.version(line)?);
                }
                Tok::Word(".target") => {
                    if target.is_some() {
                        return Err(syntax(line, "second `.target` directive"));
                    }
                    let (t, options) = self.target(line)?;
                    target = Some(t);
                    target_options = options;
                }
                Tok::Word(".address_size") => {
                    let n = match self.next()? {
                        Some(Tok::Number(n)) => parse_uint(n).and_then(|n| u32::try_from(n).ok()),
                        _ => None,
                    };
                    address_size = Some(n.ok_or_else(|| syntax(line, "`.address_size` takes 32 or 64"))?);
                }
                Tok::Word(".entry") => {
                    let entry = self.entry(line)?;
                    if entries.iter().any(|e| e.name == entry.name && e.defined && entry.defined) {
                        return Err(StaticError::DuplicateEntry(entry.name));
                    }
                    // A definition replaces an earlier declaration of the same name.
                    if entry.defined {
                        entries.retain(|e| e.name != entry.name);
                    }
                    if !entries.iter().any(|e| e.name == entry.name) {
                        entries.push(entry);
                    }
                }
                _ => {}
            }
        }
        if depth > 0 {
            return Err(syntax(self.line, "a `{` is never closed"));
        }
        let version = version.ok_or(StaticError::MissingVersion)?;
        let target = target.ok_or(StaticError::MissingTarget)?;
        match address_size {
            None => return Err(StaticError::MissingAddressSize),
            Some(64) => {}
            Some(n) => return Err(StaticError::AddressSize(n)),
        }
        Ok(PtxInfo { version, target, target_options, address_size: 64, entries })
    }

    fn version(&mut self, line: u32) -> Result<PtxVersion, StaticError> {
        let bad = || syntax(line, "`.version` takes MAJOR.MINOR, e.g. `.version 8.0`");
        let Some(Tok::Number(v)) = self.next()? else { return Err(bad()) };
        let (major, minor) = v.split_once('.').ok_or_else(bad)?;
        let num = |s: &str| -> Result<u32, StaticError> {
            if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        Ok(PtxVersion { major: num(major)?, minor: num(minor)? })
    }

    fn target(&mut self, line: u32) -> Result<(PtxTarget, Vec<String>), StaticError> {
        let mut target = None;
        let mut options = Vec::new();
        loop {
            let Some(Tok::Word(w)) = self.next()? else {
                return Err(syntax(line, "`.target` takes a list such as `sm_90a` or `sm_80, texmode_independent`"));
            };
            if w.starts_with("sm_") {
                let t = PtxTarget::parse(w).ok_or_else(|| syntax(line, format!("`{w}` is not a target of the form sm_XX, sm_XXa or sm_XXf")))?;
                if target.replace(t).is_some() {
                    return Err(syntax(line, "`.target` names more than one sm_XX"));
                }
            } else {
                options.push(w.to_string());
            }
            if !self.eat_punct(',')? {
                break;
            }
        }
        let target = target.ok_or_else(|| syntax(line, "`.target` names no sm_XX target"))?;
        Ok((target, options))
    }

    fn entry(&mut self, line: u32) -> Result<PtxEntry, StaticError> {
        let name = match self.next()? {
            Some(Tok::Word(w)) if !w.starts_with('.') => w.to_string(),
            _ => return Err(syntax(line, "`.entry` must be followed by the kernel's name")),
        };
        let mut params = Vec::new();
        if self.eat_punct('(')? && !self.eat_punct(')')? {
            loop {
                params.push(self.param(&name)?);
                if self.eat_punct(')')? {
                    break;
                }
                if !self.eat_punct(',')? {
                    let line = self.line();
                    return Err(syntax(line, format!("in the parameters of `{name}`: expected `,` or `)`")));
                }
            }
        }
        // Performance directives (`.maxntid 128, 1, 1`, `.reqnctapercluster 2,1,1`, …)
        // may sit between the signature and the body.
        loop {
            match self.peek()? {
                Some(Tok::Punct('{')) => return Ok(PtxEntry { name, params, defined: true, line }),
                Some(Tok::Punct(';')) => {
                    self.next()?;
                    return Ok(PtxEntry { name, params, defined: false, line });
                }
                Some(Tok::Word(w)) if w.starts_with('.') => {
                    self.next()?;
                }
                Some(Tok::Number(_) | Tok::Punct(',')) => {
                    self.next()?;
                }
                _ => {
                    let line = self.line();
                    return Err(syntax(line, format!("expected the body `{{` of entry `{name}`")));
                }
            }
        }
    }

    fn param(&mut self, entry: &str) -> Result<PtxParam, StaticError> {
        let line = self.line();
        let err = |m: String| syntax(line, format!("in the parameters of `{entry}`: {m}"));
        match self.next()? {
            Some(Tok::Word(".param")) => {}
            _ => return Err(err("each kernel parameter must start with `.param`".into())),
        }
        let (mut ty, mut align, mut name, mut array_len, mut ptr) = (None, None, None::<String>, None, false);
        while let Some(tok) = self.peek()? {
            match tok {
                Tok::Punct(',' | ')') => break,
                Tok::Word(".align") => {
                    self.next()?;
                    let a = match self.next()? {
                        Some(Tok::Number(n)) => parse_uint(n).and_then(|n| u32::try_from(n).ok()),
                        _ => None,
                    };
                    align = Some(a.ok_or_else(|| err("`.align` takes a number".into()))?);
                }
                Tok::Word(".ptr") => {
                    self.next()?;
                    ptr = true;
                }
                Tok::Word(".global" | ".shared" | ".const" | ".local") if ptr => {
                    self.next()?;
                }
                Tok::Word(w) if w.starts_with('.') => {
                    self.next()?;
                    let t = ScalarType::parse(w).ok_or_else(|| err(format!("unknown qualifier or type `{w}`")))?;
                    if ty.replace(t).is_some() {
                        return Err(err(format!("two types given (second is `{w}`)")));
                    }
                }
                Tok::Word(w) => {
                    self.next()?;
                    if name.is_some() {
                        return Err(err(format!("unexpected `{w}` after the parameter's name")));
                    }
                    name = Some(w.to_string());
                }
                Tok::Punct('[') => {
                    self.next()?;
                    let n = match self.next()? {
                        Some(Tok::Number(n)) => parse_uint(n).filter(|&n| n > 0),
                        _ => None,
                    };
                    let n = n.ok_or_else(|| err("array parameters need a positive size, e.g. `[128]`".into()))?;
                    if !self.eat_punct(']')? {
                        return Err(err("expected `]`".into()));
                    }
                    let total = array_len.unwrap_or(1u64).checked_mul(n).ok_or_else(|| err("array size overflows".into()))?;
                    array_len = Some(total);
                }
                other => return Err(err(format!("unexpected {other:?}"))),
            }
        }
        let name = name.ok_or_else(|| err("a parameter has no name".into()))?;
        let ty = ty.ok_or_else(|| err(format!("parameter `{name}` has no type")))?;
        Ok(PtxParam { name, ty, align, array_len, ptr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape nvcc 12 emits for a TMA kernel with `__grid_constant__ const CUtensorMap`.
    pub(crate) const TMA_KERNEL: &str = r#"//
// Generated by NVIDIA NVVM Compiler
//
// Compiler Build ID: CL-36037853
// Cuda compilation tools, release 12.9, V12.9.86
// Based on NVVM 7.0.1
//

.version 8.0
.target sm_90a
.address_size 64

	// .globl	hgemm_128x256x64
.extern .shared .align 16 .b8 smem[];

.visible .entry hgemm_128x256x64(
	.param .align 64 .b8 hgemm_128x256x64_param_0[128],
	.param .align 64 .b8 hgemm_128x256x64_param_1[128],
	.param .u64 .ptr .global .align 1 hgemm_128x256x64_param_2,
	.param .u32 hgemm_128x256x64_param_3, /* M */
	.param .u32 hgemm_128x256x64_param_4, // N
	.param .u32
	    hgemm_128x256x64_param_5
)
.maxntid 384, 1, 1
.reqnctapercluster 2, 1, 1
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<4>;
	.file	1 "/tmp/a//b.cu"
	ld.param.u64 	%rd1, [hgemm_128x256x64_param_2];
	{ // inner scope
	mov.u32 %r1, 0;
	}
	ret;

}
"#;

    pub(crate) const MANIFEST: &str = r#"{ "abi": "kaas.hgemm.v1",
      "problem": {"arch": "sm_90a", "acc": "f32", "layout": "tn", "m": 4096, "n": 4096, "k": 4096},
      "launches": [
        { "entry": "hgemm_128x256x64",
          "grid": [128, 1, 1], "block": [384, 1, 1], "cluster": [2, 1, 1],
          "shared_mem_bytes": 197632,
          "params": [ {"tensor_map": {"operand": "A", "box": [64, 128], "swizzle": "128B"}},
                      {"tensor_map": {"operand": "B", "box": [64, 256], "swizzle": "128B"}},
                      {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"} ] } ] }"#;

    const MMA_KERNEL: &str = "
.version 7.8 .target sm_80, texmode_independent .address_size 64
.func (.param .b32 r) helper(.param .b32 x) { ret; }
.entry split_k_main ( .param .u64 a, .param .u64 .ptr .align 16 b, .param .u64 c,
  .param .u64 ws, .param .s32 m, .param .s32 n, .param .b32 k ) { ret; }
.visible .entry split_k_reduce() .maxntid 256 { ret; }
";

    fn parse_ok(text: &str) -> PtxInfo {
        match parse(text.as_bytes(), &StaticLimits::default()) {
            Ok(info) => info,
            Err(e) => panic!("parse failed: {e}"),
        }
    }

    fn manifest() -> Manifest {
        Manifest::from_json(MANIFEST).expect("test manifest is valid")
    }

    #[test]
    fn nvcc_style_tma_kernel_parses_with_every_parameter() {
        let info = parse_ok(TMA_KERNEL);
        assert_eq!(info.version, PtxVersion { major: 8, minor: 0 });
        assert_eq!(info.target.to_string(), "sm_90a");
        assert_eq!(info.entries.len(), 1);
        let e = &info.entries[0];
        assert_eq!(e.name, "hgemm_128x256x64");
        assert!(e.defined);
        let shown: Vec<String> = e.params.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            shown,
            [
                ".param .align 64 .b8 hgemm_128x256x64_param_0[128]",
                ".param .align 64 .b8 hgemm_128x256x64_param_1[128]",
                ".param .u64 .ptr hgemm_128x256x64_param_2",
                ".param .u32 hgemm_128x256x64_param_3",
                ".param .u32 hgemm_128x256x64_param_4",
                ".param .u32 hgemm_128x256x64_param_5",
            ]
        );
        assert_eq!(e.params[0].size_bytes(), 128);
        assert_eq!(e.params[2].align, Some(1));
        assert_eq!(check_against_manifest(&info, &manifest()), Ok(()));
    }

    #[test]
    fn header_on_one_line_options_and_funcs_are_understood() {
        let info = parse_ok(MMA_KERNEL);
        assert_eq!(info.version.to_string(), "7.8");
        assert_eq!(info.target, PtxTarget { sm: 80, suffix: TargetSuffix::Plain });
        assert_eq!(info.target_options, ["texmode_independent"]);
        let names: Vec<&str> = info.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["split_k_main", "split_k_reduce"], ".func must not count as an entry");
        assert_eq!(info.entries[0].params.len(), 7);
        assert!(info.entries[0].params[1].ptr);
        assert!(info.entries[1].params.is_empty());
    }

    #[test]
    fn a_parameter_count_mismatch_names_launch_entry_and_both_counts() {
        let info = parse_ok(TMA_KERNEL);
        let mut m = manifest();
        m.launches[0].params.push(Param::I32(crate::manifest::I32Value::Const(1)));
        let err = check_against_manifest(&info, &m).unwrap_err();
        assert_eq!(
            err.to_string(),
            "launch 0: entry `hgemm_128x256x64` has 6 parameters in the PTX but the manifest gives 7"
        );
    }

    #[test]
    fn each_param_kind_must_match_the_ptx_type() {
        let info = parse_ok(TMA_KERNEL);
        use crate::manifest::{Buffer, Dim, I32Value};
        // A pointer where the PTX has a tensor map, an int where it has a pointer,
        // a tensor map where it has an int.
        for (index, replacement) in [
            (0, Param::Ptr(Buffer::A)),
            (2, Param::I32(I32Value::Dim(Dim::M))),
            (3, manifest().launches[0].params[0].clone()),
        ] {
            let mut m = manifest();
            m.launches[0].params[index] = replacement;
            match check_against_manifest(&info, &m) {
                Err(StaticError::ParamKind { launch: 0, index: i, .. }) => assert_eq!(i, index),
                other => panic!("param {index}: expected a kind mismatch, got {other:?}"),
            }
        }
    }

    #[test]
    fn tensor_maps_need_128_bytes_aligned_to_at_least_64() {
        let m = manifest();
        let with_param0 = |decl: &str| {
            let text = TMA_KERNEL.replace(".param .align 64 .b8 hgemm_128x256x64_param_0[128]", decl);
            check_against_manifest(&parse_ok(&text), &m)
        };
        assert_eq!(with_param0(".param .align 128 .b8 t[128]"), Ok(()));
        assert_eq!(with_param0(".param .align 64 .b64 t[16]"), Ok(()));
        assert!(with_param0(".param .align 8 .b8 t[128]").is_err());
        assert!(with_param0(".param .b8 t[128]").is_err());
        assert!(with_param0(".param .align 64 .b8 t[64]").is_err());
        assert!(with_param0(".param .u64 t").is_err());
    }

    #[test]
    fn pointers_and_ints_accept_every_same_width_integer_type() {
        let m = manifest();
        for (from, to) in [
            (".param .u64 .ptr .global .align 1 hgemm_128x256x64_param_2", ".param .b64 p"),
            (".param .u64 .ptr .global .align 1 hgemm_128x256x64_param_2", ".param .s64 p"),
            (".param .u32 hgemm_128x256x64_param_3", ".param .s32 m"),
            (".param .u32 hgemm_128x256x64_param_3", ".param .b32 m"),
        ] {
            let text = TMA_KERNEL.replace(from, to);
            assert_eq!(check_against_manifest(&parse_ok(&text), &m), Ok(()), "{to}");
        }
        for (from, to) in [
            (".param .u64 .ptr .global .align 1 hgemm_128x256x64_param_2", ".param .u32 p"),
            (".param .u64 .ptr .global .align 1 hgemm_128x256x64_param_2", ".param .f64 p"),
            (".param .u32 hgemm_128x256x64_param_3", ".param .u64 m"),
            (".param .u32 hgemm_128x256x64_param_3", ".param .f32 m"),
        ] {
            let text = TMA_KERNEL.replace(from, to);
            assert!(check_against_manifest(&parse_ok(&text), &m).is_err(), "{to} was accepted");
        }
    }

    #[test]
    fn missing_and_undefined_entries_are_reported() {
        let mut m = manifest();
        m.launches[0].entry = "hgemm_other".into();
        let err = check_against_manifest(&parse_ok(TMA_KERNEL), &m).unwrap_err();
        assert_eq!(
            err.to_string(),
            "launch 0: entry `hgemm_other` is not a `.entry` in the PTX (entries: `hgemm_128x256x64`)"
        );
        let declared = ".version 8.0\n.target sm_90a\n.address_size 64\n.extern .entry hgemm_128x256x64(.param .u64 a);";
        assert!(matches!(
            check_against_manifest(&parse_ok(declared), &manifest()),
            Err(StaticError::EntryNotDefined { launch: 0, .. })
        ));
    }

    #[test]
    fn arch_rule_files_plain_ptx_upwards_and_arch_specific_only_at_home() {
        let t = |s: &str| PtxTarget::parse(s).expect("valid target");
        assert!(t("sm_90a").serves(Arch::Sm90a));
        assert!(t("sm_90a").serves(Arch::Sm90), "Hopper-only PTX may fill the sm_90 catalog");
        assert!(!t("sm_90a").serves(Arch::Sm80));
        assert!(!t("sm_90").serves(Arch::Sm90a));
        assert!(t("sm_80").serves(Arch::Sm90));
        assert!(t("sm_80").serves(Arch::Sm86));
        assert!(t("sm_90").serves(Arch::Sm90));
        assert!(!t("sm_89").serves(Arch::Sm86));
        assert!(!t("sm_100").serves(Arch::Sm90));
        assert!(!t("sm_100f").serves(Arch::Sm90));
        assert_eq!(PtxTarget::parse("sm_100f"), Some(PtxTarget { sm: 100, suffix: TargetSuffix::FamilySpecific }));
        assert_eq!(PtxTarget::parse("sm_9"), None);
        assert_eq!(PtxTarget::parse("sm_90b"), None);

        let mut m = manifest();
        m.problem.arch = Arch::Sm90;
        check_against_manifest(&parse_ok(TMA_KERNEL), &m).expect("sm_90a PTX may be filed under sm_90");
        m.problem.arch = Arch::Sm89;
        let err = check_against_manifest(&parse_ok(TMA_KERNEL), &m).unwrap_err();
        assert!(matches!(err, StaticError::TargetMismatch { .. }), "{err}");
    }

    #[test]
    fn ptx_isa_newer_than_the_limit_is_refused() {
        let text = TMA_KERNEL.replace(".version 8.0", ".version 8.10");
        let info = parse_ok(&text);
        assert_eq!(info.version, PtxVersion { major: 8, minor: 10 }, "8.10 is newer than 8.8, not 8.1");
        assert!(matches!(check_against_manifest(&info, &manifest()), Err(StaticError::VersionTooNew { .. })));
        let relaxed = StaticLimits { max_version: PtxVersion { major: 9, minor: 0 }, ..StaticLimits::default() };
        assert_eq!(check_against_manifest_with(&info, &manifest(), &relaxed), Ok(()));
    }

    #[test]
    fn malformed_modules_fail_with_a_line_or_a_named_fault() {
        let limits = StaticLimits::default();
        let fails = |text: &str| parse(text.as_bytes(), &limits).unwrap_err();
        assert_eq!(fails(".target sm_90\n.address_size 64"), StaticError::MissingVersion);
        assert_eq!(fails(".version 8.0\n.address_size 64"), StaticError::MissingTarget);
        assert_eq!(fails(".version 8.0\n.target sm_90"), StaticError::MissingAddressSize);
        assert_eq!(fails(".version 8.0\n.target sm_90\n.address_size 32"), StaticError::AddressSize(32));
        assert!(matches!(fails(".version eight\n.target sm_90"), StaticError::Syntax { line: 1, .. }));
        assert!(matches!(fails(".version 8.0\n.target compute_90\n.address_size 64"), StaticError::Syntax { line: 2, .. }));
        assert!(matches!(fails(&TMA_KERNEL.replace(".u32\n", ".u33\n")), StaticError::Syntax { .. }));
        assert!(matches!(fails(&TMA_KERNEL.replace("[128]", "[]")), StaticError::Syntax { .. }));
        assert!(matches!(fails(&TMA_KERNEL.replace("/* M */", "/* M")), StaticError::Syntax { .. }));
        assert!(matches!(fails(&format!("{TMA_KERNEL}}}")), StaticError::Syntax { .. }));
        assert!(matches!(fails(&format!("{TMA_KERNEL}{{")), StaticError::Syntax { .. }));
        let twice = format!("{TMA_KERNEL}\n.entry hgemm_128x256x64() {{ ret; }}");
        assert_eq!(fails(&twice), StaticError::DuplicateEntry("hgemm_128x256x64".into()));
    }

    #[test]
    fn bytes_that_are_not_bounded_utf8_text_are_refused() {
        let limits = StaticLimits { max_bytes: 100, ..StaticLimits::default() };
        assert_eq!(parse(&[b' '; 101], &limits), Err(StaticError::TooLarge { bytes: 101, limit: 100 }));
        assert_eq!(parse(b".version \xff", &limits), Err(StaticError::NotUtf8 { offset: 9 }));
        assert_eq!(parse(b".version 8.0\0", &limits), Err(StaticError::NulByte { offset: 12 }));
    }

    #[test]
    fn launches_must_fit_the_device_with_ptxas_resources_counted() {
        use ptxas::{FunctionResources, PtxasReport};
        let m = manifest();
        assert_eq!(check_device_limits(&m, None, &DeviceLimits::HOPPER), Ok(()));
        let report = |registers, shared_mem_bytes| PtxasReport {
            functions: vec![FunctionResources {
                name: "hgemm_128x256x64".into(),
                entry: true,
                registers,
                shared_mem_bytes,
                ..Default::default()
            }],
            log: String::new(),
        };
        assert_eq!(check_device_limits(&m, Some(&report(168, 1024)), &DeviceLimits::HOPPER), Ok(()));
        // 197632 dynamic + 40000 static bytes is over 227 KiB.
        let err = check_device_limits(&m, Some(&report(168, 40_000)), &DeviceLimits::HOPPER).unwrap_err();
        assert!(err.to_string().contains("shared memory"), "{err}");
        // 384 threads × 255 registers is over 64K.
        let err = check_device_limits(&m, Some(&report(255, 0)), &DeviceLimits::HOPPER).unwrap_err();
        assert!(err.to_string().contains("registers"), "{err}");
        let small = DeviceLimits { max_cluster_blocks: 1, ..DeviceLimits::HOPPER };
        assert!(matches!(check_device_limits(&m, None, &small), Err(StaticError::DeviceLimit { launch: 0, .. })));
        let mut tall = m.clone();
        tall.launches[0].block = [1, 1, 64];
        tall.launches[0].grid = [128, 70_000, 1];
        assert!(check_device_limits(&tall, None, &DeviceLimits::HOPPER).is_err());
    }

    #[test]
    fn check_runs_parse_and_manifest_check_together() {
        let limits = StaticLimits::default();
        assert!(check(TMA_KERNEL.as_bytes(), &manifest(), &limits).is_ok());
        let wrong = TMA_KERNEL.replace(".target sm_90a", ".target sm_80");
        assert!(matches!(check(wrong.as_bytes(), &manifest(), &limits), Err(StaticError::TargetMismatch { .. })));
    }

    #[test]
    fn long_bodies_are_skipped_without_being_understood() {
        let body = "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1,%f2,%f3,%f4}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f1,%f2,%f3,%f4};\n";
        let text = TMA_KERNEL.replace("\tret;", &body.repeat(20_000));
        assert!(text.len() > 2 << 20);
        let info = parse_ok(&text);
        assert_eq!(check_against_manifest(&info, &manifest()), Ok(()));
    }

    #[test]
    fn a_declaration_followed_by_its_definition_counts_once_as_defined() {
        let text = ".version 8.0 .target sm_90 .address_size 64\n.extern .entry k(.param .u64 a);\n.entry k(.param .u64 a) { ret; }";
        let info = parse_ok(text);
        assert_eq!(info.entries.len(), 1);
        assert!(info.entries[0].defined);
    }

    /// A module with one module-scope variable and `body` as its kernel's body.
    fn with_global(decl: &str, body: &str) -> String {
        format!(".version 8.0\n.target sm_90\n.address_size 64\n{decl}\n.visible .entry k(.param .u64 a)\n{{\n\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<4>;\n\t.reg .pred %p<2>;\n{body}\n\tret;\n}}\n")
    }

    #[test]
    fn module_variables_may_be_loaded_but_never_written_or_addressed() {
        let decl = ".global .align 4 .u32 kaas_done[64];";
        // Loads are fine, so are constants the compiler left in `.global` unused.
        for body in ["\tld.global.u32 %r1, [kaas_done+8];", "\t@%p1 ld.global.nc.u32 %r1, [kaas_done];", "\tmov.u32 %r1, 0;"] {
            parse_ok(&with_global(decl, body));
        }
        parse_ok(&with_global(".global .align 4 .u32 BK = 64;", "\tmov.u32 %r1, 1;"));
        // Writes, atomics, and taking the address (through which it could be written).
        for (body, op) in [
            ("\tst.global.u32 [kaas_done+4], %r1;", "st.global.u32"),
            ("\t@%p1 st.global.u32 [kaas_done], %r1;", "st.global.u32"),
            ("\t@!%p1 atom.global.add.u32 %r1, [kaas_done], 1;", "atom.global.add.u32"),
            ("\tred.global.max.u32 [kaas_done], %r1;", "red.global.max.u32"),
            ("\tmov.u64 %rd1, kaas_done;", "mov.u64"),
            ("\tcvta.global.u64 %rd1, kaas_done;", "cvta.global.u64"),
            ("\tst.global.v2.u32 [kaas_done], {%r1, %r2};", "st.global.v2.u32"),
        ] {
            match parse(with_global(decl, body).as_bytes(), &StaticLimits::default()) {
                Err(StaticError::ModuleState { name, opcode, line }) => {
                    assert_eq!((name.as_str(), opcode.as_str(), line), ("kaas_done", op, 10), "{body}");
                }
                other => panic!("{body}: {other:?}"),
            }
        }
        // A vector operand's braces do not end the statement early.
        let vector = with_global(decl, "\tmov.b64 {%r1, %r2}, %rd1;\n\tst.global.u32 [kaas_done], %r1;");
        assert!(matches!(parse(vector.as_bytes(), &StaticLimits::default()), Err(StaticError::ModuleState { line: 11, .. })));
        // An initializer that stores another variable's address.
        let alias = with_global(".global .align 4 .u32 x[4];\n.global .align 8 .u64 p = generic(x);", "\tmov.u32 %r1, 0;");
        let e = parse(alias.as_bytes(), &StaticLimits::default()).expect_err("an address in an initializer");
        assert!(e.to_string().contains("module-scope `.global` variable"), "{e}");
    }
}
