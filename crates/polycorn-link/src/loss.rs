//! Seeded per-packet random loss: none, independent (Bernoulli) or bursty (Gilbert–Elliott).
//!
//! Radio loss on a moving train comes in bursts (fades, handovers), which Bernoulli loss cannot
//! express: the same average rate with bursts hurts TCP and a multipath scheduler very
//! differently. The Gilbert–Elliott model is the standard two-state answer: a hidden Markov
//! chain with a *good* and a *bad* state, each with its own loss probability.
//!
//! ## Per-packet step (order matters for the burst statistics)
//! 1. The packet is lost with the current state's probability (`loss_in_good` / `loss_in_bad`).
//! 2. The chain then moves: good → bad with `p_good_to_bad`, bad → good with `p_bad_to_good`.
//!
//! The chain starts in a state drawn from its stationary distribution, so short runs are not
//! biased towards the good state. Every call of [`LossProcess::lose`] draws exactly two
//! numbers (one for Bernoulli, none for [`LossModel::None`]) whatever their outcome, so the
//! `n`-th decision depends only on the seed and `n`.
//!
//! Randomness is `rand_pcg::Pcg64` seeded with [`rand::SeedableRng::seed_from_u64`]: the same
//! model and seed give the same loss pattern on every platform.
//!
//! ## What to compare in tests
//! [`LossModel::stationary_loss_rate`] is the long-run fraction of lost packets;
//! [`LossModel::mean_burst_packets`] the long-run mean length of a run of consecutive losses.
//! For the classic Gilbert model (`loss_in_good = 0`, `loss_in_bad = 1`) these are
//! `p_gb / (p_gb + p_bg)` and `1 / p_bg`.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// A loss model that cannot be used: a probability outside `[0, 1]` (or NaN), or an
/// impossible target in [`LossModel::from_rate_and_burst`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LossError {
    /// A probability outside `[0, 1]` or not a number.
    #[error("loss model: {name} = {value} is not a probability in [0, 1]")]
    Probability {
        /// Which parameter.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A mean burst length below one packet (or not a number).
    #[error("loss model: mean burst length {0} must be at least 1 packet")]
    BurstTooShort(f64),
    /// A loss rate so high that bursts of the requested length cannot produce it.
    #[error("loss model: loss rate {rate} is not reachable with mean burst length {burst} (needs rate < 1 and rate/(1-rate) <= burst)")]
    Unreachable {
        /// The requested loss rate.
        rate: f64,
        /// The requested mean burst length.
        burst: f64,
    },
}

/// How packets are lost, independently of queueing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LossModel {
    /// No random loss.
    #[default]
    None,
    /// Each packet is lost independently with probability `p`.
    Bernoulli {
        /// Loss probability per packet.
        p: f64,
    },
    /// Two-state Markov chain (see the module docs for the per-packet step).
    GilbertElliott {
        /// Probability of moving from the good to the bad state after a packet.
        p_good_to_bad: f64,
        /// Probability of moving from the bad to the good state after a packet.
        p_bad_to_good: f64,
        /// Loss probability of a packet sent in the good state.
        loss_in_good: f64,
        /// Loss probability of a packet sent in the bad state.
        loss_in_bad: f64,
    },
}

fn check(name: &'static str, value: f64) -> Result<(), LossError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(LossError::Probability { name, value })
    }
}

