/*
 * Memory windows seen from C (IBA 10.6.7; what rxe and the verbs man
 * pages promise): ibv_alloc_mw / ibv_dealloc_mw / ibv_bind_mw, binds as
 * IBV_WR_BIND_MW work requests and through ibv_wr_bind_mw, remote access
 * through a window only inside its range and rights, LOCAL_INV and
 * SEND_WITH_INV of type 2 windows, a type 2 window usable through its
 * QP only, and the refusals (type 3, zero-based type 1, deregistering a
 * region with bound windows, binds that break a rule).
 * Built with -fsanitize=address,undefined; exit status = failures.
 */
#include "memfeat.h"

#define WLEN (16 * 4096)

static struct pair p;
static char *win;		/* b's memory, lent through windows */
static char src[8192];		/* a's buffer */
static struct ibv_mr *mr_win, *mr_src;

static int st(int s)
{
	return s;
}

static int write_via(uint32_t rkey, uint64_t addr, uint32_t len)
{
	return rdma_op(p.a, p.cqa, IBV_WR_RDMA_WRITE, src, len, mr_src->lkey, addr, rkey);
}

static int read_via(uint32_t rkey, uint64_t addr, uint32_t len)
{
	return rdma_op(p.a, p.cqa, IBV_WR_RDMA_READ, src, len, mr_src->lkey, addr, rkey);
}

