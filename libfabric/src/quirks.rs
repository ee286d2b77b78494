//! Provider behaviours the crate guards against that only some providers
//! have, each decided here, by provider name, with the source lines it
//! rests on (libfabric 1.17 unless said otherwise).

use crate::startup_env::StartupVar;

/// Whether the provider adds each enabled endpoint, with a callback into
/// it, to the wait object of the completion queues it is bound to and never
/// removes it, so that a wait on such a queue after the endpoint closed
/// calls into freed memory: rxm (`rxm_ep_wait_fd_add`,
/// `prov/rxm/src/rxm_ep.c` 1067-1079, 1154; unchanged in 2.1), rxd
/// (`prov/rxd/src/rxd_ep.c` 787-790), shm (`prov/shm/src/smr_ep.c` 992).
pub(crate) fn keeps_closed_endpoints_in_waits(provider: &str) -> bool {
    provider.contains("ofi_rxm") || provider.contains("ofi_rxd") || provider == "shm"
}

/// Whether the provider's fabric opens its wait objects for
/// `FI_WAIT_UNSPEC` as `FI_WAIT_YIELD`, and says so nowhere the crate can
/// read: shm's `smr_wait_open` (`prov/shm/src/smr_fabric.c` 38-51 in
/// 1.17, the same in 1.22 and 2.1) opens a util yield wait, whose wait
/// ignores its timeout (`util_wait_yield_run`, `prov/util/src/util_wait.c`
/// 592-611), and an event queue's `FI_GETWAITOBJ` still answers
/// `FI_WAIT_UNSPEC`. What the fabric opens that way: event queues and wait
/// sets (its completion queues resolve in place and are caught there, see
/// `wait::resolved_wait_obj`; its counters, `cntr::CntrAttr`). A timed
/// `fi_eq_sread` or `fi_wait` on one never returned (measured, 1.17).
pub(crate) fn opens_unspec_waits_as_yield(provider: &str) -> bool {
    provider == "shm"
}

/// Whether the provider may carry out a transfer posted on an endpoint
/// from the *peer's* side, copying straight into or out of the
/// initiator's buffer after the initiator's endpoint closed (other
/// providers leave a closed endpoint's buffers untouched, see
/// `buffer::reclaim_closed_endpoint`).
///
/// shm sends and RMA writes over `SMR_INJECT_SIZE` (4096 bytes) by
/// cross-memory attach: the command, with the initiator's pid and buffer
/// addresses, goes into the peer's queue, and the peer's progress copies
/// with `process_vm_readv`/`process_vm_writev` whenever it runs
/// (`smr_select_proto`, `prov/shm/src/smr_ep.c` 638-640 in 1.17, 621-622
/// in 1.22; `smr_progress_iov`, `smr_progress.c` 330-350 in 1.17). RMA
/// reads go that way too from 1.18 on (`smr_ep.c` 600-606 in 1.22; 1.17
/// sends them through its segment buffers only because its test of
/// `FI_HMEM_SYSTEM`, which is 0, is always false, `smr_ep.c` 621-627).
/// `smr_ep_close` (`smr_ep.c` 932-962 in 1.17) does not withdraw commands
/// queued at the peer: a peer in another process copied a 256 KiB read
/// into a buffer after its endpoint closed and the buffer had come back
/// (1.22), and received a 256 KiB send as the bytes the application
/// wrote into the buffer after it came back (1.17, 1.22). The crate
/// keeps every transmit of such an endpoint in flight at its close, not
/// only those over the inject size: a post records no length, so that
/// posting costs nothing more on any provider.
pub(crate) fn peers_copy_from_their_side(provider: &str) -> bool {
    provider == "shm"
}

