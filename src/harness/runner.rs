//! The side-by-side benchmark (docs/verification.md): every contender is timed in the
//! same process, round after round, in a fresh random order each round, with its inputs
//! rotating over several buffer sets, until every median's 95% interval is within
//! ±`target_rel` or the time budget is spent.
//!
//! The round loop is written against [`SampleSource`], not the GPU, so that its decisions
//! (how many launches per sample, in which order, when to stop) are tested with a fake
//! clock and fake timings; [`benchmark`] binds it to a real device.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::bench::stats::{self, Interleaver, Mode, Timing};
use crate::gpu::{Contender, EventTimer, Gpu, GpuError, GraphTimer};
use crate::problem::Layout;

/// One graph replay should last about this long: below it, the graph's own launch and
/// the event resolution (~0.5 µs) would weigh on a per-launch time of a few µs.
pub const TARGET_REPLAY_US: f64 = 100.0;
/// At most this many launches in one sample, however short the kernel.
pub const MAX_LAUNCHES: u32 = 512;
/// `server` mode: the idle gap before each single launch is drawn uniformly from this
/// range (µs). Long enough for the queue to drain, short enough to keep clocks up.
pub const SERVER_GAP_US: (u64, u64) = (100, 2000);
/// `paced` mode: the pause before each launch is the contender's own launch time, held
/// within this range (µs).
pub const PACED_PAUSE_US: (f64, f64) = (20.0, 20_000.0);

#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The modes to time, each every round (duplicates are ignored). Rank by `graph`.
    pub modes: Vec<Mode>,
    /// Stop once every median's 95% interval is within ± this fraction (0.01 = ±1%).
    pub target_rel: f64,
    /// Wall-clock limit of the whole benchmark, set-up included; a round that would end
    /// past it is not started (at least one round always runs).
    pub budget: Duration,
    /// Rounds to run even when the intervals are already tight.
    pub min_rounds: usize,
    pub max_rounds: usize,
    /// Seeds the contender order of every round and the `server` gaps.
    pub seed: u64,
    /// Launches per sample (graph size R, and the back-to-back count of `offline`);
    /// 0 = choose per contender so that one sample takes about [`TARGET_REPLAY_US`].
    pub graph_launches: u32,
    /// At least this many launches per sample, above [`MAX_LAUNCHES`] if need be: an
    /// L2-cold rotation sets it to its number of buffer sets, so that every sample walks
    /// the whole rotation and no launch finds its inputs still in the cache.
    pub min_launches: u32,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            modes: vec![Mode::Graph, Mode::Offline, Mode::Server],
            target_rel: stats::DEFAULT_TARGET_REL,
            budget: Duration::from_secs(5),
            min_rounds: 10,
            max_rounds: 1000,
            seed: 0,
            graph_launches: 0,
            min_launches: 1,
        }
    }
}

/// One contender's summary per mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContenderTimings {
    pub label: String,
    pub timings: BTreeMap<Mode, Timing>,
    /// Rounds in which it was sampled.
    pub rounds: usize,
    /// Launches per `graph` and `offline` sample (R).
    pub launches_per_sample: u32,
}

/// What the GPU reported about itself at the start or end of a benchmark. Each field is
/// `None` when no source could tell it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceState {
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
}

impl DeviceState {
    /// Reads the state of GPU `index` (nvidia-smi's numbering) from `nvidia-smi`, when it
    /// is installed. cudarc 0.19 has no NVML binding; a subprocess keeps this optional.
    pub fn read(index: u32) -> DeviceState {
        let out = std::process::Command::new("nvidia-smi")
            .args([
                "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                "--format=csv,noheader,nounits",
                &format!("--id={index}"),
            ])
            .output();
        match out {
            Ok(o) if o.status.success() => Self::parse(&String::from_utf8_lossy(&o.stdout)),
            _ => DeviceState::default(),
        }
    }

