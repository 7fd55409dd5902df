/*
 * fork() in a program using softrdma behaves as with rdma-core: the child
 * cannot use what its parent opened (those calls fail, they never hang),
 * it may open a device of its own and use it, it never deadlocks on a lock
 * another thread of the parent held at the moment of the fork, and
 * nothing it does — exiting included — touches the parent's connections.
 *
 * Four devices (the first four of the device list: 127.61.10.1-4). The
 * parent keeps, throughout:
 * - a worker thread ping-ponging SENDs over a pair of QPs (device 0);
 * - a thread creating and destroying PDs, regions and CQs (device 3);
 * - an rdma_cm connection from device 1 to a listener on device 0;
 * - an idle context of device 3.
 * and forks ROUNDS children, one after the other, each doing one of:
 * - exit(0) at once (exit handlers run);
 * - open device 2 (its own), ping-pong over a pair of QPs, close, exit;
 * - try the parent's objects (a post, a port query: they must fail), then
 *   close the parent's idle context (the last of its device) and exit;
 * - exec /bin/true.
 * Each child must finish within 10 s. Afterwards the parent's connection
 * still carries a message and saw no DISCONNECTED, and the worker went on.
 *
 * Usage: fork ROUNDS
 */
#include "citizen.h"
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define PORT 20620

static int failures;
static struct pair work;
static struct ibv_context *churn_ctx, *idle_ctx;
static atomic_long pings, churns;
static atomic_int stop;

static void *worker(void *arg)
{
	(void)arg;
	if (ping_until(&work, &stop, &pings)) {
		failures++;
		return NULL;
	}
	return NULL;
}

/* Control verbs in a loop: the registry's and the device's locks are
 * taken all the time. */
static void *churn(void *arg)
{
	(void)arg;
	static uint8_t buf[4096];
	while (!atomic_load(&stop)) {
		struct ibv_pd *pd = ibv_alloc_pd(churn_ctx);
		struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
		struct ibv_cq *cq = ibv_create_cq(churn_ctx, 8, NULL, NULL, 0);
		if (!pd || !mr || !cq || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) ||
		    ibv_dealloc_pd(pd)) {
			printf("FAIL: churn\n");
			failures++;
			return NULL;
		}
		atomic_fetch_add(&churns, 1);
	}
	return NULL;
}

/* ------------------------------------------------ the rdma_cm link ---- */

static struct rdma_event_channel *sch, *cch;
static struct rdma_cm_id *lid, *sid, *cid;
static struct ibv_pd *spd, *cpd;
static struct ibv_cq *scq, *ccq;
static struct ibv_mr *smr, *cmr;
static uint8_t sbuf[4096], cbuf[4096];

