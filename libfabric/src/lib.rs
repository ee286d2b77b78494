//! Safe libfabric (OFI): event queues, completion queues, wait objects and
//! `fi_trywait`, with the fabric, domain, endpoint and memory pieces that
//! produce real events.
//!
//! # A client and a server
//!
//! The connection layer ([`conn`]) puts the pieces together: a
//! [`Listener`] accepts and [`Connection::connect`] connects, each handing
//! back an endpoint with its event queue and completion queue bound and
//! enabled. A server and a client that exchange a message over the tcp
//! provider:
//!
//! ```
//! use libfabric::prelude::*;
//!
//! fn server(listener: Listener) -> libfabric::Result<()> {
//!     let conn = listener.accept()?; // FI_CONNREQ, fi_accept, FI_CONNECTED
//!     let pool = conn.buffer_pool(4, 4096)?; // registered buffers
//!     conn.recv(pool.take().expect("a free buffer"))?;
//!     let ping = conn.wait_one(&pool, None)?; // the receive's completion
//!     assert_eq!(ping.bytes(), b"ping");
//!     let mut pong = pool.take().expect("a free buffer");
//!     pong[..4].copy_from_slice(b"pong");
//!     conn.send(pong, 4)?; // the buffer moves into the provider...
//!     conn.wait_one(&pool, None)?; // ...and comes back with its completion
//!     Ok(())
//! }
//!
//! fn client(addr: std::net::SocketAddr) -> libfabric::Result<Vec<u8>> {
//!     let conn = Connection::connect(&Hints::new().provider("tcp").addr(addr), b"hi")?;
//!     let pool = conn.buffer_pool(4, 4096)?;
//!     conn.recv(pool.take().expect("a free buffer"))?; // posted before the ping
//!     let mut ping = pool.take().expect("a free buffer");
//!     ping[..4].copy_from_slice(b"ping");
//!     conn.send(ping, 4)?;
//!     loop {
//!         let done = conn.wait_one(&pool, None)?; // the send's, then the reply's
//!         if done.flags.contains(CompletionFlags::RECV) {
//!             return Ok(done.bytes().to_vec());
//!         }
//!     }
//! }
//!
//! let listener = Listener::bind(&Hints::new().provider("tcp").node("127.0.0.1").service(0))?;
//! let addr = listener.local_addr()?;
//! let server = std::thread::spawn(move || server(listener));
//! assert_eq!(client(addr)?, b"pong");
//! server.join().expect("the server thread")?;
//! # Ok::<(), libfabric::Error>(())
//! ```
//!
//! With tokio (feature `tokio`), the same with
//! [`AsyncListener`](crate::tokio::AsyncListener) and
//! [`AsyncConnection`](crate::tokio::AsyncConnection), awaiting each
//! completion. [`Rdm`] is the reliable unconnected endpoint with its
//! address vector. `use libfabric::prelude::*` imports the names most
//! programs need.
//!
//! # The C rules
//!
//! The reference semantics are the man pages fi_eq(3), fi_cq(3) and
//! fi_poll(3). The C rules they state are encoded in the types:
//!
//! - **Close order**: children keep `Arc`s of their parents, and endpoints
//!   of the EQs, CQs and AVs bound to them, so nothing is closed while
//!   something still uses it; `Drop` never panics and every object also has
//!   an explicit `close()` that returns the error.
//! - **Buffers in flight**: a [`Buffer`] is moved into the provider when
//!   posted and handed back by the completion ([`BufferPool::reclaim`]), so
//!   no safe code can touch or free memory the provider still uses.
//! - **Entry sizes**: event reads go through an [`eq::EventBuf`] that always
//!   has room for the largest connection data of the endpoints bound to the
//!   queue; CQ reads fill a slice of the queue's own entry type.
//! - **Error data**: `err_data` is copied into a caller-owned
//!   [`eq::ErrDataBuf`] that the error entry borrows.
//! - **Waiting**: the wait fd is a `BorrowedFd` tied to its queue;
//!   [`wait::Waiter`] runs the trywait / block / drain loop of fi_poll(3).
//!
//! # Threading
//! The threading model of a domain is a type parameter of the domain and
//! of every object opened from it ([`threading`]). The default,
//! [`ThreadSafe`] (`FI_THREAD_SAFE`, asked for by [`info::Hints::new`]), lets
//! any thread use any object at any time: its types are `Send + Sync`
//! without locks on the data path. [`ThreadDomain`] (`FI_THREAD_DOMAIN`) and
//! [`ThreadCompletion`] (`FI_THREAD_COMPLETION`) leave serialization to the
//! application, which the types do: their objects stay on the thread that
//! opened the domain, and the provider and this crate leave out their
//! locks ([`Domain::open_model`]).
//!
//! # Coverage of fi_eq(3), fi_cq(3) and fi_poll(3)
//!
//! | C call | here |
//! |---|---|
//! | `fi_eq_open`, `fi_close` | [`EventQueue::open`], [`EventQueue::close`] / drop |
//! | `fi_eq_read`, with `FI_PEEK` | [`EventQueue::read`], [`EventQueue::peek`] |
//! | `fi_eq_sread`, with `FI_PEEK` | [`EventQueue::sread`], [`EventQueue::speek`] |
//! | `fi_eq_readerr` | [`EventQueue::read_err`] |
//! | `fi_eq_write` | [`EventQueue::write_entry`], [`EventQueue::write_notify`] |
//! | `fi_eq_strerror` | [`EventQueue::strerror`] |
//! | `fi_cq_open`, `fi_close` | [`CompletionQueue::open`], [`CompletionQueue::close`] / drop |
//! | `fi_cq_read`, `fi_cq_readfrom` | [`CompletionQueue::read`], [`CompletionQueue::read_from`] |
//! | `fi_cq_sread`, `fi_cq_sreadfrom` | [`CompletionQueue::sread`], [`CompletionQueue::sread_threshold`], [`CompletionQueue::sread_from`] |
//! | `fi_cq_readerr` | [`CompletionQueue::read_err`] |
//! | `fi_cq_signal` | [`CompletionQueue::signal`] |
//! | `fi_cq_strerror` | [`CompletionQueue::strerror`] |
//! | `fi_control(FI_GETWAIT)` | [`wait::Waitable::wait_fd`], [`wait::PollFdSet::refresh`] |
//! | `fi_control(FI_GETWAITOBJ)` | [`wait::Waitable::wait_obj`] |
//! | `fi_trywait` | [`wait::trywait`], [`wait::TryWaitSet`] (queues checked once), [`wait::Waiter`], the queues of the `tokio` module (feature `tokio`) |
//! | `fi_wait_open`, `fi_wait` | [`wait::WaitSet::open`], [`wait::WaitSet::wait`] |
//! | `fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll` | [`poll::PollSet`] (completion queues and counters) |
//! | `fi_cntr_open`, `fi_close` | [`Counter::open`], [`Counter::close`] / drop |
//! | `fi_cntr_read`, `fi_cntr_readerr` | [`Counter::read`], [`Counter::read_err`] |
//! | `fi_cntr_add`, `fi_cntr_adderr`, `fi_cntr_set`, `fi_cntr_seterr` | [`Counter::add`], [`Counter::add_err`], [`Counter::set`], [`Counter::set_err`] |
//! | `fi_cntr_wait` | [`Counter::wait`], [`tokio::AsyncCounter::wait_for`](crate::tokio::AsyncCounter::wait_for) (feature `tokio`) |
//! | `fi_ep_bind` of a counter | [`Endpoint::bind_cntr`] (`FI_REMOTE_READ`, `FI_REMOTE_WRITE`: counting at the target, `FI_RMA_EVENT`) |
//! | `fi_mr_bind` of a counter, `fi_mr_enable` (`FI_MR_RMA_EVENT`) | [`MemoryRegion::register_counted`] |
//! | `fi_mr_reg`, `fi_mr_regv`, `fi_mr_desc`, `fi_mr_key`, `fi_close` | [`MemoryRegion::register`] (a `Vec` of buffers: `fi_mr_regv`), [`MemoryRegion::desc`], [`MemoryRegion::key`], [`MemoryRegion::into_inner`], [`MemoryRegion::close`] / drop; [`BufferPool::new`], [`BufferPool::with_access`] |
//! | `fi_mr_regattr` (`FI_HMEM_SYSTEM`) | [`MemoryRegion::register_attr`] |
//! | `fi_write`, `fi_read`, `fi_writedata`, `fi_inject_write` | [`Endpoint::write`], [`Endpoint::read`], [`Endpoint::write_data`], [`Endpoint::inject_write`] |
//! | `fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic` (with `fi_atomicvalid`, `fi_fetch_atomicvalid`, `fi_compare_atomicvalid` first) | [`Endpoint::atomic`], [`Endpoint::fetch_atomic`], [`Endpoint::compare_atomic`] on the integer types of [`ep::atomic::AtomicType`] |
//! | `fi_recvmsg` with `FI_MULTI_RECV`, `fi_setopt` / `fi_getopt(FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV)` | [`Endpoint::recv_multi`], [`Endpoint::recv_multi_from`], [`Endpoint::set_min_multi_recv`]; each message a [`Message`] ([`BufferPool::reclaim_received`], [`cq::Completion::message`]) |
//!
//! Not wrapped: `FI_WAIT_MUTEX_COND`'s `fi_mutex_cond` (raw pthread
//! objects cannot be handed out safely; such queues still block in
//! `sread`), and
//! `fi_control(FI_GETOPSFLAG/FI_SETOPSFLAG)`, which concern endpoints.
//!
//! # Misuse
//!
//! Every misuse that fi_eq(3), fi_cq(3), fi_cntr(3), fi_poll(3),
//! fi_domain(3), fi_endpoint(3), fi_cm(3), fi_msg(3) (with `FI_MULTI_RECV`),
//! fi_mr(3), fi_rma(3) and fi_atomic(3) warn about, and what
//! happens here. "Compile error" rows are proven by the file under
//! `tests/ui/` that must fail to compile; the other rows by the test named,
//! under `tests/` of this crate (or of the suite that holds the cross-crate
//! tests, marked "suite").
//!
//! | Misuse (man page) | Here | Shown by |
//! |---|---|---|
//! | Closing an EQ, CQ, AV or wait set that an endpoint or queue is still bound to (fi_close(3): `-FI_EBUSY`) | Endpoints and queues hold what they are bound to; `close()` returns [`Error::InUse`] with the object handed back, and the object closes when its last user goes | `misuse.rs` `closing_an_eq_bound_to_endpoints_reports_its_users`, `an_address_vector_stays_open_while_its_endpoint_uses_it`; `bad_input.rs` `closing_in_the_wrong_order_is_impossible_and_reported`; `wait.rs` `wait_set_signaled_by_its_queues` |
//! | Closing a fabric or domain with children open (fi_domain(3)) | Children hold their parents: [`Error::InUse`] | `misuse.rs` `closing_a_domain_with_a_registered_pool_reports_it`; `eq.rs` `close_reports_other_users` |
//! | Closing an object twice, or using it after `fi_close` | `close` takes the handle by value; each object is closed once, by `close` or on drop | compile error E0382 (example below) |
//! | Reading `err_data` after the next read of the queue (fi_eq(3), fi_cq(3)) | `err_data` is copied into the caller's [`eq::ErrDataBuf`], which the error entry borrows | compile error: `ui/err_data_outlives_its_buffer.rs`; `misuse.rs` `err_data_stays_valid_after_later_reads` |
//! | Using an event's connection data after its buffer is read into again | Events borrow their [`eq::EventBuf`] | compile error: `ui/event_data_outlives_next_read.rs`, `ui/peeked_event_outlives_its_buffer.rs`, `ui/notify_entry_outlives_next_read.rs` (an `FI_NOTIFY` entry is read in place), `ui/request_data_outlives_next_read.rs` (as is a request with no `fi_info`: its data borrows the buffer) |
//! | A read buffer too small for the entry (the provider writes what fits; tcp drops the rest) | An [`eq::EventBuf`] smaller than the largest connection data of the endpoints bound to the queue is refused with [`Error::BufferTooSmall`] before reading; CQ reads fill entries of the queue's own format, `FI_CQ_FORMAT_UNSPEC` one at a time | `eq.rs` `a_buffer_too_small_for_connection_data_is_refused`; compile error: `ui/wrong_entry_type.rs`; `data.rs` `unspec_format_reads_one_entry_at_a_time` |
//! | `fi_eq_write` on an EQ opened without `FI_WRITE` (tcp accepts it) | [`Error::InvalidArgument`] | `eq.rs` `write_needs_fi_write` |
//! | `fi_eq_sread` / `fi_cq_sread` on an `FI_WAIT_NONE` or `FI_WAIT_SET` queue | [`Error::WrongWaitMode`] | `eq.rs` `wait_none_refuses_sread_and_wait_fd`; `cq.rs` `sread_needs_a_wait_object_and_threshold_needs_the_condition`; `wait.rs` `wait_set_signaled_by_its_queues`; `misuse.rs` `wait_fd_and_sread_need_a_wait_object_on_completion_queues` |
//! | A threshold `fi_cq_sread` on a queue without `FI_CQ_COND_THRESHOLD` | [`Error::InvalidArgument`]; see [`cq::CqAttr::threshold_condition`] | `cq.rs` `sread_needs_a_wait_object_and_threshold_needs_the_condition` |
//! | `FI_WAIT_SET` without a wait set, or a wait object the provider lacks | [`Error::UnsupportedWait`] | `eq.rs`, `cq.rs` `unsupported_wait_objects_are_typed_errors` |
//! | The wait fd (`FI_GETWAIT`) of an `FI_WAIT_NONE` queue (tcp answers `-FI_ETOOSMALL`'s code) | [`Error::WrongWaitMode`] | `eq.rs` `wait_none_refuses_sread_and_wait_fd`; `misuse.rs` `wait_fd_and_sread_need_a_wait_object_on_completion_queues` |
//! | Blocking on a wait fd without `fi_trywait` first, or without draining the queue (fi_poll(3): lost wake-ups) | [`wait::Waiter`] and the `tokio` queues run trywait, wait, then read until empty. Not enforced for a fd from [`wait::Waitable::wait_fd`] that you poll yourself: call [`wait::trywait`] first | `wait.rs` `ten_thousand_events_through_the_waiter_none_lost_none_twice`; `async_tokio.rs` `many_events_from_another_thread_none_lost`; suite `load.rs` `a_million_events_read_by_several_tokio_tasks` |
//! | A [`wait::Waiter`] over no queue (a wait without a timeout never returned) | [`Error::InvalidArgument`] | `adversarial.rs` `a_waiter_over_no_queue_is_refused` |
//! | Several tokio tasks reading one wrapper: one edge of the wait fd wakes them, one reads an entry and returns; had it cleared the readiness, another that registered just then would wait with entries queued behind a signal that raises no new edge (util providers' fd stays signalled until a trywait; sockets' event queue until it is empty) | The readiness that woke a reader is cleared only when that reader found the queue empty and `fi_trywait` has reset the fd and found it still empty, as of when it woke; a reader whose trywait finds entries pending (it reset the fd, taking the others' edge) wakes the queue's other tokio readers, through any of its wrappers | suite `load.rs` `a_million_events_read_by_several_tokio_tasks` (the window is inside one poll: not forced by a test) |
//! | Two tokio wrappers of one queue (its wait fd registered twice: `EEXIST`) | Each wrapper registers its own duplicate of the fd | `async_tokio.rs` `two_async_wrappers_of_one_queue_each_get_events` |
//! | `fi_trywait` with a queue of another fabric | [`Error::InvalidArgument`] | `wait.rs` `trywait_refuses_queues_of_another_fabric` |
//! | `fi_trywait` with an `FI_WAIT_NONE` queue (libfabric answers 0, "may block", with nothing to block on) | [`Error::WrongWaitMode`] | `misuse.rs` `trywait_on_a_queue_without_a_wait_object_is_refused` |
//! | Using a wait fd, or a set of them, after its queue is closed | The fd, [`wait::Waiter`] and [`wait::PollFdSet`] borrow the queues | compile error: `ui/wait_fd_outlives_its_queue.rs`, `ui/waiter_outlives_its_queues.rs`, `ui/poll_fd_set_outlives_its_queue.rs` |
//! | `FI_WAIT_POLLFD`: an fd array too small, or a stale one (fi_control(3) change index) | [`wait::PollFdSet::refresh`] grows on `-FI_ETOOSMALL` and follows the change index | `wait.rs` `pollfd_sets_follow_the_change_index_protocol` |
//! | Touching or freeing a buffer while its operation is in flight (fi_msg(3), fi_mr(3)) | Posting moves the [`Buffer`] into the provider; each operation keeps its pool's memory and registration alive | compile error: `ui/buffer_touched_while_in_flight.rs`; suite `panics.rs` `a_panic_with_operations_in_flight_loses_no_buffer` |
//! | Reclaiming a completion twice (two owners of one buffer) | Completions are not `Clone`; [`BufferPool::reclaim`] takes the context, so a second call gives `None`, as does another pool's | compile error: `ui/completion_copied_to_reclaim_twice.rs`; `data.rs` `msg_format_send_and_recv` |
//! | Closing an endpoint with buffers posted (sockets, rxm and rxd drop them without a completion: the pool, its MR, the domain and the fabric stayed open for ever) | Every buffer still in flight on the endpoint goes back to its pool once it is closed; a completion of one read afterwards hands out nothing | `adversarial.rs` `buffers_in_flight_on_a_closed_endpoint_come_back`; suite `panics.rs` `a_panic_with_operations_in_flight_loses_no_buffer` |
//! | A completion read and never reclaimed (for example dropped by a panic) | Dropping the entry, or the error entry, hands its buffer back | `misuse.rs` `a_completion_dropped_without_reclaim_frees_its_buffer`; suite `panics.rs` `a_panic_while_handling_completions_loses_no_buffer` |
//! | Registering memory and freeing, moving or touching it while registered (fi_mr(3)) | A [`MemoryRegion`] owns its memory (`Vec<u8>`, `Box<[u8]>`, `&'static mut [u8]`: [`mr::RegionMemory`] is `Send + 'static`); memory borrowed for less than `'static` cannot be registered (a forgotten region would keep it registered past its borrow, and a closed region's memory may have to be kept, below) | compile error: `ui/borrowed_memory_cannot_be_registered.rs` |
//! | Handing back or freeing a region's memory while an RMA that passed the key check still copies into or out of it (`fi_close` of an MR only removes its key: `ofi_mr_close`, `prov/util/src/util_mr_map.c` 222-238 in 1.22; tcp receives a write's payload straight into the region after checking the key at its header, `prov/tcp/src/xnet_progress.c` 912) | Dropping a region (or [`MemoryRegion::close`]) closes the MR and keeps the memory in the domain until every endpoint of the domain open at that moment has closed; [`MemoryRegion::into_inner`] gives the memory back only while no endpoint of the domain is open, else [`Error::State`] with the region still registered | `rma.rs` `memory_from_into_inner_is_not_written_afterwards`, `memory_from_into_inner_is_not_read_afterwards`, `dropped_region_is_not_written_afterwards`, `regions_dropped_before_and_after_endpoints_close` |
//! | Dropping a buffer pool on rxm while a peer's read of it is answered (rxm's read rendezvous registers memory for sends for peers' reads, `rxm_mr_get_msg_access`; tcp checks the key when the request arrives and sends the response from the memory itself as the socket drains, `xnet_op_read_req`: freed memory was sent, or read after it was unmapped) | A pool on rxm keeps its memory after its last handle goes, as a closed region does, until every endpoint of the domain open then has closed ([`Domain::retained_regions`] counts it) | `rma.rs` `a_pool_peers_may_read_is_kept_until_the_endpoints_close` |
//! | Reading or writing through a reference memory that peers write with RMA (a data race) | A region with `REMOTE_WRITE` is reached by volatile copies only ([`MemoryRegion::read_at`], [`MemoryRegion::write_at`]); [`MemoryRegion::as_slice`] needs no remote write access, [`MemoryRegion::as_mut_slice`] no remote access: [`Error::State`]; a [`BufferPool`], whose buffers are slices, is never registered for remote access ([`BufferPool::with_access`] refuses it: [`Error::InvalidArgument`]) | `rma.rs` `write_read_write_data_and_inject_write_round_trips`, `a_region_peers_may_not_write_is_not_written`, `a_pool_with_remote_access_is_refused` |
//! | Registering for more access than used (a pool's memory writable by any peer that guesses its key) | [`MrAccess`] asks for exactly what is given; pools ask for local access only | `rma.rs` `the_pool_asks_for_local_access_only`, `a_pool_with_remote_access_is_refused` |
//! | An atomic at a misaligned target address: the initiator checks the offset's alignment, the target adds its region's address (offset mode) and operates with `__atomic` builtins | A region peers reach (`REMOTE_READ` or `REMOTE_WRITE`) must start at an address aligned to [`mr::ATOMIC_ALIGN`] (8) bytes: [`Error::InvalidArgument`] | `rma.rs` `a_misaligned_region_is_refused_remote_access` |
//! | A remote address that wraps past 2^64 at the target: the providers' bounds check wraps too and passes (`ofi_mr_map_verify`, `prov/util/src/util_mr_map.c` 141-145 in 1.22; sockets, rxd and shm crashed) | Every RMA and atomic checks `addr + offset + len` for overflow, and, where regions are addressed by offset (no `FI_MR_VIRT_ADDR`), an end past `isize::MAX` (past any region): [`Error::InvalidArgument`] before the call. A peer that does not use this crate can still send such an address: the target's provider is not protected against it | `rma.rs` `forged_wrapping_remote_regions_are_refused_before_the_call` |
//! | Requested keys reused within a domain (fi_mr(3): must be unique without `FI_MR_PROV_KEY`), so a peer's stale key reaches a newer region | One counter per domain for regions and pools; keys over `mr_key_size` bytes refused, raw keys (`mr_key_size` > 8) [`Error::Unsupported`] | `rma.rs` `a_write_to_a_deregistered_region_reaches_nothing` |
//! | An RMA outside the region the peer advertised (fi_rma(3)) | Every RMA call takes a [`RemoteRegion`], an offset and a length, checked with checked arithmetic before the call: [`Error::TooLarge`] / [`Error::InvalidArgument`], buffer handed back; a [`RemoteRegion`] decoded from bytes whose end overflows is refused | `rma.rs` `out_of_bounds_and_malformed_rma_is_refused_before_the_call` |
//! | More iovecs in one region than `mr_iov_limit`, an empty iovec, or a device memory interface for host memory (fi_mr(3)) | [`Error::TooLarge`], [`Error::InvalidArgument`], [`Error::Unsupported`] before the call; a region of several iovecs is reached locally by copies across them and remotely in its first iovec only (what the providers check remote addresses against) | `rma.rs` `several_iovecs_are_one_region`, `registration_attributes_take_host_memory_only` |
//! | An atomic operation the provider does not offer on the type, or on more values than it takes in one call (fi_atomic(3)) | `fi_*atomicvalid` first: [`Error::Unsupported`], [`Error::TooLarge`]; the remote range checked as for RMA, and aligned to the type ([`Error::InvalidArgument`]); operands, compare values and results in one pool buffer moved into the provider ([`Error::BufferTooSmall`] when it cannot hold them) | `rma.rs` `atomic_misuse_is_refused_before_the_call`, `atomics_add_fetch_and_compare_swap` |
//! | An atomic on an endpoint without `FI_ATOMIC`, or on a region peers may not write | [`Error::MissingCapability`] before the call; the target refuses the rest (memory untouched) | `rma.rs` `atomics_need_the_atomic_capability`, `an_atomic_on_a_region_peers_may_not_write_changes_nothing` |
//! | Closing a shm endpoint that another endpoint of the process still addresses (shm gave that one the closed endpoint's own mapping, which the close unmapped: its sends, RMA, queue reads, a new insert of the address and a new endpoint on its vector crashed) | The provider close waits until no endpoint the application keeps open may address it, then the endpoints that may close close together; sends to it meanwhile are never received; a vector that may map a closed shm endpoint refuses endpoints, and every vector its address: [`Error::State`] | `peer_close.rs` (most of its tests crashed before, on 1.17, 1.22 and 2.1: see its header) |
//! | Closing an endpoint with RMA or atomic operations in flight | Their buffers come back to their pools at the close, as for sends | `rma.rs` `rma_buffers_in_flight_on_a_closed_endpoint_come_back` |
//! | Closing a shm endpoint with a transfer in flight that the peer carries out itself (sends and RMA writes over shm's inject size, RMA reads: the peer's progress copies out of or into the initiator's buffer with cross-memory attach whenever it runs, and the close does not withdraw the command; a peer in another process wrote 256 KiB into a buffer that had come back, and received a send as the bytes written into it afterwards) | On an endpoint that may have posted to another process, the close hands back no buffer of a transmit (whatever its length) still in flight: it comes back with a completion written before the close, or never (its pool's memory stays allocated, a leak in place of a write into memory the application owns); peers of the same process close together, and their buffers come back as for any endpoint | `cross_process.rs` `a_read_in_flight_when_its_endpoint_closes_writes_nothing_afterwards`, `a_send_in_flight_when_its_endpoint_closes_is_never_received_as_changed_afterwards` |
//! | RMA on an endpoint without `FI_RMA` | [`Error::MissingCapability`] before the call | `rma.rs` `rma_needs_the_rma_capability` |
//! | RMA into a region without remote write access, or deregistered, or a pool registered for local use | The target's provider refuses it (on sockets a region dropped while endpoints of its domain are open stays registered, its memory kept, until none is open: see [`mr`] on closing) (key, access and bounds: `ofi_mr_map_verify`); the initiator gets an error completion (sockets; tcp, rxm and shm for reads), a success once sent (tcp, rxm, shm writes) or nothing (rxd drops it; the buffer comes back when the endpoint closes): the memory is untouched on every provider | `rma.rs` `a_region_peers_may_not_write_is_not_written`, `a_write_to_a_deregistered_region_reaches_nothing`, `a_read_of_a_dropped_region_is_refused` |
//! | RMA on shm without an RMA ordering: shm writes or reads the peer's memory at the address given, unchecked (`smr_rma_fast`) | [`Error::Unsupported`] on such a domain; [`Hints::msg_order`] with an RMA ordering makes the target check | `rma.rs` `shm_rma_that_the_target_would_not_check_is_refused` |
//! | Registering the application's memory where the provider's registration cache registers every region with full remote access and keeps it after `fi_close` (verbs: `vrb_mr_cache_add_region`, `prov/verbs/src/verbs_mr.c` 289-302 in 1.22) | [`MemoryRegion::register`] is [`Error::Unsupported`] there unless the program started with `FI_MR_CACHE_MAX_COUNT=0` (or `FI_MR_CACHE_MONITOR=disabled`); buffer pools, which peers are never given, are registered as before | `rma.rs` `user_memory_is_refused_where_registrations_are_cached`, run in the soft-RoCE guest with the cache on |
//! | verbs atomics, which did not complete over soft-RoCE here (a wait on them would hang) | [`Endpoint::atomic`], [`Endpoint::fetch_atomic`], [`Endpoint::compare_atomic`] are [`Error::Unsupported`] on verbs | `rma.rs` atomic tests print a typed SKIP on verbs |
//! | Posting on a full queue (`-FI_EAGAIN`) | The post fails with the buffer handed back ([`Handback`]); [`Error::is_again`] tells a full queue | `misuse.rs` `posting_past_the_queue_depth_hands_the_buffer_back` |
//! | A send longer than its buffer | [`Error::BufferTooSmall`], buffer handed back | `bad_input.rs` `a_pool_of_nothing_and_oversized_sends_are_refused` |
//! | Connection data longer than `FI_OPT_CM_DATA_SIZE` (fi_cm(3)) | [`Error::InvalidArgument`] before the call, for connect, accept and reject | `cm.rs` `connection_data_over_the_maximum_is_refused_before_sending`; `misuse.rs` `accept_and_reject_data_over_the_maximum_are_refused` |
//! | Freeing a peeked `FI_CONNREQ`'s `fi_info` (then again once read): a double free | A peeked request is an [`eq::Event::UnownedConnReq`], which has no request; only the read one ([`eq::Event::ConnReq`]) owns its [`ConnRequest`], freed once | `misuse.rs` `a_peeked_connection_request_owns_no_info`; suite `panics.rs` `a_panic_while_a_connection_request_is_held_frees_its_info_once`, under valgrind |
//! | Answering a connection request twice: rejecting it twice, rejecting an accepted one, or opening a second endpoint from it (fi_cm(3): the provider frees the handle on the first answer) | A [`ConnRequest`] is consumed by [`Endpoint::from_request`] or [`ConnRequest::reject`]; an `fi_info` copied from it cannot open an endpoint ([`Error::InvalidArgument`]) | compile error: `ui/connection_request_answered_twice.rs`; `misuse.rs` `a_connection_request_is_answered_exactly_once` |
//! | Leaving a connection request unanswered (the handle, and on tcp its socket, stay allocated; the peer waits for its own timeout) | A [`ConnRequest`] dropped unanswered is rejected | `misuse.rs` `a_connection_request_is_answered_exactly_once`; suite `panics.rs` `a_panic_while_a_connection_request_is_held_frees_its_info_once` |
//! | Reading into entries that still hold completions not yet reclaimed, or closing a CQ before the completions flushed by its endpoints' close were read | A read returns its completions in a [`cq::Completions`] guard whose drop hands back the buffers of those not reclaimed (so no read overwrites one, and a read costs the same whatever the slice's length); the guard gives shared access only, so a completion cannot be moved out of its batch (into an array read over later, or another batch); the CQ's final close hands back those of completions never read. A guard leaked with `mem::forget` leaks its buffers, as `mem::forget` does | compile error: `ui/completion_moved_out_of_its_batch.rs`; `misuse.rs` `a_completion_dropped_without_reclaim_frees_its_buffer`; suite `load.rs` `a_million_real_completions_read_by_several_threads` |
//! | Taking a completion's context by hand, or holding a queue's progress lock, whose word also carries the flag that refuses its waits (through the traits' hidden methods) | Those methods take a token only the crate can make | compile error: `ui/completion_context_taken_by_hand.rs`, `ui/queue_internals_reached_by_hand.rs` |
//! | Reclaiming one completion on two threads at once | Completions are not `Sync` (reclaiming takes the context through a shared reference) | compile error: `ui/completion_reclaimed_on_two_threads.rs` |
//! | Touching a multi-receive buffer (fi_msg(3) `FI_MULTI_RECV`) while the provider still fills it, or a message's bytes past what the provider reported | Each message is a read-only [`Message`] of exactly the range its completion reported, checked to lie inside the posted buffer (else it is no message, and the buffer comes back only with its endpoint's close); a completion without `FI_RECV` is a release, no message; no `&mut` reaches a message, and the [`Buffer`] comes back only once the provider released it, the messages completed fill the buffer from its start to within `min_free` of its end (no message can then still be copied in: rxm flags the last message *matched* while earlier large ones are still copied in, and writes a release of its own ahead of an unexpected rendezvous message), and no message is held; the endpoint's `min_free` is fixed by its first multi-receive; a message keeps its pool's memory alive | compile error: `ui/multi_recv_message_written_or_kept_with_its_buffer.rs`; `multi_recv.rs` `reading_past_a_message_is_refused`, `large_messages_finish_before_the_buffer_comes_back`, `a_release_ahead_of_an_unexpected_large_message_waits_for_it`, `messages_dropped_in_any_order_give_the_buffer_back_once`, `messages_taken_on_two_threads_while_buffers_are_reposted`, `a_message_kept_after_everything_else_keeps_its_memory` |
//! | A multi-receive buffer posted on an endpoint that closes | It comes back with the close, once its messages still held are dropped | `multi_recv.rs` `endpoint_closed_with_the_buffer_posted_gives_it_back` |
//! | A multi-receive on a provider that can write past the buffer (shm, rxd, and rxm of libfabric 2 wrap their count of bytes left when a message is larger than it: with the C API, a 2000-byte message into 1096 bytes left made the next ones land 1000 (shm 1.17, rxm 2.1) and 1904 (rxd) bytes past a 4096-byte buffer; sockets copies a message that arrived before the post with the whole buffer's length at its fill mark, `sock_progress.c` 1246-1247, overwriting the next slot) | [`Error::Unsupported`], buffer handed back; rxm of 1.x truncates such a message, and writes nothing past the buffer. A post rxm fails after taking part of the buffer (`rxm_post_mrecv`, out of receive entries part-way) keeps it until the endpoint closes (`None` handed back) | `multi_recv.rs` `a_message_larger_than_what_is_left_ends_the_buffer_and_writes_nothing_past_it` (each test prints its SKIP line on shm, `udp;ofi_rxd`, and rxm of libfabric 2) |
//! | A multi-receive buffer not larger than `FI_OPT_MIN_MULTI_RECV`, a minimum of 0 or other than the endpoint's first, without `FI_MULTI_RECV`, or with a receive queue whose entries do not say where a message landed | [`Error::BufferTooSmall`], [`Error::InvalidArgument`], [`Error::TooLarge`] (checked arithmetic), [`Error::MissingCapability`], [`Error::State`]; the buffer handed back | `multi_recv.rs` `a_buffer_not_larger_than_min_free_is_refused`, `connected_endpoints_without_the_capability_refuse_multi_receive`, `a_receive_queue_without_buf_is_refused` |
//! | Sharing objects between threads of a domain that is not `FI_THREAD_SAFE` (fi_domain(3)) | Only `FI_THREAD_SAFE` domains are opened ([`Error::InvalidArgument`] otherwise) | [`Domain::open`]; the safe [`Hints`] always ask for it |
//! | Asking for an API version newer than the library loaded | [`Error::RuntimeTooOld`] | [`info::getinfo`] |
//! | Binding an EQ, CQ or AV, or opening a domain, endpoint or passive endpoint, with an object or `fi_info` of another provider, fabric or domain (providers cast what they are given to their own types: a crash or a hang) | [`Error::ForeignObject`] before the call | `adversarial.rs` `objects_of_another_provider_are_refused`, `objects_of_another_fabric_of_the_same_provider_are_refused`, `a_connection_request_cannot_open_an_endpoint_of_another_provider` |
//! | Posting a buffer registered with another domain (its descriptor means nothing there) | [`Error::ForeignObject`], buffer handed back | `adversarial.rs` `a_buffer_registered_with_another_domain_is_refused` |
//! | `fi_listen` with no EQ bound, `fi_connect`/`fi_accept` with none, transfers with no CQ for their direction or before `fi_enable` (NULL dereferences in tcp) | [`Error::State`] before the call; binds only before `enable`, each once | `adversarial.rs` `listen_without_an_event_queue_is_refused`, `connect_accept_and_transfers_before_their_binds_are_refused` |
//! | A tagged transfer on an endpoint without `FI_TAGGED`, a message one without `FI_MSG` (the receiver crashes) | [`Error::MissingCapability`] | `adversarial.rs` `connect_accept_and_transfers_before_their_binds_are_refused` |
//! | An `fi_addr_t` that is not a live entry of the endpoint's AV (rxm and rxd index their tables with it unchecked) | [`Error::InvalidArgument`]; AVs are `FI_AV_TABLE` with a fixed capacity, removals wait until no endpoint is bound | `adversarial.rs` `transfers_to_addresses_not_in_the_address_vector_are_refused`; `sizes.rs` `send_and_inject_lengths` |
//! | An insert into a full address vector while endpoints bound to it are in use (the provider's entry removed at once: on shm that unmapped a peer in another process that had connected to the endpoint on its own and was sending to it, and the endpoint's next read crashed) | [`Error::TooLarge`]; the provider's entry is removed as by [`AddressVector::remove`], once no endpoint is bound | `cross_process.rs` `a_refused_insert_of_a_peer_that_sends_to_the_vectors_endpoint_unmaps_nothing` |
//! | An address shorter than the domain's format (`fi_av_insert` takes no length) | [`Error::BufferTooSmall`] | `adversarial.rs` `an_address_shorter_than_the_domain_format_is_refused`; `sizes.rs` `address_bytes` |
//! | A send or inject on a connected (MSG) endpoint before its connection is established (tcp crashes: its transmit hook is set by the connection response), or after it is shut down | [`Error::State`] with the buffer handed back until `FI_CONNECTED` for the endpoint is read from its event queue, and again from [`Endpoint::shutdown`] or a read `FI_SHUTDOWN` on; receives may be posted before | `adversarial.rs` `sends_before_the_connection_is_established_are_refused`, `sends_after_a_refused_connection_are_refused`; `data.rs` `sends_after_a_shutdown_are_refused_with_their_buffers` |
//! | `fi_inject` over `inject_size` (tcp overflows its buffer) | [`Error::TooLarge`] | `adversarial.rs` `inject_over_inject_size_is_refused`; `sizes.rs` `send_and_inject_lengths` |
//! | Remote CQ data on a domain whose `cq_data_size` is 0, or wider than it | [`Error::State`] / [`Error::TooLarge`] | `adversarial.rs` `remote_cq_data_needs_a_domain_that_carries_it` |
//! | Queue, AV or buffer sizes that overflow (util queues round sizes up to a power of two and wrap above 2^63) | [`Error::TooLarge`] / [`Error::OutOfMemory`] before any allocation or call; nothing aborts | `adversarial.rs` `impossible_sizes_are_typed_errors_not_aborts`; `sizes.rs` (property tests) |
//! | A second EQ bound to a passive endpoint (the provider keeps the first busy for ever) | [`Error::State`] | `adversarial.rs` `listen_without_an_event_queue_is_refused` |
//! | Closing a passive endpoint while the provider holds connections it accepted for it (tcp follows a raw pointer to it when their requests arrive) | A passive endpoint bound to an EQ is closed with that EQ | `adversarial.rs` `a_passive_endpoint_dropped_with_a_connection_in_flight_is_safe` |
//! | Closing an EQ with connection requests queued (their `fi_info` and sockets leak); an endpoint opened from a request and dropped unaccepted (tcp leaks the handle); a poll set closed with members (its list leaks) | The EQ rejects and frees queued requests first; the endpoint rejects its request on tcp; the poll set removes its members | `adversarial.rs` `queues_closed_with_connection_requests_queued_free_them`, `an_endpoint_opened_from_a_request_and_dropped_unaccepted_frees_it`, `a_poll_set_closed_with_members_leaks_nothing` (under valgrind) |
//! | `fi_poll` with fewer slots than changed counters (libfabric's util poll sets count a change they have no room to report as seen: it is lost) | [`poll::PollSet::poll`] refuses a `ready` shorter than the set with [`Error::InvalidArgument`] | `cntr.rs` `poll_sets_report_every_change_or_refuse_a_short_array` |
//! | A wait, trywait or poll over thousands of queues and counters (one stack frame per progress lock overflowed a thread's stack) | Past 16 members the locks are held from a vector | `cntr.rs` `thousands_of_counters_are_polled_and_trywaited_on_a_small_stack` |
//! | sockets' 32-bit signed counts: a sum past `i32::MAX` read back sign-extended and never reached by a wait; counter flags naming no kind bound nothing | [`Error::TooLarge`] for an add past it, reads as 32-bit counts; [`Error::InvalidArgument`] for unknown flags | `cntr.rs` `sums_past_a_32_bit_count_are_refused_on_sockets`, `counter_flags_of_no_known_kind_are_refused` |
//! | `FI_SELECTIVE_COMPLETION` with posts that never ask for a completion (buffers never come back) | Not offered | compile error: `ui/selective_completion_is_not_offered.rs` |
//! | Reading, re-flagging or re-arming a queue's wait fd (lost wake-ups, hangs) | [`wait::WaitFd`] gives only the raw number: using it as an fd takes `unsafe` | compile error: `ui/wait_fd_read_through_std.rs` |
//! | A failed `fi_close` (the object is still open) | `close` hands the object back with the error ([`Handback`]); nothing is marked closed that is not | `misuse.rs` `closing_an_eq_bound_to_endpoints_reports_its_users` |
//! | `fi_strerror` for system codes returns a per-thread buffer the next call frees | [`Errno::text`] copies through `strerror_r` | `adversarial.rs` `error_text_of_codes_glibc_does_not_know_is_owned` |
//! | Handing `fi_*_strerror` forged `err_data` | The call gets the data the provider gave: an error entry keeps it in a private field ([`eq::EqError::err_data`], [`cq::CqError::err_data`]) | compile error: `ui/err_data_cannot_be_forged.rs`; `adversarial.rs` `error_entries_cannot_be_forged_for_strerror` |
//! | `fi_cq_strerror` on `ofi_rxm` or `ofi_rxd` with no endpoint bound (their `fi_cq_strerror` takes the queue's first endpoint without looking: a NULL pointer followed) | Not called there: the text of the error number, as their tcp and udp cores give it | `adversarial.rs` `completion_error_text_needs_no_endpoint_bound` |
//! | A provider error number of `i32::MIN` handed to `fi_*_strerror` (providers negate it: signed overflow in C) | Passed as `-i32::MAX` | `adversarial.rs` `error_entries_cannot_be_forged_for_strerror` |
//! | Waiting on an `FI_WAIT_POLLFD` set, one of whose fds tcp keeps readable (a wait loop spins) | The crate's waits ([`wait::Waiter`], the tokio queues) take `FI_WAIT_FD` queues only: [`Error::WrongWaitMode`] | `adversarial.rs` `no_wait_loop_of_the_crate_takes_a_pollfd_queue` |
//! | `FI_WAIT_YIELD`, whose util wait ignores the timeout (an `sread` with one never returns) | [`Error::UnsupportedWait`] at open | `adversarial.rs` `yield_waits_are_refused` |
//! | A wait object given as its raw number ([`wait::WaitObj::Other`]), which passed the checks of its name: `FI_WAIT_NONE` then `fi_trywait`/`sread` (rxm, rxd and shm crash), `FI_WAIT_SET` with no set (sockets crashes), `FI_WAIT_YIELD` (an `sread` hangs) | Raw values become their names where they enter ([`eq::EqAttr::wait`], [`cq::CqAttr::wait`], [`wait::WaitSet::open`]); a value libfabric does not name is [`Error::UnsupportedWait`] before any call | `adversarial.rs` `wait_objects_given_as_raw_values_get_the_checks_of_their_names` |
//! | Closing a connectionless endpoint that has no AV (rxm dereferences it), or asking a connectionless endpoint for `FI_OPT_CM_DATA_SIZE` (shm 1.22 crashes) | An AV is bound just before such a close; connectionless endpoints are never asked CM options and refuse `connect`/`accept` with [`Error::State`] | `adversarial.rs` `a_connectionless_endpoint_closed_without_an_address_vector` |
//! | Reading a completion queue (or `fi_trywait`, `sread`, `fi_poll` on it) while an endpoint bound to it is enabled or closed on another thread, or while a bound endpoint was never enabled (rxm, rxd and shm crash in the queue's progress) | Endpoints give their queues to the provider only in [`Endpoint::enable`]; a per-queue lock keeps those calls out of each other's way (shared by reads, exclusive around enable and close) | `adversarial.rs` `endpoints_enabled_and_closed_while_their_queue_is_read_on_another_thread` (on every provider of the matrix) |
//! | Operations in flight on an endpoint that closes, on providers that drop them without a completion (a slot taken back at two closes was parked for good; `fi_cancel` matches receives only) | The endpoint cancels its receives (`fi_cancel`) before `fi_close`; what remains comes back at the close, its context stale; a stale context is posted with again once each queue of the endpoint was read empty after the close and every completion read before was released, so no completion naming it can surface | `adversarial.rs` `a_slot_comes_back_after_every_close_of_its_endpoint`, `a_slot_comes_back_after_every_close_with_a_send_in_flight`, `a_completion_held_across_the_close_keeps_its_context_stale` |
//! | Reading or waiting on a completion queue after `fi_enable` of an endpoint bound to it failed (say, out of file descriptors): rxm and shm keep the endpoint in the queue's progress and crash | On those providers a failed enable is final: the queue's reads and polls and the vector's inserts are [`Error::State`] until the endpoint is closed (waits as after a close), and the endpoint binds and enables nothing more | `enable_failure.rs` `a_queue_whose_endpoint_failed_to_enable_is_not_read_until_it_is_closed` |
//! | Inserting into an address vector while endpoints bound to it post on other threads (a post looks the address up in the provider's table without the vector's lock: rxm `rxm_get_conn`, shm `smr_verify_peer`, sockets keeps a pointer into its table; an insert past the table's first block grows it, `ofi_bufpool_grow`, `sock_resize_av_table`: the post read freed memory) | The provider is asked for room for the vector's whole capacity, and an insert that could make one entry more is refused before the call: [`Error::TooLarge`] (entries of removals put off, and of addresses inserted twice, count) | `adversarial.rs` `inserts_never_grow_the_providers_table_under_the_posts` |
//! | Closing an shm endpoint while another thread inserts into its address vector (`smr_av_insert` walks the vector's endpoints with no lock of its own and writes into each one's region, while `smr_ep_close` unmaps it) | The provider close holds the vector's lock, as inserts do | Not reproduced by a test: the window is inside two provider calls |
//! | Inserting into an address vector bound to an endpoint not yet enabled (shm maps the address into the endpoint's region, which only `fi_enable` creates: a crash) | The vector is given to the provider in [`Endpoint::enable`], with its inserts held off meanwhile | `adversarial.rs` `addresses_inserted_between_binding_an_address_vector_and_enabling` |
//! | Enabling an endpoint without a completion queue for a direction its caps use (rxm and shm refuse with `-FI_ENOCQ` but keep the queue already given; its reads then crash) | [`Error::State`] before any call | `adversarial.rs` `an_enable_without_the_queues_its_caps_need_is_refused_before_any_call` |
//! | Enabling a tcp endpoint of libfabric 1.17 without both completion queues, whatever its caps (tcp answers a peer's reads and writes through them: a NULL pointer followed) | [`Error::State`] before any call | `adversarial.rs` `a_tcp_endpoint_of_libfabric_1_17_needs_both_queues_whatever_its_caps` |
//! | An event queue on a wait set on tcp (1.17 handles the connection requests of every queue on the set in a read of any, also those of a passive endpoint that closed: freed memory; later versions leave a closed queue's fd in the set: lost wake-ups) | [`Error::UnsupportedWait`] | `wait.rs` `wait_set_signaled_by_its_queues` |
//! | An event or completion queue on a wait set on sockets (a byte per entry into the set's blocking socket pair, which reads never drain: its writers block for good) | [`Error::UnsupportedWait`], as for its counters | `wait.rs` `wait_set_signaled_by_its_queues` |
//! | `fi_wait` on a wait set while an endpoint of one of its queues is enabled or closed; wait sets on rxm and rxd (they keep a closed endpoint's callbacks) | The set holds its queues' progress locks; [`Error::UnsupportedWait`] for `FI_WAIT_SET` on rxm and rxd | `adversarial.rs` `a_wait_set_waited_on_while_endpoints_of_its_queue_come_and_go`; `misuse.rs` `wait_fd_and_sread_need_a_wait_object_on_completion_queues` |
//! | Waiting (`fi_trywait`, `sread`, [`wait::Waiter`], tokio, wait sets) on a completion queue after an rxm, rxd or shm endpoint bound to it closed: the provider keeps a callback into the freed endpoint in the queue's wait object | The close (or the failed enable) marks the queue, in its progress lock's word; its waits are [`Error::State`] from then on, also through a [`wait::TryWaitSet`] made before; its reads still work | `adversarial.rs` `waits_on_a_queue_after_its_endpoint_closed` (under valgrind); `progress_lock_refused.rs` (a failed enable); the lock's model, `progress/model.rs` `a_wait_and_a_read_beside_a_poisoning_writer_two_rounds` |
//! | Not guarded (a provider bug the crate cannot see from one side): on shm 1.17 and 1.22 a message over the inject size (4096 bytes) that meets a smaller receive makes the receiver's progress spin for ever: `smr_cma_loop` copies until the sender's size is reached, with no room left (`prov/shm/src/smr.h` 429-447, called at `smr_progress.c` 346-348 in 1.17) | Size shm receive buffers for the largest message peers send, or use libfabric 2.x | - |
//! | A stale wait-object signal ending a later `sread` early | `sread` re-arms (`fi_trywait`) and waits the rest of the timeout | `adversarial.rs` `a_signal_reported_once_does_not_cut_the_next_wait_short` |
//! | A read loop that waits for an event while an error entry is next (`-FI_EAVAIL` again and again until `fi_*_readerr`: a spin; a refused connection read 1.8 million times in 2 s) | Reads hand the error entry back themselves: [`eq::EqRead::Error`], [`cq::CqRead::Error`]; only a peek reports [`eq::EqRead::ErrorPending`]; the connection layer turns a refusal into [`Error::Call`] with [`Errno::CONNREFUSED`] | `conn.rs` `a_rejected_connection_is_a_typed_error_not_a_spin`, `async_connections_exchange_data_and_report_a_rejection`; `adversarial.rs` `a_passive_endpoint_dropped_with_a_connection_in_flight_is_safe` |
//! | `FI_WAIT_UNSPEC` that the provider resolves to `FI_WAIT_YIELD` (shm's completion queues), whose waits ignore their timeout (an `sread` never returned) | Refused at open like `FI_WAIT_YIELD` ([`Error::UnsupportedWait`]); the default wait object falls back to `FI_WAIT_NONE` | `conn.rs` `default_wait_objects_are_what_the_provider_blocks_on` |
//! | `fi_cq_signal` on a queue without a wait object (rxm, rxd and shm follow its NULL `wait`: a crash) | [`Error::WrongWaitMode`] | `adversarial.rs` `signal_on_a_queue_without_a_wait_object_is_refused` |
//! | Waiting for a completion of a connection whose peer went away, on a provider that reports it only on the event queue (sockets: a wait for ever) | [`Connection::wait_one`] and [`tokio::AsyncConnection::next`] watch the connection's event queue too: [`Errno::NOTCONN`] | `conn.rs` `a_wait_for_a_completion_ends_when_the_peer_goes_away`, `an_async_wait_for_a_completion_ends_when_the_peer_goes_away` |
//! | Async queues on a tokio runtime without its I/O driver, a connection timeout without its time driver (tokio panics) | [`Error::State`] | `conn.rs` `tokio_runtimes_without_their_drivers_are_typed_errors` |
//! | Closing a counter that an endpoint is still bound to (fi_close(3): `-FI_EBUSY`) | The endpoint holds the counter; [`Counter::close`] returns [`Error::InUse`] with the counter handed back, and succeeds once the endpoint is closed | `cntr.rs` `a_counter_closed_while_bound_is_in_use_until_its_endpoint_closes` |
//! | Binding a counter of another domain (the provider casts it to its own type) | [`Error::ForeignObject`] | `cntr.rs` `a_counter_of_another_domain_is_refused` |
//! | Binding a counter after `fi_enable`, twice for one kind, or for no kind | [`Error::State`] / [`Error::InvalidArgument`] | `cntr.rs` `binding_rules` |
//! | Reading or waiting on a counter bound to an endpoint that was never enabled, or while an endpoint bound to it is enabled or closed on another thread (rxm and shm crashed reading a counter bound to a never enabled endpoint: the util counters run their endpoints in every read) | Endpoints give counters to the provider in [`Endpoint::enable`]; reads, waits, trywaits and polls hold the counter's progress lock, which enable and close take exclusively | `cntr.rs` `a_counter_bound_to_a_never_enabled_endpoint_is_read_and_waited_on`, `counter_reads_while_endpoints_bound_to_it_are_enabled_and_closed` |
//! | Reading, waiting on or polling a counter after `fi_enable` of an endpoint bound to it failed (rxm and shm keep the endpoint in the counter's progress) | As for completion queues: on rxm, rxd and shm the counter's reads, waits and polls are [`Error::State`] until that endpoint is closed, its waits for good | `enable_failure.rs` `a_queue_whose_endpoint_failed_to_enable_is_not_read_until_it_is_closed` |
//! | Waiting on a counter without a wait object (`fi_cntr_wait` on the util counters asserts one; `fi_trywait` answers "may block" with nothing to block on) | [`Error::WrongWaitMode`] from [`Counter::wait`], [`wait::trywait`], [`wait::Waiter`] and [`tokio::AsyncCounter`] | `cntr.rs` `a_counter_without_a_wait_object_is_refused_by_every_wait` |
//! | Waiting on a counter after an rxm, rxd or shm endpoint bound to it closed (rxm keeps a callback into the freed endpoint in the counter's wait) | [`Error::State`], also through a [`wait::TryWaitSet`] made before; reads still work | `cntr.rs` `waits_on_a_counter_after_its_endpoint_closed_are_refused_where_unsafe`, `trywait_sets_made_before_a_close_refuse_the_counter_where_unsafe` |
//! | A counter wait whose error count changed (`-FI_EAVAIL`), or that sockets ends at once with a positive `ETIMEDOUT` (taken as success it reported thresholds never reached) | [`Error::CounterError`]; only 0 is success, and the wait goes on until its timeout ([`Error::TimedOut`]) | `cntr.rs` `a_wait_ends_with_a_typed_error_when_the_error_count_changes`, `a_wait_reaches_its_threshold_or_times_out` |
//! | An `FI_WAIT_FD` or `FI_WAIT_SET` counter on sockets: each count writes a byte into a blocking socket pair only a wait set's `fi_wait` drains, and the 280th blocked its progress for good | [`Error::UnsupportedWait`]; the default wait object is `FI_WAIT_UNSPEC` there | `cntr.rs` `wait_objects_the_crate_cannot_use_are_refused` |
//! | `fi_wait` on a wait set while an endpoint bound to one of its counters is enabled or closed | The set holds its counters' progress locks as it does its queues' | `cntr.rs` `a_counter_on_a_wait_set_signals_it` |
//! | Counts over `i32::MAX` on sockets (32-bit signed counts: wrapped values, thresholds compared as `int`) | [`Error::TooLarge`] | `cntr.rs` `counts_and_error_counts_are_read_added_and_set` |
//! | The wait fd of a counter where the provider has none (the util counters answer `FI_GETWAIT` with `-FI_ENOSYS`), or used after the counter is closed | [`Error::Unsupported`]; the fd borrows the counter | `cntr.rs` `no_provider_gives_a_counter_wait_fd_and_the_waiter_says_so`; compile error: `ui/counter_wait_fd_outlives_its_counter.rs` |
//! | Using two objects of an `FI_THREAD_DOMAIN` or `FI_THREAD_COMPLETION` domain from two threads at once (fi_domain(3): the application serializes access; the provider takes no locks) | The domain's threading model is a type parameter of the domain and of every object opened from it; under the serialized models they are neither `Send` nor `Sync`; [`Domain::open_model`] checks the `fi_info`'s model against the type ([`Error::InvalidArgument`]) | compile error: `ui/serialized_domain_moved_to_another_thread.rs`, `ui/serialized_endpoint_moved_to_another_thread.rs`, `ui/serialized_completion_queue_moved_to_another_thread.rs`, `ui/serialized_counter_moved_to_another_thread.rs`, `ui/serialized_region_and_vector_moved_to_another_thread.rs`; `threading.rs` `a_domain_opens_with_each_model_and_refuses_a_weaker_fi_info` |
//! | Binding objects of a serialized domain to thread-safe ones (a queue of another model), or giving them to the `tokio` wrappers, which call the provider on the runtime's threads | The type parameters must match; the tokio wrappers and the connection layer take and open thread-safe objects only | compile error: `ui/queue_of_another_threading_model_bound.rs`, `ui/serialized_objects_given_to_tokio.rs` |
//! | A provider call of a serialized domain made on another thread through a value that is `Send` (the last [`Buffer`] of a pool closes its MR; a [`wait::Waiter`], a [`wait::WaitSet`] or an [`EventQueue`] holding the domain's objects) | The pool's close is parked and made on the domain's thread ([`Domain::deferred_closes`]); `Waiter` and wait sets refuse such queues ([`Error::InvalidArgument`]); a [`wait::TryWaitSet`], which takes them, is neither `Send` nor `Sync`; event queues do not hold such endpoints | `threading.rs` `a_buffer_dropped_on_another_thread_parks_its_pools_close_for_the_domains_thread` (under valgrind), `serialized_objects_are_refused_where_any_thread_could_use_them`; compile error: `ui/trywait_set_moved_to_another_thread.rs` |
//! | Forgetting the wait object: a queue opened with `FI_WAIT_NONE` by default could not block or be awaited | [`eq::EqAttr::new`] and [`cq::CqAttr::new`] default to `FI_WAIT_FD` where the provider has it (table at [`wait::WaitObj`]) | `conn.rs` `default_wait_objects_are_what_the_provider_blocks_on` |
//!
//! Every C call the crate makes, with the preconditions its man page leaves
//! to the caller and how each is met, is listed in [`preconditions`].
//!
//! ```compile_fail,E0382
//! fn twice(eq: libfabric::EventQueue) -> libfabric::Result<()> {
//!     eq.close()?;
//!     eq.close() // `close` took the queue: it cannot be closed again
//! }
//! ```
//!
//! # An event queue on its own
//! ```
//! use libfabric::prelude::*;
//! let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
//! for info in &list {
//!     println!("{} {} {:?}", info.provider(), info.domain_name(), info.ep_type());
//! }
//! let fabric = Fabric::open(list.first().expect("tcp provider"))?;
//! let eq = EventQueue::open(&fabric, &EqAttr::new().write(true))?;
//! eq.write_notify(eq.fid(), 1, 2)?;
//! let mut buf = EventBuf::new();
//! assert!(matches!(eq.read(&mut buf)?, EqRead::Event(Event::Notify(_))));
//! assert!(matches!(eq.read(&mut buf)?, EqRead::Empty));
//! # Ok::<(), libfabric::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// The crate keeps supporting what libfabric 2.x deprecates (wait sets, poll
// sets); users see the deprecation.
#![cfg_attr(libfabric_2, allow(deprecated))]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link to the `tokio` module's items, which exist only with the
// feature (docs.rs builds with every feature, and so does the test
// command's docs step, which denies broken links).
#![cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]