    /// Parses one line `sm, mem, temperature, power` (e.g. `1980, 2619, 45, 128.50`);
    /// `[N/A]` or garbage leaves that field `None`.
    pub fn parse(text: &str) -> DeviceState {
        let line = text.lines().next().unwrap_or("");
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let num = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).filter(|v| v.is_finite());
        let mhz = |i: usize| num(i).filter(|v| *v >= 0.0 && *v < 1e6).map(|v| v.round() as u32);
        DeviceState { sm_clock_mhz: mhz(0), mem_clock_mhz: mhz(1), temperature_c: num(2), power_w: num(3) }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub contenders: Vec<ContenderTimings>,
    /// Every contender's median interval within the target in every mode.
    pub converged: bool,
    pub rounds: usize,
    pub elapsed: Duration,
    pub device_start: DeviceState,
    pub device_end: DeviceState,
}

/// Where samples come from: the GPU in [`benchmark`], a fake in the tests.
pub trait SampleSource {
    fn contenders(&self) -> usize;
    /// µs per launch of contender `c` over a quick sample of `launches` launches, to size
    /// its samples.
    fn probe(&mut self, c: usize, launches: u32) -> Result<f64, GpuError>;
    /// Readies contender `c` for samples of `launches` launches (captures its graphs).
    fn prepare(&mut self, c: usize, launches: u32) -> Result<(), GpuError>;
    /// One sample of contender `c` in `mode`, in µs per launch.
    fn sample(&mut self, c: usize, mode: Mode, round: usize) -> Result<f64, GpuError>;
}

/// Launches per sample for a contender taking `per_launch_us`: enough for about
/// [`TARGET_REPLAY_US`], at least 1, at most [`MAX_LAUNCHES`].
pub fn launches_for(per_launch_us: f64) -> u32 {
    if !per_launch_us.is_finite() || per_launch_us <= 0.0 {
        return MAX_LAUNCHES;
    }
    (TARGET_REPLAY_US / per_launch_us).ceil().clamp(1.0, MAX_LAUNCHES as f64) as u32
}

/// Sizes the samples of contender `c`: a one-launch probe, then, for short kernels, a
/// second probe with about as many launches as the first suggests (the one-launch graph
/// overstates a short kernel by the graph's own launch), and the count from that.
pub fn choose_launches(src: &mut dyn SampleSource, c: usize) -> Result<u32, GpuError> {
    let one = src.probe(c, 1)?;
    let first = launches_for(one);
    if first == 1 {
        return Ok(1);
    }
    Ok(launches_for(src.probe(c, first)?))
}

/// The raw outcome of the round loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Rounds {
    /// `samples[c][m]`: contender `c`'s samples in `modes[m]`, µs per launch.
    pub samples: Vec<Vec<Vec<f64>>>,
    pub modes: Vec<Mode>,
    pub launches: Vec<u32>,
    pub rounds: usize,
    pub converged: bool,
}

/// Whether every contender's samples in every mode meet the stopping rule.
fn all_converged(samples: &[Vec<Vec<f64>>], target_rel: f64) -> bool {
    samples.iter().all(|per_mode| {
        let refs: Vec<&[f64]> = per_mode.iter().map(Vec::as_slice).collect();
        stats::converged(&refs, target_rel)
    })
}

/// The round loop: sizes every contender's samples, then runs rounds — per mode, every
/// contender once in a fresh random order — until the stopping rule holds (and at least
/// `min_rounds` ran), `max_rounds` ran, or the next round would overrun the budget.
/// `elapsed` is the clock (time since the benchmark began).
pub fn run_rounds(
    src: &mut dyn SampleSource,
    cfg: &BenchConfig,
    elapsed: &dyn Fn() -> Duration,
) -> Result<Rounds, GpuError> {
    let mut modes: Vec<Mode> = Vec::new();
    for m in &cfg.modes {
        if !modes.contains(m) {
            modes.push(*m);
        }
    }
    let n = src.contenders();
    if modes.is_empty() || n == 0 {
        return Err(GpuError::Refused {
            context: "benchmark".into(),
            message: "needs at least one mode and one contender".into(),
        });
    }
    let mut launches = Vec::with_capacity(n);
    for c in 0..n {
        let r = if cfg.graph_launches > 0 { cfg.graph_launches.min(MAX_LAUNCHES) } else { choose_launches(src, c)? };
        let r = r.max(cfg.min_launches);
        src.prepare(c, r)?;
        launches.push(r);
    }
    let mut order = Interleaver::new(cfg.seed);
    let mut samples = vec![vec![Vec::new(); modes.len()]; n];
    let loop_start = elapsed();
    let mut rounds = 0;
    loop {
        for (m, mode) in modes.iter().enumerate() {
            for c in order.next_round(n) {
                samples[c][m].push(src.sample(c, *mode, rounds)?);
            }
        }
        rounds += 1;
        let converged = all_converged(&samples, cfg.target_rel);
        if (converged && rounds >= cfg.min_rounds) || rounds >= cfg.max_rounds.max(1) {
            return Ok(Rounds { samples, modes, launches, rounds, converged });
        }
        let now = elapsed();
        let per_round = now.saturating_sub(loop_start) / rounds as u32;
        if now + per_round > cfg.budget {
            return Ok(Rounds { samples, modes, launches, rounds, converged });
        }
    }
}

