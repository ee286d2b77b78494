/*
 * C baselines for the `bench` micro-benchmarks and the C/Rust parity tests.
 *
 * Each function makes the libfabric calls that the Rust safe API makes for
 * the same job, written the way a C program writes them: the static inline
 * calls of the installed headers, straight into the provider's ops tables.
 * They work on queues the caller opened (through the Rust API), so that C and
 * Rust measure the very same objects.
 *
 * Timed loops return the CPU time the calling thread spent in them, in
 * nanoseconds (CLOCK_THREAD_CPUTIME_ID: time the thread spends preempted by
 * other load does not count), or a negative fi_errno value (-FI_EOTHER for
 * an unexpected result) when a call did not do what the benchmark expects.
 * Wake-up benchmarks fill one latency sample per iteration (CLOCK_MONOTONIC,
 * from the write in one thread to the return of the read in the other) and
 * return 0 or a negative fi_errno value.
 */
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The Rust EventBuf: room for a CM entry with 1024 bytes of connection data. */
#define BL_EVENT_BUF_LEN (sizeof(struct fi_eq_cm_entry) + 1024)
#define BL_EVENT_WORDS ((BL_EVENT_BUF_LEN + 7) / 8)
/* Completions read per one-shot fi_cq_read (the Rust side reads into a slice of 8). */
#define BL_CQ_BATCH 8
/* The largest batch of the timed fi_cq_read loop. */
#define BL_CQ_MAX_BATCH 64
/* Connection data carried by the CONNREQ events of the queued-event case. */
#define BL_CONNREQ_DATA 16
/* How long a wake-up benchmark waits for one event before giving up. */
#define BL_TIMEOUT_MS 5000

size_t bl_event_buf_len(void)
{
	return BL_EVENT_WORDS * 8;
}

size_t bl_cq_batch(void)
{
	return BL_CQ_BATCH;
}

static int64_t clock_ns(clockid_t clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Wall-clock time, for latencies between threads. */
static int64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* The calling thread's CPU time, for the timed loops. */
static int64_t cpu_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static int64_t unexpected(ssize_t ret)
{
	return ret < 0 ? (int64_t)ret : -FI_EOTHER;
}

/* ---- one-shot calls, for the parity tests ---- */

ssize_t bl_cq_read(struct fid_cq *cq)
{
	struct fi_cq_msg_entry entries[BL_CQ_BATCH];

	return fi_cq_read(cq, entries, BL_CQ_BATCH);
}

ssize_t bl_eq_write(struct fid_eq *eq, void *context, uint64_t data)
{
	struct fi_eq_entry entry = { .fid = &eq->fid, .context = context, .data = data };

	return fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0);
}

/* fi_eq_read; on success the entry's event, fid, context and data. */
ssize_t bl_eq_read(struct fid_eq *eq, uint32_t *event, void **fid, void **context,
		   uint64_t *data)
{
	uint64_t buf[BL_EVENT_WORDS];
	const struct fi_eq_entry *entry = (const struct fi_eq_entry *)buf;
	ssize_t ret;

	ret = fi_eq_read(eq, event, buf, sizeof(buf), 0);
	if (ret >= (ssize_t)sizeof(*entry)) {
		*fid = entry->fid;
		*context = entry->context;
		*data = entry->data;
	}
	return ret;
}

int bl_trywait(struct fid_fabric *fabric, struct fid_eq *eq, struct fid_cq *cq)
{
	struct fid *fids[2] = { &eq->fid, &cq->fid };

	return fi_trywait(fabric, fids, 2);
}

/* ---- timed loops ---- */

size_t bl_cq_max_batch(void)
{
	return BL_CQ_MAX_BATCH;
}

size_t bl_connreq_data(void)
{
	return BL_CONNREQ_DATA;
}

/* fi_cq_read of `batch` entries on an empty CQ: every call must return -FI_EAGAIN.
 * The "FI_THREAD_DOMAIN" rows run this same loop on a CQ of a domain opened
 * with domain_attr->threading = FI_THREAD_DOMAIN (the util providers then
 * take no-op locks in their progress); the plain rows on an FI_THREAD_SAFE
 * one. */
