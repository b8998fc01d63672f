//! The session's input: frames from the peer, in-order delivery, acknowledgements.

use super::*;

impl Session {
    /// A frame arrived on `path` (after the Hello exchange).
    pub fn on_frame(&mut self, now: Instant, path: u8, frame: Frame<'_>) -> Result<(), ProtoError> {
        self.observe(now);
        path_id(path)?;
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        {
            let slot = &mut self.paths[usize::from(path)];
            slot.last_rx = now;
            slot.counters.rx_frames += 1;
            if slot.stalled {
                slot.stalled = false;
                let id = path_id(path)?;
                if self.sched.path(id).is_some() {
                    self.sched.set_path_alive(now, id, true).expect("exists");
                }
                self.paths_up(now);
            }
        }
        if self.peer_closed {
            // What a peer sent on its other subflows before its Close (sent on every path)
            // arrives after it: it concerns flows and control frames that are gone, and must
            // not acknowledge or answer the ones meant for the next peer.
            return Ok(());
        }
        match frame {
            Frame::Hello { .. } => Err(ProtoError::Hello("second Hello on a subflow".into())),
            Frame::Data {
                flow,
                offset,
                fin,
                data,
            } => {
                self.paths[usize::from(path)].counters.rx_bytes +=
                    (data.len() + crate::frame::DATA_OVERHEAD) as u64;
                self.on_data(now, flow, offset, fin, data)
            }
            Frame::Ack { flow, next } => self.on_ack(now, flow, next),
            Frame::Credit { flow, limit } => {
                if let Some(f) = self.flows.get(&flow) {
                    if f.in_sched {
                        self.sched
                            .on_flow_credit(now, FlowId(flow), limit)
                            .map_err(|e| sched_err(flow, e))?;
                    }
                }
                Ok(())
            }
            Frame::OpenFlow {
                cseq,
                flow,
                user,
                dst,
            } => {
                if self.cfg.role != Role::Proxy {
                    return Err(ProtoError::WrongDirection("OpenFlow"));
                }
                if self.ctrl_first_time(cseq)? {
                    self.opens_ahead.insert(cseq, flow);
                    self.advance_opened_through();
                    self.on_open_flow(now, flow, user, dst)?;
                }
                Ok(())
            }
            Frame::OpenResult { cseq, flow, status } => {
                if self.cfg.role != Role::Relay {
                    return Err(ProtoError::WrongDirection("OpenResult"));
                }
                if self.ctrl_first_time(cseq)? {
                    if let Some(f) = self.flows.get_mut(&flow) {
                        if f.phase == FlowPhase::Opening {
                            if status == OpenStatus::Ok {
                                f.phase = FlowPhase::Open;
                                self.events.push_back(Event::FlowOpened { flow, status });
                                self.check_done(now, flow);
                            } else {
                                self.events.push_back(Event::FlowOpened { flow, status });
                                self.forget_reset_flow(now, flow);
                            }
                        }
                    }
                }
                Ok(())
            }
            Frame::Reset { cseq, flow, reason } => {
                if self.ctrl_first_time(cseq)? {
                    if self.flows.contains_key(&flow) {
                        self.events.push_back(Event::FlowReset { flow, reason });
                        self.forget_reset_flow(now, flow);
                    } else if flow != 0 {
                        // Reset before its OpenFlow arrived (or for a flow long gone): a late
                        // OpenFlow must not connect it.
                        self.mark_closed(flow);
                    }
                }
                Ok(())
            }
            Frame::CtrlAck { next } => {
                let keep = self.ctrl_out.split_off(&next);
                self.ctrl_out = keep;
                Ok(())
            }
            Frame::Context(ctx) => {
                if self.cfg.role != Role::Proxy {
                    return Err(ProtoError::WrongDirection("Context"));
                }
                self.sched.on_train_speed(now, f64::from(ctx.speed_mps));
                self.events.push_back(Event::Context(ctx));
                Ok(())
            }
            Frame::Ping { id, sent_us } => {
                let received_us = (now.as_micros() as i64 + self.wall_offset_us).max(0) as u64;
                let pong = Frame::Pong {
                    id,
                    ping_sent_us: sent_us,
                    received_us,
                };
                let slot = &mut self.paths[usize::from(path)];
                pong.encode(&mut slot.prio);
                Ok(())
            }
            Frame::Pong {
                id,
                ping_sent_us,
                received_us,
            } => {
                let slot = &mut self.paths[usize::from(path)];
                if slot.ping_out.is_some_and(|(i, _)| i == id) {
                    slot.ping_out = None;
                }
                let sent = Instant::from_micros(ping_sent_us);
                if sent <= now {
                    let rtt = now - sent;
                    slot.counters.rtt_us = rtt.as_micros();
                    let pid = path_id(path)?;
                    if self.sched.path(pid).is_some() {
                        self.sched.on_rtt_sample(now, pid, rtt).expect("exists");
                        // In i128: the peer's clock reading is any u64 it likes.
                        let sent_wall = i128::from(ping_sent_us) + i128::from(self.wall_offset_us);
                        let owd = i128::from(received_us) - sent_wall;
                        let owd = if owd >= 0 && owd <= i128::from(rtt.as_micros()) {
                            owd as u64
                        } else {
                            rtt.as_micros() / 2
                        };
                        self.sched
                            .on_owd_sample(now, pid, Duration::from_micros(owd))
                            .expect("exists");
                    }
                }
                Ok(())
            }
            Frame::PathStatus {
                path: SESSION_PATH,
                up,
            } => {
                // Only a proxy announces a drain; a relay's session-wide status means nothing yet.
                if self.cfg.role == Role::Relay && !up && !self.peer_draining {
                    self.peer_draining = true;
                    self.events.push_back(Event::PeerDraining);
                }
                Ok(())
            }
            Frame::PathStatus { path: p, up } => {
                self.events.push_back(Event::PeerPathStatus { path: p, up });
                Ok(())
            }
            Frame::Refresh { path: p, ssthresh } => {
                if self.cfg.role != Role::Relay {
                    return Err(ProtoError::WrongDirection("Refresh"));
                }
                if let Some(slot) = self.paths.get_mut(usize::from(p)) {
                    slot.refresh_asked = Some(ssthresh);
                }
                Ok(())
            }
            Frame::Close { reason, message } => {
                // Sent on every path: the first one counts (the rest are ignored above).
                self.peer_closed = true;
                self.peer_draining = false;
                let flows_reset = self.flows.len();
                self.reset_all_flows(now, ResetReason::Shutdown);
                // The peer is gone with all it knew: the next one (a restarted proxy) starts
                // afresh, and flows opened until it answers are carried to it rather than
                // reset when its Hello shows a new epoch.
                self.forget_peer();
                self.peer_epoch = None;
                self.events.push_back(Event::PeerClosed {
                    reason,
                    message,
                    flows_reset,
                });
                Ok(())
            }
        }
    }

