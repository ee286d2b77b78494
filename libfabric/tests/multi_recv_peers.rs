//! Multi-receive buffers against what peers can do: send before the buffer
//! is posted, send more than what is left, make the provider fail a post
//! half-way; and the accounting edge cases (empty messages, exactly
//! `min_free` left, a message that fills the buffer exactly).
#[macro_use]
mod common;

use common::*;
use libfabric::av::AvType;
use libfabric::cq::{Addr, CompletionFlags, CqAttr, CqRead, Data, DataEntry};
use libfabric::ep::CqBind;
use libfabric::info::{Caps, EpType};
use libfabric::wait::WaitObj;
use libfabric::{
    AddressVector, Buffer, BufferPool, CompletionQueue, Domain, Endpoint, Error, Fabric, Hints,
    Message,
};
use std::time::{Duration, Instant};

fn skip(why: &str) {
    println!(
        "SKIP {}: provider {}: {why}",
        test_name(),
        multi_recv_provider()
    );
}

struct Side {
    ep: Endpoint,
    cq: CompletionQueue<Data>,
}

struct Rig {
    rx: Side,
    tx: Side,
    dest: Addr,
    rx_pool: BufferPool,
    tx_pool: BufferPool,
    _av: AddressVector,
    _domain: Domain,
    _fabric: Fabric,
}

fn rig_with(
    hints: impl Fn(Hints) -> Hints,
    rx_slots: usize,
    slot: usize,
    min_free: usize,
) -> Option<Rig> {
    if common::is_iwarp() {
        // Its sends here failed with -FI_ENOMEM: soft-iWARP pins what rxm
        // registers under the guest's locked-memory limit.
        skip("over iWARP rxm's buffers for these message sizes exceed the locked-memory limit");
        return None;
    }
    let prov = multi_recv_provider();
    let h = Hints::new()
        .provider(&prov)
        .ep_type(EpType::Rdm)
        .caps(Caps::MSG | Caps::MULTI_RECV);
    let h = if prov == "shm" { h } else { h.node(node()) };
    let info = match libfabric::getinfo(&hints(h)) {
        Ok(list) => list.into_iter().next().expect("a non-empty list"),
        Err(e) => {
            skip(&format!("no RDM endpoint: {e}"));
            return None;
        }
    };
    println!(
        "info: {} rx_size {} tx_size {}",
        info.provider(),
        info.rx_size(),
        info.tx_size()
    );
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 8).unwrap();
    let side = |min: Option<usize>| -> Result<Side, &'static str> {
        let cq =
            CompletionQueue::<Data>::open(&domain, &CqAttr::new().size(256).wait(WaitObj::None))
                .unwrap();
        let ep = Endpoint::open(&domain, &info).unwrap();
        ep.bind_av(&av).unwrap();
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        if let Some(min) = min {
            match ep.set_min_multi_recv(min) {
                Ok(()) => {}
                Err(Error::Unsupported { reason, .. }) => return Err(reason),
                Err(e) => panic!("set_min_multi_recv: {e}"),
            }
        }
        ep.enable().unwrap();
        Ok(Side { ep, cq })
    };
    let rx = match side(Some(min_free)) {
        Ok(s) => s,
        Err(reason) => {
            skip(&format!("multi-receive refused: {reason}"));
            return None;
        }
    };
    let tx = side(None).unwrap();
    let dest = av.insert(&rx.ep.name().unwrap()).unwrap();
    Some(Rig {
        rx_pool: BufferPool::new(&domain, rx_slots, slot).unwrap(),
        tx_pool: BufferPool::new(&domain, 16, 1 << 17).unwrap(),
        rx,
        tx,
        dest,
        _av: av,
        _domain: domain,
        _fabric: fabric,
    })
}

fn pattern(m: usize, i: usize) -> u8 {
    (m * 31 + i * 7 + 1) as u8
}

/// What the receiver's queue handed back.
#[derive(Default)]
struct Got {
    messages: Vec<Message>,
    buffers: Vec<Buffer>,
    flags: Vec<CompletionFlags>,
    errors: Vec<String>,
}

impl Rig {
    fn drive_tx(&self) {
        let mut entries: [DataEntry; 8] = Default::default();
        match self.tx.cq.read(&mut entries) {
            Ok(CqRead::Completions(done)) => {
                for e in &done {
                    drop(self.tx_pool.reclaim(e));
                }
            }
            Ok(CqRead::Error(mut e)) => {
                println!("tx error completion: {e:?}");
                drop(self.tx_pool.reclaim_err(&mut e));
            }
            _ => {}
        };
    }

