/*
 * pthread_cancel of a thread blocked in softrdma behaves as with
 * rdma-core: the calls that block — ibv_get_cq_event, ibv_get_async_event,
 * rdma_get_cm_event and the calls of a synchronous rdma_cm id — are
 * cancellation points (rdma-core blocks in read()), and the thread unwinds
 * cleanly: no "FATAL: exception not rethrown" abort, its cleanup handlers
 * run, no lock stays held and no object half-freed — the program destroys
 * everything afterwards and its other threads go on. No other verb is a
 * cancellation point: a thread with a cancellation pending keeps posting
 * and polling.
 *
 * Two devices (the first two of the device list, at 127.61.9.1 and
 * 127.61.9.2); a worker thread ping-pongs SENDs over a pair of QPs of the
 * first one throughout.
 *
 * Usage: cancel ROUNDS
 * Prints a line per case and exits 0 when all passed.
 */
#include "citizen.h"
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <semaphore.h>
#include <stdatomic.h>

#define PORT_ASYNC 20611
#define PORT_SYNC 20612
#define PORT_CONNECT 20613

static int failures;
static struct ibv_context *dev[2];
static struct pair work;
static atomic_long pings;
static atomic_int stop;

/* Random sleep up to `us` microseconds: cancel at different moments. */
static void jitter(int us)
{
	usleep(rand() % (us + 1));
}

static void mark(void *flag)
{
	*(int *)flag = 1;
}

/* A blocked call, its cleanup handler, and what it returned (if it did). */
struct blocked {
	int cleaned;
	int returned;
	void *arg;
};

/* Joins a thread that must have been cancelled. */
static void join_cancelled(pthread_t t, struct blocked *b, const char *what)
{
	void *ret = NULL;
	check(!pthread_join(t, &ret), "%s: join", what);
	check(ret == PTHREAD_CANCELED, "%s: the thread was not cancelled (returned %d)", what,
	      b->returned);
	check(b->cleaned, "%s: its cleanup handler did not run", what);
}

/* ------------------------------------------------- the worker thread ---- */

static void *worker(void *arg)
{
	(void)arg;
	if (ping_until(&work, &stop, &pings)) {
		failures++;
		return NULL;
	}
	/* The first cancellation point of this thread: the cancellation sent
	 * long ago acts here, not inside a verb. */
	pthread_testcancel();
	return (void *)1;
}

/* -------------------------------------------------- ibv_get_cq_event ---- */

static void *cq_waiter(void *arg)
{
	struct blocked *b = arg;
	struct ibv_comp_channel *ch = b->arg;
	struct ibv_cq *cq;
	void *ctx;
	pthread_cleanup_push(mark, &b->cleaned);
	int r = ibv_get_cq_event(ch, &cq, &ctx);
	b->returned = r == 0 ? 1 : -1;
	pthread_cleanup_pop(0);
	return NULL;
}

