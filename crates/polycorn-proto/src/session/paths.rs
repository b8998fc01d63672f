//! The session's paths: attaching and detaching subflows, hellos and epochs, `TCP_INFO`.

use super::*;

impl Session {
    /// A subflow for `path` completed its handshake. Unacknowledged control frames and every
    /// flow's acknowledgement are repeated on it.
    pub fn attach_path(&mut self, now: Instant, path: u8) -> Result<(), ProtoError> {
        self.observe(now);
        let id = path_id(path)?;
        if self.sched.path(id).is_none() {
            self.sched.add_path(now, id).expect("path checked absent");
        } else {
            self.sched
                .set_path_alive(now, id, true)
                .expect("path exists");
        }
        let slot = &mut self.paths[usize::from(path)];
        slot.attached = true;
        slot.stalled = false;
        slot.prio.clear();
        slot.bulk.clear();
        slot.last_rx = now;
        slot.next_ping = now;
        slot.ping_out = None;
        slot.refresh_asked = None;
        slot.counters.attaches += 1;
        for e in self.ctrl_out.values_mut() {
            e.sent_at = None;
        }
        // Acknowledgements and credit sent on a subflow that died may never have arrived:
        // repeat both (a lost credit would leave a sender with nothing in flight waiting).
        for f in self.flows.values_mut() {
            f.recv.credit_sent = 0;
        }
        self.ack_dirty.extend(self.flows.keys().copied());
        self.ack_deadline = Some(now);
        self.ctrl_ack_due = true;
        self.paths_up(now);
        Ok(())
    }

    /// Name `path` for metrics and logs (`None`: no name). The relay's shell names its paths
    /// as its config does; the proxy's shell as the relay's Hello on the path's latest subflow
    /// did (a relay of protocol 2 names none).
    pub fn set_path_name(&mut self, path: u8, name: Option<String>) {
        if let Some(slot) = self.paths.get_mut(usize::from(path)) {
            slot.name = name;
        }
    }

    /// The name of `path`, if it has one ([`Session::set_path_name`]).
    pub fn path_name(&self, path: u8) -> Option<&str> {
        self.paths.get(usize::from(path))?.name.as_deref()
    }

    /// (proxy) Record the protocol version of the relay's Hello on `path`'s latest subflow
    /// ([`PeerHello::version`]): it decides which frames the path may carry to the relay.
    pub fn set_peer_version(&mut self, path: u8, version: u16) {
        if let Some(slot) = self.paths.get_mut(usize::from(path)) {
            slot.peer_version = version;
        }
    }

    /// (proxy) Ask the relay to replace `path`'s subflow with a fresh connection, because this
    /// end's slow-start threshold on it fell to `ssthresh` segments while the path was idle
    /// ([`Frame::Refresh`]). Queued on the path's own subflow ahead of data. Returns whether
    /// it was sent: not to a relay older than [`REFRESH_VERSION`] (which could not decode it,
    /// see [`Session::set_peer_version`]), nor on a path without a subflow.
    pub fn ask_refresh(
        &mut self,
        now: Instant,
        path: u8,
        ssthresh: u32,
    ) -> Result<bool, ProtoError> {
        if self.cfg.role != Role::Proxy {
            return Err(ProtoError::WrongDirection("Refresh"));
        }
        self.observe(now);
        let Some(slot) = self.paths.get_mut(usize::from(path)) else {
            return Ok(false);
        };
        if !slot.attached || slot.peer_version < REFRESH_VERSION {
            return Ok(false);
        }
        let bytes = Frame::Refresh { path, ssthresh }.to_vec();
        slot.counters.tx_bytes += bytes.len() as u64;
        slot.prio.extend_from_slice(&bytes);
        Ok(true)
    }