pub mod av;
pub mod buffer;
pub mod cntr;
pub mod conn;
pub mod connreq;
pub mod cq;
pub mod domain;
pub mod ep;
mod epochs;
pub mod eq;
pub mod error;
pub mod fabric;
mod fid;
pub mod info;
pub mod mr;
pub mod pep;
pub mod poll;
#[doc = include_str!("preconditions.md")]
pub mod preconditions {}
mod progress;
mod quirks;
mod shm_peers;
mod startup_env;
pub mod threading;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;
pub mod wait;

pub use av::AddressVector;
pub use buffer::{Buffer, BufferPool, Message, Reclaimed};
pub use cntr::{CntrAttr, Counter};
pub use conn::{Connection, Incoming, Listener, Rdm};
pub use connreq::ConnRequest;
pub use cq::CompletionQueue;
pub use domain::Domain;
pub use ep::{CntrBind, Endpoint};
pub use eq::EventQueue;
pub use error::{Errno, Error, Handback, ObjectKind, ObjectScope, Result};
pub use fabric::Fabric;
pub use info::{getinfo, Hints, Info};
pub use mr::{MemoryRegion, MrAccess, RemoteRegion};
pub use pep::PassiveEndpoint;
pub use threading::{ThreadCompletion, ThreadDomain, ThreadModel, ThreadSafe};