    fn drive_rx(&self, got: &mut Got) -> bool {
        let mut entries: [DataEntry; 8] = Default::default();
        let any = match self.rx.cq.read(&mut entries).unwrap() {
            CqRead::Completions(done) => {
                for e in &done {
                    let back = self.rx_pool.reclaim_received(e);
                    println!(
                        "rx completion: flags {:?} len {} message {:?} buffer {}",
                        e.flags(),
                        e.len(),
                        back.message,
                        back.buffer.is_some()
                    );
                    got.flags.push(e.flags());
                    got.messages.extend(back.message);
                    got.buffers.extend(back.buffer);
                }
                true
            }
            CqRead::Error(mut e) => {
                let text = format!("{e:?}");
                println!("rx error completion: {text}");
                got.errors.push(text);
                got.buffers.extend(self.rx_pool.reclaim_err(&mut e));
                true
            }
            _ => false,
        };
        any
    }

    /// Starts a send of message `m` of `len` bytes (retried while the
    /// provider asks to), without waiting for it to complete.
    fn send(&self, m: usize, len: usize, got: &mut Got) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = loop {
            if let Some(b) = self.tx_pool.take() {
                break b;
            }
            self.drive_tx();
            assert!(Instant::now() < deadline, "no send buffer came back");
        };
        for (i, b) in buf[..len].iter_mut().enumerate() {
            *b = pattern(m, i);
        }
        while let Err((back, e)) = self.tx.ep.send_to(buf, len, self.dest) {
            assert!(e.is_again(), "send: {e}");
            assert!(Instant::now() < deadline, "send kept returning -FI_EAGAIN");
            buf = back;
            self.drive_tx();
            self.drive_rx(got);
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Progresses both sides for `d`.
    fn progress(&self, d: Duration, got: &mut Got) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.drive_tx();
            if !self.drive_rx(got) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// Messages that arrive before the buffer is posted (or while another
/// peer's message is being received into it, on sockets) are matched to it
/// later from the provider's list of unexpected messages. The second one,
/// 2000 bytes, is larger than the 1096 bytes left. Nothing may be written
/// past the posted buffer: the slot right after it stays untouched.
#[test]
fn unexpected_message_larger_than_what_is_left_writes_nothing_past_the_buffer() {
    let Some(rig) = rig_with(|h| h, 2, 4096, 1024) else {
        return;
    };
    let mut got = Got::default();
    // Nothing posted: both messages wait at the receiver.
    rig.send(0, 3000, &mut got);
    rig.send(1, 2000, &mut got);
    rig.progress(Duration::from_millis(500), &mut got);
    assert!(got.messages.is_empty(), "no receive is posted");
    let posted = rig.rx_pool.take().unwrap();
    let mut neighbour = rig.rx_pool.take().unwrap();
    neighbour.fill(0xAA);
    match rig.rx.ep.recv_multi(posted, 1024) {
        Ok(()) => {}
        Err((_, Error::Unsupported { reason, .. })) => {
            skip(reason);
            return;
        }
        Err((_, e)) => panic!("recv_multi: {e}"),
    }
    rig.progress(Duration::from_millis(1000), &mut got);
    let changed = neighbour.iter().filter(|b| **b != 0xAA).count();
    let first_changed = neighbour.iter().position(|b| *b != 0xAA);
    println!(
        "messages {:?}, errors {:?}, neighbour bytes changed: {changed} (first at {first_changed:?})",
        got.messages, got.errors
    );
    if let Some(i) = first_changed {
        println!(
            "neighbour[{i}..{}] = {:?}; message 1 byte {} is {}",
            i + 8,
            &neighbour[i..i + 8],
            1096 + i,
            pattern(1, 1096 + i)
        );
    }
    assert_eq!(changed, 0, "the provider wrote past the posted buffer");
}

/// A multi-receive post that the provider fails after it has already
/// paired part of the buffer with an unexpected (rendezvous) message: the
/// buffer must not be handed back while the provider still writes it.
/// rxm pairs each unexpected message with a receive entry of its own,
/// taken from a stack of `rx_size` entries; a rendezvous message holds its
/// entry until its data is read. With `rx_size` entries held, the next
/// `rxm_recv_entry_get` of the same post fails: `-FI_ENOMEM`.
#[test]
fn a_post_failed_half_way_keeps_the_buffer_the_provider_writes() {
    if !multi_recv_provider().contains("ofi_rxm") {
        skip("rxm only (rxm_post_mrecv)");
        return;
    }
    let rx_size = 2;
    let Some(rig) = rig_with(|h| h.queue_sizes(64, rx_size), 1, 1 << 17, 1024) else {
        return;
    };
    let mut got = Got::default();
    // Larger than rxm's eager limit (16 KiB): rendezvous.
    let size = 20000;
    for m in 0..rx_size {
        rig.send(m, size, &mut got);
    }
    rig.progress(Duration::from_millis(500), &mut got);
    assert!(got.messages.is_empty(), "no receive is posted");
    let posted = rig.rx_pool.take().unwrap();
    let (back, e) = match rig.rx.ep.recv_multi(posted, 1024) {
        Ok(()) => {
            skip("the provider took the buffer whole (no receive entries ran out)");
            return;
        }
        Err(pair) => pair,
    };
    // rxm paired pieces of the buffer with the unexpected messages, whose
    // rendezvous reads go on writing it: it is kept until the endpoint
    // closes, not handed back.
    assert!(back.is_none(), "handed back after a failed post: {e}");
    rig.progress(Duration::from_millis(500), &mut got);
    println!("recv_multi failed: {e}; kept until the endpoint closes");
}

/// The accounting's edge cases: an empty message, one that leaves exactly
/// `min_free` (still posted), and one that fills the rest exactly (the
/// release). The buffer comes back exactly once, after the last message
/// is dropped.
#[test]
fn exact_fills_and_empty_messages_give_the_buffer_back_once() {
    let Some(rig) = rig_with(|h| h, 1, 4096, 512) else {
        return;
    };
    let mut got = Got::default();
    match rig.rx.ep.recv_multi(rig.rx_pool.take().unwrap(), 512) {
        Ok(()) => {}
        Err((_, Error::Unsupported { reason, .. })) => {
            skip(reason);
            return;
        }
        Err((_, e)) => panic!("recv_multi: {e}"),
    }
    // 0, 3584 (512 left: still posted), 0, 512 (fills it exactly).
    let sizes = [0, 3584, 0, 512];
    for (m, len) in sizes.iter().enumerate() {
        rig.send(m, *len, &mut got);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.messages.len() < sizes.len() {
        rig.drive_tx();
        rig.drive_rx(&mut got);
        assert!(Instant::now() < deadline, "{:?}", got.messages);
    }
    rig.progress(Duration::from_millis(200), &mut got);
    assert!(got.buffers.is_empty(), "messages held");
    for m in &got.messages {
        let index = sizes.iter().position(|s| *s == m.len()).unwrap();
        if !m.is_empty() {
            for (i, b) in m.iter().enumerate() {
                assert_eq!(*b, pattern(index, i));
            }
        }
    }
    assert!(rig.rx_pool.take().is_none());
    got.messages.clear();
    let b = rig.rx_pool.take().expect("back with the last message");
    assert!(rig.rx_pool.take().is_none());
    drop(b);
}

/// A message of exactly the buffer's size, then one more (which must go
/// to the next buffer posted, not past the first).
#[test]
fn a_message_filling_the_whole_buffer() {
    let Some(rig) = rig_with(|h| h, 2, 4096, 512) else {
        return;
    };
    let mut got = Got::default();
    match rig.rx.ep.recv_multi(rig.rx_pool.take().unwrap(), 512) {
        Ok(()) => {}
        Err((_, Error::Unsupported { reason, .. })) => {
            skip(reason);
            return;
        }
        Err((_, e)) => panic!("recv_multi: {e}"),
    }
    let mut neighbour = rig.rx_pool.take().unwrap();
    neighbour.fill(0xAA);
    rig.send(0, 4096, &mut got);
    rig.send(1, 100, &mut got);
    rig.progress(Duration::from_millis(800), &mut got);
    println!(
        "messages {:?} buffers {} errors {:?}",
        got.messages,
        got.buffers.len(),
        got.errors
    );
    assert!(neighbour.iter().all(|b| *b == 0xAA));
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.messages[0].len(), 4096);
    got.messages.clear();
    assert!(rig.rx_pool.take().is_some(), "back with its message");
}

#[test]
fn message_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Message>();
}

/// As `unexpected_message_larger_than_what_is_left_writes_nothing_past_the_buffer`,
/// with the posted buffer the pool's only slot: a write past it lands past
/// the pool's allocation (run under valgrind to see it).
#[test]
fn unexpected_message_larger_than_what_is_left_in_a_one_slot_pool() {
    let Some(rig) = rig_with(|h| h, 1, 4096, 1024) else {
        return;
    };
    let mut got = Got::default();
    rig.send(0, 3000, &mut got);
    rig.send(1, 2000, &mut got);
    rig.progress(Duration::from_millis(500), &mut got);
    match rig.rx.ep.recv_multi(rig.rx_pool.take().unwrap(), 1024) {
        Ok(()) => {}
        Err((_, Error::Unsupported { reason, .. })) => {
            skip(reason);
            return;
        }
        Err((_, e)) => panic!("recv_multi: {e}"),
    }
    rig.progress(Duration::from_millis(1000), &mut got);
    println!("messages {:?} errors {:?}", got.messages, got.errors);
    // Every message handed out lies inside the 4096-byte buffer (the only
    // slot: past it is the allocator's memory).
    for m in &got.messages {
        assert!(m.offset() + m.len() <= 4096, "{m:?} past the buffer");
    }
}
