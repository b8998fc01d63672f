//! The session's flows as the local side drives them (open, send, read, flow-control credit),
//! context and path status, and closing.

use super::*;

impl Session {
    pub(super) fn new_flow_state(&self, phase: FlowPhase, user: Option<IpAddr>) -> FlowState {
        FlowState {
            phase,
            user,
            in_sched: false,
            send: SendSide {
                base: 0,
                buf: VecDeque::new(),
                fin: false,
                acked: 0,
                blocked: false,
                lease: 0,
                sent: 0,
                progress_at: self.now,
            },
            recv: RecvSide {
                next: 0,
                ooo: BTreeMap::new(),
                ooo_since: BTreeMap::new(),
                fin_at: None,
                ready: VecDeque::new(),
                ready_off: 0,
                buffered: 0,
                consumed: 0,
                eof_read: false,
                limit: INITIAL_CREDIT,
                window: INITIAL_CREDIT,
                pressed: false,
                acked_sent: 0,
                credit_sent: INITIAL_CREDIT,
                notified: false,
            },
        }
    }

    pub(super) fn register_user(&mut self, now: Instant, flow: u64, user: IpAddr) {
        *self.user_flows.entry(user).or_insert(0) += 1;
        self.sched
            .open_flow(now, FlowId(flow), user_id(user))
            .expect("flow ids are unique");
        if let Some(f) = self.flows.get_mut(&flow) {
            f.in_sched = true;
        }
    }