/// The raw bindings this crate is built on.
pub use libfabric_sys::fabric as sys;

/// The names most programs use, to import with `use libfabric::prelude::*`
/// (which, unlike a glob import of the crate root, brings in no module
/// named `tokio` and no type named like a std trait).
pub mod prelude {
    pub use crate::buffer::{Buffer, BufferPool};
    pub use crate::cntr::{CntrAttr, Counter};
    pub use crate::conn::ConnConfig;
    pub use crate::conn::{Connection, Incoming, Listener, Rdm};
    pub use crate::cq::{Completion, CompletionFlags, CompletionQueue, CqAttr, CqRead};
    pub use crate::domain::Domain;
    pub use crate::ep::{CntrBind, CqBind, Endpoint};
    pub use crate::eq::{EqAttr, EqRead, Event, EventBuf, EventQueue};
    pub use crate::error::Errno;
    pub use crate::fabric::Fabric;
    pub use crate::info::{getinfo, Caps, EpType, Hints};
    pub use crate::mr::{MemoryRegion, MrAccess, RemoteRegion};
    #[cfg(feature = "tokio")]
    pub use crate::tokio::{
        AsyncCompletionQueue, AsyncConnection, AsyncCounter, AsyncEventQueue, AsyncListener,
    };
    pub use crate::wait::{TryWaitSet, WaitObj, Waitable, Waiter};
    pub use crate::AddressVector;
}

/// The README's examples, run as doctests (the async one only with the
/// `tokio` feature).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
