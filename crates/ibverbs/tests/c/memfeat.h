/*
 * Shared helpers of the memory-feature C programs (mw.c, placement.c,
 * odp.c): checks that print one line each, two RC QPs of one device
 * connected to each other, and one-shot RDMA operations that return the
 * completion status. Built against Debian 12's <infiniband/verbs.h>
 * (rdma-core 44); what rdma-core 47+ added (FLUSH) is declared here as
 * rdma-core lays it out.
 */
#ifndef MEMFEAT_H
#define MEMFEAT_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"

/* rdma-core 47+ (verbs.h): FLUSH and the FLUSH access rights. */
#define MF_IBV_ACCESS_FLUSH_GLOBAL (1 << 8)
#define MF_IBV_ACCESS_FLUSH_PERSISTENT (1 << 9)
#define MF_IBV_WR_FLUSH 14
#define MF_IBV_WC_FLUSH 8
#define MF_IBV_QP_EX_WITH_FLUSH (1 << 11)
#define MF_IBV_FLUSH_GLOBAL 1
#define MF_IBV_FLUSH_PERSISTENT 2
#define MF_IBV_FLUSH_RANGE 0
#define MF_IBV_FLUSH_MR 1
#define MF_IBV_DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define MF_IBV_DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define MF_IBV_DEVICE_ATOMIC_WRITE (1ULL << 40)
#define MF_IBV_ODP_SUPPORT_FLUSH (1 << 6)
#define MF_IBV_ODP_SUPPORT_ATOMIC_WRITE (1 << 7)

/* struct ibv_qp_ex of rdma-core 47+: 44's, then wr_flush. */
struct mf_qp_ex {
	struct ibv_qp_ex ex;
	void (*wr_flush)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr,
			 size_t len, uint8_t type, uint8_t level);
};
_Static_assert(offsetof(struct mf_qp_ex, wr_flush) == sizeof(struct ibv_qp_ex),
	       "wr_flush follows wr_atomic_write");

/* ibv_wr_flush as rdma-core 47's verbs.h has it. */
static inline void mf_wr_flush(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t addr, size_t len,
			       uint8_t type, uint8_t level)
{
	((struct mf_qp_ex *)qp)->wr_flush(qp, rkey, addr, len, type, level);
}


/* Two QPs of one device, connected to each other: a requests, b serves. */
struct pair {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cqa, *cqb;
	struct ibv_qp *a, *b;
	union ibv_gid gid;
	int access;
};

static struct ibv_qp *make_qp_ex(struct pair *p, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = p->pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_INV |
				  IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				  IBV_QP_EX_WITH_ATOMIC_WRITE | MF_IBV_QP_EX_WITH_FLUSH,
	};
	return ibv_create_qp_ex(p->ctx, &a);
}

/* RESET -> INIT -> RTR -> RTS towards `dest` on the same device. */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return -1;
	struct rc_opts o = { .access = access, .rd_atomic = 4, .rnr_retry = 7, .min_rnr_timer = 1 };
	return rc_connect(qp, dest, gid, &o) ? -2 : 0;
}

/* (Re)connects a and b (after an error took them to the error state). */
static int reconnect(struct pair *p)
{
	struct ibv_wc wc;
	int r = connect_qp(p->a, p->b->qp_num, &p->gid, p->access) ||
		connect_qp(p->b, p->a->qp_num, &p->gid, p->access);
	while (ibv_poll_cq(p->cqa, 1, &wc) > 0 || ibv_poll_cq(p->cqb, 1, &wc) > 0)
		;
	return r;
}

static int pair_open(struct pair *p, int access)
{
	memset(p, 0, sizeof(*p));
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return -1;
	p->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!p->ctx || ibv_query_gid(p->ctx, 1, 0, &p->gid))
		return -2;
	p->pd = ibv_alloc_pd(p->ctx);
	p->cqa = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	p->cqb = ibv_create_cq(p->ctx, 64, NULL, NULL, 0);
	if (!p->pd || !p->cqa || !p->cqb)
		return -3;
	p->a = make_qp_ex(p, p->cqa);
	p->b = make_qp_ex(p, p->cqb);
	if (!p->a || !p->b)
		return -4;
	p->access = access;
	return reconnect(p);
}

static void pair_close(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->cqa);
	ibv_destroy_cq(p->cqb);
	ibv_dealloc_pd(p->pd);
	ibv_close_device(p->ctx);
}

/* One signaled RDMA operation from `qp`; returns its completion status
 * (-1: posting failed, -2: no completion). */
static int rdma_op(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, void *local,
		   uint32_t len, uint32_t lkey, uint64_t remote, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)local, len, lkey };
	struct ibv_send_wr w = { .wr_id = 77, .sg_list = &sge, .num_sge = len ? 1 : 0,
				 .opcode = op, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		w.wr.atomic.remote_addr = remote;
		w.wr.atomic.rkey = rkey;
		w.wr.atomic.compare_add = 1;
	} else {
		w.wr.rdma.remote_addr = remote;
		w.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(qp, &w, &bad))
		return -1;
	if (poll_one(cq, &wc) != 1)
		return -2;
	return wc.status;
}

#endif