    /// Whether a control frame with `cseq` is new; records it and schedules a CtrlAck.
    pub(super) fn ctrl_first_time(&mut self, cseq: u64) -> Result<bool, ProtoError> {
        self.ctrl_ack_due = true;
        if cseq < self.ctrl_in_next || self.ctrl_in_seen.contains(&cseq) {
            return Ok(false);
        }
        if cseq == self.ctrl_in_next {
            self.ctrl_in_next += 1;
            while self.ctrl_in_seen.remove(&self.ctrl_in_next) {
                self.ctrl_in_next += 1;
            }
        } else {
            if self.ctrl_in_seen.len() >= MAX_CTRL_OOO {
                return Err(ProtoError::CtrlBacklog(MAX_CTRL_OOO));
            }
            self.ctrl_in_seen.insert(cseq);
        }
        self.advance_opened_through();
        Ok(true)
    }

    /// (proxy) Take the `OpenFlow`s every earlier control frame of which has come into
    /// `opened_through`: the relay allocates flow ids in the order of their `OpenFlow`s'
    /// control sequence numbers, so a lower id that is neither open nor closed by then was
    /// never opened in this epoch.
    pub(super) fn advance_opened_through(&mut self) {
        while let Some(e) = self.opens_ahead.first_entry() {
            if *e.key() >= self.ctrl_in_next {
                break;
            }
            self.opened_through = self.opened_through.max(e.remove());
        }
    }

