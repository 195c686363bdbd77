//! Connection slots: which connections hold the `--web.max-connections` slots, and which one gives
//! its slot up when a newcomer needs it.
//!
//! A connection starts *untrusted*: it has not yet had a request allowed (with basic auth: a
//! request whose credentials verified; without it: any request). Untrusted connections may hold at
//! most [`ConnectionSlots::untrusted_share`] of the slots, a quarter rounded up; when they hold all
//! of those, a new connection takes the slot of an untrusted one, which is closed: the oldest of
//! those that have sent nothing since they were accepted (not even a TLS ClientHello), else the one
//! that moved a byte least recently. A connection becomes *trusted* with its first allowed request;
//! trusted connections hold the other slots, and when those are all taken the trusted connection
//! that moved a byte least recently and has no request in progress is closed to make room (an
//! answer nobody reads, a keep-alive connection left idle).
//!
//! A connection counts as silent only while its client has sent nothing: the table keeps a
//! duplicate of each untrusted connection's socket and, before closing a silent one, peeks at it.
//! Bytes that arrived but were not read yet (the accept loop admits a burst of connections before
//! the tasks of the first ones have run) make it one that has sent, and the next one is looked at.
//!
//! So a flood of idle, slow or unauthenticated connections only ever churns the untrusted share:
//! a scraper's new connection is admitted at once; it is closed before its client's first bytes
//! reach the host only if as many silent newcomers as the share arrive in that time, and after
//! that only if the share fills with connections that moved a byte more recently than it; and a
//! scraper that authenticates is never displaced by clients that do not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Notify;

/// The slots of one listener (shared by its connections).
pub struct ConnectionSlots {
    untrusted_cap: usize,
    trusted_cap: usize,
    epoch: Instant,
    table: Mutex<Table>,
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
pub struct Conn {
    /// When it last moved a byte, in milliseconds since [`ConnectionSlots`] began.
    last: AtomicU64,
    /// Whether it has moved a byte since it was accepted.
    moved: AtomicBool,
    /// Requests being answered on it.
    busy: AtomicUsize,
    closed: AtomicBool,
    close: Notify,
    epoch: Instant,
}

impl Conn {
    /// Notes that the connection moved a byte now.
    pub fn touch(&self) {
        self.last.store(millis(self.epoch), Ordering::Relaxed);
        self.moved.store(true, Ordering::Relaxed);
    }

