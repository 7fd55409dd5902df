/*
 * A hostile client of an unmodified ibv_rc_pingpong server: it connects as
 * pingpong's client does (the "LID:QPN:PSN:GID" exchange over TCP), then,
 * instead of SENDs, issues one RDMA WRITE, RDMA READ or FETCH_ADD to the
 * server's QP, which grants no remote access. The server's responder must
 * answer at once with NAK "invalid request" (IBA 9.7.5.2.8, syndrome 0x61)
 * and move its QP to the error state, as rxe does; the requester then
 * completes with IBV_WC_REM_INV_REQ_ERR — never with retries exceeded.
 *
 * Usage: nak write|read|fadd SERVER_IP PORT
 * Prints "status NAME after MS ms" and exits 0 when the status is
 * IBV_WC_REM_INV_REQ_ERR, 1 otherwise.
 */
#include "citizen.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static int tcp_connect(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	for (int tries = 0; tries < 500; tries++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
		if (!connect(fd, (struct sockaddr *)&a, sizeof a))
			return fd;
		close(fd);
		usleep(20000);
	}
	die("connect to the pingpong server");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4) {
		fprintf(stderr, "usage: nak write|read|fadd SERVER_IP PORT\n");
		return 2;
	}
	enum ibv_wr_opcode op = !strcmp(argv[1], "write")  ? IBV_WR_RDMA_WRITE
				: !strcmp(argv[1], "read") ? IBV_WR_RDMA_READ
							   : IBV_WR_ATOMIC_FETCH_AND_ADD;
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("ibv_get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	uint64_t *buf = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = pd && cq && mr ? ibv_create_qp(pd, &qa) : NULL;
	if (!qp)
		die("setup");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");

	/* pingpong's exchange: the client writes first, reads the server's
	 * line, then says "done". */
	char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
	char wgid[33];
	for (int i = 0; i < 16; i++)
		sprintf(wgid + 2 * i, "%02x", gid.raw[i]);
	sprintf(msg, "%04x:%06x:%06x:%s", 0, qp->qp_num, 0x123, wgid);
	int fd = tcp_connect(argv[2], atoi(argv[3]));
	if (write(fd, msg, sizeof msg) != sizeof msg)
		die("write");
	size_t got = 0;
	while (got < sizeof msg) {
		ssize_t r = read(fd, msg + got, sizeof msg - got);
		if (r <= 0)
			die("read the server's line");
		got += r;
	}
	unsigned lid, rqpn, rpsn;
	char rgid[33];
	if (sscanf(msg, "%x:%x:%x:%32s", &lid, &rqpn, &rpsn, rgid) != 4)
		die("parse the server's line");
	union ibv_gid dgid;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(rgid + 2 * i, "%2x", &v);
		dgid.raw[i] = v;
	}

	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	pair_to(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = rqpn,
		.rq_psn = rpsn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .dgid = dgid, .hop_limit = 64 } },
	};
	pair_to(qp, &a,
		IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	/* pingpong's server expects PSN 0x123 from us (what we sent). */
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 0x123, .timeout = 14,
				  .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
	pair_to(qp, &a,
		IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
	if (write(fd, "done", sizeof "done") != sizeof "done")
		die("write done");
	/* The server's QP is in RTS once it read "done"... and has posted its
	 * receives; give it a moment to reach its poll loop. */
	char c;
	(void)!read(fd, &c, 1); /* returns 0 when the server closes */
	usleep(100000);

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	/* Any address and key: the QP's access check refuses it first. */
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = 0x10000;
		wr.wr.atomic.rkey = 0x1234;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = 0x10000;
		wr.wr.rdma.rkey = 0x1234;
	}
	double t0 = now_s();
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && now_s() - t0 < 30)
		;
	if (n != 1)
		die("no completion within 30 s");
	printf("%s: status %s after %.1f ms\n", argv[1], ibv_wc_status_str(wc.status),
	       (now_s() - t0) * 1e3);
	close(fd);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	return wc.status == IBV_WC_REM_INV_REQ_ERR ? 0 : 1;
}
