/*
 * XRC through libibverbs.so.1 (AddressSanitizer, UBSan): ibv_open_xrcd with
 * its file sharing and oflags, ibv_close_xrcd, XRC SRQs (ibv_create_srq_ex,
 * ibv_get_srq_num), XRC INI and TGT QPs (ibv_create_qp_ex, their modify
 * masks, ibv_open_qp, ibv_query_qp), SENDs, WRITE, READ and atomics through
 * wr.qp_type.xrc.remote_srqn and ibv_wr_set_xrc_srqn, completions on each
 * SRQ's CQ, an SRQ number nobody has, and what holds what. One device
 * (its address in SOFTRDMA_ADDR); INI and TGT QPs of it talk to each
 * other. One line per check; the exit status is the number of failures.
 */
/* The pair helpers of memfeat.h are not used here: only CHECK and poll_one. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "memfeat.h"
#pragma GCC diagnostic pop
#include <fcntl.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static char *buf;
static struct ibv_mr *mr;
enum { BUF = 1 << 20 };

static int qp_to_rts(struct ibv_qp *qp, uint32_t dest, int all_fields)
{
	const struct rc_opts o = {
		.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC,
		.rd_atomic = 4,
		.rnr_retry = 7,
		.min_rnr_timer = 1,
	};
	/* pyverbs and most programs pass every field; the kernel drops what
	 * a type has no use for (uverbs' modify_qp_mask). */
	int rtr = all_fields || qp->qp_type == IBV_QPT_XRC_RECV ? RC_RTR_MORE : 0;
	int rts = all_fields || qp->qp_type == IBV_QPT_XRC_SEND ? RC_RTS_MORE : 0;
	return qp_connect(qp, dest, &gid, &o, 77, rtr, rts);
}

static struct ibv_srq *xrc_srq(struct ibv_xrcd *x, struct ibv_cq *cq, int mask)
{
	struct ibv_srq_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 64;
	a.attr.max_sge = 1;
	a.comp_mask = mask;
	a.srq_type = IBV_SRQT_XRC;
	a.pd = pd;
	a.xrcd = x;
	a.cq = cq;
	return ibv_create_srq_ex(ctx, &a);
}

static struct ibv_qp *tgt_qp(struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = x;
	return ibv_create_qp_ex(ctx, &a);
}

static struct ibv_qp *ini_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = cq;
	a.recv_cq = cq;
	a.cap.max_send_wr = 32;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_wr = 16; /* ignored: an INI QP has no receive queue */
	a.cap.max_inline_data = 64;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	return ibv_create_qp_ex(ctx, &a);
}

static int post_recv(struct ibv_srq *s, uint64_t id, size_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)(buf + off), len, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_srq_recv(s, &wr, &bad);
}

/* One signaled request from `qp` to XRC SRQ `srqn`; returns the status of
 * its completion on `cq` (-1 posting failed, -2 no completion). */
