//! Connection slots: at most `--web.max-connections` connections are held at once, and which
//! one is closed when a newcomer needs a slot and none is free.
//!
//! Within the limit every connection is admitted at once and none is closed for another: a
//! burst of well-behaved clients up to the limit is served whole. Beyond it, the accept loop holds
//! the newcomer ([`ConnectionSlots::admit`] waits) and takes nothing more from the listen backlog
//! until a slot is given back or a held connection may be closed for it. A connection may be
//! closed only once it has had the time to speak ([`GRACE`]), never because it is new:
//! - one that has had no request allowed (with basic auth: none whose credentials verified;
//!   without: no request at all) within [`GRACE`] of being accepted: first those that have sent
//!   nothing at all (not even a TLS ClientHello), oldest first, then the least recently active;
//! - failing that, one that had a request allowed and has moved no byte for [`GRACE`]: a
//!   keep-alive connection left idle, an answer nobody reads.
//!
//! A connection answering a request is never closed for another, unless its answer has not
//! moved for [`GRACE`] (the client reads none of it). When no connection may be closed and some
//! answer requests, the one of those held longest is asked to end after its next answer
//! ([`Conn::retiring`]: the answer says `Connection: close`, as HTTP/1.1 lets a server end a
//! keep-alive connection), one at a time: clients beyond the limit that keep their connections
//! busy (a load test, pipelining clients) take turns. A connection counts as silent only while
//! its client has sent nothing: the table keeps a duplicate of each connection's socket until a
//! request is allowed on it and, before closing a silent one, peeks at it; bytes that arrived but
//! were not read yet (a loaded worker thread) make it one that has sent, and the next is looked at.
//!
//! So a flood of idle, slow or unauthenticated connections costs a scraper its place in the
//! backlog and at most [`GRACE`] more: each connection ahead of it, and its own, is admitted as
//! soon as a held one has had [`GRACE`] to speak or has been idle that long; a scraper that
//! authenticates, and a well-behaved client within the limit, is never closed for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long a new connection has to have a request allowed, and a connection that had one may
/// move no byte, before it may be closed to make room for a newcomer beyond the limit: several
/// round trips of a distant client (a TLS handshake and a request), little beside the time a
/// scraper behind a flood already waits in the backlog.
pub const GRACE: Duration = Duration::from_millis(500);

/// Longest the accept loop sleeps between two looks at the slots while a newcomer waits (a
/// request that ends or an answer that stalls is not announced).
const RECHECK: Duration = Duration::from_millis(100);

/// The slots of one listener (shared by its connections).
pub(crate) struct ConnectionSlots {
    max: usize,
    epoch: Instant,
    table: Mutex<Table>,
    /// A slot was given back.
    freed: Notify,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    held: HashMap<u64, Held>,
}

struct Held {
    trusted: bool,
    conn: Arc<Conn>,
    /// A duplicate of the connection's socket, to peek at for bytes not read yet (none when the
    /// duplicate could not be made, or for a connection that is trusted).
    peer: Option<socket2::Socket>,
}

/// What the slot table and a connection's task both see of the connection.
pub(crate) struct Conn {
    /// When it was accepted, in milliseconds since [`ConnectionSlots`] began.
    accepted: u64,
    /// When it last moved a byte, in milliseconds since [`ConnectionSlots`] began.
    last: AtomicU64,
    /// Whether it has moved a byte since it was accepted.
    moved: AtomicBool,
    /// Requests being answered on it.
    busy: AtomicUsize,
    /// Whether a write of its answer waits for the client to take bytes.
    blocked: AtomicBool,
    /// Whether it is to end after its next answer, for a newcomer.
    retiring: AtomicBool,
    closed: AtomicBool,
    close: Notify,
    epoch: Instant,
}

impl Conn {
    /// Notes that the connection moved a byte now.
    pub(crate) fn touch(&self) {
        self.last.store(millis(self.epoch), Ordering::Relaxed);
        self.moved.store(true, Ordering::Relaxed);
        self.blocked.store(false, Ordering::Relaxed);
    }

