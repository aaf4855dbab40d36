//! Which connection the server admits when it is full: a per-peer limit, a reserved slot,
//! and eviction of connections that never sent a request.
//!
//! # Why
//!
//! The server holds at most `--max-connections` connections (each costs two threads and a
//! descriptor). A connection that finished the handshake and then sends nothing is
//! indistinguishable, on the wire, from a guest whose disk is idle, and such a guest must
//! stay connected: with QEMU's default `reconnect-delay` of 0, a lost connection fails the
//! guest's requests at once (QEMU's `BlockdevOptionsNbd`), so closing it breaks the
//! guest's disk. But if idle connections are never closed,
//! 255 of them lock every new client out. Other servers only count: qemu-nbd serves at most
//! `--shared=N` clients (default 1) and refuses the rest; nbdkit's limit filter
//! (`limit=N`, default 1) rejects later clients "if more than N clients try to connect at
//! the same time". Neither tells an idle guest from a squatter, so both can be locked out
//! the same way. vmio tells them apart by what a connection has done:
//!
//! - **Eviction.** A connection that finished the handshake and never sent a request holds
//!   no data of anyone: no write of it was acknowledged, nothing is in flight. When the
//!   table is full, the one of those that has waited longest since its handshake is closed
//!   (a hard disconnect) to admit the newcomer. A connection that has sent at least one
//!   request is never evicted, however long it then idles: that is the guest QEMU will not
//!   reconnect. A connection still in the handshake is not evicted either; it is bounded by
//!   `--handshake-timeout` (10 s) instead. The NBD protocol lets a server initiate a hard
//!   disconnect only on a protocol violation or at shutdown ("Terminating the transmission
//!   phase"); eviction goes beyond that, deliberately and only for connections that never
//!   used the export: a client that negotiated and then did nothing loses a connection it
//!   never used, where the alternative is that every new client is refused.
//! - **Per-peer limit.** One peer — a uid on a Unix socket (`SO_PEERCRED`, unix(7)), an
//!   address on TCP — holds at most `--max-connections-per-peer` connections (default:
//!   `--max-connections` less the reserved slot). A peer at its limit may still connect by
//!   evicting one of its *own* never-used connections; otherwise it is refused.
//! - **Reserved slot.** The last [`RESERVED_SLOTS`] slot(s) of the table admit only a peer
//!   that holds no connection yet, so that one peer cannot take every slot with connections
//!   that are in use (which eviction does not touch); another uid or address still gets in.
//!
//! What is left: a client of the same peer that keeps every slot in the *handshake* (reconnecting
//! as each times out after `--handshake-timeout`) still keeps that peer's new clients out while
//! it goes on; another peer gets the reserved slot. Evicting connections in the handshake too
//! would let such a client evict the newcomer's own connection before it finishes.
//!
//! Eviction needs no tuning and is what keeps a single-uid deployment (every QEMU of one
//! user on one Unix socket — one peer) from being locked out; the per-peer limit and the
//! reserved slot matter when several peers share the server.
//!
//! ```text
//! admit(peer):
//!     own = connections of peer
//!     if own >= per_peer:                        # this peer is at its limit
//!         victim = oldest never-used connection of peer      else refuse(PerPeer)
//!     elif total >= max or (own > 0 and total >= max - RESERVED_SLOTS):
//!         victim = oldest never-used connection of anyone   else refuse(Full)
//!     close victim (if any); admit
//! ```
//!
//! A connection's phase moves Handshake -> Unused (handshake done) -> Used (first request
//! read) once, or Unused -> Evicted; the last two steps race (a request arriving as the
//! server evicts) and are decided by one compare-and-swap, so a connection whose request
//! was read is never evicted, and an evicted one never executes a request.
//!
//! Sources: the NBD protocol specification (`doc/proto.md` of NetworkBlockDevice/nbd,
//! "Terminating the transmission phase"); qemu-nbd(8) (`-e, --shared=NUM`); nbdkit-limit-filter(1);
//! QEMU's `qapi/block-core.json` (`BlockdevOptionsNbd.reconnect-delay`, default 0); unix(7)
//! (`SO_PEERCRED`).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};

