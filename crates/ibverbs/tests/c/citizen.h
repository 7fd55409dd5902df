/*
 * What the good-citizen programs (signals.c, cancel.c, fork.c, sleeper.c)
 * share: errors, a clock, and a pair of RC QPs on one device connected to
 * each other, with a ping-pong of SENDs that keeps the device's progress
 * thread busy; for the programs that use rdma_cm, waiting for an event.
 */
#ifndef CITIZEN_H
#define CITIZEN_H

#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define die(what)                                                                 \
	do {                                                                      \
		fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, what,      \
			strerror(errno));                                         \
		exit(1);                                                          \
	} while (0)

/* A check of a program that counts its failures in `failures` (its exit
 * status): a failed one is said with where it stands and errno. */
#define check(cond, ...)                                                          \
	do {                                                                      \
		if (!(cond)) {                                                    \
			failures++;                                               \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);               \
			printf(__VA_ARGS__);                                      \
			printf(" (errno %d)\n", errno);                           \
		}                                                                 \
	} while (0)

static inline double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Two RC QPs of one context, connected to each other; one CQ each. */
struct pair {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_mr *mr;
	uint8_t *buf; /* 2 x 4096: a send and a receive slot per QP */
};

static inline void pair_to(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if (ibv_modify_qp(qp, a, mask))
		die("ibv_modify_qp");
}

/* The transport timer exponent pair_connect gives (4.096 us x 2^n). */
static int pair_timeout = 14;

static inline void pair_connect(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = access };
	pair_to(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest,
		.rq_psn = 0,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = *gid, .hop_limit = 64 } },
	};
	pair_to(qp, &a,
		IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0, .timeout = pair_timeout,
				  .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 4 };
	pair_to(qp, &a,
		IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Opens device `dev` (an index in the device list) and connects a pair. */
static inline void pair_open(struct pair *p, int dev)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || dev >= n)
		die("ibv_get_device_list");
	p->ctx = ibv_open_device(list[dev]);
	ibv_free_device_list(list);
	if (!p->ctx)
		die("ibv_open_device");
	p->pd = ibv_alloc_pd(p->ctx);
	if (!p->pd)
		die("ibv_alloc_pd");
	if (posix_memalign((void **)&p->buf, 4096, 4 * 4096))
		die("posix_memalign");
	memset(p->buf, 0, 4 * 4096);
	p->mr = ibv_reg_mr(p->pd, p->buf, 4 * 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!p->mr)
		die("ibv_reg_mr");
	struct ibv_qp_init_attr qa = {
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	for (int i = 0; i < 2; i++) {
		p->cq[i] = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
		if (!p->cq[i])
			die("ibv_create_cq");
		qa.send_cq = qa.recv_cq = p->cq[i];
		p->qp[i] = ibv_create_qp(p->pd, &qa);
		if (!p->qp[i])
			die("ibv_create_qp");
	}
	union ibv_gid gid;
	if (ibv_query_gid(p->ctx, 1, 0, &gid))
		die("ibv_query_gid");
	pair_connect(p->qp[0], p->qp[1]->qp_num, &gid, 0);
	pair_connect(p->qp[1], p->qp[0]->qp_num, &gid, 0);
}

/* Waits up to `limit_s` for one completion on `cq`; 0 on success. */
static inline int pair_wait(struct ibv_cq *cq, uint64_t want, double limit_s)
{
	double end = now_s() + limit_s;
	struct ibv_wc wc;
	while (now_s() < end) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return -1;
		if (n == 0)
			continue;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "completion %llu: %s\n", (unsigned long long)wc.wr_id,
				ibv_wc_status_str(wc.status));
			return -1;
		}
		if (wc.wr_id == want)
			return 0;
	}
	fprintf(stderr, "no completion %llu within %.0f s\n", (unsigned long long)want, limit_s);
	return -1;
}

/* One SEND from QP 0 to QP 1 (64 bytes); 0 when it arrived. */
static inline int pair_ping(struct pair *p, uint32_t seq)
{
	struct ibv_sge rs = { .addr = (uintptr_t)(p->buf + 4096), .length = 4096, .lkey = p->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *brw;
	if (ibv_post_recv(p->qp[1], &rw, &brw))
		return -1;
	memcpy(p->buf, &seq, 4);
	struct ibv_sge ss = { .addr = (uintptr_t)p->buf, .length = 64, .lkey = p->mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bsw;
	if (ibv_post_send(p->qp[0], &sw, &bsw))
		return -1;
	if (pair_wait(p->cq[0], 1, 10) || pair_wait(p->cq[1], 2, 10))
		return -1;
	uint32_t got;
	memcpy(&got, p->buf + 4096, 4);
	return got == seq ? 0 : -1;
}

/* The worker thread's loop: pings over `p` until `*stop`, counting each
 * ping in `*pings`. 0, or -1 (said on stdout) when a ping failed. */
static inline int ping_until(struct pair *p, atomic_int *stop, atomic_long *pings)
{
	uint32_t seq = 1;
	while (!atomic_load(stop)) {
		if (pair_ping(p, seq++)) {
			printf("FAIL: the worker's ping %u failed\n", seq - 1);
			return -1;
		}
		atomic_fetch_add(pings, 1);
	}
	return 0;
}

static inline void pair_close(struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (ibv_destroy_qp(p->qp[i]) || ibv_destroy_cq(p->cq[i]))
			die("destroy");
	}
	if (ibv_dereg_mr(p->mr) || ibv_dealloc_pd(p->pd) || ibv_close_device(p->ctx))
		die("close");
	free(p->buf);
}

/* The next event of `ch` within `ms` milliseconds, or NULL. */
static inline struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return NULL;
	struct rdma_cm_event *ev;
	return rdma_get_cm_event(ch, &ev) ? NULL : ev;
}

/* Takes the next event of `ch` (10 s at most), which must be `t`, and
 * acknowledges it; `*id` (if given) gets its id. Exits otherwise. */
static inline void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t,
			  struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev = next_event(ch, 10000);
	if (!ev || ev->event != t) {
		fprintf(stderr, "want %s, got %s\n", rdma_event_str(t),
			ev ? rdma_event_str(ev->event) : "nothing");
		exit(1);
	}
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
}

#endif