int64_t bl_cq_read_empty(struct fid_cq *cq, uint64_t iters, size_t batch)
{
	struct fi_cq_msg_entry entries[BL_CQ_MAX_BATCH];
	int64_t start = cpu_ns();
	ssize_t ret;

	if (batch == 0 || batch > BL_CQ_MAX_BATCH)
		return -FI_EINVAL;
	for (uint64_t i = 0; i < iters; i++) {
		ret = fi_cq_read(cq, entries, batch);
		if (ret != -FI_EAGAIN)
			return unexpected(ret);
	}
	return cpu_ns() - start;
}

/* fi_eq_write of an FI_NOTIFY entry, then fi_eq_read of it. */
int64_t bl_eq_write_read(struct fid_eq *eq, uint64_t iters)
{
	uint64_t buf[BL_EVENT_WORDS];
	const struct fi_eq_entry *got = (const struct fi_eq_entry *)buf;
	struct fi_eq_entry entry = { .fid = &eq->fid, .context = NULL, .data = 0 };
	uint32_t event;
	int64_t start = cpu_ns();
	ssize_t ret;

	for (uint64_t i = 0; i < iters; i++) {
		entry.data = i;
		ret = fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0);
		if (ret != (ssize_t)sizeof(entry))
			return unexpected(ret);
		ret = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
		if (ret != (ssize_t)sizeof(entry) || event != FI_NOTIFY || got->data != i)
			return unexpected(ret);
	}
	return cpu_ns() - start;
}

/*
 * fi_eq_read of an event already queued: `batch` events are written (not
 * timed), then read back (timed), until `iters` reads are done.
 */
int64_t bl_eq_write_notifies(struct fid_eq *eq, uint64_t n);

int64_t bl_eq_read_queued(struct fid_eq *eq, uint64_t iters, uint64_t batch)
{
	uint64_t buf[BL_EVENT_WORDS];
	const struct fi_eq_entry *got = (const struct fi_eq_entry *)buf;
	uint32_t event;
	int64_t total = 0, start;
	uint64_t done = 0, n, j;
	ssize_t ret;

	while (done < iters) {
		n = iters - done < batch ? iters - done : batch;
		ret = bl_eq_write_notifies(eq, n);
		if (ret)
			return ret;
		start = cpu_ns();
		for (j = 0; j < n; j++) {
			ret = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
			if (ret != (ssize_t)sizeof(struct fi_eq_entry) || event != FI_NOTIFY || got->data != j)
				return unexpected(ret);
		}
		total += cpu_ns() - start;
		done += n;
	}
	return total;
}

/*
 * Queues `n` FI_CONNREQ events naming the EQ, with no fi_info and
 * BL_CONNREQ_DATA bytes of connection data (byte k of event j is j + k).
 * The writer of the CONNREQ case, shared by both sides.
 */
int64_t bl_eq_write_connreqs(struct fid_eq *eq, uint64_t n)
{
	struct {
		struct fi_eq_cm_entry cm;
		uint8_t data[BL_CONNREQ_DATA];
	} entry = { .cm = { .fid = &eq->fid, .info = NULL } };
	size_t len = sizeof(struct fi_eq_cm_entry) + BL_CONNREQ_DATA;
	ssize_t ret;

	for (uint64_t j = 0; j < n; j++) {
		for (int k = 0; k < BL_CONNREQ_DATA; k++)
			entry.cm.data[k] = (uint8_t)(j + k);
		ret = fi_eq_write(eq, FI_CONNREQ, &entry, len, 0);
		if (ret != (ssize_t)len)
			return unexpected(ret);
	}
	return 0;
}

/*
 * fi_eq_read of queued FI_CONNREQ events with connection data: `batch`
 * events are queued (bl_eq_write_connreqs, not timed), then read back
 * (timed), until `iters` reads are done.
 */
int64_t bl_eq_read_connreq(struct fid_eq *eq, uint64_t iters, uint64_t batch)
{
	uint64_t buf[BL_EVENT_WORDS];
	const struct fi_eq_cm_entry *got = (const struct fi_eq_cm_entry *)buf;
	ssize_t len = (ssize_t)(sizeof(struct fi_eq_cm_entry) + BL_CONNREQ_DATA);
	uint32_t event;
	int64_t total = 0, start, ret;
	uint64_t done = 0, n, j;
	ssize_t rd;

	while (done < iters) {
		n = iters - done < batch ? iters - done : batch;
		ret = bl_eq_write_connreqs(eq, n);
		if (ret)
			return ret;
		start = cpu_ns();
		for (j = 0; j < n; j++) {
			rd = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
			if (rd != len || event != FI_CONNREQ || got->info != NULL ||
			    got->data[BL_CONNREQ_DATA - 1] != (uint8_t)(j + BL_CONNREQ_DATA - 1))
				return unexpected(rd);
		}
		total += cpu_ns() - start;
		done += n;
	}
	return total;
}

