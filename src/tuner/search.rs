//! Search policies over a problem's candidates. A *pull* times one candidate once and
//! yields a reward (speedup over the reference baseline, higher is better; noisy).
//!
//! - [`Ucb`]: an upper-confidence-bound bandit (UCB1 on the mean reward), seeded with
//!   priors from the winners of neighbouring shapes, stopping when the best mean has not
//!   improved by `min_gain` over `patience` pulls. It pulls the neighbours' best first;
//!   arms no neighbour measured start optimistic and are taken in an order seeded by the
//!   problem, so a capped run keeps exploring instead of settling on what its first
//!   problems happened to try.
//! - [`exhaustive`]: every candidate `repeats` times.
//! - [`random_order`]: candidates in a random order, once each.
//!
//! The policies only choose; the caller measures. So the same code runs live on the GPU
//! and replayed over recorded measurements (the search-efficiency comparison).

use std::collections::HashMap;

/// What a bandit knows about one arm.
#[derive(Debug, Clone, Default)]
struct Arm {
    /// Pseudo-observations from neighbouring shapes (weight, weighted mean).
    prior_weight: f64,
    prior_mean: f64,
    rewards: Vec<f64>,
}

impl Arm {
    fn n(&self) -> f64 {
        self.prior_weight + self.rewards.len() as f64
    }
    fn mean(&self) -> f64 {
        let sum: f64 = self.rewards.iter().sum();
        let n = self.n();
        if n == 0.0 { 0.0 } else { (self.prior_mean * self.prior_weight + sum) / n }
    }
    fn measured_mean(&self) -> Option<f64> {
        (!self.rewards.is_empty()).then(|| self.rewards.iter().sum::<f64>() / self.rewards.len() as f64)
    }
}

/// Settings of the bandit.
#[derive(Debug, Clone)]
pub struct UcbSettings {
    /// Exploration weight of the confidence bonus.
    pub c: f64,
    /// Stop after this many pulls without a gain of `min_gain` in the best measured mean…
    pub patience: usize,
    pub min_gain: f64,
    /// … but not before `min_pulls`, and never after `max_pulls`.
    pub min_pulls: usize,
    pub max_pulls: usize,
    /// The order untried arms of equal promise are taken in: by index (`None`), or shuffled
    /// by this seed. A live run seeds it with the problem, so that consecutive problems
    /// try different parts of what their neighbours left untried instead of the same
    /// first few arms.
    pub order_seed: Option<u64>,
}

impl Default for UcbSettings {
    fn default() -> Self {
        // c: the tuner's timings vary by about 1%, so a bonus of 0.02 (3% after one pull at
        // ten pulls) re-measures only arms within a few percent of the best.
        // patience 16 with `kaas tune`'s 96 pulls: replayed as live runs over 766 problems
        // with exhaustive samples, picks within 98% of the exhaustive best rise from 591
        // (patience 8, 48 pulls) to 631 for about 40% more pulls; a pull costs a few ms,
        // the service's verification seconds (BENCHMARKS.md, the search's efficiency).
        UcbSettings { c: 0.02, patience: 16, min_gain: 0.005, min_pulls: 6, max_pulls: 96, order_seed: None }
    }
}

/// The bandit over `arms` candidates (indices `0..arms`).
#[derive(Debug, Clone)]
pub struct Ucb {
    arms: Vec<Arm>,
    /// Each arm's place in the order untried arms of equal promise are taken in.
    rank: Vec<usize>,
    settings: UcbSettings,
    pulls: usize,
    best_so_far: f64,
    since_gain: usize,
}

