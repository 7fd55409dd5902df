/* What a program without libibverbs sees of softrdma's devices through
 * libsoftrdma_preload.so: every interposed function, the way programs call
 * them (glibc's exported symbols, fortified ones included).
 *
 *   view shown DEV INDEX NETDEV GID GUID LISTING
 *                                    the device is shown, with these values
 *                                    (INDEX: its N of uverbsN; LISTING: the
 *                                    names /sys/class/infiniband lists)
 *   view absent                      nothing is shown (real file system)
 *   view foreign                     a foreign libibverbs is loaded first:
 *                                    nothing is shown
 *
 * Prints one line per failed check and exits 1 if any failed. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The pre-2.33 stat ABI, still exported (binaries built before 2.33). */
extern int __xstat(int, const char *, struct stat *);
extern int __lxstat(int, const char *, struct stat *);
extern int __fxstatat(int, int, const char *, struct stat *, int);
extern int __open_2(const char *, int);
extern int __openat_2(int, const char *, int);
extern char *__realpath_chk(const char *, char *, size_t);

static int failed;
#define CHECK(c)                                                                      \
	do {                                                                          \
		if (!(c)) {                                                           \
			printf("FAIL line %d: %s (errno %d %s)\n", __LINE__, #c, errno, \
			       strerror(errno));                                      \
			failed = 1;                                                   \
		}                                                                     \
	} while (0)

/* The whole text of a file, read with open/read (NULL if it cannot). */
static char *slurp(const char *path)
{
	static char buf[4096];
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n < 0 ? 0 : n] = 0;
	return buf;
}

static int text_is(const char *path, const char *want)
{
	char *t = slurp(path);
	if (!t || strcmp(t, want) != 0) {
		printf("  %s: got %s%s, want %s", path, t ? "'" : "", t ? t : "nothing", want);
		return 0;
	}
	if (!want[0])
		return 1;
	/* The same through fopen, fortified open and openat. */
	char b[256] = { 0 };
	FILE *f = fopen(path, "re");
	if (!f || !fgets(b, sizeof b, f) || strncmp(b, want, strlen(b)) != 0)
		return 0;
	fclose(f);
	int fd = __open_2(path, O_RDONLY);
	int fd2 = __openat_2(AT_FDCWD, path, O_RDONLY);
	int fd3 = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	int ok = fd >= 0 && fd2 >= 0 && fd3 >= 0;
	close(fd);
	close(fd2);
	close(fd3);
	return ok;
}

/* The sorted names of a folder (without . and ..), space-separated. */
static const char *listing(const char *path)
{
	static char out[1024];
	struct dirent **e;
	out[0] = 0;
	DIR *d = opendir(path);
	if (!d)
		return NULL;
	closedir(d);
	int n = scandir(path, &e, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		if (strcmp(e[i]->d_name, ".") && strcmp(e[i]->d_name, "..")) {
			if (out[0])
				strcat(out, " ");
			strcat(out, e[i]->d_name);
		}
		free(e[i]);
	}
	if (n >= 0)
		free(e);
	return out;
}

static void absent(const char *path)
{
	struct stat st;
	errno = 0;
	CHECK(stat(path, &st) == -1 && errno == ENOENT);
	errno = 0;
	CHECK(access(path, F_OK) == -1 && errno == ENOENT);
	errno = 0;
	CHECK(opendir(path) == NULL && errno == ENOENT);
	errno = 0;
	CHECK(realpath(path, NULL) == NULL && errno == ENOENT);
}

