/*
 * Error paths of softrdma's libibverbs, seen from C: what a program gets
 * back (return values, errno, completion statuses) for bad handles, bad
 * sizes, bad attributes, remote access errors, RNR retry exhaustion and
 * flushes, and the errno of every verb and attribute softrdma refuses
 * (README's "Verbs: supported and refused" table). Built against Debian's
 * <infiniband/verbs.h> and <rdma/rdma_cma.h> with
 * -fsanitize=address,undefined; run with softrdma's libibverbs.so.1 (also
 * librdmacm.so.1) first on LD_LIBRARY_PATH (crates/ibverbs/tests/c_errors.rs
 * does both).
 *
 * Every check prints one line; the exit status is the number of failures.
 * The refusals (what softrdma does not do, with its errno) are in
 * errors_refused.h.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"


struct ep {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
};

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq,
			      enum ibv_qp_type type)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type,
	};
	return ibv_create_qp(pd, &a);
}

/* INIT -> RTR -> RTS towards `dest` on the same device. */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid,
		      uint8_t rnr_retry, uint8_t min_rnr_timer)
{
	struct rc_opts o = { .access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
			     .rd_atomic = 1,
			     .rnr_retry = rnr_retry,
			     .min_rnr_timer = min_rnr_timer };
	return rc_connect(qp, dest, gid, &o);
}

/* connect_qp of `a` towards `b` and `b` towards `a` (RNR timer code 1):
 * 0, or the first move's failure. */
static int connect_pair(struct ibv_qp *a, struct ibv_qp *b, union ibv_gid *gid, uint8_t rnr_retry)
{
	return connect_qp(a, b->qp_num, gid, rnr_retry, 1) ?: connect_qp(b, a->qp_num, gid, rnr_retry, 1);
}

static void bad_handles(struct ibv_context *ctx)
{
	errno = 0;
	CHECK(ibv_open_device(NULL) == NULL && errno == EINVAL,
	      "ibv_open_device(NULL) -> NULL, EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL,
	      "ibv_alloc_pd(NULL) -> NULL, EINVAL (errno %d)", errno);
	CHECK(ibv_dealloc_pd(NULL) == EINVAL, "ibv_dealloc_pd(NULL) -> EINVAL");
	CHECK(ibv_dereg_mr(NULL) == EINVAL, "ibv_dereg_mr(NULL) -> EINVAL");
	CHECK(ibv_destroy_cq(NULL) == EINVAL, "ibv_destroy_cq(NULL) -> EINVAL");
	CHECK(ibv_destroy_qp(NULL) == EINVAL, "ibv_destroy_qp(NULL) -> EINVAL");
	CHECK(ibv_destroy_srq(NULL) == EINVAL, "ibv_destroy_srq(NULL) -> EINVAL");
	CHECK(ibv_destroy_ah(NULL) == EINVAL, "ibv_destroy_ah(NULL) -> EINVAL");
	CHECK(ibv_destroy_comp_channel(NULL) == EINVAL,
	      "ibv_destroy_comp_channel(NULL) -> EINVAL");
	CHECK(ibv_close_device(NULL) == -1 && errno == EINVAL,
	      "ibv_close_device(NULL) -> -1, EINVAL");
	CHECK(ibv_query_device(NULL, NULL) == EINVAL, "ibv_query_device(NULL) -> EINVAL");
	CHECK(ibv_get_device_name(NULL) == NULL, "ibv_get_device_name(NULL) -> NULL");

	/* A pointer to something that is not one of ours. */
	struct ibv_pd fake_pd = { .context = ctx, .handle = 1 };
	CHECK(ibv_dealloc_pd(&fake_pd) == EINVAL, "ibv_dealloc_pd(foreign) -> EINVAL");
	errno = 0;
	char buf[64];
	CHECK(ibv_reg_mr(&fake_pd, buf, sizeof(buf), 0) == NULL && errno == EINVAL,
	      "ibv_reg_mr(foreign PD) -> NULL, EINVAL");

	/* Destroyed twice: the second call is refused, nothing is freed twice. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "ibv_alloc_pd");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_dealloc_pd(pd) == EINVAL, "ibv_dealloc_pd again -> EINVAL");

	/* Objects in use. */
	pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL, "ibv_reg_mr");
	/* Functions returning an errno value set errno to it too (libibverbs:
	 * the failed system call on the command descriptor sets it). */
	errno = 0;
	CHECK(ibv_dealloc_pd(pd) == EBUSY && errno == EBUSY,
	      "ibv_dealloc_pd with a region -> EBUSY, errno EBUSY (errno %d)", errno);
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	CHECK(ch && cq, "channel and CQ");
	errno = 0;
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY && errno == EBUSY,
	      "ibv_destroy_comp_channel with a CQ -> EBUSY, errno EBUSY (errno %d)", errno);
	struct ibv_qp *qp = make_qp(pd, cq, IBV_QPT_RC);
	CHECK(qp != NULL, "ibv_create_qp");
	errno = 0;
	CHECK(ibv_destroy_cq(cq) == EBUSY && errno == EBUSY,
	      "ibv_destroy_cq with a QP -> EBUSY, errno EBUSY (errno %d)", errno);
	CHECK(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
}

