/*
 * A parent's destroy right after its child's succeeds, whatever another
 * thread is doing with the child meanwhile.
 *
 * A QP on a shared receive queue moved to the error state raises
 * IBV_EVENT_QP_LAST_WQE_REACHED. An event thread (as UCX's async thread)
 * reads it and acks it; the main thread, as soon as the event has been read,
 * destroys the QP, then the SRQ, the CQ and the PD. With libibverbs the
 * QP's destroy waits for the ack of an event it has reported, and releases
 * its hold on the SRQ, CQ and PD when it returns: every later destroy
 * succeeds. A QP destroy that left its parents busy while the ack still
 * held the QP made `ibv_destroy_srq` fail with EBUSY (seen in UCX).
 *
 * Usage: destroy_busy [ITERATIONS]   (default 2000). Exit status: 0 or 1.
 * Prints "N iterations, F failures, E events".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>

static struct ibv_context *ctx;
static atomic_long got; /* events read so far */
static atomic_int stop;

static void *event_thread(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		if (poll(&p, 1, 10) <= 0)
			continue;
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev))
			continue;
		atomic_fetch_add(&got, 1);
		ibv_ack_async_event(&ev);
	}
	return NULL;
}

static int to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = 0,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	struct ibv_qp_attr e = { .qp_state = IBV_QPS_ERR };
	return ibv_modify_qp(qp, &e, IBV_QP_STATE);
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	if (!ctx) {
		perror("ibv_open_device");
		return 1;
	}
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	pthread_t t;
	pthread_create(&t, NULL, event_thread, NULL);
	long failures = 0;
	for (long i = 0; i < iters; i++) {
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_srq *srq = pd ? ibv_create_srq(pd, &sa) : NULL;
		struct ibv_qp_init_attr qa = {
			.send_cq = cq,
			.recv_cq = cq,
			.srq = srq,
			.cap = { .max_send_wr = 4, .max_send_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_qp *qp = pd && cq && srq ? ibv_create_qp(pd, &qa) : NULL;
		if (!qp) {
			perror("setup");
			return 1;
		}
		long before = atomic_load(&got);
		if (to_err(qp)) {
			perror("ibv_modify_qp");
			return 1;
		}
		/* The event has been read (the ack may be under way). */
		while (atomic_load(&got) == before)
			;
		int r;
		if ((r = ibv_destroy_qp(qp))) {
			fprintf(stderr, "%ld: ibv_destroy_qp: %s\n", i, strerror(r));
			failures++;
			continue;
		}
		if ((r = ibv_destroy_srq(srq))) {
			fprintf(stderr, "%ld: ibv_destroy_srq: %s (errno %s)\n", i, strerror(r),
				strerror(errno));
			failures++;
		}
		if ((r = ibv_destroy_cq(cq))) {
			fprintf(stderr, "%ld: ibv_destroy_cq: %s\n", i, strerror(r));
			failures++;
		}
		if ((r = ibv_dealloc_pd(pd))) {
			fprintf(stderr, "%ld: ibv_dealloc_pd: %s\n", i, strerror(r));
			failures++;
		}
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("%ld iterations, %ld failures, %ld events\n", iters, failures, atomic_load(&got));
	return failures != 0;
}
