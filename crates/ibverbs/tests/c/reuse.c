/*
 * A send completion hands the buffer back: through libibverbs.so.1, send
 * 20,000 messages from a ring of buffers, overwrite each buffer with
 * another pattern the moment its send completes, and check that every
 * message arrives with the bytes it had when it was posted.
 *
 * Usage: reuse ud|uc SIZE [MESSAGES]
 *   ud: UD SEND with immediate (the immediate is the message number)
 *   uc: UC RDMA WRITE with immediate into a ring of target slots
 * One device, two QPs on it (sender and receiver), a receiver thread.
 * The sender keeps at most WINDOW messages ahead of the receiver, so no
 * receive queue runs dry: on a lossless link every message must arrive.
 * The Rust test runs it in a network namespace with a shaped loopback, so
 * datagrams queue after they are built. Exit status 0 or 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pattern.h"

#define SLOTS 128
#define RSLOTS 256
#define WINDOW 200
#define QKEY 0x11111111
#define STALL_S 5

static int ud;
static size_t size;
static long messages;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *sqp, *rqp;
static struct ibv_mr *smr, *rmr;
static uint8_t *sbuf, *rbuf;
static size_t slot_len;
static atomic_long received;
static atomic_long bad;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The bytes of message i: every message differs everywhere. */
static void fill(uint64_t i, uint8_t *out)
{
	pattern_fill(i, out, size);
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void post_recv(uint64_t slot)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)(rbuf + slot * slot_len),
		.length = (uint32_t)slot_len,
		.lkey = rmr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *badwr;
	if (ibv_post_recv(rqp, &wr, &badwr))
		die("ibv_post_recv");
}

static void *receiver(void *arg)
{
	(void)arg;
	uint8_t *expect = malloc(size);
	struct ibv_wc wc[32];
	double last = now();
	while (atomic_load(&received) < messages && now() - last < STALL_S) {
		int n = ibv_poll_cq(rcq, 32, wc);
		if (n < 0)
			die("ibv_poll_cq (receiver)");
		if (n > 0)
			last = now();
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "receive: %s\n", ibv_wc_status_str(wc[k].status));
				exit(1);
			}
			uint64_t i = ntohl(wc[k].imm_data);
			uint8_t *at = ud ? rbuf + wc[k].wr_id * slot_len + 40
					 : rbuf + (i % RSLOTS) * slot_len;
			fill(i, expect);
			if ((ud && wc[k].byte_len != size + 40) || memcmp(at, expect, size)) {
				if (atomic_fetch_add(&bad, 1) < 5)
					fprintf(stderr, "message %lu arrived with other bytes\n",
						(unsigned long)i);
			}
			post_recv(wc[k].wr_id);
			atomic_fetch_add(&received, 1);
		}
	}
	free(expect);
	return NULL;
}