/* Queues `n` FI_NOTIFY events naming the EQ, data 0..n-1: the writer of the
 * queued-event case, shared by both sides. */
int64_t bl_eq_write_notifies(struct fid_eq *eq, uint64_t n)
{
	struct fi_eq_entry entry = { .fid = &eq->fid, .context = NULL, .data = 0 };
	ssize_t ret;

	for (uint64_t j = 0; j < n; j++) {
		entry.data = j;
		ret = fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0);
		if (ret != (ssize_t)sizeof(entry))
			return unexpected(ret);
	}
	return 0;
}

/* fi_trywait on an empty EQ and CQ: every call must return FI_SUCCESS. */
int64_t bl_trywait_empty(struct fid_fabric *fabric, struct fid_eq *eq, struct fid_cq *cq,
			 uint64_t iters)
{
	struct fid *fids[2] = { &eq->fid, &cq->fid };
	int64_t start = cpu_ns();
	int ret;

	for (uint64_t i = 0; i < iters; i++) {
		ret = fi_trywait(fabric, fids, 2);
		if (ret != FI_SUCCESS)
			return unexpected(ret);
	}
	return cpu_ns() - start;
}

/* ---- wake-up latency ---- */

/*
 * The writer thread: waits for the reader's acknowledgement of the previous
 * event (an FI_NOTIFY on ack_eq, read with fi_eq_sread), sleeps gap_ns so
 * that the reader is surely blocked, then writes an FI_NOTIFY whose data is
 * the CLOCK_MONOTONIC time of the write.
 */
struct bl_writer {
	struct fid_eq *eq;
	struct fid_eq *ack_eq;
	uint64_t iters;
	uint64_t gap_ns;
	int64_t ret;
};

static void *bl_writer_main(void *arg)
{
	struct bl_writer *w = arg;
	uint64_t buf[BL_EVENT_WORDS];
	struct fi_eq_entry entry = { .fid = &w->eq->fid, .context = NULL, .data = 0 };
	struct timespec gap = {
		.tv_sec = (time_t)(w->gap_ns / 1000000000),
		.tv_nsec = (long)(w->gap_ns % 1000000000),
	};
	uint32_t event = 0;
	ssize_t ret;

	for (uint64_t i = 0; i < w->iters; i++) {
		if (i > 0) {
			ret = fi_eq_sread(w->ack_eq, &event, buf, sizeof(buf), BL_TIMEOUT_MS, 0);
			if (ret != (ssize_t)sizeof(entry)) {
				w->ret = unexpected(ret);
				return NULL;
			}
		}
		nanosleep(&gap, NULL);
		entry.data = (uint64_t)now_ns();
		ret = fi_eq_write(w->eq, FI_NOTIFY, &entry, sizeof(entry), 0);
		if (ret != (ssize_t)sizeof(entry)) {
			w->ret = unexpected(ret);
			return NULL;
		}
	}
	return NULL;
}

/* Records one sample from the event in buf and acknowledges it. */
static int64_t bl_take_sample(struct fid_eq *ack_eq, const uint64_t *buf, ssize_t ret,
			      uint32_t event, uint64_t *sample)
{
	const struct fi_eq_entry *got = (const struct fi_eq_entry *)buf;
	int64_t now = now_ns();
	struct fi_eq_entry ack = { .fid = &ack_eq->fid, .context = NULL, .data = 0 };

	if (ret != (ssize_t)sizeof(*got) || event != FI_NOTIFY)
		return unexpected(ret);
	*sample = (uint64_t)now - got->data;
	ret = fi_eq_write(ack_eq, FI_NOTIFY, &ack, sizeof(ack), 0);
	return ret == (ssize_t)sizeof(ack) ? 0 : unexpected(ret);
}

static int bl_start_writer(struct bl_writer *w, pthread_t *thread)
{
	int err = pthread_create(thread, NULL, bl_writer_main, w);

	return err ? -err : 0;
}

static int64_t bl_join_writer(struct bl_writer *w, pthread_t thread, int64_t ret)
{
	pthread_join(thread, NULL);
	return ret ? ret : w->ret;
}

