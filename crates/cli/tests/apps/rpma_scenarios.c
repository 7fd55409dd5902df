/* librpma (Debian 12's librpma-dev 1.2.0) in the scenarios of its 15
 * upstream examples (pmem/rpma tag 1.2.0, examples/01 … 13 without the
 * protobuf-based 09s), written anew for softrdma's tests: Debian ships no
 * examples, and theirs are not copied here. Each scenario checks what it
 * moved, byte for byte, on the side that can see it.
 *
 *   rpma_scenarios SCENARIO server ADDR PORT [CLIENTS]
 *   rpma_scenarios SCENARIO client ADDR PORT [SEED]
 *
 * SCENARIO (the upstream example it follows):
 *   01      connection: private data both ways, disconnect
 *   02      RDMA READ from the server's region (read-to-volatile)
 *   03      the server READs the client's region (read-to-persistent)
 *   04      RDMA WRITE to the server, read back (write-to-persistent)
 *   05      WRITE + rpma_flush under the server's peer configuration
 *   06      one server, CLIENTS connections at once (epoll), READs each
 *   06scch  06 with the connections' CQs on one shared completion channel
 *   07      a log appended with WRITE + flush + rpma_atomic_write
 *   08      SEND/RECV ping-pong; the client's last message is an
 *           unsignaled SEND right before rdma_disconnect
 *   08srq   08 with the server's receives on a shared RQ
 *   10      SEND with immediate data
 *   11      RDMA WRITE with immediate data
 *   12      ping-pong with receives on a separate receive CQ
 *   12scch  12 with both CQs on a shared completion channel
 *   13      one server, CLIENTS ping-pong clients at once on one shared RQ
 *
 * The server prints "listening" once its endpoint listens, both sides
 * print "ok SCENARIO …" and exit 0 when everything checked out. */
#include "rpma_common.h"

/* ------------------------------------------------------------ 01 ---- */

static int s01(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_ep *ep = listen_here(peer);
	char hi[] = "hello from the server";
	struct rpma_conn *conn = accept_from(ep, NULL, hi, sizeof hi, NULL, 0);
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	if (!pd.ptr || strcmp(pd.ptr, "hello from the client"))
		DIE("the client's private data: %.*s", pd.len, (char *)pd.ptr);
	server_close(&conn);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int c01(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	char hi[] = "hello from the client";
	struct rpma_conn *conn = connect_to(peer, NULL, hi, sizeof hi);
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	if (!pd.ptr || strcmp(pd.ptr, "hello from the server"))
		DIE("the server's private data: %.*s", pd.len, (char *)pd.ptr);
	client_close(&conn);
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

/* ------------------------------------------------------ 02, 03 ---- */

/* The side that exposes a region to be read. */
static void expose_for_read(struct rpma_peer *peer, struct rpma_mr_local **mr, void **buf,
			    struct desc *d, uint8_t *len, uint64_t seed)
{
	*buf = region(REGION);
	pattern(*buf, REGION, seed);
	CHECK(rpma_mr_reg(peer, *buf, REGION, RPMA_MR_USAGE_READ_SRC, mr));
	*len = desc_of(d, *mr, NULL, seed);
}

/* The side that reads the peer's region and checks it. */
static void read_and_check(struct rpma_peer *peer, struct rpma_conn *conn)
{
	uint64_t seed;
	size_t size;
	struct rpma_mr_remote *src = remote_of(conn, NULL, &seed);
	CHECK(rpma_mr_remote_get_size(src, &size));
	if (size != REGION)
		DIE("remote region of %zu bytes", size);
	void *dst = region(REGION);
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, dst, REGION, RPMA_MR_USAGE_READ_DST, &mr));
	CHECK(rpma_read(conn, mr, 0, src, 0, REGION, RPMA_F_COMPLETION_ALWAYS, NULL));
	conn_wc(conn, IBV_WC_RDMA_READ);
	check_pattern(dst, REGION, seed, "RDMA READ");
	CHECK(rpma_mr_remote_delete(&src));
	CHECK(rpma_mr_dereg(&mr));
	free(dst);
}

