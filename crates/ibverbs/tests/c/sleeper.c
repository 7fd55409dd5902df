/*
 * Progress never waits for the program: through libibverbs.so.1, a target
 * whose last poll received a peer's RDMA READ, WRITE or FETCH_ADD and who
 * then sleeps in poll() on its completion channel — calling nothing — has
 * the request answered at once, not when its device's progress thread
 * wakes up on its own (up to 1 s later).
 *
 * Two devices in one process (the first two of the device list): a target
 * thread and the peer (main thread). The interleaving that loses answers is
 * made certain: the target device's progress thread shares the target's
 * CPU and has the SCHED_IDLE policy while the target runs, so the target's
 * own polls receive everything. A round: the peer wakes the target through a pipe;
 * the target arms its CQ and spins on it until the round's SEND arrives;
 * the peer posts the RDMA request and the SEND in one call (one GSO run:
 * the target's poll receives both at once); the target takes the
 * completion event and sleeps in poll() on its channel and the pipe.
 *
 * Usage: sleeper ROUNDS
 * Prints the time from posting each request to its completion (median and
 * maximum per operation) and exits 0 when every one took at most 100 ms.
 */
#include "citizen.h"
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#define BOUND_MS 100.0

static int rounds;
static struct ibv_comp_channel *ch;
static struct ibv_cq *tcq;
static struct ibv_qp *tqp;
static struct ibv_mr *tmr;
static uint8_t *tbuf;
static int go[2];
static int tprog; /* the target device's progress thread */

/* The thread's scheduling policy: SCHED_IDLE while the target runs (its
 * progress thread then waits: the target's polls receive everything), the
 * normal one before the target sleeps (on a busy machine a SCHED_IDLE
 * thread may wait long even while the target sleeps). */
static void policy(int tid, int p)
{
	struct sched_param sp = { 0 };
	if (sched_setscheduler(tid, p, &sp))
		die("sched_setscheduler");
}

/* Thread ids named softrdma* (the library's), into `out`. */
static int softrdma_threads(int *out, int max)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d)) && n < max) {
		char path[300], name[64] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof name, f) && !strncmp(name, "softrdma", 8))
			out[n++] = atoi(e->d_name);
		fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

/* The softrdma thread that appeared since a listing (it names itself
 * once it runs: wait for it). */
static int new_thread(int *before, int nb)
{
	for (int tries = 0; tries < 1000; tries++) {
		int now[64], n = softrdma_threads(now, 64);
		for (int i = 0; i < n; i++) {
			int seen = 0;
			for (int j = 0; j < nb; j++)
				seen |= now[i] == before[j];
			if (!seen)
				return now[i];
		}
		usleep(1000);
	}
	fprintf(stderr, "no new softrdma thread\n");
	exit(1);
}

static void pin(int tid, int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(tid, sizeof s, &s))
		die("sched_setaffinity");
}