    pub(super) fn is_closed(&self, flow: u64) -> bool {
        match self.cfg.role {
            Role::Relay => flow >= self.next_flow || !self.flows.contains_key(&flow),
            Role::Proxy => {
                !self.flows.contains_key(&flow)
                    && (flow <= self.closed_floor || self.closed_above.contains(&flow))
            }
        }
    }

    pub(super) fn mark_closed(&mut self, flow: u64) {
        if self.cfg.role != Role::Proxy {
            return;
        }
        if flow <= self.closed_floor {
            return;
        }
        self.closed_above.insert(flow);
        if self.closed_above.len() > MAX_CLOSED_ABOVE {
            // Ids below the oldest closed one that were never seen (flows of the relay's
            // exchange with an earlier proxy session): none can still be on its way.
            let first = *self.closed_above.first().expect("not empty");
            self.closed_floor = first - 1;
        }
        // Advance over closed ids and over open ones (they are known while open; a long-lived
        // flow must not make every later closed id be remembered one by one).
        while let Some(next) = self.closed_floor.checked_add(1) {
            if self.closed_above.remove(&next) || self.flows.contains_key(&next) {
                self.closed_floor = next;
            } else {
                break;
            }
        }
    }

    pub(super) fn on_open_flow(
        &mut self,
        now: Instant,
        flow: u64,
        user: IpAddr,
        dst: Destination,
    ) -> Result<(), ProtoError> {
        if flow == 0 || self.is_closed(flow) {
            return Ok(());
        }
        self.peer_flow_high = self.peer_flow_high.max(flow);
        match self.flows.get_mut(&flow) {
            Some(f) if f.phase == FlowPhase::Unannounced => {
                f.phase = FlowPhase::Requested;
                f.user = Some(user);
                self.unannounced.remove(&flow);
                self.unannounced_bytes -= f.recv.buffered;
                self.totals.opened += 1;
            }
            Some(_) => return Ok(()),
            None => {
                if self.flow_limit_reached().is_some() {
                    // Refuse instead of failing the subflow: the passenger gets a reset.
                    let cseq = self.next_cseq;
                    self.push_ctrl(Frame::OpenResult {
                        cseq,
                        flow,
                        status: OpenStatus::Failed,
                    });
                    self.mark_closed(flow);
                    return Ok(());
                }
                let st = self.new_flow_state(FlowPhase::Requested, Some(user));
                self.flows.insert(flow, st);
                self.totals.opened += 1;
            }
        }
        self.register_user(now, flow, user);
        // Data that arrived before the open was already counted; nothing else to replay: the
        // scheduler only carries this side's sending direction.
        self.events
            .push_back(Event::FlowRequested { flow, user, dst });
        Ok(())
    }

