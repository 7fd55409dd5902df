/* MPI ping-pong that checks every byte: rank 0 sends a pattern, rank 1
 * checks it and sends back its complement, rank 0 checks that. Sizes 1 B
 * to 4 MiB. Plain MPI_Init (UCX's IB transports refuse a multi-threaded
 * worker). Exit status 1 on a wrong byte.
 *
 *   pingpong [ITERS] [DIE_AT]   DIE_AT: rank 1 exits abruptly (status 3)
 *                               at that iteration of the 64 KiB size,
 *                               to check that the job then fails instead
 *                               of hanging.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char expect(size_t i, int size_idx, int iter, int flip) {
    unsigned char v = (unsigned char)((i * 131 + (size_t)size_idx * 7 + (size_t)iter * 13) & 0xff);
    return flip ? (unsigned char)~v : v;
}

static void fill(unsigned char *b, size_t n, int s, int it, int flip) {
    for (size_t i = 0; i < n; i++) b[i] = expect(i, s, it, flip);
}

static int check(const unsigned char *b, size_t n, int s, int it, int flip, int rank) {
    for (size_t i = 0; i < n; i++) {
        if (b[i] != expect(i, s, it, flip)) {
            fprintf(stderr, "rank %d: size %zu iteration %d: byte %zu is 0x%02x, want 0x%02x\n",
                    rank, n, it, i, b[i], expect(i, s, it, flip));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np != 2) {
        if (rank == 0) fprintf(stderr, "pingpong needs exactly 2 ranks, got %d\n", np);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    int die_at = argc > 2 ? atoi(argv[2]) : -1;
    char host[256] = "";
    gethostname(host, sizeof host);
    printf("rank %d of %d on %s\n", rank, np, host);
    fflush(stdout);
    const size_t sizes[] = {1, 16, 256, 4096, 65536, 1 << 20, 4 << 20};
    const int nsizes = sizeof sizes / sizeof sizes[0];
    unsigned char *buf = malloc(sizes[nsizes - 1]);
    int bad = 0;
    for (int s = 0; s < nsizes && !bad; s++) {
        size_t n = sizes[s];
        int it_n = n >= (1 << 20) ? (iters + 3) / 4 : iters;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int it = 0; it < it_n && !bad; it++) {
            if (rank == 0) {
                fill(buf, n, s, it, 0);
                MPI_Send(buf, (int)n, MPI_BYTE, 1, s, MPI_COMM_WORLD);
                memset(buf, 0, n);
                MPI_Recv(buf, (int)n, MPI_BYTE, 1, s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                bad = check(buf, n, s, it, 1, rank);
            } else {
                if (n == 65536 && it == die_at) {
                    fprintf(stderr, "rank 1: exiting abruptly at iteration %d (test)\n", it);
                    _exit(3);
                }
                memset(buf, 0, n);
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, s, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                bad = check(buf, n, s, it, 0, rank);
                fill(buf, n, s, it, 1);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, s, MPI_COMM_WORLD);
            }
        }
        double us = (MPI_Wtime() - t0) * 1e6 / it_n / 2;
        if (rank == 0 && !bad)
            printf("size %8zu: %5d round trips, %10.2f us one way, %9.2f MB/s\n", n, it_n, us,
                   n / us);
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf(any ? "pingpong FAILED\n" : "pingpong ok\n");
    free(buf);
    MPI_Finalize();
    return any ? 1 : 0;
}