impl Ucb {
    /// `priors`: (arm, reward on a neighbouring shape, weight). Arms without a prior start
    /// optimistic, at the best prior mean (or 1.0), with no weight: no neighbour measured
    /// them, so nothing says they are worse. Started at the priors' mean instead, which
    /// the neighbours' poor arms pull down, a run stops exploring: once its first shapes
    /// have measured a few small tiles, no later shape tries an arm outside them.
    pub fn new(arms: usize, priors: &[(usize, f64, f64)], settings: UcbSettings) -> Ucb {
        let mut a = vec![Arm::default(); arms];
        let mut acc: HashMap<usize, (f64, f64)> = HashMap::new();
        for &(i, r, w) in priors {
            if i < arms && r.is_finite() && w > 0.0 {
                let e = acc.entry(i).or_default();
                e.0 += r * w;
                e.1 += w;
            }
        }
        let overall = acc.values().map(|(s, w)| s / w).max_by(f64::total_cmp).unwrap_or(1.0);
        for (i, arm) in a.iter_mut().enumerate() {
            match acc.get(&i) {
                Some((s, w)) => {
                    arm.prior_mean = s / w;
                    arm.prior_weight = w.min(2.0);
                }
                None => arm.prior_mean = overall,
            }
        }
        let rank = settings.order_seed.map_or_else(|| (0..arms).collect(), |seed| random_order(arms, seed));
        Ucb { arms: a, rank, settings, pulls: 0, best_so_far: f64::NEG_INFINITY, since_gain: 0 }
    }

    /// The arm to pull next, or `None` when the search should stop: after `max_pulls`, or
    /// once gains have stalled and no untried arm's (optimistic) prior could beat the best
    /// measured mean. Without priors every arm is therefore tried once; good priors from
    /// neighbouring shapes let it skip the hopeless ones.
    pub fn next(&self) -> Option<usize> {
        let s = &self.settings;
        if self.arms.is_empty() || self.pulls >= s.max_pulls {
            return None;
        }
        if self.pulls == 0 {
            // The neighbours' best first: every later choice is measured against it.
            let top = (0..self.arms.len()).filter(|&i| self.arms[i].prior_weight > 0.0).max_by(|&a, &b| self.arms[a].prior_mean.total_cmp(&self.arms[b].prior_mean).then(b.cmp(&a)));
            if top.is_some() {
                return top;
            }
        }
        let best_mean = self.best().map_or(f64::NEG_INFINITY, |(_, m)| m);
        // Untried arms with no prior weight, the most promising first (ties: by rank).
        let fresh = (0..self.arms.len())
            .filter(|&i| self.arms[i].n() == 0.0 && self.arms[i].prior_mean + s.c >= best_mean)
            .min_by(|&a, &b| self.arms[b].prior_mean.total_cmp(&self.arms[a].prior_mean).then(self.rank[a].cmp(&self.rank[b])));
        let stalled = self.pulls >= s.min_pulls && self.since_gain >= s.patience;
        if stalled && fresh.is_none() {
            return None;
        }
        let t = (self.pulls + 1) as f64;
        let score = |i: usize| {
            let arm = &self.arms[i];
            arm.mean() + s.c * (t.ln().max(0.0) / arm.n()).sqrt()
        };
        let best = (0..self.arms.len()).filter(|&i| self.arms[i].n() > 0.0).max_by(|&a, &b| score(a).total_cmp(&score(b)).then(b.cmp(&a)));
        match (fresh, best) {
            // An untried arm scores as one pull would (but never below its prior plus c):
            // ahead of arms with a measurement or a prior of equal mean.
            (Some(f), Some(b)) => Some(if stalled || self.arms[f].prior_mean + s.c * t.ln().max(1.0).sqrt() >= score(b) { f } else { b }),
            (Some(f), None) => Some(f),
            (None, b) => b,
        }
    }

    /// Records a pull of `arm` with `reward` (non-finite rewards count as 0: the candidate
    /// failed).
    pub fn record(&mut self, arm: usize, reward: f64) {
        let r = if reward.is_finite() { reward } else { 0.0 };
        if let Some(a) = self.arms.get_mut(arm) {
            a.rewards.push(r);
        }
        self.pulls += 1;
        let best = self.best().map_or(f64::NEG_INFINITY, |(_, m)| m);
        if best > self.best_so_far * (1.0 + self.settings.min_gain) || self.best_so_far == f64::NEG_INFINITY {
            self.best_so_far = best;
            self.since_gain = 0;
        } else {
            self.since_gain += 1;
        }
    }

