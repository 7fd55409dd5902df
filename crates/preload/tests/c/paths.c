/* Exercises every function libsoftrdma_preload.so interposes, on the
 * paths it answers and on others, the way programs call them (through
 * glibc's exported symbols). Run with the library in LD_PRELOAD:
 *
 *   paths DEVNAME NETDEV     e.g. paths softrdma0 lo
 *
 * Prints one line per failed check and exits 1 if any failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The pre-2.33 stat ABI, still exported (binaries built before 2.33). */
extern int __xstat(int, const char *, struct stat *);
extern int __lxstat(int, const char *, struct stat *);
extern int __xstat64(int, const char *, struct stat64 *);
extern int __fxstatat(int, int, const char *, struct stat *, int);
extern int __open_2(const char *, int);
extern int __openat_2(int, const char *, int);

static int failed;
#define CHECK(c)                                                                       \
    do {                                                                               \
        if (!(c)) {                                                                    \
            printf("FAIL line %d: %s (errno %d %s)\n", __LINE__, #c, errno, strerror(errno)); \
            failed = 1;                                                                \
        }                                                                              \
    } while (0)

static char node[512], types[512], ndevs[512], devdir[256];

static int read_fd(int fd, char *buf, size_t n) {
    ssize_t r = read(fd, buf, n - 1);
    buf[r < 0 ? 0 : r] = 0;
    close(fd);
    return (int)r;
}

static void node_checks(void) {
    struct stat st;
    struct stat64 st64;
    struct statx stx;
    CHECK(stat(node, &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(stat64(node, &st64) == 0 && S_ISCHR(st64.st_mode));
    CHECK(lstat(node, &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(fstatat(AT_FDCWD, node, &st, 0) == 0 && S_ISCHR(st.st_mode));
    CHECK(fstatat(AT_FDCWD, node, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode));
    CHECK(statx(AT_FDCWD, node, 0, STATX_BASIC_STATS, &stx) == 0 && S_ISCHR(stx.stx_mode));
    CHECK(__xstat(1, node, &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(__lxstat(1, node, &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(__xstat64(1, node, &st64) == 0 && S_ISCHR(st64.st_mode));
    CHECK(__fxstatat(1, AT_FDCWD, node, &st, 0) == 0 && S_ISCHR(st.st_mode));
    CHECK(access(node, R_OK | W_OK) == 0);
    CHECK(faccessat(AT_FDCWD, node, R_OK | W_OK, 0) == 0);
    CHECK(euidaccess(node, R_OK | W_OK) == 0);
    int fd = open(node, O_RDWR);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
}

static void text_checks(const char *path, const char *want) {
    char buf[64];
    struct stat st;
    struct statx stx;
    CHECK(read_fd(open(path, O_RDONLY), buf, sizeof buf) > 0 && strcmp(buf, want) == 0);
    CHECK(read_fd(open64(path, O_RDONLY | O_CLOEXEC), buf, sizeof buf) > 0 && strcmp(buf, want) == 0);
    CHECK(read_fd(openat(AT_FDCWD, path, O_RDONLY), buf, sizeof buf) > 0 && strcmp(buf, want) == 0);
    CHECK(read_fd(__open_2(path, O_RDONLY), buf, sizeof buf) > 0 && strcmp(buf, want) == 0);
    CHECK(read_fd(__openat_2(AT_FDCWD, path, O_RDONLY), buf, sizeof buf) > 0 && strcmp(buf, want) == 0);
    FILE *f = fopen(path, "re");
    CHECK(f != NULL);
    if (f) {
        CHECK(fgets(buf, sizeof buf, f) && strcmp(buf, want) == 0);
        fclose(f);
    }
    errno = 0;
    CHECK(open(path, O_WRONLY) == -1 && errno == EACCES);
    errno = 0;
    CHECK(fopen(path, "w") == NULL && errno == EACCES);
    errno = 0;
    CHECK(open(path, O_RDONLY | O_CREAT | O_EXCL, 0600) == -1 && errno == EEXIST);
    errno = 0;
    CHECK(open(path, O_RDONLY | O_DIRECTORY) == -1 && errno == ENOTDIR);
    CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)strlen(want));
    CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
    CHECK(statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) == 0 &&
          S_ISREG(stx.stx_mode) && stx.stx_size == strlen(want));
    CHECK(__xstat(1, path, &st) == 0 && S_ISREG(st.st_mode));
    CHECK(access(path, R_OK) == 0);
    CHECK(access(path, W_OK) == -1 && errno == EACCES);
}

static void absent(const char *path) {
    struct stat st;
    struct statx stx;
    errno = 0;
    CHECK(stat(path, &st) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(statx(AT_FDCWD, path, 0, STATX_BASIC_STATS, &stx) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(access(path, F_OK) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(open(path, O_RDONLY) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(fopen(path, "r") == NULL && errno == ENOENT);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: paths DEVNAME NETDEV\n");
        return 2;
    }
    const char *dev = argv[1];
    char want_nd[64];
    snprintf(node, sizeof node, "/dev/infiniband/uverbs-%s", dev);
    snprintf(devdir, sizeof devdir, "/sys/class/infiniband/%s", dev);
    snprintf(types, sizeof types, "%s/ports/1/gid_attrs/types/0", devdir);
    snprintf(ndevs, sizeof ndevs, "%s/ports/1/gid_attrs/ndevs/0", devdir);
    snprintf(want_nd, sizeof want_nd, "%s\n", argv[2]);

    node_checks();
    text_checks(types, "RoCE v2\n");
    text_checks(ndevs, want_nd);

    /* Open MPI's openib BTL looks for this directory: it stays absent. */
    absent("/sys/class/infiniband");
    absent(devdir);
    absent("/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0");
    absent("/dev/infiniband/uverbs-no-such-device");
    char other[300];
    snprintf(other, sizeof other, "%s/ports/1/gid_attrs/types/1", devdir);
    absent(other);
    snprintf(other, sizeof other, "%s/device/driver", devdir);
    absent(other);

    /* Everything else is libc's: a real file, a directory, relative paths,
     * and errno left alone by a successful call. */
    struct stat a, b;
    CHECK(stat("/proc/self/exe", &a) == 0 && S_ISREG(a.st_mode));
    CHECK(stat("/", &b) == 0 && S_ISDIR(b.st_mode));
    errno = 1234;
    CHECK(stat("/", &b) == 0 && errno == 1234);
    errno = 1234;
    CHECK(access(node, R_OK) == 0 && errno == 1234);
    int fd = open("/proc/self/cmdline", O_RDONLY);
    char buf[64];
    CHECK(read_fd(fd, buf, sizeof buf) > 0 && strstr(buf, "paths") != NULL);
    CHECK(chdir("/dev") == 0);
    CHECK(stat("null", &a) == 0 && S_ISCHR(a.st_mode));
    errno = 0;
    CHECK(stat("infiniband/uverbs-x", &a) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(open("/nonexistent/x", O_RDONLY) == -1 && errno == ENOENT);
    fd = open("/tmp", O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    close(fd);

    printf(failed ? "paths: FAILED\n" : "paths: ok\n");
    return failed;
}