    /// Notes that a write waits for the client to take bytes (until the next byte moves).
    pub(crate) fn write_blocked(&self) {
        self.blocked.store(true, Ordering::Relaxed);
    }

    /// Whether the connection is to end after its next answer (a newcomer waits for its slot):
    /// the answer says `Connection: close`.
    pub(crate) fn retiring(&self) -> bool {
        self.retiring.load(Ordering::Relaxed)
    }

    /// Completes once the connection's slot has been taken from it; its task then drops it.
    pub(crate) async fn closed(&self) {
        if !self.closed.load(Ordering::Acquire) {
            self.close.notified().await;
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Stores a permit when the task is not waiting yet.
        self.close.notify_one();
    }

    /// When (in the table's milliseconds) it may be closed for a newcomer, `trusted` or not, if
    /// nothing changes meanwhile; `None` while it answers a request that is not stalled.
    fn closable_from(&self, trusted: bool) -> Option<u64> {
        let grace = u64::try_from(GRACE.as_millis()).unwrap_or(u64::MAX);
        let last = self.last.load(Ordering::Relaxed);
        let busy = self.busy.load(Ordering::Relaxed) > 0;
        if busy && !self.blocked.load(Ordering::Relaxed) {
            return None;
        }
        Some(if trusted || busy { last } else { self.accepted }.saturating_add(grace))
    }
}

fn millis(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A connection's slot, given back when dropped.
pub(crate) struct ConnectionSlot {
    id: u64,
    conn: Arc<Conn>,
    slots: Arc<ConnectionSlots>,
}

/// Marks a request in progress on a connection for as long as it lives.
pub(crate) struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

impl ConnectionSlots {
    /// Slots for `max` connections (at least one).
    pub(crate) fn new(max: usize) -> Arc<ConnectionSlots> {
        Arc::new(ConnectionSlots {
            max: max.max(1),
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
            freed: Notify::new(),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection (`peer`: a duplicate of its socket, [`duplicate`]): at once
    /// while one is free; otherwise once a held connection may be closed for it (it is, see the
    /// module's rules) or one is given back. Meanwhile the caller takes no other connection.
    pub(crate) async fn admit(self: &Arc<Self>, peer: Option<socket2::Socket>) -> ConnectionSlot {
        let conn = self.new_conn(peer.as_ref(), millis(self.epoch));
        let mut peer = peer;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the look at the table: a slot given back after it wakes us.
            freed.as_mut().enable();
            let now = millis(self.epoch);
            let retry = match self.try_admit(&conn, &mut peer, now) {
                Ok(slot) => return slot,
                Err(at) => Duration::from_millis(at.saturating_sub(now)).min(RECHECK),
            };
            tokio::select! {
                () = freed => {}
                () = tokio::time::sleep(retry) => {}
            }
        }
    }

    /// A connection accepted at `now` (table milliseconds) whose socket's duplicate is `peer`.
    fn new_conn(&self, peer: Option<&socket2::Socket>, now: u64) -> Arc<Conn> {
        Arc::new(Conn {
            accepted: now,
            last: AtomicU64::new(now),
            moved: AtomicBool::new(peer.is_some_and(has_sent)),
            busy: AtomicUsize::new(0),
            blocked: AtomicBool::new(false),
            retiring: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            close: Notify::new(),
            epoch: self.epoch,
        })
    }

    /// A slot for `conn` at `now` if one is free or can be made ([`Table::make_room`]); else
    /// when to look again.
    fn try_admit(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        peer: &mut Option<socket2::Socket>,
        now: u64,
    ) -> Result<ConnectionSlot, u64> {
        let mut table = self.table();
        table.make_room(self.max, now)?;
        let id = table.next_id;
        table.next_id += 1;
        table.held.insert(
            id,
            Held {
                trusted: false,
                conn: conn.clone(),
                peer: peer.take(),
            },
        );
        Ok(ConnectionSlot {
            id,
            conn: conn.clone(),
            slots: self.clone(),
        })
    }

    #[cfg(test)]
    /// Connections held now: (not yet allowed a request, allowed one).
    pub(crate) fn held(&self) -> (usize, usize) {
        let table = self.table();
        let trusted = table.held.values().filter(|h| h.trusted).count();
        (table.held.len() - trusted, trusted)
    }
}

impl Table {
    /// Leaves a slot free for a newcomer at `now`: one is free, or a held connection that may be
    /// closed is closed ([`Table::victim`]). Otherwise `Err` with when the first held connection
    /// may be closed if nothing changes meanwhile, having asked the connection held longest of
    /// those that answer requests to end after its next answer (unless one already is to).
    fn make_room(&mut self, max: usize, now: u64) -> Result<(), u64> {
        if self.held.len() < max {
            return Ok(());
        }
        self.note_unread_bytes(now);
        if let Some(held) = self.victim(now).and_then(|id| self.held.remove(&id)) {
            held.conn.close();
            return Ok(());
        }
        if !self.held.values().any(|h| h.conn.retiring()) {
            let longest = self
                .held
                .iter()
                .filter(|(_, h)| h.conn.busy.load(Ordering::Relaxed) > 0)
                .min_by_key(|(id, h)| (h.conn.accepted, **id));
            if let Some((_, held)) = longest {
                tracing::debug!(
                    "a newcomer waits: the busy connection held longest ends after its next answer"
                );
                held.conn.retiring.store(true, Ordering::Relaxed);
            }
        }
        let soonest = self
            .held
            .values()
            .filter_map(|h| h.conn.closable_from(h.trusted))
            .min();
        Err(soonest.unwrap_or(u64::MAX).max(now + 1))
    }

    /// The connection to close for a newcomer at `now`, if one may be: of those not yet allowed
    /// a request and accepted [`GRACE`] ago or more, the oldest that has sent nothing, else the
    /// least recently active; failing those, of those that had a request allowed, the least
    /// recently active if idle for [`GRACE`]. None that answers a request that is not stalled.
    fn victim(&self, now: u64) -> Option<u64> {
        self.held
            .iter()
            .filter(|(_, h)| h.conn.closable_from(h.trusted).is_some_and(|at| at <= now))
            .min_by_key(|(id, h)| {
                (
                    h.trusted,
                    h.conn.moved.load(Ordering::Relaxed),
                    h.conn.last.load(Ordering::Relaxed),
                    **id,
                )
            })
            .map(|(id, _)| *id)
    }

    /// Marks as having moved a byte the connections thought silent whose clients have sent
    /// bytes not read yet, among those that may be closed at `now`, oldest first, up to the
    /// first that is silent indeed (the one [`Table::victim`] then closes): usually a single
    /// peek.
    fn note_unread_bytes(&self, now: u64) {
        let mut silent: Vec<(u64, u64, &Held)> = self
            .held
            .iter()
            .filter(|(_, h)| !h.trusted && !h.conn.moved.load(Ordering::Relaxed))
            .filter(|(_, h)| h.conn.closable_from(false).is_some_and(|at| at <= now))
            .map(|(id, h)| (h.conn.last.load(Ordering::Relaxed), *id, h))
            .collect();
        silent.sort_unstable_by_key(|&(last, id, _)| (last, id));
        for (_, _, held) in silent {
            if !held.peer.as_ref().is_some_and(has_sent) {
                return;
            }
            held.conn.touch();
        }
    }
}

/// A duplicate of `stream`'s socket for [`ConnectionSlots::admit`] (`None` when it cannot be
/// made, for example when the process is out of file descriptors: the connection is then judged
/// by the bytes its task reads only).
pub(crate) fn duplicate(stream: &impl std::os::fd::AsFd) -> Option<socket2::Socket> {
    socket2::SockRef::from(stream).try_clone().ok()
}

/// Whether the client of `peer` has sent bytes (a request, a TLS ClientHello) that wait to be
/// read; a peek that does not block and takes nothing from the socket.
fn has_sent(peer: &socket2::Socket) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    matches!(
        peer.recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT),
        Ok(n) if n > 0
    )
}

impl ConnectionSlot {
    /// What the connection's task and byte stream see of it.
    pub(crate) fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// The connection had a request allowed: from now on it may be closed for a newcomer only
    /// once idle for [`GRACE`].
    pub(crate) fn trust(&self) {
        self.conn.touch();
        if let Some(h) = self.slots.table().held.get_mut(&self.id) {
            h.trusted = true;
            h.peer = None;
        }
    }

    /// Marks a request in progress until the guard is dropped: a connection answering a
    /// request is not closed for a newcomer while its answer moves.
    pub(crate) fn busy(&self) -> Busy {
        self.conn.busy.fetch_add(1, Ordering::Relaxed);
        self.conn.touch();
        Busy(self.conn.clone())
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let removed = self.slots.table().held.remove(&self.id);
        if removed.is_some() {
            self.slots.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = GRACE.as_millis() as u64;

    fn closed(slot: &ConnectionSlot) -> bool {
        slot.conn.closed.load(Ordering::Acquire)
    }

    /// A connection accepted at `now` (table milliseconds), or when it must wait, when to look
    /// again.
    fn admit_at(
        slots: &Arc<ConnectionSlots>,
        peer: Option<socket2::Socket>,
        now: u64,
    ) -> Result<ConnectionSlot, u64> {
        let conn = slots.new_conn(peer.as_ref(), now);
        slots.try_admit(&conn, &mut Some(peer).flatten(), now)
    }

    fn spoke_at(slot: &ConnectionSlot, at: u64) {
        slot.conn.last.store(at, Ordering::Relaxed);
        slot.conn.moved.store(true, Ordering::Relaxed);
    }

    #[test]
    fn within_the_limit_no_connection_is_closed_and_beyond_it_none_before_its_grace() {
        let slots = ConnectionSlots::new(4);
        // Four silent newcomers at once: all admitted, none closed for another.
        let held: Vec<ConnectionSlot> =
            (0..4).map(|_| admit_at(&slots, None, 0).unwrap()).collect();
        assert!(held.iter().all(|s| !closed(s)));
        assert_eq!(slots.held(), (4, 0));
        // A fifth waits while every held one is younger than the grace: told when to look again.
        assert_eq!(admit_at(&slots, None, G - 1).err(), Some(G));
        assert!(held.iter().all(|s| !closed(s)));
        // Once they have had the grace to speak, the oldest silent one gives way.
        let fifth = admit_at(&slots, None, G).unwrap();
        assert!(closed(&held[0]) && held[1..].iter().all(|s| !closed(s)) && !closed(&fifth));
        assert_eq!(slots.held(), (4, 0));
    }

    #[test]
    fn silent_ones_give_way_first_then_those_never_allowed_then_idle_allowed_ones() {
        let slots = ConnectionSlots::new(3);
        let allowed = admit_at(&slots, None, 0).unwrap();
        allowed.trust();
        spoke_at(&allowed, 0);
        let denied = admit_at(&slots, None, 10).unwrap();
        spoke_at(&denied, 2 * G);
        let silent = admit_at(&slots, None, 20).unwrap();
        // At 2G: the silent one, though the newest.
        let a = admit_at(&slots, None, 2 * G).unwrap();
        assert!(closed(&silent) && !closed(&denied) && !closed(&allowed));
        // Then the one that spoke but had no request allowed, though it spoke just now (a is too
        // young).
        let b = admit_at(&slots, None, 2 * G).unwrap();
        assert!(closed(&denied) && !closed(&allowed) && !closed(&a));
        // Then the allowed one idle since 0, before a and b have had their grace.
        let c = admit_at(&slots, None, 2 * G + 1).unwrap();
        assert!(closed(&allowed) && !closed(&a) && !closed(&b));
        // An allowed connection that moved a byte within the grace stays.
        c.trust();
        spoke_at(&c, 3 * G);
        a.trust();
        spoke_at(&a, 3 * G);
        b.trust();
        spoke_at(&b, 3 * G);
        assert_eq!(admit_at(&slots, None, 4 * G - 1).err(), Some(4 * G));
        assert_eq!(slots.held(), (0, 3));
    }

    #[test]
    fn a_request_in_progress_is_not_closed_unless_its_answer_stalls() {
        let slots = ConnectionSlots::new(1);
        let answering = admit_at(&slots, None, 0).unwrap();
        answering.trust();
        let busy = answering.busy();
        spoke_at(&answering, 0);
        // No time is given when the only held connection answers a request; it is asked to end
        // after its answer.
        assert!(!answering.conn.retiring());
        assert_eq!(admit_at(&slots, None, 100 * G).err(), Some(u64::MAX));
        assert!(answering.conn.retiring() && !closed(&answering));
        // Its answer waits for a client that reads none of it: the grace runs from its last byte.
        answering.conn.write_blocked();
        assert_eq!(admit_at(&slots, None, G - 1).err(), Some(G));
        let newcomer = admit_at(&slots, None, G).unwrap();
        assert!(closed(&answering) && !closed(&newcomer));
        drop(busy);
    }

    #[test]
    fn a_newcomer_beyond_the_limit_is_admitted_when_a_slot_is_given_back() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let slots = ConnectionSlots::new(1);
            let answering = slots.admit(None).await;
            answering.trust();
            let busy = answering.busy();
            let waiting = slots.admit(None);
            tokio::pin!(waiting);
            // It answers a request: never closed for the newcomer, which waits.
            let early = tokio::time::timeout(Duration::from_millis(50), &mut waiting).await;
            assert!(early.is_err(), "admitted beside a request in progress");
            drop(busy);
            drop(answering);
            let late = tokio::time::timeout(Duration::from_secs(5), waiting).await;
            assert!(late.is_ok(), "not admitted once the slot was given back");
        });
    }

    #[test]
    fn a_client_whose_bytes_wait_unread_is_not_taken_for_silent() {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = || {
            let client = TcpStream::connect(addr).unwrap();
            (client, listener.accept().unwrap().0)
        };
        let slots = ConnectionSlots::new(2);
        let ((mut a_client, a_side), (mut b_client, mut b_side)) = (accept(), accept());
        let a = admit_at(&slots, duplicate(&a_side), 0).unwrap();
        let b = admit_at(&slots, duplicate(&b_side), 0).unwrap();
        // b's client sends its request after b was admitted; b's task has not read it yet.
        b_client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        // (Wait until the bytes are in b's receive queue: loopback may deliver them later.)
        b_side.peek(&mut [0u8; 1]).unwrap();
        let mut newcomers = Vec::new();
        let mut sockets = Vec::new();
        for i in 0..3 {
            let (client, side) = accept();
            newcomers.push(admit_at(&slots, duplicate(&side), G * (i + 1)).unwrap());
            sockets.push((client, side));
        }
        // The silent ones gave way once they had had the grace, oldest first; b, older than
        // the newcomers, did not.
        assert!(closed(&a) && !closed(&b), "b was taken for silent");
        assert!(closed(&newcomers[0]) && closed(&newcomers[1]) && !closed(&newcomers[2]));
        // a's slot was given up with the duplicate of its socket: once its stream is dropped,
        // its client sees the end of the connection.
        drop(a_side);
        a_client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(a_client.read(&mut [0u8; 1]).unwrap(), 0);
        // The peeks took nothing from the socket.
        let mut got = [0u8; 18];
        b_side.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
    }
}