static void limits(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char buf[4096];

	errno = 0;
	CHECK(ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0) == NULL && errno == EINVAL,
	      "CQ of max_cqe+1 -> EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL,
	      "CQ of 0 entries -> EINVAL");
	errno = 0;
	CHECK(ibv_create_cq(ctx, 4, NULL, NULL, 5) == NULL && errno == EINVAL,
	      "CQ on comp_vector 5 of 1 -> EINVAL");

	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = da.max_qp_wr + 1, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EINVAL,
	      "QP with max_send_wr > max_qp_wr -> EINVAL (errno %d)", errno);
	a.cap.max_send_wr = 4;
	a.cap.max_send_sge = da.max_sge + 1;
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EINVAL,
	      "QP with max_send_sge > max_sge -> EINVAL");
	a.cap.max_send_sge = 1;
	a.cap.max_inline_data = 1 << 20;
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EINVAL,
	      "QP with 1 MiB inline -> EINVAL");
	a.cap.max_inline_data = 0;
	/* An XRC TGT QP comes from an XRC domain (ibv_create_qp_ex). */
	a.qp_type = IBV_QPT_XRC_RECV;
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EINVAL,
	      "ibv_create_qp of an XRC TGT QP -> EINVAL (errno %d)", errno);
	a.qp_type = IBV_QPT_RAW_PACKET;
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EOPNOTSUPP,
	      "raw packet QP -> EOPNOTSUPP (errno %d)", errno);
	a.qp_type = 77;
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EINVAL, "QP type 77 -> EINVAL");
	a.qp_type = IBV_QPT_RC;
	a.send_cq = NULL;
	errno = 0;
	CHECK(ibv_create_qp(pd, &a) == NULL && errno == EINVAL, "QP without send CQ -> EINVAL");

	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE) == NULL &&
		      errno == EINVAL,
	      "region with REMOTE_WRITE but not LOCAL_WRITE -> EINVAL");
	errno = 0;
	CHECK(ibv_reg_mr(pd, NULL, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "region at NULL -> EINVAL");
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED) ==
			      NULL &&
		      errno == EOPNOTSUPP,
	      "zero-based region -> EOPNOTSUPP");
	errno = 0;
	CHECK(ibv_reg_mr(pd, buf, sizeof(buf), 1 << 12) == NULL && errno == EINVAL,
	      "unknown access bit -> EINVAL");
	struct ibv_mr *relaxed = ibv_reg_mr(pd, buf, sizeof(buf),
					    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(relaxed != NULL, "optional access bits (relaxed ordering) are ignored");
	ibv_dereg_mr(relaxed);

	/* A full receive queue: the 5th receive of a 4-deep queue fails. */
	a.send_cq = cq;
	a.cap.max_recv_wr = 4;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp != NULL, "QP of 4 receives");
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					       IBV_QP_ACCESS_FLAGS) == 0,
	      "to INIT");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	int r = 0, i;
	for (i = 0; i < 5 && r == 0; i++)
		r = ibv_post_recv(qp, &rw, &bad);
	CHECK(i == 5 && r == ENOMEM && bad == &rw,
	      "5th receive on a 4-deep queue -> ENOMEM, bad_wr set (i=%d r=%d)", i, r);
	rw.num_sge = 100;
	bad = NULL;
	CHECK(ibv_post_recv(qp, &rw, &bad) == EINVAL && bad == &rw,
	      "receive with 100 SGEs -> EINVAL");
	/* A send before RTS. */
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *sbad = NULL;
	CHECK(ibv_post_send(qp, &sw, &sbad) == EINVAL && sbad == &sw,
	      "send in INIT -> EINVAL, bad_wr set");
	sw.opcode = 42;
	CHECK(ibv_post_send(qp, &sw, &sbad) == EINVAL, "opcode 42 -> EINVAL");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy");
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

