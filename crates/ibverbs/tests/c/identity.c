/*
 * What a program sees of softrdma's device beyond the basic verbs: its
 * identity (vendor ID, GUIDs), the command descriptor and the imports it
 * allows (ibv_import_device/pd/mr, ibv_unimport_*), thread and parent
 * domains with the program's allocators, and extended CQs with completion
 * timestamps (ibv_query_rt_values_ex, hca_core_clock).
 *
 * Built against Debian's <infiniband/verbs.h> with
 * -fsanitize=address,undefined and run over softrdma's libibverbs.so.1
 * (crates/ibverbs/tests/identity.rs). Every check prints one line; the
 * exit status is the number of failures.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checks.h"

static uint64_t now_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}


static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.srq = srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = srq ? 0 : 16,
			 .max_send_sge = 1, .max_recv_sge = srq ? 0 : 1 },
		.qp_type = IBV_QPT_RC,
	};
	return ibv_create_qp(pd, &a);
}

/* INIT -> RTR -> RTS towards `dest` on the same device. */
static int connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct rc_opts o = { .access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
			     .rd_atomic = 1,
			     .rnr_retry = 7,
			     .min_rnr_timer = 1 };
	return rc_connect(qp, dest, gid, &o);
}

/* RDMA WRITE of `len` bytes from (lkey, src) to (rkey, dst) on `qp`. */
static int write_and_wait(struct ibv_qp *qp, struct ibv_cq *cq, void *src, uint32_t lkey,
			  void *dst, uint32_t rkey, uint32_t len, struct ibv_wc *wc)
{
	struct ibv_sge sge = { (uintptr_t)src, len, lkey };
	struct ibv_send_wr w = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	w.wr.rdma.remote_addr = (uintptr_t)dst;
	w.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &w, &bad))
		return -1;
	return poll_one(cq, wc) == 1 && wc->status == IBV_WC_SUCCESS ? 0 : -2;
}

/* ------------------------------------------------------------ identity -- */

static void identity(struct ibv_context *ctx, const char *want_vendor)
{
	struct ibv_device_attr a;
	CHECK(ibv_query_device(ctx, &a) == 0, "ibv_query_device");
	unsigned long want = strtoul(want_vendor, NULL, 0);
	CHECK(a.vendor_id == want && a.vendor_id != 0, "vendor_id %#x (want %#lx)", a.vendor_id,
	      want);
	CHECK(a.node_guid != 0 && a.sys_image_guid == a.node_guid, "node and system image GUIDs");
	CHECK(ibv_get_device_guid(ctx->device) == a.node_guid, "ibv_get_device_guid = node_guid");
	struct ibv_device_attr_ex x;
	CHECK(ibv_query_device_ex(ctx, NULL, &x) == 0 && x.orig_attr.vendor_id == a.vendor_id &&
		      x.phys_port_cnt_ex == 1 &&
		      (uint32_t)x.device_cap_flags_ex == (uint32_t)a.device_cap_flags,
	      "ibv_query_device_ex: the same identity, one port, device_cap_flags_ex "
	      "(its low 32 bits; the high ones are FLUSH/ATOMIC_WRITE caps)");
	CHECK(x.hca_core_clock == 1000000 && x.completion_timestamp_mask == UINT64_MAX,
	      "a 1 GHz, 64-bit completion clock (hca_core_clock %lu kHz)",
	      (unsigned long)x.hca_core_clock);

	/* cmd_fd is a descriptor of its own, closed on exec. */
	struct stat st;
	CHECK(ctx->cmd_fd >= 0 && fstat(ctx->cmd_fd, &st) == 0, "cmd_fd %d is open", ctx->cmd_fd);
	CHECK(fcntl(ctx->cmd_fd, F_GETFD) & FD_CLOEXEC, "cmd_fd is close-on-exec");
	struct ibv_context *other = ibv_open_device(ctx->device);
	struct stat st2;
	CHECK(other && fstat(other->cmd_fd, &st2) == 0 && st2.st_ino != st.st_ino,
	      "another context has another command file");
	ibv_close_device(other);
}