static void case_cq_event(int rounds)
{
	/* A pair whose receiving CQ has a channel: after each cancellation,
	 * the channel still delivers the next event. */
	struct ibv_pd *pd = ibv_alloc_pd(dev[0]);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(dev[0]);
	struct ibv_cq *scq = ibv_create_cq(dev[0], 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(dev[0], 16, (void *)0x5eed, ch, 0);
	uint8_t *buf = aligned_alloc(4096, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = {
		.send_cq = scq, .recv_cq = scq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *sqp = ibv_create_qp(pd, &qa);
	qa.send_cq = qa.recv_cq = rcq;
	struct ibv_qp *rqp = ibv_create_qp(pd, &qa);
	if (!pd || !ch || !scq || !rcq || !mr || !sqp || !rqp)
		die("setup (cq event)");
	union ibv_gid gid;
	ibv_query_gid(dev[0], 1, 0, &gid);
	pair_connect(sqp, rqp->qp_num, &gid, 0);
	pair_connect(rqp, sqp->qp_num, &gid, 0);
	int events = 0;
	for (int i = 0; i < rounds; i++) {
		struct blocked b = { .arg = ch };
		pthread_t t;
		pthread_create(&t, NULL, cq_waiter, &b);
		jitter(3000);
		pthread_cancel(t);
		join_cancelled(t, &b, "ibv_get_cq_event");
		/* The channel works: arm, send, take the event. */
		struct ibv_sge rs = { .addr = (uintptr_t)(buf + 4096), .length = 4096, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *brw;
		struct ibv_sge ss = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bsw;
		check(!ibv_req_notify_cq(rcq, 0), "ibv_req_notify_cq");
		check(!ibv_post_recv(rqp, &rw, &brw), "ibv_post_recv");
		check(!ibv_post_send(sqp, &sw, &bsw), "ibv_post_send");
		struct ibv_cq *ecq = NULL;
		void *ectx = NULL;
		check(!ibv_get_cq_event(ch, &ecq, &ectx), "ibv_get_cq_event after a cancellation");
		check(ecq == rcq && ectx == (void *)0x5eed, "the event's CQ");
		if (ecq == rcq) {
			ibv_ack_cq_events(rcq, 1);
			events++;
		}
		check(!pair_wait(rcq, 2, 10) && !pair_wait(scq, 1, 10), "the SEND's completions");
	}
	check(!ibv_destroy_qp(sqp) && !ibv_destroy_qp(rqp), "destroy the QPs");
	check(!ibv_destroy_cq(scq) && !ibv_destroy_cq(rcq), "destroy the CQs");
	check(!ibv_destroy_comp_channel(ch), "destroy the channel (a use left behind?)");
	check(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "dereg, dealloc");
	free(buf);
	printf("ibv_get_cq_event: %d threads cancelled in it, the channel delivered %d events after\n",
	       rounds, events);
}

/* ----------------------------------------------- ibv_get_async_event ---- */

static void *async_waiter(void *arg)
{
	struct blocked *b = arg;
	struct ibv_async_event ev;
	pthread_cleanup_push(mark, &b->cleaned);
	int r = ibv_get_async_event(b->arg, &ev);
	b->returned = r == 0 ? 1 : -1;
	if (r == 0)
		ibv_ack_async_event(&ev);
	pthread_cleanup_pop(0);
	return NULL;
}

static void case_async_event(int rounds)
{
	for (int i = 0; i < rounds; i++) {
		struct blocked b = { .arg = dev[1] };
		pthread_t t;
		pthread_create(&t, NULL, async_waiter, &b);
		jitter(3000);
		pthread_cancel(t);
		join_cancelled(t, &b, "ibv_get_async_event");
	}
	printf("ibv_get_async_event: %d threads cancelled in it\n", rounds);
}

/* ------------------------------------ rdma_get_cm_event (libiscsi's) ---- */

/* An initiator as libiscsi's iSER transport has it: a CM thread handles
 * the id's events; at disconnect the main thread cancels it. */
struct initiator {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	sem_t established, disconnected;
	struct blocked b;
};

static void *cm_thread(void *arg)
{
	struct initiator *in = arg;
	pthread_cleanup_push(mark, &in->b.cleaned);
	for (;;) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(in->ch, &ev)) {
			in->b.returned = -1;
			break;
		}
		struct rdma_cm_id *id = ev->id;
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(id, 1000))
				in->b.returned = -2;
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED: {
			in->pd = ibv_alloc_pd(id->verbs);
			in->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
			struct ibv_qp_init_attr qa = {
				.send_cq = in->cq, .recv_cq = in->cq,
				.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
					 .max_recv_sge = 1 },
				.qp_type = IBV_QPT_RC,
			};
			struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1,
						      .retry_count = 7, .rnr_retry_count = 7 };
			if (!in->pd || !in->cq || rdma_create_qp(id, in->pd, &qa) ||
			    rdma_connect(id, &cp))
				in->b.returned = -3;
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			sem_post(&in->established);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			sem_post(&in->disconnected);
			break;
		default:
			in->b.returned = -4;
			break;
		}
		rdma_ack_cm_event(ev);
	}
	pthread_cleanup_pop(0);
	return NULL;
}

/* The next event of a channel within 10 s (NULL on timeout). */
static struct rdma_cm_event *next_event_10s(struct rdma_event_channel *ch)
{
	double end = now_s() + 10;
	while (now_s() < end) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		if (poll(&p, 1, 100) == 1) {
			struct rdma_cm_event *ev;
			if (rdma_get_cm_event(ch, &ev))
				return NULL;
			return ev;
		}
	}
	return NULL;
}

static int sem_wait_s(sem_t *s, int secs)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += secs;
	return sem_timedwait(s, &t);
}

