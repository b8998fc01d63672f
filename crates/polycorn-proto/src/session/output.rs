//! The session's output: control frames, path choice and probes, transmission, timers.

use super::*;

impl Session {
    pub(super) fn push_ctrl(&mut self, frame: Frame<'_>) {
        let cseq = self.next_cseq;
        self.next_cseq += 1;
        self.ctrl_out.insert(
            cseq,
            CtrlEntry {
                bytes: frame.to_vec(),
                sent_at: None,
            },
        );
    }

    /// The usable path with the smallest smoothed RTT (for acknowledgements), if any.
    pub(super) fn best_path(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, p) in self.paths.iter().enumerate() {
            if !p.attached || p.stalled {
                continue;
            }
            let rtt = PathId::new(i)
                .and_then(|id| self.sched.path(id))
                .map_or(u64::MAX, |s| s.srtt.as_micros());
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, i));
            }
        }
        best.map(|(_, i)| i).or_else(|| {
            // All stalled: an attached path still beats nothing.
            self.paths.iter().position(|p| p.attached)
        })
    }

    /// Whether no flow has been open for [`SessionConfig::idle_after`] (probes then go every
    /// [`SessionConfig::idle_ping_interval`]). The first flow after such a spell probes every
    /// path at once, and a path's silence counts from that probe: the idle probes left its
    /// last answer seconds old, which says nothing about a stall.
    pub(super) fn probing_idle(&mut self, now: Instant) -> bool {
        let Some(slow) = self.cfg.idle_ping_interval else {
            self.no_flows_since = None;
            return false;
        };
        if self.flows.is_empty() {
            let since = *self.no_flows_since.get_or_insert(now);
            return now >= since + self.cfg.idle_after;
        }
        if let Some(since) = self.no_flows_since.take() {
            if now >= since + self.cfg.idle_after && slow > self.cfg.ping_interval {
                for p in self.paths.iter_mut().filter(|p| p.attached) {
                    p.next_ping = now;
                    p.silence_from = now;
                }
            }
        }
        false
    }

    /// How often each path is probed now: [`SessionConfig::ping_interval`], or
    /// [`SessionConfig::idle_ping_interval`] once no flow has been open for
    /// [`SessionConfig::idle_after`] (as of the last [`Session::poll_transmit`]).
    pub fn probe_interval(&self) -> Duration {
        match (self.cfg.idle_ping_interval, self.no_flows_since) {
            (Some(slow), Some(since)) if self.now >= since + self.cfg.idle_after => slow,
            _ => self.cfg.ping_interval,
        }
    }

    pub(super) fn queue_raw_ack(&mut self, flow: u64, next: u64) {
        if let Some(i) = self.best_path() {
            Frame::Ack { flow, next }.encode(&mut self.paths[i].prio);
        }
    }

    /// Run timers and the scheduler; fill per-path output. Call after every input and when
    /// [`Session::poll_timeout`] expires.
    pub fn poll_transmit(&mut self, now: Instant, predictor: &dyn HandoverPredictor) {
        self.observe(now);
        self.check_hold(now);
        self.expire_unannounced(now);
        // Probes and stall detection.
        let idle = self.probing_idle(now);
        let ping_interval = match self.cfg.idle_ping_interval {
            Some(slow) if idle => slow,
            _ => self.cfg.ping_interval,
        };
        let stall_after = self.cfg.stall_after;
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            if !p.attached {
                continue;
            }
            if !p.stalled
                && now > p.last_rx.max(p.silence_from) + stall_after
                && p.ping_out.is_some()
            {
                p.stalled = true;
                if let Some(id) = PathId::new(i) {
                    if self.sched.path(id).is_some() {
                        self.sched.set_path_alive(now, id, false).expect("exists");
                    }
                }
                self.update_all_down(now);
            }
            let p = &mut self.paths[i];
            if now >= p.next_ping {
                p.ping_seq = p.ping_seq.wrapping_add(1);
                if idle {
                    // Seconds between probes: the path is silent until this one is answered.
                    p.silence_from = now;
                }
                Frame::Ping {
                    id: p.ping_seq,
                    sent_us: now.as_micros(),
                }
                .encode(&mut p.prio);
                if p.ping_out.is_none() {
                    p.ping_out = Some((p.ping_seq, now));
                }
                p.next_ping = now + ping_interval;
            }
        }
        // Reliable control frames: new ones and due repeats, on every usable path.
        let retransmit = self.cfg.ctrl_retransmit;
        let usable: Vec<usize> = (0..self.paths.len())
            .filter(|&i| self.paths[i].attached && !self.paths[i].stalled)
            .collect();
        let targets = if usable.is_empty() {
            (0..self.paths.len())
                .filter(|&i| self.paths[i].attached)
                .collect()
        } else {
            usable
        };
        if !targets.is_empty() {
            for e in self.ctrl_out.values_mut() {
                if e.sent_at.is_none_or(|t| now >= t + retransmit) {
                    e.sent_at = Some(now);
                    for &i in &targets {
                        self.paths[i].prio.extend_from_slice(&e.bytes);
                    }
                }
            }
        }
        if self.ctrl_ack_due {
            if let Some(i) = self.best_path() {
                Frame::CtrlAck {
                    next: self.ctrl_in_next,
                }
                .encode(&mut self.paths[i].prio);
                self.ctrl_ack_due = false;
            }
        }
        // Acknowledgements and credit.
        if self.ack_deadline.is_some_and(|d| now >= d) {
            if let Some(best) = self.best_path() {
                let dirty = std::mem::take(&mut self.ack_dirty);
                for flow in dirty {
                    let Some(f) = self.flows.get(&flow) else {
                        continue;
                    };
                    let grant = self.grantable_limit(f);
                    self.set_limit(flow, grant);
                    let f = self.flows.get_mut(&flow).expect("present");
                    let r = &mut f.recv;
                    let out = &mut self.paths[best].prio;
                    Frame::Ack { flow, next: r.next }.encode(out);
                    r.acked_sent = r.next;
                    if r.limit > r.credit_sent {
                        Frame::Credit {
                            flow,
                            limit: r.limit,
                        }
                        .encode(out);
                        r.credit_sent = r.limit;
                    }
                }
                self.ack_deadline = None;
            }
        }
        // Probes: a flow whose sent bytes stay unacknowledged, or that has bytes to send but
        // nothing in flight (waiting for credit that may have been lost), asks the peer to
        // repeat its acknowledgement and credit.
        if let Some(best) = self.best_path() {
            let probe = self.cfg.ack_probe;
            for (&flow, f) in self.flows.iter_mut() {
                let s = &mut f.send;
                if s.needs_probe() && now >= s.progress_at + probe {
                    s.progress_at = now;
                    let data_end = s.sent.min(s.end());
                    let fin = s.sent > s.end();
                    encode_data_header(&mut self.paths[best].prio, flow, data_end, fin, 0);
                }
            }
        }
        // Data.
        for _ in 0..MAX_DECISIONS_PER_POLL {
            let decision = self.sched.poll_decision(now, predictor);
            self.count_moves();
            let Some(d) = decision else {
                break;
            };
            let flow = d.flow.0;
            let Some(f) = self.flows.get_mut(&flow) else {
                continue;
            };
            let end_seq = d.offset + d.seq_len();
            if end_seq > f.send.sent {
                if f.send.sent <= f.send.acked {
                    // Nothing was outstanding: the probe clock starts now.
                    f.send.progress_at = now;
                }
                f.send.sent = end_seq;
            }
            let s = &f.send;
            if d.offset < s.base || d.offset + u64::from(d.len) > s.end() {
                continue;
            }
            let start = (d.offset - s.base) as usize;
            let len = d.len as usize;
            let (a, b) = s.buf.as_slices();
            let copies = d.paths.len() as u64;
            for pid in d.paths.iter() {
                let slot = &mut self.paths[pid.index()];
                let out = &mut slot.bulk;
                let before = out.len();
                encode_data_header(out, flow, d.offset, d.fin, len);
                let end = start + len;
                if start < a.len() {
                    out.extend_from_slice(&a[start..end.min(a.len())]);
                }
                if end > a.len() {
                    out.extend_from_slice(&b[start.saturating_sub(a.len())..end - a.len()]);
                }
                slot.counters.tx_bytes += (out.len() - before) as u64;
                slot.counters.data_bytes += len as u64;
                if d.reinjection {
                    slot.counters.reinjected_bytes += len as u64;
                }
            }
            if copies > 1 {
                // Count the extra copies on every path but the first.
                for pid in d.paths.iter().skip(1) {
                    self.paths[pid.index()].counters.redundant_bytes += len as u64;
                }
            }
        }
    }

    /// Whether an outage of every path can end the session: with flows open, on both ends (they
    /// are reset); without, on the proxy only, which then frees the session (its relay restarted
    /// under a new id, or comes back later to a fresh session under the same one).
    pub(super) fn hold_matters(&self) -> bool {
        !self.flows.is_empty() || self.cfg.role == Role::Proxy
    }

    /// End the session now, as its hold time running out would, if no path is usable (every
    /// subflow gone, or silent for the stall time): every flow is reset
    /// ([`ResetReason::SessionLost`]) and [`Event::SessionLost`] follows. Returns whether it
    /// ended. The proxy calls it on a relay's earlier session when the same relay opens a new
    /// one: a relay that restarted (after a crash, or a gateway's power cut, whose subflows
    /// only fall silent) will never come back to the old session, so holding its passengers'
    /// connections for the hold time only keeps their servers waiting.
    pub fn end_if_all_paths_down(&mut self, now: Instant) -> bool {
        self.observe(now);
        if self.paths.iter().any(|p| p.attached && !p.stalled) {
            return false;
        }
        self.reset_all_flows(now, ResetReason::SessionLost);
        self.events.push_back(Event::SessionLost);
        self.paths_down(now);
        self.all_down_since = Some(now);
        true
    }

    /// (proxy) Fail the session if data has waited [`UNANNOUNCED_WAIT`] (with a usable path)
    /// for its flow's `OpenFlow`.
    pub(super) fn expire_unannounced(&mut self, now: Instant) {
        if self.failed.is_some() || self.all_down_since.is_some() {
            return;
        }
        let clock = self.usable_clock(now);
        let oldest = self.unannounced.iter().min_by_key(|(_, &since)| since);
        if let Some((&flow, _)) = oldest.filter(|(_, &since)| clock >= since + UNANNOUNCED_WAIT) {
            let why = Unopened::NotInTime;
            self.fail(now, ProtoError::UnopenedFlow { flow, why });
        }
    }

    /// (proxy) When [`Session::expire_unannounced`] must look again: none while no path is
    /// usable (the wait stands still).
    pub(super) fn unannounced_deadline(&self) -> Option<Instant> {
        if self.failed.is_some() || self.all_down_since.is_some() {
            return None;
        }
        let since = self.unannounced.values().min()?;
        let due = *since + UNANNOUNCED_WAIT;
        Some(self.usable_from + due.saturating_sub(self.usable_before))
    }

    pub(super) fn check_hold(&mut self, now: Instant) {
        let Some(since) = self.all_down_since else {
            return;
        };
        if now > since + self.cfg.hold_time && self.hold_matters() {
            self.reset_all_flows(now, ResetReason::SessionLost);
            self.events.push_back(Event::SessionLost);
            // Start counting again so a later outage is judged on its own.
            self.all_down_since = Some(now);
        }
    }

    /// Whether `path` has bytes to write.
    pub fn has_output(&self, path: u8) -> bool {
        self.paths
            .get(usize::from(path))
            .is_some_and(|p| !p.prio.is_empty() || !p.bulk.is_empty())
    }

    /// Take everything queued for `path` (control frames first), to be written to its subflow
    /// in order. `out` is cleared first; its allocation is reused.
    pub fn take_output(&mut self, path: u8, out: &mut Vec<u8>) {
        out.clear();
        let Some(p) = self.paths.get_mut(usize::from(path)) else {
            return;
        };
        if p.prio.is_empty() {
            std::mem::swap(out, &mut p.bulk);
        } else {
            std::mem::swap(out, &mut p.prio);
            out.extend_from_slice(&p.bulk);
            p.bulk.clear();
        }
    }

    /// Next event for the shell.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Session::poll_transmit`] must run again if nothing else happens.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = self.sched.poll_timeout();
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        let any_attached = self.paths.iter().any(|p| p.attached);
        if let Some(d) = self.ack_deadline.filter(|_| any_attached) {
            consider(d);
        }
        for p in self.paths.iter().filter(|p| p.attached) {
            consider(p.next_ping);
            if !p.stalled && p.ping_out.is_some() {
                consider(p.last_rx.max(p.silence_from) + self.cfg.stall_after);
            }
        }
        if any_attached {
            if let Some(e) = self.ctrl_out.values().map(|e| e.sent_at).min() {
                consider(e.map_or(self.now, |s| s + self.cfg.ctrl_retransmit));
            }
        }
        if any_attached {
            for f in self.flows.values() {
                if f.send.needs_probe() {
                    consider(f.send.progress_at + self.cfg.ack_probe);
                }
            }
        }
        if let Some(since) = self.all_down_since {
            if self.hold_matters() {
                consider(since + self.cfg.hold_time + Duration::from_micros(1));
            }
        }
        if let Some(at) = self.unannounced_deadline() {
            consider(at);
        }
        t
    }
}
