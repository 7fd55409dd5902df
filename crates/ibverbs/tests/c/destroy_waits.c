/*
 * A destroy waits until the program acknowledged the events it was handed
 * for the object, as rdma-core's: ibv_destroy_cq until ibv_ack_cq_events
 * acknowledged its completion events, ibv_destroy_qp and ibv_destroy_srq
 * until ibv_ack_async_event acknowledged their asynchronous events (the
 * kernel's destroy reports the events it handed out; libibverbs waits on
 * the object's condition variable until the acks reach them).
 *
 * Two RC QPs of one device on one SRQ and one CQ: a SEND between them
 * gives a completion event (read, not acknowledged) and the SRQ's limit
 * event; the receiver moved to ERR gives its LAST_WQE_REACHED. Each
 * destroy runs on a thread of its own; the main thread acknowledges the
 * object's event only once that thread sleeps in the kernel (a futex:
 * /proc/self/task/TID/syscall, seen 20 times in a row), and requires that
 * the destroy had not returned before, and returns 0 after. A QP with no
 * event is destroyed at once. rdma_destroy_id's wait is librdmacm's
 * (tests/rdmacm.rs).
 *
 * Prints one line a check and "N checks, F failures".
 */
#define _GNU_SOURCE
#include "checks.h"
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct ibv_context *ctx;

/* Whether thread `tid` sleeps in a futex (a lock or condition wait). */
static int in_futex(pid_t tid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/task/%d/syscall", (int)tid);
	FILE *f = fopen(p, "r");
	long nr = -1;
	if (f) {
		if (fscanf(f, "%ld", &nr) != 1)
			nr = -1; /* "running" */
		fclose(f);
	}
	return nr == SYS_futex;
}

enum kind { CQ, QP, SRQ };

struct job {
	enum kind kind;
	void *obj;
	atomic_int tid;
	atomic_int done;
	int ret;
};

static void *destroyer(void *arg)
{
	struct job *j = arg;
	atomic_store(&j->tid, (int)syscall(SYS_gettid));
	switch (j->kind) {
	case CQ: j->ret = ibv_destroy_cq(j->obj); break;
	case QP: j->ret = ibv_destroy_qp(j->obj); break;
	case SRQ: j->ret = ibv_destroy_srq(j->obj); break;
	}
	atomic_store(&j->done, 1);
	return NULL;
}

/* Destroys `obj` on a thread; once that thread sleeps, `ack` runs with
 * `arg`; checks that the destroy returned only after it. */
static void destroy_after_ack(const char *what, enum kind kind, void *obj,
			      void (*ack)(void *), void *arg)
{
	struct job j = { .kind = kind, .obj = obj };
	pthread_t t;
	pthread_create(&t, NULL, destroyer, &j);
	while (!atomic_load(&j.tid))
		sched_yield();
	int asleep = 0;
	while (!atomic_load(&j.done) && asleep < 20) {
		asleep = in_futex(atomic_load(&j.tid)) ? asleep + 1 : 0;
		usleep(1000);
	}
	int early = atomic_load(&j.done);
	ack(arg);
	pthread_join(t, NULL);
	CHECK(!early, "%s waits for the acknowledgement", what);
	CHECK(j.ret == 0, "%s returns 0 after it: %d", what, j.ret);
}

static void ack_async(void *ev)
{
	ibv_ack_async_event(ev);
}

static void ack_cq(void *cq)
{
	ibv_ack_cq_events(cq, 1);
}

/* The next asynchronous event, within 5 s (0), or -1. */
static int next_async(struct ibv_async_event *ev)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	if (poll(&p, 1, 5000) != 1)
		return -1;
	return ibv_get_async_event(ctx, ev);
}

int main(void)
{
	struct ibv_device **list;
	union ibv_gid gid;
	ctx = open_first(&list, &gid);
	if (!ctx)
		return checks_summary();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(pd && ch && cq && srq, "PD, channel, CQ, SRQ");
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *a = ibv_create_qp(pd, &qa), *b = ibv_create_qp(pd, &qa);
	CHECK(a && b, "two QPs");
	if (!pd || !ch || !cq || !srq || !a || !b)
		return checks_summary();
	struct rc_opts o = { .access = IBV_ACCESS_LOCAL_WRITE, .rd_atomic = 1, .rnr_retry = 7 };
	CHECK(rc_connect(a, b->qp_num, &gid, &o) == 0 && rc_connect(b, a->qp_num, &gid, &o) == 0,
	      "connected");
	static char buf[4 * 64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)buf + 64 * i, 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		ibv_post_srq_recv(srq, &w, &bad);
	}
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "SRQ limit 4 of 4");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "CQ armed");
	struct ibv_sge s = { (uintptr_t)buf, 4, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "SEND");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, "completion event");
	struct ibv_wc wc;
	int n = 0;
	while (n < 2 && poll_one(cq, &wc) == 1)
		n++;
	CHECK(n == 2, "the SEND's and the receive's completions: %d", n);
	struct ibv_qp_attr e = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(b, &e, IBV_QP_STATE) == 0, "receiver to ERR");
	struct ibv_async_event srq_ev = { 0 }, qp_ev = { 0 };
	for (int i = 0; i < 2; i++) {
		struct ibv_async_event x;
		if (next_async(&x))
			break;
		if (x.event_type == IBV_EVENT_SRQ_LIMIT_REACHED)
			srq_ev = x;
		else if (x.event_type == IBV_EVENT_QP_LAST_WQE_REACHED)
			qp_ev = x;
		else
			ibv_ack_async_event(&x);
	}
	CHECK(srq_ev.element.srq == srq, "SRQ_LIMIT_REACHED");
	CHECK(qp_ev.element.qp == b, "QP_LAST_WQE_REACHED");
	if (srq_ev.element.srq != srq || qp_ev.element.qp != b)
		return checks_summary();

	destroy_after_ack("ibv_destroy_qp", QP, b, ack_async, &qp_ev);
	CHECK(ibv_destroy_qp(a) == 0, "ibv_destroy_qp of a QP without events: at once");
	destroy_after_ack("ibv_destroy_srq", SRQ, srq, ack_async, &srq_ev);
	destroy_after_ack("ibv_destroy_cq", CQ, cq, ack_cq, cq);
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_comp_channel(ch) == 0 &&
	      ibv_dealloc_pd(pd) == 0, "the rest destroyed");
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return checks_summary();
}