static void bad_attributes(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qp = make_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL,
	      "RESET->INIT without PKEY/PORT/ACCESS -> EINVAL");
	a.qp_state = IBV_QPS_RTS;
	errno = 0;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL && errno == EINVAL,
	      "RESET->RTS -> EINVAL, errno EINVAL (errno %d)", errno);
	a.qp_state = 42;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "state 42 -> EINVAL");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 2;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS) == EINVAL,
	      "port 2 -> EINVAL");
	a.port_num = 1;
	a.pkey_index = 3;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS) == EINVAL,
	      "pkey_index 3 -> EINVAL");
	a.pkey_index = 0;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN) == EINVAL,
	      "RESET->INIT with SQ_PSN (not allowed) -> EINVAL");
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS) == 0,
	      "RESET->INIT");
	CHECK(qp->state == IBV_QPS_INIT, "qp->state follows modify");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = 9;
	a.dest_qp_num = qp->qp_num;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK(ibv_modify_qp(qp, &a, mask) == EINVAL, "path_mtu 9 -> EINVAL");
	a.path_mtu = IBV_MTU_1024;
	a.ah_attr.is_global = 0;
	CHECK(ibv_modify_qp(qp, &a, mask) == EINVAL, "RoCE path without GRH -> EINVAL");
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.sgid_index = 5;
	CHECK(ibv_modify_qp(qp, &a, mask) == EINVAL, "sgid_index 5 -> EINVAL");
	a.ah_attr.grh.sgid_index = 0;
	CHECK(ibv_modify_qp(qp, &a, mask & ~IBV_QP_DEST_QPN) == EINVAL,
	      "INIT->RTR without DEST_QPN -> EINVAL");
	CHECK(ibv_modify_qp(qp, &a, mask | IBV_QP_CAP) == EINVAL,
	      "INIT->RTR with CAP -> EINVAL");
	CHECK(ibv_modify_qp(qp, &a, mask) == 0, "INIT->RTR");

	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(qp, &q, IBV_QP_STATE, &qi) == 0 && q.qp_state == IBV_QPS_RTR &&
		      q.path_mtu == IBV_MTU_1024 && qi.qp_type == IBV_QPT_RC &&
		      qi.send_cq == cq,
	      "ibv_query_qp reports RTR, MTU 1024, RC");

	/* Address handles need the GRH on RoCE. */
	struct ibv_ah_attr ah = { .is_global = 0, .port_num = 1 };
	errno = 0;
	CHECK(ibv_create_ah(pd, &ah) == NULL && errno == EINVAL,
	      "address handle without GRH -> EINVAL");
	ah.is_global = 1;
	ah.grh.dgid = *gid;
	struct ibv_ah *h = ibv_create_ah(pd, &ah);
	CHECK(h != NULL, "address handle to our own GID");
	CHECK(ibv_destroy_ah(h) == 0, "ibv_destroy_ah");

	/* Queries. */
	union ibv_gid g, zero = { 0 };
	struct ibv_port_attr pa0;
	CHECK(ibv_query_port(ctx, 1, &pa0) == 0 && pa0.gid_tbl_len > 1, "GID table of several entries");
	CHECK(ibv_query_gid(ctx, 1, 1, &g) == 0 && memcmp(&g, &zero, 16) == 0,
	      "empty GID index 1 -> zeros");
	CHECK(ibv_query_gid(ctx, 1, pa0.gid_tbl_len, &g) == -1, "GID index past the table -> -1");
	CHECK(ibv_query_gid(ctx, 2, 0, &g) == -1, "GID on port 2 -> -1");
	struct ibv_gid_entry e;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		      memcmp(&e.gid, gid, 16) == 0,
	      "ibv_query_gid_ex: RoCE v2, the port's GID");
	CHECK(ibv_query_gid_ex(ctx, 1, 1, &e, 0) == ENODATA, "ibv_query_gid_ex(empty index) -> ENODATA");
	CHECK(ibv_query_gid_ex(ctx, 1, pa0.gid_tbl_len, &e, 0) == EINVAL,
	      "ibv_query_gid_ex(past the table) -> EINVAL");
	struct ibv_port_attr pa;
	errno = 0;
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL && errno == EINVAL,
	      "ibv_query_port(port 2) -> EINVAL, errno EINVAL (errno %d)", errno);
	struct ibv_device_attr_ex dx;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(ibv_query_device_ex(ctx, &in, &dx) == EINVAL,
	      "ibv_query_device_ex with unknown comp_mask -> EINVAL");
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 &&
		      dx.orig_attr.atomic_cap == IBV_ATOMIC_HCA,
	      "ibv_query_device_ex: atomic_cap HCA");
	/* Memory windows: types 1 and 2 only (tests/c/mw.c has the rest). */
	errno = 0;
	CHECK(ibv_alloc_mw(pd, 3) == NULL && errno == EINVAL, "ibv_alloc_mw(type 3) -> EINVAL");
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw != NULL && ibv_dealloc_mw(mw) == 0, "ibv_alloc_mw(type 2), ibv_dealloc_mw");
	/* XRC domains: libibverbs' argument checks (tests/c/xrc.c has the
	 * rest). */
	struct ibv_xrcd_init_attr xa = { 0 };
	errno = 0;
	CHECK(ibv_open_xrcd(ctx, &xa) == NULL && errno == EINVAL,
	      "ibv_open_xrcd without FD/OFLAGS -> EINVAL");
	/* Verbs the device does not have. */
	struct ibv_cq_init_attr_ex cx = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN };
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cx) == NULL && errno == EOPNOTSUPP,
	      "CQ with VLAN in its completions -> EOPNOTSUPP");

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

