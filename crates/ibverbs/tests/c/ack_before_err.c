/* An ACK that has arrived before the QP moves to ERR completes its SEND.
 *
 * uDAPL's dapltest (scm provider) in miniature: the server posts a SEND;
 * the client receives it, says so over TCP at once and tears its QP down;
 * the server, told over TCP, moves its QP to ERR. The client's ACK left
 * before its TCP message, so it is in the server's socket when the server
 * modifies the QP: the SEND must complete with success, not be flushed.
 * Without softrdma receiving what has arrived before a modify to ERR,
 * 50-190 of 200 rounds were flushed.
 * (A NIC has processed an ACK that reached it long before a modify the
 * driver hands it later.)
 *
 *   ack_before_err server PORT ROUNDS [stall]
 *   ack_before_err client PORT ROUNDS HOST
 *
 * With `stall` (a shared device: its device process owns the socket and
 * hands the member its datagrams), the server stops its device process
 * (SIGSTOP) before each SEND and a thread continues it (SIGCONT) only once
 * the modify to ERR has begun: the client's ACK waits in the device's
 * socket, where only the device process can take it, as it does when a
 * loaded machine schedules the device process late. The modify must have
 * the device process hand it over first. Before it did, every round was
 * flushed (10-35% of 200 without `stall` under CPU load).
 *
 * The server prints "flushed N of ROUNDS" and exits 0 when N is 0. */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)

struct ends {
	uint32_t qpn, psn;
	union ibv_gid gid;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char buf[4096];

static void xfer(int fd, void *p, size_t n, int out)
{
	char *c = p;
	while (n) {
		ssize_t r = out ? write(fd, c, n) : read(fd, c, n);
		if (r <= 0)
			DIE("tcp %s: %m", out ? "write" : "read");
		c += r;
		n -= (size_t)r;
	}
}

static struct ibv_qp *connected_qp(int fd)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %m");
	struct ends me = { .qpn = qp->qp_num, .psn = (uint32_t)random() & 0xffffff }, peer;
	if (ibv_query_gid(ctx, 1, 0, &me.gid))
		DIE("ibv_query_gid: %m");
	xfer(fd, &me, sizeof me, 1);
	xfer(fd, &peer, sizeof peer, 0);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		DIE("RTR: %m");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = me.psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS: %m");
	return qp;
}

static struct ibv_wc one_wc(void)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0)
		DIE("ibv_poll_cq");
	return wc;
}

static void to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		DIE("ERR: %m");
}

/* The device process serving SOFTRDMA_ADDR (`softrdma device-host --addr
 * ADDR`, found in /proc). */
static pid_t device_process(void)
{
	const char *addr = getenv("SOFTRDMA_ADDR");
	if (!addr)
		DIE("stall: SOFTRDMA_ADDR is not set");
	DIR *d = opendir("/proc");
	if (!d)
		DIE("/proc: %m");
	pid_t found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		char path[300], cmd[4096];
		long pid = strtol(e->d_name, NULL, 10);
		if (pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(cmd, 1, sizeof cmd - 1, f);
		fclose(f);
		cmd[n] = 0;
		/* NUL-separated arguments: "device-host" then "--addr" ADDR. */
		int host = 0;
		for (size_t i = 0; i < n; i += strlen(cmd + i) + 1) {
			if (!strcmp(cmd + i, "device-host"))
				host = 1;
			else if (host && !strcmp(cmd + i, "--addr") && i + 7 < n &&
				 !strcmp(cmd + i + 7, addr))
				found = (pid_t)pid;
		}
	}
	closedir(d);
	if (!found)
		DIE("stall: no device process serves %s (is the device shared?)", addr);
	return found;
}

static pid_t host;
static int modifying;
static pthread_t waker;

/* Continues the device process once the modify to ERR has begun (and had
 * a moment to run). */
static void *continue_host(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&modifying, __ATOMIC_SEQ_CST))
		usleep(100);
	usleep(20000);
	kill(host, SIGCONT);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		DIE("usage: %s server PORT ROUNDS | client PORT ROUNDS HOST", argv[0]);
	int server = !strcmp(argv[1], "server");
	int stall = server && argc > 4 && !strcmp(argv[4], "stall");
	int rounds = atoi(argv[3]);
	srandom((unsigned)getpid());
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		DIE("no device");
	ctx = ibv_open_device(list[0]);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!ctx || !pd || !cq || !mr)
		DIE("setup: %m");
	int fd, one = 1;
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1))
			DIE("listen: %m");
		printf("listening\n");
		fd = accept(l, NULL, NULL);
		close(l);
	} else {
		struct addrinfo *ai;
		if (argc < 5 || getaddrinfo(argv[4], argv[2], NULL, &ai))
			DIE("getaddrinfo");
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen))
			DIE("connect: %m");
		freeaddrinfo(ai);
	}
	if (fd < 0)
		DIE("tcp: %m");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int flushed = 0;
	for (int i = 0; i < rounds; i++) {
		struct ibv_qp *qp = connected_qp(fd);
		struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
		char c = 'x';
		if (server) {
			/* Both sides are in RTS before the SEND goes. */
			xfer(fd, &c, 1, 0);
			if (stall) {
				if (!host)
					host = device_process();
				if (kill(host, SIGSTOP))
					DIE("SIGSTOP %d: %m", (int)host);
				__atomic_store_n(&modifying, 0, __ATOMIC_SEQ_CST);
				if (pthread_create(&waker, NULL, continue_host, NULL))
					DIE("pthread_create");
			}
			struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
					   *bad;
			if (ibv_post_send(qp, &wr, &bad))
				DIE("ibv_post_send: %m");
			/* The client has the message, and its ACK left before
			 * this byte. */
			xfer(fd, &c, 1, 0);
			__atomic_store_n(&modifying, 1, __ATOMIC_SEQ_CST);
			to_err(qp);
			if (stall)
				pthread_join(waker, NULL);
			struct ibv_wc wc = one_wc();
			if (wc.status == IBV_WC_WR_FLUSH_ERR)
				flushed++;
			else if (wc.status != IBV_WC_SUCCESS)
				DIE("round %d: SEND %s", i, ibv_wc_status_str(wc.status));
		} else {
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qp, &wr, &bad))
				DIE("ibv_post_recv: %m");
			xfer(fd, &c, 1, 1);
			struct ibv_wc wc = one_wc();
			if (wc.status != IBV_WC_SUCCESS)
				DIE("round %d: RECV %s", i, ibv_wc_status_str(wc.status));
			/* An ACK this thread's poll produced leaves with its
			 * next verbs call at the latest (a NIC's leaves before
			 * the completion is seen): one more poll puts it on the
			 * wire before the TCP byte. */
			ibv_poll_cq(cq, 1, &wc);
			xfer(fd, &c, 1, 1);
			to_err(qp);
		}
		/* What ERR flushed (the other side's leftovers): gone with the
		 * QP. */
		ibv_destroy_qp(qp);
		struct ibv_wc wc;
		while (ibv_poll_cq(cq, 1, &wc) > 0)
			;
	}
	if (server)
		printf("flushed %d of %d\n", flushed, rounds);
	return server && flushed ? 1 : 0;
}