    /// The arm with the best measured mean (priors do not count), and that mean.
    pub fn best(&self) -> Option<(usize, f64)> {
        self.arms.iter().enumerate().filter_map(|(i, a)| a.measured_mean().map(|m| (i, m))).max_by(|a, b| a.1.total_cmp(&b.1))
    }

    pub fn pulls(&self) -> usize {
        self.pulls
    }

    /// Every measured arm's mean reward.
    pub fn means(&self) -> Vec<(usize, f64, usize)> {
        self.arms.iter().enumerate().filter_map(|(i, a)| a.measured_mean().map(|m| (i, m, a.rewards.len()))).collect()
    }
}

/// Every arm `repeats` times, arm by arm.
pub fn exhaustive(arms: usize, repeats: usize) -> Vec<usize> {
    (0..arms).flat_map(|i| std::iter::repeat_n(i, repeats)).collect()
}

/// Every arm once, in an order drawn from `seed`.
pub fn random_order(arms: usize, seed: u64) -> Vec<usize> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut v: Vec<usize> = (0..arms).collect();
    v.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    v
}

/// Runs the bandit against recorded samples (`samples[i]` cycles when exhausted) and
/// returns, after each pull, the arm it would pick.
pub fn replay_ucb(samples: &[Vec<f64>], priors: &[(usize, f64, f64)], settings: UcbSettings) -> Vec<usize> {
    replay(samples, priors, settings).0
}

/// [`replay_ucb`], with the bandit as it ended (its measured means seed later problems).
pub fn replay(samples: &[Vec<f64>], priors: &[(usize, f64, f64)], settings: UcbSettings) -> (Vec<usize>, Ucb) {
    let mut ucb = Ucb::new(samples.len(), priors, settings);
    let mut used = vec![0usize; samples.len()];
    let mut picks = Vec::new();
    while let Some(i) = ucb.next() {
        let s = &samples[i];
        let r = if s.is_empty() { 0.0 } else { s[used[i] % s.len()] };
        used[i] += 1;
        ucb.record(i, r);
        picks.push(ucb.best().map_or(i, |(b, _)| b));
    }
    (picks, ucb)
}