/// Whether the provider's `fi_cq_strerror` asks the queue's first bound
/// endpoint without looking whether there is one: rxm's `rxm_cq_strerror`
/// takes the first entry of `cq->ep_list`, unlocked, and calls
/// `fi_cq_strerror` on that endpoint's core queue (`prov/rxm/src/rxm_cq.c`
/// 51-63 in 1.17, the same in 1.22 and 2.x): with no endpoint bound the
/// list's head is taken for one and a NULL pointer is followed (a crash),
/// and an endpoint closed meanwhile on another thread is read after it
/// was freed. rxd's `rxd_cq_strerror` does the same (`prov/rxd/src/
/// rxd_cq.c` 45-65; its `assert` is compiled out). Their tcp and udp
/// cores answer with util's `ofi_cq_strerror`, `fi_strerror` of the
/// number.
pub(crate) fn cq_strerror_asks_its_first_endpoint(provider: &str) -> bool {
    provider.contains("ofi_rxm") || provider.contains("ofi_rxd")
}

/// Whether the provider's event queue reads take an entry after an
/// unlocked look at the queue, so that two reads on two threads may take
/// the same entry (the second then treats the list's head as an entry:
/// copies from it, unlinks and frees it): sockets' `sock_eq_sread`, which
/// `sock_eq_read` is with no timeout, tests `dlistfd_empty` before it
/// takes `sock_eq->lock` (`prov/sockets/src/sock_eq.c` 84-110 in 1.22),
/// and frees error data unlocked first (`sock_eq_clean_err_data_list`,
/// 76). Three threads reading one queue aborted with a double free.
pub(crate) fn reads_its_eq_unlocked(provider: &str) -> bool {
    provider == "sockets"
}

/// Whether the provider's `fi_shutdown` closes the connection's socket
/// while its connection manager keeps the number and closes it again: the
/// second close hits whatever the process opened under that number in
/// between (a socket of another connection, a file). sockets'
/// `sock_ep_cm_shutdown` closes `ep->attr->cm.sock`
/// (`prov/sockets/src/sock_ep_msg.c` 628 in 1.22), the fd of the
/// connection's handle (set at 419 and 616), and leaves the handle's
/// `sock_fd` as it was; the endpoint's close then closes that
/// (`sock_ep_cm_wait_handle_finalized`, 1276-1289, through
/// `sock_ep_cm_unmonitor_handle_locked`, 267-269), and so does the peer's
/// shutdown or a hang-up read by the connection manager (346, 1147-1152),
/// after which `fi_shutdown` closes the number once more. Measured on
/// 1.17: a connection of a concurrent test lost its request or its
/// response (in about one run in ten), and the close of its endpoint then
/// waited for ever.
pub(crate) fn shutdown_closes_twice(provider: &str) -> bool {
    provider == "sockets"
}

/// Whether the provider gives an endpoint that maps a peer of the same
/// process the peer's own mapping of its region, which the peer's close
/// unmaps, so that the entry dangles once the peer closed: shm looks the
/// peer's name up in a process-wide list of its endpoints and takes the
/// region from there (`smr_map_to_region`, `prov/util/src/util_shm.c`
/// 373-380 in 1.17; `prov/shm/src/smr_util.c` 396-403 in 1.22;
/// `prov/shm/src/smr_av.c` 97-101 in 2.6), never removes a name from that
/// list before the provider is unloaded (`smr_cleanup`, `util_shm.c`
/// 50-60), and unmaps the region at the endpoint's close (`smr_ep_close`,
/// `prov/shm/src/smr_ep.c` 953; `smr_free`, `util_shm.c` 316-320). Seen
/// on 1.17, 1.22 and 2.1: a send, an RMA or an insert of the address
/// again after the peer closed crashed, and so did a queue read of the
/// survivor progressing a command the peer left (and, on 2.1, a large
/// send toward it). See the shm_peers module for what is done instead.
pub(crate) fn closed_peers_dangle(provider: &str) -> bool {
    provider == "shm"
}