/* ------------------------------------------------------------- imports -- */

static void imports(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096], peer[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(pd && mr, "PD and MR to share");

	errno = 0;
	CHECK(ibv_import_device(-1) == NULL && errno == EBADF, "ibv_import_device(-1) -> EBADF");
	int nul = open("/dev/null", O_RDONLY);
	errno = 0;
	CHECK(ibv_import_device(nul) == NULL && errno == EINVAL,
	      "ibv_import_device(/dev/null) -> EINVAL");
	CHECK(fcntl(nul, F_GETFD) != -1, "a refused descriptor stays open");
	close(nul);

	int fd = dup(ctx->cmd_fd);
	CHECK(fd >= 0, "dup(cmd_fd)");
	/* A child after fork has a copy of the context, not its engine. */
	pid_t child = fork();
	if (child == 0) {
		errno = 0;
		struct ibv_context *c = ibv_import_device(fd);
		_exit(c == NULL && errno == EOPNOTSUPP ? 0 : 1);
	}
	int status = -1;
	waitpid(child, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "another process cannot import it -> EOPNOTSUPP");

	struct ibv_context *ic = ibv_import_device(fd);
	CHECK(ic != NULL && ic->cmd_fd == fd && ic->device == ctx->device,
	      "ibv_import_device(dup(cmd_fd)): a context on the same device, owning the descriptor");
	if (!ic)
		return;
	errno = 0;
	CHECK(ibv_import_pd(ic, pd->handle + 1000) == NULL && errno == EINVAL,
	      "ibv_import_pd(unknown handle) -> EINVAL");
	struct ibv_pd *ipd = ibv_import_pd(ic, pd->handle);
	CHECK(ipd && ipd->context == ic && ipd->handle == pd->handle, "ibv_import_pd");
	struct ibv_mr *imr = ipd ? ibv_import_mr(ipd, mr->handle) : NULL;
	CHECK(imr && imr->addr == NULL && imr->length == mr->length && imr->lkey == mr->lkey &&
		      imr->rkey == mr->rkey && imr->pd == ipd && imr->context == ic,
	      "ibv_import_mr: same keys and length, addr NULL");
	if (!ipd || !imr)
		return;

	/* The imported context's QP, in the imported PD, writes from the
	 * imported region into a region of the original PD. */
	struct ibv_cq *cqa = ibv_create_cq(ic, 16, NULL, NULL, 0);
	struct ibv_cq *cqb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *qa = make_qp(ipd, cqa, NULL);
	struct ibv_qp *qb = make_qp(pd, cqb, NULL);
	CHECK(qa && qb && connect_qp(qa, qb->qp_num, gid) == 0 &&
		      connect_qp(qb, qa->qp_num, gid) == 0,
	      "a QP of each context, connected");
	struct ibv_mr *pm = ibv_reg_mr(pd, peer, sizeof(peer),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(buf, 0x3c, 256);
	struct ibv_wc wc;
	CHECK(write_and_wait(qa, cqa, buf, imr->lkey, peer, pm->rkey, 256, &wc) == 0 &&
		      peer[0] == 0x3c && peer[255] == 0x3c && peer[256] == 0,
	      "RDMA WRITE with the imported MR's lkey lands");
	memset(peer, 0x61, 64);
	CHECK(write_and_wait(qb, cqb, peer, pm->lkey, buf, imr->rkey, 64, &wc) == 0 &&
		      buf[0] == 0x61 && buf[63] == 0x61,
	      "RDMA WRITE to the imported MR's rkey lands");

	/* Unimport frees the handle only; dereg through an imported MR
	 * deregisters the region. */
	ibv_unimport_mr(imr);
	CHECK(write_and_wait(qb, cqb, peer, pm->lkey, buf, mr->rkey, 64, &wc) == 0,
	      "after ibv_unimport_mr the region is still registered");
	struct ibv_mr *imr2 = ibv_import_mr(ipd, mr->handle);
	CHECK(imr2 && ibv_dereg_mr(imr2) == 0, "ibv_dereg_mr of an imported MR");
	CHECK(write_and_wait(qb, cqb, peer, pm->lkey, buf, mr->rkey, 64, &wc) == -2 &&
		      wc.status == IBV_WC_REM_ACCESS_ERR,
	      "deregistered: a WRITE to its rkey -> IBV_WC_REM_ACCESS_ERR (got %s)",
	      ibv_wc_status_str(wc.status));
	CHECK(ibv_dereg_mr(mr) == 0, "the original handle is then freed");

	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(cqa);
	ibv_destroy_cq(cqb);
	ibv_dereg_mr(pm);
	ibv_unimport_pd(ipd);
	CHECK(ibv_dealloc_pd(pd) == 0, "the original PD after ibv_unimport_pd");
	CHECK(ibv_close_device(ic) == 0, "ibv_close_device(imported)");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "closing it closed the descriptor");
	struct ibv_pd *still = ibv_alloc_pd(ctx);
	CHECK(still != NULL && ibv_dealloc_pd(still) == 0, "the original context still works");
}