static int s02(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_mr_local *mr;
	void *buf;
	struct desc d;
	uint8_t len;
	expose_for_read(peer, &mr, &buf, &d, &len, 2);
	struct rpma_ep *ep = listen_here(peer);
	struct rpma_conn *conn = accept_from(ep, NULL, &d, len, NULL, 0);
	server_close(&conn);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

static int c02(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn *conn = connect_to(peer, NULL, NULL, 0);
	read_and_check(peer, conn);
	client_close(&conn);
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int s03(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_ep *ep = listen_here(peer);
	struct rpma_conn *conn = accept_from(ep, NULL, NULL, 0, NULL, 0);
	read_and_check(peer, conn);
	/* Done: the server disconnects, the client answers. */
	CHECK(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int c03(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_mr_local *mr;
	void *buf;
	struct desc d;
	uint8_t len;
	expose_for_read(peer, &mr, &buf, &d, &len, 3);
	struct rpma_conn *conn = connect_to(peer, NULL, &d, len);
	server_close(&conn);
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

/* ---------------------------------------------------- 04, 05, 07 ---- */

/* A server region the client writes, with (05, 07) a peer configuration
 * saying writes do not reach persistence by themselves (DRAM). After the
 * client's disconnect, `verify` checks the region. */
static int serve_writable(int usage, int with_pcfg, void (*verify)(uint8_t *))
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_peer_cfg *pcfg = NULL;
	struct rpma_mr_local *mr;
	struct desc d;
	uint8_t *buf = region(REGION);
	if (with_pcfg) {
		CHECK(rpma_peer_cfg_new(&pcfg));
		CHECK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, false));
	}
	CHECK(rpma_mr_reg(peer, buf, REGION, usage, &mr));
	uint8_t len = desc_of(&d, mr, pcfg, 0);
	struct rpma_ep *ep = listen_here(peer);
	struct rpma_conn *conn = accept_from(ep, NULL, &d, len, NULL, 0);
	server_close(&conn);
	verify(buf);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	if (pcfg)
		CHECK(rpma_peer_cfg_delete(&pcfg));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

static void verify_written(uint8_t *buf)
{
	check_pattern(buf, REGION, 4, "the written region");
}

static int s04(void)
{
	return serve_writable(RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC, 0, verify_written);
}

static int c04(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn *conn = connect_to(peer, NULL, NULL, 0);
	struct rpma_mr_remote *dst = remote_of(conn, NULL, NULL);
	uint8_t *src = region(REGION), *back = region(REGION);
	struct rpma_mr_local *smr, *bmr;
	pattern(src, REGION, 4);
	CHECK(rpma_mr_reg(peer, src, REGION, RPMA_MR_USAGE_WRITE_SRC, &smr));
	CHECK(rpma_mr_reg(peer, back, REGION, RPMA_MR_USAGE_READ_DST, &bmr));
	CHECK(rpma_write(conn, dst, 0, smr, 0, REGION, RPMA_F_COMPLETION_ON_ERROR, NULL));
	/* A READ after the WRITE: it returns what the WRITE put there. */
	CHECK(rpma_read(conn, bmr, 0, dst, 0, REGION, RPMA_F_COMPLETION_ALWAYS, NULL));
	conn_wc(conn, IBV_WC_RDMA_READ);
	check_pattern(back, REGION, 4, "read back");
	client_close(&conn);
	CHECK(rpma_mr_remote_delete(&dst));
	CHECK(rpma_mr_dereg(&smr));
	CHECK(rpma_mr_dereg(&bmr));
	CHECK(rpma_peer_delete(&peer));
	free(src);
	free(back);
	return 0;
}

static void verify_flushed(uint8_t *buf)
{
	check_pattern(buf, REGION / 2, 5, "the flushed half");
	for (size_t i = REGION / 2; i < REGION; i++)
		if (buf[i])
			DIE("byte %zu beyond the write is %#x", i, buf[i]);
}

static int s05(void)
{
	return serve_writable(RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY, 1,
			      verify_flushed);
}

/* The client side of 05 and 07: the server's region and configuration
 * applied, and the flush type it allows. */
static struct rpma_mr_remote *writable_of(struct rpma_conn *conn, enum rpma_flush_type *ft)
{
	struct rpma_peer_cfg *pcfg;
	bool direct = true;
	int types = 0;
	struct rpma_mr_remote *dst = remote_of(conn, &pcfg, NULL);
	CHECK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	CHECK(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct));
	if (direct)
		DIE("the server's region is DRAM: no direct write to PMem");
	CHECK(rpma_mr_remote_get_flush_type(dst, &types));
	*ft = (types & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) ? RPMA_FLUSH_TYPE_PERSISTENT
							    : RPMA_FLUSH_TYPE_VISIBILITY;
	if (!(types & (RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY)))
		DIE("the server's region allows no flush");
	CHECK(rpma_peer_cfg_delete(&pcfg));
	return dst;
}

static int c05(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn *conn = connect_to(peer, NULL, NULL, 0);
	enum rpma_flush_type ft;
	struct rpma_mr_remote *dst = writable_of(conn, &ft);
	uint8_t *src = region(REGION / 2);
	struct rpma_mr_local *mr;
	pattern(src, REGION / 2, 5);
	CHECK(rpma_mr_reg(peer, src, REGION / 2, RPMA_MR_USAGE_WRITE_SRC, &mr));
	CHECK(rpma_write(conn, dst, 0, mr, 0, REGION / 2, RPMA_F_COMPLETION_ON_ERROR, NULL));
	CHECK(rpma_flush(conn, dst, 0, REGION / 2, ft, RPMA_F_COMPLETION_ALWAYS, NULL));
	/* librpma flushes for visibility with a READ after the WRITE. */
	conn_wc(conn, IBV_WC_RDMA_READ);
	client_close(&conn);
	CHECK(rpma_mr_remote_delete(&dst));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(src);
	return 0;
}

/* 07: a log: the first 8 bytes say how much of the data area (from byte
 * 64) is used; each word is written at the end of the data, flushed, and
 * only then the new length, with rpma_atomic_write, flushed. */
#define LOG_DATA 64
static const char *log_words[] = { "first_word", "2nd_word", "and_a_third_one" };
#define N_WORDS 3

static void verify_log(uint8_t *buf)
{
	uint64_t used;
	memcpy(&used, buf, 8);
	size_t off = 0;
	for (int i = 0; i < N_WORDS; i++) {
		size_t n = strlen(log_words[i]) + 1;
		if (memcmp(buf + LOG_DATA + off, log_words[i], n))
			DIE("log word %d: \"%s\"", i, buf + LOG_DATA + off);
		off += n;
	}
	if (used != off)
		DIE("log length %" PRIu64 ", want %zu", used, off);
}

static int s07(void)
{
	return serve_writable(RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
				      RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
			      1, verify_log);
}

static int c07(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn *conn = connect_to(peer, NULL, NULL, 0);
	enum rpma_flush_type ft;
	struct rpma_mr_remote *dst = writable_of(conn, &ft);
	uint8_t *buf = region(4096);
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, buf, 4096, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST, &mr));
	/* The length so far (0). */
	CHECK(rpma_read(conn, mr, 0, dst, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	conn_wc(conn, IBV_WC_RDMA_READ);
	uint64_t used;
	memcpy(&used, buf, 8);
	if (used)
		DIE("a fresh log of length %" PRIu64, used);
	for (int i = 0; i < N_WORDS; i++) {
		size_t n = strlen(log_words[i]) + 1;
		memcpy(buf + 64, log_words[i], n);
		CHECK(rpma_write(conn, dst, LOG_DATA + used, mr, 64, n, RPMA_F_COMPLETION_ON_ERROR,
				 NULL));
		CHECK(rpma_flush(conn, dst, LOG_DATA + used, n, ft, RPMA_F_COMPLETION_ALWAYS, NULL));
		conn_wc(conn, IBV_WC_RDMA_READ);
		used += n;
		char word[8];
		memcpy(word, &used, 8);
		CHECK(rpma_atomic_write(conn, dst, 0, word, RPMA_F_COMPLETION_ON_ERROR, NULL));
		CHECK(rpma_flush(conn, dst, 0, 8, ft, RPMA_F_COMPLETION_ALWAYS, NULL));
		conn_wc(conn, IBV_WC_RDMA_READ);
	}
	client_close(&conn);
	CHECK(rpma_mr_remote_delete(&dst));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

/* ------------------------------------------------ 06, 06scch ---- */

/* 06: CLIENTS clients at once; the server READs each client's region
 * (seeded by the client) as soon as it is connected, checks it, and
 * disconnects it; one epoll loop over the endpoint, the connections'
 * events and their completions. */
struct slot {
	struct rpma_conn *conn;
	struct rpma_mr_local *mr;
	void *buf;
	uint64_t seed;
	int ev_fd, cq_fd, done;
};

static void epoll_add(int ep, int fd, void *ptr)
{
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = ptr };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e))
		DIE("epoll_ctl: %m");
}