/// The same for a fixed order of single pulls (random search): after each pull, the arm
/// with the best measured reward so far.
pub fn replay_order(samples: &[Vec<f64>], order: &[usize]) -> Vec<usize> {
    let mut best: Option<(usize, f64)> = None;
    let mut used = vec![0usize; samples.len()];
    let mut picks = Vec::new();
    for &i in order {
        let s = &samples[i];
        let r = if s.is_empty() { 0.0 } else { s[used[i] % s.len()] };
        used[i] += 1;
        if best.is_none_or(|(_, b)| r > b) {
            best = Some((i, r));
        }
        picks.push(best.map_or(i, |(b, _)| b));
    }
    picks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arms with fixed true rewards plus deterministic noise.
    fn samples(truth: &[f64], noise: f64, n: usize) -> Vec<Vec<f64>> {
        truth
            .iter()
            .enumerate()
            .map(|(i, t)| (0..n).map(|k| t * (1.0 + noise * (((i * 7 + k * 13) % 11) as f64 / 5.0 - 1.0))).collect())
            .collect()
    }

    #[test]
    fn the_bandit_finds_the_best_arm_with_fewer_pulls_than_exhaustive() {
        let truth: Vec<f64> = (0..40).map(|i| 0.5 + 0.5 * ((i * 37 % 40) as f64 / 40.0)).collect();
        let best = truth.iter().copied().fold(0.0, f64::max);
        let s = samples(&truth, 0.01, 5);
        let picks = replay_ucb(&s, &[], UcbSettings { max_pulls: 200, ..Default::default() });
        let last = *picks.last().unwrap();
        assert!(truth[last] >= 0.98 * best, "picked {} of {best}", truth[last]);
        // With good priors from a neighbour, far fewer pulls.
        let top = truth.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
        let priors: Vec<(usize, f64, f64)> = truth.iter().enumerate().map(|(i, t)| (i, *t * 0.97, 1.0)).collect();
        let seeded = replay_ucb(&s, &priors, UcbSettings::default());
        let reach = seeded.iter().position(|&i| truth[i] >= 0.98 * best).map(|p| p + 1).unwrap();
        assert!(reach <= 5, "seeded bandit needed {reach} pulls for arm {top}");
        assert!(seeded.len() < exhaustive(40, 3).len());
    }

    #[test]
    fn arms_no_neighbour_measured_are_tried_before_hopeless_ones() {
        // A neighbour measured arms 0..10 only, all poor; the best arm (15) is one it never
        // tried. The bandit must start from the neighbour's best (arm 9) and find arm 15,
        // in any order of the untried arms. (Unmeasured arms starting at the priors' mean
        // never left the neighbour's ten.)
        let mut truth: Vec<f64> = (0..40).map(|i| if i < 10 { 0.5 + 0.04 * i as f64 } else { 0.8 }).collect();
        truth[15] = 1.1;
        let priors: Vec<(usize, f64, f64)> = (0..10).map(|i| (i, truth[i], 0.5)).collect();
        for order_seed in [None, Some(1), Some(2), Some(3)] {
            let picks = replay_ucb(&samples(&truth, 0.01, 3), &priors, UcbSettings { max_pulls: 32, order_seed, ..Default::default() });
            assert_eq!(picks[0], 9, "the neighbours' best first");
            assert_eq!(*picks.last().unwrap(), 15, "{order_seed:?}: {picks:?}");
        }
        // After the neighbours' best, index order takes the untried arms 10, 11, …; a seeded
        // order another way round, and each seed its own.
        let first_fresh = |order_seed| {
            let mut ucb = Ucb::new(40, &priors, UcbSettings { order_seed, ..Default::default() });
            assert_eq!(ucb.next(), Some(9));
            ucb.record(9, truth[9]);
            ucb.next().unwrap()
        };
        assert_eq!(first_fresh(None), 10);
        let seeded: Vec<usize> = (1..6).map(|seed| first_fresh(Some(seed))).collect();
        assert!(seeded.iter().all(|&i| i >= 10), "{seeded:?}");
        assert!(seeded.iter().any(|&i| i != 10), "{seeded:?}");
        let ranks: Vec<_> = (1..6).map(|seed| Ucb::new(40, &priors, UcbSettings { order_seed: Some(seed), ..Default::default() }).rank).collect();
        assert!(ranks.windows(2).all(|w| w[0] != w[1]), "different seeds, different orders");
    }

    #[test]
    fn it_stops_when_gains_stall() {
        let s = samples(&[1.0; 10], 0.0, 3);
        let picks = replay_ucb(&s, &[], UcbSettings { min_pulls: 3, patience: 4, ..Default::default() });
        assert!(picks.len() < 30, "{}", picks.len());
        assert!(picks.len() >= 3);
    }

    #[test]
    fn failed_pulls_count_as_zero_and_are_avoided() {
        let mut ucb = Ucb::new(3, &[], UcbSettings::default());
        for _ in 0..12 {
            let Some(i) = ucb.next() else { break };
            ucb.record(i, if i == 1 { f64::NAN } else { 0.5 + i as f64 * 0.1 });
        }
        assert_eq!(ucb.best().unwrap().0, 2);
    }

    #[test]
    fn random_and_exhaustive_orders_cover_every_arm() {
        let mut r = random_order(20, 7);
        r.sort();
        assert_eq!(r, (0..20).collect::<Vec<_>>());
        assert_eq!(exhaustive(3, 2), vec![0, 0, 1, 1, 2, 2]);
        let truth = [0.2, 0.9, 0.5];
        let picks = replay_order(&samples(&truth, 0.0, 1), &[0, 2, 1]);
        assert_eq!(picks, vec![0, 2, 1]);
    }
}