    /// (relay) Whether the proxy asked for `path`'s subflow to be replaced since a subflow
    /// last attached on it ([`Frame::Refresh`]): the proxy's slow-start threshold, segments.
    /// Taking it clears it.
    pub fn take_refresh_request(&mut self, path: u8) -> Option<u32> {
        self.paths.get_mut(usize::from(path))?.refresh_asked.take()
    }

    /// This end's epoch: the incarnation its Hellos carry ([`SessionConfig::epoch`], changed
    /// by [`Session::renew_epoch`]).
    pub fn epoch(&self) -> u64 {
        self.cfg.epoch
    }

    /// A new subflow's Hellos: this end's carried epoch `ours`, the peer's `theirs`; call it
    /// before attaching the subflow, and attach it only on [`HelloOutcome::Attach`] or
    /// [`HelloOutcome::PeerRestarted`].
    ///
    /// The peer's first epoch is remembered. A different one means the peer lost the session's
    /// state (a proxy restarted, or dropped the session after every path was down longer than
    /// the hold time), or, at the relay, that the proxy is another one (its host name moved).
    /// Every open flow is then reset ([`Event::FlowReset`], reason
    /// [`ResetReason::SessionLost`]) rather than left waiting for answers that cannot come, and
    /// flow ids, control frame sequence numbers and queued output start again as in a new
    /// session. The relay also renews its own epoch ([`Session::renew_epoch`]): a relay epoch
    /// then only ever belongs to one proxy incarnation, so a proxy the relay comes back to
    /// after speaking to another sees a restarted relay and starts afresh too, instead of
    /// taking the new control frames for repeats of old ones.
    ///
    /// A relay whose proxy answers with another epoch while any path still works with the
    /// session's proxy changes nothing ([`HelloOutcome::Elsewhere`]): one path that reached
    /// another proxy (the name moved, or its IPv4 and IPv6 addresses lead to different hosts)
    /// does not end what the working ones carry.
    pub fn on_peer_hello(&mut self, now: Instant, ours: u64, theirs: u64) -> HelloOutcome {
        self.observe(now);
        let outcome = self.hello_outcome(ours, theirs);
        match outcome {
            HelloOutcome::Attach if self.peer_epoch.is_none() => {
                // The first Hello, or the first of the peer that follows one that closed the
                // session: flows opened meanwhile go to this one.
                self.peer_epoch = Some(theirs);
                self.peer_closed = false;
                self.peer_draining = false;
            }
            HelloOutcome::Renewed => {
                self.renew_epoch(now);
            }
            HelloOutcome::PeerRestarted => {
                self.peer_epoch = Some(theirs);
                self.restart_with_peer(now);
            }
            HelloOutcome::Attach | HelloOutcome::Elsewhere | HelloOutcome::Stale => {}
        }
        outcome
    }

    /// What [`Session::on_peer_hello`] would answer for these epochs, changing nothing (the
    /// relay asks before it takes a new connection as a path's subflow).
    pub fn hello_outcome(&self, ours: u64, theirs: u64) -> HelloOutcome {
        if ours != self.cfg.epoch {
            return HelloOutcome::Stale;
        }
        match self.peer_epoch {
            None => HelloOutcome::Attach,
            Some(e) if e == theirs => HelloOutcome::Attach,
            Some(_) if self.cfg.role == Role::Relay => {
                if self.any_path_usable() {
                    HelloOutcome::Elsewhere
                } else {
                    HelloOutcome::Renewed
                }
            }
            // The relay's epochs only grow, by one at each renewal, within one session id (a
            // restarted relay comes back under a new id): one a little behind the known one is
            // a subflow the relay opened before it renewed, on its way out.
            Some(e) if e.wrapping_sub(theirs) <= RENEWALS_BEHIND => HelloOutcome::Stale,
            Some(_) => HelloOutcome::PeerRestarted,
        }
    }

