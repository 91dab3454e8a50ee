//! The configuration space as data: each template family's knobs are rows of one table
//! ([`Axis`]), its always-present dimensions the fields of a positional head ([`Field`]),
//! and the entry name, its parsing, the template's `KAAS_*` defines and the label's words
//! are all derived from the two ([`Names`]). A new knob is one row here (and its field in
//! the configuration), and its use in the template: nothing else names it.
//!
//! An entry name is `<prefix><acc>_<layout>_<field>_<field>…<suffix of each row, in table
//! order>`, where a row at its default value adds nothing; parsing strips the rows' suffixes
//! from the end, last row first, then reads the head's fields in order, and a name parses
//! only if printing the result gives the same name back. The label reads the rows in
//! `label_rank` order (the name's order is fixed by the shipped catalog; the label's by
//! the tuner's reports).

use crate::problem::{Acc, Layout};

/// Split-K's reduction across a tile's K-slices. Every value but `None` needs a split count
/// of 2 or more (the slices), and `None` a count of 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Reduction {
    /// Unsplit: one unit per tile.
    #[default]
    None,
    /// Each slice stores its fp32 partial; the last of a tile to finish sums them in slice
    /// order (bit-identical on every run).
    InOrder,
    /// Each slice adds into one fp32 sum per tile in L2 (`red.global.add`); the last bits
    /// vary from run to run.
    Atomic,
    /// The slices are the CTAs of one cluster and reduce through distributed shared memory
    /// in rank order (bit-identical, no workspace).
    Cluster,
    /// Stream-K (Hopper only): the split count is the grid, and the tiles' K-iterations are
    /// cut into that many equal ranges across tile boundaries, shared tiles summed as
    /// `Atomic` sums its slices.
    StreamK,
    /// Hybrid stream-K (Hopper only): whole tiles in the persistent order for all but the
    /// last full wave and the partial one, whose K-iterations alone are cut into ranges.
    StreamKHybrid,
}

impl Reduction {
    /// In table order (the index is the row's value).
    pub const ALL: [Reduction; 6] = [Reduction::None, Reduction::InOrder, Reduction::Atomic, Reduction::Cluster, Reduction::StreamK, Reduction::StreamKHybrid];

    /// Whether slices add into one fp32 sum per tile (the atomic reduction and stream-K).
    pub fn is_atomic(self) -> bool {
        matches!(self, Reduction::Atomic | Reduction::StreamK | Reduction::StreamKHybrid)
    }

    pub fn is_stream_k(self) -> bool {
        matches!(self, Reduction::StreamK | Reduction::StreamKHybrid)
    }

    /// Whether the reduction uses the workspace (counters and partials or sums): every split
    /// but the cluster reduction.
    pub fn uses_workspace(self) -> bool {
        !matches!(self, Reduction::None | Reduction::Cluster)
    }
}

/// The reduction's row values, shared by both split-K families (the mma family takes the
/// first four). `{split}` in a label is the split count.
pub const REDUCTION_KNOBS: [Knob; 6] = [
    Knob::DEFAULT,
    Knob { suffix: "_sk", label: " split {split}", defines: &[("KAAS_SPLITK", 1)] },
    Knob { suffix: "_ska", label: " split {split} atomic", defines: &[("KAAS_SPLITK", 2)] },
    Knob { suffix: "_skc", label: " split {split} cluster", defines: &[("KAAS_SPLITK", 3)] },
    Knob { suffix: "_sks", label: " stream-K {split}", defines: &[("KAAS_SPLITK", 2), ("KAAS_STREAMK", 1)] },
    Knob { suffix: "_skh", label: " stream-K hybrid {split}", defines: &[("KAAS_SPLITK", 2), ("KAAS_STREAMK", 2)] },
];

/// One value of a row: what it adds to the entry name and the label, and the template
/// defines it sets (none: the template's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    pub suffix: &'static str,
    pub label: &'static str,
    pub defines: &'static [(&'static str, u32)],
}

impl Knob {
    /// A row's default value: nothing in the name or the label, no define.
    pub const DEFAULT: Knob = Knob { suffix: "", label: "", defines: &[] };
    /// The value of an on/off row that is on.
    pub const fn flag(suffix: &'static str, label: &'static str, defines: &'static [(&'static str, u32)]) -> Knob {
        Knob { suffix, label, defines }
    }
}

