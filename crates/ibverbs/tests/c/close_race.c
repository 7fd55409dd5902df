/*
 * ibv_close_device racing the destruction of a context's last objects from
 * another thread, many times over. A program may close its device while
 * another thread still tears down its QP, CQ and PD (perftest's client
 * closes with its receive CQ alive); whichever finishes last frees the
 * context, exactly once, and nobody touches it afterwards. Built with
 * AddressSanitizer (and, in scripts/sanitize, run over a library built with
 * it too): a use-after-free or double free is a report and a failure.
 *
 * Usage: close_race [ITERATIONS]   (default 10000). Exit status: 0 or 1.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct objs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	pthread_barrier_t *go;
	int rc;
};

static void *destroyer(void *arg)
{
	struct objs *o = arg;
	pthread_barrier_wait(o->go);
	if (ibv_destroy_qp(o->qp) || ibv_destroy_cq(o->cq) || ibv_dealloc_pd(o->pd))
		o->rc = 1;
	return NULL;
}

static void *closer(void *arg)
{
	struct objs *o = arg;
	pthread_barrier_wait(o->go);
	if (ibv_close_device(o->ctx))
		o->rc = 1;
	return NULL;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? strtol(argv[1], NULL, 10) : 10000;
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, 2);
	long failures = 0;
	for (long i = 0; i < iters; i++) {
		struct objs o = { .go = &go };
		o.ctx = ibv_open_device(list[0]);
		if (!o.ctx) {
			perror("ibv_open_device");
			return 1;
		}
		o.pd = ibv_alloc_pd(o.ctx);
		o.cq = ibv_create_cq(o.ctx, 16, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = {
			.send_cq = o.cq,
			.recv_cq = o.cq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		o.qp = o.pd && o.cq ? ibv_create_qp(o.pd, &qa) : NULL;
		if (!o.qp) {
			perror("setup");
			return 1;
		}
		pthread_t a, b;
		/* Alternate which thread starts first. */
		if (i & 1) {
			pthread_create(&a, NULL, destroyer, &o);
			pthread_create(&b, NULL, closer, &o);
		} else {
			pthread_create(&b, NULL, closer, &o);
			pthread_create(&a, NULL, destroyer, &o);
		}
		pthread_join(a, NULL);
		pthread_join(b, NULL);
		failures += o.rc;
	}
	ibv_free_device_list(list);
	printf("%ld iterations, %ld failures\n", iters, failures);
	return failures != 0;
}
