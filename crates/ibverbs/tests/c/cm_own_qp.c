/* The QP a program puts in an rdma_cm id itself.
 *
 * librdmacm reads the public fields of struct rdma_cm_id whenever it needs
 * them: a program may create its QP with ibv_create_qp and assign id->qp
 * before rdma_accept / rdma_connect (uDAPL's cma provider does so on
 * accept). The REQ and REP must then carry that QP's number, and the
 * library must move that QP (RESET -> INIT -> RTR -> RTS) as it moves one
 * made by rdma_create_qp.
 *
 *   cm_own_qp server ADDR PORT      accepts one connection
 *   cm_own_qp client ADDR PORT      connects to it
 *
 * Both sides create their QP with ibv_create_qp, assign id->qp, exchange
 * a message each way and check it, and check that the QPN the peer's
 * REQ/REP carried is the QPN the peer printed. Exit 0 on success. */
#include <rdma/rdma_cma.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define MSG 64

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		DIE("rdma_get_cm_event: %m");
	if (ev->event != want)
		DIE("got %s (status %d), want %s", rdma_event_str(ev->event), ev->status,
		    rdma_event_str(want));
	return ev;
}

struct conn {
	struct ibv_pd *pd;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[2 * MSG];
};

/* A QP of our own on the id's device, in RESET, assigned to id->qp. */
static void own_qp(struct rdma_cm_id *id, struct conn *c)
{
	c->pd = ibv_alloc_pd(id->verbs);
	c->scq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	c->rcq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!c->pd || !c->scq || !c->rcq)
		DIE("pd/cq: %m");
	struct ibv_qp_init_attr a = {
		.send_cq = c->scq, .recv_cq = c->rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	c->qp = ibv_create_qp(c->pd, &a);
	if (!c->qp)
		DIE("ibv_create_qp: %m");
	c->mr = ibv_reg_mr(c->pd, c->buf, sizeof c->buf, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		DIE("ibv_reg_mr: %m");
	id->qp = c->qp;
	printf("own qpn %u\n", c->qp->qp_num);
}

static void post_recv(struct conn *c)
{
	struct ibv_sge sge = { (uintptr_t)c->buf + MSG, MSG, c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(c->qp, &wr, &bad))
		DIE("ibv_post_recv: %m");
}

static void wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	int n;
	for (long i = 0; i < 2000000000L; i++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			DIE("ibv_poll_cq");
		if (n == 1)
			break;
	}
	if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.opcode != op)
		DIE("completion: n %d status %s opcode %d", n, ibv_wc_status_str(wc.status), wc.opcode);
}

static void send_msg(struct conn *c, const char *text)
{
	snprintf(c->buf, MSG, "%s", text);
	struct ibv_sge sge = { (uintptr_t)c->buf, MSG, c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(c->qp, &wr, &bad))
		DIE("ibv_post_send: %m");
	wait_wc(c->scq, IBV_WC_SEND);
}

static void check_msg(struct conn *c, const char *want)
{
	wait_wc(c->rcq, IBV_WC_RECV);
	if (strcmp(c->buf + MSG, want))
		DIE("received \"%.*s\", want \"%s\"", MSG, c->buf + MSG, want);
}

static void qp_state_is(struct ibv_qp *qp, enum ibv_qp_state want)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		DIE("ibv_query_qp: %m");
	if (a.qp_state != want)
		DIE("QP state %d, want %d", a.qp_state, want);
}

int main(int argc, char **argv)
{
	if (argc != 4)
		DIE("usage: %s server|client ADDR PORT", argv[0]);
	int server = !strcmp(argv[1], "server");
	struct addrinfo *ai;
	if (getaddrinfo(argv[2], argv[3], NULL, &ai))
		DIE("getaddrinfo %s", argv[2]);
	setvbuf(stdout, NULL, _IONBF, 0);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id, *conn_id;
	struct rdma_cm_event *ev;
	struct conn c = { 0 };
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7 };
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %m");
	if (server) {
		if (rdma_bind_addr(id, ai->ai_addr) || rdma_listen(id, 1))
			DIE("bind/listen: %m");
		printf("listening\n");
		ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		conn_id = ev->id;
		uint32_t peer_qpn = ev->param.conn.qp_num;
		rdma_ack_cm_event(ev);
		own_qp(conn_id, &c);
		/* librdmacm moves the QP to INIT, RTR and RTS before the REP. */
		if (rdma_accept(conn_id, &p))
			DIE("rdma_accept: %m");
		qp_state_is(c.qp, IBV_QPS_RTS);
		post_recv(&c);
		ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
		rdma_ack_cm_event(ev);
		printf("peer qpn %u\n", peer_qpn);
		check_msg(&c, "from the client");
		send_msg(&c, "from the server");
		ev = expect(ch, RDMA_CM_EVENT_DISCONNECTED);
		rdma_ack_cm_event(ev);
		/* rdma_disconnect moves id->qp to ERR. */
		rdma_disconnect(conn_id);
		qp_state_is(c.qp, IBV_QPS_ERR);
		conn_id->qp = NULL;
		rdma_destroy_id(conn_id);
	} else {
		if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000))
			DIE("rdma_resolve_addr: %m");
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(id, 2000))
			DIE("rdma_resolve_route: %m");
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		own_qp(id, &c);
		/* A QPN in conn_param that is not the QP's: librdmacm sends
		 * id->qp's. */
		p.qp_num = 0xabcd;
		if (rdma_connect(id, &p))
			DIE("rdma_connect: %m");
		/* The REP moves id->qp to RTR and RTS: ESTABLISHED, not
		 * CONNECT_RESPONSE. */
		ev = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
		printf("peer qpn %u\n", ev->param.conn.qp_num);
		rdma_ack_cm_event(ev);
		qp_state_is(c.qp, IBV_QPS_RTS);
		post_recv(&c);
		send_msg(&c, "from the client");
		check_msg(&c, "from the server");
		if (rdma_disconnect(id))
			DIE("rdma_disconnect: %m");
		qp_state_is(c.qp, IBV_QPS_ERR);
		rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
		id->qp = NULL;
	}
	ibv_destroy_qp(c.qp);
	ibv_dereg_mr(c.mr);
	ibv_destroy_cq(c.scq);
	ibv_destroy_cq(c.rcq);
	ibv_dealloc_pd(c.pd);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	freeaddrinfo(ai);
	printf("ok\n");
	return 0;
}
