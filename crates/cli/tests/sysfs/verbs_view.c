/* A verbs program's view of its own device in sysfs (softrdma exec): what
 * the files say is what the verbs say, for the address the device got when
 * it opened. Prints one line per failed check; exits 1 if any failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failed;
#define CHECK(c)                                                                         \
	do {                                                                             \
		if (!(c)) {                                                              \
			printf("FAIL line %d: %s\n", __LINE__, #c);                      \
			failed = 1;                                                      \
		}                                                                        \
	} while (0)

static char *attr(const char *dir, const char *rel)
{
	static char buf[8][256];
	static int k;
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/%s", dir, rel);
	FILE *f = fopen(p, "r");
	char *b = buf[k++ % 8];
	b[0] = 0;
	if (!f)
		return NULL;
	if (!fgets(b, 256, f))
		b[0] = 0;
	fclose(f);
	b[strcspn(b, "\n")] = 0;
	return b;
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1);
	if (!list || n < 1)
		return 1;
	struct ibv_device *d = list[0];
	struct ibv_context *ctx = ibv_open_device(d);
	CHECK(ctx != NULL);
	if (!ctx)
		return 1;
	const char *dir = d->ibdev_path;
	char want[256];
	snprintf(want, sizeof want, "/sys/class/infiniband/%s", ibv_get_device_name(d));
	CHECK(strcmp(dir, want) == 0);
	CHECK(strncmp(d->dev_name, "uverbs", 6) == 0);

	/* GID 0, its type and interface; an empty entry. */
	union ibv_gid g;
	CHECK(ibv_query_gid(ctx, 1, 0, &g) == 0);
	char gid[64];
	for (int i = 0; i < 8; i++)
		sprintf(gid + 5 * i, "%02x%02x%s", g.raw[2 * i], g.raw[2 * i + 1], i < 7 ? ":" : "");
	char *s = attr(dir, "ports/1/gids/0");
	printf("gid %s, sysfs %s\n", gid, s ? s : "-");
	CHECK(s && strcmp(s, gid) == 0);
	s = attr(dir, "ports/1/gid_attrs/types/0");
	CHECK(s && strcmp(s, "RoCE v2") == 0);
	s = attr(dir, "ports/1/gid_attrs/ndevs/0");
	CHECK(s && strcmp(s, "lo") == 0);
	struct ibv_gid_entry e;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0 && e.ndev_ifindex > 0);
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0);
	char rel[64];
	snprintf(rel, sizeof rel, "ports/1/gids/%d", pa.gid_tbl_len - 1);
	s = attr(dir, rel);
	CHECK(s && strcmp(s, "0000:0000:0000:0000:0000:0000:0000:0000") == 0);
	snprintf(rel, sizeof rel, "ports/1/gids/%d", pa.gid_tbl_len);
	CHECK(attr(dir, rel) == NULL);

	/* GUIDs, port state and P_Key. */
	struct ibv_device_attr a;
	CHECK(ibv_query_device(ctx, &a) == 0);
	uint64_t guid = be64toh(a.node_guid);
	char gs[32];
	snprintf(gs, sizeof gs, "%04x:%04x:%04x:%04x", (unsigned)(guid >> 48) & 0xffff,
		 (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
		 (unsigned)guid & 0xffff);
	s = attr(dir, "node_guid");
	CHECK(s && strcmp(s, gs) == 0);
	s = attr(dir, "sys_image_guid");
	CHECK(s && strcmp(s, gs) == 0);
	s = attr(dir, "fw_ver");
	CHECK(s && strcmp(s, a.fw_ver) == 0);
	s = attr(dir, "ports/1/state");
	CHECK(s && pa.state == IBV_PORT_ACTIVE && strcmp(s, "4: ACTIVE") == 0);
	s = attr(dir, "ports/1/link_layer");
	CHECK(s && pa.link_layer == IBV_LINK_LAYER_ETHERNET && strcmp(s, "Ethernet") == 0);
	snprintf(want, sizeof want, "0x%08x", pa.port_cap_flags);
	s = attr(dir, "ports/1/cap_mask");
	CHECK(s && strcmp(s, want) == 0);
	uint16_t pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0);
	snprintf(want, sizeof want, "0x%04x", be16toh(pkey));
	s = attr(dir, "ports/1/pkeys/0");
	CHECK(s && strcmp(s, want) == 0);

	/* The uverbs device and its node. */
	s = attr(d->dev_path, "ibdev");
	CHECK(s && strcmp(s, ibv_get_device_name(d)) == 0);
	char node[128];
	snprintf(node, sizeof node, "/dev/infiniband/%s", d->dev_name);
	struct stat st;
	CHECK(stat(node, &st) == 0 && S_ISCHR(st.st_mode) && access(node, R_OK | W_OK) == 0);

	/* The device's folder. */
	char p[PATH_MAX], q[PATH_MAX];
	snprintf(p, sizeof p, "%s/../..", dir);
	CHECK(realpath(p, q) && strcmp(q, "/sys/devices/virtual/softrdma/lo") == 0);

	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf(failed ? "verbs_view: FAILED\n" : "verbs_view: ok\n");
	return failed;
}
