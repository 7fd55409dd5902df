/* ibv_modify_qp to RTR does not wait for the peer's device process.
 *
 *   rtr_no_wait hold
 *   rtr_no_wait rtr PEER_IP QPN COUNT
 *
 * `hold` opens the device, creates a QP (so the device is joined: the
 * address has a device process), prints "QPN n" and sleeps until killed.
 * `rtr` creates COUNT RC QPs and moves each to INIT, then to RTR towards
 * PEER_IP (port 4791), QP QPN + i, timing each RTR modify; it prints
 * "RTR i US" per QP, "TOTAL US" and "STATE RTR n" (how many QPs
 * ibv_query_qp finds in RTR), and exits 0 when all modifies succeeded.
 *
 * On a shared device the RTR modify asks the peer's device process (the
 * same-host path's way to the peer QP). The test stops that device
 * process (SIGSTOP) around `rtr`: each modify must return at once, as
 * the question is the asker thread's, not the verb's. With the 1 s wait
 * issue 19's host19 had put in, COUNT modifies took COUNT seconds. */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static void open_device(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1)
		DIE("no RDMA device");
	ctx = ibv_open_device(l[0]);
	if (!ctx)
		DIE("ibv_open_device: %m");
	ibv_free_device_list(l);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("pd/cq: %m");
}

static struct ibv_qp *new_qp(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %m");
	return qp;
}

static long long now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "hold")) {
		open_device();
		struct ibv_qp *qp = new_qp();
		printf("QPN %u\n", qp->qp_num);
		fflush(stdout);
		for (;;)
			pause();
	}
	if (argc != 5 || strcmp(argv[1], "rtr"))
		DIE("usage: rtr_no_wait hold | rtr PEER_IP QPN COUNT");
	union ibv_gid dgid;
	memset(&dgid, 0, sizeof dgid);
	dgid.raw[10] = dgid.raw[11] = 0xff;
	if (inet_pton(AF_INET, argv[2], &dgid.raw[12]) != 1)
		DIE("not an IPv4 address: %s", argv[2]);
	unsigned qpn = (unsigned)strtoul(argv[3], NULL, 0);
	int count = atoi(argv[4]);
	if (count < 1 || count > 64)
		DIE("COUNT: 1 to 64");
	open_device();
	struct ibv_qp *qps[64];
	for (int i = 0; i < count; i++)
		qps[i] = new_qp();
	long long total = 0;
	for (int i = 0; i < count; i++) {
		struct ibv_qp_attr a;
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		/* A QP number of the peer's device each (one question each). */
		a.dest_qp_num = (qpn + (unsigned)i) & 0xffffff;
		a.rq_psn = 0;
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 1;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = dgid;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		long long t0 = now_us();
		if (ibv_modify_qp(qps[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			DIE("RTR: %m");
		long long us = now_us() - t0;
		total += us;
		printf("RTR %d %lld\n", i, us);
	}
	printf("TOTAL %lld\n", total);
	int in_rtr = 0;
	for (int i = 0; i < count; i++) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;
		if (ibv_query_qp(qps[i], &a, IBV_QP_STATE, &ia))
			DIE("ibv_query_qp: %m");
		in_rtr += a.qp_state == IBV_QPS_RTR;
	}
	printf("STATE RTR %d\n", in_rtr);
	fflush(stdout);
	return 0;
}