/* Two connected RC QPs of one device: remote access error, flush. */
static void remote_errors(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cqa = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(pd, cqa, IBV_QPT_RC);
	struct ibv_qp *b = make_qp(pd, cqb, IBV_QPT_RC);
	CHECK(connect_pair(a, b, gid, 7) == 0, "two RC QPs connected");
	static char src[4096], dst[4096];
	struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *md = ibv_reg_mr(pd, dst, sizeof(dst),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(src, 0x5a, sizeof(src));
	struct ibv_sge sge = { (uintptr_t)src, 512, ms->lkey };
	struct ibv_send_wr w = { .wr_id = 10, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	/* A good write lands. */
	w.wr.rdma.remote_addr = (uintptr_t)dst;
	w.wr.rdma.rkey = md->rkey;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "RDMA WRITE posted");
	CHECK(poll_one(cqa, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 10 &&
		      wc.opcode == IBV_WC_RDMA_WRITE,
	      "RDMA WRITE completes: %s", ibv_wc_status_str(wc.status));
	CHECK(dst[0] == 0x5a && dst[511] == 0x5a && dst[512] == 0, "the bytes landed, no more");

	/* A write outside the region, then a bad rkey. */
	w.wr_id = 11;
	w.wr.rdma.remote_addr = (uintptr_t)dst + sizeof(dst) - 100;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "RDMA WRITE past the end posted");
	w.wr_id = 12;
	w.wr.rdma.remote_addr = (uintptr_t)dst;
	w.wr.rdma.rkey = md->rkey ^ 0x5500;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "RDMA WRITE with a bad rkey posted");
	CHECK(poll_one(cqa, &wc) == 1 && wc.wr_id == 11 && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "out of bounds -> IBV_WC_REM_ACCESS_ERR (got %s)", ibv_wc_status_str(wc.status));
	CHECK(poll_one(cqa, &wc) == 1 && wc.wr_id == 12 && wc.status == IBV_WC_WR_FLUSH_ERR,
	      "the next request is flushed (got %s)", ibv_wc_status_str(wc.status));
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(a, &qa, IBV_QP_STATE, &qi);
	CHECK(qa.qp_state == IBV_QPS_ERR, "the requester QP is in ERR");

	/* A fresh pair: a bad rkey as the first request. */
	struct ibv_qp *c = make_qp(pd, cqa, IBV_QPT_RC);
	struct ibv_qp *d = make_qp(pd, cqb, IBV_QPT_RC);
	connect_qp(c, d->qp_num, gid, 7, 1);
	connect_qp(d, c->qp_num, gid, 7, 1);
	w.wr_id = 13;
	CHECK(ibv_post_send(c, &w, &bad) == 0, "RDMA WRITE with a bad rkey posted");
	CHECK(poll_one(cqa, &wc) == 1 && wc.wr_id == 13 && wc.status == IBV_WC_REM_ACCESS_ERR,
	      "bad rkey -> IBV_WC_REM_ACCESS_ERR (got %s)", ibv_wc_status_str(wc.status));

	/* QP to ERR flushes posted receives. */
	struct ibv_recv_wr rw = { .wr_id = 20, .sg_list = &sge, .num_sge = 1 }, *rbad;
	sge.addr = (uintptr_t)dst;
	sge.lkey = md->lkey;
	for (int i = 0; i < 3; i++) {
		rw.wr_id = 20 + i;
		ibv_post_recv(d, &rw, &rbad);
	}
	struct ibv_qp_attr to_err = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(d, &to_err, IBV_QP_STATE) == 0, "QP to ERR");
	int flushed = 0;
	for (int i = 0; i < 3; i++)
		if (poll_one(cqb, &wc) == 1 && wc.status == IBV_WC_WR_FLUSH_ERR &&
		    wc.wr_id == (uint64_t)(20 + i))
			flushed++;
	CHECK(flushed == 3, "3 receives flushed in order with IBV_WC_WR_FLUSH_ERR (%d)", flushed);
	struct ibv_wc many[8];
	CHECK(ibv_poll_cq(cqb, 8, many) == 0, "nothing more");
	CHECK(ibv_poll_cq(cqb, -1, many) < 0, "ibv_poll_cq with -1 entries fails");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_qp(c);
	ibv_destroy_qp(d);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	ibv_destroy_cq(cqa);
	ibv_destroy_cq(cqb);
	ibv_dealloc_pd(pd);
}