static int s06(int clients, int shared)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_conn_cfg *cfg = NULL;
	if (shared) {
		CHECK(rpma_conn_cfg_new(&cfg));
		CHECK(rpma_conn_cfg_set_compl_channel(cfg, true));
	}
	struct rpma_ep *ep = listen_here(peer);
	int epfd = epoll_create1(0), ep_fd;
	static struct slot slots[MAX_CLIENTS];
	static int ep_tag;
	CHECK(rpma_ep_get_fd(ep, &ep_fd));
	epoll_add(epfd, ep_fd, &ep_tag);
	int accepted = 0, closed = 0;
	while (closed < clients) {
		struct epoll_event e;
		int n = epoll_wait(epfd, &e, 1, -1);
		if (n < 0)
			DIE("epoll_wait: %m");
		if (e.data.ptr == &ep_tag) {
			if (accepted == clients)
				DIE("more clients than %d", clients);
			struct slot *s = &slots[accepted++];
			struct rpma_conn_req *req;
			CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
			CHECK(rpma_conn_req_connect(&req, NULL, &s->conn));
			CHECK(rpma_conn_get_event_fd(s->conn, &s->ev_fd));
			epoll_add(epfd, s->ev_fd, s);
			if (shared) {
				CHECK(rpma_conn_get_compl_fd(s->conn, &s->cq_fd));
			} else {
				struct rpma_cq *cq;
				CHECK(rpma_conn_get_cq(s->conn, &cq));
				CHECK(rpma_cq_get_fd(cq, &s->cq_fd));
			}
			/* Completions are told apart by `done`: the event
			 * fd's slot pointer is the slot, the completion
			 * fd's is one past it in a second table. */
			epoll_add(epfd, s->cq_fd, (char *)s + 1);
			continue;
		}
		int is_cq = (uintptr_t)e.data.ptr & 1;
		struct slot *s = (struct slot *)((uintptr_t)e.data.ptr & ~(uintptr_t)1);
		if (!is_cq) {
			enum rpma_conn_event ev;
			CHECK(rpma_conn_next_event(s->conn, &ev));
			if (ev == RPMA_CONN_ESTABLISHED) {
				size_t size;
				struct rpma_mr_remote *src = remote_of(s->conn, NULL, &s->seed);
				CHECK(rpma_mr_remote_get_size(src, &size));
				s->buf = region(REGION);
				CHECK(rpma_mr_reg(peer, s->buf, REGION, RPMA_MR_USAGE_READ_DST, &s->mr));
				CHECK(rpma_read(s->conn, s->mr, 0, src, 0, REGION,
						RPMA_F_COMPLETION_ALWAYS, NULL));
				CHECK(rpma_mr_remote_delete(&src));
			} else if (ev == RPMA_CONN_CLOSED) {
				if (!s->done)
					DIE("client %" PRIu64 " closed before its region was read",
					    s->seed);
				epoll_ctl(epfd, EPOLL_CTL_DEL, s->ev_fd, NULL);
				epoll_ctl(epfd, EPOLL_CTL_DEL, s->cq_fd, NULL);
				CHECK(rpma_conn_delete(&s->conn));
				CHECK(rpma_mr_dereg(&s->mr));
				free(s->buf);
				closed++;
			} else {
				DIE("connection event %s", rpma_utils_conn_event_2str(ev));
			}
			continue;
		}
		struct rpma_cq *cq;
		if (shared) {
			CHECK(rpma_conn_wait(s->conn, 0, &cq, NULL));
		} else {
			CHECK(rpma_conn_get_cq(s->conn, &cq));
			CHECK(rpma_cq_wait(cq));
		}
		struct ibv_wc wc;
		if (!try_wc(cq, &wc))
			continue;
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_READ)
			DIE("client %" PRIu64 ": completion %s opcode %d", s->seed,
			    ibv_wc_status_str(wc.status), wc.opcode);
		check_pattern(s->buf, REGION, s->seed, "a client's region");
		s->done = 1;
		CHECK(rpma_conn_disconnect(s->conn));
	}
	close(epfd);
	CHECK(rpma_ep_shutdown(&ep));
	if (cfg)
		CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_peer_delete(&peer));
	printf("read %d clients\n", clients);
	return 0;
}