/// Summarises the samples of the round loop; fails on a contender whose samples are not
/// positive finite times (a broken timer).
pub fn summarise(rounds: &Rounds, labels: &[String], flops: f64) -> Result<Vec<ContenderTimings>, GpuError> {
    let mut out = Vec::with_capacity(labels.len());
    for (c, label) in labels.iter().enumerate() {
        let mut timings = BTreeMap::new();
        for (m, mode) in rounds.modes.iter().enumerate() {
            let samples = rounds.samples.get(c).and_then(|s| s.get(m)).map(Vec::as_slice).unwrap_or(&[]);
            let t = Timing::from_samples(samples, flops).ok_or_else(|| GpuError::Refused {
                context: format!("benchmark of {label}"),
                message: format!("no valid {} samples: {samples:?}", mode.as_str()),
            })?;
            timings.insert(*mode, t);
        }
        out.push(ContenderTimings {
            label: label.clone(),
            timings,
            rounds: rounds.rounds,
            launches_per_sample: rounds.launches.get(c).copied().unwrap_or(1),
        });
    }
    Ok(out)
}

/// A contender over several buffer sets: each enqueue runs the next set's binding, so
/// the launches of one graph or one back-to-back batch walk through the sets.
pub(crate) struct Rotation<'s, 'c> {
    members: &'s [&'c dyn Contender],
    next: Cell<usize>,
}

impl<'s, 'c> Rotation<'s, 'c> {
    /// Starts at the first set.
    pub(crate) fn new(members: &'s [&'c dyn Contender]) -> Self {
        Rotation { members, next: Cell::new(0) }
    }

    fn start_at(&self, set: usize) {
        self.next.set(set % self.members.len());
    }
}

impl Contender for Rotation<'_, '_> {
    fn label(&self) -> String {
        self.members.first().map(|c| c.label()).unwrap_or_default()
    }
    fn enqueue(&self, gpu: &Gpu) -> Result<(), GpuError> {
        let i = self.next.get();
        self.next.set((i + 1) % self.members.len());
        self.members[i].enqueue(gpu)
    }
}

/// The device as a [`SampleSource`]: graphs of R launches (one per starting buffer set
/// when R is smaller than the number of sets, so that every set gets timed), events for
/// direct launches, random idle gaps for `server` and device-side pauses for `paced`.
struct DeviceSource<'g, 's, 'c> {
    gpu: &'g Gpu,
    rotations: Vec<Rotation<'s, 'c>>,
    graphs: Vec<Vec<GraphTimer>>,
    launches: Vec<u32>,
    /// Per contender, µs per launch of its prepared graph's warm-up replay: the length
    /// of its `paced` pauses (the device busy half the time, at its own pace).
    launch_us: Vec<f64>,
    events: EventTimer,
    rng: StdRng,
}