static int xrc_op(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, uint32_t srqn,
		  size_t off, uint32_t len, uint64_t raddr, uint32_t rkey, uint64_t add)
{
	struct ibv_sge sge = { (uintptr_t)(buf + off), len, mr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 0x77;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htobe32(0xabcd0000 | len);
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = add;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	wr.qp_type.xrc.remote_srqn = srqn;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	if (poll_one(cq, &wc) != 1)
		return -2;
	return wc.status;
}

static void xrcd_sharing(void)
{
	char path[] = "/tmp/softrdma-xrc-XXXXXX";
	int fd = mkstemp(path);
	int fd2 = open(path, O_RDONLY);
	CHECK(fd >= 0 && fd2 >= 0, "a file for the XRC domain");
	struct ibv_xrcd_init_attr a = { .comp_mask = 0 };
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &a) && errno == EINVAL, "no FD/OFLAGS in comp_mask: EINVAL");
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | IBV_XRCD_INIT_ATTR_RESERVED;
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &a) && errno == EOPNOTSUPP, "a reserved comp_mask bit: EOPNOTSUPP");
	a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	a.fd = fd;
	a.oflags = 0;
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &a) && errno == EAGAIN, "no domain for the file, no O_CREAT: EAGAIN");
	a.fd = 9999;
	a.oflags = O_CREAT;
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &a) && errno == EBADF, "a closed descriptor: EBADF");
	a.fd = fd;
	struct ibv_xrcd *x1 = ibv_open_xrcd(ctx, &a);
	CHECK(x1 && x1->context == ctx, "O_CREAT makes the file's domain");
	a.fd = fd2;
	a.oflags = O_CREAT | O_EXCL;
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &a) && errno == EINVAL, "O_EXCL with a domain for the inode: EINVAL");
	a.oflags = 0;
	struct ibv_xrcd *x2 = ibv_open_xrcd(ctx, &a);
	CHECK(x2 && x2 != x1, "another descriptor of the file: a new handle");

	/* One domain: an SRQ made through x1 takes what a TGT QP made
	 * through x2 receives. */
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_srq *srq = xrc_srq(x1, rcq,
				      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
					      IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ);
	struct ibv_qp *tgt = tgt_qp(x2);
	struct ibv_qp *ini = ini_qp(scq);
	uint32_t n = 0;
	CHECK(srq && tgt && ini && !ibv_get_srq_num(srq, &n) && n, "SRQ %u via one handle, TGT via the other", n);
	CHECK(!qp_to_rts(ini, tgt->qp_num, 0) && !qp_to_rts(tgt, ini->qp_num, 0), "INI and TGT to RTS");
	CHECK(!post_recv(srq, 5, 4096, 64), "a receive in the SRQ");
	strcpy(buf, "shared domain");
	CHECK(xrc_op(ini, scq, IBV_WR_SEND, n, 0, 14, 0, 0, 0) == IBV_WC_SUCCESS, "SEND to the SRQ");
	struct ibv_wc wc;
	CHECK(poll_one(rcq, &wc) == 1 && wc.wr_id == 5 && wc.qp_num == tgt->qp_num &&
		      !strcmp(buf + 4096, "shared domain"),
	      "it landed through the shared domain");
	CHECK(ibv_close_xrcd(x1) == EBUSY, "close of the handle its SRQ came from: EBUSY");
	CHECK(ibv_close_xrcd(x2) == EBUSY, "close of the handle its TGT QP came from: EBUSY");
	CHECK(!ibv_destroy_qp(ini) && !ibv_destroy_qp(tgt) && !ibv_destroy_srq(srq), "destroyed");
	CHECK(!ibv_close_xrcd(x1) && !ibv_close_xrcd(x2), "both handles close");
	/* The domain went with the last handle: O_CREAT needed again. */
	a.fd = fd;
	a.oflags = 0;
	errno = 0;
	CHECK(!ibv_open_xrcd(ctx, &a) && errno == EAGAIN, "the domain is gone with its last handle");
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	close(fd);
	close(fd2);
	unlink(path);
}