/* The reader blocks in fi_eq_sread. */
int64_t bl_wake_sread(struct fid_eq *eq, struct fid_eq *ack_eq, uint64_t iters,
		      uint64_t gap_ns, uint64_t *samples)
{
	struct bl_writer w = { .eq = eq, .ack_eq = ack_eq, .iters = iters, .gap_ns = gap_ns };
	uint64_t buf[BL_EVENT_WORDS];
	pthread_t thread;
	uint32_t event = 0;
	int64_t ret;
	ssize_t rd;

	ret = bl_start_writer(&w, &thread);
	if (ret)
		return ret;
	for (uint64_t i = 0; i < iters && !ret; i++) {
		rd = fi_eq_sread(eq, &event, buf, sizeof(buf), BL_TIMEOUT_MS, 0);
		ret = bl_take_sample(ack_eq, buf, rd, event, &samples[i]);
	}
	return bl_join_writer(&w, thread, ret);
}

/*
 * The reader follows fi_poll(3): read until empty, fi_trywait, and only then
 * poll(2) the EQ's wait fd.
 */
int64_t bl_wake_poll(struct fid_fabric *fabric, struct fid_eq *eq, struct fid_eq *ack_eq,
		     uint64_t iters, uint64_t gap_ns, uint64_t *samples)
{
	struct bl_writer w = { .eq = eq, .ack_eq = ack_eq, .iters = iters, .gap_ns = gap_ns };
	struct fid *fids[1] = { &eq->fid };
	uint64_t buf[BL_EVENT_WORDS];
	struct pollfd pfd = { .fd = -1, .events = POLLIN };
	pthread_t thread;
	uint32_t event = 0;
	int64_t ret;
	ssize_t rd;
	int n;

	ret = fi_control(&eq->fid, FI_GETWAIT, &pfd.fd);
	if (ret)
		return ret;
	ret = bl_start_writer(&w, &thread);
	if (ret)
		return ret;
	for (uint64_t i = 0; i < iters && !ret; i++) {
		for (;;) {
			rd = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
			if (rd != -FI_EAGAIN)
				break;
			if (fi_trywait(fabric, fids, 1) != FI_SUCCESS)
				continue;
			pfd.revents = 0;
			n = poll(&pfd, 1, BL_TIMEOUT_MS);
			if (n == 0 || (n < 0 && errno != EINTR)) {
				rd = n == 0 ? -FI_ETIMEDOUT : -errno;
				break;
			}
		}
		ret = bl_take_sample(ack_eq, buf, rd, event, &samples[i]);
	}
	return bl_join_writer(&w, thread, ret);
}

/* ---- RMA: a loopback pair of RDM endpoints, opened in C ----
 *
 * Side a writes into (or reads from) a region of side b. Each side has its
 * own domain, address vector and completion queue (FI_CQ_FORMAT_DATA,
 * FI_WAIT_NONE, bound for transmits and receives), as the Rust side's two
 * `Rdm` endpoints have. a's buffer and b's receive buffer are registered
 * for local access and their descriptors passed with every post; b's region
 * for remote read and write.
 */
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_rma.h>
#include <stdlib.h>
#include <string.h>

#define BL_RMA_CQ_SIZE 128
/* Requested keys (domains without FI_MR_PROV_KEY): any unique value. */
#define BL_RMA_KEY_BUF 0xb0
#define BL_RMA_KEY_RX 0xb1
#define BL_RMA_KEY_REGION 0xb2

struct bl_rma_side {
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	fi_addr_t peer;
};

struct bl_rma {
	struct fid_fabric *fabric;
	struct bl_rma_side a, b;
	size_t size;
	char *buf, *rx, *region;
	struct fid_mr *buf_mr, *rx_mr, *region_mr;
	void *buf_desc, *rx_desc;
	uint64_t remote_addr, key, data_mask;
	struct fi_context buf_ctx, rx_ctx;
};

static int bl_rma_side_open(struct bl_rma *r, struct fi_info *info, struct bl_rma_side *s)
{
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE, .count = 1 };
	struct fi_cq_attr cq_attr = {
		.size = BL_RMA_CQ_SIZE,
		.format = FI_CQ_FORMAT_DATA,
		.wait_obj = FI_WAIT_NONE,
	};
	int ret;

	ret = fi_domain(r->fabric, info, &s->domain, NULL);
	if (!ret)
		ret = fi_av_open(s->domain, &av_attr, &s->av, NULL);
	if (!ret)
		ret = fi_cq_open(s->domain, &cq_attr, &s->cq, NULL);
	if (!ret)
		ret = fi_endpoint(s->domain, info, &s->ep, NULL);
	if (!ret)
		ret = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_ep_bind(s->ep, &s->av->fid, 0);
	if (!ret)
		ret = fi_enable(s->ep);
	return ret;
}

