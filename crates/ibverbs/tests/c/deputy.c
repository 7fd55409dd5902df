/* RC traffic between two processes of one shared device while its device
 * process is stopped for far longer than the QPs' whole retry budget.
 *
 * A NIC delivers whether or not any task is scheduled; a shared device's
 * datagrams all arrive in the socket its device process owns, and a
 * loaded machine once left that process off the CPU for 8.6 s (issue 19,
 * Open MPI's 8+8 ranks). Its members, which poll, must receive for it.
 *
 *   deputy server PORT STOP_SECONDS
 *   deputy client PORT HOST
 *
 * Both run on the same shared address (softrdma exec --addr). Once their
 * QPs are in RTS (timeout 16: 268 ms, retry_cnt 7: about 2.1 s in all),
 * the server stops the device process serving SOFTRDMA_ADDR (SIGSTOP),
 * tells the client to start and continues the device process after
 * STOP_SECONDS (a thread, which then tells the client). The client runs
 * rounds of an RDMA WRITE of 4 KiB into the server's buffer, an RDMA READ
 * of it back (compared) and a SEND of the round's number (the server's
 * RECV checks it), busy-polling each completion, until the device process
 * runs again and at least MIN_ROUNDS rounds are done. Then both make a
 * new QP (claimed from the device process, which must answer) and run 20
 * rounds more. Any error completion or wrong byte: exit 1. The client
 * prints "phase 1: N rounds, M while the device process was stopped";
 * both print "ok" at the end. */
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(2); } while (0)
#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

#define LEN 4096
#define RECVS 16
#define MIN_ROUNDS 300

struct ends {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
/* Server: the target of WRITEs and READs, then the RECV buffers.
 * Client: the WRITE source, the READ target, the SEND buffer. */
static char buf[LEN * 2 + RECVS * 64];
static struct ends peer;
static int fd;

static void xfer(void *p, size_t n, int out)
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

static struct ibv_qp *connected_qp(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		DIE("ibv_create_qp: %m");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("INIT: %m");
	struct ends me = { .qpn = qp->qp_num, .psn = (uint32_t)random() & 0xffffff,
			   .rkey = mr->rkey, .addr = (uintptr_t)buf };
	if (ibv_query_gid(ctx, 1, 0, &me.gid))
		DIE("ibv_query_gid: %m");
	xfer(&me, sizeof me, 1);
	xfer(&peer, sizeof peer, 0);
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
	a.timeout = 16;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("RTS: %m");
	return qp;
}

/* Busy-polls one completion; an error one ends the program. */
static struct ibv_wc one_wc(const char *what, int round)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0)
		DIE("ibv_poll_cq");
	if (wc.status != IBV_WC_SUCCESS)
		FAIL("%s round %d: wr_id %llu opcode %d: %s", what, round,
		     (unsigned long long)wc.wr_id, (int)wc.opcode, ibv_wc_status_str(wc.status));
	return wc;
}

/* The device process serving SOFTRDMA_ADDR (`softrdma device-host --addr
 * ADDR`, found in /proc). */
static pid_t device_process(void)
{
	const char *addr = getenv("SOFTRDMA_ADDR");
	if (!addr)
		DIE("SOFTRDMA_ADDR is not set");
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
		DIE("no device process serves %s (is the device shared?)", addr);
	return found;
}

static pid_t host;
static int stop_seconds;

/* Continues the device process after the stop, and says so. */
static void *continue_host(void *arg)
{
	(void)arg;
	sleep((unsigned)stop_seconds);
	if (kill(host, SIGCONT))
		DIE("SIGCONT: %m");
	char c = 'c';
	xfer(&c, 1, 1);
	return NULL;
}

static void post_recv(struct ibv_qp *qp, int i)
{
	struct ibv_sge sge = { (uintptr_t)(buf + 2 * LEN + i * 64), 64, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		DIE("ibv_post_recv: %m");
}

/* Takes the client's SENDs until it says how many it sent, and all came. */
static void serve(struct ibv_qp *qp)
{
	for (int i = 0; i < RECVS; i++)
		post_recv(qp, i);
	uint32_t total = 0, got = 0;
	int have_total = 0;
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			DIE("ibv_poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				FAIL("server: RECV %u: %s", got, ibv_wc_status_str(wc.status));
			uint32_t r;
			memcpy(&r, buf + 2 * LEN + wc.wr_id * 64, 4);
			if (r != got)
				FAIL("server: SEND %u carried %u", got, r);
			got++;
			post_recv(qp, (int)wc.wr_id);
		}
		if (!have_total) {
			uint32_t t;
			ssize_t k = recv(fd, &t, 4, MSG_DONTWAIT | MSG_PEEK);
			if (k == 0)
				FAIL("server: the client left after %u SENDs", got);
			if (k == 4) {
				xfer(&t, 4, 0);
				total = t;
				have_total = 1;
			}
		}
		if (have_total && got == total)
			return;
	}
}