impl LossModel {
    /// The classic Gilbert model: every packet in the bad state is lost, none in the good one.
    pub fn gilbert(p_good_to_bad: f64, p_bad_to_good: f64) -> Self {
        Self::GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_good: 0.0,
            loss_in_bad: 1.0,
        }
    }

    /// The Gilbert model with a given long-run loss rate and mean burst length (packets):
    /// `p_bad_to_good = 1 / burst`, `p_good_to_bad = rate · p_bad_to_good / (1 − rate)`.
    /// A rate of 0 gives [`LossModel::None`].
    pub fn from_rate_and_burst(rate: f64, mean_burst_packets: f64) -> Result<Self, LossError> {
        check("rate", rate)?;
        if mean_burst_packets.is_nan() || mean_burst_packets < 1.0 {
            return Err(LossError::BurstTooShort(mean_burst_packets));
        }
        if rate == 0.0 {
            return Ok(Self::None);
        }
        let p_bad_to_good = 1.0 / mean_burst_packets;
        let p_good_to_bad = rate * p_bad_to_good / (1.0 - rate);
        if rate >= 1.0 || p_good_to_bad > 1.0 {
            return Err(LossError::Unreachable {
                rate,
                burst: mean_burst_packets,
            });
        }
        Ok(Self::gilbert(p_good_to_bad, p_bad_to_good))
    }

    /// Checks that every probability is in `[0, 1]` (NaN is rejected).
    pub fn validate(&self) -> Result<(), LossError> {
        match *self {
            Self::None => Ok(()),
            Self::Bernoulli { p } => check("p", p),
            Self::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_in_good,
                loss_in_bad,
            } => {
                check("p_good_to_bad", p_good_to_bad)?;
                check("p_bad_to_good", p_bad_to_good)?;
                check("loss_in_good", loss_in_good)?;
                check("loss_in_bad", loss_in_bad)
            }
        }
    }

    /// As a two-state chain: `(p_gb, p_bg, h_good, h_bad)`. Bernoulli is a chain that never
    /// leaves the good state.
    fn as_chain(&self) -> (f64, f64, f64, f64) {
        match *self {
            Self::None => (0.0, 0.0, 0.0, 0.0),
            Self::Bernoulli { p } => (0.0, 0.0, p, p),
            Self::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_in_good,
                loss_in_bad,
            } => (p_good_to_bad, p_bad_to_good, loss_in_good, loss_in_bad),
        }
    }

    /// Long-run fraction of time in the bad state. A chain with both transition probabilities
    /// 0 never leaves its start state; it is then taken to start (and stay) good.
    fn stationary_bad(&self) -> f64 {
        let (p_gb, p_bg, _, _) = self.as_chain();
        if p_gb + p_bg == 0.0 {
            0.0
        } else {
            p_gb / (p_gb + p_bg)
        }
    }

    /// Long-run fraction of packets lost (for a valid model).
    pub fn stationary_loss_rate(&self) -> f64 {
        let (_, _, h_g, h_b) = self.as_chain();
        let bad = self.stationary_bad();
        (1.0 - bad) * h_g + bad * h_b
    }

    /// Long-run mean number of packets in a run of consecutive losses (for a valid model), or
    /// `None` if there are no losses or the run never ends (every packet lost).
    ///
    /// Computed exactly as `P(loss) / P(no loss, then loss)` in the stationary chain; for the
    /// classic Gilbert model this is `1 / p_bad_to_good`, for Bernoulli `1 / (1 − p)`.
    pub fn mean_burst_packets(&self) -> Option<f64> {
        let (p_gb, p_bg, h_g, h_b) = self.as_chain();
        let bad = self.stationary_bad();
        let good = 1.0 - bad;
        let loss = good * h_g + bad * h_b;
        // Probability that a packet is kept and the next one lost.
        let from_good = good * (1.0 - h_g) * ((1.0 - p_gb) * h_g + p_gb * h_b);
        let from_bad = bad * (1.0 - h_b) * (p_bg * h_g + (1.0 - p_bg) * h_b);
        let starts = from_good + from_bad;
        if loss <= 0.0 || starts <= 0.0 {
            None
        } else {
            Some(loss / starts)
        }
    }
}

/// A running, seeded instance of a [`LossModel`].
#[derive(Debug, Clone)]
pub struct LossProcess {
    model: LossModel,
    rng: Pcg64,
    bad: bool,
}

impl LossProcess {
    /// Validates `model` and seeds the process; the initial Gilbert–Elliott state is drawn
    /// from the stationary distribution.
    pub fn new(model: LossModel, seed: u64) -> Result<Self, LossError> {
        model.validate()?;
        let mut rng = Pcg64::seed_from_u64(seed);
        let bad = match model {
            LossModel::GilbertElliott { .. } => rng.gen::<f64>() < model.stationary_bad(),
            LossModel::None | LossModel::Bernoulli { .. } => false,
        };
        Ok(Self { model, rng, bad })
    }