static int c06(uint64_t seed)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_mr_local *mr;
	void *buf;
	struct desc d;
	uint8_t len;
	expose_for_read(peer, &mr, &buf, &d, &len, seed);
	struct rpma_conn *conn = connect_to(peer, NULL, &d, len);
	/* The server disconnects once it has read the region. */
	expect_event(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(buf);
	return 0;
}

/* --------------------------------------- 08, 08srq, 12, 12scch ---- */

/* Ping-pong: the client sends a value, the server answers value + 1; the
 * client's last message, DONE, goes as an unsignaled SEND right before
 * its disconnect, and the server must receive it. */
struct pong {
	struct rpma_conn *conn;
	struct rpma_mr_local *rmr, *smr;
	uint64_t *rbuf, *sbuf;
	struct rpma_cq *rcq, *scq;
	int shared;
};

static void pong_buffers(struct rpma_peer *peer, struct pong *p)
{
	p->rbuf = region(4096);
	p->sbuf = region(4096);
	CHECK(rpma_mr_reg(peer, p->rbuf, 4096, RPMA_MR_USAGE_RECV, &p->rmr));
	CHECK(rpma_mr_reg(peer, p->sbuf, 4096, RPMA_MR_USAGE_SEND, &p->smr));
}

/* A completion of either CQ: with a shared channel, rpma_conn_wait says
 * which one has it. */
