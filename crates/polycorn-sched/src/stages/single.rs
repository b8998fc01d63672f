//! Single path per user — soft selector modelling today's operational HSR WiFi.
//!
//! Source: POLYCORN (NSDI'23) §6 ("round-robin single-path per SIM" baseline): every passenger
//! is served by exactly one SIM, and passengers are spread over SIMs in turn. The n-th user seen
//! gets path `n mod N` among the live paths at that time. A user whose path is in an outage
//! waits (there is no failover, as in the operational system); a user whose path no longer
//! exists is reassigned on its next chunk. No constants.

use alloc::collections::BTreeMap;

use crate::flow::UserId;
use crate::path::PathId;
use crate::sets::{Moves, Reason, StageKind};
use crate::stage::{Schedulerlet, StageCtx};

/// Each user pinned to one path, users assigned round robin.
#[derive(Debug, Clone, Default)]
pub struct SinglePath {
    assigned: BTreeMap<UserId, PathId>,
    next_user: usize,
}

impl Schedulerlet for SinglePath {
    fn name(&self) -> &'static str {
        "single"
    }
    fn kind(&self) -> StageKind {
        StageKind::SoftSelector
    }
    fn apply(&mut self, ctx: &StageCtx<'_>, moves: &mut Moves<'_>) {
        let user = ctx.chunk.user;
        let path = match self.assigned.get(&user) {
            Some(p) if ctx.paths.try_get(*p).is_some() => *p,
            _ => {
                let live: alloc::vec::Vec<PathId> = ctx.live.iter().collect();
                if live.is_empty() {
                    return;
                }
                let p = live[self.next_user % live.len()];
                self.next_user = self.next_user.wrapping_add(1);
                self.assigned.insert(user, p);
                p
            }
        };
        if moves.candidates().contains(path) && ctx.paths.get(path).has_room() {
            moves.select(path, Reason::AssignedToUser);
        }
    }
    fn on_user_closed(&mut self, user: UserId) {
        self.assigned.remove(&user);
    }
}
