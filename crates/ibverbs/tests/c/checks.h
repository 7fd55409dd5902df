/*
 * What the C programs that count checks share (errors.c, identity.c and,
 * through memfeat.h, mw.c, placement.c, odp.c, xrc.c, mcast.c): CHECK,
 * which prints one line a check and counts the failures; open_first, the
 * first device and its GID; poll_one, one
 * completion within 5 s; rc_connect, an RC QP moved from RESET or INIT to
 * RTS towards another QP of the same device.
 */
#ifndef CHECKS_H
#define CHECKS_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                                      \
	do {                                                                  \
		checks++;                                                     \
		if (cond) {                                                   \
			printf("ok   ");                                      \
		} else {                                                      \
			printf("FAIL ");                                      \
			failures++;                                           \
		}                                                             \
		printf(__VA_ARGS__);                                          \
		printf("  [%s:%d]\n", __FILE__, __LINE__);                    \
	} while (0)

/* The summary line the tests read; the exit status: the failures. */
static inline int checks_summary(void)
{
	printf("%d checks, %d failures\n", checks, failures);
	return failures;
}

/* Polls until one completion arrives (1) or 5 s pass (0); < 0 on error. */
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			return 0;
	}
}

/* Opens the first device, the list freed; exits with status 100 (no
 * device to test) when there is none. NULL when it does not open. */
static inline struct ibv_context *open_device_or_exit(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		exit(100);
	struct ibv_context *c = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	return c;
}

/* Opens the first device of `*list` (the device list, for the caller to
 * free) and reads its GID 0 into `gid`, each step a check; NULL when
 * there is no device or it does not open. */
static inline struct ibv_context *open_first(struct ibv_device ***list, union ibv_gid *gid)
{
	int n = 0;
	*list = ibv_get_device_list(&n);
	CHECK(*list && n >= 1, "ibv_get_device_list: %d device(s)", n);
	if (!*list || n < 1)
		return NULL;
	struct ibv_context *ctx = ibv_open_device((*list)[0]);
	CHECK(ctx != NULL, "ibv_open_device(%s)", ibv_get_device_name((*list)[0]));
	if (!ctx)
		return NULL;
	CHECK(ibv_query_gid(ctx, 1, 0, gid) == 0, "ibv_query_gid");
	return ctx;
}

/* How rc_connect sets up a QP. */
struct rc_opts {
	int access;            /* qp_access_flags */
	uint8_t rd_atomic;     /* max_rd_atomic and max_dest_rd_atomic */
	uint8_t rnr_retry;     /* 7: forever */
	uint8_t min_rnr_timer; /* the RNR NAK's timer code */
};

/* RTR's attributes beyond the ones every type takes, and RTS's: the ones
 * an RC QP takes. */
#define RC_RTR_MORE (IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RC_RTS_MORE (IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)

/* INIT -> RTR -> RTS towards QP `dest` at `gid` (port 1, MTU 1024, PSNs
 * `psn`, hop limit 1, timeout 14, retry count 7), RTR's and RTS's masks
 * with `rtr_more` and `rts_more` (of RC_RTR_MORE and RC_RTS_MORE) added.
 * 0, or -1/-2/-3: the move to INIT/RTR/RTS failed. */
static inline int qp_connect(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid,
			     const struct rc_opts *o, uint32_t psn, int rtr_more, int rts_more)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = 1,
		.qp_access_flags = o->access,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = o->rd_atomic;
	a.min_rnr_timer = o->min_rnr_timer;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | rtr_more))
		return -2;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = o->rnr_retry;
	a.max_rd_atomic = o->rd_atomic;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | rts_more))
		return -3;
	return 0;
}

/* An RC QP's qp_connect: PSNs 0, every RC attribute. */
static inline int rc_connect(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid,
			     const struct rc_opts *o)
{
	return qp_connect(qp, dest, gid, o, 0, RC_RTR_MORE, RC_RTS_MORE);
}

#endif