static struct ibv_wc pong_wc(struct pong *p, enum ibv_wc_opcode op)
{
	struct rpma_cq *cq = op == IBV_WC_RECV ? p->rcq : p->scq;
	if (!p->shared)
		return next_wc(cq, op);
	struct ibv_wc wc;
	while (!try_wc(cq, &wc)) {
		struct rpma_cq *which;
		bool is_rcq;
		CHECK(rpma_conn_wait(p->conn, 0, &which, &is_rcq));
		if ((which == p->rcq) != is_rcq)
			DIE("rpma_conn_wait: is_rcq %d for the other CQ", is_rcq);
		/* A completion of the other CQ: it stays there. */
	}
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != op)
		DIE("completion %s opcode %d, want %d", ibv_wc_status_str(wc.status), wc.opcode, op);
	return wc;
}

static void pong_cqs(struct pong *p, int separate_rcq)
{
	CHECK(rpma_conn_get_cq(p->conn, &p->scq));
	if (separate_rcq)
		CHECK(rpma_conn_get_rcq(p->conn, &p->rcq));
	else
		p->rcq = p->scq;
}

/* The server of 08, 12, 12scch (one client). */
static int s_pong(int separate_rcq, int shared)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_conn_cfg *cfg = NULL;
	struct pong p = { .shared = shared };
	pong_buffers(peer, &p);
	if (separate_rcq || shared) {
		CHECK(rpma_conn_cfg_new(&cfg));
		if (separate_rcq)
			CHECK(rpma_conn_cfg_set_rcq_size(cfg, 16));
		if (shared)
			CHECK(rpma_conn_cfg_set_compl_channel(cfg, true));
	}
	struct rpma_ep *ep = listen_here(peer);
	p.conn = accept_from(ep, cfg, NULL, 0, p.rmr, 8);
	pong_cqs(&p, separate_rcq);
	uint64_t rounds = 0;
	for (;;) {
		/* The answers go unsignaled: only receives complete. */
		pong_wc(&p, IBV_WC_RECV);
		uint64_t v = *p.rbuf;
		if (v == DONE)
			break;
		rounds++;
		CHECK(rpma_recv(p.conn, p.rmr, 0, 8, NULL));
		*p.sbuf = v + 1;
		CHECK(rpma_send(p.conn, p.smr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, NULL));
	}
	printf("pong rounds %" PRIu64 " then DONE\n", rounds);
	server_close(&p.conn);
	CHECK(rpma_ep_shutdown(&ep));
	if (cfg)
		CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_mr_dereg(&p.rmr));
	CHECK(rpma_mr_dereg(&p.smr));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int c_pong(uint64_t seed, int separate_rcq, int shared)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn_cfg *cfg = NULL;
	struct pong p = { .shared = shared };
	pong_buffers(peer, &p);
	if (separate_rcq || shared) {
		CHECK(rpma_conn_cfg_new(&cfg));
		if (separate_rcq)
			CHECK(rpma_conn_cfg_set_rcq_size(cfg, 16));
		if (shared)
			CHECK(rpma_conn_cfg_set_compl_channel(cfg, true));
	}
	p.conn = connect_to(peer, cfg, NULL, 0);
	pong_cqs(&p, separate_rcq);
	uint64_t v = seed;
	for (int i = 0; i < PONG_ROUNDS; i++) {
		CHECK(rpma_recv(p.conn, p.rmr, 0, 8, NULL));
		*p.sbuf = v;
		CHECK(rpma_send(p.conn, p.smr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
		if (separate_rcq) {
			pong_wc(&p, IBV_WC_SEND);
			pong_wc(&p, IBV_WC_RECV);
		} else {
			/* One CQ: the SEND's completion and the answer, in
			 * either order. */
			int send = 0, recv = 0;
			while (!send || !recv) {
				struct ibv_wc wc;
				if (!try_wc(p.scq, &wc)) {
					CHECK(rpma_cq_wait(p.scq));
					continue;
				}
				if (wc.status != IBV_WC_SUCCESS)
					DIE("completion: %s", ibv_wc_status_str(wc.status));
				if (wc.opcode == IBV_WC_SEND)
					send++;
				else if (wc.opcode == IBV_WC_RECV)
					recv++;
				else
					DIE("completion opcode %d", wc.opcode);
			}
		}
		if (*p.rbuf != v + 1)
			DIE("round %d: answer %" PRIu64 ", want %" PRIu64, i, *p.rbuf, v + 1);
		v = *p.rbuf;
	}
	/* The last message: unsignaled, and the disconnect right after it. */
	*p.sbuf = DONE;
	CHECK(rpma_send(p.conn, p.smr, 0, 8, RPMA_F_COMPLETION_ON_ERROR, NULL));
	client_close(&p.conn);
	if (cfg)
		CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_mr_dereg(&p.rmr));
	CHECK(rpma_mr_dereg(&p.smr));
	CHECK(rpma_peer_delete(&peer));
	printf("pong from %" PRIu64 " to %" PRIu64 "\n", seed, v);
	return 0;
}