/* ------------------------------------------------------------- domains -- */

#define MAX_BLOCKS 16
static struct {
	int allocs, frees, defaults, fail;
	void *ptr[MAX_BLOCKS];
	size_t size[MAX_BLOCKS];
	uint64_t type[MAX_BLOCKS];
	size_t align;
	void *pd_context;
	struct ibv_pd *pd;
} A;

static void *my_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
		      uint64_t resource_type)
{
	if (A.fail)
		return NULL;
	if (A.defaults) {
		A.defaults++;
		return IBV_ALLOCATOR_USE_DEFAULT;
	}
	void *p = NULL;
	if (posix_memalign(&p, alignment, size))
		return NULL;
	memset(p, 0, size);
	A.ptr[A.allocs % MAX_BLOCKS] = p;
	A.size[A.allocs % MAX_BLOCKS] = size;
	A.type[A.allocs % MAX_BLOCKS] = resource_type;
	A.align = alignment;
	A.pd_context = pd_context;
	A.pd = pd;
	A.allocs++;
	return p;
}

static void my_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	(void)pd;
	(void)pd_context;
	(void)resource_type;
	A.frees++;
	free(ptr);
}

static int inside(void *obj, int i)
{
	char *p = A.ptr[i];
	return (char *)obj >= p && (char *)obj < p + A.size[i];
}