    /// Completes once the connection's slot has been taken from it; its task then drops it.
    pub async fn closed(&self) {
        if !self.closed.load(Ordering::Acquire) {
            self.close.notified().await;
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Stores a permit when the task is not waiting yet.
        self.close.notify_one();
    }
}

fn millis(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A connection's slot, given back when dropped.
pub struct ConnectionSlot {
    id: u64,
    conn: Arc<Conn>,
    slots: Arc<ConnectionSlots>,
}

/// Marks a request in progress on a connection for as long as it lives.
pub struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

impl ConnectionSlots {
    /// Slots for `max` connections (at least one untrusted and one trusted slot).
    pub fn new(max: usize) -> Arc<ConnectionSlots> {
        let untrusted_cap = max.div_ceil(4).max(1);
        Arc::new(ConnectionSlots {
            untrusted_cap,
            trusted_cap: max.saturating_sub(untrusted_cap).max(1),
            epoch: Instant::now(),
            table: Mutex::new(Table::default()),
        })
    }

    /// How many slots connections that have not had a request allowed may hold.
    pub fn untrusted_share(&self) -> usize {
        self.untrusted_cap
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection (`peer`: a duplicate of its socket, [`duplicate`]); when the
    /// untrusted share is taken, an untrusted connection is closed for it ([`Table::evict`]).
    pub fn admit(self: &Arc<Self>, peer: Option<socket2::Socket>) -> ConnectionSlot {
        let sent = peer.as_ref().is_some_and(has_sent);
        let conn = Arc::new(Conn {
            last: AtomicU64::new(millis(self.epoch)),
            moved: AtomicBool::new(sent),
            busy: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            close: Notify::new(),
            epoch: self.epoch,
        });
        let mut table = self.table();
        if table.count(false) >= self.untrusted_cap {
            table.evict(false);
        }
        let id = table.next_id;
        table.next_id += 1;
        table.held.insert(
            id,
            Held {
                trusted: false,
                conn: conn.clone(),
                peer,
            },
        );
        ConnectionSlot {
            id,
            conn,
            slots: self.clone(),
        }
    }

    /// Connections held now: (untrusted, trusted).
    pub fn held(&self) -> (usize, usize) {
        let table = self.table();
        (table.count(false), table.count(true))
    }
}

impl Table {
    fn count(&self, trusted: bool) -> usize {
        self.held.values().filter(|h| h.trusted == trusted).count()
    }

    /// Closes the connection of the class `trusted` that moved a byte least recently (of the
    /// untrusted ones, first those that have not moved a byte at all since they were accepted,
    /// once [`Table::note_unread_bytes`] has spared those whose bytes wait unread; of the trusted
    /// ones, only those without a request in progress); whether there was one.
    fn evict(&mut self, trusted: bool) -> bool {
        if !trusted {
            self.note_unread_bytes();
        }
        let victim = self
            .held
            .iter()
            .filter(|(_, h)| h.trusted == trusted)
            .filter(|(_, h)| !trusted || h.conn.busy.load(Ordering::Relaxed) == 0)
            .min_by_key(|(id, h)| {
                (
                    h.conn.moved.load(Ordering::Relaxed),
                    h.conn.last.load(Ordering::Relaxed),
                    **id,
                )
            })
            .map(|(id, _)| *id);
        let Some(held) = victim.and_then(|id| self.held.remove(&id)) else {
            return false;
        };
        held.conn.close();
        true
    }

    /// Marks as having moved a byte the untrusted connections thought silent whose clients have
    /// sent bytes not read yet, oldest first, up to the first that is silent indeed (the one
    /// [`Table::evict`] then closes): usually a single peek.
    fn note_unread_bytes(&self) {
        let mut silent: Vec<(u64, u64, &Held)> = self
            .held
            .iter()
            .filter(|(_, h)| !h.trusted && !h.conn.moved.load(Ordering::Relaxed))
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
pub fn duplicate(stream: &impl std::os::fd::AsFd) -> Option<socket2::Socket> {
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
    pub fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// The connection had a request allowed: it moves to the trusted slots, taking the slot of
    /// the least recently active idle trusted connection when they are all taken (when every
    /// one is answering a request, it stays untrusted for now).
    pub fn trust(&self) {
        self.conn.touch();
        let mut table = self.slots.table();
        if table.held.get(&self.id).is_none_or(|h| h.trusted) {
            return;
        }
        if table.count(true) >= self.slots.trusted_cap && !table.evict(true) {
            return;
        }
        if let Some(h) = table.held.get_mut(&self.id) {
            h.trusted = true;
            h.peer = None;
        }
    }

    /// Marks a request in progress until the guard is dropped: a connection answering a
    /// request is not closed to make room for another trusted one.
    pub fn busy(&self) -> Busy {
        self.conn.busy.fetch_add(1, Ordering::Relaxed);
        self.conn.touch();
        Busy(self.conn.clone())
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.slots.table().held.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(slot: &ConnectionSlot) -> bool {
        slot.conn.closed.load(Ordering::Acquire)
    }

    #[test]
    fn untrusted_connections_share_a_quarter_and_the_idlest_gives_way() {
        let slots = ConnectionSlots::new(8);
        assert_eq!(slots.untrusted_share(), 2);
        let a = slots.admit(None);
        let b = slots.admit(None);
        a.conn.touch();
        // A third untrusted connection takes the slot of one that has sent nothing (b), not of
        // one that has (a), though b is the newer.
        let c = slots.admit(None);
        assert!(closed(&b) && !closed(&a) && !closed(&c));
        // Of those that moved bytes, the least recently active gives way.
        c.conn.touch();
        let e = slots.admit(None);
        assert!(closed(&a) && !closed(&c) && !closed(&e));
        assert_eq!(slots.held(), (2, 0));
        // Trusted connections leave the share.
        c.trust();
        assert_eq!(slots.held(), (1, 1));
        let d = slots.admit(None);
        assert!(!closed(&d) && !closed(&e));
        assert_eq!(slots.held(), (2, 1));
        drop(e);
        drop((a, b, c, d));
        assert_eq!(slots.held(), (0, 0));
    }

    #[test]
    fn a_new_trusted_connection_takes_the_slot_of_an_idle_one_never_of_a_busy_one() {
        let slots = ConnectionSlots::new(4); // 1 untrusted, 3 trusted
        let t: Vec<ConnectionSlot> = (0..3)
            .map(|_| {
                let s = slots.admit(None);
                s.trust();
                s
            })
            .collect();
        assert_eq!(slots.held(), (0, 3));
        let _busy: Vec<Busy> = t.iter().map(ConnectionSlot::busy).collect();
        let late = slots.admit(None);
        late.trust();
        // All trusted ones answer requests: the newcomer waits in the untrusted share.
        assert_eq!(slots.held(), (1, 3));
        assert!(t.iter().all(|s| !closed(s)));
        drop(_busy);
        late.trust();
        assert_eq!(slots.held(), (0, 3));
        assert_eq!(t.iter().filter(|s| closed(s)).count(), 1);
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
        let slots = ConnectionSlots::new(8); // 2 untrusted
        let ((mut a_client, a_side), (mut b_client, mut b_side)) = (accept(), accept());
        let a = slots.admit(duplicate(&a_side));
        let b = slots.admit(duplicate(&b_side));
        // b's client sends its request after b was admitted; b's task has not read it yet.
        b_client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        // (Wait until the bytes are in b's receive queue: loopback may deliver them later.)
        b_side.peek(&mut [0u8; 1]).unwrap();
        let mut newcomers = Vec::new();
        let mut sockets = Vec::new();
        for _ in 0..3 {
            let (client, side) = accept();
            newcomers.push(slots.admit(duplicate(&side)));
            sockets.push((client, side));
        }
        // The silent ones gave way, oldest first; b, older than the newcomers, did not.
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
