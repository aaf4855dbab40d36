//! MoTS (Manager of Time Slice), the feedback controller that turns CFQ into MCFQ
//! (S1, docs/references.md): once per second it compares each VM's bandwidth share with its weight
//! share and rescales the VM's CFQ time slice. Pure: no clock, no I/O; whoever drives it
//! passes the time and the bytes each owner completed since the previous sample.
//!
//! ```text
//! on_sample(now, bytes):                       (bytes[i] = completed since the last sample)
//!   for each owner i: push (bytes[i] / scale[i]) into its window (the last BW samples)
//!       — the bytes per unit of slice scale that was in force during that second
//!   TVM = the owner of smallest weight (ties: lowest index) with bytes in its window;
//!         its scale never changes
//!   for each other owner R (RVM) with bytes in its window:
//!       IP  = weight(R) / weight(TVM)
//!       BWR, BWT = mean normalized bandwidth of R and TVM over the window
//!       F   = IP / (BWR / BWT) * scale[TVM]   — the scale at which R's share would be IP
//!       push F into R's F window (the last BW values)
//!       scale[R] = clamp(mean(F window), min_scale, max_scale)
//!   with no bytes for R or for the TVM in the window: no F, scale unchanged
//! ```
//!
//! The rule. The paper's `F = IP / (BWR/BWT)` is the factor by which the RVM's *current*
//! share is off; applied to the slice every second as a multiplier it keeps compounding
//! while the 10 s bandwidth window still shows the old share, and applied as an absolute
//! scale it falls back to 1 as soon as the share is right. MoTS therefore measures
//! bandwidth per unit of slice scale (bytes of each second divided by the scale in force in
//! that second). Under CFQ's time-proportional service an always-busy VM's bandwidth ratio
//! is proportional to its scale ratio, so `F` computed on normalized bandwidths is directly
//! the scale that gives ratio IP; the slice is set to the mean of the last BW values of F
//! ("scale the slice by their mean"). It is a fixed-point iteration `s ← s · IP / r(s)`
//! averaged over BW seconds: exact in one window when `r ∝ s`, and it converges whenever
//! the ratio grows with the scale less than quadratically; the window damps bursty seconds.
//! The scale is bounded to [min_scale, max_scale] (default 0.1×–20×): a VM whose bandwidth
//! is limited by its own demand (think time) cannot make it grow without bound.
//!
//! BW = 10 s by default (the paper's best value); before BW samples exist the window holds
//! what has been seen.

use std::collections::VecDeque;

use super::cfq::WEIGHT_DEFAULT;
use crate::Ns;

pub struct Mots {
    weights: Vec<u32>,
    bw_window: usize,
    min_scale: f64,
    max_scale: f64,
    scale: Vec<f64>,
    /// Per owner: normalized bytes (bytes / scale) of the last `bw_window` samples.
    bw: Vec<VecDeque<f64>>,
    /// Per owner: the last `bw_window` values of F.
    f: Vec<VecDeque<f64>>,
    last_sample_ns: Option<Ns>,
}

impl Mots {
    /// `weights[i]` is owner i's weight; `bw_window_s` is BW (samples are one second apart).
    pub fn new(weights: Vec<u32>, bw_window_s: u32) -> Self {
        Self::with_bounds(weights, bw_window_s, 0.1, 20.0)
    }

    pub fn with_bounds(
        weights: Vec<u32>,
        bw_window_s: u32,
        min_scale: f64,
        max_scale: f64,
    ) -> Self {
        let n = weights.len();
        let (min_scale, max_scale) = if min_scale > 0.0 && min_scale <= max_scale {
            (min_scale, max_scale)
        } else {
            (0.1, 20.0)
        };
        Self {
            weights: weights.into_iter().map(|w| w.max(1)).collect(),
            bw_window: bw_window_s.max(1) as usize,
            min_scale,
            max_scale,
            scale: vec![1.0; n],
            bw: vec![VecDeque::new(); n],
            f: vec![VecDeque::new(); n],
            last_sample_ns: None,
        }
    }

    pub fn scale(&self, owner: u32) -> f64 {
        self.scale.get(owner as usize).copied().unwrap_or(1.0)
    }

    pub fn last_sample_ns(&self) -> Option<Ns> {
        self.last_sample_ns
    }

    fn grow(&mut self, n: usize) {
        while self.weights.len() < n {
            self.weights.push(WEIGHT_DEFAULT);
            self.scale.push(1.0);
            self.bw.push(VecDeque::new());
            self.f.push(VecDeque::new());
        }
    }