/// The values a row takes.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// One of a closed set; the value is the index, 0 the default.
    Choice(&'static [Knob]),
    /// A count, 1 by default: above 1 it adds `{tag}{n}` to the name and `{label}{n}` to the
    /// label and sets `define` to n. `allowed` lists the counts the template takes.
    Count { tag: &'static str, label: &'static str, define: &'static str, allowed: &'static [u32] },
}

/// One row of a family's table: a knob of its configuration `C`.
pub struct Axis<C> {
    pub name: &'static str,
    pub values: Values,
    /// The label shows the rows in this order.
    pub label_rank: u8,
    /// The row's value in a configuration (a choice's index, or the count).
    pub get: fn(&C) -> u32,
    /// Sets the row's value (as `get` gives it).
    pub set: fn(&mut C, u32),
}

impl<C> Axis<C> {
    /// Whether the row is in the entry name (a launch choice, such as the grid's size, is not).
    pub fn named(&self) -> bool {
        match self.values {
            Values::Choice(knobs) => knobs.iter().any(|k| !k.suffix.is_empty()),
            Values::Count { .. } => true,
        }
    }

    /// The row's suffix in the entry name for a value.
    fn suffix(&self, v: u32) -> String {
        match self.values {
            Values::Choice(knobs) => knobs.get(v as usize).map_or("", |k| k.suffix).to_string(),
            Values::Count { tag, .. } if v > 1 => format!("{tag}{v}"),
            Values::Count { .. } => String::new(),
        }
    }

    /// The row's label text for a value (`split`: the split count).
    fn label(&self, v: u32, split: u32) -> String {
        match self.values {
            Values::Choice(knobs) => knobs.get(v as usize).map_or(String::new(), |k| k.label.replace("{split}", &split.to_string())),
            Values::Count { label, .. } if v > 1 && !label.is_empty() => format!("{label}{v}"),
            Values::Count { .. } => String::new(),
        }
    }

    /// The row's template defines for a value.
    fn defines(&self, v: u32) -> Vec<(&'static str, u32)> {
        match self.values {
            Values::Choice(knobs) => knobs.get(v as usize).map_or(Vec::new(), |k| k.defines.to_vec()),
            Values::Count { define, .. } if v > 1 => vec![(define, v)],
            Values::Count { .. } => Vec::new(),
        }
    }

    /// Every value of the row with its suffix (the default's empty).
    pub fn all_values(&self) -> Vec<(u32, String)> {
        match self.values {
            Values::Choice(knobs) => (0..knobs.len() as u32).map(|v| (v, self.suffix(v))).collect(),
            Values::Count { allowed, .. } => allowed.iter().map(|&v| (v, self.suffix(v))).collect(),
        }
    }

    /// Every define name the row may set.
    pub fn define_names(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = match self.values {
            Values::Choice(knobs) => knobs.iter().flat_map(|k| k.defines.iter().map(|d| d.0)).collect(),
            Values::Count { define, .. } => vec![define],
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Strips the row's suffix from the end of `name` and sets its value in `cfg`; a name
    /// without one leaves the default.
    fn strip<'a>(&self, name: &'a str, cfg: &mut C) -> Option<&'a str> {
        match self.values {
            Values::Choice(knobs) => {
                for (i, k) in knobs.iter().enumerate().filter(|(_, k)| !k.suffix.is_empty()) {
                    if let Some(rest) = name.strip_suffix(k.suffix) {
                        (self.set)(cfg, i as u32);
                        return Some(rest);
                    }
                }
                (self.set)(cfg, 0);
                Some(name)
            }
            Values::Count { tag, .. } => {
                let Some((rest, last)) = name.rsplit_once('_') else {
                    (self.set)(cfg, 1);
                    return Some(name);
                };
                match last.strip_prefix(&tag[1..]).and_then(|n| n.parse::<u32>().ok()) {
                    Some(n) if n > 1 => {
                        (self.set)(cfg, n);
                        Some(rest)
                    }
                    _ => {
                        (self.set)(cfg, 1);
                        Some(name)
                    }
                }
            }
        }
    }
}

/// The entry name's suffixes of a configuration, in table order.
pub fn suffixes<C>(axes: &[Axis<C>], cfg: &C) -> String {
    axes.iter().map(|a| a.suffix((a.get)(cfg))).collect()
}