/* 08srq and 13: the server's receives on a shared RQ (with its own
 * receive CQ), CLIENTS clients at once; a receive's QP number says which
 * connection it came on. 08srq serves one client in a plain loop, 13
 * several from an epoll loop. */
struct srq_conn {
	struct rpma_conn *conn;
	uint32_t qpn;
	int ev_fd, done, closed;
};

static int s_srq(int clients)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_srq_cfg *scfg;
	struct rpma_srq *srq;
	struct rpma_conn_cfg *cfg;
	struct rpma_cq *rcq;
	enum { SLOTS = 2 * MAX_CLIENTS };
	uint64_t *rbuf = region(SLOTS * 8), *sbuf = region(MAX_CLIENTS * 8);
	struct rpma_mr_local *rmr, *smr;
	CHECK(rpma_srq_cfg_new(&scfg));
	CHECK(rpma_srq_cfg_set_rq_size(scfg, SLOTS));
	CHECK(rpma_srq_cfg_set_rcq_size(scfg, SLOTS));
	CHECK(rpma_srq_new(peer, scfg, &srq));
	CHECK(rpma_srq_get_rcq(srq, &rcq));
	CHECK(rpma_conn_cfg_new(&cfg));
	CHECK(rpma_conn_cfg_set_srq(cfg, srq));
	CHECK(rpma_mr_reg(peer, rbuf, SLOTS * 8, RPMA_MR_USAGE_RECV, &rmr));
	CHECK(rpma_mr_reg(peer, sbuf, MAX_CLIENTS * 8, RPMA_MR_USAGE_SEND, &smr));
	/* Every receive's context is its slot. */
	for (uintptr_t i = 0; i < SLOTS; i++)
		CHECK(rpma_srq_recv(srq, rmr, i * 8, 8, (void *)i));
	struct rpma_ep *ep = listen_here(peer);
	static struct srq_conn cs[MAX_CLIENTS];
	int epfd = epoll_create1(0), ep_fd, rcq_fd;
	static int ep_tag, rcq_tag;
	CHECK(rpma_ep_get_fd(ep, &ep_fd));
	CHECK(rpma_cq_get_fd(rcq, &rcq_fd));
	epoll_add(epfd, ep_fd, &ep_tag);
	epoll_add(epfd, rcq_fd, &rcq_tag);
	int accepted = 0, closed = 0;
	uint64_t answered = 0;
	while (closed < clients) {
		struct epoll_event e;
		if (epoll_wait(epfd, &e, 1, -1) < 0)
			DIE("epoll_wait: %m");
		if (e.data.ptr == &ep_tag) {
			if (accepted == clients)
				DIE("more clients than %d", clients);
			struct srq_conn *c = &cs[accepted++];
			struct rpma_conn_req *req;
			CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
			CHECK(rpma_conn_req_connect(&req, NULL, &c->conn));
			CHECK(rpma_conn_get_qp_num(c->conn, &c->qpn));
			CHECK(rpma_conn_get_event_fd(c->conn, &c->ev_fd));
			epoll_add(epfd, c->ev_fd, c);
			continue;
		}
		if (e.data.ptr == &rcq_tag) {
			CHECK(rpma_cq_wait(rcq));
			for (;;) {
				struct ibv_wc wc;
				if (!try_wc(rcq, &wc))
					break;
				if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV)
					DIE("receive: %s opcode %d", ibv_wc_status_str(wc.status),
					    wc.opcode);
				uintptr_t slot = (uintptr_t)wc.wr_id;
				struct srq_conn *c = NULL;
				for (int i = 0; i < accepted; i++)
					if (cs[i].qpn == wc.qp_num)
						c = &cs[i];
				if (!c)
					DIE("a receive on QP %u, no such connection", wc.qp_num);
				uint64_t v = rbuf[slot];
				CHECK(rpma_srq_recv(srq, rmr, slot * 8, 8, (void *)slot));
				if (v == DONE) {
					c->done = 1;
					continue;
				}
				size_t k = (size_t)(c - cs);
				sbuf[k] = v + 1;
				CHECK(rpma_send(c->conn, smr, k * 8, 8, RPMA_F_COMPLETION_ON_ERROR,
						NULL));
				answered++;
			}
			continue;
		}
		struct srq_conn *c = e.data.ptr;
		enum rpma_conn_event ev;
		CHECK(rpma_conn_next_event(c->conn, &ev));
		if (ev == RPMA_CONN_ESTABLISHED)
			continue;
		if (ev != RPMA_CONN_CLOSED)
			DIE("connection event %s", rpma_utils_conn_event_2str(ev));
		/* The client's DONE was received before its disconnect:
		 * completions of one QP's receives come in order, and the
		 * DONE was sent before the DREQ. Its completion may still be
		 * waiting in the receive CQ: drain it first. */
		if (!c->done) {
			for (;;) {
				struct ibv_wc wc;
				if (!try_wc(rcq, &wc))
					break;
				uintptr_t slot = (uintptr_t)wc.wr_id;
				CHECK(rpma_srq_recv(srq, rmr, slot * 8, 8, (void *)slot));
				for (int i = 0; i < accepted; i++)
					if (cs[i].qpn == wc.qp_num && rbuf[slot] == DONE)
						cs[i].done = 1;
			}
		}
		if (!c->done)
			DIE("a client closed before its DONE arrived");
		epoll_ctl(epfd, EPOLL_CTL_DEL, c->ev_fd, NULL);
		CHECK(rpma_conn_disconnect(c->conn));
		CHECK(rpma_conn_delete(&c->conn));
		closed++;
	}
	printf("answered %" PRIu64 " messages of %d clients\n", answered, clients);
	close(epfd);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_mr_dereg(&rmr));
	CHECK(rpma_mr_dereg(&smr));
	CHECK(rpma_srq_delete(&srq));
	CHECK(rpma_srq_cfg_delete(&scfg));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