/// Whether the provider's connected endpoints answer a peer through both
/// their completion queues whatever their caps, so that one enabled
/// without either crashes when a peer reads from or writes to it: tcp of
/// libfabric 1.17, whose `tcpx_op_read_req` takes `ep->util_ep.tx_cq` and
/// allocates the response from it before it looks at the key
/// (`prov/tcp/src/tcpx_progress.c` 526-527: a NULL pointer followed, also
/// on an endpoint with no RMA caps at all), as do its acknowledgements
/// (`tcpx_queue_ack`, 179), while `tcpx_op_write` takes a peer's write
/// from `rx_cq` (579) and the first transmit queued waits on `rx_cq`'s
/// wait (834-835). From 1.18 on (and in 1.17's net, the same code) the
/// responses and acknowledgements come from the domain's progress and
/// reach no queue (`xnet_progress.c` 411, 653 in 1.18; 190, 892 in 1.22;
/// `xnet_report_success` returns early for them, `xnet_cq.c` 133).
pub(crate) fn answers_peers_through_its_queues(provider: &str) -> bool {
    use libfabric_sys::fabric as sys;
    provider == "tcp" && sys::runtime_version() < sys::FI_VERSION(1, 18)
}

/// Whether the provider frees a connection request's handle only in
/// `fi_accept` or `fi_reject`, so that an endpoint opened from a request
/// and closed unaccepted must reject it: tcp ("we only free if user calls
/// accept. Otherwise, user will call reject", `prov/tcp/src/tcpx_ep.c`
/// 804-805; `xnet_ep.c` 763 in 1.22), whose reject of a handle whose
/// socket the endpoint took only frees it (`tcpx_ep.c` 996-997,
/// `xnet_pep.c` 293-294), and 1.17's net, the code tcp became
/// (`prov/net/src/xnet_ep.c` 694-695, `xnet_pep.c` 276-299).
pub(crate) fn frees_requests_only_when_answered(provider: &str) -> bool {
    matches!(provider, "tcp" | "net")
}

/// Whether the provider runs the endpoints bound to a completion queue in
/// the queue's progress (reads, waits, polls), reading state only
/// `fi_enable` creates, and keeps an endpoint whose `fi_enable` failed
/// after the queue was bound in that walk: rxm reads the endpoint's
/// `msg_cq` (`prov/rxm/src/rxm_cq.c` 1929, opened at enable, `rxm_ep.c`
/// 1343), shm its `region` (`prov/shm/src/smr_progress.c` 1156, created at
/// enable, `smr_ep.c` 1684), rxd likewise through its util endpoint list.
/// A read of such a queue crashed after an enable that failed (say, with
/// `-EMFILE`) until the endpoint was closed.
pub(crate) fn runs_unenabled_endpoints_in_progress(provider: &str) -> bool {
    keeps_closed_endpoints_in_waits(provider)
}

/// Whether the provider may carry out an RMA by writing or reading the
/// target process's memory itself, at the address the initiator gives,
/// without the target checking the key, the access or the bounds: shm's
/// "fast RMA" (`smr_rma_fast`: `ofi_shm_p2p_copy` with the remote iovec as
/// given, `prov/shm/src/smr_rma.c` 58-98, chosen at 129-131 in 1.22; CMA
/// `process_vm_writev` in 1.17), enabled for a domain whose `mr_mode` has
/// `FI_MR_VIRT_ADDR` (always, for shm) and whose `msg_order` asks for no
/// RMA ordering (`smr_fast_rma_enabled`, `prov/shm/src/smr.h` 170-174;
/// `smr_domain.c` 109). Its other paths check the key at the target
/// (`ofi_mr_map_verify`, `smr_progress.c` 1056, 1148). Measured on 1.17:
/// with this check off, a write into a region registered without
/// `FI_REMOTE_WRITE` landed in it. `msg_order` is the domain's transmit
/// ordering. The ordering is tested first: every RMA post makes this
/// check, and the provider's name (a UTF-8 check of a C string) is only
/// looked at for a domain without RMA ordering.
pub(crate) fn rma_unchecked_at_target(info: &crate::info::InfoEntry) -> bool {
    use libfabric_sys::fabric as sys;
    let rma_order = sys::FI_ORDER_RAR
        | sys::FI_ORDER_RAW
        | sys::FI_ORDER_RAS
        | sys::FI_ORDER_WAR
        | sys::FI_ORDER_WAW
        | sys::FI_ORDER_WAS
        | sys::FI_ORDER_SAR
        | sys::FI_ORDER_SAW;
    info.msg_order() & rma_order == 0 && info.provider() == "shm"
}