    pub(super) fn on_data(
        &mut self,
        now: Instant,
        flow: u64,
        offset: u64,
        fin: bool,
        data: &[u8],
    ) -> Result<(), ProtoError> {
        let end = offset + data.len() as u64;
        if !self.flows.contains_key(&flow) {
            if flow == 0 || self.is_closed(flow) {
                // Late copy for a finished flow: everything was received; say so again so the
                // peer stops reinjecting.
                if flow != 0 {
                    self.queue_raw_ack(flow, end + u64::from(fin));
                }
                return Ok(());
            }
            if self.cfg.role == Role::Relay || flow <= self.stale_through {
                // (proxy) A flow of the relay's earlier epoch, all of whose flows were reset.
                return Ok(());
            }
            if flow <= self.opened_through {
                let why = Unopened::PassedOver {
                    opened_through: self.opened_through,
                };
                return Err(self.fail(now, ProtoError::UnopenedFlow { flow, why }));
            }
            if self.unannounced.len() >= MAX_UNANNOUNCED {
                return Err(ProtoError::TooManyFlows(self.cfg.max_flows));
            }
            if let Some(e) = self.flow_limit_reached() {
                return Err(e);
            }
            let st = self.new_flow_state(FlowPhase::Unannounced, None);
            self.flows.insert(flow, st);
            let since = self.usable_clock(now);
            self.unannounced.insert(flow, since);
            self.peer_flow_high = self.peer_flow_high.max(flow);
        }
        let f = self.flows.get_mut(&flow).expect("present");
        let unannounced = f.phase == FlowPhase::Unannounced;
        let r = &mut f.recv;
        // The credit bounds the data, which needs buffer space; the FIN needs none, and a
        // sender may put it on the last byte the credit allows.
        if end > r.limit {
            return Err(ProtoError::FlowControl {
                flow,
                end,
                limit: r.limit,
            });
        }
        if let Some(fa) = r.fin_at {
            if end > fa || (fin && end != fa) {
                return Err(ProtoError::Fin { flow, fin: fa });
            }
        } else if fin {
            if r.next > end || r.ooo.range(end..).next().is_some() {
                return Err(ProtoError::Fin { flow, fin: end });
            }
            r.fin_at = Some(end);
        }
        if end + r.window / 4 >= r.limit {
            r.pressed = true;
        }
        let before = r.next;
        let held_before = r.buffered;
        if end > r.next {
            let (s, d) = if offset < r.next {
                (r.next, &data[(r.next - offset) as usize..])
            } else {
                (offset, data)
            };
            if s == r.next {
                r.ready.push_back(d.to_vec());
                r.buffered += d.len() as u64;
                r.next = end;
                // Pull in out-of-order segments that now connect.
                while let Some((&k, _)) = r.ooo.first_key_value() {
                    if k > r.next {
                        break;
                    }
                    let seg = r.ooo.remove(&k).expect("present");
                    r.buffered -= seg.len() as u64;
                    let seg_end = k + seg.len() as u64;
                    if seg_end > r.next {
                        let rest = &seg[(r.next - k) as usize..];
                        r.buffered += rest.len() as u64;
                        r.ready.push_back(rest.to_vec());
                        r.next = seg_end;
                    }
                }
            } else {
                r.buffered += insert_ooo(&mut r.ooo, s, d);
                let seg_end = s + d.len() as u64;
                if r.ooo_since.len() < MAX_TIMED_OOO_SEGMENTS || r.ooo_since.contains_key(&seg_end)
                {
                    r.ooo_since.entry(seg_end).or_insert(now);
                }
            }
        }
        // Out-of-order segments the advance delivered: their reorder wait ends now.
        while let Some(e) = r.ooo_since.first_entry() {
            if *e.key() > r.next {
                break;
            }
            let wait = now.saturating_duration_since(e.remove());
            self.reorder.segments += 1;
            self.reorder.wait_sum = self.reorder.wait_sum + wait;
            self.reorder.wait_max = self.reorder.wait_max.max(wait);
            if self.reorder_waits.len() < MAX_PENDING_REORDER_WAITS {
                self.reorder_waits.push(wait);
            } else {
                self.reorder.waits_dropped += 1;
            }
        }
        if r.fin_at == Some(r.next) {
            r.next += 1;
        }
        // Never fewer: the flow still holds every byte it held, now perhaps in order.
        let added = r.buffered - held_before;
        self.recv_bytes += added;
        if unannounced {
            self.unannounced_bytes += added;
            if self.unannounced_bytes > MAX_UNANNOUNCED_BYTES {
                let why = Unopened::TooMuchData {
                    bytes: self.unannounced_bytes,
                };
                return Err(self.fail(now, ProtoError::UnopenedFlow { flow, why }));
            }
        }
        let r = &mut self.flows.get_mut(&flow).expect("present").recv;
        let advanced = r.next > before;
        if advanced && !r.notified {
            r.notified = true;
            self.events.push_back(Event::Readable(flow));
        }
        // Acknowledge: promptly at FIN or after enough bytes; otherwise within ack_delay.
        // Duplicates are acknowledged too, so the sender stops reinjecting them.
        if !advanced {
            // A duplicate or a probe: the sender may be missing our credit as well as our
            // acknowledgement, so both go out again.
            self.flows.get_mut(&flow).expect("present").recv.credit_sent = 0;
        }
        let r = &self.flows[&flow].recv;
        let urgent = r.fin_in_order() || r.next - r.acked_sent >= self.cfg.ack_bytes || !advanced;
        self.ack_dirty.insert(flow);
        let due = if urgent {
            now
        } else {
            now + self.cfg.ack_delay
        };
        self.ack_deadline = Some(self.ack_deadline.map_or(due, |d| d.min(due)));
        Ok(())
    }

