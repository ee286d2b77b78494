/*
 * async_latency: how long asynchronous port events take to reach user space,
 * measured on link flaps of the network device under a soft-RoCE device.
 * The C side of examples/async_latency.rs: same method, same output lines,
 * plain libibverbs calls.
 *
 *   async_latency -d DEVICE -i IFNAME [-n FLAPS]
 *
 * The link is switched with one rtnetlink request (RTM_NEWLINK, no process
 * is started); the async event fd is non-blocking and waited on with poll().
 * CLOCK_MONOTONIC is taken before the request (trigger), when poll() returns
 * (wake), when ibv_get_async_event() returned (read) and when
 * ibv_ack_async_event() returned (acked). Printed: the medians of read-wake,
 * acked-read, acked-wake over every event, of wake-trigger for the first
 * event after each link change, and the total time of all flaps divided by
 * their number.
 *
 * Build: gcc -O2 -Wall -o async_latency async_latency.c -libverbs
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <infiniband/verbs.h>

struct samples {
	double *v;
	size_t n, cap;
};

static void push(struct samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->v = realloc(s->v, s->cap * sizeof *s->v);
		if (!s->v) {
			perror("realloc");
			exit(1);
		}
	}
	s->v[s->n++] = x;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(struct samples *s)
{
	if (!s->n)
		return 0.0 / 0.0;
	qsort(s->v, s->n, sizeof *s->v, cmp);
	return s->n % 2 ? s->v[s->n / 2] : (s->v[s->n / 2 - 1] + s->v[s->n / 2]) / 2;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int nl_fd;
static int if_index;
static unsigned nl_seq;

static int link_open(const char *ifname)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	if_index = if_nametoindex(ifname);
	if (!if_index) {
		fprintf(stderr, "async_latency: %s: %s\n", ifname, strerror(errno));
		return -1;
	}
	nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (nl_fd < 0 || connect(nl_fd, (struct sockaddr *)&sa, sizeof sa)) {
		perror("async_latency: netlink socket");
		return -1;
	}
	return 0;
}

/* ip link set IFNAME up|down, waiting for the kernel's answer. */
static int link_set(int up)
{
	struct {
		struct nlmsghdr h;
		struct ifinfomsg i;
	} req = {
		.h = {
			.nlmsg_len = sizeof req,
			.nlmsg_type = RTM_NEWLINK,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK,
			.nlmsg_seq = ++nl_seq,
		},
		.i = {
			.ifi_family = AF_UNSPEC,
			.ifi_index = if_index,
			.ifi_flags = up ? IFF_UP : 0,
			.ifi_change = IFF_UP,
		},
	};
	char buf[1024];

	if (send(nl_fd, &req, sizeof req, 0) != (ssize_t)sizeof req) {
		perror("async_latency: netlink send");
		return -1;
	}
	for (;;) {
		ssize_t n = recv(nl_fd, buf, sizeof buf, 0);
		struct nlmsghdr *h = (struct nlmsghdr *)buf;
		struct nlmsgerr *e = NLMSG_DATA(h);

		if (n < (ssize_t)(sizeof *h + sizeof(int))) {
			perror("async_latency: netlink recv");
			return -1;
		}
		if (h->nlmsg_type != NLMSG_ERROR || h->nlmsg_seq != nl_seq)
			continue;
		if (e->error) {
			fprintf(stderr, "async_latency: setting the link %s: %s\n",
				up ? "up" : "down", strerror(-e->error));
			return -1;
		}
		return 0;
	}
}

struct all {
	struct samples read, ack, read_ack, wake_down, wake_up;
	unsigned port_err, port_active, other;
};

/* Waits up to ms for the fd; returns the wake-up time, or 0 on timeout. */
static double wait_fd(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, ms);

	if (n < 0 && errno != EINTR) {
		perror("async_latency: poll");
		exit(1);
	}
	return n == 0 ? 0 : now_us();
}

/* Reads one event after poll() said readable; returns its type, or -1 when
 * the fd was empty after all. */