static void case_cm_event(int rounds)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	struct sockaddr_in la = { .sin_family = AF_INET, .sin_port = htons(PORT_ASYNC) };
	inet_pton(AF_INET, "127.61.9.1", &la.sin_addr);
	if (!sch || rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&la) || rdma_listen(lid, 4))
		die("listener");
	struct ibv_pd *spd = ibv_alloc_pd(lid->verbs ? lid->verbs : dev[0]);
	struct ibv_cq *scq = ibv_create_cq(lid->verbs ? lid->verbs : dev[0], 64, NULL, NULL, 0);
	int connected = 0, mid_event = 0;
	for (int i = 0; i < rounds; i++) {
		struct initiator in = { 0 };
		sem_init(&in.established, 0, 0);
		sem_init(&in.disconnected, 0, 0);
		in.ch = rdma_create_event_channel();
		if (!in.ch || rdma_create_id(in.ch, &in.id, NULL, RDMA_PS_TCP))
			die("initiator id");
		pthread_t t;
		pthread_create(&t, NULL, cm_thread, &in);
		struct sockaddr_in src = { .sin_family = AF_INET };
		inet_pton(AF_INET, "127.61.9.2", &src.sin_addr);
		check(!rdma_resolve_addr(in.id, (struct sockaddr *)&src, (struct sockaddr *)&la, 1000),
		      "rdma_resolve_addr");
		/* The target accepts. */
		struct rdma_cm_event *ev = next_event_10s(sch);
		check(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST, "connect request");
		struct rdma_cm_id *conn = ev ? ev->id : NULL;
		if (ev)
			rdma_ack_cm_event(ev);
		if (!conn) {
			pthread_cancel(t);
			pthread_join(t, NULL);
			continue;
		}
		struct ibv_qp_init_attr qa = {
			.send_cq = scq, .recv_cq = scq,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1 };
		check(!rdma_create_qp(conn, spd, &qa) && !rdma_accept(conn, &cp), "accept");
		ev = next_event_10s(sch);
		check(ev && ev->event == RDMA_CM_EVENT_ESTABLISHED, "established (target)");
		if (ev)
			rdma_ack_cm_event(ev);
		if (!sem_wait_s(&in.established, 10))
			connected++;
		else
			check(0, "established (initiator): CM thread state %d", in.b.returned);
		/* libiscsi's disconnect: rdma_disconnect, then cancel the CM
		 * thread — blocked in rdma_get_cm_event, or about to be, or
		 * handling DISCONNECTED — then destroy everything. */
		check(!rdma_disconnect(in.id), "rdma_disconnect");
		if (i % 2)
			jitter(2000);
		pthread_cancel(t);
		join_cancelled(t, &in.b, "rdma_get_cm_event");
		check(in.b.returned == 0, "the CM thread failed (%d)", in.b.returned);
		mid_event += !sem_trywait(&in.disconnected);
		rdma_destroy_qp(in.id);
		check(!rdma_destroy_id(in.id), "rdma_destroy_id (initiator)");
		rdma_destroy_event_channel(in.ch);
		check(!ibv_destroy_cq(in.cq) && !ibv_dealloc_pd(in.pd), "initiator's CQ and PD");
		sem_destroy(&in.established);
		sem_destroy(&in.disconnected);
		/* The target sees the disconnection and cleans up. */
		ev = next_event_10s(sch);
		check(ev && ev->event == RDMA_CM_EVENT_DISCONNECTED, "disconnected (target): %s",
		      ev ? rdma_event_str(ev->event) : "none");
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(conn);
		check(!rdma_destroy_id(conn), "rdma_destroy_id (target)");
	}
	check(!ibv_destroy_cq(scq) && !ibv_dealloc_pd(spd), "target's CQ and PD");
	check(!rdma_destroy_id(lid), "rdma_destroy_id (listener)");
	rdma_destroy_event_channel(sch);
	printf("rdma_get_cm_event: %d connections, %d CM threads cancelled at disconnect "
	       "(%d after taking DISCONNECTED)\n",
	       connected, rounds, mid_event);
}

/* ------------------------------------------ synchronous rdma_cm ids ---- */

static void *request_waiter(void *arg)
{
	struct blocked *b = arg;
	struct rdma_cm_id *id = NULL;
	pthread_cleanup_push(mark, &b->cleaned);
	int r = rdma_get_request(b->arg, &id);
	b->returned = r == 0 ? 1 : -1;
	pthread_cleanup_pop(0);
	return NULL;
}

static void *connector(void *arg)
{
	struct blocked *b = arg;
	pthread_cleanup_push(mark, &b->cleaned);
	struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	int r = rdma_connect(b->arg, &cp);
	b->returned = r == 0 ? 1 : -1;
	pthread_cleanup_pop(0);
	return NULL;
}