/// Slots of the table kept for a peer that holds no connection yet.
pub const RESERVED_SLOTS: usize = 1;

/// Who is connecting, for the per-peer limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The uid of a Unix-socket peer (`SO_PEERCRED`).
    Uid(u32),
    /// The address of a TCP peer.
    Addr(IpAddr),
    /// The peer could not be identified (all such connections count as one peer).
    Unknown,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Uid(u) => write!(f, "uid {u}"),
            Peer::Addr(a) => write!(f, "{a}"),
            Peer::Unknown => write!(f, "an unidentified peer"),
        }
    }
}

/// Where a connection is in its life, as the admission policy sees it.
pub const HANDSHAKE: u8 = 0;
/// Handshake done, no request read yet: evictable.
pub const UNUSED: u8 = 1;
/// At least one request read: never evicted.
pub const USED: u8 = 2;
/// Closed by eviction: its reader must not execute a request.
pub const EVICTED: u8 = 3;

/// A connection's phase, shared by its reader and the accept thread.
#[derive(Debug, Default)]
pub struct Phase(AtomicU8);

impl Phase {
    pub fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst)
    }
    /// The handshake finished (Handshake -> Unused).
    pub fn handshaken(&self) {
        let _ = self
            .0
            .compare_exchange(HANDSHAKE, UNUSED, Ordering::SeqCst, Ordering::SeqCst);
    }
    /// A request was read: true if the connection may execute it (it is now Used), false
    /// if it was evicted first.
    pub fn use_it(&self) -> bool {
        match self
            .0
            .compare_exchange(UNUSED, USED, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => true,
            Err(now) => now == USED,
        }
    }
    /// Evict (Unused -> Evicted): false if the connection was used meanwhile.
    pub fn evict(&self) -> bool {
        self.0
            .compare_exchange(UNUSED, EVICTED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

/// One admitted connection as the policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct Seat {
    pub id: u64,
    pub peer: Peer,
    /// Since when it has been unused (handshake done, no request), in any monotonic unit;
    /// None: in the handshake, or used.
    pub unused_since: Option<u64>,
}

/// Why a connection is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The table is full (or only the reserved slot is left and the peer already holds
    /// connections) and no connection is unused.
    Full,
    /// The peer holds its limit and none of its connections is unused.
    PerPeer,
}

/// What to do with a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Admit,
    /// Evict this connection, then admit.
    Evict(u64),
    Refuse(Refusal),
}

/// The admission policy: table size and per-peer limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub max: usize,
    pub per_peer: usize,
}

impl Policy {
    /// `per_peer` 0: the table less the reserved slot (at least 1); otherwise at most the
    /// table.
    pub fn new(max: usize, per_peer: usize) -> Self {
        let max = max.max(1);
        let per_peer = if per_peer == 0 {
            max.saturating_sub(RESERVED_SLOTS).max(1)
        } else {
            per_peer.min(max)
        };
        Self { max, per_peer }
    }

