/*
 * On-demand paging, implicit regions, ibv_advise_mr and ibv_rereg_mr seen
 * from C. An ODP region's memory is reached when an access happens: pages
 * never touched before work, a page the program unmapped is a remote
 * access error (or a local protection error) and never a crash, and a
 * page mapped again works again. ibv_rereg_mr changes a region's rights,
 * protection domain or memory with the errors rdma-core gives.
 * Built with -fsanitize=address,undefined; exit status = failures.
 */
#include "memfeat.h"

static struct pair p;
static long page;
static char src[16384];
static struct ibv_mr *ms;

static void caps(void)
{
	struct ibv_device_attr_ex x;
	CHECK(ibv_query_device_ex(p.ctx, NULL, &x) == 0, "ibv_query_device_ex");
	uint32_t all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV |
		       MF_IBV_ODP_SUPPORT_FLUSH | MF_IBV_ODP_SUPPORT_ATOMIC_WRITE;
	CHECK((x.odp_caps.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT)) ==
			      (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
		      (x.odp_caps.per_transport_caps.rc_odp_caps & all) == all &&
		      (x.odp_caps.per_transport_caps.ud_odp_caps &
		       (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV)) ==
			      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV),
	      "odp_caps: ODP and implicit; RC every operation (%#x), UD send and receive (%#x)",
	      x.odp_caps.per_transport_caps.rc_odp_caps, x.odp_caps.per_transport_caps.ud_odp_caps);
}

static int wr(void *l, uint32_t len, uint64_t r, uint32_t rkey)
{
	return rdma_op(p.a, p.cqa, IBV_WR_RDMA_WRITE, l, len, ms->lkey, r, rkey);
}

static int rd(void *l, uint32_t len, uint64_t r, uint32_t rkey)
{
	return rdma_op(p.a, p.cqa, IBV_WR_RDMA_READ, l, len, ms->lkey, r, rkey);
}

static void odp(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND;
	char *m = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr = ibv_reg_mr(p.pd, m, 4 * page, acc);
	CHECK(mr != NULL, "ibv_reg_mr with IBV_ACCESS_ON_DEMAND over 4 pages never touched");
	memset(src, 0x2d, sizeof(src));
	CHECK(wr(src, 3 * page, (uintptr_t)m + 100, mr->rkey) == IBV_WC_SUCCESS && m[100] == 0x2d &&
		      m[3 * page + 99] == 0x2d,
	      "WRITE into pages never touched");
	CHECK(rd(src, 2 * page, (uintptr_t)m, mr->rkey) == IBV_WC_SUCCESS && src[100] == 0x2d,
	      "READ back");
	CHECK(rdma_op(p.a, p.cqa, IBV_WR_ATOMIC_FETCH_AND_ADD, src, 8, ms->lkey,
		      (uintptr_t)m + 3 * page + 256, mr->rkey) == IBV_WC_SUCCESS,
	      "FETCH_ADD on an ODP page");

	/* The program unmaps page 2: peers get errors, the program lives. */
	CHECK(munmap(m + 2 * page, page) == 0, "munmap of page 2 of the region");
	CHECK(wr(src, 64, (uintptr_t)m + 2 * page + 8, mr->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE into the unmapped page -> remote access error, no crash");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(rd(src, 2 * page, (uintptr_t)m + page, mr->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "READ across it -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(rdma_op(p.a, p.cqa, IBV_WR_ATOMIC_FETCH_AND_ADD, src, 8, ms->lkey,
		      (uintptr_t)m + 2 * page, mr->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "an atomic on it -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(rdma_op(p.a, p.cqa, IBV_WR_RDMA_WRITE, m + 2 * page, 64, mr->lkey, (uintptr_t)src,
		      ms->rkey) == IBV_WC_LOC_PROT_ERR,
	      "a local WRITE from it -> local protection error");
	CHECK(reconnect(&p) == 0, "reconnected");
	/* Mapped again: the region follows the new mapping. */
	CHECK(mmap(m + 2 * page, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0) == m + 2 * page,
	      "page 2 mapped again");
	CHECK(wr(src, 64, (uintptr_t)m + 2 * page + 8, mr->rkey) == IBV_WC_SUCCESS &&
		      m[2 * page + 8] == 0x2d,
	      "WRITE into it works again");
	/* A read-only page: readable, not writable. */
	CHECK(mprotect(m + 3 * page, page, PROT_READ) == 0, "page 3 made read-only");
	CHECK(rd(src, 64, (uintptr_t)m + 3 * page, mr->rkey) == IBV_WC_SUCCESS, "READ of it");
	CHECK(wr(src, 64, (uintptr_t)m + 3 * page, mr->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "WRITE into it -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* ibv_advise_mr. */
	struct ibv_sge s = { (uintptr_t)m, (uint32_t)(2 * page), mr->lkey };
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &s,
			    1) == 0,
	      "ibv_advise_mr(PREFETCH_WRITE, FLUSH)");
	CHECK(munmap(m + page, page) == 0, "munmap of page 1");
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &s, 1) ==
		      EFAULT,
	      "a synchronous prefetch over an unmapped page -> EFAULT");
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1) == 0,
	      "without IBV_ADVISE_MR_FLAG_FLUSH it is best effort -> 0");
	CHECK(ibv_advise_mr(p.pd, 7, 0, &s, 1) == EOPNOTSUPP, "an unknown advice -> EOPNOTSUPP");
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 4, &s, 1) == EINVAL,
	      "an unknown flag -> EINVAL");
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 0) == EINVAL,
	      "no SGE -> EINVAL");
	struct ibv_sge bad_key = { (uintptr_t)m, 8, mr->lkey ^ 0x80000000u };
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad_key, 1) == EFAULT,
	      "a key that names no region -> EFAULT");
	struct ibv_sge out = { (uintptr_t)m + 4 * page - 4, 8, mr->lkey };
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &out, 1) == EFAULT,
	      "a range past the region -> EFAULT");
	struct ibv_sge pinned = { (uintptr_t)src, 8, ms->lkey };
	CHECK(ibv_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &pinned, 1) == EINVAL,
	      "a region without on-demand paging -> EINVAL (as rxe)");
	struct ibv_pd *pd2 = ibv_alloc_pd(p.ctx);
	CHECK(ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1) == EPERM,
	      "a region of another PD -> EPERM");
	ibv_dealloc_pd(pd2);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg of the ODP region");
	munmap(m, 4 * page);
}

