/*
 * Work posted before a disconnect leaves before it: librpma's example 08
 * posts an unsignaled SEND and calls rdma_disconnect right after; the SEND
 * must reach the peer before the DREQ (it used to be flushed unsent when
 * the program had been polling its CQ: no such PSN on the wire, then
 * DREQ).
 *
 * Two devices (the first two of the device list: 127.61.11.1 and .2), one
 * process: a target listening on the first, an initiator on the second.
 * Each round connects, has the initiator spin on its CQ for 2 ms (as a
 * program waiting for completions does), post a SEND of a round-tagged
 * message, unsignaled, and call rdma_disconnect at once; the target must
 * receive the message, then DISCONNECTED.
 *
 * Usage: disconnect ROUNDS
 * Prints how many messages arrived; exits 0 when all did.
 */
#include "citizen.h"
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#define PORT 20630

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 100;
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sockaddr_in la = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	struct sockaddr_in src = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.61.11.1", &la.sin_addr);
	inet_pton(AF_INET, "127.61.11.2", &src.sin_addr);
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	if (!sch || !cch || rdma_create_id(sch, &lid, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(lid, (struct sockaddr *)&la) || rdma_listen(lid, 4))
		die("listener");
	static uint8_t sbuf[4096], cbuf[4096];
	int arrived = 0, flushed = 0;
	for (int r = 0; r < rounds; r++) {
		struct rdma_cm_id *cid, *sid;
		if (rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) ||
		    rdma_resolve_addr(cid, (struct sockaddr *)&src, (struct sockaddr *)&la, 1000))
			die("initiator");
		expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
		if (rdma_resolve_route(cid, 1000))
			die("rdma_resolve_route");
		expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
		struct ibv_pd *cpd = ibv_alloc_pd(cid->verbs);
		struct ibv_cq *ccq = ibv_create_cq(cid->verbs, 16, NULL, NULL, 0);
		struct ibv_mr *cmr = ibv_reg_mr(cpd, cbuf, sizeof cbuf, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_qp_init_attr qa = {
			.send_cq = ccq, .recv_cq = ccq,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1,
					      .retry_count = 7, .rnr_retry_count = 7 };
		if (!cpd || !ccq || !cmr || rdma_create_qp(cid, cpd, &qa) || rdma_connect(cid, &cp))
			die("rdma_connect");
		expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &sid);
		struct ibv_pd *spd = ibv_alloc_pd(sid->verbs);
		struct ibv_cq *scq = ibv_create_cq(sid->verbs, 16, NULL, NULL, 0);
		struct ibv_mr *smr = ibv_reg_mr(spd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
		qa.send_cq = qa.recv_cq = scq;
		if (!spd || !scq || !smr || rdma_create_qp(sid, spd, &qa))
			die("target QP");
		struct ibv_sge rs = { .addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *brw;
		if (ibv_post_recv(sid->qp, &rw, &brw) || rdma_accept(sid, &cp))
			die("rdma_accept");
		expect(cch, RDMA_CM_EVENT_ESTABLISHED, NULL);
		expect(sch, RDMA_CM_EVENT_ESTABLISHED, NULL);

		/* The initiator waits on its CQ for a while, then sends its last
		 * message, unsignaled, and disconnects at once. */
		struct ibv_wc wc;
		double spin = now_s() + 0.002;
		while (now_s() < spin)
			ibv_poll_cq(ccq, 1, &wc);
		uint32_t tag = 0x5eed0000 + r;
		memcpy(cbuf, &tag, 4);
		memset(sbuf, 0, 4);
		struct ibv_sge ss = { .addr = (uintptr_t)cbuf, .length = 64, .lkey = cmr->lkey };
		struct ibv_send_wr sw = { .wr_id = 1, .sg_list = &ss, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bsw;
		if (ibv_post_send(cid->qp, &sw, &bsw) || rdma_disconnect(cid))
			die("post and disconnect");

		/* The target: the message, then DISCONNECTED. */
		int got = 0;
		double end = now_s() + 2;
		while (!got && now_s() < end) {
			if (ibv_poll_cq(scq, 1, &wc) == 1) {
				got = 1;
				uint32_t seen;
				memcpy(&seen, sbuf, 4);
				if (wc.status == IBV_WC_SUCCESS && seen == tag)
					arrived++;
				else if (wc.status == IBV_WC_WR_FLUSH_ERR)
					flushed++;
				else
					printf("round %d: %s, tag %#x\n", r,
					       ibv_wc_status_str(wc.status), seen);
			}
		}
		if (!got)
			printf("round %d: nothing arrived\n", r);
		expect(sch, RDMA_CM_EVENT_DISCONNECTED, NULL);
		rdma_disconnect(sid);
		expect(cch, RDMA_CM_EVENT_DISCONNECTED, NULL);
		rdma_destroy_qp(sid);
		rdma_destroy_qp(cid);
		if (rdma_destroy_id(sid) || rdma_destroy_id(cid))
			die("rdma_destroy_id");
		ibv_dereg_mr(smr);
		ibv_dereg_mr(cmr);
		ibv_destroy_cq(scq);
		ibv_destroy_cq(ccq);
		ibv_dealloc_pd(spd);
		ibv_dealloc_pd(cpd);
	}
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("%d of %d messages posted right before rdma_disconnect arrived (%d flushed at the "
	       "target)\n",
	       arrived, rounds, flushed);
	return arrived == rounds ? 0 : 1;
}