static int read_one(struct ibv_context *ctx, double wake, struct all *s)
{
	struct ibv_async_event ev;
	double read, acked;
	int type;

	if (ibv_get_async_event(ctx, &ev)) {
		if (errno == EAGAIN || errno == EINTR)
			return -1;
		perror("async_latency: ibv_get_async_event");
		exit(1);
	}
	read = now_us();
	type = ev.event_type;
	ibv_ack_async_event(&ev);
	acked = now_us();
	push(&s->read, read - wake);
	push(&s->ack, acked - read);
	push(&s->read_ack, acked - wake);
	if (type == IBV_EVENT_PORT_ERR)
		s->port_err++;
	else if (type == IBV_EVENT_PORT_ACTIVE)
		s->port_active++;
	else
		s->other++;
	return type;
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *ifname = NULL;
	unsigned flaps = 20;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_async_event ev;
	struct all s = { 0 };
	double start, total;
	unsigned events, i;
	int c, flags, k;

	while ((c = getopt(argc, argv, "d:i:n:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'i': ifname = optarg; break;
		case 'n': flaps = strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: async_latency -d DEVICE -i IFNAME [-n FLAPS]\n");
			return 2;
		}
	}
	if (!dev || !ifname || !flaps || optind != argc) {
		fprintf(stderr, "usage: async_latency -d DEVICE -i IFNAME [-n FLAPS]\n");
		return 2;
	}

	list = ibv_get_device_list(NULL);
	if (!list) {
		perror("async_latency: ibv_get_device_list");
		return 1;
	}
	for (k = 0; list[k]; k++)
		if (!strcmp(ibv_get_device_name(list[k]), dev))
			ctx = ibv_open_device(list[k]);
	if (!ctx) {
		fprintf(stderr, "async_latency: cannot open %s\n", dev);
		return 1;
	}
	flags = fcntl(ctx->async_fd, F_GETFL);
	if (fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK)) {
		perror("async_latency: fcntl");
		return 1;
	}
	if (link_open(ifname))
		return 1;
	/* Events left over from before: not measured. */
	while (!ibv_get_async_event(ctx, &ev))
		ibv_ack_async_event(&ev);

	start = now_us();
	for (i = 0; i < flaps; i++) {
		for (k = 0; k < 2; k++) {
			int up = k == 1;
			int expected = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
			double trigger = now_us(), wake;

			if (link_set(up))
				return 1;
			/* A late second PORT_ACTIVE of the previous change may come first. */
			for (;;) {
				wake = wait_fd(ctx->async_fd, 10000);
				if (!wake) {
					fprintf(stderr, "async_latency: no %s within 10 s\n",
						ibv_event_type_str(expected));
					return 1;
				}
				if (read_one(ctx, wake, &s) == expected)
					break;
			}
			push(up ? &s.wake_up : &s.wake_down, wake - trigger);
		}
	}
	total = now_us() - start;
	/* The events that trail the last change (rxe may report PORT_ACTIVE more
	 * than once), counted but not part of the total time. */
	for (;;) {
		double wake = wait_fd(ctx->async_fd, 300);

		if (!wake)
			break;
		read_one(ctx, wake, &s);
	}
	events = s.port_err + s.port_active + s.other;
	printf("%u flaps of %s: %u events on %s (%u PORT_ERR, %u PORT_ACTIVE, %u other) in %.3f s\n",
	       flaps, ifname, events, dev, s.port_err, s.port_active, s.other, total / 1e6);
	printf("median_us read %.2f ack %.2f read_ack %.2f down_to_wake %.1f up_to_wake %.1f\n",
	       median(&s.read), median(&s.ack), median(&s.read_ack),
	       median(&s.wake_down), median(&s.wake_up));
	printf("total_us_per_flap %.1f\n", total / flaps);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	if (s.port_err < flaps || s.port_active < flaps) {
		fprintf(stderr, "async_latency: expected at least %u PORT_ERR and PORT_ACTIVE events\n",
			flaps);
		return 1;
	}
	return 0;
}