static void case_sync(int rounds)
{
	struct sockaddr_in la = { .sin_family = AF_INET, .sin_port = htons(PORT_SYNC) };
	inet_pton(AF_INET, "127.61.9.1", &la.sin_addr);
	for (int i = 0; i < rounds; i++) {
		struct rdma_cm_id *sl;
		if (rdma_create_id(NULL, &sl, NULL, RDMA_PS_TCP) ||
		    rdma_bind_addr(sl, (struct sockaddr *)&la) || rdma_listen(sl, 1))
			die("synchronous listener");
		struct blocked b = { .arg = sl };
		pthread_t t;
		pthread_create(&t, NULL, request_waiter, &b);
		jitter(3000);
		pthread_cancel(t);
		join_cancelled(t, &b, "rdma_get_request");
		check(!rdma_destroy_id(sl), "rdma_destroy_id (synchronous listener)");
	}
	printf("rdma_get_request: %d threads cancelled in it\n", rounds);

	/* A synchronous rdma_connect to a target that never answers. */
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	struct sockaddr_in ca = { .sin_family = AF_INET, .sin_port = htons(PORT_CONNECT) };
	inet_pton(AF_INET, "127.61.9.1", &ca.sin_addr);
	if (!sch || rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&ca) || rdma_listen(lid, 4))
		die("listener (connect)");
	for (int i = 0; i < rounds; i++) {
		struct rdma_cm_id *id;
		struct sockaddr_in src = { .sin_family = AF_INET };
		inet_pton(AF_INET, "127.61.9.2", &src.sin_addr);
		if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&ca, 1000) ||
		    rdma_resolve_route(id, 1000))
			die("synchronous initiator");
		struct ibv_qp_init_attr qa = {
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
		struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
		qa.send_cq = qa.recv_cq = cq;
		if (!pd || !cq || rdma_create_qp(id, pd, &qa))
			die("synchronous initiator's QP");
		struct blocked b = { .arg = id };
		pthread_t t;
		pthread_create(&t, NULL, connector, &b);
		/* The request arrives; nobody answers it. */
		struct rdma_cm_event *ev = next_event_10s(sch);
		check(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST, "connect request (sync)");
		jitter(2000);
		pthread_cancel(t);
		join_cancelled(t, &b, "rdma_connect (synchronous)");
		if (ev) {
			struct rdma_cm_id *conn = ev->id;
			rdma_ack_cm_event(ev);
			rdma_reject(conn, NULL, 0);
			check(!rdma_destroy_id(conn), "rdma_destroy_id (rejected)");
		}
		rdma_destroy_qp(id);
		check(!rdma_destroy_id(id), "rdma_destroy_id (synchronous initiator)");
		check(!ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "synchronous initiator's CQ, PD");
	}
	check(!rdma_destroy_id(lid), "rdma_destroy_id (listener)");
	rdma_destroy_event_channel(sch);
	printf("rdma_connect (synchronous id): %d threads cancelled in it\n", rounds);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	srand(getpid());
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 2)
		die("two devices");
	pair_open(&work, 0);
	for (int i = 0; i < 2; i++) {
		dev[i] = ibv_open_device(list[i]);
		if (!dev[i])
			die("ibv_open_device");
	}
	ibv_free_device_list(list);
	pthread_t w;
	pthread_create(&w, NULL, worker, NULL);

	case_cq_event(rounds);
	case_async_event(rounds);
	case_cm_event(rounds);
	case_sync(rounds);

	/* The worker went on throughout; now cancel it while it keeps
	 * posting and polling: no verb acts on the request. */
	long before = atomic_load(&pings);
	pthread_cancel(w);
	usleep(300000);
	long during = atomic_load(&pings) - before;
	atomic_store(&stop, 1);
	void *ret = NULL;
	pthread_join(w, &ret);
	check(before > 0, "the worker made no progress");
	check(during > 0, "the worker stopped when its cancellation was requested");
	check(ret == PTHREAD_CANCELED, "the worker was not cancelled at pthread_testcancel");
	printf("worker: %ld pings meanwhile, %ld more with a cancellation pending, cancelled at "
	       "its own cancellation point\n",
	       before, during);

	pair_close(&work);
	check(!ibv_close_device(dev[0]) && !ibv_close_device(dev[1]), "ibv_close_device");
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