/* A SEND with no receive posted and rnr_retry 0: RNR retries exhausted. */
static void rnr(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp *b = make_qp(pd, cq, IBV_QPT_RC);
	CHECK(connect_pair(a, b, gid, 0) == 0, "RC pair with rnr_retry 0");
	static char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 30, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "SEND posted");
	struct ibv_wc wc;
	CHECK(poll_one(cq, &wc) == 1 && wc.wr_id == 30 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
	      "no receive, rnr_retry 0 -> IBV_WC_RNR_RETRY_EXC_ERR (got %s)",
	      ibv_wc_status_str(wc.status));
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

/* SRQ resize (IBV_SRQ_MAX_WR, as rxe): advertised by IBV_DEVICE_SRQ_RESIZE;
 * never below the receives posted, nor 0, nor past max_srq_wr; the posted
 * receives stay and are consumed in order by the traffic after. */
static void srq_resize(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0 && (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE),
	      "IBV_DEVICE_SRQ_RESIZE in device_cap_flags");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq != NULL, "SRQ of 4");
	struct ibv_qp *a = make_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = { .max_send_wr = 16, .max_send_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	CHECK(a && b && connect_pair(a, b, gid, 7) == 0, "RC pair, the receiver on the SRQ");
	static char buf[16 * 64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_recv_wr *rbad;
	int posted = 0;
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)buf + 64 * i, 64, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 };
		posted += ibv_post_srq_recv(srq, &r, &rbad) == 0;
	}
	CHECK(posted == 4, "4 receives posted");
	struct ibv_srq_attr sra = { .max_wr = 3 };
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_MAX_WR) == EINVAL,
	      "resize below the 4 posted -> EINVAL");
	sra.max_wr = 0;
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_MAX_WR) == EINVAL, "resize to 0 -> EINVAL");
	sra.max_wr = da.max_srq_wr + 1;
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_MAX_WR) == EINVAL,
	      "resize past max_srq_wr -> EINVAL");
	sra.max_wr = 16;
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_MAX_WR) == 0, "resize 4 -> 16");
	struct ibv_srq_attr q = { 0 };
	CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 16, "ibv_query_srq: max_wr %u", q.max_wr);
	for (int i = 4; i < 16; i++) {
		struct ibv_sge sge = { (uintptr_t)buf + 64 * i, 64, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 };
		posted += ibv_post_srq_recv(srq, &r, &rbad) == 0;
	}
	CHECK(posted == 16, "12 more receives posted (%d in all)", posted);
	{
		struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 999, .sg_list = &sge, .num_sge = 1 };
		CHECK(ibv_post_srq_recv(srq, &r, &rbad) == ENOMEM, "the 17th -> ENOMEM");
	}
	static char src[64];
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof(src), 0);
	int sent = 0;
	for (int i = 0; i < 16; i++) {
		struct ibv_sge sge = { (uintptr_t)src, 8, smr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		sent += ibv_post_send(a, &w, &bad) == 0;
	}
	CHECK(sent == 16, "16 SENDs posted");
	int sends = 0, next = 100, in_order = 1;
	for (int i = 0; i < 32; i++) {
		struct ibv_wc wc;
		if (poll_one(cq, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
			break;
		if (wc.opcode == IBV_WC_RECV)
			in_order &= wc.wr_id == (uint64_t)next++;
		else
			sends++;
	}
	CHECK(sends == 16 && next == 116 && in_order,
	      "16 SENDs complete on 16 receives, in order (%d sends, %d receives)", sends,
	      next - 100);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(smr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

/* RDMA_OPTION_IB_PATH (the kernel's ucma_set_ib_path): the route given
 * instead of resolved, once the address is resolved; the primary
 * bidirectional entry of an ibv_path_data array is taken as given and
 * ROUTE_RESOLVED follows. */
static void ib_path(union ibv_gid *gid)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	CHECK(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	struct ibv_path_data pd[2];
	memset(pd, 0, sizeof(pd));
	pd[1].flags = IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL;
	pd[1].path.sgid = *gid;
	pd[1].path.dgid = *gid;
	pd[1].path.flowlabel_hoplimit = htobe32((0x12345u << 8) | 7);
	pd[1].path.tclass = 32;
	pd[1].path.pkey = htobe16(0xffff);
	pd[1].path.qosclass_sl = htobe16(3);
	pd[1].path.mtu = 0x80 | IBV_MTU_512;
	pd[1].path.packetlifetime = 0x80 | 16;
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, sizeof(pd)) == -1 &&
		      errno == EINVAL,
	      "RDMA_OPTION_IB_PATH before the address is resolved -> -1, EINVAL (errno %d)", errno);
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(7474) };
	memcpy(&dst.sin_addr, &gid->raw[12], 4);
	struct rdma_cm_event *ev = NULL;
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		      rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "address resolved");
	if (ev)
		rdma_ack_cm_event(ev);
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, 64) == -1 &&
		      errno == EINVAL,
	      "RDMA_OPTION_IB_PATH of part of an entry -> -1, EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, sizeof(pd[0])) == -1 &&
		      errno == EINVAL,
	      "RDMA_OPTION_IB_PATH without a primary bidirectional entry -> -1, EINVAL (errno %d)",
	      errno);
	CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, sizeof(pd)) == 0,
	      "RDMA_OPTION_IB_PATH sets the route");
	ev = NULL;
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "ROUTE_RESOLVED follows");
	if (ev)
		rdma_ack_cm_event(ev);
	struct ibv_sa_path_rec *p = id->route.path_rec;
	CHECK(id->route.num_paths == 1 && p && p->mtu == IBV_MTU_512 && p->hop_limit == 7 &&
		      p->traffic_class == 32 && be32toh(p->flow_label) == 0x12345 && p->sl == 3 &&
		      p->packet_life_time == 16 && !memcmp(&p->dgid, gid, 16),
	      "route.path_rec is the path given");
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, sizeof(pd)) == -1 &&
		      errno == EINVAL,
	      "RDMA_OPTION_IB_PATH once the route is resolved -> -1, EINVAL (errno %d)", errno);
	rdma_destroy_id(id);

	/* A connection over a given path: its MTU is the QPs'. */
	struct rdma_cm_id *lid = NULL, *cid = NULL, *sid = NULL;
	struct sockaddr_in any = { .sin_family = AF_INET };
	memcpy(&any.sin_addr, &gid->raw[12], 4);
	CHECK(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_bind_addr(lid, (struct sockaddr *)&any) == 0 && rdma_listen(lid, 1) == 0,
	      "listener");
	dst.sin_port = rdma_get_src_port(lid);
	ev = NULL;
	CHECK(rdma_create_id(ch, &cid, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(cid, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		      rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "client address resolved");
	if (ev)
		rdma_ack_cm_event(ev);
	ev = NULL;
	CHECK(rdma_set_option(cid, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, pd, sizeof(pd)) == 0 &&
		      rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	      "client route given");
	if (ev)
		rdma_ack_cm_event(ev);
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(rdma_create_qp(cid, NULL, &qa) == 0 && rdma_connect(cid, &cp) == 0, "connect");
	ev = NULL;
	CHECK(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST,
	      "CONNECT_REQUEST");
	if (ev) {
		sid = ev->id;
		rdma_ack_cm_event(ev);
	}
	struct ibv_qp_init_attr qs = qa;
	CHECK(sid && rdma_create_qp(sid, NULL, &qs) == 0 && rdma_accept(sid, &cp) == 0, "accept");
	int established = 0;
	for (int i = 0; i < 2; i++) {
		ev = NULL;
		if (rdma_get_cm_event(ch, &ev) == 0) {
			established += ev->event == RDMA_CM_EVENT_ESTABLISHED;
			rdma_ack_cm_event(ev);
		}
	}
	CHECK(established == 2, "both sides ESTABLISHED (%d)", established);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK(cid->qp && ibv_query_qp(cid->qp, &qattr, IBV_QP_PATH_MTU, &qinit) == 0 &&
		      qattr.path_mtu == IBV_MTU_512,
	      "the client QP's path MTU is the given path's (%d)", (int)qattr.path_mtu);
	CHECK(sid && sid->qp && ibv_query_qp(sid->qp, &qattr, IBV_QP_PATH_MTU, &qinit) == 0 &&
		      qattr.path_mtu == IBV_MTU_512,
	      "the server QP's path MTU is the REQ's (%d)", (int)qattr.path_mtu);
	/* The passive side answers the DREQ with its own rdma_disconnect. */
	rdma_disconnect(cid);
	int disconnected = 0;
	for (int i = 0; i < 2; i++) {
		ev = NULL;
		if (rdma_get_cm_event(ch, &ev) != 0)
			break;
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED) {
			disconnected++;
			if (ev->id == sid)
				rdma_disconnect(sid);
		}
		rdma_ack_cm_event(ev);
	}
	CHECK(disconnected == 2, "both sides DISCONNECTED (%d)", disconnected);
	if (sid) {
		rdma_destroy_qp(sid);
		rdma_destroy_id(sid);
	}
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
}