static void domains(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_td_init_attr ta = { .comp_mask = 1 };
	errno = 0;
	CHECK(ibv_alloc_td(ctx, &ta) == NULL && errno == EINVAL, "ibv_alloc_td(comp_mask 1) -> EINVAL");
	ta.comp_mask = 0;
	struct ibv_td *td = ibv_alloc_td(ctx, &ta);
	CHECK(td && td->context == ctx, "ibv_alloc_td");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	int cookie = 42;
	struct ibv_parent_domain_init_attr pa = {
		.pd = pd,
		.td = td,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
			     IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = my_alloc,
		.free = my_free,
		.pd_context = &cookie,
	};
	struct ibv_parent_domain_init_attr bad = pa;
	bad.pd = NULL;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL,
	      "parent domain without a PD -> EINVAL");
	bad = pa;
	bad.comp_mask |= 1 << 7;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL,
	      "parent domain with an unknown comp_mask bit -> EINVAL");
	struct ibv_pd *par = ibv_alloc_parent_domain(ctx, &pa);
	CHECK(par && par->context == ctx, "ibv_alloc_parent_domain with allocators and a TD");
	if (!par)
		return;
	bad.pd = par;
	bad.comp_mask = 0;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL,
	      "a parent domain of a parent domain -> EINVAL");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "its PD -> EBUSY while the parent domain lives");
	CHECK(ibv_dealloc_td(td) == EBUSY, "its TD -> EBUSY while the parent domain lives");

	/* A CQ, an SRQ and a QP in the parent domain: their structures come
	 * from the program's allocator. */
	struct ibv_cq_init_attr_ex cx = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS,
					  .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD,
					  .parent_domain = pd };
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cx) == NULL && errno == EINVAL,
	      "a CQ in a plain PD as parent domain -> EINVAL");
	cx.parent_domain = par;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cx);
	CHECK(cq && A.allocs == 1 && A.type[0] == 2 && inside(cq, 0) && A.align == 64 &&
		      A.pd == par && A.pd_context == &cookie,
	      "CQ: its structure from alloc(pd, pd_context, %zu, %zu, type %lu)", A.size[0],
	      A.align, (unsigned long)A.type[0]);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(par, &sa);
	CHECK(srq && A.allocs == 2 && A.type[1] == 3 && inside(srq, 1) && srq->pd == par,
	      "SRQ: its structure from the allocator (type %lu)", (unsigned long)A.type[1]);
	struct ibv_qp *qp = make_qp(par, ibv_cq_ex_to_cq(cq), srq);
	CHECK(qp && A.allocs == 3 && A.type[2] == 1 && inside(qp, 2) && qp->pd == par,
	      "QP: its structure from the allocator (type %lu)", (unsigned long)A.type[2]);
	struct ibv_mr *mr = NULL;
	static char buf[4096];
	if (qp) {
		/* Traffic through the placed objects: a peer QP SENDs into the
		 * SRQ of the parent domain's QP. */
		mr = ibv_reg_mr(par, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
		CHECK(mr && mr->pd == par, "ibv_reg_mr in the parent domain");
		struct ibv_cq *pcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp *peer = make_qp(pd, pcq, NULL);
		CHECK(connect_qp(qp, peer->qp_num, gid) == 0 &&
			      connect_qp(peer, qp->qp_num, gid) == 0,
		      "connected to a peer");
		struct ibv_sge rs = { (uintptr_t)buf, 128, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = &rs, .num_sge = 1 }, *rbad;
		CHECK(ibv_post_srq_recv(srq, &rw, &rbad) == 0, "receive posted on the SRQ");
		static char src[128];
		memset(src, 0x77, sizeof(src));
		struct ibv_mr *sm = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge ss = { (uintptr_t)src, 128, sm->lkey };
		struct ibv_send_wr sw = { .wr_id = 6, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		struct ibv_wc wc;
		CHECK(ibv_post_send(peer, &sw, &sbad) == 0 && poll_one(pcq, &wc) == 1 &&
			      wc.status == IBV_WC_SUCCESS,
		      "the peer's SEND completes");
		CHECK(poll_one(ibv_cq_ex_to_cq(cq), &wc) == 1 && wc.wr_id == 5 &&
			      wc.status == IBV_WC_SUCCESS && wc.byte_len == 128 && buf[127] == 0x77,
		      "received through the placed SRQ, QP and CQ");
		ibv_destroy_qp(peer);
		ibv_destroy_cq(pcq);
		ibv_dereg_mr(sm);
	}
	CHECK(ibv_dealloc_pd(par) == EBUSY, "the parent domain -> EBUSY while objects use it");
	int frees = A.frees;
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_srq(srq) == 0 &&
		      ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0 && A.frees == frees + 3,
	      "destroying them gives the 3 blocks back to free");
	ibv_dereg_mr(mr);

	/* IBV_ALLOCATOR_USE_DEFAULT: our memory; NULL: ENOMEM. */
	A.defaults = 1;
	struct ibv_cq_ex *cq2 = ibv_create_cq_ex(ctx, &cx);
	CHECK(cq2 && A.defaults == 2 && A.allocs == 3, "IBV_ALLOCATOR_USE_DEFAULT: our own memory");
	frees = A.frees;
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq2)) == 0 && A.frees == frees,
	      "and free is not called for it");
	A.defaults = 0;
	A.fail = 1;
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cx) == NULL && errno == ENOMEM, "alloc returns NULL -> ENOMEM");
	A.fail = 0;

	CHECK(ibv_dealloc_pd(par) == 0, "ibv_dealloc_pd(parent domain)");
	CHECK(ibv_dealloc_td(td) == 0 && ibv_dealloc_pd(pd) == 0, "then its TD and PD");

	/* A parent domain without allocators: our memory. */
	pd = ibv_alloc_pd(ctx);
	struct ibv_parent_domain_init_attr plain = { .pd = pd };
	par = ibv_alloc_parent_domain(ctx, &plain);
	cx.parent_domain = par;
	cq2 = ibv_create_cq_ex(ctx, &cx);
	CHECK(par && cq2 && A.allocs == 3, "a parent domain without allocators");
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq2));
	ibv_dealloc_pd(par);
	ibv_dealloc_pd(pd);
}