/* ------------------------------------------------------ 10, 11 ---- */

#define IMM 0x1234abcdU
static const char imm_word[] = "a word with immediate data";

static int s10(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	char *buf = region(4096);
	struct rpma_mr_local *mr;
	CHECK(rpma_mr_reg(peer, buf, 4096, RPMA_MR_USAGE_RECV, &mr));
	struct rpma_ep *ep = listen_here(peer);
	struct rpma_conn *conn = accept_from(ep, NULL, NULL, 0, mr, 4096);
	struct ibv_wc wc = conn_wc(conn, IBV_WC_RECV);
	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM)
		DIE("immediate data: flags %#x imm %#x", wc.wc_flags, ntohl(wc.imm_data));
	if (wc.byte_len != sizeof imm_word || strcmp(buf, imm_word))
		DIE("received %u bytes: %s", wc.byte_len, buf);
	server_close(&conn);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int c10(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	char *buf = region(4096);
	struct rpma_mr_local *mr;
	memcpy(buf, imm_word, sizeof imm_word);
	CHECK(rpma_mr_reg(peer, buf, 4096, RPMA_MR_USAGE_SEND, &mr));
	struct rpma_conn *conn = connect_to(peer, NULL, NULL, 0);
	CHECK(rpma_send_with_imm(conn, mr, 0, sizeof imm_word, RPMA_F_COMPLETION_ALWAYS, IMM,
				 NULL));
	conn_wc(conn, IBV_WC_SEND);
	client_close(&conn);
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int s11(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_LOCAL);
	uint8_t *buf = region(REGION);
	struct rpma_mr_local *mr, *rmr;
	struct desc d;
	/* The WRITE with immediate consumes a receive (of no bytes). */
	CHECK(rpma_mr_reg(peer, buf, REGION, RPMA_MR_USAGE_WRITE_DST, &mr));
	void *rbuf = region(4096);
	CHECK(rpma_mr_reg(peer, rbuf, 4096, RPMA_MR_USAGE_RECV, &rmr));
	uint8_t len = desc_of(&d, mr, NULL, 11);
	struct rpma_ep *ep = listen_here(peer);
	struct rpma_conn *conn = accept_from(ep, NULL, &d, len, rmr, 0);
	struct ibv_wc wc = conn_wc(conn, IBV_WC_RECV_RDMA_WITH_IMM);
	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM)
		DIE("immediate data: flags %#x imm %#x", wc.wc_flags, ntohl(wc.imm_data));
	check_pattern(buf, REGION, 11, "the region written with immediate data");
	server_close(&conn);
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_mr_dereg(&rmr));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int c11(void)
{
	struct rpma_peer *peer = peer_of(RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn *conn = connect_to(peer, NULL, NULL, 0);
	uint64_t seed;
	struct rpma_mr_remote *dst = remote_of(conn, NULL, &seed);
	uint8_t *src = region(REGION);
	struct rpma_mr_local *mr;
	pattern(src, REGION, seed);
	CHECK(rpma_mr_reg(peer, src, REGION, RPMA_MR_USAGE_WRITE_SRC, &mr));
	CHECK(rpma_write_with_imm(conn, dst, 0, mr, 0, REGION, RPMA_F_COMPLETION_ALWAYS, IMM,
				  NULL));
	conn_wc(conn, IBV_WC_RDMA_WRITE);
	client_close(&conn);
	CHECK(rpma_mr_remote_delete(&dst));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

/* ---------------------------------------------------------- main ---- */

int main(int argc, char **argv)
{
	if (argc < 5)
		DIE("usage: %s SCENARIO server|client ADDR PORT [CLIENTS|SEED]", argv[0]);
	setvbuf(stdout, NULL, _IONBF, 0);
	rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_WARNING);
	scenario = argv[1];
	int server = !strcmp(argv[2], "server");
	addr = argv[3];
	port = argv[4];
	uint64_t arg = argc > 5 ? strtoull(argv[5], NULL, 0) : 0;
	const char *s = scenario;
	int r;
	if (!strcmp(s, "01"))
		r = server ? s01() : c01();
	else if (!strcmp(s, "02"))
		r = server ? s02() : c02();
	else if (!strcmp(s, "03"))
		r = server ? s03() : c03();
	else if (!strcmp(s, "04"))
		r = server ? s04() : c04();
	else if (!strcmp(s, "05"))
		r = server ? s05() : c05();
	else if (!strcmp(s, "06") || !strcmp(s, "06scch")) {
		if (server && (arg < 1 || arg > MAX_CLIENTS))
			DIE("CLIENTS: 1 to %d", MAX_CLIENTS);
		r = server ? s06((int)arg, s[2] == 's') : c06(arg);
	} else if (!strcmp(s, "07"))
		r = server ? s07() : c07();
	else if (!strcmp(s, "08"))
		r = server ? s_pong(0, 0) : c_pong(arg, 0, 0);
	else if (!strcmp(s, "08srq") || !strcmp(s, "13")) {
		if (server && (arg < 1 || arg > MAX_CLIENTS))
			DIE("CLIENTS: 1 to %d", MAX_CLIENTS);
		r = server ? s_srq((int)arg) : c_pong(arg, 0, 0);
	} else if (!strcmp(s, "10"))
		r = server ? s10() : c10();
	else if (!strcmp(s, "11"))
		r = server ? s11() : c11();
	else if (!strcmp(s, "12"))
		r = server ? s_pong(1, 0) : c_pong(arg, 1, 0);
	else if (!strcmp(s, "12scch"))
		r = server ? s_pong(1, 1) : c_pong(arg, 1, 1);
	else
		DIE("no scenario %s", s);
	if (r == 0)
		printf("ok %s %s\n", s, server ? "server" : "client");
	return r;
}
