/*
 * The refusals of errors.c (the README's "Verbs: supported and refused"
 * table seen from C): included once by errors.c, after its helpers
 * (CHECK, make_qp, connect_qp), which it uses.
 */
#ifndef ERRORS_REFUSED_H
#define ERRORS_REFUSED_H

/*
 * What softrdma refuses, with the errno a program gets: hardware offloads
 * (device memory, flow steering, counters, WQs and RSS, TSO, CQ
 * moderation, rate limits, ECE, dmabuf, tag matching) and the
 * librdmacm calls it does not have (rsockets, XRC through rdma_cm). Where
 * libibverbs' inline wrapper answers for a verb whose
 * slot softrdma leaves empty, the errno is libibverbs' own.
 */
static void refused(struct ibv_context *ctx, union ibv_gid *gid)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = make_qp(pd, cq, IBV_QPT_RC), *b = make_qp(pd, cq, IBV_QPT_RC);
	CHECK(pd && cq && a && b, "PD, CQ, two RC QPs");
	CHECK(connect_pair(a, b, gid, 7) == 0, "RC QPs connected");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_TSO }, *bad = NULL;
	CHECK(ibv_post_send(a, &w, &bad) == EOPNOTSUPP && bad == &w,
	      "IBV_WR_TSO through ibv_post_send -> EOPNOTSUPP");
	w.opcode = IBV_WR_DRIVER1;
	CHECK(ibv_post_send(a, &w, &bad) == EOPNOTSUPP, "IBV_WR_DRIVER1 -> EOPNOTSUPP");

	/* Modify: queue sizes and rate limits are fixed. */
	struct ibv_qp_attr qa = { .rate_limit = 1000 };
	CHECK(ibv_modify_qp(a, &qa, IBV_QP_RATE_LIMIT) == EINVAL,
	      "ibv_modify_qp(IBV_QP_RATE_LIMIT) -> EINVAL");
	struct ibv_qp_rate_limit_attr rl = { .rate_limit = 1000 };
	CHECK(ibv_modify_qp_rate_limit(a, &rl) == EOPNOTSUPP,
	      "ibv_modify_qp_rate_limit -> EOPNOTSUPP");
	struct ibv_ece ece = { 0 };
	CHECK(ibv_query_ece(a, &ece) == EOPNOTSUPP, "ibv_query_ece -> EOPNOTSUPP");
	ece.vendor_id = 0x15b3;
	CHECK(ibv_set_ece(a, &ece) == EOPNOTSUPP, "ibv_set_ece -> EOPNOTSUPP");

	/* Extended QPs: RSS, TSO, create flags. */
	struct ibv_qp_init_attr_ex x = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH,
		.pd = pd,
	};
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &x) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_qp_ex with RX_HASH (RSS) -> EOPNOTSUPP (errno %d)", errno);
	x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	x.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &x) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_qp_ex with create_flags -> EOPNOTSUPP (errno %d)", errno);
	x.create_flags = 0;
	x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	x.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &x) == NULL && errno == EOPNOTSUPP,
	      "send_ops_flags with TSO -> EOPNOTSUPP (errno %d)", errno);

	x.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *e = ibv_create_qp_ex(ctx, &x);
	struct ibv_qp_ex *qx = e ? ibv_qp_to_qp_ex(e) : NULL;
	CHECK(qx != NULL, "an extended QP");
	if (qx) {
		char hdr[64] = { 0 };
		ibv_wr_start(qx);
		qx->wr_id = 3;
		ibv_wr_send_tso(qx, hdr, sizeof(hdr), 1024);
		CHECK(ibv_wr_complete(qx) == EOPNOTSUPP, "ibv_wr_send_tso -> ibv_wr_complete EOPNOTSUPP");
		CHECK(ibv_destroy_qp(e) == 0, "extended QP destroyed");
	}

	/* CQs: moderation, creation flags. */
	struct ibv_modify_cq_attr mc = { .attr_mask = IBV_CQ_ATTR_MODERATE,
					 .moderate = { .cq_count = 4, .cq_period = 10 } };
	CHECK(ibv_modify_cq(cq, &mc) == EOPNOTSUPP, "ibv_modify_cq (moderation) -> EOPNOTSUPP");
	struct ibv_cq_init_attr_ex cx = { .cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					  .flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN };
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cx) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_cq_ex with IGNORE_OVERRUN -> EOPNOTSUPP (errno %d)", errno);
	CHECK(ibv_resize_cq(cq, 128) == 0 && cq->cqe >= 128, "ibv_resize_cq works (%d)", cq->cqe);

	/* SRQs: resize as rxe (never below the armed limit; with receives posted
	 * and traffic after: srq_resize), no tag matching. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq != NULL, "SRQ");
	struct ibv_srq_attr sra = { .max_wr = 32 };
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_MAX_WR) == 0, "ibv_modify_srq(IBV_SRQ_MAX_WR) resizes");
	sra.srq_limit = 4;
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_LIMIT) == 0, "ibv_modify_srq(IBV_SRQ_LIMIT) works");
	sra.max_wr = 2;
	CHECK(ibv_modify_srq(srq, &sra, IBV_SRQ_MAX_WR) == EINVAL,
	      "ibv_modify_srq(IBV_SRQ_MAX_WR) below the armed limit -> EINVAL");
	struct ibv_ops_wr op = { .wr_id = 1, .opcode = IBV_WR_TAG_ADD }, *obad = NULL;
	CHECK(ibv_post_srq_ops(srq, &op, &obad) == EOPNOTSUPP, "ibv_post_srq_ops -> EOPNOTSUPP");
	struct ibv_srq_init_attr_ex sx = {
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ |
			     IBV_SRQ_INIT_ATTR_TM,
		.srq_type = IBV_SRQT_TM, .pd = pd, .cq = cq,
		.tm_cap = { .max_num_tags = 4, .max_ops = 4 },
	};
	errno = 0;
	CHECK(ibv_create_srq_ex(ctx, &sx) == NULL && errno == EOPNOTSUPP,
	      "tag-matching SRQ -> EOPNOTSUPP (errno %d)", errno);

	/* Offloads a NIC has: device memory, flow steering, counters, WQs,
	 * indirection tables, ESP, null MRs, dmabuf. */
	struct ibv_alloc_dm_attr dm = { .length = 4096 };
	errno = 0;
	CHECK(ibv_alloc_dm(ctx, &dm) == NULL && errno == EOPNOTSUPP,
	      "ibv_alloc_dm -> EOPNOTSUPP (errno %d)", errno);
	errno = 0;
	CHECK(ibv_import_dm(ctx, 1) == NULL && errno == EOPNOTSUPP,
	      "ibv_import_dm -> EOPNOTSUPP (errno %d)", errno);
	struct ibv_flow_attr fa = { .type = IBV_FLOW_ATTR_NORMAL, .size = sizeof(fa), .port = 1 };
	errno = 0;
	CHECK(ibv_create_flow(a, &fa) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_flow -> EOPNOTSUPP (errno %d)", errno);
	struct ibv_flow_action_esp_attr esp = { 0 };
	errno = 0;
	CHECK(ibv_create_flow_action_esp(ctx, &esp) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_flow_action_esp -> EOPNOTSUPP (errno %d)", errno);
	struct ibv_counters_init_attr ca = { 0 };
	errno = 0;
	CHECK(ibv_create_counters(ctx, &ca) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_counters -> EOPNOTSUPP (errno %d)", errno);
	struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1,
				       .pd = pd, .cq = cq };
	errno = 0;
	CHECK(ibv_create_wq(ctx, &wa) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_wq -> EOPNOTSUPP (errno %d)", errno);
	struct ibv_rwq_ind_table_init_attr ia = { .log_ind_tbl_size = 0 };
	errno = 0;
	CHECK(ibv_create_rwq_ind_table(ctx, &ia) == NULL && errno == EOPNOTSUPP,
	      "ibv_create_rwq_ind_table -> EOPNOTSUPP (errno %d)", errno);
	errno = 0;
	CHECK(ibv_alloc_null_mr(pd) == NULL && errno == EOPNOTSUPP,
	      "ibv_alloc_null_mr -> EOPNOTSUPP (errno %d)", errno);
	errno = 0;
	CHECK(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 0, IBV_ACCESS_LOCAL_WRITE) == NULL &&
		      errno == EOPNOTSUPP,
	      "ibv_reg_dmabuf_mr -> EOPNOTSUPP (errno %d)", errno);

	/* librdmacm: rsockets, XRC through rdma_cm. */
	errno = 0;
	CHECK(rsocket(AF_INET, SOCK_STREAM, 0) == -1 && errno == ENOSYS,
	      "rsocket -> -1, ENOSYS (errno %d)", errno);
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(7471),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_addrinfo ai = { .ai_flags = RAI_PASSIVE, .ai_family = AF_INET,
				    .ai_qp_type = IBV_QPT_XRC_RECV, .ai_port_space = RDMA_PS_IB,
				    .ai_src_len = sizeof(sin),
				    .ai_src_addr = (struct sockaddr *)&sin };
	struct rdma_cm_id *xid = NULL;
	errno = 0;
	CHECK(rdma_create_ep(&xid, &ai, NULL, NULL) == -1 && errno == EINVAL,
	      "rdma_create_ep of an XRC QP type -> -1, EINVAL (errno %d)", errno);
	struct rdma_cm_id *id = NULL;
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP) == 0 && id, "rdma_create_id");
	struct ibv_srq_init_attr_ex xs = { .comp_mask = IBV_SRQ_INIT_ATTR_TYPE,
					   .srq_type = IBV_SRQT_XRC };
	errno = 0;
	CHECK(rdma_create_srq_ex(id, &xs) == -1 && errno == EOPNOTSUPP,
	      "rdma_create_srq_ex of an XRC SRQ -> -1, EOPNOTSUPP (errno %d)", errno);
	struct rdma_cm_join_mc_attr_ex mj = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED };
	errno = 0;
	CHECK(rdma_join_multicast_ex(id, &mj, NULL) == -1 && errno == EOPNOTSUPP,
	      "rdma_join_multicast_ex with a reserved comp_mask bit -> -1, EOPNOTSUPP (errno %d)",
	      errno);
	mj.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	mj.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	mj.addr = (struct sockaddr *)&sin;
	errno = 0;
	CHECK(rdma_join_multicast_ex(id, &mj, NULL) == -1 && errno == EINVAL,
	      "rdma_join_multicast_ex with an unknown join flag -> -1, EINVAL (errno %d)", errno);
	errno = 0;
	CHECK(rdma_notify(id, IBV_EVENT_QP_FATAL) == -1 && errno == EINVAL,
	      "rdma_notify of another event than COMM_EST -> -1, EINVAL (errno %d)", errno);
	CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");

	CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 &&
		      ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0,
	      "destroyed");
}

#endif