    pub(super) fn on_ack(&mut self, now: Instant, flow: u64, next: u64) -> Result<(), ProtoError> {
        let Some(f) = self.flows.get_mut(&flow) else {
            return Ok(());
        };
        let sent_end = f.send.end() + u64::from(f.send.fin);
        if next > sent_end {
            return Err(ProtoError::AckBeyondSent {
                flow,
                ack: next,
                sent: sent_end,
            });
        }
        if next <= f.send.acked {
            return Ok(());
        }
        if f.in_sched {
            self.sched
                .on_flow_ack(now, FlowId(flow), next)
                .map_err(|e| match e {
                    SchedError::AckBeyondSent { ack, sent, .. } => {
                        ProtoError::AckBeyondSent { flow, ack, sent }
                    }
                    e => sched_err(flow, e),
                })?;
        }
        let f = self.flows.get_mut(&flow).expect("present");
        f.send.acked = next;
        f.send.progress_at = now;
        let data_acked = next.min(f.send.end());
        let drop = (data_acked - f.send.base) as usize;
        let extra_before = send_extra(f.send.buf.len());
        f.send.buf.drain(..drop);
        f.send.base = data_acked;
        self.send_bytes -= drop as u64;
        self.send_extra = self.send_extra - extra_before + send_extra(f.send.buf.len());
        if drop > 0 && f.send.blocked {
            f.send.blocked = false;
            self.events.push_back(Event::Writable(flow));
        }
        self.check_done(now, flow);
        Ok(())
    }

    /// Close a flow once both directions are finished and acknowledged.
    pub(super) fn check_done(&mut self, now: Instant, flow: u64) {
        let Some(f) = self.flows.get(&flow) else {
            return;
        };
        let sent_done = f.send.fin && f.send.acked == f.send.end() + 1;
        let recv_done = f.recv.eof_read;
        if f.phase == FlowPhase::Open && sent_done && recv_done {
            // The final acknowledgement of the peer's FIN goes out now, before we forget.
            let next = f.recv.next;
            self.queue_raw_ack(flow, next);
            self.forget_flow(now, flow);
            self.events.push_back(Event::FlowClosed(flow));
        }
    }

    pub(super) fn forget_flow(&mut self, now: Instant, flow: u64) {
        if let Some(f) = self.flows.remove(&flow) {
            if f.phase == FlowPhase::Unannounced {
                self.unannounced.remove(&flow);
                self.unannounced_bytes -= f.recv.buffered;
            }
            self.recv_bytes -= f.recv.buffered;
            self.recv_extra -= f.recv.extra();
            self.send_bytes -= f.send.buf.len() as u64;
            self.send_extra -= send_extra(f.send.buf.len());
            self.leased -= f.send.lease;
            if f.in_sched {
                let _ = self.sched.close_flow(now, FlowId(flow));
            }
            if let Some(u) = f.user {
                if let Some(n) = self.user_flows.get_mut(&u) {
                    *n -= 1;
                    if *n == 0 {
                        self.user_flows.remove(&u);
                    }
                }
            }
        }
        self.ack_dirty.remove(&flow);
        self.mark_closed(flow);
    }
}
