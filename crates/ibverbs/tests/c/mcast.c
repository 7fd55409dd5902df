/*
 * UD multicast through libibverbs.so.1 (AddressSanitizer, UBSan): the
 * device's multicast limits, ibv_attach_mcast / ibv_detach_mcast with the
 * kernel's and rxe's rules, SENDs to a group (QPN 0xFFFFFF) reaching every
 * attached QP of the device whose Q_Key matches — a copy each, with the
 * group in the GRH area — and no other, and the EBUSY of destroying an
 * attached QP. One device (SOFTRDMA_ADDR, a loopback address: the sender
 * and the members are its QPs; the IP layer loops the group's datagrams
 * back to the device). One line per check; the exit status is the number
 * of failures.
 */
/* The pair helpers of memfeat.h are not used here: only CHECK and poll_one. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "memfeat.h"
#pragma GCC diagnostic pop
#include <arpa/inet.h>

enum { N = 16, QKEY = 0x11111111, OTHER = 0x22222222 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static char *buf;
static struct ibv_mr *mr;

static struct ibv_qp *ud_qp(struct ibv_cq *cq, uint32_t qkey)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq,
				       .cap = { .max_send_wr = 32, .max_recv_wr = 64,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_UD };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return NULL;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return NULL;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return NULL;
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return NULL;
	return qp;
}

static void post_recvs(struct ibv_qp *qp, int slot)
{
	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = { (uintptr_t)(buf + (slot * N + i) * 256), 256, mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = slot * N + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		ibv_post_recv(qp, &wr, &bad);
	}
}

/* Receive completions on `cq` until `n` arrived or none comes for a
 * while; returns how many (each checked). */
static int take(struct ibv_cq *cq, int n, uint32_t from, const uint8_t group[4])
{
	int got = 0, good = 0;
	struct ibv_wc wc;
	while (got < n && poll_one(cq, &wc) == 1) {
		if (wc.opcode != IBV_WC_RECV)
			continue;
		got++;
		char *m = buf + wc.wr_id * 256;
		/* 40 bytes of GRH area: 20 zero bytes, the IPv4 header. */
		good += wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_GRH) &&
			(wc.wc_flags & IBV_WC_WITH_IMM) && wc.src_qp == from &&
			wc.byte_len == 40 + 32 && !memcmp(m + 36, group, 4) &&
			!memcmp(m + 40, "multicast datagram", 18);
	}
	return good == got ? got : -1;
}

int main(void)
{
	ctx = open_device_or_exit();
	struct ibv_device_attr da;
	CHECK(ctx && !ibv_query_device(ctx, &da) && da.max_mcast_grp == 8192 &&
		      da.max_mcast_qp_attach == 56 && da.max_total_mcast_qp_attach == 8192 * 56,
	      "rxe's multicast limits: %d groups, %d QPs per group, %d in all",
	      ctx ? da.max_mcast_grp : 0, ctx ? da.max_mcast_qp_attach : 0,
	      ctx ? da.max_total_mcast_qp_attach : 0);
	pd = ibv_alloc_pd(ctx);
	buf = calloc(1, 1 << 20);
	mr = ibv_reg_mr(pd, buf, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_cq *cq[3];
	for (int i = 0; i < 3; i++)
		cq[i] = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *tx = ud_qp(scq, QKEY);
	struct ibv_qp *m0 = ud_qp(cq[0], QKEY), *m1 = ud_qp(cq[1], QKEY), *m2 = ud_qp(cq[2], OTHER);
	CHECK(pd && mr && tx && m0 && m1 && m2, "a sender and three UD QPs");

	/* The group 239.67.8.1 as a GID: ::ffff:239.67.8.1. */
	const uint8_t g4[4] = { 239, 67, 8, 1 };
	union ibv_gid group = { .raw = { [10] = 0xff, [11] = 0xff } };
	memcpy(group.raw + 12, g4, 4);
	union ibv_gid unicast = group;
	unicast.raw[12] = 10;
	struct ibv_qp_init_attr ria = { .send_cq = scq, .recv_cq = scq,
					.cap = { .max_send_wr = 1, .max_recv_wr = 1,
						 .max_send_sge = 1, .max_recv_sge = 1 },
					.qp_type = IBV_QPT_RC };
	struct ibv_qp *rc = ibv_create_qp(pd, &ria);
	CHECK(ibv_attach_mcast(m0, &unicast, 0) == EINVAL, "a unicast GID: EINVAL");
	CHECK(rc && ibv_attach_mcast(rc, &group, 0) == EINVAL, "an RC QP: EINVAL");
	CHECK(ibv_detach_mcast(m0, &group, 0) == EINVAL, "detaching before attaching: EINVAL");
	CHECK(!ibv_attach_mcast(m0, &group, 0) && !ibv_attach_mcast(m0, &group, 0),
	      "attach (twice: fine)");
	CHECK(!ibv_attach_mcast(m1, &group, 0) && !ibv_attach_mcast(m2, &group, 0),
	      "two more members");
	CHECK(ibv_destroy_qp(m0) == EBUSY, "destroying an attached QP: EBUSY");
	post_recvs(m0, 0);
	post_recvs(m1, 1);
	post_recvs(m2, 2);

	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .dgid = group, .hop_limit = 1 } };
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "an address handle to the group");
	for (int i = 0; i < N; i++) {
		char *m = buf + 900000;
		snprintf(m, 33, "multicast datagram %13d", i);
		struct ibv_sge sge = { (uintptr_t)m, 32, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED,
					  .imm_data = htonl(i) },
				   *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xffffff;
		wr.wr.ud.remote_qkey = QKEY;
		struct ibv_wc wc;
		CHECK(!ibv_post_send(tx, &wr, &bad) && poll_one(scq, &wc) == 1 &&
			      wc.status == IBV_WC_SUCCESS,
		      "SEND %d to the group", i);
	}
	CHECK(take(cq[0], N, tx->qp_num, g4) == N, "member 0 got all %d", N);
	CHECK(take(cq[1], N, tx->qp_num, g4) == N, "member 1 got all %d", N);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq[2], 1, &wc) == 0, "the member with another Q_Key got none");

	/* Detached: member 1 gets nothing more, member 0 still does. */
	CHECK(!ibv_detach_mcast(m1, &group, 0), "member 1 detaches");
	CHECK(ibv_detach_mcast(m1, &group, 0) == EINVAL, "again: EINVAL");
	post_recvs(m0, 0);
	post_recvs(m1, 1);
	char *m = buf + 900000;
	snprintf(m, 33, "multicast datagram %13d", 99);
	struct ibv_sge sge = { (uintptr_t)m, 32, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr.ud.remote_qkey = QKEY;
	CHECK(!ibv_post_send(tx, &wr, &bad) && poll_one(scq, &wc) == 1, "one more SEND");
	CHECK(take(cq[0], 1, tx->qp_num, g4) == 1, "member 0 got it");
	CHECK(ibv_poll_cq(cq[1], 1, &wc) == 0, "the detached QP did not");

	CHECK(!ibv_detach_mcast(m0, &group, 0) && !ibv_detach_mcast(m2, &group, 0),
	      "the others detach");
	CHECK(!ibv_destroy_qp(m0) && !ibv_destroy_qp(m1) && !ibv_destroy_qp(m2) &&
		      !ibv_destroy_qp(tx) && !ibv_destroy_qp(rc),
	      "QPs destroyed once detached");
	ibv_destroy_ah(ah);
	for (int i = 0; i < 3; i++)
		ibv_destroy_cq(cq[i]);
	ibv_destroy_cq(scq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(buf);
	return checks_summary();
}