    /// One sample: `bytes_per_owner[i]` = bytes owner i completed since the last sample.
    /// Returns the owners whose slice scale changed, with the new scale.
    pub fn on_sample(&mut self, now_ns: Ns, bytes_per_owner: &[u64]) -> Vec<(u32, f64)> {
        self.last_sample_ns = Some(now_ns);
        self.grow(bytes_per_owner.len());
        let n = self.weights.len();
        for i in 0..n {
            let b = bytes_per_owner.get(i).copied().unwrap_or(0) as f64;
            let w = &mut self.bw[i];
            w.push_back(b / self.scale[i]);
            if w.len() > self.bw_window {
                w.pop_front();
            }
        }
        let mean_bw: Vec<f64> = self
            .bw
            .iter()
            .map(|w| w.iter().sum::<f64>() / w.len().max(1) as f64)
            .collect();
        let Some(tvm) = (0..n)
            .filter(|&i| mean_bw[i] > 0.0)
            .min_by_key(|&i| (self.weights[i], i))
        else {
            return Vec::new();
        };
        let bwt = mean_bw[tvm];
        let mut changed = Vec::new();
        for (r, &bwr) in mean_bw.iter().enumerate() {
            if r == tvm || bwr <= 0.0 {
                continue;
            }
            let ip = self.weights[r] as f64 / self.weights[tvm] as f64;
            let f = ip / (bwr / bwt) * self.scale[tvm];
            if !f.is_finite() {
                continue;
            }
            let fw = &mut self.f[r];
            fw.push_back(f.clamp(self.min_scale, self.max_scale));
            if fw.len() > self.bw_window {
                fw.pop_front();
            }
            let s =
                (fw.iter().sum::<f64>() / fw.len() as f64).clamp(self.min_scale, self.max_scale);
            if s != self.scale[r] {
                self.scale[r] = s;
                changed.push((r as u32, s));
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SEC;

    /// A plant where bandwidth ∝ weight × scale × per-byte speed (CFQ, always busy).
    fn plant(m: &Mots, weights: &[u32], speed: &[f64]) -> Vec<u64> {
        let shares: Vec<f64> = (0..weights.len())
            .map(|i| weights[i] as f64 * m.scale(i as u32))
            .collect();
        let total: f64 = shares.iter().sum();
        (0..weights.len())
            .map(|i| (1e9 * shares[i] / total * speed[i]) as u64)
            .collect()
    }

    #[test]
    fn the_papers_example_doubles_the_slice_of_a_vm_at_half_its_share() {
        // Weights 1 and 10, measured 1:5 -> F = 2.
        let mut m = Mots::new(vec![10, 1], 10);
        let ch = m.on_sample(SEC, &[5_000_000, 1_000_000]);
        assert_eq!(ch, vec![(0, 2.0)]);
        assert_eq!(m.scale(1), 1.0);
    }

    #[test]
    fn scales_converge_to_the_weight_ratios_on_a_proportional_plant() {
        let w = [1000, 700, 400, 100];
        let speed = [1.0 / 8.0, 1.0, 0.5, 1.0];
        let mut m = Mots::new(w.to_vec(), 10);
        for k in 1..=40 {
            let b = plant(&m, &w, &speed);
            m.on_sample(k * SEC, &b);
        }
        let b = plant(&m, &w, &speed);
        for i in 0..4 {
            let r = b[i] as f64 / b[3] as f64;
            let want = w[i] as f64 / 100.0;
            assert!((r / want - 1.0).abs() < 0.01, "VM{i}: {r} vs {want}");
        }
        assert_eq!(m.scale(3), 1.0);
        assert!((m.scale(0) - 8.0).abs() < 0.1);
    }

    #[test]
    fn idle_vms_and_empty_samples_leave_scales_alone_without_nan() {
        let mut m = Mots::new(vec![1000, 100], 10);
        assert!(m.on_sample(SEC, &[0, 0]).is_empty());
        assert!(m.on_sample(2 * SEC, &[1000, 0]).is_empty()); // TVM idle: VM0 is alone
                                                              // VM0 idle in this second, but its window still holds bytes: a finite F.
        for (_, sc) in m.on_sample(3 * SEC, &[0, 1000]) {
            assert!((0.1..=20.0).contains(&sc));
        }
        for o in 0..2 {
            assert!(m.scale(o).is_finite());
        }
        // Owners beyond the configured ones get the default weight.
        m.on_sample(4 * SEC, &[1000, 1000, 1000]);
        assert!(m.scale(2).is_finite());
    }

    #[test]
    fn scales_stay_within_their_bounds() {
        let mut m = Mots::new(vec![1000, 10], 10);
        for k in 1..=30 {
            // VM0 never gets more than the TVM, whatever its slice (demand-limited).
            m.on_sample(k * SEC, &[1000, 1000]);
        }
        assert_eq!(m.scale(0), 20.0);
        let mut m = Mots::new(vec![200, 100], 10);
        for k in 1..=30 {
            // VM0 gets a million times the TVM's bandwidth: its slice shrinks to the floor.
            m.on_sample(k * SEC, &[1_000_000, 1]);
        }
        assert_eq!(m.scale(0), 0.1);
    }
}
