/* What the scenarios of rpma_scenarios.c share: its includes, DIE and
 * CHECK, the region pattern, and one-call forms of librpma's steps (a
 * peer, a connection made or accepted and closed, the next completion,
 * a region's descriptor sent and received). Included once, by
 * rpma_scenarios.c. */
#ifndef RPMA_COMMON_H
#define RPMA_COMMON_H

#include <librpma.h>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define CHECK(call) do { int r_ = (call); \
	if (r_) DIE("%s:%d: %s: %s", __FILE__, __LINE__, #call, rpma_err_2str(r_)); } while (0)

#define REGION 65536
#define PONG_ROUNDS 10
#define DONE UINT64_MAX
#define MAX_CLIENTS 16

static const char *scenario, *addr, *port;

/* Bytes only the seed determines. */
static void pattern(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 24);
	}
}

static void check_pattern(const uint8_t *p, size_t n, uint64_t seed, const char *what)
{
	uint8_t *want = malloc(n);
	pattern(want, n, seed);
	for (size_t i = 0; i < n; i++)
		if (p[i] != want[i])
			DIE("%s: byte %zu is %#x, want %#x", what, i, p[i], want[i]);
	free(want);
}

static void *region(size_t n)
{
	void *p;
	if (posix_memalign(&p, 4096, n))
		DIE("posix_memalign");
	memset(p, 0, n);
	return p;
}

static struct rpma_peer *peer_of(enum rpma_util_ibv_context_type t)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	CHECK(rpma_utils_get_ibv_context(addr, t, &ctx));
	CHECK(rpma_peer_new(ctx, &peer));
	return peer;
}

static void expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	if (ev != want)
		DIE("connection event %s, want %s", rpma_utils_conn_event_2str(ev),
		    rpma_utils_conn_event_2str(want));
}

/* One completion of `cq` into `*wc` if it has one: 1, or 0 when it has
 * none yet (RPMA_E_NO_COMPLETION); any other answer dies. */
static int try_wc(struct rpma_cq *cq, struct ibv_wc *wc)
{
	int n = 0;
	int r = rpma_cq_get_wc(cq, 1, wc, &n);
	if (r == 0 && n == 1)
		return 1;
	if (r != RPMA_E_NO_COMPLETION)
		DIE("rpma_cq_get_wc: %s", rpma_err_2str(r));
	return 0;
}

/* The next completion of `cq` (waiting for it), checked. */
static struct ibv_wc next_wc(struct rpma_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	while (!try_wc(cq, &wc))
		CHECK(rpma_cq_wait(cq));
	if (wc.status != IBV_WC_SUCCESS)
		DIE("completion: %s", ibv_wc_status_str(wc.status));
	if (wc.opcode != op)
		DIE("completion opcode %d, want %d", wc.opcode, op);
	return wc;
}

static struct ibv_wc conn_wc(struct rpma_conn *conn, enum ibv_wc_opcode op)
{
	struct rpma_cq *cq;
	CHECK(rpma_conn_get_cq(conn, &cq));
	return next_wc(cq, op);
}

static struct rpma_conn *connect_to(struct rpma_peer *peer, struct rpma_conn_cfg *cfg,
				    void *pdata, uint8_t len)
{
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	struct rpma_conn_private_data pd = { pdata, len };
	CHECK(rpma_conn_req_new(peer, addr, port, cfg, &req));
	CHECK(rpma_conn_req_connect(&req, len ? &pd : NULL, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	return conn;
}

/* The server side of a request: `recv` (if any) posted before the accept. */
static struct rpma_conn *accept_from(struct rpma_ep *ep, struct rpma_conn_cfg *cfg,
				     void *pdata, uint8_t len, struct rpma_mr_local *recv_mr,
				     size_t recv_len)
{
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	struct rpma_conn_private_data pd = { pdata, len };
	CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
	if (recv_mr)
		CHECK(rpma_conn_req_recv(req, recv_mr, 0, recv_len, NULL));
	CHECK(rpma_conn_req_connect(&req, len ? &pd : NULL, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	return conn;
}

static struct rpma_ep *listen_here(struct rpma_peer *peer)
{
	struct rpma_ep *ep;
	CHECK(rpma_ep_listen(peer, addr, port, &ep));
	printf("listening\n");
	return ep;
}

/* The client ends: disconnect, CLOSED, delete. */
static void client_close(struct rpma_conn **conn)
{
	CHECK(rpma_conn_disconnect(*conn));
	expect_event(*conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(conn));
}

/* The server ends: the client's disconnect (CLOSED), disconnect, delete. */
static void server_close(struct rpma_conn **conn)
{
	expect_event(*conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(*conn));
	CHECK(rpma_conn_delete(conn));
}

/* A region descriptor (and optionally a peer configuration's) in private
 * data: sizes first. */
struct desc {
	uint8_t mr_size, pcfg_size;
	uint64_t seed;
	char bytes[40];
} __attribute__((packed));

static uint8_t desc_of(struct desc *d, struct rpma_mr_local *mr, struct rpma_peer_cfg *pcfg,
		       uint64_t seed)
{
	size_t n = 0, m = 0;
	memset(d, 0, sizeof *d);
	d->seed = seed;
	CHECK(rpma_mr_get_descriptor_size(mr, &n));
	CHECK(rpma_mr_get_descriptor(mr, d->bytes));
	if (pcfg) {
		CHECK(rpma_peer_cfg_get_descriptor_size(pcfg, &m));
		CHECK(rpma_peer_cfg_get_descriptor(pcfg, d->bytes + n));
	}
	if (n + m > sizeof d->bytes)
		DIE("descriptors of %zu bytes", n + m);
	d->mr_size = (uint8_t)n;
	d->pcfg_size = (uint8_t)m;
	return (uint8_t)(offsetof(struct desc, bytes) + n + m);
}

/* The peer's region (and peer configuration) from its private data. */
static struct rpma_mr_remote *remote_of(struct rpma_conn *conn, struct rpma_peer_cfg **pcfg,
					uint64_t *seed)
{
	struct rpma_conn_private_data pd;
	struct rpma_mr_remote *mr;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	if (!pd.ptr || pd.len < offsetof(struct desc, bytes))
		DIE("no descriptor in the private data (%u bytes)", pd.len);
	struct desc *d = pd.ptr;
	CHECK(rpma_mr_remote_from_descriptor(d->bytes, d->mr_size, &mr));
	if (pcfg)
		CHECK(rpma_peer_cfg_from_descriptor(d->bytes + d->mr_size, d->pcfg_size, pcfg));
	if (seed)
		*seed = d->seed;
	return mr;
}

#endif