/* UD: the receive buffer starts with the 40-byte GRH area (20 zero bytes
 * and the IPv4 header for IPv4 GIDs); an address handle made from the
 * completion and that area answers the sender. */
static void ud(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(pd, cq, IBV_QPT_UD);
	struct ibv_qp *b = make_qp(pd, cq, IBV_QPT_UD);
	CHECK(a && b, "two UD QPs");
	struct ibv_qp *q[2] = { a, b };
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					  .qkey = 0x11111111 };
		int r = ibv_modify_qp(q[i], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
							 IBV_QP_PORT | IBV_QP_QKEY);
		at.qp_state = IBV_QPS_RTR;
		r |= ibv_modify_qp(q[i], &at, IBV_QP_STATE);
		at.qp_state = IBV_QPS_RTS;
		at.sq_psn = 0;
		r |= ibv_modify_qp(q[i], &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
		CHECK(r == 0, "UD QP %d to RTS", i);
	}
	static char buf[2][512];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rs = { (uintptr_t)buf[1], 40 + 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 50, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b, &rw, &rbad) == 0, "receive posted on B");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh.dgid = *gid,
				  .grh.hop_limit = 1 };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	memcpy(buf[0], "ping from A", 12);
	struct ibv_sge ss = { (uintptr_t)buf[0], 64, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 51, .sg_list = &ss, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *sbad;
	sw.wr.ud.ah = ah;
	sw.wr.ud.remote_qpn = b->qp_num;
	sw.wr.ud.remote_qkey = 0x11111111;
	CHECK(ibv_post_send(a, &sw, &sbad) == 0, "UD SEND A -> B");
	struct ibv_wc wc, rwc = { 0 };
	int got_send = 0, got_recv = 0;
	for (int i = 0; i < 2; i++) {
		if (poll_one(cq, &wc) != 1)
			break;
		if (wc.wr_id == 51)
			got_send = wc.status == IBV_WC_SUCCESS;
		if (wc.wr_id == 50) {
			rwc = wc;
			got_recv = wc.status == IBV_WC_SUCCESS;
		}
	}
	CHECK(got_send && got_recv, "send and receive complete");
	CHECK(rwc.byte_len == 40 + 64 && (rwc.wc_flags & IBV_WC_GRH) && rwc.src_qp == a->qp_num,
	      "receive: 40 + 64 bytes, GRH flag, source QP (len %u flags %#x)", rwc.byte_len,
	      rwc.wc_flags);
	CHECK(memcmp(buf[1] + 40, "ping from A", 12) == 0, "payload after the GRH area");
	static const char zero[20];
	CHECK(memcmp(buf[1], zero, 20) == 0 && (buf[1][20] >> 4) == 4,
	      "GRH area: 20 zero bytes, then an IPv4 header");
	struct ibv_ah_attr back;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &rwc, (struct ibv_grh *)buf[1], &back) == 0 &&
		      back.is_global && memcmp(&back.grh.dgid, gid, 16) == 0,
	      "ibv_init_ah_from_wc: back to the sender's GID");
	struct ibv_ah *reply = ibv_create_ah_from_wc(pd, &rwc, (struct ibv_grh *)buf[1], 1);
	CHECK(reply != NULL, "ibv_create_ah_from_wc");
	struct ibv_wc nogrh = rwc;
	nogrh.wc_flags = 0;
	CHECK(ibv_init_ah_from_wc(ctx, 1, &nogrh, (struct ibv_grh *)buf[1], &back) == -1,
	      "ibv_init_ah_from_wc without a GRH -> -1");
	/* Reply B -> A with the address handle made from the completion. */
	rs.addr = (uintptr_t)buf[0] + 256;
	rs.length = 40 + 64;
	rw.wr_id = 52;
	ibv_post_recv(a, &rw, &rbad);
	ss.addr = (uintptr_t)buf[1] + 40;
	sw.wr_id = 53;
	sw.wr.ud.ah = reply;
	sw.wr.ud.remote_qpn = rwc.src_qp;
	CHECK(ibv_post_send(b, &sw, &sbad) == 0, "UD reply B -> A");
	int replied = 0;
	for (int i = 0; i < 2; i++)
		if (poll_one(cq, &wc) == 1 && wc.wr_id == 52 && wc.status == IBV_WC_SUCCESS)
			replied = 1;
	CHECK(replied && memcmp(buf[0] + 256 + 40, "ping from A", 12) == 0,
	      "the reply arrives at A");
	/* A UD send without an address handle. */
	sw.wr.ud.ah = NULL;
	CHECK(ibv_post_send(a, &sw, &sbad) == EINVAL && sbad == &sw, "UD SEND without AH -> EINVAL");
	ibv_destroy_ah(ah);
	ibv_destroy_ah(reply);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
}