static void implicit(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_ON_DEMAND;
	struct ibv_mr *mr = ibv_reg_mr(p.pd, NULL, SIZE_MAX, acc);
	CHECK(mr && mr->addr == NULL && mr->length == SIZE_MAX,
	      "implicit ODP region: ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)");
	char *heap = malloc(5000);
	memset(src, 0x19, 4000);
	CHECK(wr(src, 4000, (uintptr_t)heap + 500, mr->rkey) == IBV_WC_SUCCESS && heap[500] == 0x19 &&
		      heap[4499] == 0x19,
	      "WRITE to any address through it (a malloc'd buffer)");
	free(heap);
	char *gone = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, page);
	CHECK(rd(src, 8, (uintptr_t)gone, mr->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "READ of an address nothing maps -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg of the implicit region");
	errno = 0;
	CHECK(ibv_reg_mr(p.pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "the whole address space without ON_DEMAND -> EINVAL");
	errno = 0;
	CHECK(ibv_reg_mr_iova(p.pd, NULL, SIZE_MAX, 4096, acc) == NULL && errno == EINVAL,
	      "an implicit region with an iova -> EINVAL");
}

/* Whether ibv_rereg_mr refuses `mr` the rights `access`: the kernel's
 * answer, IBV_REREG_MR_ERR_CMD with errno EINVAL. */
static int access_refused(struct ibv_mr *mr, int access)
{
	errno = 0;
	return ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, access) ==
		       IBV_REREG_MR_ERR_CMD &&
	       errno == EINVAL;
}