static void shown(const char *dev, int index, const char *netdev, const char *gid,
		  const char *guid, const char *all)
{
	char p[PATH_MAX], q[PATH_MAX], want[PATH_MAX];
	struct stat st;
	struct statx stx;
	const char *cls = "/sys/class/infiniband";
	char devdir[256];
	snprintf(devdir, sizeof devdir, "%s/%s", cls, dev);

	/* The class folder and the device's link. */
	CHECK(stat(cls, &st) == 0 && S_ISDIR(st.st_mode));
	const char *l = listing(cls);
	CHECK(l && strcmp(l, all) == 0);
	CHECK(lstat(devdir, &st) == 0 && S_ISLNK(st.st_mode));
	CHECK(stat(devdir, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(__lxstat(1, devdir, &st) == 0 && S_ISLNK(st.st_mode));
	CHECK(fstatat(AT_FDCWD, devdir, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode));
	CHECK(statx(AT_FDCWD, devdir, 0, STATX_BASIC_STATS, &stx) == 0 && S_ISDIR(stx.stx_mode));
	ssize_t n = readlink(devdir, p, sizeof p);
	snprintf(want, sizeof want, "../../devices/virtual/softrdma/%s/infiniband/%s", netdev, dev);
	CHECK(n == (ssize_t)strlen(want) && strncmp(p, want, n) == 0);
	n = readlinkat(AT_FDCWD, devdir, p, 4);
	CHECK(n == 4 && strncmp(p, "../.", 4) == 0);

	/* The device's folder: realpath of DEV/../.. (Mooncake), of
	 * DEV/device, through glibc's realpath, its fortified form and
	 * canonicalize_file_name. */
	snprintf(p, sizeof p, "%s/../..", devdir);
	snprintf(want, sizeof want, "/sys/devices/virtual/softrdma/%s", netdev);
	CHECK(realpath(p, q) == q && strcmp(q, want) == 0);
	char *r = realpath(p, NULL);
	CHECK(r && strcmp(r, want) == 0);
	free(r);
	CHECK(__realpath_chk(p, q, sizeof q) == q && strcmp(q, want) == 0);
	snprintf(p, sizeof p, "%s/device", devdir);
	r = canonicalize_file_name(p);
	CHECK(r && strcmp(r, want) == 0);
	free(r);
	snprintf(p, sizeof p, "%s/numa_node", want);
	CHECK(text_is(p, "-1\n"));
	snprintf(p, sizeof p, "%s/device/net", devdir);
	l = listing(p);
	CHECK(l && strcmp(l, netdev) == 0);
	/* The interface is the real one. */
	snprintf(p, sizeof p, "%s/device/net/%s", devdir, netdev);
	snprintf(want, sizeof want, "/sys/devices/virtual/net/%s", netdev);
	CHECK(realpath(p, q) && strcmp(q, want) == 0);
	n = readlink(p, q, sizeof q);
	snprintf(want, sizeof want, "../../../net/%s", netdev);
	CHECK(n == (ssize_t)strlen(want) && strncmp(q, want, n) == 0);
	snprintf(p, sizeof p, "%s/device/net/%s/mtu", devdir, netdev);
	CHECK(slurp(p) && atoi(slurp(p)) > 0);

	/* Attributes, in the kernel's formats. */
#define ATTR(rel, text)                                           \
	do {                                                      \
		snprintf(p, sizeof p, "%s/%s", devdir, rel);      \
		CHECK(text_is(p, text));                          \
	} while (0)
	snprintf(want, sizeof want, "%s\n", gid);
	ATTR("ports/1/gids/0", want);
	ATTR("ports/1/gids/1", "0000:0000:0000:0000:0000:0000:0000:0000\n");
	snprintf(want, sizeof want, "%s\n", guid);
	ATTR("node_guid", want);
	ATTR("sys_image_guid", want);
	if (strcmp(gid, "0000:0000:0000:0000:0000:0000:0000:0000")) {
		ATTR("ports/1/gid_attrs/types/0", "RoCE v2\n");
		snprintf(want, sizeof want, "%s\n", netdev);
		ATTR("ports/1/gid_attrs/ndevs/0", want);
	} else {
		ATTR("ports/1/gid_attrs/types/0", "");
	}
	ATTR("ports/1/gid_attrs/types/1", "");
	ATTR("ports/1/pkeys/0", "0xffff\n");
	ATTR("ports/1/state", "4: ACTIVE\n");
	ATTR("ports/1/phys_state", "5: LinkUp\n");
	ATTR("ports/1/rate", "25 Gb/sec (1X EDR)\n");
	ATTR("ports/1/link_layer", "Ethernet\n");
	ATTR("ports/1/lid", "0x0\n");
	ATTR("node_type", "1: CA\n");
	snprintf(p, sizeof p, "%s/ports/1/gids", devdir);
	l = listing(p);
	CHECK(l && strncmp(l, "0 1 10 11", 9) == 0);
	snprintf(p, sizeof p, "/sys/class/infiniband_verbs/uverbs%d/ibdev", index);
	snprintf(want, sizeof want, "%s\n", dev);
	CHECK(text_is(p, want));
	CHECK(text_is("/sys/class/infiniband_verbs/abi_version", "6\n"));

	/* glob (glibc walks folders with internal calls). */
	glob_t g;
	snprintf(p, sizeof p, "%s/*/ports/1/gid_attrs/ndevs/0", cls);
	CHECK(glob(p, 0, NULL, &g) == 0 && g.gl_pathc >= 1);
	snprintf(want, sizeof want, "%s/ports/1/gid_attrs/ndevs/0", devdir);
	int hit = 0;
	for (size_t i = 0; i < g.gl_pathc; i++)
		hit |= strcmp(g.gl_pathv[i], want) == 0;
	CHECK(hit);
	globfree(&g);

	/* The device node: a character device anyone may use. */
	char node[64];
	snprintf(node, sizeof node, "/dev/infiniband/uverbs%d", index);
	CHECK(stat(node, &st) == 0 && S_ISCHR(st.st_mode));
	CHECK(lstat(node, &st) == 0 && S_ISCHR(st.st_mode));
	CHECK(__xstat(1, node, &st) == 0 && S_ISCHR(st.st_mode));
	CHECK(access(node, R_OK | W_OK) == 0);
	CHECK(euidaccess(node, R_OK | W_OK) == 0);
	int fd = open(node, O_RDWR);
	CHECK(fd >= 0);
	close(fd);
	errno = 0;
	CHECK(readlink(node, q, sizeof q) == -1 && errno == EINVAL);

	/* Read-only. */
	snprintf(p, sizeof p, "%s/node_guid", devdir);
	errno = 0;
	CHECK(open(p, O_WRONLY) == -1 && errno == EACCES);
	errno = 0;
	CHECK(open(p, O_RDONLY | O_TRUNC) == -1 && errno == EACCES);
	errno = 0;
	CHECK(fopen(p, "a") == NULL && errno == EACCES);
	errno = 0;
	CHECK(access(p, W_OK) == -1 && errno == EACCES);
	CHECK(access(p, R_OK) == 0 && faccessat(AT_FDCWD, p, R_OK, 0) == 0);
	CHECK(__fxstatat(1, AT_FDCWD, p, &st, 0) == 0 && S_ISREG(st.st_mode));
	errno = 0;
	snprintf(p, sizeof p, "%s/new", devdir);
	CHECK(open(p, O_WRONLY | O_CREAT, 0600) == -1 && errno == EACCES);

	/* Folders opened as find and fts open them. */
	fd = open(devdir, O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC);
	CHECK(fd >= 0);
	close(fd);
	errno = 0;
	CHECK(open(devdir, O_RDONLY | O_NOFOLLOW | O_DIRECTORY) == -1 &&
	      (errno == ENOTDIR || errno == ELOOP));
	snprintf(p, sizeof p, "%s/ports", devdir);
	fd = openat(AT_FDCWD, p, O_RDONLY | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
	CHECK(fd >= 0);
	close(fd);
	snprintf(p, sizeof p, "find %s/ -name ndevs > /tmp/softrdma-view-find.%d", devdir, getpid());
	CHECK(system(p) == 0);
	snprintf(p, sizeof p, "/tmp/softrdma-view-find.%d", getpid());
	snprintf(want, sizeof want, "%s/ports/1/gid_attrs/ndevs\n", devdir);
	CHECK(strstr(slurp(p) ? slurp(p) : "", want) != NULL);
	unlink(p);

	/* Absent inside the view. */
	absent("/sys/class/infiniband/mlx5_0");
	snprintf(p, sizeof p, "%s/ports/1/gids/16", devdir);
	absent(p);
	snprintf(p, sizeof p, "%s/ports/2", devdir);
	absent(p);

	/* A working folder inside the view: relative paths, getcwd, .. */
	snprintf(p, sizeof p, "%s/ports/1", devdir);
	CHECK(chdir(p) == 0);
	CHECK(getcwd(q, sizeof q) == q);
	snprintf(want, sizeof want, "/sys/devices/virtual/softrdma/%s/infiniband/%s/ports/1",
		 netdev, dev);
	CHECK(strcmp(q, want) == 0);
	char *cwd = getcwd(NULL, 0);
	CHECK(cwd && strcmp(cwd, want) == 0);
	free(cwd);
	CHECK(text_is("pkeys/0", "0xffff\n"));
	CHECK(text_is("./state", "4: ACTIVE\n"));
	snprintf(want, sizeof want, "%s\n", guid);
	CHECK(text_is("../../node_guid", want));
	CHECK(chdir("/") == 0);

	/* A child process (`ls`) sees it too. */
	snprintf(p, sizeof p, "ls %s/device/net/ > /tmp/softrdma-view-ls.%d", devdir, getpid());
	CHECK(system(p) == 0);
	snprintf(p, sizeof p, "/tmp/softrdma-view-ls.%d", getpid());
	snprintf(want, sizeof want, "%s\n", netdev);
	CHECK(text_is(p, want));
	unlink(p);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (!strcmp(argv[1], "shown") && argc == 8) {
		shown(argv[2], atoi(argv[3]), argv[4], argv[5], argv[6], argv[7]);
	} else if (!strcmp(argv[1], "absent")) {
		absent("/sys/class/infiniband");
		absent("/sys/class/infiniband/softrdma0");
		absent("/dev/infiniband/uverbs0");
		absent("/sys/class/infiniband_verbs/uverbs0");
	} else if (!strcmp(argv[1], "foreign")) {
		struct stat st;
		CHECK(stat("/sys/class/infiniband", &st) == 0);
		void *h = dlopen("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
		CHECK(h != NULL);
		if (h) {
			absent("/sys/class/infiniband");
			absent("/dev/infiniband/uverbs0");
			void **(*list)(int *) = (void **(*)(int *))dlsym(h, "ibv_get_device_list");
			/* rdma-core finds no device (NULL, ENOSYS on a host
			 * without RDMA devices), and says nothing. */
			int n = 0;
			void **got = list ? list(&n) : NULL;
			CHECK(list && n == 0);
			(void)got;
		}
	} else {
		return 2;
	}

	/* Everything else is libc's, errno included. */
	struct stat a;
	CHECK(stat("/proc/self/exe", &a) == 0 && S_ISREG(a.st_mode));
	errno = 1234;
	CHECK(stat("/", &a) == 0 && errno == 1234);
	CHECK(stat("/dev/null", &a) == 0 && S_ISCHR(a.st_mode));
	CHECK(chdir("/dev") == 0);
	CHECK(stat("null", &a) == 0 && S_ISCHR(a.st_mode));
	errno = 0;
	CHECK(open("/nonexistent/x", O_RDONLY) == -1 && errno == ENOENT);
	printf(failed ? "view: FAILED\n" : "view: ok\n");
	return failed;
}