static int bl_rma_reg(struct bl_rma *r, struct fi_info *info, struct fid_domain *domain,
		      char *mem, uint64_t access, uint64_t key, struct fid_mr **mr)
{
	if (info->domain_attr->mr_mode & FI_MR_PROV_KEY)
		key = 0;
	return fi_mr_reg(domain, mem, r->size, access, 0, key, 0, mr, NULL);
}

static int bl_rma_insert(struct bl_rma_side *from, struct bl_rma_side *to)
{
	char name[256];
	size_t len = sizeof(name);
	int ret;

	ret = fi_getname(&to->ep->fid, name, &len);
	if (ret)
		return ret;
	ret = fi_av_insert(from->av, name, 1, &from->peer, 0, NULL);
	return ret == 1 ? 0 : (ret < 0 ? ret : -FI_EOTHER);
}

void bl_rma_close(struct bl_rma *r)
{
	struct fid *fids[] = {
		r->a.ep ? &r->a.ep->fid : NULL,      r->b.ep ? &r->b.ep->fid : NULL,
		r->buf_mr ? &r->buf_mr->fid : NULL,  r->rx_mr ? &r->rx_mr->fid : NULL,
		r->region_mr ? &r->region_mr->fid : NULL,
		r->a.cq ? &r->a.cq->fid : NULL,      r->b.cq ? &r->b.cq->fid : NULL,
		r->a.av ? &r->a.av->fid : NULL,      r->b.av ? &r->b.av->fid : NULL,
		r->a.domain ? &r->a.domain->fid : NULL, r->b.domain ? &r->b.domain->fid : NULL,
		r->fabric ? &r->fabric->fid : NULL,
	};

	for (size_t i = 0; i < sizeof(fids) / sizeof(fids[0]); i++)
		if (fids[i])
			fi_close(fids[i]);
	free(r->buf);
	free(r->rx);
	free(r->region);
	free(r);
}

/* The error completion of `cq` as a negative fi_errno; out of line, as the
 * Rust side's, so that a read that finds none clears no error entry. */
static __attribute__((noinline, cold)) int bl_rma_poll_err(struct fid_cq *cq)
{
	struct fi_cq_err_entry err = { 0 };

	if (fi_cq_readerr(cq, &err, 0) == 1)
		return err.err ? -err.err : -FI_EOTHER;
	return -FI_EAVAIL;
}

/* Reads one completion of `cq` into `entry`: 1, 0 for none, or a negative
 * fi_errno (an error completion: -its err). */
static int bl_rma_poll(struct fid_cq *cq, struct fi_cq_data_entry *entry)
{
	ssize_t ret = fi_cq_read(cq, entry, 1);

	if (ret == 1)
		return 1;
	if (ret == -FI_EAGAIN)
		return 0;
	if (ret == -FI_EAVAIL)
		return bl_rma_poll_err(cq);
	return ret < 0 ? (int)ret : -FI_EOTHER;
}

/* One RMA of `op` (0 write, 1 read, 2 writedata with data `data`) from a
 * into b's region, retried while the provider says -FI_EAGAIN (reading
 * both queues meanwhile), then its completion at a, reading b's queue while
 * there is none; for writedata also b's remote CQ data completion, whose
 * data must be `data` (and whose receive, if it consumed one, is posted
 * again). */