    /// Start afresh under a new epoch (this end's incarnation, [`SessionConfig::epoch`]), as an
    /// end about to reach another peer does (the relay failing over to another proxy): every
    /// open flow is reset ([`ResetReason::SessionLost`]), what was said with the peer so far is
    /// forgotten, the next peer's Hello is taken as a first one, and this end's Hellos carry the
    /// new epoch from now on. A peer that still holds the earlier state (a proxy the relay comes
    /// back to later) then sees a restarted peer and starts afresh too, instead of taking the
    /// new control frames for repeats of old ones. Returns the new epoch.
    pub fn renew_epoch(&mut self, now: Instant) -> u64 {
        self.observe(now);
        self.cfg.epoch = self.cfg.epoch.wrapping_add(1);
        self.peer_epoch = None;
        self.restart_with_peer(now);
        self.cfg.epoch
    }

    pub(super) fn restart_with_peer(&mut self, now: Instant) {
        self.peer_closed = false;
        self.peer_draining = false;
        self.reset_all_flows(now, ResetReason::SessionLost);
        self.forget_peer();
    }

    /// Forget what was said with the peer so far (control sequence numbers, queued output), as
    /// in a new session with a new peer. Flows are not touched.
    pub(super) fn forget_peer(&mut self) {
        // The relay keeps counting flow ids (a passenger connection's tasks may still hold an
        // old id for a moment); a relay that restarted counts from 1 again, so the proxy forgets
        // which ids it closed.
        if self.cfg.role == Role::Proxy {
            self.closed_floor = 0;
            self.closed_above.clear();
            // What still arrives for the flows of the conversation so far (from a subflow of
            // the relay's earlier epoch) must not wait for an OpenFlow: the relay's new flow
            // ids are higher (it keeps counting).
            self.stale_through = self.peer_flow_high;
        }
        debug_assert!(self.unannounced.is_empty(), "flows are reset first");
        self.opened_through = 0;
        self.opens_ahead.clear();
        self.ctrl_out.clear();
        self.next_cseq = 0;
        self.ctrl_in_next = 0;
        self.ctrl_in_seen.clear();
        self.ctrl_ack_due = false;
        self.ack_dirty.clear();
        self.ack_deadline = None;
        for slot in &mut self.paths {
            slot.prio.clear();
            slot.bulk.clear();
            slot.ping_out = None;
        }
    }

    /// `path`'s subflow is gone (closed, failed, or abandoned by the shell): what it carried is
    /// reinjected on the other paths and nothing more is scheduled on it until it attaches again.
    pub fn detach_path(&mut self, now: Instant, path: u8) -> Result<(), ProtoError> {
        self.observe(now);
        let id = path_id(path)?;
        let slot = &mut self.paths[usize::from(path)];
        if !slot.attached {
            return Ok(());
        }
        slot.attached = false;
        slot.stalled = false;
        slot.prio.clear();
        slot.bulk.clear();
        slot.ping_out = None;
        if self.sched.path(id).is_some() {
            self.sched.on_path_reset(now, id).expect("path exists");
            self.sched
                .set_path_alive(now, id, false)
                .expect("path exists");
        }
        self.update_all_down(now);
        Ok(())
    }

    pub(super) fn update_all_down(&mut self, now: Instant) {
        let any = self.paths.iter().any(|p| p.attached && !p.stalled);
        if any {
            self.paths_up(now);
        } else {
            self.paths_down(now);
        }
    }

    /// A `TCP_INFO` reading of `path`'s subflow.
    pub fn on_tcp_info(
        &mut self,
        now: Instant,
        path: u8,
        sample: &TcpInfoSample,
    ) -> Result<(), ProtoError> {
        self.observe(now);
        let id = path_id(path)?;
        let slot = &self.paths[usize::from(path)];
        if !slot.attached {
            return Ok(());
        }
        let mut s = *sample;
        s.notsent_bytes = s
            .notsent_bytes
            .saturating_add((slot.prio.len() + slot.bulk.len()) as u64);
        self.sched
            .on_tcp_info(now, id, &s)
            .expect("attached path exists");
        Ok(())
    }
}
