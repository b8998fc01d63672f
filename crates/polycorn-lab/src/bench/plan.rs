//! The workload schedule of one bench run: which bulk flows start when, which instant-messaging
//! users send which message when. Pure and seeded: the same seed and mode give the same plan,
//! and every system under test runs the same plan against the same emulated trip.

/// Bulk download sizes (paper §6.2).
pub const BULK_SIZES: [u64; 3] = [256 * 1024, 1024 * 1024, 4 * 1024 * 1024];
/// Instant-messaging user counts (paper §6.3).
pub const IM_USERS: [usize; 3] = [10, 20, 30];
/// Messages per IM user.
pub const IM_MESSAGES: usize = 100;
/// Uplink message and downlink answer sizes, bytes.
pub const IM_UP_BYTES: usize = 100;
/// Downlink answer, bytes.
pub const IM_DOWN_BYTES: usize = 4;

/// One bulk download or upload.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkFlow {
    /// Index within its list (pairs flows across systems; downloads and uploads are numbered
    /// separately).
    pub idx: usize,
    /// Start, seconds after the emulator started.
    pub start_s: f64,
    /// Bytes moved.
    pub size: u64,
}

/// One instant-messaging segment: `users` users, each with its own long-lived connection.
#[derive(Debug, Clone, PartialEq)]
pub struct ImSegment {
    /// Number of users.
    pub users: usize,
    /// Connections open at this time, seconds after the emulator started.
    pub start_s: f64,
    /// Per user, the send time of each message, seconds after `start_s`.
    pub sends_s: Vec<Vec<f64>>,
    /// Undelivered answers are given up this many seconds after `start_s`.
    pub deadline_s: f64,
}

/// The whole schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Seconds the relay and proxy have to come up before the first flow.
    pub lead_s: f64,
    /// Bulk downloads, in start order.
    pub bulk: Vec<BulkFlow>,
    /// A bulk flow not complete after this long is counted as failed.
    pub bulk_timeout_s: f64,
    /// IM segments, in start order.
    pub im: Vec<ImSegment>,
    /// Bulk uploads (`--workloads upload`), in start order, after the IM segments, so the
    /// downloads and IM run at the same trip times with or without them.
    pub uploads: Vec<BulkFlow>,
    /// An upload not complete after this long is counted as failed (0 without uploads).
    pub upload_timeout_s: f64,
    /// The run ends here (seconds after the emulator started): every flow is complete or given
    /// up by then.
    pub end_s: f64,
}

/// Knobs of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanParams {
    /// See [`Plan::lead_s`].
    pub lead_s: f64,
    /// Bulk flows (cycled over [`BULK_SIZES`]).
    pub bulk_flows: usize,
    /// Seconds between bulk flow starts.
    pub bulk_gap_s: f64,
    /// See [`Plan::bulk_timeout_s`].
    pub bulk_timeout_s: f64,
    /// Seconds after the last bulk start before IM begins.
    pub drain_s: f64,
    /// Mean of the exponential gaps between one user's messages, seconds.
    pub im_mean_gap_s: f64,
    /// Seconds each IM segment lasts (last answers must arrive by then).
    pub im_segment_s: f64,
    /// Whether the instant-messaging segments run (`--workloads`).
    pub im: bool,
    /// Users of each IM segment, one segment per entry ([`IM_USERS`] in `bench`; `sim sweep`
    /// varies it). Reports and pooled tables show the counts of [`IM_USERS`].
    pub im_users: &'static [usize],
    /// Bulk uploads (cycled over [`BULK_SIZES`]; `--workloads upload`).
    pub uploads: usize,
    /// Seconds between upload starts (the uplink has a third of the downlink's capacity, so
    /// uploads get a longer gap than downloads).
    pub upload_gap_s: f64,
    /// See [`Plan::upload_timeout_s`].
    pub upload_timeout_s: f64,
}

impl PlanParams {
    /// `--quick`: four systems fit in five minutes.
    pub fn quick() -> PlanParams {
        PlanParams {
            lead_s: 6.0,
            bulk_flows: 6,
            bulk_gap_s: 4.0,
            bulk_timeout_s: 20.0,
            drain_s: 3.0,
            im_mean_gap_s: 0.07,
            im_segment_s: 9.0,
            im: true,
            im_users: &IM_USERS,
            uploads: 0,
            upload_gap_s: 8.0,
            upload_timeout_s: 40.0,
        }
    }
    /// Full mode.
    pub fn full() -> PlanParams {
        PlanParams {
            lead_s: 8.0,
            bulk_flows: 12,
            bulk_gap_s: 6.0,
            bulk_timeout_s: 30.0,
            drain_s: 6.0,
            im_mean_gap_s: 0.15,
            im_segment_s: 20.0,
            im: true,
            im_users: &IM_USERS,
            uploads: 0,
            upload_gap_s: 12.0,
            upload_timeout_s: 60.0,
        }
    }
}

/// splitmix64: a small seeded generator (the plan must not depend on a crate's algorithm).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Exponential with mean `mean`.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.uniform()).ln()
    }
}