static void rereg(void)
{
	static char buf[8192], buf2[8192];
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(p.pd, buf, sizeof(buf), rw);
	uint32_t key = mr->rkey;
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL,
	      "no flag -> IBV_REREG_MR_ERR_CMD, EINVAL (the kernel's answer)");
	CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "an unknown flag -> IBV_REREG_MR_ERR_INPUT");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0) ==
		      IBV_REREG_MR_ERR_INPUT,
	      "a translation without an address -> IBV_REREG_MR_ERR_INPUT");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, p.pd, NULL, 0, rw) == IBV_REREG_MR_ERR_INPUT,
	      "access bits without CHANGE_ACCESS -> IBV_REREG_MR_ERR_INPUT");
	CHECK(access_refused(mr, IBV_ACCESS_REMOTE_WRITE),
	      "remote write without local write -> IBV_REREG_MR_ERR_CMD, EINVAL");
	CHECK(wr(src, 64, (uintptr_t)buf, key) == IBV_WC_SUCCESS,
	      "after the failed calls the region is unchanged");

	/* Rights: taken away, given back; the keys stay. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
			      0 &&
		      mr->rkey == key,
	      "CHANGE_ACCESS to local write only (same key)");
	CHECK(wr(src, 64, (uintptr_t)buf, key) == IBV_WC_REM_ACCESS_ERR,
	      "a remote WRITE now -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw) == 0 &&
		      wr(src, 64, (uintptr_t)buf, key) == IBV_WC_SUCCESS,
	      "given back: the WRITE lands");

	/* Another PD: the QPs of the old one cannot use it. */
	struct ibv_pd *pd2 = ibv_alloc_pd(p.ctx);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 && mr->pd == pd2,
	      "CHANGE_PD (mr->pd follows)");
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "the new PD is in use");
	CHECK(wr(src, 64, (uintptr_t)buf, key) == IBV_WC_REM_ACCESS_ERR,
	      "a QP of the old PD -> remote access error");
	CHECK(reconnect(&p) == 0, "reconnected");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, p.pd, NULL, 0, 0) == 0 &&
		      ibv_dealloc_pd(pd2) == 0,
	      "back to the first PD; the second can go");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, (struct ibv_pd *)buf2, NULL, 0, 0) ==
		      IBV_REREG_MR_ERR_CMD,
	      "a PD that is not one -> IBV_REREG_MR_ERR_CMD");

	/* New memory: new keys; the old key and memory are left alone. */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, 4096, 0) == 0 &&
		      mr->addr == buf2 && mr->length == 4096 && mr->rkey != key &&
		      mr->lkey == mr->rkey,
	      "CHANGE_TRANSLATION: addr, length and keys follow (%#x -> %#x)", key, mr->rkey);
	memset(src, 0x48, 64);
	memset(buf, 0, sizeof(buf));
	CHECK(wr(src, 64, (uintptr_t)buf2 + 64, mr->rkey) == IBV_WC_SUCCESS && buf2[64] == 0x48,
	      "WRITE with the new key lands in the new memory");
	CHECK(wr(src, 64, (uintptr_t)buf, key) == IBV_WC_REM_ACCESS_ERR && buf[0] == 0,
	      "the old key -> remote access error, the old memory untouched");
	CHECK(reconnect(&p) == 0, "reconnected");

	/* With a window bound it cannot change. */
	struct ibv_mr *mb = ibv_reg_mr(p.pd, buf, sizeof(buf), rw | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(p.pd, IBV_MW_TYPE_1);
	struct ibv_wc wc;
	CHECK(ibv_bind_mw(p.b, mw, &(struct ibv_mw_bind){ .wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = { .mr = mb, .addr = (uintptr_t)buf, .length = 64,
					       .mw_access_flags = IBV_ACCESS_REMOTE_READ } }) == 0 &&
		      poll_one(p.cqb, &wc) == 1 && wc.status == IBV_WC_SUCCESS,
	      "a window bound to a region");
	CHECK(access_refused(mb, rw),
	      "rereg of a region with a bound window -> IBV_REREG_MR_ERR_CMD, EINVAL");
	ibv_dealloc_mw(mw);
	ibv_dereg_mr(mb);
	ibv_dereg_mr(mr);
}

int main(void)
{
	page = sysconf(_SC_PAGESIZE);
	int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(pair_open(&p, access) == 0, "two connected RC QPs");
	ms = ibv_reg_mr(p.pd, src, sizeof(src),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	caps();
	odp();
	implicit();
	rereg();
	ibv_dereg_mr(ms);
	pair_close(&p);
	return checks_summary();
}