    /// (relay) Open a flow for passenger `user` to `dst`. Data may be sent right away; the
    /// proxy holds it until the destination answers.
    pub fn open_flow(
        &mut self,
        now: Instant,
        user: IpAddr,
        dst: Destination,
    ) -> Result<u64, ProtoError> {
        self.observe(now);
        if self.cfg.role != Role::Relay {
            return Err(ProtoError::WrongDirection("OpenFlow"));
        }
        if self.closed.is_some() {
            return Err(ProtoError::Closed);
        }
        if let Some(e) = self.flow_limit_reached() {
            return Err(e);
        }
        if let Destination::Name(n, _) = &dst {
            if n.is_empty() || n.len() > 255 {
                return Err(ProtoError::FlowState {
                    flow: 0,
                    what: "host name must be 1 to 255 bytes",
                });
            }
        }
        let flow = self.next_flow;
        self.next_flow += 1;
        let st = self.new_flow_state(FlowPhase::Opening, Some(user));
        self.flows.insert(flow, st);
        self.totals.opened += 1;
        self.register_user(now, flow, user);
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::OpenFlow {
            cseq,
            flow,
            user,
            dst,
        });
        Ok(flow)
    }

    /// (proxy) The destination of a requested flow is connected.
    pub fn accept_flow(&mut self, now: Instant, flow: u64) -> Result<(), ProtoError> {
        self.observe(now);
        let f = self
            .flows
            .get_mut(&flow)
            .ok_or(ProtoError::UnknownFlow(flow))?;
        if f.phase != FlowPhase::Requested {
            return Err(ProtoError::FlowState {
                flow,
                what: "accept_flow on a flow that was not requested",
            });
        }
        f.phase = FlowPhase::Open;
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::OpenResult {
            cseq,
            flow,
            status: OpenStatus::Ok,
        });
        Ok(())
    }

    /// (proxy) The destination of a requested flow could not be reached; the relay resets the
    /// passenger's connection.
    pub fn refuse_flow(
        &mut self,
        now: Instant,
        flow: u64,
        status: OpenStatus,
    ) -> Result<(), ProtoError> {
        self.observe(now);
        if !self.flows.contains_key(&flow) {
            return Err(ProtoError::UnknownFlow(flow));
        }
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::OpenResult { cseq, flow, status });
        self.forget_reset_flow(now, flow);
        Ok(())
    }

    /// Bytes of `flow` the shell may pass to [`Session::send`] now (0 if full or unknown), at
    /// most [`MIN_SEND_BUFFER`] at a time: up to `flow_window` in its send buffer, beyond
    /// [`MIN_SEND_BUFFER`] only while the session's budget has room
    /// ([`SessionConfig::session_buffer`]). What it returns is promised: the next
    /// [`Session::send`] of the flow takes that much even if other flows have used the budget
    /// meanwhile (the shell may read that much from the socket first). At 0, the flow has bytes
    /// of its own unacknowledged, and [`Event::Writable`] follows their acknowledgement (once
    /// [`Session::send`] was refused bytes or offered none).
    pub fn send_capacity(&mut self, flow: u64) -> usize {
        let Some(f) = self.flows.get_mut(&flow) else {
            return 0;
        };
        // The earlier promise is renewed, not added to.
        self.leased -= std::mem::take(&mut f.send.lease);
        if f.send.fin {
            return 0;
        }
        let held = f.send.buf.len() as u64;
        let own = self.cfg.flow_window.saturating_sub(held);
        let floor = MIN_SEND_BUFFER.saturating_sub(held);
        let room = self.budget_room();
        let cap = own.min(MIN_SEND_BUFFER).min(floor + room);
        let lease = cap.saturating_sub(floor);
        self.flows.get_mut(&flow).expect("present").send.lease = lease;
        self.leased += lease;
        cap as usize
    }

    /// Queue bytes read from the local socket of `flow`. Returns how many were taken (at most
    /// [`Session::send_capacity`]); when fewer than offered, [`Event::Writable`] follows once
    /// space frees up.
    pub fn send(&mut self, now: Instant, flow: u64, data: &[u8]) -> Result<usize, ProtoError> {
        self.observe(now);
        let cap = self.send_capacity(flow);
        let f = self
            .flows
            .get_mut(&flow)
            .ok_or(ProtoError::UnknownFlow(flow))?;
        if f.send.fin {
            return Err(ProtoError::FlowState {
                flow,
                what: "send after FIN",
            });
        }
        let n = data.len().min(cap);
        if n < data.len() || cap == 0 {
            f.send.blocked = true;
        }
        if n == 0 {
            self.leased -= std::mem::take(&mut f.send.lease);
            return Ok(0);
        }
        if f.send.sent == f.send.acked && f.send.sent >= f.send.end() {
            // An idle flow has data again: the probe clock starts now.
            f.send.progress_at = now;
        }
        let extra_before = send_extra(f.send.buf.len());
        f.send.buf.extend(&data[..n]);
        self.send_bytes += n as u64;
        self.send_extra = self.send_extra - extra_before + send_extra(f.send.buf.len());
        // The promise is kept: what was taken of it is in `send_extra` now.
        self.leased -= std::mem::take(&mut f.send.lease);
        let held = f.send.buf.len() as u64;
        let in_sched = f.in_sched;
        if held >= self.cfg.flow_window || (held >= MIN_SEND_BUFFER && self.budget_room() == 0) {
            // Full: the shell may wait now, and the acknowledgement that frees room wakes it.
            self.flows.get_mut(&flow).expect("present").send.blocked = true;
        }
        if in_sched {
            self.sched
                .on_flow_data(now, FlowId(flow), n as u64)
                .map_err(|e| sched_err(flow, e))?;
        }
        Ok(n)
    }

    /// The local socket of `flow` reached end of stream: FIN follows the queued bytes.
    pub fn send_fin(&mut self, now: Instant, flow: u64) -> Result<(), ProtoError> {
        self.observe(now);
        let f = self
            .flows
            .get_mut(&flow)
            .ok_or(ProtoError::UnknownFlow(flow))?;
        if f.send.fin {
            return Ok(());
        }
        f.send.fin = true;
        if f.in_sched {
            self.sched
                .on_flow_fin(now, FlowId(flow))
                .map_err(|e| sched_err(flow, e))?;
        }
        Ok(())
    }

    /// Abort `flow` (its local socket was reset or failed): the peer resets its side.
    pub fn reset_flow(
        &mut self,
        now: Instant,
        flow: u64,
        reason: ResetReason,
    ) -> Result<(), ProtoError> {
        self.observe(now);
        if !self.flows.contains_key(&flow) {
            return Err(ProtoError::UnknownFlow(flow));
        }
        let cseq = self.next_cseq;
        self.push_ctrl(Frame::Reset { cseq, flow, reason });
        self.forget_reset_flow(now, flow);
        Ok(())
    }

    /// Copy in-order received bytes of `flow` into `buf`.
    pub fn read(&mut self, now: Instant, flow: u64, buf: &mut [u8]) -> ReadOutcome {
        self.observe(now);
        let Some(f) = self.flows.get_mut(&flow) else {
            return ReadOutcome::WouldBlock;
        };
        let r = &mut f.recv;
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = r.ready.front() else { break };
            let avail = &front[r.ready_off..];
            let k = avail.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&avail[..k]);
            n += k;
            r.ready_off += k;
            if r.ready_off == front.len() {
                r.ready.pop_front();
                r.ready_off = 0;
            }
        }
        if n > 0 {
            let extra_before = r.extra();
            r.consumed += n as u64;
            r.buffered -= n as u64;
            r.notified = false;
            self.recv_extra = self.recv_extra - extra_before + r.extra();
            self.recv_bytes -= n as u64;
            self.maybe_credit(flow);
            return ReadOutcome::Data(n);
        }
        r.notified = false;
        if r.fin_in_order() {
            if !r.eof_read {
                r.eof_read = true;
                self.check_done(now, flow);
            }
            return ReadOutcome::Eof;
        }
        ReadOutcome::WouldBlock
    }

    pub(super) fn flow_window_for(&self, user: Option<IpAddr>) -> u64 {
        let n = user
            .and_then(|u| self.user_flows.get(&u).copied())
            .unwrap_or(1)
            .max(1);
        (self.cfg.user_window / u64::from(n))
            .min(self.cfg.flow_window)
            .max(INITIAL_CREDIT)
    }

    /// The credit limit `f` may have now, and its window: the window beyond what its
    /// application consumed, as far as the session's budget allows, and at least the initial
    /// credit beyond it (set aside when the flow opened); none once the FIN came. The window
    /// grows from the initial credit, doubling while the sender keeps coming near the limit, up
    /// to [`Session::flow_window_for`] (the initial credit while its `OpenFlow` has not come):
    /// a flow the peer sends little on promises none of the budget it would not use.
    pub(super) fn grantable_limit(&self, f: &FlowState) -> (u64, u64) {
        let r = &f.recv;
        if r.fin_at.is_some() {
            // Nothing comes after the FIN (which needs no credit).
            return (r.limit, r.window);
        }
        let most = if f.phase == FlowPhase::Unannounced {
            INITIAL_CREDIT
        } else {
            self.flow_window_for(f.user)
        };
        let window = if r.pressed {
            r.window.saturating_mul(2)
        } else {
            r.window
        }
        .min(most)
        .max(INITIAL_CREDIT);
        let floor = (r.consumed + INITIAL_CREDIT).max(r.limit);
        let limit = (r.consumed + window)
            .min(floor.saturating_add(self.budget_room()))
            .max(r.limit);
        (limit, window)
    }

    /// Raise `flow`'s credit limit to `limit` (never lowers it), with `window` its window from
    /// now on.
    pub(super) fn set_limit(&mut self, flow: u64, (limit, window): (u64, u64)) {
        let Some(f) = self.flows.get_mut(&flow) else {
            return;
        };
        let r = &mut f.recv;
        if limit > r.limit {
            let extra_before = r.extra();
            r.limit = limit;
            r.window = window;
            r.pressed = false;
            self.recv_extra = self.recv_extra - extra_before + r.extra();
        }
    }

    pub(super) fn maybe_credit(&mut self, flow: u64) {
        let Some(f) = self.flows.get(&flow) else {
            return;
        };
        let (limit, window) = self.grantable_limit(f);
        let r = &f.recv;
        // Not for every read: once a quarter of the credit it gives is new.
        if limit > r.limit && limit - r.credit_sent >= (limit - r.consumed) / 4 {
            self.set_limit(flow, (limit, window));
            self.ack_dirty.insert(flow);
            self.ack_deadline = Some(self.now);
        }
    }

    // ----- context and path status ----------------------------------------------------------

    /// (relay) New train context: sent ahead of all data on every live path, and fed to the
    /// local scheduler.
    pub fn send_context(&mut self, now: Instant, ctx: &ContextInfo) {
        self.observe(now);
        self.sched.on_train_speed(now, f64::from(ctx.speed_mps));
        let bytes = Frame::Context(ctx.clone()).to_vec();
        for p in self.paths.iter_mut().filter(|p| p.attached) {
            p.prio.extend_from_slice(&bytes);
            p.counters.tx_bytes += bytes.len() as u64;
        }
    }

    /// (proxy) Announce that this end drains before it stops ([`SESSION_PATH`]): the relay then
    /// opens its new flows at the next proxy rather than here. Queued on every attached path
    /// ahead of data.
    pub fn announce_draining(&mut self, now: Instant) -> Result<(), ProtoError> {
        if self.cfg.role != Role::Proxy {
            return Err(ProtoError::WrongDirection("PathStatus (drain)"));
        }
        self.send_path_status(now, SESSION_PATH, false);
        Ok(())
    }

    /// (relay) Whether the proxy announced its drain ([`Session::announce_draining`]) and has
    /// not closed the session since: a flow opened now would be carried by a proxy about to
    /// stop. Cleared by its Close, and by the Hello of a proxy with a new epoch.
    pub fn peer_draining(&self) -> bool {
        self.peer_draining
    }

    /// Tell the peer that `path` is up or down (e.g. the modem lost its cell).
    pub fn send_path_status(&mut self, now: Instant, path: u8, up: bool) {
        self.observe(now);
        let bytes = Frame::PathStatus { path, up }.to_vec();
        for p in self.paths.iter_mut().filter(|p| p.attached) {
            p.prio.extend_from_slice(&bytes);
        }
    }

    /// Close the session, e.g. because this end is shutting down: every open flow is reset
    /// ([`Event::FlowReset`], reason [`ResetReason::Shutdown`]), queued output is dropped, and a
    /// [`Frame::Close`] with `reason` and `message` is queued on every attached path, so that the
    /// peer resets its side of the flows at once instead of waiting out its hold time
    /// ([`Event::PeerClosed`] there). No flow can be opened afterwards ([`ProtoError::Closed`]).
    pub fn close(&mut self, now: Instant, reason: CloseReason, message: &str) {
        self.observe(now);
        self.shut(now, ResetReason::Shutdown, reason, message);
    }

    /// The peer broke the session as a whole ([`ProtoError::UnopenedFlow`]): close it as
    /// [`Session::close`] does, its flows reset for [`ResetReason::Protocol`] and the Close
    /// saying why, and keep the error for [`Session::on_frame`] to return from now on. Returns
    /// it.
    pub(super) fn fail(&mut self, now: Instant, err: ProtoError) -> ProtoError {
        if self.failed.is_none() {
            let reason = match err {
                ProtoError::UnopenedFlow {
                    why: Unopened::TooMuchData { .. },
                    ..
                } => CloseReason::Limit,
                _ => CloseReason::Protocol,
            };
            self.shut(now, ResetReason::Protocol, reason, &err.to_string());
            self.failed = Some(err.clone());
        }
        err
    }

    pub(super) fn shut(
        &mut self,
        now: Instant,
        reset: ResetReason,
        reason: CloseReason,
        message: &str,
    ) {
        self.reset_all_flows(now, reset);
        self.ctrl_out.clear();
        self.ack_dirty.clear();
        self.ack_deadline = None;
        let bytes = Frame::Close {
            reason,
            message: message.to_string(),
        }
        .to_vec();
        for p in self.paths.iter_mut() {
            p.prio.clear();
            p.bulk.clear();
            if p.attached {
                p.prio.extend_from_slice(&bytes);
            }
        }
        self.closed = Some(bytes);
    }

    /// Whether this end closed the session ([`Session::close`]).
    pub fn closed_here(&self) -> bool {
        self.closed.is_some()
    }

    /// The encoded Close frame this end sent ([`Session::close`]), for the shell to write on a
    /// subflow that connects after the close.
    pub fn close_frame(&self) -> Option<&[u8]> {
        self.closed.as_deref()
    }

    /// Whether the peer closed the session ([`Event::PeerClosed`]) and no peer has said Hello
    /// since.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    pub(super) fn reset_all_flows(&mut self, now: Instant, reason: ResetReason) {
        let mut flows: Vec<u64> = self.flows.keys().copied().collect();
        flows.sort_unstable();
        for flow in flows {
            self.events.push_back(Event::FlowReset { flow, reason });
            self.forget_reset_flow(now, flow);
        }
    }
}