/* Completion channel: a real fd for poll(2); non-blocking when asked. */
static void events(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch && ch->fd >= 0, "completion channel with fd %d", ch ? ch->fd : -1);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	int token;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &token, ch, 0);
	struct ibv_qp *a = make_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp *b = make_qp(pd, cq, IBV_QPT_RC);
	connect_qp(a, b->qp_num, gid, 7, 1);
	connect_qp(b, a->qp_num, gid, 7, 1);

	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "channel fd made non-blocking");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN,
	      "no event yet -> -1, EAGAIN");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
	static char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge = { (uintptr_t)buf, 8, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 40, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)buf + 64;
	w.wr.rdma.rkey = mr->rkey;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "RDMA WRITE posted");
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), "poll(2) sees the channel readable");
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq && ev_ctx == &token,
	      "ibv_get_cq_event returns the CQ and its context");
	ibv_ack_cq_events(cq, 1);
	CHECK(cq->comp_events_completed == 1, "ibv_ack_cq_events counted");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "the completion");

	/* The async fd: non-blocking, nothing pending. */
	fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_async_event ae;
	int got;
	do {
		got = ibv_get_async_event(ctx, &ae);
		if (got == 0)
			ibv_ack_async_event(&ae);
	} while (got == 0);
	CHECK(got == -1 && errno == EAGAIN, "async events drained, then EAGAIN");
	fcntl(ctx->async_fd, F_SETFL, fl);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	CHECK(ibv_destroy_cq(cq) == 0, "CQ destroyed");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "channel destroyed");
	ibv_dealloc_pd(pd);
}

