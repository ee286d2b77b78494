//! Device, port and GID attributes: the results of `ibv_query_device(3)`,
//! `ibv_query_port(3)` and `ibv_query_gid_ex(3)`.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use libibverbs_sys as sys;

/// Device attributes (`struct ibv_device_attr`), read through accessors.
// Plain integers copied out of C: Send + Sync by construction.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct DeviceAttr(pub(crate) sys::ibv_device_attr);

impl DeviceAttr {
    /// Firmware version string.
    #[must_use]
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> = self
            .0
            .fw_ver
            .iter()
            .map(|&c| c as u8)
            .take_while(|&b| b != 0)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
    /// Node GUID, host byte order.
    #[must_use]
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.0.node_guid)
    }
    /// Vendor ID (IEEE OUI).
    #[must_use]
    pub fn vendor_id(&self) -> u32 {
        self.0.vendor_id
    }
    /// Vendor part ID.
    #[must_use]
    pub fn vendor_part_id(&self) -> u32 {
        self.0.vendor_part_id
    }
    /// Largest memory region, in bytes.
    #[must_use]
    pub fn max_mr_size(&self) -> u64 {
        self.0.max_mr_size
    }
    /// Maximum number of queue pairs.
    #[must_use]
    pub fn max_qp(&self) -> u32 {
        nonneg(self.0.max_qp)
    }
    /// Maximum number of outstanding work requests on a queue.
    #[must_use]
    pub fn max_qp_wr(&self) -> u32 {
        nonneg(self.0.max_qp_wr)
    }
    /// Maximum number of scatter/gather entries per work request.
    #[must_use]
    pub fn max_sge(&self) -> u32 {
        nonneg(self.0.max_sge)
    }
    /// Maximum number of completion queues.
    #[must_use]
    pub fn max_cq(&self) -> u32 {
        nonneg(self.0.max_cq)
    }
    /// Maximum number of entries of a completion queue.
    #[must_use]
    pub fn max_cqe(&self) -> u32 {
        nonneg(self.0.max_cqe)
    }
    /// Maximum number of memory regions.
    #[must_use]
    pub fn max_mr(&self) -> u32 {
        nonneg(self.0.max_mr)
    }
    /// Maximum number of protection domains.
    #[must_use]
    pub fn max_pd(&self) -> u32 {
        nonneg(self.0.max_pd)
    }
    /// Maximum number of shared receive queues.
    #[must_use]
    pub fn max_srq(&self) -> u32 {
        nonneg(self.0.max_srq)
    }
    /// Maximum number of work requests of a shared receive queue.
    #[must_use]
    pub fn max_srq_wr(&self) -> u32 {
        nonneg(self.0.max_srq_wr)
    }
    /// Maximum number of scatter entries per SRQ work request.
    #[must_use]
    pub fn max_srq_sge(&self) -> u32 {
        nonneg(self.0.max_srq_sge)
    }
    /// Maximum outstanding RDMA reads/atomics a QP can initiate.
    #[must_use]
    pub fn max_qp_init_rd_atom(&self) -> u32 {
        nonneg(self.0.max_qp_init_rd_atom)
    }
    /// Maximum outstanding RDMA reads/atomics a QP can answer.
    #[must_use]
    pub fn max_qp_rd_atom(&self) -> u32 {
        nonneg(self.0.max_qp_rd_atom)
    }
    /// Number of physical ports.
    #[must_use]
    pub fn phys_port_cnt(&self) -> u8 {
        self.0.phys_port_cnt
    }
}

impl fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("node_guid", &format_args!("{:016x}", self.node_guid()))
            .field("vendor_id", &self.vendor_id())
            .field("max_qp", &self.max_qp())
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_cq", &self.max_cq())
            .field("max_cqe", &self.max_cqe())
            .field("max_srq", &self.max_srq())
            .field("max_srq_wr", &self.max_srq_wr())
            .field("phys_port_cnt", &self.phys_port_cnt())
            .finish_non_exhaustive()
    }
}

fn nonneg(v: libc::c_int) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// Logical port state (`enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PortState {
    /// Reserved value.
    Nop,
    /// Logical link is down.
    Down,
    /// Link is up, waiting for the subnet manager.
    Init,
    /// Link is up, not yet active.
    Armed,
    /// Link is up and can carry traffic.
    Active,
    /// Link is active, deferring transitions.
    ActiveDefer,
    /// A value these bindings do not know.
    Unknown(u32),
}

impl PortState {
    /// Decodes `enum ibv_port_state`.
    #[must_use]
    pub fn from_raw(raw: u32) -> PortState {
        match raw {
            sys::IBV_PORT_NOP => PortState::Nop,
            sys::IBV_PORT_DOWN => PortState::Down,
            sys::IBV_PORT_INIT => PortState::Init,
            sys::IBV_PORT_ARMED => PortState::Armed,
            sys::IBV_PORT_ACTIVE => PortState::Active,
            sys::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            other => PortState::Unknown(other),
        }
    }
}