    /// Decide for a connection from `peer` given the connections held now.
    pub fn admit(&self, peer: Peer, seats: &[Seat]) -> Decision {
        let own = seats.iter().filter(|s| s.peer == peer).count();
        let oldest = |mine: bool| {
            seats
                .iter()
                .filter(|s| !mine || s.peer == peer)
                .filter_map(|s| s.unused_since.map(|t| (t, s.id)))
                .min()
                .map(|(_, id)| id)
        };
        let (victim, why) = if own >= self.per_peer {
            (oldest(true), Refusal::PerPeer)
        } else if seats.len() >= self.max
            || (own > 0 && seats.len() >= self.max.saturating_sub(RESERVED_SLOTS))
        {
            (oldest(false), Refusal::Full)
        } else {
            return Decision::Admit;
        };
        match victim {
            Some(id) => Decision::Evict(id),
            None => Decision::Refuse(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Peer = Peer::Uid(1000);
    const B: Peer = Peer::Uid(1001);

    fn seat(id: u64, peer: Peer, unused_since: Option<u64>) -> Seat {
        Seat {
            id,
            peer,
            unused_since,
        }
    }

    #[test]
    fn a_full_table_of_unused_connections_admits_a_newcomer_by_evicting_the_longest_unused() {
        let p = Policy::new(256, 0);
        // 255 connections of one uid that finished the handshake and sent nothing, the
        // first of them unused since t = 5, the others later.
        let seats: Vec<Seat> = (0..255)
            .map(|i| seat(i, A, Some(if i == 0 { 5 } else { 10 + i })))
            .collect();
        assert_eq!(p.per_peer, 255);
        assert_eq!(p.admit(A, &seats), Decision::Evict(0));
        // Another uid takes the reserved slot without evicting anyone.
        assert_eq!(p.admit(B, &seats), Decision::Admit);
    }

    #[test]
    fn connections_that_sent_a_request_or_are_in_the_handshake_are_never_evicted() {
        let p = Policy::new(4, 0);
        let seats = [
            seat(0, A, None),
            seat(1, A, None),
            seat(2, B, None),
            seat(3, B, None),
        ];
        assert_eq!(p.admit(A, &seats), Decision::Refuse(Refusal::Full));
        assert_eq!(
            p.admit(Peer::Uid(7), &seats),
            Decision::Refuse(Refusal::Full)
        );
        // One unused connection among used ones is the one evicted, whoever holds it.
        let seats = [
            seat(0, A, None),
            seat(1, B, Some(100)),
            seat(2, B, None),
            seat(3, A, None),
        ];
        assert_eq!(p.admit(Peer::Uid(7), &seats), Decision::Evict(1));
    }

    #[test]
    fn a_peer_at_its_limit_evicts_only_its_own_unused_connection() {
        let p = Policy::new(8, 2);
        assert_eq!(p.per_peer, 2);
        let seats = [seat(0, B, Some(1)), seat(1, A, None), seat(2, A, Some(9))];
        assert_eq!(p.admit(A, &seats), Decision::Evict(2));
        let seats = [seat(0, B, Some(1)), seat(1, A, None), seat(2, A, None)];
        assert_eq!(p.admit(A, &seats), Decision::Refuse(Refusal::PerPeer));
        // Below its limit and with room, a peer is admitted.
        assert_eq!(p.admit(B, &seats), Decision::Admit);
    }

    #[test]
    fn the_reserved_slot_admits_only_a_peer_without_connections() {
        let p = Policy::new(3, 0);
        assert_eq!(p.per_peer, 2);
        let seats = [seat(0, A, None), seat(1, B, None)];
        // Two of three slots held: A (holding one) may not take the last; C may.
        assert_eq!(p.admit(A, &seats), Decision::Refuse(Refusal::Full));
        assert_eq!(p.admit(Peer::Unknown, &seats), Decision::Admit);
        let tcp = Peer::Addr(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(p.admit(tcp, &seats), Decision::Admit);
    }

    #[test]
    fn a_table_of_one_admits_one_connection_per_peer() {
        let p = Policy::new(1, 0);
        assert_eq!(p.per_peer, 1);
        assert_eq!(p.admit(A, &[]), Decision::Admit);
        assert_eq!(p.admit(A, &[seat(0, A, Some(3))]), Decision::Evict(0));
        assert_eq!(
            p.admit(B, &[seat(0, A, None)]),
            Decision::Refuse(Refusal::Full)
        );
        assert_eq!(Policy::new(4, 9).per_peer, 4);
    }

    #[test]
    fn a_used_connection_cannot_be_evicted_and_an_evicted_one_cannot_be_used() {
        let ph = Phase::default();
        assert!(!ph.evict(), "in the handshake");
        ph.handshaken();
        assert!(ph.use_it());
        assert!(ph.use_it(), "later requests too");
        assert!(!ph.evict());
        let ph = Phase::default();
        ph.handshaken();
        assert!(ph.evict());
        assert!(!ph.use_it());
        assert_eq!(ph.get(), EVICTED);
    }
}