static void *target(void *arg)
{
	(void)arg;
	pin(0, 0);
	struct ibv_wc wc[8];
	long started = 0, messages = 0;
	for (;;) {
		struct pollfd p[2] = { { .fd = go[0], .events = POLLIN },
				       { .fd = ch->fd, .events = POLLIN } };
		if (poll(p, 2, -1) < 0)
			die("poll");
		if (!(p[0].revents & POLLIN))
			continue;
		char c;
		if (read(go[0], &c, 1) != 1 || c == 'q')
			return NULL;
		started++;
		policy(tprog, SCHED_IDLE);
		if (ibv_req_notify_cq(tcq, 0))
			die("ibv_req_notify_cq");
		while (messages < started) {
			int n = ibv_poll_cq(tcq, 8, wc);
			if (n < 0)
				die("ibv_poll_cq");
			for (int i = 0; i < n; i++) {
				if (wc[i].status != IBV_WC_SUCCESS) {
					fprintf(stderr, "target: %s\n", ibv_wc_status_str(wc[i].status));
					exit(1);
				}
				messages++;
			}
		}
		/* The event the message fired, if it did (on a loaded machine the
		 * message may have come before the CQ was armed); then sleep,
		 * calling nothing. */
		struct pollfd ep = { .fd = ch->fd, .events = POLLIN };
		if (poll(&ep, 1, 0) == 1) {
			struct ibv_cq *ecq;
			void *ectx;
			if (ibv_get_cq_event(ch, &ecq, &ectx))
				die("ibv_get_cq_event");
			ibv_ack_cq_events(ecq, 1);
		}
		policy(tprog, SCHED_OTHER);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	rounds = argc > 1 ? atoi(argv[1]) : 60;
	setvbuf(stdout, NULL, _IOLBF, 0);
	prctl(PR_SET_NAME, "prog");
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("FAIL: this test needs two CPUs\n");
		return 1;
	}
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 2)
		die("two devices");
	int before[64], nb = softrdma_threads(before, 64);
	struct ibv_context *tctx = ibv_open_device(list[0]);
	if (!tctx)
		die("ibv_open_device (target)");
	tprog = new_thread(before, nb);
	nb = softrdma_threads(before, 64);
	struct ibv_context *pctx = ibv_open_device(list[1]);
	if (!pctx)
		die("ibv_open_device (peer)");
	int pprog = new_thread(before, nb);
	ibv_free_device_list(list);
	pin(tprog, 0);
	pin(pprog, 1);
	pin(0, 1);

	struct ibv_pd *tpd = ibv_alloc_pd(tctx), *ppd = ibv_alloc_pd(pctx);
	ch = ibv_create_comp_channel(tctx);
	tcq = ibv_create_cq(tctx, 512, NULL, ch, 0);
	struct ibv_cq *pcq = ibv_create_cq(pctx, 512, NULL, NULL, 0);
	tbuf = aligned_alloc(4096, 4 * 4096);
	uint8_t *pbuf = aligned_alloc(4096, 4 * 4096);
	memset(tbuf, 0, 4 * 4096);
	memset(pbuf, 0, 4 * 4096);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	tmr = ibv_reg_mr(tpd, tbuf, 4 * 4096, access);
	struct ibv_mr *pmr = ibv_reg_mr(ppd, pbuf, 4 * 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = {
		.send_cq = tcq,
		.recv_cq = tcq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 512, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	tqp = ibv_create_qp(tpd, &qa);
	qa.send_cq = qa.recv_cq = pcq;
	struct ibv_qp *pqp = ibv_create_qp(ppd, &qa);
	if (!tpd || !ppd || !ch || !tcq || !pcq || !tmr || !pmr || !tqp || !pqp)
		die("setup");
	union ibv_gid tgid, pgid;
	if (ibv_query_gid(tctx, 1, 0, &tgid) || ibv_query_gid(pctx, 1, 0, &pgid))
		die("ibv_query_gid");
	/* The peer retransmits after 4.3 s: a lost answer shows as the
	 * engine's delay, not as the retransmission. */
	pair_timeout = 20;
	pair_connect(tqp, pqp->qp_num, &pgid, access);
	pair_connect(pqp, tqp->qp_num, &tgid, 0);
	/* A receive for every round now: after its last poll of a round the
	 * target calls nothing but ibv_get_cq_event for the pending event. */
	if (rounds > 500)
		rounds = 500;
	for (int i = 0; i < rounds; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)tbuf, .length = 4096, .lkey = tmr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		if (ibv_post_recv(tqp, &w, &bad))
			die("ibv_post_recv");
	}
	if (pipe(go))
		die("pipe");
	pthread_t th;
	pthread_create(&th, NULL, target, NULL);

	const char *names[3] = { "RDMA READ", "RDMA WRITE", "FETCH_ADD" };
	enum ibv_wr_opcode ops[3] = { IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
				      IBV_WR_ATOMIC_FETCH_AND_ADD };
	double *lat[3];
	int nl[3] = { 0 }, slow = 0;
	for (int k = 0; k < 3; k++)
		lat[k] = calloc(rounds, sizeof(double));
	for (int r = 0; r < rounds; r++) {
		int k = r % 3;
		usleep(5000); /* both devices idle, their progress threads asleep */
		if (write(go[1], "g", 1) != 1)
			die("write");
		usleep(1000); /* the target spins on its CQ */
		/* The request, then a 16-byte SEND: its packet is no longer than
		 * the request's, so both leave as one GSO run. */
		struct ibv_sge rs = { .addr = (uintptr_t)(pbuf + 8192), .length = 8, .lkey = pmr->lkey };
		struct ibv_sge ms = { .addr = (uintptr_t)pbuf, .length = 16, .lkey = pmr->lkey };
		struct ibv_send_wr msg = { .wr_id = 2, .sg_list = &ms, .num_sge = 1,
					   .opcode = IBV_WR_SEND };
		struct ibv_send_wr req = { .wr_id = 1, .sg_list = &rs, .num_sge = 1, .opcode = ops[k],
					   .send_flags = IBV_SEND_SIGNALED, .next = &msg }, *bad;
		if (ops[k] == IBV_WR_ATOMIC_FETCH_AND_ADD) {
			req.wr.atomic.remote_addr = (uintptr_t)(tbuf + 8192);
			req.wr.atomic.rkey = tmr->rkey;
			req.wr.atomic.compare_add = 1;
		} else {
			req.wr.rdma.remote_addr = (uintptr_t)(tbuf + 8192);
			req.wr.rdma.rkey = tmr->rkey;
		}
		double t0 = now_s();
		if (ibv_post_send(pqp, &req, &bad))
			die("ibv_post_send");
		if (pair_wait(pcq, 1, 10))
			die("the request's completion");
		double ms_ = (now_s() - t0) * 1e3;
		lat[k][nl[k]++] = ms_;
		if (ms_ > BOUND_MS) {
			slow++;
			printf("round %d %s: answered after %.1f ms\n", r, names[k], ms_);
		}
	}
	if (write(go[1], "q", 1) != 1)
		die("write");
	pthread_join(th, NULL);
	for (int k = 0; k < 3; k++) {
		qsort(lat[k], nl[k], sizeof(double), cmp);
		printf("%s answered while the target sleeps: median %.3f ms, max %.3f ms (%d ops)\n",
		       names[k], lat[k][nl[k] / 2], lat[k][nl[k] - 1], nl[k]);
		free(lat[k]);
	}
	ibv_destroy_qp(tqp);
	ibv_destroy_qp(pqp);
	ibv_destroy_cq(tcq);
	ibv_destroy_cq(pcq);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(tmr);
	ibv_dereg_mr(pmr);
	ibv_dealloc_pd(tpd);
	ibv_dealloc_pd(ppd);
	ibv_close_device(tctx);
	ibv_close_device(pctx);
	free(tbuf);
	free(pbuf);
	close(go[0]);
	close(go[1]);
	printf("%d of %d answers slower than %.0f ms\n", slow, rounds, BOUND_MS);
	return slow ? 1 : 0;
}