    /// The model this process runs.
    pub fn model(&self) -> &LossModel {
        &self.model
    }

    /// Whether a Gilbert–Elliott chain is currently in its bad state (always `false` for the
    /// other models).
    pub fn is_bad(&self) -> bool {
        self.bad
    }

    /// Decides the fate of the next packet: `true` = lost.
    pub fn lose(&mut self) -> bool {
        match self.model {
            LossModel::None => false,
            // `gen::<f64>()` is uniform in [0, 1): p = 0 never loses, p = 1 always does.
            LossModel::Bernoulli { p } => self.rng.gen::<f64>() < p,
            LossModel::GilbertElliott {
                p_good_to_bad,
                p_bad_to_good,
                loss_in_good,
                loss_in_bad,
            } => {
                let (h, flip) = if self.bad {
                    (loss_in_bad, p_bad_to_good)
                } else {
                    (loss_in_good, p_good_to_bad)
                };
                let lost = self.rng.gen::<f64>() < h;
                if self.rng.gen::<f64>() < flip {
                    self.bad = !self.bad;
                }
                lost
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_is_an_error_not_a_panic() {
        for bad in [-0.1, 1.1, f64::NAN, f64::INFINITY] {
            assert!(LossProcess::new(LossModel::Bernoulli { p: bad }, 1).is_err());
            let ge = LossModel::GilbertElliott {
                p_good_to_bad: 0.1,
                p_bad_to_good: 0.1,
                loss_in_good: 0.0,
                loss_in_bad: bad,
            };
            let e = ge.validate().unwrap_err();
            assert!(e.to_string().contains("loss_in_bad"), "{e}");
        }
        assert!(LossModel::gilbert(0.0, 1.0).validate().is_ok());
    }

    #[test]
    fn closed_forms() {
        let g = LossModel::gilbert(0.01, 0.25);
        assert!((g.stationary_loss_rate() - 0.01 / 0.26).abs() < 1e-12);
        assert!((g.mean_burst_packets().unwrap() - 4.0).abs() < 1e-12);
        let b = LossModel::Bernoulli { p: 0.2 };
        assert!((b.stationary_loss_rate() - 0.2).abs() < 1e-12);
        assert!((b.mean_burst_packets().unwrap() - 1.25).abs() < 1e-12);
        assert_eq!(LossModel::None.mean_burst_packets(), None);
        assert_eq!(LossModel::Bernoulli { p: 1.0 }.mean_burst_packets(), None);
        assert_eq!(LossModel::None.stationary_loss_rate(), 0.0);
    }

    #[test]
    fn from_rate_and_burst() {
        let m = LossModel::from_rate_and_burst(0.02, 5.0).unwrap();
        assert!((m.stationary_loss_rate() - 0.02).abs() < 1e-12);
        assert!((m.mean_burst_packets().unwrap() - 5.0).abs() < 1e-12);
        assert_eq!(
            LossModel::from_rate_and_burst(0.0, 3.0).unwrap(),
            LossModel::None
        );
        assert!(LossModel::from_rate_and_burst(0.9, 2.0).is_err());
        assert!(LossModel::from_rate_and_burst(0.1, 0.5).is_err());
        assert!(LossModel::from_rate_and_burst(1.0, 2.0).is_err());
    }

    #[test]
    fn extremes() {
        let mut never = LossProcess::new(LossModel::Bernoulli { p: 0.0 }, 3).unwrap();
        let mut always = LossProcess::new(LossModel::Bernoulli { p: 1.0 }, 3).unwrap();
        let mut none = LossProcess::new(LossModel::None, 3).unwrap();
        for _ in 0..1000 {
            assert!(!never.lose());
            assert!(always.lose());
            assert!(!none.lose());
        }
    }

    #[test]
    fn deterministic_per_seed() {
        let m = LossModel::gilbert(0.05, 0.3);
        let run = |seed| {
            let mut p = LossProcess::new(m, seed).unwrap();
            (0..2000).map(|_| p.lose()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }
}