impl SampleSource for DeviceSource<'_, '_, '_> {
    fn contenders(&self) -> usize {
        self.rotations.len()
    }

    fn probe(&mut self, c: usize, launches: u32) -> Result<f64, GpuError> {
        let rot = &self.rotations[c];
        rot.start_at(0);
        let timer = GraphTimer::capture(self.gpu, rot, launches)?;
        timer.replay(self.gpu)?;
        timer.replay(self.gpu)
    }

    fn prepare(&mut self, c: usize, launches: u32) -> Result<(), GpuError> {
        let rot = &self.rotations[c];
        let sets = rot.members.len();
        let starts = if launches as usize >= sets { 1 } else { sets };
        let mut graphs = Vec::with_capacity(starts);
        for s in 0..starts {
            // The capture's warm-up run takes one set; the graph starts at the next, `s`.
            rot.start_at(s + sets - 1);
            let timer = GraphTimer::capture(self.gpu, rot, launches)?;
            self.launch_us[c] = timer.replay(self.gpu)?;
            graphs.push(timer);
        }
        self.graphs[c] = graphs;
        self.launches[c] = launches;
        Ok(())
    }

    fn sample(&mut self, c: usize, mode: Mode, round: usize) -> Result<f64, GpuError> {
        match mode {
            Mode::Graph => {
                let graphs = &self.graphs[c];
                match graphs.get(round % graphs.len().max(1)) {
                    Some(g) => g.replay(self.gpu),
                    None => Err(GpuError::refused(self.rotations[c].label(), "sampled before it was prepared")),
                }
            }
            Mode::Offline => self.events.time_launches(self.gpu, &self.rotations[c], self.launches[c]),
            Mode::Server => {
                self.gpu.synchronize()?;
                let gap = self.rng.random_range(SERVER_GAP_US.0..=SERVER_GAP_US.1);
                std::thread::sleep(Duration::from_micros(gap));
                self.events.time_launches(self.gpu, &self.rotations[c], 1)
            }
            Mode::Paced => {
                let pause = Duration::from_secs_f64(self.launch_us[c].clamp(PACED_PAUSE_US.0, PACED_PAUSE_US.1) * 1e-6);
                self.events.time_paced(self.gpu, &self.rotations[c], pause)
            }
        }
    }
}

/// Times `sets[c][s]` — contender `c` bound to buffer set `s` — side by side (see the
/// module docs). `flops` is the work of one product, for TFLOP/s. The device state is
/// read before and after.
pub fn benchmark(gpu: &Gpu, sets: &[Vec<&dyn Contender>], flops: f64, cfg: &BenchConfig) -> Result<BenchReport, GpuError> {
    let started = Instant::now();
    if let Some(c) = sets.iter().position(|s| s.is_empty()) {
        return Err(GpuError::Refused {
            context: "benchmark".into(),
            message: format!("contender {c} is bound to no buffer set"),
        });
    }
    let device_start = DeviceState::read(gpu.facts().ordinal);
    let rotations: Vec<Rotation> = sets.iter().map(|s| Rotation::new(s.as_slice())).collect();
    let labels: Vec<String> = rotations.iter().map(|r| r.label()).collect();
    let mut src = DeviceSource {
        gpu,
        graphs: (0..rotations.len()).map(|_| Vec::new()).collect(),
        launches: vec![1; rotations.len()],
        launch_us: vec![PACED_PAUSE_US.0; rotations.len()],
        rotations,
        events: EventTimer::new(gpu)?,
        rng: StdRng::seed_from_u64(cfg.seed ^ 0x5e7e_12a9),
    };
    let rounds = run_rounds(&mut src, cfg, &|| started.elapsed())?;
    drop(src);
    let contenders = summarise(&rounds, &labels, flops)?;
    Ok(BenchReport {
        contenders,
        converged: rounds.converged,
        rounds: rounds.rounds,
        elapsed: started.elapsed(),
        device_start,
        device_end: DeviceState::read(gpu.facts().ordinal),
    })
}

/// The baseline libraries (docs/verification.md, the benchmark), as the catalog names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Library {
    /// `cublasGemmEx`, default algorithm.
    Cublas,
    /// cuBLASLt, the heuristic's first choice.
    CublasltHeuristic,
    /// cuBLASLt, the fastest of up to 100 heuristic algorithms.
    CublasltAutotune,
}

impl Library {
    pub const ALL: [Library; 3] = [Library::Cublas, Library::CublasltHeuristic, Library::CublasltAutotune];
    pub fn as_str(self) -> &'static str {
        match self {
            Library::Cublas => "cublas",
            Library::CublasltHeuristic => "cublaslt_heuristic",
            Library::CublasltAutotune => "cublaslt_autotune",
        }
    }
}

/// Which contender of a report is which baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaselineSlot {
    pub contender: usize,
    pub library: Library,
    pub layout: Layout,
}

