/*
 * A listener killed between a connection request and its accept (issue
 * 19): `listen` takes the CONNECT_REQUEST, says "REQ" and waits to be
 * killed without accepting; `connect`, in another process on the same
 * address, must then be told no (REJECTED, or UNREACHABLE when its CM
 * gives up) within the CM's timeouts, never ESTABLISHED, never left
 * waiting.
 *
 * Usage: killed_listener listen ADDR PORT
 *        killed_listener connect ADDR PORT
 * `connect` prints the event it got and exits 0 for REJECTED or
 * UNREACHABLE, 2 for any other event, 3 when none came in 120 s.
 */
#include "citizen.h"
#include <arpa/inet.h>

int main(int argc, char **argv)
{
	if (argc != 4)
		die("usage: killed_listener listen|connect ADDR PORT");
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		die("address");
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (!strcmp(argv[1], "listen")) {
		if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 4))
			die("listen");
		printf("LISTENING\n");
		struct rdma_cm_event *ev = next_event(ch, 120000);
		if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
			die("no connect request");
		/* Taken, never accepted: the test kills us now. */
		printf("REQ\n");
		for (;;)
			pause();
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000))
		die("rdma_resolve_addr");
	expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_conn_param cp = { .initiator_depth = 1, .responder_resources = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (!pd || !cq || rdma_create_qp(id, pd, &qa) || rdma_connect(id, &cp))
		die("rdma_connect");
	printf("CONNECTING\n");
	double t0 = now_s();
	struct rdma_cm_event *ev = next_event(ch, 120000);
	if (!ev) {
		printf("no event in 120 s\n");
		return 3;
	}
	int e = ev->event;
	printf("%s after %.3f s (status %d)\n", rdma_event_str(e), now_s() - t0, ev->status);
	rdma_ack_cm_event(ev);
	return e == RDMA_CM_EVENT_REJECTED || e == RDMA_CM_EVENT_UNREACHABLE ? 0 : 2;
}
