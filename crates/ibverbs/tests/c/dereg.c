/*
 * Nothing touches program memory after ibv_dereg_mr returns.
 *
 * Two processes, on two hosts (network namespaces) joined by a lossy link.
 * Each round, the owner registers a fresh mmap'ed buffer of 128 KiB and
 * gives its key to the peer over TCP; the peer RDMA WRITEs 64 KiB into the
 * first half and READs the 64 KiB of the second half, several times over,
 * while the link drops packets, so retransmitted WRITEs and re-executed
 * READs are in flight. Meanwhile the owner deregisters the buffer and
 * unmaps it. A library that touched the region afterwards — a queued READ
 * response, a re-read, a landing WRITE — would fault on the unmapped pages
 * (or trip AddressSanitizer). The peer accepts success or an error
 * completion (remote access error, retries exceeded, flush), never other
 * bytes: every successful READ must bring the owner's pattern.
 *
 * Usage: dereg owner LISTEN_IP PORT ROUNDS
 *        dereg peer OWNER_IP PORT ROUNDS
 * Exit status 0 or 1; the last line says what happened.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pattern.h"

#define HALF (64 * 1024)
#define OPS 4 /* WRITEs and READs per round, each */

struct info {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	uint8_t gid[16];
};

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void xfer(int fd, void *buf, size_t n, int send_it)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = send_it ? write(fd, p, n) : read(fd, p, n);
		if (r <= 0)
			die(send_it ? "write" : "read");
		p += r;
		n -= (size_t)r;
	}
}

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 2 * OPS, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t my_psn, struct info *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = OPS,
		.min_rnr_timer = 1,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .hop_limit = 64 } },
	};
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTS,
		.sq_psn = my_psn,
		.timeout = 12, /* 16.8 ms */
		.retry_cnt = 7,
		.rnr_retry = 7,
		.max_rd_atomic = OPS,
	};
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
}

static void my_info(struct ibv_qp *qp, uint32_t psn, struct info *i)
{
	union ibv_gid g;
	if (ibv_query_gid(ctx, 1, 0, &g))
		die("ibv_query_gid");
	i->qpn = qp->qp_num;
	i->psn = psn;
	memcpy(i->gid, g.raw, 16);
}

static int owner(int fd, int rounds)
{
	for (int r = 0; r < rounds; r++) {
		struct ibv_qp *qp = make_qp();
		uint8_t *buf = mmap(NULL, 2 * HALF, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED)
			die("mmap");
		pattern_fill(1000 + r, buf, 2 * HALF);
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, 2 * HALF,
					       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						       IBV_ACCESS_REMOTE_READ);
		if (!mr)
			die("ibv_reg_mr");
		struct info me = { .rkey = mr->rkey, .addr = (uintptr_t)buf }, peer;
		my_info(qp, 0x100 + r, &me);
		xfer(fd, &me, sizeof me, 1);
		xfer(fd, &peer, sizeof peer, 0);
		connect_qp(qp, me.psn, &peer);
		char go;
		xfer(fd, &go, 1, 0); /* the peer has posted its requests */
		/* Let some of them be under way, lost and retried, then pull
		 * the memory out from under them. */
		struct timespec t = { 0, (r % 8) * 25000000L };
		nanosleep(&t, NULL);
		if (ibv_dereg_mr(mr))
			die("ibv_dereg_mr");
		if (munmap(buf, 2 * HALF))
			die("munmap");
		xfer(fd, &go, 1, 1);
		xfer(fd, &go, 1, 0); /* the peer is done */
		if (ibv_destroy_qp(qp))
			die("ibv_destroy_qp");
	}
	printf("owner: %d rounds, deregistered and unmapped under retransmissions, no fault\n",
	       rounds);
	return 0;
}