/// Whether the provider's `FI_WAIT_MUTEX_COND` wait sets wait on their
/// condition without holding its mutex: sockets' `sock_wait_wait` calls
/// `ofi_wait_cond` on the set's mutex unlocked (`prov/sockets/src/sock_wait.c`
/// 180-182 in 1.22), and `sock_wait_signal` signals without it (207-208).
/// POSIX leaves the first undefined; glibc returns from the wait with the
/// mutex held, and nothing releases it, so that of two threads woken
/// together one stays blocked until the other waits again, and a signal
/// between the members' check and the wait is lost. In 1.17 each timed
/// wait also returns at once: `ofi_wait_cond` gives
/// `pthread_cond_timedwait` a deadline on the wrong clock (`src/unix/osd.c`
/// 111-123), and a caller looping on `fi_wait` spins.
pub(crate) fn waits_on_unlocked_conditions(provider: &str) -> bool {
    provider == "sockets"
}

/// Whether the provider's counters keep 32-bit signed counts: sockets adds
/// `(int32_t) value` (`sock_cntr_add`, `prov/sockets/src/sock_cntr.c`
/// 277 for errors, likewise for counts) and compares a wait's threshold as
/// an `int` (320, 335), so that a value over `i32::MAX` is another number.
pub(crate) fn counts_in_32_bits(provider: &str) -> bool {
    provider == "sockets"
}

/// Whether the provider's wait sets are signalled by a byte written into
/// a blocking socket pair that only the set's `fi_wait` drains, one byte
/// per signal: sockets (`sock_wait_signal`, `prov/sockets/src/sock_wait.c`
/// 187-200; only the read end is made non-blocking, `sock_wait_init`
/// 88-101, in 1.17). An `FI_WAIT_FD` (or `FI_WAIT_SET`) counter signals
/// one per count (its own set is internal, `sock_cntr.c` 530-545), and an
/// event or completion queue on a set one per entry, under the queue's
/// lock (`sock_eq.c` 199-203, `sock_cq.c` 208), while reading the queue
/// drains nothing: once the pair is full the next signal blocks the
/// writer (the application, or the provider's progress or connection
/// thread, which a close then joins) for good.
pub(crate) fn wait_set_fills_up(provider: &str) -> bool {
    provider == "sockets"
}

/// Whether the provider's event queues cannot share a wait set: tcp.
/// tcp 1.17 runs its connection management on the queue's wait object
/// (`tcpx_conn_mgr_run`, `prov/tcp/src/tcpx_conn_mgr.c` 635-665) and keeps
/// an accepted socket's handle there, with a raw pointer to its passive
/// endpoint (580-582), so that a read of any queue on the set processes
/// it (453-475: reads the endpoint's `info`, writes its `eq`), also after
/// that passive endpoint and its queue closed (the close takes out only
/// its own socket, `tcpx_ep.c` 881-894): freed memory read and written.
/// From 1.18 on (and 1.17's net), `xnet_eq_create` adds the queue's
/// progress fd to the set (`xnet_eq.c` 225 in 1.22) and its close never
/// takes it out (84-113), while the set keeps one entry per fd number
/// (`util_wait.c` 237-243): a later fd of that number is never waited on
/// (lost wake-ups).
pub(crate) fn eq_cannot_share_a_wait_set(provider: &str) -> bool {
    matches!(provider, "tcp" | "net")
}