static struct ibv_qp_init_attr qp_attr(struct ibv_cq *cq)
{
	return (struct ibv_qp_init_attr){
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
}

static void link_up(void)
{
	struct sockaddr_in la = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	struct sockaddr_in src = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.61.10.1", &la.sin_addr);
	inet_pton(AF_INET, "127.61.10.2", &src.sin_addr);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	if (!sch || !cch || rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&la) || rdma_listen(lid, 1) ||
	    rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(cid, (struct sockaddr *)&src, (struct sockaddr *)&la, 1000))
		die("rdma_cm setup");
	expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	if (rdma_resolve_route(cid, 1000))
		die("rdma_resolve_route");
	expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	cpd = ibv_alloc_pd(cid->verbs);
	ccq = ibv_create_cq(cid->verbs, 16, NULL, NULL, 0);
	cmr = ibv_reg_mr(cpd, cbuf, sizeof cbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = qp_attr(ccq);
	struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (!cpd || !ccq || !cmr || rdma_create_qp(cid, cpd, &qa) || rdma_connect(cid, &cp))
		die("rdma_connect");
	expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &sid);
	spd = ibv_alloc_pd(sid->verbs);
	scq = ibv_create_cq(sid->verbs, 16, NULL, NULL, 0);
	smr = ibv_reg_mr(spd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	qa = qp_attr(scq);
	if (!spd || !scq || !smr || rdma_create_qp(sid, spd, &qa) || rdma_accept(sid, &cp))
		die("rdma_accept");
	/* The initiator's ESTABLISHED first: taking it sends the RTU. */
	expect(cch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	expect(sch, RDMA_CM_EVENT_ESTABLISHED, NULL);
}

/* One message over the link; 0 when it arrived. */
static int link_ping(uint32_t tag)
{
	struct ibv_sge rs = { .addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 2, .sg_list = &rs, .num_sge = 1 }, *brw;
	memcpy(cbuf, &tag, 4);
	struct ibv_sge ss = { .addr = (uintptr_t)cbuf, .length = 64, .lkey = cmr->lkey };
	struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bsw;
	if (ibv_post_recv(sid->qp, &rw, &brw) || ibv_post_send(cid->qp, &sw, &bsw))
		return -1;
	if (pair_wait(ccq, 1, 10) || pair_wait(scq, 2, 10))
		return -1;
	uint32_t got;
	memcpy(&got, sbuf, 4);
	return got == tag ? 0 : -1;
}

/* ------------------------------------------------------ the children ---- */

static void child(int mode)
{
	switch (mode) {
	case 0:
		exit(0);
	case 1: {
		struct pair p;
		pair_open(&p, 2);
		for (uint32_t i = 1; i <= 20; i++)
			if (pair_ping(&p, i))
				_exit(3);
		pair_close(&p);
		exit(0);
	}
	case 2: {
		/* The parent's objects are the parent's: a post and a query fail
		 * (softrdma answers EIO), nothing is sent. */
		struct ibv_sge ss = { .addr = (uintptr_t)work.buf, .length = 8,
				      .lkey = work.mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 9, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bsw;
		if (!ibv_post_send(work.qp[0], &sw, &bsw))
			_exit(4);
		struct ibv_port_attr pa;
		if (!ibv_query_port(work.ctx, 1, &pa))
			_exit(5);
		/* Closing the parent's last context of a device must return. */
		ibv_close_device(idle_ctx);
		exit(0);
	}
	default:
		execl("/bin/true", "true", (char *)NULL);
		_exit(6);
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 40;
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 4)
		die("four devices");
	pair_open(&work, 0);
	churn_ctx = ibv_open_device(list[3]);
	idle_ctx = ibv_open_device(list[3]);
	ibv_free_device_list(list);
	if (!churn_ctx || !idle_ctx)
		die("ibv_open_device");
	link_up();
	check(!link_ping(1), "the link before the forks");

	pthread_t w, c;
	pthread_create(&w, NULL, worker, NULL);
	pthread_create(&c, NULL, churn, NULL);
	const char *modes[4] = { "exit at once", "a device of its own", "the parent's objects",
				 "exec" };
	int done[4] = { 0 };
	for (int i = 0; i < rounds; i++) {
		int mode = i % 4;
		usleep(rand() % 2000);
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0)
			child(mode);
		int status = 0;
		double end = now_s() + 10;
		pid_t r = 0;
		while ((r = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < end)
			usleep(1000);
		if (r == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			check(0, "child %d (%s) hung", i, modes[mode]);
			continue;
		}
		check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child %d (%s): status %#x", i, modes[mode], status);
		done[mode]++;
	}
	long p0 = atomic_load(&pings);
	usleep(100000);
	atomic_store(&stop, 1);
	pthread_join(w, NULL);
	pthread_join(c, NULL);
	check(atomic_load(&pings) > p0, "the worker stopped");

	/* The parent's connection: untouched by the children. */
	struct rdma_cm_event *ev;
	while ((ev = next_event(sch, 0)) || (ev = next_event(cch, 0))) {
		check(0, "the parent's connection got %s", rdma_event_str(ev->event));
		rdma_ack_cm_event(ev);
	}
	check(!link_ping(2), "the link after the forks");

	printf("%d children: %d exited at once, %d used a device of their own, %d tried the "
	       "parent's objects, %d exec'ed; the parent's worker pinged %ld times, its churn "
	       "thread made %ld rounds of PD/MR/CQ\n",
	       rounds, done[0], done[1], done[2], done[3], atomic_load(&pings),
	       atomic_load(&churns));

	rdma_disconnect(cid);
	expect(sch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	rdma_disconnect(sid);
	expect(cch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	rdma_destroy_qp(cid);
	rdma_destroy_qp(sid);
	check(!rdma_destroy_id(cid) && !rdma_destroy_id(sid) && !rdma_destroy_id(lid), "destroy ids");
	ibv_dereg_mr(cmr);
	ibv_dereg_mr(smr);
	ibv_destroy_cq(ccq);
	ibv_destroy_cq(scq);
	ibv_dealloc_pd(cpd);
	ibv_dealloc_pd(spd);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	pair_close(&work);
	ibv_close_device(churn_ctx);
	ibv_close_device(idle_ctx);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}