static int peer(int fd, int rounds)
{
	uint8_t *wbuf = malloc(HALF), *rbuf = malloc(OPS * HALF), *expect = malloc(HALF);
	uint8_t *whole = malloc(2 * HALF);
	struct ibv_mr *wmr = ibv_reg_mr(pd, wbuf, HALF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, OPS * HALF, IBV_ACCESS_LOCAL_WRITE);
	if (!wmr || !rmr)
		die("ibv_reg_mr");
	long ok = 0, errors = 0, wrong = 0, by_status[IBV_WC_GENERAL_ERR + 1] = { 0 };
	for (int r = 0; r < rounds; r++) {
		struct ibv_qp *qp = make_qp();
		struct info me = { 0 }, own;
		my_info(qp, 0x900 + r, &me);
		xfer(fd, &own, sizeof own, 0);
		xfer(fd, &me, sizeof me, 1);
		connect_qp(qp, me.psn, &own);
		pattern_fill(r, wbuf, HALF);
		memset(rbuf, 0, OPS * HALF);
		for (int k = 0; k < OPS; k++) {
			struct ibv_sge ws = { (uintptr_t)wbuf, HALF, wmr->lkey };
			struct ibv_sge rs = { (uintptr_t)(rbuf + k * HALF), HALF, rmr->lkey };
			struct ibv_send_wr w = {
				.wr_id = 2 * k,
				.sg_list = &ws,
				.num_sge = 1,
				.opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = { own.addr, own.rkey },
			}, rd = {
				.wr_id = 2 * k + 1,
				.sg_list = &rs,
				.num_sge = 1,
				.opcode = IBV_WR_RDMA_READ,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = { own.addr + HALF, own.rkey },
			}, *bad;
			if (ibv_post_send(qp, &w, &bad) || ibv_post_send(qp, &rd, &bad))
				die("ibv_post_send");
		}
		char go = 1;
		xfer(fd, &go, 1, 1);
		/* The READs target the second half of the owner's pattern. */
		pattern_fill(1000 + r, whole, 2 * HALF);
		memcpy(expect, whole + HALF, HALF);
		int done = 0;
		struct ibv_wc wc[16];
		time_t start = time(NULL);
		while (done < 2 * OPS && time(NULL) - start < 60) {
			int n = ibv_poll_cq(cq, 16, wc);
			if (n < 0)
				die("ibv_poll_cq");
			for (int i = 0; i < n; i++, done++) {
				int is_read = wc[i].wr_id & 1;
				if (wc[i].status <= IBV_WC_GENERAL_ERR)
					by_status[wc[i].status]++;
				switch (wc[i].status) {
				case IBV_WC_SUCCESS:
					ok++;
					if (is_read &&
					    memcmp(rbuf + (wc[i].wr_id / 2) * HALF, expect, HALF)) {
						wrong++;
						fprintf(stderr, "round %d: a READ brought other bytes\n", r);
					}
					break;
				case IBV_WC_REM_ACCESS_ERR:
				case IBV_WC_RETRY_EXC_ERR:
				case IBV_WC_WR_FLUSH_ERR:
					errors++;
					break;
				default:
					fprintf(stderr, "round %d: unexpected status %s\n", r,
						ibv_wc_status_str(wc[i].status));
					wrong++;
				}
			}
		}
		if (done < 2 * OPS) {
			fprintf(stderr, "round %d: %d of %d completions in 60 s\n", r, done, 2 * OPS);
			wrong++;
		}
		xfer(fd, &go, 1, 0); /* the owner has deregistered */
		xfer(fd, &go, 1, 1);
		if (ibv_destroy_qp(qp))
			die("ibv_destroy_qp");
	}
	ibv_dereg_mr(wmr);
	ibv_dereg_mr(rmr);
	free(wbuf);
	free(rbuf);
	free(expect);
	free(whole);
	printf("peer: %d rounds, %ld succeeded, %ld error completions (%ld remote access, %ld retry "
	       "exceeded, %ld flushed), %ld wrong\n",
	       rounds, ok, errors, by_status[IBV_WC_REM_ACCESS_ERR], by_status[IBV_WC_RETRY_EXC_ERR],
	       by_status[IBV_WC_WR_FLUSH_ERR], wrong);
	return wrong ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: dereg owner|peer IP PORT ROUNDS\n");
		return 2;
	}
	int is_owner = !strcmp(argv[1], "owner");
	int rounds = atoi(argv[4]);
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0] || !(ctx = ibv_open_device(list[0])))
		die("ibv_open_device");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !cq)
		die("setup");
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[3])) };
	inet_pton(AF_INET, argv[2], &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (is_owner) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, (void *)&sa, sizeof sa) || listen(fd, 1))
			die("bind/listen");
		printf("LISTENING\n");
		fflush(stdout);
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			die("accept");
		close(fd);
		fd = c;
	} else {
		int tries = 0;
		while (connect(fd, (void *)&sa, sizeof sa)) {
			if (++tries > 100)
				die("connect");
			usleep(50000);
		}
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int rc = is_owner ? owner(fd, rounds) : peer(fd, rounds);
	close(fd);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return rc;
}
