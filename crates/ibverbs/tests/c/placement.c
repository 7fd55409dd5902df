/*
 * FLUSH and ATOMIC WRITE (IBA 1.5 Memory Placement Extensions) seen from
 * C: the device caps, the FLUSH access rights on regions and QPs (which
 * rdma-core 56's tests set on every extended QP), ibv_wr_atomic_write and
 * IBV_WR_ATOMIC_WRITE through ibv_post_send, ibv_wr_flush (rdma-core 47's
 * wr_flush, declared in memfeat.h) at both selectivity levels, a
 * persistent flush of a file mapping, and the errors.
 * Built with -fsanitize=address,undefined; exit status = failures.
 */
#include "memfeat.h"
#include <fcntl.h>

static struct pair p;
static uint64_t target[64] __attribute__((aligned(64)));
static char src[4096];

static void caps_and_rights(void)
{
	struct ibv_device_attr_ex x;
	CHECK(ibv_query_device_ex(p.ctx, NULL, &x) == 0 &&
		      (x.device_cap_flags_ex & MF_IBV_DEVICE_FLUSH_GLOBAL) &&
		      (x.device_cap_flags_ex & MF_IBV_DEVICE_FLUSH_PERSISTENT) &&
		      (x.device_cap_flags_ex & MF_IBV_DEVICE_ATOMIC_WRITE),
	      "device_cap_flags_ex: FLUSH_GLOBAL, FLUSH_PERSISTENT, ATOMIC_WRITE (%#llx)",
	      (unsigned long long)x.device_cap_flags_ex);
	static char b[64];
	struct ibv_mr *m = ibv_reg_mr(p.pd, b, sizeof(b),
				      IBV_ACCESS_LOCAL_WRITE | MF_IBV_ACCESS_FLUSH_GLOBAL |
					      MF_IBV_ACCESS_FLUSH_PERSISTENT);
	CHECK(m != NULL, "ibv_reg_mr with both FLUSH rights");
	ibv_dereg_mr(m);
	struct ibv_qp_attr a = { .qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						    MF_IBV_ACCESS_FLUSH_GLOBAL |
						    MF_IBV_ACCESS_FLUSH_PERSISTENT };
	CHECK(ibv_modify_qp(p.a, &a, IBV_QP_ACCESS_FLAGS) == 0,
	      "ibv_modify_qp with the FLUSH rights (RTS -> RTS)");
}

static int atomic_write_ex(uint64_t addr, uint32_t rkey, const void *data)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.a);
	struct ibv_wc wc;
	ibv_wr_start(x);
	x->wr_id = 40;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rkey, addr, data);
	if (ibv_wr_complete(x))
		return -1;
	if (poll_one(p.cqa, &wc) != 1)
		return -2;
	if (wc.status == IBV_WC_SUCCESS && (wc.opcode != IBV_WC_ATOMIC_WRITE || wc.byte_len != 8))
		return -3;
	return wc.status;
}

