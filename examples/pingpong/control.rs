//! The control connection: a plain TCP socket, as fi_pingpong has one, that
//! carries the setup (where the fabric endpoint listens, the largest size,
//! the client's RDM address) and the synchronisation before each size, so
//! that the fabric connection carries nothing but the timed messages.

use super::Res;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

const MAGIC: u32 = u32::from_le_bytes(*b"PPRS");
const HEADER: usize = 28;
const MAX_BYTES: usize = 4096;
/// A control message that does not come within this long is an error.
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Server to client: where the fabric endpoint is (MSG: `a` is the port;
    /// RDM: the bytes are the endpoint's address).
    Address = 1,
    /// Client to server: `a` the largest size, `b` the flags, the bytes the
    /// client's RDM address.
    Hello,
    /// Client to server before a size: `a` the size, `b` the iterations.
    Sync,
    /// Server to client: ready for the size.
    SyncAck,
    /// Client to server: no more sizes.
    Done,
    DoneAck,
    /// RMA runs, both ways after the connection: the bytes are the
    /// sender's region (`RemoteRegion::to_bytes`), empty for none.
    Region,
}

impl Kind {
    fn from_raw(raw: u32) -> Option<Self> {
        use Kind::*;
        [Address, Hello, Sync, SyncAck, Done, DoneAck, Region]
            .into_iter()
            .find(|k| *k as u32 == raw)
    }
}

/// `Hello` flag: the client checks every message, the server must fill its
/// replies.
pub const FLAG_VERIFY: u64 = 1;
/// `Hello` flags: the client's op ([`Op::code`](super::cli::Op::code)) in
/// these bits; the server must run the same.
pub const OP_SHIFT: u32 = 8;
pub const OP_MASK: u64 = 0xff << OP_SHIFT;

/// A control message.
#[derive(Debug)]
pub struct Msg {
    pub kind: Kind,
    pub a: u64,
    pub b: u64,
    pub bytes: Vec<u8>,
}

pub struct Control {
    stream: TcpStream,
    peer: String,
}

impl Control {
    fn new(stream: TcpStream, peer: String) -> Res<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        Ok(Control { stream, peer })
    }

    /// Connects to a server's control port.
    pub fn connect(host: &str, port: u16) -> Res<Self> {
        let peer = format!("{host}:{port}");
        let addrs = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("{host}: {e}"))?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
                Ok(stream) => return Self::new(stream, peer),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) if e.kind() == ErrorKind::ConnectionRefused => {
                format!("nothing listens on {peer}: is `pingpong -s` running there?")
            }
            Some(e) => format!("connecting to {peer}: {e}"),
            None => format!("{host} has no address"),
        }
        .into())
    }

    /// Waits for a client on `listener`.
    pub fn accept(listener: &TcpListener) -> Res<Self> {
        let (stream, addr) = listener.accept()?;
        Self::new(stream, addr.ip().to_string())
    }

    pub fn send(&mut self, kind: Kind, a: u64, b: u64, bytes: &[u8]) -> Res<()> {
        if bytes.len() > MAX_BYTES {
            return Err("a control message too long".into());
        }
        let mut msg = Vec::with_capacity(HEADER + bytes.len());
        msg.extend_from_slice(&MAGIC.to_le_bytes());
        msg.extend_from_slice(&(kind as u32).to_le_bytes());
        msg.extend_from_slice(&a.to_le_bytes());
        msg.extend_from_slice(&b.to_le_bytes());
        msg.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        msg.extend_from_slice(bytes);
        self.stream.write_all(&msg).map_err(|e| self.lost(e).into())
    }

    pub fn recv(&mut self) -> Res<Msg> {
        let mut head = [0u8; HEADER];
        self.stream
            .read_exact(&mut head)
            .map_err(|e| self.lost(e))?;
        let word =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let long = |at: usize| u64::from(word(at)) | u64::from(word(at + 4)) << 32;
        let kind = Kind::from_raw(word(4)).filter(|_| word(0) == MAGIC);
        let len = word(24) as usize;
        let Some(kind) = kind.filter(|_| len <= MAX_BYTES) else {
            return Err(format!(
                "{} sent something that is not a pingpong control message",
                self.peer
            )
            .into());
        };
        let mut bytes = vec![0u8; len];
        self.stream
            .read_exact(&mut bytes)
            .map_err(|e| self.lost(e))?;
        Ok(Msg {
            kind,
            a: long(8),
            b: long(16),
            bytes,
        })
    }

    /// The next message, which must be of this kind.
    pub fn expect(&mut self, kind: Kind) -> Res<Msg> {
        let msg = self.recv()?;
        if msg.kind != kind {
            return Err(format!("expected {kind:?} from {}, got {:?}", self.peer, msg.kind).into());
        }
        Ok(msg)
    }

    /// Whether a message (or the end of the connection) is waiting, without
    /// blocking.
    pub fn pending(&self) -> Res<bool> {
        self.stream.set_nonblocking(true)?;
        let mut byte = [0u8; 1];
        let peeked = self.stream.peek(&mut byte);
        self.stream.set_nonblocking(false)?;
        match peeked {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(self.lost(e).into()),
        }
    }

    fn lost(&self, e: std::io::Error) -> String {
        match e.kind() {
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
                format!("{} closed the control connection", self.peer)
            }
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                format!("{} sent nothing for {TIMEOUT:?}", self.peer)
            }
            _ => format!("control connection to {}: {e}", self.peer),
        }
    }
}