static int64_t bl_rma_one(struct bl_rma *r, int op, uint64_t data)
{
	struct fi_cq_data_entry entry;
	int a_done = 0, b_done = op != 2;
	ssize_t ret;
	int got;

	for (;;) {
		switch (op) {
		case 0:
			ret = fi_write(r->a.ep, r->buf, r->size, r->buf_desc, r->a.peer,
				       r->remote_addr, r->key, &r->buf_ctx);
			break;
		case 1:
			ret = fi_read(r->a.ep, r->buf, r->size, r->buf_desc, r->a.peer,
				      r->remote_addr, r->key, &r->buf_ctx);
			break;
		default:
			ret = fi_writedata(r->a.ep, r->buf, r->size, r->buf_desc, data, r->a.peer,
					   r->remote_addr, r->key, &r->buf_ctx);
			break;
		}
		if (ret != -FI_EAGAIN)
			break;
		if (bl_rma_poll(r->a.cq, &entry) != 0 || bl_rma_poll(r->b.cq, &entry) < 0)
			return -FI_EOTHER;
	}
	if (ret)
		return ret;
	while (!a_done || !b_done) {
		got = a_done ? 0 : bl_rma_poll(r->a.cq, &entry);
		if (got < 0)
			return got;
		if (got) {
			if (entry.op_context != &r->buf_ctx)
				return -FI_EOTHER;
			a_done = 1;
			continue;
		}
		got = bl_rma_poll(r->b.cq, &entry);
		if (got < 0)
			return got;
		if (got) {
			if (b_done || !(entry.flags & FI_REMOTE_CQ_DATA) || entry.data != data)
				return -FI_EOTHER;
			if (entry.op_context == &r->rx_ctx) {
				ret = fi_recv(r->b.ep, r->rx, r->size, r->rx_desc, FI_ADDR_UNSPEC,
					      &r->rx_ctx);
				if (ret)
					return ret;
			}
			b_done = 1;
		}
	}
	return 0;
}

/* Opens the pair for `info` (an RDM fi_info with FI_RMA) with transfers of
 * `size` bytes and makes one write, so that a connection the provider makes
 * on first use is made. NULL on failure, with the fi_errno in *err. */
struct bl_rma *bl_rma_open(const struct fi_info *cinfo, size_t size, int *err)
{
	struct fi_info *info = fi_dupinfo(cinfo);
	struct bl_rma *r = calloc(1, sizeof(*r));
	size_t data_bytes;
	int ret = -FI_ENOMEM;

	if (!info || !r)
		goto out;
	r->size = size;
	r->buf = calloc(1, size);
	r->rx = calloc(1, size);
	r->region = calloc(1, size);
	if (!r->buf || !r->rx || !r->region)
		goto out;
	ret = fi_fabric(info->fabric_attr, &r->fabric, NULL);
	if (!ret)
		ret = bl_rma_side_open(r, info, &r->a);
	if (!ret)
		ret = bl_rma_side_open(r, info, &r->b);
	if (!ret)
		ret = bl_rma_insert(&r->a, &r->b);
	if (!ret)
		ret = bl_rma_insert(&r->b, &r->a);
	if (!ret)
		ret = bl_rma_reg(r, info, r->a.domain, r->buf, FI_READ | FI_WRITE | FI_SEND | FI_RECV,
				 BL_RMA_KEY_BUF, &r->buf_mr);
	if (!ret)
		ret = bl_rma_reg(r, info, r->b.domain, r->rx, FI_READ | FI_WRITE | FI_SEND | FI_RECV,
				 BL_RMA_KEY_RX, &r->rx_mr);
	if (!ret)
		ret = bl_rma_reg(r, info, r->b.domain, r->region, FI_REMOTE_READ | FI_REMOTE_WRITE,
				 BL_RMA_KEY_REGION, &r->region_mr);
	if (ret)
		goto out;
	r->buf_desc = fi_mr_desc(r->buf_mr);
	r->rx_desc = fi_mr_desc(r->rx_mr);
	r->key = fi_mr_key(r->region_mr);
	r->remote_addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ?
				 (uint64_t)(uintptr_t)r->region : 0;
	data_bytes = info->domain_attr->cq_data_size;
	r->data_mask = data_bytes >= 8 ? UINT64_MAX : (UINT64_C(1) << (data_bytes * 8)) - 1;
	ret = fi_recv(r->b.ep, r->rx, r->size, r->rx_desc, FI_ADDR_UNSPEC, &r->rx_ctx);
	if (!ret)
		ret = (int)bl_rma_one(r, 0, 0);
out:
	fi_freeinfo(info);
	if (ret && r) {
		bl_rma_close(r);
		r = NULL;
	}
	*err = ret;
	return r;
}

/* `iters` RMAs of `op` (0 write, 1 read, 2 writedata with the iteration's
 * number as data), each waited for: the CPU time, or a negative fi_errno. */
int64_t bl_rma_loop(struct bl_rma *r, int op, uint64_t iters)
{
	int64_t start = cpu_ns();
	int64_t ret;

	for (uint64_t i = 0; i < iters; i++) {
		ret = bl_rma_one(r, op, i & r->data_mask);
		if (ret)
			return ret < 0 ? ret : -FI_EOTHER;
	}
	return cpu_ns() - start;
}