impl Plan {
    /// The plan for `p` and `seed`. Message times are exponential gaps, scaled down if needed
    /// so a user's last message leaves at least 1.5 s before the segment ends.
    pub fn new(p: &PlanParams, seed: u64) -> Plan {
        let mut rng = SplitMix::new(seed ^ 0x1111_2222_3333_4444);
        let bulk: Vec<BulkFlow> = (0..p.bulk_flows)
            .map(|idx| BulkFlow {
                idx,
                start_s: p.lead_s + idx as f64 * p.bulk_gap_s,
                size: BULK_SIZES[idx % BULK_SIZES.len()],
            })
            .collect();
        // Without bulk flows, IM starts right after the lead; without IM, the downloads end
        // when the last one's timeout would.
        let mut t = match bulk.last() {
            Some(f) if !p.im => f.start_s + p.bulk_timeout_s,
            Some(_) => p.lead_s + p.bulk_flows as f64 * p.bulk_gap_s + p.drain_s,
            None => p.lead_s,
        };
        let mut im = Vec::new();
        let budget_s = (p.im_segment_s - 1.5).max(0.5);
        let users_per_segment: &[usize] = if p.im { p.im_users } else { &[] };
        for &users in users_per_segment {
            let sends_s = (0..users)
                .map(|_| {
                    let mut acc = 0.0;
                    let mut v: Vec<f64> = (0..IM_MESSAGES)
                        .map(|_| {
                            acc += rng.exp(p.im_mean_gap_s);
                            acc
                        })
                        .collect();
                    let last = *v.last().expect("IM_MESSAGES > 0");
                    if last > budget_s {
                        let k = budget_s / last;
                        v.iter_mut().for_each(|x| *x *= k);
                    }
                    v
                })
                .collect();
            im.push(ImSegment {
                users,
                start_s: t,
                sends_s,
                deadline_s: p.im_segment_s,
            });
            t += p.im_segment_s;
        }
        // Uploads come last; the first one starts where the run would otherwise end.
        let uploads: Vec<BulkFlow> = (0..p.uploads)
            .map(|idx| BulkFlow {
                idx,
                start_s: t + idx as f64 * p.upload_gap_s,
                size: BULK_SIZES[idx % BULK_SIZES.len()],
            })
            .collect();
        if let Some(f) = uploads.last() {
            t = f.start_s + p.upload_timeout_s;
        }
        Plan {
            lead_s: p.lead_s,
            bulk,
            bulk_timeout_s: p.bulk_timeout_s,
            im,
            // 0 without uploads, so plans without them compare equal whatever the mode.
            upload_timeout_s: if uploads.is_empty() {
                0.0
            } else {
                p.upload_timeout_s
            },
            uploads,
            end_s: t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_deterministic_and_ordered() {
        let a = Plan::new(&PlanParams::quick(), 7);
        let b = Plan::new(&PlanParams::quick(), 7);
        assert_eq!(a, b);
        assert_ne!(a, Plan::new(&PlanParams::quick(), 8));
        assert_eq!(a.bulk.len(), 6);
        assert!(a.bulk.windows(2).all(|w| w[0].start_s < w[1].start_s));
        assert_eq!(a.im.len(), 3);
        for s in &a.im {
            assert_eq!(s.sends_s.len(), s.users);
            for u in &s.sends_s {
                assert_eq!(u.len(), IM_MESSAGES);
                assert!(u.windows(2).all(|w| w[0] <= w[1]));
                assert!(*u.last().unwrap() <= s.deadline_s - 1.5 + 1e-9);
            }
        }
        assert!(a.end_s > a.im[2].start_s);
    }

    #[test]
    fn either_workload_can_be_left_out() {
        let im_only = Plan::new(
            &PlanParams {
                bulk_flows: 0,
                ..PlanParams::full()
            },
            1,
        );
        assert!(im_only.bulk.is_empty());
        assert_eq!(im_only.im.len(), 3);
        // IM starts right after the lead; the messages are the same as with bulk flows.
        assert_eq!(im_only.im[0].start_s, PlanParams::full().lead_s);
        let both = Plan::new(&PlanParams::full(), 1);
        assert_eq!(im_only.im[0].sends_s, both.im[0].sends_s);
        let bulk_only = Plan::new(
            &PlanParams {
                im: false,
                ..PlanParams::full()
            },
            1,
        );
        assert!(bulk_only.im.is_empty());
        assert_eq!(bulk_only.bulk, both.bulk);
        let last = bulk_only.bulk.last().unwrap();
        assert_eq!(bulk_only.end_s, last.start_s + bulk_only.bulk_timeout_s);
    }

    #[test]
    fn uploads_come_last_and_leave_downloads_and_im_where_they_were() {
        let without = Plan::new(&PlanParams::full(), 3);
        let p = Plan::new(
            &PlanParams {
                uploads: 6,
                ..PlanParams::full()
            },
            3,
        );
        assert_eq!(p.bulk, without.bulk);
        assert_eq!(p.im, without.im);
        assert_eq!(p.uploads.len(), 6);
        assert_eq!(p.uploads[0].start_s, without.end_s);
        assert!(p.uploads.windows(2).all(|w| w[0].start_s < w[1].start_s));
        let sizes: Vec<u64> = p.uploads.iter().map(|f| f.size).collect();
        assert_eq!(sizes[..3], BULK_SIZES);
        let last = p.uploads.last().unwrap();
        assert_eq!(p.end_s, last.start_s + p.upload_timeout_s);
        // Uploads alone start right after the lead-in.
        let alone = Plan::new(
            &PlanParams {
                bulk_flows: 0,
                im: false,
                uploads: 3,
                ..PlanParams::full()
            },
            3,
        );
        assert!(alone.bulk.is_empty() && alone.im.is_empty());
        assert_eq!(alone.uploads[0].start_s, PlanParams::full().lead_s);
    }

    #[test]
    fn sizes_cycle() {
        let p = Plan::new(&PlanParams::full(), 1);
        let n = |s| p.bulk.iter().filter(|f| f.size == s).count();
        assert_eq!(n(BULK_SIZES[0]), 4);
        assert_eq!(n(BULK_SIZES[1]), 4);
        assert_eq!(n(BULK_SIZES[2]), 4);
    }
}