/* Rounds of WRITE, READ and SEND: at least `want`, and with
 * `until_continued` until the server says the device process runs again.
 * Returns how many; `stopped`: how many ended before that word. */
static uint32_t rounds(struct ibv_qp *qp, int until_continued, uint32_t want, uint32_t *stopped)
{
	uint32_t r = 0;
	int continued = !until_continued;
	*stopped = 0;
	while (continued ? r < want : 1) {
		char *src = buf, *back = buf + LEN, *msg = buf + 2 * LEN;
		memset(src, (int)(r * 7 + 1), LEN);
		memset(back, 0, LEN);
		struct ibv_sge ws = { (uintptr_t)src, LEN, mr->lkey };
		struct ibv_sge rs = { (uintptr_t)back, LEN, mr->lkey };
		memcpy(msg, &r, 4);
		struct ibv_sge ss = { (uintptr_t)msg, 4, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &ws, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = { peer.addr, peer.rkey } };
		struct ibv_send_wr rd = { .wr_id = 2, .sg_list = &rs, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { peer.addr, peer.rkey } };
		struct ibv_send_wr s = { .wr_id = 3, .sg_list = &ss, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr *bad;
		if (ibv_post_send(qp, &w, &bad))
			DIE("post WRITE: %m");
		one_wc("WRITE", (int)r);
		if (ibv_post_send(qp, &rd, &bad))
			DIE("post READ: %m");
		one_wc("READ", (int)r);
		for (int i = 0; i < LEN; i++)
			if (back[i] != src[i])
				FAIL("round %u: READ byte %d is %d, not %d", r, i, back[i], src[i]);
		if (ibv_post_send(qp, &s, &bad))
			DIE("post SEND: %m");
		one_wc("SEND", (int)r);
		r++;
		if (!continued) {
			char c;
			if (recv(fd, &c, 1, MSG_DONTWAIT) == 1)
				continued = 1;
			else
				(*stopped)++;
		}
	}
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		DIE("usage: %s server PORT STOP_SECONDS | client PORT HOST", argv[0]);
	int server = !strcmp(argv[1], "server");
	srandom((unsigned)getpid());
	setvbuf(stdout, NULL, _IONBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		DIE("no device");
	ctx = ibv_open_device(list[0]);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof buf,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!ctx || !pd || !cq || !mr)
		DIE("setup: %m");
	int one = 1;
	if (server) {
		stop_seconds = atoi(argv[3]);
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
		if (getaddrinfo(argv[3], argv[2], NULL, &ai))
			DIE("getaddrinfo");
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen))
			DIE("connect: %m");
		freeaddrinfo(ai);
	}
	if (fd < 0)
		DIE("tcp: %m");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	for (int phase = 1; phase <= 2; phase++) {
		struct ibv_qp *qp = connected_qp();
		char c = 'g';
		if (server) {
			pthread_t t;
			/* Both QPs are in RTS (the client waits for this byte). */
			if (phase == 1) {
				host = device_process();
				if (kill(host, SIGSTOP))
					DIE("SIGSTOP %d: %m", (int)host);
				printf("stopped the device process %d for %d s\n", (int)host, stop_seconds);
				if (pthread_create(&t, NULL, continue_host, NULL))
					DIE("pthread_create");
			}
			xfer(&c, 1, 1);
			serve(qp);
			if (phase == 1)
				pthread_join(t, NULL);
		} else {
			xfer(&c, 1, 0);
			uint32_t stopped;
			uint32_t n = rounds(qp, phase == 1, phase == 1 ? MIN_ROUNDS : 20, &stopped);
			printf("phase %d: %u rounds, %u while the device process was stopped\n", phase, n,
			       stopped);
			xfer(&n, 4, 1);
		}
		/* Both sides are done with the QP before it goes. */
		xfer(&c, 1, 1);
		xfer(&c, 1, 0);
		ibv_destroy_qp(qp);
	}
	printf("ok\n");
	return 0;
}