static void to_state(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	if (ibv_modify_qp(qp, a, mask))
		die("ibv_modify_qp");
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1 };
	if (ud) {
		a.qkey = QKEY;
		to_state(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
		to_state(qp, &a, IBV_QP_STATE);
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0 };
		to_state(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
		return;
	}
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	to_state(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = dest,
		.rq_psn = 0,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = *gid, .hop_limit = 64 } },
	};
	to_state(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0 };
	to_state(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: reuse ud|uc SIZE [MESSAGES]\n");
		return 2;
	}
	ud = !strcmp(argv[1], "ud");
	size = strtoul(argv[2], NULL, 10);
	messages = argc > 3 ? strtol(argv[3], NULL, 10) : 20000;
	slot_len = size + (ud ? 40 : 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])))
		die("ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	scq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	if (posix_memalign((void **)&sbuf, 4096, SLOTS * size) ||
	    posix_memalign((void **)&rbuf, 4096, RSLOTS * slot_len))
		die("posix_memalign");
	if (!pd || !scq || !rcq)
		die("setup");
	smr = ibv_reg_mr(pd, sbuf, SLOTS * size, IBV_ACCESS_LOCAL_WRITE);
	rmr = ibv_reg_mr(pd, rbuf, RSLOTS * slot_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_qp_init_attr qa = {
		.send_cq = scq,
		.recv_cq = scq,
		.cap = { .max_send_wr = SLOTS, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = ud ? IBV_QPT_UD : IBV_QPT_UC,
	};
	sqp = ibv_create_qp(pd, &qa);
	qa.send_cq = rcq;
	qa.recv_cq = rcq;
	qa.cap.max_send_wr = 1;
	qa.cap.max_recv_wr = RSLOTS;
	rqp = ibv_create_qp(pd, &qa);
	if (!smr || !rmr || !sqp || !rqp)
		die("setup");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");
	connect_qp(sqp, rqp->qp_num, &gid);
	connect_qp(rqp, sqp->qp_num, &gid);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .dgid = gid, .hop_limit = 64 } };
	struct ibv_ah *ah = ud ? ibv_create_ah(pd, &aa) : NULL;
	if (ud && !ah)
		die("ibv_create_ah");
	for (uint64_t s = 0; s < RSLOTS; s++)
		post_recv(s);

	pthread_t rx;
	pthread_create(&rx, NULL, receiver, NULL);
	int busy[SLOTS] = { 0 };
	uint8_t *garbage = malloc(size), *msg = malloc(size);
	struct ibv_wc wc[32];
	long i = 0, done = 0;
	double last = now();
	while (done < messages && now() - last < STALL_S) {
		int n = ibv_poll_cq(scq, 32, wc);
		if (n < 0)
			die("ibv_poll_cq (sender)");
		if (n > 0)
			last = now();
		for (int k = 0; k < n; k++) {
			if (wc[k].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "send: %s\n", ibv_wc_status_str(wc[k].status));
				return 1;
			}
			/* The buffer is ours again: reuse it at once. */
			int slot = wc[k].wr_id % SLOTS;
			fill(wc[k].wr_id ^ 0xdeadbeef, garbage);
			memcpy(sbuf + slot * size, garbage, size);
			busy[slot] = 0;
			done++;
		}
		int slot = i % SLOTS;
		if (i < messages && !busy[slot] && i < atomic_load(&received) + WINDOW) {
			fill(i, msg);
			memcpy(sbuf + slot * size, msg, size);
			struct ibv_sge sge = {
				.addr = (uintptr_t)(sbuf + slot * size),
				.length = (uint32_t)size,
				.lkey = smr->lkey,
			};
			struct ibv_send_wr wr = {
				.wr_id = i,
				.sg_list = &sge,
				.num_sge = 1,
				.send_flags = IBV_SEND_SIGNALED,
				.imm_data = htonl((uint32_t)i),
			}, *badwr;
			if (ud) {
				wr.opcode = IBV_WR_SEND_WITH_IMM;
				wr.wr.ud.ah = ah;
				wr.wr.ud.remote_qpn = rqp->qp_num;
				wr.wr.ud.remote_qkey = QKEY;
			} else {
				wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				wr.wr.rdma.remote_addr = (uintptr_t)(rbuf + (i % RSLOTS) * slot_len);
				wr.wr.rdma.rkey = rmr->rkey;
			}
			if (ibv_post_send(sqp, &wr, &badwr))
				die("ibv_post_send");
			busy[slot] = 1;
			i++;
		}
	}
	pthread_join(rx, NULL);
	long got = atomic_load(&received), wrong = atomic_load(&bad);
	printf("%s %zu B: %ld of %ld messages arrived, %ld with other bytes\n", argv[1], size, got,
	       messages, wrong);
	free(garbage);
	free(msg);
	if (ah)
		ibv_destroy_ah(ah);
	ibv_destroy_qp(sqp);
	ibv_destroy_qp(rqp);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(sbuf);
	free(rbuf);
	return got == messages && wrong == 0 ? 0 : 1;
}