/* The extended CQ: start_poll on an empty CQ says ENOENT. */
static void cq_ex(struct ibv_context *ctx)
{
	struct ibv_cq_init_attr_ex cx = {
		.cqe = 8,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cx);
	CHECK(cq != NULL, "ibv_create_cq_ex");
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK(ibv_start_poll(cq, &pa) == ENOENT, "ibv_start_poll on an empty CQ -> ENOENT");
	pa.comp_mask = 4;
	CHECK(ibv_start_poll(cq, &pa) == EINVAL, "ibv_start_poll with a comp_mask -> EINVAL");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroyed");
}

#include "errors_refused.h"

int main(void)
{
	struct ibv_device **list;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&list, &gid);
	if (!ctx)
		return 1;

	bad_handles(ctx);
	limits(ctx);
	bad_attributes(ctx, &gid);
	remote_errors(ctx, &gid);
	rnr(ctx, &gid);
	srq_resize(ctx, &gid);
	ib_path(&gid);
	ud(ctx, &gid);
	events(ctx, &gid);
	cq_ex(ctx);
	refused(ctx, &gid);

	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	CHECK(ibv_close_device(ctx) == -1 && errno == EINVAL, "closed twice -> -1, EINVAL");
	errno = 0;
	CHECK(ibv_alloc_pd(ctx) == NULL && errno == EINVAL, "a closed context -> EINVAL");

	/* Closed with objects alive (perftest's client leaves its receive CQ):
	 * they can still be destroyed afterwards. */
	ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device with a PD and a CQ alive");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "the CQ and the PD are destroyed after the close");
	ibv_free_device_list(list);
	return checks_summary();
}