/// Strips every row's suffix from the end of `name` (last row first) into `cfg`: what is
/// left is the name's positional head. The caller checks that the configuration prints the
/// same name back.
pub fn strip_suffixes<'a, C>(axes: &[Axis<C>], mut name: &'a str, cfg: &mut C) -> Option<&'a str> {
    for a in axes.iter().rev().filter(|a| a.named()) {
        name = a.strip(name, cfg)?;
    }
    Some(name)
}

/// The template defines of a configuration's rows, in table order.
pub fn defines<C>(axes: &[Axis<C>], cfg: &C) -> Vec<(&'static str, u32)> {
    axes.iter().flat_map(|a| a.defines((a.get)(cfg))).collect()
}

/// The label's words of a configuration's rows, in `label_rank` order.
pub fn label<C>(axes: &[Axis<C>], cfg: &C, split: u32) -> String {
    let mut rows: Vec<&Axis<C>> = axes.iter().collect();
    rows.sort_by_key(|a| a.label_rank);
    rows.iter().map(|a| a.label((a.get)(cfg), split)).collect()
}

/// One field of an entry name's positional head: `tag`, then its values joined by `x`
/// (`128x128x32`, `w2x4`, `s4`), each value with the template define it sets.
pub struct Field<C> {
    pub tag: &'static str,
    /// One per value, in order.
    pub defines: &'static [&'static str],
    pub get: fn(&C) -> Vec<u32>,
    /// Sets the values (as many as `defines`); false where the field takes no such values
    /// (a constant field, such as the Hopper family's tile group, takes only its own).
    pub set: fn(&mut C, &[u32]) -> bool,
}

/// A code's identity within its family: see [`Names::code_key`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeKey(Vec<u32>);

/// A head [`Field`] of plain `u32` fields of the configuration, each with its define:
/// `head_field!("w", "KAAS_WARPS_M" => warps_m, "KAAS_WARPS_N" => warps_n)`.
macro_rules! head_field {
    ($tag:literal, $($define:literal => $f:ident),+) => {
        $crate::kernels::axes::Field {
            tag: $tag,
            defines: &[$($define),+],
            get: |c| vec![$(c.$f),+],
            set: |c, v| {
                let &[$($f),+] = v else { return false };
                $(c.$f = $f;)+
                true
            },
        }
    };
}
pub(crate) use head_field;

/// A family's names and defines: its prefix, its head's fields and its table of rows.
pub struct Names<C: 'static> {
    pub prefix: &'static str,
    pub head: &'static [Field<C>],
    pub axes: &'static [Axis<C>],
    /// Whether the template reads `KAAS_ACC_F32` and `KAAS_LAYOUT_TN` (a family that builds
    /// one accumulator and layout only reads neither).
    pub acc_layout_defines: bool,
}

impl<C: Copy> Names<C> {
    /// The entry name of a configuration.
    pub fn entry(&self, cfg: &C, acc: Acc, layout: Layout) -> String {
        let mut name = format!("{}{}_{}", self.prefix, acc.as_str(), layout.as_str());
        for f in self.head {
            let values: Vec<String> = (f.get)(cfg).iter().map(u32::to_string).collect();
            name.push('_');
            name.push_str(f.tag);
            name.push_str(&values.join("x"));
        }
        name.push_str(&suffixes(self.axes, cfg));
        name
    }

    /// The configuration (the rest of it from `base`), accumulator and layout a name
    /// encodes, if it prints the same name back (one spelling per code); the caller adds
    /// its family's own checks (`validate`).
    pub fn parse(&self, entry: &str, mut cfg: C) -> Option<(C, Acc, Layout)> {
        let head = strip_suffixes(self.axes, entry.strip_prefix(self.prefix)?, &mut cfg)?;
        let parts: Vec<&str> = head.split('_').collect();
        let [acc, layout, fields @ ..] = &parts[..] else { return None };
        if fields.len() != self.head.len() {
            return None;
        }
        for (f, text) in self.head.iter().zip(fields) {
            let values: Vec<u32> = text.strip_prefix(f.tag)?.split('x').map(|d| d.parse().ok()).collect::<Option<_>>()?;
            if values.len() != f.defines.len() || !(f.set)(&mut cfg, &values) {
                return None;
            }
        }
        let (acc, layout) = (acc.parse().ok()?, layout.parse().ok()?);
        (self.entry(&cfg, acc, layout) == entry).then_some((cfg, acc, layout))
    }