/// Whether the provider's counters honour `FI_CNTR_EVENTS_BYTES`: only cxi
/// reads `events` (`prov/cxi/src/cxip_cntr.c` 816 in 1.22); libfabric's
/// util counters never look at it and count completions
/// (`ofi_check_cntr_attr`, `prov/util/src/util_cntr.c` 39-70 in 1.22).
#[cfg(libfabric_cntr_events_bytes)]
pub(crate) fn counts_bytes(provider: &str) -> bool {
    provider.contains("cxi")
}

/// Whether the provider's registrations go through libfabric's
/// registration cache, which registers every region for local and remote
/// read, write and atomics whatever access was asked, and keeps it
/// registered after `fi_close` until the cache evicts it, so that a peer
/// holding its key still reaches memory the application got back: verbs
/// (`vrb_mr_cache_add_region`, `prov/verbs/src/verbs_mr.c` 289-302;
/// `vrb_mr_cache_close` only drops the cache's reference, 273-279, in
/// 1.22), also under `verbs;ofi_rxm`, unless the cache was turned off in
/// the environment libfabric started with (`FI_MR_CACHE_MAX_COUNT=0`:
/// `ofi_mr_cache_init` fails and the domain registers uncached,
/// `verbs_domain.c` 373-378; or `FI_MR_CACHE_MONITOR=disabled`).
///
/// libfabric reads those settings once, when it starts; the crate takes
/// the cache as off only if every value libfabric may have read says so
/// (see [`startup_env`](crate::startup_env)).
pub(crate) fn caches_registrations(provider: &str) -> bool {
    let verbs = provider == "verbs" || provider.starts_with("verbs;");
    let off = crate::startup_env::always(StartupVar::MrCacheMaxCount, |v| {
        v.is_some_and(|v| v.trim() == "0")
    }) || crate::startup_env::always(StartupVar::MrCacheMonitor, |v| {
        // Compared as libfabric does, exactly (`util_mem_monitor.c` 253 in
        // 2.1): " disabled" leaves the cache on.
        v == Some("disabled")
    });
    verbs && !off
}

/// Whether rxm registers the application's memory for more than it was
/// asked: at its message provider, `FI_SEND` gains `FI_REMOTE_READ` (its
/// read rendezvous, the default) and, with the write rendezvous
/// (`FI_OFI_RXM_USE_RNDV_WRITE`), `FI_RECV` gains `FI_REMOTE_WRITE`
/// (`rxm_mr_get_msg_access`, `prov/rxm/src/rxm_domain.c` 388-398 in 1.17,
/// 543-554 in 1.22, 563-574 in 2.1). The key the crate hands out is that
/// registration's. Read access only lets a peer that knows a key read
/// memory; write access lets it write into buffers lent as `&mut [u8]`,
/// so a domain of rxm's with the write rendezvous on is refused. rxm reads
/// the variable once, when libfabric starts (`rxm_init.c` 743 in 1.17):
/// it counts as on if any value libfabric may have read is on (see
/// [`startup_env`](crate::startup_env)).
pub(crate) fn lets_peers_write_receive_memory(provider: &str) -> bool {
    provider.contains("ofi_rxm")
        && !crate::startup_env::always(StartupVar::RxmRndvWrite, is_off_param)
}

/// Whether memory registered for sends is registered for peers' reads
/// too: rxm's read rendezvous (the default; a domain with the write
/// rendezvous is refused, see [`lets_peers_write_receive_memory`]) widens
/// `FI_SEND` to `FI_REMOTE_READ` at its message provider
/// (`rxm_mr_get_msg_access`, `prov/rxm/src/rxm_domain.c` 388-398 in 1.17,
/// 543-554 in 1.22, 563-574 in 2.1). A peer's read of such memory that
/// passed the key check before the MR closed is still answered from it
/// afterwards: tcp checks the key when the request arrives and queues a
/// response whose data is the memory itself, sent as the socket drains
/// (`xnet_op_read_req`: `ofi_mr_verify`, then `xnet_tx_queue_insert`;
/// `xnet_progress_tx`). A domain opened without `FI_MR_LOCAL` lends any
/// memory sent from: rxm then registers each rendezvous send itself, for
/// peers' reads, whatever the pool was registered for (`rxm_alloc_rndv_buf`
/// in `prov/rxm/src/rxm_msg.c`, when `rdm_mr_local` is false). So every
/// buffer pool's memory is kept on rxm, as a closed region's is, until the
/// endpoints open when the pool went have closed (see `domain::Retired`).
pub(crate) fn lends_sent_memory_to_peers(provider: &str) -> bool {
    provider.contains("ofi_rxm")
}