/// Path MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    /// Decodes `enum ibv_mtu`; `None` for values outside 1..=5.
    #[must_use]
    pub fn from_raw(raw: u32) -> Option<Mtu> {
        Some(match raw {
            sys::IBV_MTU_256 => Mtu::Mtu256,
            sys::IBV_MTU_512 => Mtu::Mtu512,
            sys::IBV_MTU_1024 => Mtu::Mtu1024,
            sys::IBV_MTU_2048 => Mtu::Mtu2048,
            sys::IBV_MTU_4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The `enum ibv_mtu` value.
    #[must_use]
    pub fn to_raw(self) -> u32 {
        match self {
            Mtu::Mtu256 => sys::IBV_MTU_256,
            Mtu::Mtu512 => sys::IBV_MTU_512,
            Mtu::Mtu1024 => sys::IBV_MTU_1024,
            Mtu::Mtu2048 => sys::IBV_MTU_2048,
            Mtu::Mtu4096 => sys::IBV_MTU_4096,
        }
    }

    /// Size in bytes.
    #[must_use]
    pub fn bytes(self) -> u32 {
        128 << self.to_raw()
    }
}

/// Link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkLayer {
    /// Not reported.
    Unspecified,
    /// InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE, iWARP).
    Ethernet,
    /// A value these bindings do not know.
    Unknown(u8),
}

/// Port attributes (`struct ibv_port_attr`), read through accessors.
// Plain integers copied out of C: Send + Sync by construction.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct PortAttr(pub(crate) sys::ibv_port_attr);

impl PortAttr {
    /// Logical port state.
    #[must_use]
    pub fn state(&self) -> PortState {
        PortState::from_raw(self.0.state)
    }
    /// Largest MTU the port supports.
    #[must_use]
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.max_mtu)
    }
    /// MTU in use.
    #[must_use]
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.active_mtu)
    }
    /// Length of the GID table.
    #[must_use]
    pub fn gid_tbl_len(&self) -> u32 {
        nonneg(self.0.gid_tbl_len)
    }
    /// Base LID (0 on Ethernet).
    #[must_use]
    pub fn lid(&self) -> u16 {
        self.0.lid
    }
    /// Capability flags (`enum ibv_port_cap_flags`).
    #[must_use]
    pub fn port_cap_flags(&self) -> u32 {
        self.0.port_cap_flags
    }
    /// Largest message size.
    #[must_use]
    pub fn max_msg_sz(&self) -> u32 {
        self.0.max_msg_sz
    }
    /// Physical state (5 = LinkUp).
    #[must_use]
    pub fn phys_state(&self) -> u8 {
        self.0.phys_state
    }
    /// Link layer.
    #[must_use]
    pub fn link_layer(&self) -> LinkLayer {
        match u32::from(self.0.link_layer) {
            sys::IBV_LINK_LAYER_UNSPECIFIED => LinkLayer::Unspecified,
            sys::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            sys::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unknown(self.0.link_layer),
        }
    }
}

impl fmt::Debug for PortAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortAttr")
            .field("state", &self.state())
            .field("max_mtu", &self.max_mtu())
            .field("active_mtu", &self.active_mtu())
            .field("gid_tbl_len", &self.gid_tbl_len())
            .field("lid", &self.lid())
            .field("link_layer", &self.link_layer())
            .finish_non_exhaustive()
    }
}

/// A 128-bit global identifier (`union ibv_gid`), in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID as an IPv6 address.
    #[must_use]
    pub fn to_ipv6(self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), which is
    /// how RoCE v2 names an interface's IPv4 address.
    #[must_use]
    pub fn to_ipv4_mapped(self) -> Option<Ipv4Addr> {
        self.to_ipv6().to_ipv4_mapped()
    }

    /// Whether all bytes are zero (an empty GID table slot).
    #[must_use]
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }

    pub(crate) fn to_raw(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }

    pub(crate) fn from_raw(raw: sys::ibv_gid) -> Gid {
        // SAFETY: both union fields are plain bytes of the same 16-byte
        // storage; reading `raw` is valid for any value.
        Gid(unsafe { raw.raw })
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self.to_ipv6())
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_ipv6(), f)
    }
}

/// Type of a GID table entry (`enum ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE v2 (UDP/IP).
    RoceV2,
    /// A value these bindings do not know.
    Unknown(u32),
}

/// One GID table entry (`struct ibv_gid_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Index in the port's GID table (the `sgid_index` of an address vector).
    pub index: u32,
    /// Port number.
    pub port: u8,
    /// Entry type.
    pub gid_type: GidType,
    /// Interface index of the network device the GID belongs to (0 if none).
    pub ndev_ifindex: u32,
}

impl GidEntry {
    pub(crate) fn from_raw(raw: &sys::ibv_gid_entry) -> GidEntry {
        GidEntry {
            gid: Gid::from_raw(raw.gid),
            index: raw.gid_index,
            port: u8::try_from(raw.port_num).unwrap_or(0),
            gid_type: match raw.gid_type {
                sys::IBV_GID_TYPE_IB => GidType::Ib,
                sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
                sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                other => GidType::Unknown(other),
            },
            ndev_ifindex: raw.ndev_ifindex,
        }
    }
}