    /// The template's defines: the head's, the accumulator and layout (where the template
    /// reads them), each row's, and the entry name.
    pub fn defines(&self, cfg: &C, acc: Acc, layout: Layout) -> Vec<(String, String)> {
        let acc_layout = [("KAAS_ACC_F32", u32::from(acc == Acc::F32)), ("KAAS_LAYOUT_TN", u32::from(layout == Layout::Tn))];
        self.head
            .iter()
            .flat_map(|f| f.defines.iter().copied().zip((f.get)(cfg)))
            .chain(acc_layout.into_iter().filter(|_| self.acc_layout_defines))
            .chain(defines(self.axes, cfg))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([("KAAS_ENTRY".to_string(), self.entry(cfg, acc, layout))])
            .collect()
    }

    /// What tells two codes apart (one PTX each, for one accumulator and layout): the
    /// head's values and every named row's, so a launch choice is not in it.
    pub fn code_key(&self, cfg: &C) -> CodeKey {
        let head = self.head.iter().flat_map(|f| (f.get)(cfg));
        CodeKey(head.chain(self.axes.iter().filter(|a| a.named()).map(|a| (a.get)(cfg))).collect())
    }

    /// Every define the head sets, the accumulator's and layout's included where read.
    pub fn head_define_names(&self) -> Vec<&'static str> {
        let acc_layout = ["KAAS_ACC_F32", "KAAS_LAYOUT_TN"].into_iter().filter(|_| self.acc_layout_defines);
        self.head.iter().flat_map(|f| f.defines.iter().copied()).chain(acc_layout).collect()
    }
}

/// The serialized form of a table-driven family's configuration (tune state files): the
/// code's part of its entry name, the split count (a launch parameter, 1 omitted) and each
/// launch choice's row (the rows not in the name) under the row's name, omitted at its
/// default; an on/off row as a bool. Derived from [`Names`] alone, so a new row needs no
/// edit here or in the family: `{"code":"128x256x64_s4_c2_m1_g16_dr_ec","persistent":true}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CodeForm {
    pub code: String,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub split: u32,
    #[serde(flatten)]
    pub launch: std::collections::BTreeMap<String, serde_json::Value>,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// A family's serde through [`CodeForm`]: `code_form!(MmaConfig, NAMES, blank)` for a
/// configuration with a `split` field and a `validate()` (the family's checks, applied to
/// every form read), `blank` the configuration the name's values are set into.
macro_rules! code_form {
    ($config:ty, $names:expr, $blank:expr) => {
        impl From<$config> for $crate::kernels::axes::CodeForm {
            fn from(c: $config) -> Self {
                $names.to_form(&c, c.split)
            }
        }

        impl TryFrom<$crate::kernels::axes::CodeForm> for $config {
            type Error = String;
            fn try_from(f: $crate::kernels::axes::CodeForm) -> Result<Self, String> {
                let (mut cfg, split) = $names.from_form(&f, $blank)?;
                cfg.split = split;
                cfg.validate()?;
                Ok(cfg)
            }
        }
    };
}
pub(crate) use code_form;

/// The name every code's part of an entry name is printed and parsed under (the code does
/// not depend on them).
const FORM_ACC_LAYOUT: &str = "f32_tn_";

impl<C: Copy> Names<C> {
    /// The serialized form of a configuration with its split count.
    pub fn to_form(&self, cfg: &C, split: u32) -> CodeForm {
        let entry = self.entry(cfg, Acc::F32, Layout::Tn);
        let code = entry[self.prefix.len() + FORM_ACC_LAYOUT.len()..].to_string();
        let launch = self
            .axes
            .iter()
            .filter(|a| !a.named())
            .filter_map(|a| {
                let v = (a.get)(cfg);
                match a.values {
                    Values::Choice(knobs) if knobs.len() == 2 => (v != 0).then(|| (a.name.to_string(), serde_json::Value::Bool(true))),
                    Values::Choice(_) => (v != 0).then(|| (a.name.to_string(), v.into())),
                    Values::Count { .. } => (v != 1).then(|| (a.name.to_string(), v.into())),
                }
            })
            .collect();
        CodeForm { code, split, launch }
    }