/// Whether a boolean parameter that defaults to false is off: unset, or a
/// value libfabric reads as false (`fi_param_get_bool`, `src/var.c`: "0",
/// "false", "no" or "off", case aside). A value it cannot read leaves the
/// default, false too; the crate takes it as on, erring on the side of
/// refusing.
fn is_off_param(value: Option<&str>) -> bool {
    value.is_none_or(|value| {
        ["0", "false", "no", "off"]
            .iter()
            .any(|off| value.eq_ignore_ascii_case(off))
    })
}

/// Whether the crate refuses the provider's atomics: verbs' MSG atomics
/// did not complete over soft-RoCE here (a fetch-add waited for ever), so
/// they are refused with [`Error::Unsupported`](crate::Error::Unsupported)
/// rather than left to hang a wait.
pub(crate) fn atomics_unverified(provider: &str) -> bool {
    provider == "verbs"
}

/// Whether the provider refuses an `FI_WAIT_FD` completion queue or counter
/// past a per-domain limit, with the error it gives for a wait object it
/// lacks: tcp from 1.18 adds each one's epoll fd to the domain's progress
/// epoll set (`xnet_cq_open`, `xnet_cntr_open`, `prov/tcp/src/xnet_cq.c`
/// 298, 480-484 in 1.22), which the kernel refuses after about 500.
/// (verbs also refuses `FI_WAIT_FD` for some queues after giving it to
/// others, for reasons of its own: that is no limit.)
pub(crate) fn limits_fd_waits_per_domain(provider: &str) -> bool {
    provider == "tcp"
}

/// Whether a counter bound to the provider's endpoint for
/// `FI_REMOTE_WRITE` / `FI_REMOTE_READ` counts the RMA peers target at it.
/// tcp (and 1.17's net) offers `FI_RMA_EVENT` but marks a remote write
/// without remote CQ data, and every read response, as an internal
/// transfer, which no counter counts (`tcpx_op_write`,
/// `prov/tcp/src/tcpx_progress.c` 584-592, `tcpx_cntr_inc`,
/// `tcpx_cq.c` 342-350 in 1.17; `xnet_cq.c` 133-137 in 1.22; measured:
/// five plain writes left the counter at 0). rxd, shm and sockets count
/// both (measured).
pub(crate) fn counts_remote_rma_at_endpoints(provider: &str) -> bool {
    !matches!(provider, "tcp" | "net")
}

/// Whether the provider frees a memory region's record in `fi_close` while
/// its progress thread may still read it: sockets looks a completed remote
/// write's region up by key under the domain lock, releases the lock, and
/// then reads the record's counter and queue and increments the counter
/// (`sock_pe_report_mr_completion`, `prov/sockets/src/sock_progress.c`
/// 315-335 in 1.22), while `sock_mr_close` removes the key under that lock
/// and frees the record (`prov/sockets/src/sock_mr.c` 46-63): a region
/// closed in that window had its freed record read (valgrind) and a
/// reused one's junk locked as a counter (a crash).
pub(crate) fn frees_regions_under_progress(provider: &str) -> bool {
    provider == "sockets"
}