/// The `speedups` table a run carries and the catalog reads: per mode,
/// `{library}_{layout}` and `{library}_max` (against the faster of its layouts), each
/// baseline median / candidate median (> 1: the candidate is faster). Modes or
/// baselines missing from the report are left out.
pub fn speedups(report: &BenchReport, candidate: usize, baselines: &[BaselineSlot]) -> serde_json::Value {
    let mut table = serde_json::Map::new();
    let Some(cand) = report.contenders.get(candidate) else { return serde_json::Value::Object(table) };
    for (mode, ct) in &cand.timings {
        let mut row = serde_json::Map::new();
        for lib in Library::ALL {
            let mut of_lib = Vec::new();
            for slot in baselines.iter().filter(|s| s.library == lib) {
                if let Some(t) = report.contenders.get(slot.contender).and_then(|c| c.timings.get(mode)) {
                    row.insert(format!("{}_{}", lib.as_str(), slot.layout.as_str()), stats::speedup(ct, t).value.into());
                    of_lib.push(t);
                }
            }
            if let Some(best) = stats::fastest(of_lib) {
                row.insert(format!("{}_max", lib.as_str()), stats::speedup(ct, best).value.into());
            }
        }
        table.insert(mode.as_str().to_string(), serde_json::Value::Object(row));
    }
    serde_json::Value::Object(table)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::verify::rng::unit_at;

    /// A fake device: contender `c` takes `base[c]` µs per launch with multiplicative
    /// noise of ±`noise[c]`, plus `overhead` µs per sample (a graph launch); each sample
    /// advances the shared fake clock by what it would take on a device.
    struct Fake {
        base: Vec<f64>,
        noise: Vec<f64>,
        overhead: f64,
        clock: Rc<Cell<Duration>>,
        prepared: Vec<Option<u32>>,
        calls: Vec<(usize, Mode, usize)>,
        draws: u64,
    }

    impl Fake {
        fn new(base: &[f64], noise: &[f64]) -> Fake {
            Fake {
                base: base.to_vec(),
                noise: noise.to_vec(),
                overhead: 4.0,
                clock: Rc::new(Cell::new(Duration::ZERO)),
                prepared: vec![None; base.len()],
                calls: Vec::new(),
                draws: 0,
            }
        }
        fn spend(&self, us: f64) {
            self.clock.set(self.clock.get() + Duration::from_secs_f64(us * 1e-6));
        }
    }

    impl SampleSource for Fake {
        fn contenders(&self) -> usize {
            self.base.len()
        }
        fn probe(&mut self, c: usize, launches: u32) -> Result<f64, GpuError> {
            let total = self.base[c] * launches as f64 + self.overhead;
            self.spend(total);
            Ok(total / launches as f64)
        }
        fn prepare(&mut self, c: usize, launches: u32) -> Result<(), GpuError> {
            self.prepared[c] = Some(launches);
            Ok(())
        }
        fn sample(&mut self, c: usize, mode: Mode, round: usize) -> Result<f64, GpuError> {
            let r = self.prepared[c].ok_or_else(|| GpuError::refused("fake", "not prepared"))?;
            self.calls.push((c, mode, round));
            self.draws += 1;
            let u = unit_at(c as u64 * 7919 + 1, self.draws) * 2.0 - 1.0;
            let us = self.base[c] * (1.0 + self.noise[c] * u);
            self.spend(us * r as f64 + self.overhead);
            Ok(us)
        }
    }

    fn cfg(budget_ms: u64) -> BenchConfig {
        BenchConfig {
            modes: vec![Mode::Graph, Mode::Offline],
            budget: Duration::from_millis(budget_ms),
            ..BenchConfig::default()
        }
    }

    fn run(fake: &mut Fake, cfg: &BenchConfig) -> Rounds {
        let clock = fake.clock.clone();
        run_rounds(fake, cfg, &move || clock.get()).expect("fake never fails")
    }

    #[test]
    fn samples_are_sized_to_about_a_hundred_microseconds_and_bounded() {
        assert_eq!(launches_for(2.0), 50);
        assert_eq!(launches_for(100.0), 1);
        assert_eq!(launches_for(12_000.0), 1);
        assert_eq!(launches_for(0.01), MAX_LAUNCHES);
        assert_eq!(launches_for(f64::NAN), MAX_LAUNCHES);
        // A 2 µs kernel: the one-launch probe reads 6 µs (graph overhead), the second
        // probe of 17 launches reads ~2.24 µs, so R = ⌈100 / 2.24⌉.
        let mut fake = Fake::new(&[2.0, 12_000.0], &[0.0, 0.0]);
        assert_eq!(choose_launches(&mut fake, 0).expect("fake"), 45);
        assert_eq!(choose_launches(&mut fake, 1).expect("fake"), 1);
    }

    #[test]
    fn steady_contenders_stop_converged_after_the_minimum_rounds() {
        let mut fake = Fake::new(&[10.0, 20.0, 30.0], &[0.002, 0.002, 0.002]);
        let r = run(&mut fake, &cfg(5_000));
        assert!(r.converged);
        assert_eq!(r.rounds, BenchConfig::default().min_rounds);
        for per_mode in &r.samples {
            assert!(per_mode.iter().all(|s| s.len() == r.rounds));
        }
        assert_eq!(r.launches, vec![10, 5, 4]);
    }

    #[test]
    fn a_noisy_contender_keeps_everyone_sampling_until_it_converges() {
        let mut fake = Fake::new(&[10.0, 10.0], &[0.001, 0.08]);
        let r = run(&mut fake, &cfg(60_000));
        assert!(r.converged, "{} rounds", r.rounds);
        assert!(r.rounds > 20, "±8% noise cannot reach ±1% in {} rounds", r.rounds);
        let noisy: Vec<&[f64]> = r.samples[1].iter().map(Vec::as_slice).collect();
        assert!(stats::converged(&noisy, 0.01));
        let fewer: Vec<&[f64]> = r.samples[1].iter().map(|s| &s[..s.len() - 5]).collect();
        assert!(!stats::converged(&fewer, 0.01), "stopped late");
    }

    #[test]
    fn the_budget_stops_an_unconverged_run_before_it_overruns() {
        // Each round costs ~2 × 2 × (1 launch of 20 ms): 80 ms; the budget is 0.5 s.
        let mut fake = Fake::new(&[20_000.0, 20_000.0], &[0.3, 0.3]);
        let r = run(&mut fake, &cfg(500));
        assert!(!r.converged);
        let spent = fake.clock.get();
        assert!(spent <= Duration::from_millis(500) + Duration::from_millis(200), "spent {spent:?}");
        assert!(r.rounds >= 4, "{} rounds", r.rounds);
        // And at least one round even with no budget at all.
        let mut fake = Fake::new(&[20_000.0], &[0.3]);
        assert_eq!(run(&mut fake, &cfg(0)).rounds, 1);
    }

    #[test]
    fn max_rounds_caps_the_run() {
        let mut fake = Fake::new(&[10.0], &[0.5]);
        let c = BenchConfig { max_rounds: 7, ..cfg(60_000) };
        let r = run(&mut fake, &c);
        assert_eq!(r.rounds, 7);
        assert!(!r.converged);
    }

    #[test]
    fn every_round_visits_every_contender_once_per_mode_in_a_changing_order() {
        let mut fake = Fake::new(&[10.0, 11.0, 12.0, 13.0], &[0.0; 4]);
        let c = BenchConfig { graph_launches: 3, min_rounds: 30, ..cfg(60_000) };
        let r = run(&mut fake, &c);
        assert_eq!(r.launches, vec![3; 4]);
        assert_eq!(fake.prepared, vec![Some(3); 4]);
        let mut orders = std::collections::BTreeSet::new();
        for chunk in fake.calls.chunks(4) {
            let mut seen: Vec<usize> = chunk.iter().map(|(c, _, _)| *c).collect();
            orders.insert(seen.clone());
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1, 2, 3]);
            assert!(chunk.iter().all(|(_, m, round)| *m == chunk[0].1 && *round == chunk[0].2));
        }
        assert!(orders.len() > 10, "only {} distinct orders in {} rounds", orders.len(), r.rounds);
        // Same seed, same orders.
        let mut again = Fake::new(&[10.0, 11.0, 12.0, 13.0], &[0.0; 4]);
        run(&mut again, &c);
        assert_eq!(again.calls, fake.calls);
    }

    #[test]
    fn a_cold_rotation_sets_a_floor_on_launches_per_sample_above_the_cap() {
        // A 10 µs kernel would get R = 10; a rotation of 2,000 sets needs every sample to
        // walk all of them, beyond MAX_LAUNCHES.
        let mut fake = Fake::new(&[10.0, 20_000.0], &[0.0, 0.0]);
        let r = run(&mut fake, &BenchConfig { min_launches: 2_000, max_rounds: 2, ..cfg(60_000) });
        assert_eq!(r.launches, vec![2_000, 2_000]);
        // A floor below what the probe chooses changes nothing.
        let mut fake = Fake::new(&[10.0], &[0.0]);
        assert_eq!(run(&mut fake, &BenchConfig { min_launches: 3, max_rounds: 2, ..cfg(60_000) }).launches, vec![10]);
    }

    #[test]
    fn no_modes_or_no_contenders_is_refused() {
        let mut fake = Fake::new(&[10.0], &[0.0]);
        let clock = fake.clock.clone();
        let c = BenchConfig { modes: vec![], ..cfg(1000) };
        assert!(run_rounds(&mut fake, &c, &move || clock.get()).is_err());
        let mut empty = Fake::new(&[], &[]);
        let clock = empty.clock.clone();
        assert!(run_rounds(&mut empty, &cfg(1000), &move || clock.get()).is_err());
    }

    fn report_of(medians: &[(f64, f64)]) -> BenchReport {
        let rounds = Rounds {
            samples: medians.iter().map(|&(g, o)| vec![vec![g; 10], vec![o; 10]]).collect(),
            modes: vec![Mode::Graph, Mode::Offline],
            launches: vec![1; medians.len()],
            rounds: 10,
            converged: true,
        };
        let labels: Vec<String> = (0..medians.len()).map(|i| format!("c{i}")).collect();
        BenchReport {
            contenders: summarise(&rounds, &labels, 1e9).expect("valid"),
            converged: true,
            rounds: 10,
            elapsed: Duration::ZERO,
            device_start: DeviceState::default(),
            device_end: DeviceState::default(),
        }
    }

    #[test]
    fn speedups_divide_baseline_by_candidate_and_max_takes_the_faster_layout() {
        // candidate, cuBLAS nn, cuBLAS tn, heuristic tn.
        let report = report_of(&[(100.0, 110.0), (120.0, 150.0), (110.0, 160.0), (130.0, 140.0)]);
        let slots = [
            BaselineSlot { contender: 1, library: Library::Cublas, layout: Layout::Nn },
            BaselineSlot { contender: 2, library: Library::Cublas, layout: Layout::Tn },
            BaselineSlot { contender: 3, library: Library::CublasltHeuristic, layout: Layout::Tn },
        ];
        let s = speedups(&report, 0, &slots);
        let get = |mode: &str, key: &str| s[mode][key].as_f64().unwrap_or(f64::NAN);
        assert!((get("graph", "cublas_nn") - 1.2).abs() < 1e-12);
        assert!((get("graph", "cublas_tn") - 1.1).abs() < 1e-12);
        assert!((get("graph", "cublas_max") - 1.1).abs() < 1e-12);
        assert!((get("offline", "cublas_max") - 150.0 / 110.0).abs() < 1e-12);
        assert!((get("graph", "cublaslt_heuristic_max") - 1.3).abs() < 1e-12);
        assert!(s["graph"].get("cublaslt_autotune_max").is_none());
        assert!(s.get("server").is_none());
        assert_eq!(speedups(&report, 9, &slots), serde_json::json!({}));
    }

    #[test]
    fn summaries_refuse_broken_samples() {
        let rounds = Rounds {
            samples: vec![vec![vec![1.0, f64::NAN]]],
            modes: vec![Mode::Graph],
            launches: vec![1],
            rounds: 2,
            converged: false,
        };
        assert!(summarise(&rounds, &["x".into()], 1.0).is_err());
    }

    #[test]
    fn nvidia_smi_lines_parse_and_missing_fields_stay_empty() {
        let s = DeviceState::parse("1980, 2619, 45, 128.50\n");
        assert_eq!(s.sm_clock_mhz, Some(1980));
        assert_eq!(s.mem_clock_mhz, Some(2619));
        assert_eq!(s.temperature_c, Some(45.0));
        assert_eq!(s.power_w, Some(128.5));
        let s = DeviceState::parse("345, [N/A], 41, [N/A]");
        assert_eq!((s.sm_clock_mhz, s.mem_clock_mhz, s.power_w), (Some(345), None, None));
        assert_eq!(DeviceState::parse(""), DeviceState::default());
    }
}