    /// The configuration (the rest of it from `base`) and split count a form holds; the
    /// caller adds its family's checks (`validate`).
    pub fn from_form(&self, form: &CodeForm, base: C) -> Result<(C, u32), String> {
        let entry = format!("{}{FORM_ACC_LAYOUT}{}", self.prefix, form.code);
        let (mut cfg, _, _) = self.parse(&entry, base).ok_or_else(|| format!("`{}` is not a code of {}…", form.code, self.prefix))?;
        for a in self.axes.iter().filter(|a| !a.named()) {
            let default = if matches!(a.values, Values::Count { .. }) { 1 } else { 0 };
            (a.set)(&mut cfg, default);
        }
        for (key, value) in &form.launch {
            let a = self.axes.iter().find(|a| !a.named() && a.name == key).ok_or_else(|| format!("`{key}` is not a launch choice of {}…", self.prefix))?;
            let v = match value {
                serde_json::Value::Bool(b) => u32::from(*b),
                other => other.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| format!("`{key}`: {other} is not a value"))?,
            };
            if !a.all_values().iter().any(|(x, _)| *x == v) {
                return Err(format!("`{key}`: {v} is not one of its values"));
            }
            (a.set)(&mut cfg, v);
        }
        Ok((cfg, form.split))
    }
}

/// Checks that a table is data a name can carry: no two values of any rows share a
/// suffix, no define is set by two rows, and every value's suffix parses back to it.
#[cfg(test)]
pub fn check_table<C: Copy>(axes: &[Axis<C>], base: C) -> Vec<String> {
    let mut problems = Vec::new();
    let mut suffixes: Vec<(String, &str)> = Vec::new();
    let mut defines: Vec<(&str, &str)> = Vec::new();
    for a in axes {
        for (v, s) in a.all_values() {
            if !s.is_empty() {
                if let Some((_, other)) = suffixes.iter().find(|(t, _)| *t == s) {
                    problems.push(format!("suffix {s} of {} is also {other}'s", a.name));
                }
                suffixes.push((s.clone(), a.name));
            }
            let mut cfg = base;
            (a.set)(&mut cfg, v);
            if (a.get)(&cfg) != v {
                problems.push(format!("{} does not keep value {v}", a.name));
            }
            if !a.named() {
                // A launch choice: not in the name.
                continue;
            }
            if s.is_empty() && v != (a.get)(&base) {
                problems.push(format!("value {v} of {} has no suffix", a.name));
            }
            let name = format!("head{}", a.suffix(v));
            let mut back = base;
            match strip_suffixes(axes, &name, &mut back) {
                Some("head") if (a.get)(&back) == v => {}
                other => problems.push(format!("{name} parses to {other:?}, value {}, not {v} of {}", (a.get)(&back), a.name)),
            }
        }
        for d in a.define_names() {
            if let Some((_, other)) = defines.iter().find(|(n, _)| *n == d) {
                problems.push(format!("define {d} of {} is also set by {other}", a.name));
            }
            defines.push((d, a.name));
        }
    }
    problems
}

/// Checks a family's names as [`check_table`] checks its rows, and its defines against its
/// templates: no define is both the head's and a row's, every one is read by one of the
/// templates (`#ifndef KAAS_…`), and the templates read nothing else from outside but the
/// entry name and `extra` (switches no configuration sets, such as diagnostics).
#[cfg(test)]
pub fn check_names<C: Copy>(names: &Names<C>, base: C, templates: &[&str], extra: &[&str]) -> Vec<String> {
    let mut problems = check_table(names.axes, base);
    let head = names.head_define_names();
    let rows: Vec<&str> = names.axes.iter().flat_map(|a| a.define_names()).collect();
    for d in &head {
        if rows.contains(d) {
            problems.push(format!("{d} is the head's and a row's"));
        }
    }
    for d in head.iter().chain(&rows) {
        if !templates.iter().any(|t| t.contains(&format!("#ifndef {d}\n"))) {
            problems.push(format!("no template reads {d}"));
        }
    }
    for line in templates.iter().flat_map(|t| t.lines()).filter_map(|l| l.strip_prefix("#ifndef KAAS_")) {
        let d = format!("KAAS_{}", line.trim());
        if !(head.contains(&d.as_str()) || rows.contains(&d.as_str()) || d == "KAAS_ENTRY" || extra.contains(&d.as_str())) {
            problems.push(format!("a template reads {d}, which no field or row sets"));
        }
    }
    problems
}