/* ---------------------------------------------------------- timestamps -- */

static void timestamps(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_values_ex v = { .comp_mask = 2 };
	CHECK(ibv_query_rt_values_ex(ctx, &v) == EINVAL, "ibv_query_rt_values_ex(unknown mask) -> EINVAL");
	struct ibv_cq_init_attr_ex cx = {
		.cqe = 16,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &cx);
	CHECK(cq != NULL, "a CQ with both completion timestamps");
	if (!cq)
		return;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *pcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(pd, ibv_cq_ex_to_cq(cq), NULL);
	struct ibv_qp *b = make_qp(pd, pcq, NULL);
	connect_qp(a, b->qp_num, gid);
	connect_qp(b, a->qp_num, gid);
	static char src[64], dst[64];
	struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *md = ibv_reg_mr(pd, dst, sizeof(dst),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	uint64_t prev = 0;
	for (int i = 0; i < 3; i++) {
		v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
		uint64_t wall0 = now_ns(CLOCK_REALTIME);
		CHECK(ibv_query_rt_values_ex(ctx, &v) == 0 &&
			      v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK && v.raw_clock.tv_sec == 0,
		      "ibv_query_rt_values_ex: the raw clock (cycles in tv_nsec, as mlx5)");
		uint64_t before = (uint64_t)v.raw_clock.tv_nsec;
		struct ibv_sge sge = { (uintptr_t)src, 64, ms->lkey };
		struct ibv_send_wr w = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		w.wr.rdma.remote_addr = (uintptr_t)dst;
		w.wr.rdma.rkey = md->rkey;
		ibv_post_send(a, &w, &bad);
		struct ibv_poll_cq_attr pa = { 0 };
		int r;
		uint64_t t0 = now_ns(CLOCK_MONOTONIC);
		while ((r = ibv_start_poll(cq, &pa)) == ENOENT &&
		       now_ns(CLOCK_MONOTONIC) - t0 < 5000000000ull)
			;
		CHECK(r == 0 && cq->status == IBV_WC_SUCCESS && cq->wr_id == (uint64_t)(100 + i),
		      "completion %d", i);
		uint64_t ts = ibv_wc_read_completion_ts(cq);
		uint64_t wall = ibv_wc_read_completion_wallclock_ns(cq);
		ibv_end_poll(cq);
		uint64_t wall1 = now_ns(CLOCK_REALTIME);
		ibv_query_rt_values_ex(ctx, &v);
		uint64_t after = (uint64_t)v.raw_clock.tv_nsec;
		CHECK(before <= ts && ts <= after && ts > prev,
		      "its timestamp %lu lies between the clock before the post (%lu) and after "
		      "the poll (%lu), after the previous one",
		      (unsigned long)ts, (unsigned long)before, (unsigned long)after);
		/* The wall clock conversion reads two clocks: allow 10 ms. */
		CHECK(wall + 10000000ull >= wall0 && wall <= wall1 + 10000000ull,
		      "its wall clock time %lu lies between %lu and %lu", (unsigned long)wall,
		      (unsigned long)wall0, (unsigned long)wall1);
		prev = ts;
	}
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	ibv_destroy_cq(pcq);
	ibv_dereg_mr(ms);
	ibv_dereg_mr(md);
	ibv_dealloc_pd(pd);
}

int main(int argc, char **argv)
{
	const char *want_vendor = argc > 1 ? argv[1] : "0xffffff";
	struct ibv_device **list;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&list, &gid);
	if (!ctx)
		return 1;

	identity(ctx, want_vendor);
	imports(ctx, &gid);
	domains(ctx, &gid);
	timestamps(ctx, &gid);

	int fd = ctx->cmd_fd;
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "the command descriptor is closed");
	ibv_free_device_list(list);
	return checks_summary();
}