/// Why the provider's multi-receive can write past the posted buffer, if
/// it can: shm and rxd subtract a message's size from the bytes left
/// without checking that it fits, so a message larger than what is left
/// wraps the count around and the next message lands past the buffer's
/// end (shm: `smr_adjust_multi_recv`, `prov/shm/src/smr_ep.c` 1388-1401
/// in 1.17, `util_adjust_multi_recv`, `prov/util/src/util_srx.c` 115-127
/// in 1.22; rxd: `rxd_progress_multi_recv`, `prov/rxd/src/rxd_cq.c`
/// 454-484, unchanged in 1.22), and so does rxm from libfabric 2.0, whose
/// receives go through that same `util_srx.c` (`util_ep_srx_context` at
/// enable, `prov/rxm/src/rxm_ep.c` 1375 in 2.1; its own
/// `rxm_adjust_multi_recv`, which checks the size first, `rxm_cq.c`
/// 697-700, is gone). Seen with the C API: a 2000-byte message into 1096
/// bytes left made the next ones land 1000 (shm 1.17, rxm 2.1) and 1904
/// (rxd) bytes past a 4096-byte buffer; rxm 1.17 and 1.22 and sockets
/// truncate it and write nothing past. A peer picks the message size, so
/// no `min_free` rules it out. The provider code is the runtime's, so
/// rxm is told apart by the runtime version.
pub(crate) fn multi_recv_overruns(provider: &str) -> Option<&'static str> {
    use libfabric_sys::fabric as sys;
    if provider == "sockets" {
        Some(
            "sockets copies a message that arrived before the buffer was posted at the \
             buffer's fill mark with the whole buffer's length (`sock_pe_progress_buffered_rx`, \
             `prov/sockets/src/sock_progress.c` 1246-1247 in 1.17, the same in 2.1), writing \
             past its end: refused",
        )
    } else if provider == "shm" || provider.contains("ofi_rxd") {
        Some(
            "the provider's multi-receive can write past the buffer (a message larger than \
             what is left wraps its count of bytes left): refused",
        )
    } else if provider.contains("ofi_rxm") && sys::runtime_version() >= sys::FI_VERSION(2, 0) {
        Some(
            "rxm of libfabric 2 receives through the shared receive queue, whose \
             multi-receive can write past the buffer (a message larger than what is left \
             wraps its count of bytes left): refused",
        )
    } else {
        None
    }
}

/// Whether reading an event queue can run the provider's teardown of a
/// connecting endpoint bound to it, which writes that endpoint's queued
/// transfers as error completions into its completion queue: tcp of 1.17
/// (`tcpx_eq_read` runs the connection manager, `prov/tcp/src/tcpx_eq.c`
/// 38-48; a failed connect disables the endpoint, `tcpx_conn_mgr.c`
/// 496-543, which flushes its queues into the CQ, `tcpx_ep.c` 264-359),
/// under the CQ's lock, which util makes a no-op under `FI_THREAD_DOMAIN`
/// and `FI_THREAD_COMPLETION` (`prov/util/src/util_cq.c` 493-498). An
/// event queue is fabric-level and may be read on any thread, so the
/// provider of a serialized domain there is given `FI_THREAD_SAFE` (the
/// Rust types stay serialized). Kept for later tcp versions too: they
/// run that progress from event queue reads as well.
pub(crate) fn tears_endpoints_down_in_eq_reads(provider: &str) -> bool {
    matches!(provider, "tcp" | "net")
}

/// Whether a failed multi-receive post may have handed part of the buffer
/// to the provider already: rxm pairs pieces of it with unexpected
/// messages as it posts, each rendezvous piece keeping a receive entry
/// until its data is read, and returns `-FI_ENOMEM` when the entries run
/// out part-way, after writing a release (`rxm_post_mrecv`,
/// `prov/rxm/src/rxm_msg.c` 99-147 in 1.17, the same in 1.22): 39844
/// bytes of a buffer handed back were written afterwards.
pub(crate) fn multi_recv_fails_after_taking_part(provider: &str) -> bool {
    provider.contains("ofi_rxm")
}