static void caps(void)
{
	struct ibv_device_attr d;
	CHECK(ibv_query_device(p.ctx, &d) == 0 && (d.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
		      (d.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A) &&
		      (d.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) && d.max_mw > 0,
	      "device caps: memory windows, types 2A and 2B, max_mw %d", d.max_mw);
}

static void type1(void)
{
	errno = 0;
	CHECK(ibv_alloc_mw(p.pd, 3) == NULL && errno == EINVAL, "ibv_alloc_mw(type 3) -> EINVAL");
	struct ibv_mw *mw = ibv_alloc_mw(p.pd, IBV_MW_TYPE_1);
	CHECK(mw && mw->type == IBV_MW_TYPE_1 && mw->pd == p.pd && mw->rkey != 0,
	      "ibv_alloc_mw(type 1): rkey %#x", mw ? mw->rkey : 0);
	uint32_t before = mw->rkey;
	struct ibv_mw_bind b = {
		.wr_id = 1,
		.send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr_win, .addr = (uintptr_t)win + 4096, .length = 4096,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ },
	};
	CHECK(ibv_bind_mw(p.b, mw, &b) == 0, "ibv_bind_mw(type 1)");
	CHECK(mw->rkey == ibv_inc_rkey(before), "the window takes the next key byte (%#x -> %#x)",
	      before, mw->rkey);
	struct ibv_wc wc;
	CHECK(poll_one(p.cqb, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
		      wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 1,
	      "bind completes: IBV_WC_BIND_MW, %s", ibv_wc_status_str(wc.status));

	memset(src, 0x3c, 512);
	CHECK(write_via(mw->rkey, (uintptr_t)win + 4096 + 100, 512) == IBV_WC_SUCCESS &&
		      win[4096 + 100] == 0x3c && win[4096 + 611] == 0x3c && win[4096 + 612] == 0,
	      "RDMA WRITE through the window lands");
	memset(win + 4096, 0x71, 4096);
	CHECK(read_via(mw->rkey, (uintptr_t)win + 4096, 4096) == IBV_WC_SUCCESS &&
		      src[0] == 0x71 && src[4095] == 0x71,
	      "RDMA READ of the whole window");
	CHECK(st(write_via(mw->rkey, (uintptr_t)win + 8192 - 4, 8)) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE past the window's end (inside the region) -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(st(write_via(mw->rkey ^ 0x100, (uintptr_t)win + 4096, 8)) == IBV_WC_REM_ACCESS_ERR,
	      "another window index -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* IBA 10.6.7.2.6 (rxe: EINVAL): no deregistration while bound. */
	CHECK(ibv_dereg_mr(mr_win) == EINVAL, "ibv_dereg_mr of a region with a bound window -> EINVAL");
	CHECK(write_via(mr_win->rkey, (uintptr_t)win, 8) == IBV_WC_SUCCESS,
	      "the region is still there and usable");

	/* o10-36.2.2: no zero-based type 1 window. */
	b.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
	CHECK(ibv_bind_mw(p.b, mw, &b) == EINVAL, "zero-based type 1 bind -> EINVAL");

	/* A zero-length bind unbinds: the key goes dead (pyverbs'
	 * invalidate_mw_type1). */
	uint32_t old = mw->rkey;
	struct ibv_mw_bind z = { .wr_id = 2, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = { .mr = mr_win, .addr = (uintptr_t)win } };
	CHECK(ibv_bind_mw(p.b, mw, &z) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "zero-length bind");
	CHECK(st(write_via(old, (uintptr_t)win + 4096, 8)) == IBV_WC_REM_ACCESS_ERR,
	      "the unbound window's key -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* LOCAL_INV of a type 1 window: o10-37.2.26, rxe's LOC_QP_OP_ERR. */
	CHECK(ibv_bind_mw(p.b, mw, &(struct ibv_mw_bind){ .wr_id = 3, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = { .mr = mr_win, .addr = (uintptr_t)win, .length = 64,
					       .mw_access_flags = IBV_ACCESS_REMOTE_READ } }) == 0 &&
		      poll_one(p.cqb, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "bound again");
	struct ibv_send_wr inv = { .wr_id = 4, .opcode = IBV_WR_LOCAL_INV,
				   .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = mw->rkey };
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(p.b, &inv, &bad) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_LOC_QP_OP_ERR,
	      "LOCAL_INV of a type 1 window -> local QP operation error (%s)",
	      ibv_wc_status_str(wc.status));
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(st(write_via(mw->rkey, (uintptr_t)win, 8)) == IBV_WC_REM_ACCESS_ERR,
	      "a read-only window refuses a WRITE");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* Deallocated while bound: its key dies, the region can go. */
	uint32_t k = mw->rkey;
	CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw of a bound window");
	CHECK(st(read_via(k, (uintptr_t)win, 8)) == IBV_WC_REM_ACCESS_ERR,
	      "its key -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
}

static void type2(void)
{
	struct ibv_mw *mw = ibv_alloc_mw(p.pd, IBV_MW_TYPE_2);
	CHECK(mw && mw->type == IBV_MW_TYPE_2, "ibv_alloc_mw(type 2)");
	struct ibv_mw_bind ignored = { .bind_info = { .mr = mr_win, .length = 8 } };
	CHECK(ibv_bind_mw(p.b, mw, &ignored) == EINVAL, "ibv_bind_mw of a type 2 window -> EINVAL");

	/* Bound by a work request (ibv_post_send, IBV_WR_BIND_MW). */
	uint32_t key = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr w = { .wr_id = 20, .opcode = IBV_WR_BIND_MW,
				 .send_flags = IBV_SEND_SIGNALED };
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = key;
	w.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = mr_win, .addr = (uintptr_t)win, .length = 8192,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	CHECK(ibv_post_send(p.b, &w, &bad) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "IBV_WR_BIND_MW of a type 2 window: %s", ibv_wc_status_str(wc.status));
	memset(src, 0x5e, 64);
	CHECK(write_via(key, (uintptr_t)win + 8, 64) == IBV_WC_SUCCESS && win[8] == 0x5e,
	      "WRITE through the type 2 window");
	/* A bound type 2 window is not free: binding it again fails. */
	w.wr_id = 21;
	w.bind_mw.rkey = ibv_inc_rkey(key);
	CHECK(ibv_post_send(p.b, &w, &bad) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_MW_BIND_ERR,
	      "binding a bound type 2 window -> IBV_WC_MW_BIND_ERR (%s)",
	      ibv_wc_status_str(wc.status));
	CHECK(reconnect(&p) == 0, "reconnected");

	/* LOCAL_INV frees it; the key dies. */
	struct ibv_send_wr inv = { .wr_id = 22, .opcode = IBV_WR_LOCAL_INV,
				   .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = key };
	CHECK(ibv_post_send(p.b, &inv, &bad) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
	      "LOCAL_INV of the type 2 window");
	CHECK(st(write_via(key, (uintptr_t)win + 8, 8)) == IBV_WC_REM_ACCESS_ERR,
	      "its key after LOCAL_INV -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* Bound through ibv_wr_bind_mw, invalidated by the peer's SEND_WITH_INV. */
	struct ibv_qp_ex *bx = ibv_qp_to_qp_ex(p.b);
	key = ibv_inc_rkey(key);
	struct ibv_mw_bind_info bi = { .mr = mr_win, .addr = (uintptr_t)win + 4096, .length = 4096,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	ibv_wr_start(bx);
	bx->wr_id = 23;
	bx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(bx, mw, key, &bi);
	CHECK(ibv_wr_complete(bx) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
	      "ibv_wr_bind_mw of the free type 2 window");
	CHECK(write_via(key, (uintptr_t)win + 4096, 16) == IBV_WC_SUCCESS,
	      "WRITE through it");
	static char rbuf[64];
	struct ibv_mr *mr_r = ibv_reg_mr(p.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rs = { (uintptr_t)rbuf, sizeof(rbuf), mr_r->lkey };
	struct ibv_recv_wr r = { .wr_id = 24, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(p.b, &r, &rbad) == 0, "b posts a receive");
	struct ibv_send_wr sinv = { .wr_id = 25, .opcode = IBV_WR_SEND_WITH_INV,
				    .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = key };
	CHECK(ibv_post_send(p.a, &sinv, &bad) == 0 && poll_one(p.cqa, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "a sends SEND_WITH_INV with the window's key");
	CHECK(poll_one(p.cqb, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 24 &&
		      (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == key,
	      "b's receive reports the invalidated key %#x", wc.invalidated_rkey);
	CHECK(st(write_via(key, (uintptr_t)win + 4096, 16)) == IBV_WC_REM_ACCESS_ERR,
	      "the invalidated window -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* A type 2 window works through the QP it is bound to only: bound on
	 * a, it refuses a's requests arriving at b. */
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(p.a);
	key = ibv_inc_rkey(key);
	ibv_wr_start(ax);
	ax->wr_id = 26;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(ax, mw, key, &bi);
	CHECK(ibv_wr_complete(ax) == 0 && poll_one(p.cqa, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "bound on a");
	CHECK(st(write_via(key, (uintptr_t)win + 4096, 16)) == IBV_WC_REM_ACCESS_ERR,
	      "through b (not its QP) -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(ibv_dereg_mr(mr_win) == EINVAL, "still bound: the region stays");
	CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	ibv_dereg_mr(mr_r);
}

static void bad_binds(void)
{
	/* A region without MW_BIND (C10-73): the bind fails at execution. */
	static char plain[4096];
	struct ibv_mr *mr = ibv_reg_mr(p.pd, plain, sizeof(plain), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mw *mw = ibv_alloc_mw(p.pd, IBV_MW_TYPE_1);
	struct ibv_mw_bind b = { .wr_id = 30, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = { .mr = mr, .addr = (uintptr_t)plain, .length = 64,
						.mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	struct ibv_wc wc;
	CHECK(ibv_bind_mw(p.b, mw, &b) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_MW_BIND_ERR,
	      "bind to a region without MW_BIND -> IBV_WC_MW_BIND_ERR (%s)",
	      ibv_wc_status_str(wc.status));
	CHECK(reconnect(&p) == 0, "reconnected");
	/* Outside the region (C10-75). */
	b.bind_info.mr = mr_win;
	b.bind_info.addr = (uintptr_t)win + WLEN - 8;
	CHECK(ibv_bind_mw(p.b, mw, &b) == 0 && poll_one(p.cqb, &wc) == 1 &&
		      wc.status == IBV_WC_MW_BIND_ERR,
	      "a window past the region's end -> IBV_WC_MW_BIND_ERR");
	CHECK(reconnect(&p) == 0, "reconnected");
	/* A bind carries no data (rxe's validate_send_wr). */
	struct ibv_send_wr w = { .wr_id = 31, .opcode = IBV_WR_BIND_MW, .num_sge = 1,
				 .sg_list = &(struct ibv_sge){ (uintptr_t)plain, 8, mr->lkey } };
	w.bind_mw.mw = mw;
	w.bind_mw.bind_info.mr = mr_win;
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(p.b, &w, &bad) == EINVAL && bad == &w, "IBV_WR_BIND_MW with an SGE -> EINVAL");
	ibv_dealloc_mw(mw);
	ibv_dereg_mr(mr);
}

int main(void)
{
	int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(pair_open(&p, access) == 0, "two connected RC QPs");
	win = mmap(NULL, WLEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mr_win = ibv_reg_mr(p.pd, win, WLEN,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	mr_src = ibv_reg_mr(p.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr_win && mr_src, "regions (one with MW_BIND)");
	caps();
	type1();
	type2();
	bad_binds();
	CHECK(ibv_dereg_mr(mr_win) == 0, "no window left: the region goes");
	ibv_dereg_mr(mr_src);
	munmap(win, WLEN);
	pair_close(&p);
	return checks_summary();
}