static void traffic(void)
{
	struct ibv_xrcd_init_attr a = { IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, -1, 0 };
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &a);
	CHECK(x != NULL, "an unshared domain (fd -1)");
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cq0 = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cq1 = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	errno = 0;
	CHECK(!xrc_srq(x, cq0, IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD) &&
		      errno == EINVAL,
	      "an XRC SRQ without its CQ: EINVAL");
	int mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
		   IBV_SRQ_INIT_ATTR_CQ;
	struct ibv_srq *s0 = xrc_srq(x, cq0, mask), *s1 = xrc_srq(x, cq1, mask);
	uint32_t n0 = 0, n1 = 0;
	CHECK(s0 && s1 && !ibv_get_srq_num(s0, &n0) && !ibv_get_srq_num(s1, &n1) && n0 && n1 &&
		      n0 != n1 && n0 < (1 << 24),
	      "two XRC SRQs, numbers %#x and %#x", n0, n1);
	CHECK(ibv_destroy_cq(cq0) == EBUSY, "an SRQ's CQ is in use");
	struct ibv_srq_init_attr basic = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *b = ibv_create_srq(pd, &basic);
	uint32_t nb;
	CHECK(b && ibv_get_srq_num(b, &nb) == EOPNOTSUPP, "a basic SRQ has no number");
	/* SRQ resize (rdma-core's test_srq.test_resize_srq, which passes on rxe) */
	struct ibv_device_attr da;
	struct ibv_srq_attr sz = { .max_wr = 8 }, got = { 0 };
	CHECK(!ibv_query_device(ctx, &da) && (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) &&
		      !ibv_modify_srq(b, &sz, IBV_SRQ_MAX_WR) && !ibv_query_srq(b, &got) &&
		      got.max_wr >= 8,
	      "IBV_DEVICE_SRQ_RESIZE: ibv_modify_srq(IBV_SRQ_MAX_WR) 4 -> %u", got.max_wr);
	sz.max_wr = 0;
	CHECK(ibv_modify_srq(b, &sz, IBV_SRQ_MAX_WR) == EINVAL, "a depth of 0: EINVAL");
	ibv_destroy_srq(b);

	/* QPs: a TGT QP needs its domain; ibv_create_qp cannot make one. */
	struct ibv_qp_init_attr_ex e;
	memset(&e, 0, sizeof(e));
	e.qp_type = IBV_QPT_XRC_RECV;
	errno = 0;
	CHECK(!ibv_create_qp_ex(ctx, &e) && errno == EINVAL, "a TGT QP without IBV_QP_INIT_ATTR_XRCD: EINVAL");
	struct ibv_qp_init_attr plain = { .send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_XRC_RECV };
	errno = 0;
	CHECK(!ibv_create_qp(pd, &plain) && errno == EINVAL, "ibv_create_qp of a TGT QP: EINVAL");
	struct ibv_qp *tgt = tgt_qp(x);
	struct ibv_qp *ini = ini_qp(scq);
	CHECK(tgt && ini && tgt->qp_type == IBV_QPT_XRC_RECV && ini->qp_type == IBV_QPT_XRC_SEND,
	      "TGT and INI QPs");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(!ibv_query_qp(ini, &qa, 0, &qi) && qi.cap.max_recv_wr == 0, "an INI QP has no receive queue");
	CHECK(!qp_to_rts(ini, tgt->qp_num, 1) && !qp_to_rts(tgt, ini->qp_num, 1),
	      "both to RTS, every field passed");
	CHECK(!ibv_query_qp(tgt, &qa, IBV_QP_STATE, &qi) && qa.qp_state == IBV_QPS_RTS &&
		      qi.qp_type == IBV_QPT_XRC_RECV,
	      "query of the TGT QP");
	struct ibv_recv_wr rw = { .wr_id = 1 }, *rbad;
	CHECK(ibv_post_recv(ini, &rw, &rbad) != 0, "post_recv on an INI QP fails");

	for (int i = 0; i < 8; i++)
		CHECK(!post_recv(i % 2 ? s1 : s0, 100 + i, 65536 + i * 4096, 4096), "receive %d", i);
	for (int i = 0; i < 8; i++) {
		int len = 100 + i * 500;
		for (int k = 0; k < len; k++)
			buf[k] = (char)(k * 7 + i);
		int st = xrc_op(ini, scq, i == 3 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, i % 2 ? n1 : n0,
				0, len, 0, 0, 0);
		struct ibv_wc wc;
		int got = poll_one(i % 2 ? cq1 : cq0, &wc);
		int same = 1;
		for (int k = 0; k < len; k++)
			same &= buf[65536 + (wc.wr_id - 100) * 4096 + k] == (char)(k * 7 + i);
		CHECK(st == IBV_WC_SUCCESS && got == 1 && wc.status == IBV_WC_SUCCESS &&
			      wc.byte_len == (uint32_t)len && wc.qp_num == tgt->qp_num && same &&
			      (wc.wr_id - 100) % 2 == (uint64_t)(i % 2) &&
			      (i != 3 || (wc.wc_flags & IBV_WC_WITH_IMM)),
		      "SEND %d (%d bytes) to SRQ %d: in its WQE, on its CQ", i, len, i % 2);
	}
	/* WRITE, READ, FetchAdd: keys of the SRQ's PD. */
	strcpy(buf, "written over XRC");
	CHECK(xrc_op(ini, scq, IBV_WR_RDMA_WRITE, n1, 0, 17, (uintptr_t)buf + 900000, mr->rkey, 0) ==
			      IBV_WC_SUCCESS &&
		      !strcmp(buf + 900000, "written over XRC"),
	      "RDMA WRITE");
	memset(buf + 800000, 0x5a, 3000);
	CHECK(xrc_op(ini, scq, IBV_WR_RDMA_READ, n0, 500000, 3000, (uintptr_t)buf + 800000, mr->rkey,
		     0) == IBV_WC_SUCCESS &&
		      !memcmp(buf + 500000, buf + 800000, 3000),
	      "RDMA READ (3 responses)");
	uint64_t *ctr = (uint64_t *)(buf + 700000);
	*ctr = 10;
	CHECK(xrc_op(ini, scq, IBV_WR_ATOMIC_FETCH_AND_ADD, n0, 600000, 8, (uintptr_t)ctr, mr->rkey,
		     5) == IBV_WC_SUCCESS &&
		      *ctr == 15 && *(uint64_t *)(buf + 600000) == 10,
	      "FetchAdd");
	/* The extended post API. */
	CHECK(!post_recv(s1, 200, 4096, 64), "one more receive");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
	strcpy(buf, "via ibv_wr");
	ibv_wr_start(qx);
	qx->wr_id = 0x99;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, n1);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 11);
	CHECK(ibv_wr_complete(qx) == 0, "ibv_wr_send + ibv_wr_set_xrc_srqn");
	struct ibv_wc wc;
	CHECK(poll_one(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && poll_one(cq1, &wc) == 1 &&
		      wc.wr_id == 200 && !strcmp(buf + 4096, "via ibv_wr"),
	      "it landed in SRQ 1");

	/* ibv_open_qp: a second handle; the QP outlives the first. */
	struct ibv_qp_open_attr oa = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
						    IBV_QP_OPEN_ATTR_TYPE,
				       .qp_num = tgt->qp_num, .xrcd = x, .qp_type = IBV_QPT_XRC_RECV };
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	CHECK(opened && opened != tgt && opened->qp_num == tgt->qp_num, "ibv_open_qp");
	oa.qp_num ^= 1;
	errno = 0;
	CHECK(!ibv_open_qp(ctx, &oa) && errno == EINVAL, "a number with no TGT QP: EINVAL");
	CHECK(!ibv_destroy_qp(tgt), "the creator's handle destroyed");
	CHECK(!post_recv(s0, 201, 4096, 64), "one more receive");
	strcpy(buf, "still there");
	CHECK(xrc_op(ini, scq, IBV_WR_SEND, n0, 0, 12, 0, 0, 0) == IBV_WC_SUCCESS &&
		      poll_one(cq0, &wc) == 1 && wc.wr_id == 201 && !strcmp(buf + 4096, "still there"),
	      "the opened handle keeps the TGT QP");
	/* A number no SRQ of the domain has: invalid request. */
	uint32_t bad = (n0 + 1) & 0xffffff;
	if (bad == n1 || bad == 0)
		bad = (n1 + 1) & 0xffffff;
	CHECK(xrc_op(ini, scq, IBV_WR_SEND, bad, 0, 4, 0, 0, 0) == IBV_WC_REM_INV_REQ_ERR,
	      "an unknown XRC SRQ number: remote invalid request");
	CHECK(ibv_close_xrcd(x) == EBUSY, "the domain is in use");
	CHECK(!ibv_destroy_qp(opened) && !ibv_destroy_qp(ini), "QPs destroyed");
	CHECK(!ibv_destroy_srq(s0) && !ibv_destroy_srq(s1) && !ibv_destroy_cq(cq0) &&
		      !ibv_destroy_cq(cq1) && !ibv_destroy_cq(scq) && !ibv_close_xrcd(x),
	      "everything freed in order");
}

int main(void)
{
	ctx = open_device_or_exit();
	struct ibv_device_attr da;
	CHECK(ctx && !ibv_query_gid(ctx, 1, 0, &gid) && !ibv_query_device(ctx, &da) &&
		      (da.device_cap_flags & IBV_DEVICE_XRC),
	      "IBV_DEVICE_XRC");
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, BUF);
	mr = ibv_reg_mr(pd, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(pd && mr, "PD and region");
	xrcd_sharing();
	traffic();
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return checks_summary();
}