static void atomic_write(struct ibv_mr *mt)
{
	uint8_t v[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	CHECK(atomic_write_ex((uintptr_t)&target[1], mt->rkey, v) == IBV_WC_SUCCESS &&
		      memcmp(&target[1], v, 8) == 0 && target[0] == 0 && target[2] == 0,
	      "ibv_wr_atomic_write: the 8 bytes land (IBV_WC_ATOMIC_WRITE, byte_len 8)");
	/* Through ibv_post_send: the 8 bytes from the SGE. */
	static uint8_t w8[8] = { 9, 9, 9, 9, 8, 8, 8, 8 };
	struct ibv_mr *ms = ibv_reg_mr(p.pd, w8, sizeof(w8), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { (uintptr_t)w8, 8, ms->lkey };
	struct ibv_send_wr w = { .wr_id = 41, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_ATOMIC_WRITE, .send_flags = IBV_SEND_SIGNALED };
	w.wr.rdma.remote_addr = (uintptr_t)&target[3];
	w.wr.rdma.rkey = mt->rkey;
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	CHECK(ibv_post_send(p.a, &w, &bad) == 0 && poll_one(p.cqa, &wc) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE &&
		      memcmp(&target[3], w8, 8) == 0,
	      "IBV_WR_ATOMIC_WRITE through ibv_post_send");
	sge.length = 4;
	CHECK(ibv_post_send(p.a, &w, &bad) == EINVAL, "an ATOMIC WRITE of 4 bytes -> EINVAL");
	ibv_dereg_mr(ms);
	/* Misaligned: rxe's invalid request. */
	CHECK(atomic_write_ex((uintptr_t)&target[5] + 4, mt->rkey, v) == IBV_WC_REM_INV_REQ_ERR,
	      "a misaligned ATOMIC WRITE -> remote invalid request");
	CHECK(reconnect(&p) == 0, "reconnected");
	/* A region without remote write. */
	static uint64_t ro[4];
	struct ibv_mr *mr_ro = ibv_reg_mr(p.pd, ro, sizeof(ro),
					  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(atomic_write_ex((uintptr_t)ro, mr_ro->rkey, v) == IBV_WC_REM_ACCESS_ERR && ro[0] == 0,
	      "an ATOMIC WRITE into a read-only region -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	ibv_dereg_mr(mr_ro);
}

static int flush_ex(uint32_t rkey, uint64_t addr, size_t len, uint8_t type, uint8_t level)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.a);
	struct ibv_wc wc;
	ibv_wr_start(x);
	x->wr_id = 50;
	x->wr_flags = IBV_SEND_SIGNALED;
	mf_wr_flush(x, rkey, addr, len, type, level);
	if (ibv_wr_complete(x))
		return -1;
	if (poll_one(p.cqa, &wc) != 1)
		return -2;
	if (wc.status == IBV_WC_SUCCESS && (wc.opcode != MF_IBV_WC_FLUSH || wc.byte_len != len))
		return -3;
	return wc.status;
}

static void flush(void)
{
	static char g[8192];
	struct ibv_mr *mg = ibv_reg_mr(p.pd, g, sizeof(g),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       MF_IBV_ACCESS_FLUSH_GLOBAL);
	memset(src, 0x44, 1024);
	struct ibv_mr *ms = ibv_reg_mr(p.pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	CHECK(rdma_op(p.a, p.cqa, IBV_WR_RDMA_WRITE, src, 1024, ms->lkey, (uintptr_t)g, mg->rkey) ==
		      IBV_WC_SUCCESS,
	      "a WRITE before the FLUSH");
	CHECK(flush_ex(mg->rkey, (uintptr_t)g, 1024, MF_IBV_FLUSH_GLOBAL, MF_IBV_FLUSH_RANGE) ==
		      IBV_WC_SUCCESS && g[1023] == 0x44,
	      "ibv_wr_flush (global, range) -> IBV_WC_FLUSH, byte_len = length");
	CHECK(flush_ex(mg->rkey, 0, 0, MF_IBV_FLUSH_GLOBAL, MF_IBV_FLUSH_MR) == IBV_WC_SUCCESS,
	      "ibv_wr_flush (global, whole region, length 0)");
	CHECK(flush_ex(mg->rkey, 0, 12345678, MF_IBV_FLUSH_GLOBAL, MF_IBV_FLUSH_MR) == IBV_WC_SUCCESS,
	      "ibv_wr_flush (whole region): address and length do not matter");
	CHECK(flush_ex(mg->rkey, (uintptr_t)g + 8000, 1000, MF_IBV_FLUSH_GLOBAL,
		       MF_IBV_FLUSH_RANGE) == IBV_WC_REM_ACCESS_ERR,
	      "a range past the region -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	/* pyverbs' test_qp_ex_rc_flush_type_violate: persistent flush of a
	 * region with the global right only. */
	CHECK(flush_ex(mg->rkey, (uintptr_t)g, 64, MF_IBV_FLUSH_PERSISTENT, MF_IBV_FLUSH_RANGE) ==
		      IBV_WC_REM_ACCESS_ERR,
	      "a persistent flush without the region's right -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	/* A QP that lacks the right: invalid request (rxe's check_qp_attr_access). */
	p.access = IBV_ACCESS_REMOTE_WRITE;
	CHECK(reconnect(&p) == 0, "reconnected without the FLUSH rights");
	CHECK(flush_ex(mg->rkey, (uintptr_t)g, 64, MF_IBV_FLUSH_GLOBAL, MF_IBV_FLUSH_RANGE) ==
		      IBV_WC_REM_INV_REQ_ERR,
	      "a flush to a QP without the FLUSH right -> remote invalid request");
	p.access |= MF_IBV_ACCESS_FLUSH_GLOBAL | MF_IBV_ACCESS_FLUSH_PERSISTENT;
	CHECK(reconnect(&p) == 0, "reconnected");
	/* ibv_send_wr has no FLUSH fields. */
	struct ibv_send_wr w = { .wr_id = 51, .opcode = MF_IBV_WR_FLUSH };
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(p.a, &w, &bad) == EINVAL, "IBV_WR_FLUSH through ibv_post_send -> EINVAL");

	/* Persistent: a region over a file mapping; the FLUSH writes it back. */
	char path[] = "/tmp/softrdma-flushXXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0 && ftruncate(fd, 8192) == 0, "a file of 8 KiB");
	char *f = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	struct ibv_mr *mf = ibv_reg_mr(p.pd, f, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       MF_IBV_ACCESS_FLUSH_PERSISTENT);
	memset(src, 0x6b, 4096);
	CHECK(rdma_op(p.a, p.cqa, IBV_WR_RDMA_WRITE, src, 4096, ms->lkey, (uintptr_t)f + 4096,
		      mf->rkey) == IBV_WC_SUCCESS,
	      "a WRITE into the file mapping");
	CHECK(flush_ex(mf->rkey, (uintptr_t)f + 4096, 4096, MF_IBV_FLUSH_PERSISTENT,
		       MF_IBV_FLUSH_RANGE) == IBV_WC_SUCCESS,
	      "ibv_wr_flush (persistent)");
	char back[16];
	CHECK(pread(fd, back, sizeof(back), 4096) == sizeof(back) && back[0] == 0x6b,
	      "the file has the bytes");
	ibv_dereg_mr(mf);
	munmap(f, 8192);
	close(fd);
	unlink(path);
	ibv_dereg_mr(mg);
	ibv_dereg_mr(ms);
}

int main(void)
{
	int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		     MF_IBV_ACCESS_FLUSH_GLOBAL | MF_IBV_ACCESS_FLUSH_PERSISTENT;
	CHECK(pair_open(&p, access) == 0,
	      "two extended RC QPs (FLUSH, ATOMIC WRITE, BIND_MW ops) with every QP right");
	struct ibv_mr *mt = ibv_reg_mr(p.pd, target, sizeof(target),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mt != NULL, "the target region");
	caps_and_rights();
	atomic_write(mt);
	flush();
	ibv_dereg_mr(mt);
	pair_close(&p);
	return checks_summary();
}
