/* MPI one-sided communication that checks every value: each round, rank 0
 * puts a pattern into rank 1's window, accumulates into a counter there
 * (one element: an atomic) and into a vector of 64 (several elements:
 * osc ucx takes its accumulate lock and fences, ucp_worker_fence, before
 * releasing it) and reads them back (MPI_Put, MPI_Accumulate, MPI_Get
 * between MPI_Win_fence epochs), then rank 1 checks what landed; then the
 * same with passive target (MPI_Win_lock, MPI_Win_flush, MPI_Win_sync).
 * With Open MPI's osc ucx this is UCP RMA and atomics, fences and
 * flushes. Exit status 1 on a wrong value.
 *
 *   rma [ROUNDS]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define V 64

static uint64_t want(int round, int i) { return ((uint64_t)round << 32) ^ (uint64_t)(i * 2654435761u); }

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    int rank, size, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "rma: run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    uint64_t *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)(N + 1 + V) * sizeof(uint64_t), sizeof(uint64_t), MPI_INFO_NULL,
                     MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i <= N + V; i++) base[i] = 0;
    uint64_t *src = malloc(N * sizeof(uint64_t));
    MPI_Win_fence(0, win);
    for (int r = 1; r <= rounds && !bad; r++) {
        if (rank == 0) {
            for (int i = 0; i < N; i++) src[i] = want(r, i);
            uint64_t one = 1, got = 0, vec[V], vgot[V];
            for (int i = 0; i < V; i++) vec[i] = (uint64_t)i;
            MPI_Put(src, N, MPI_UINT64_T, 1, 0, N, MPI_UINT64_T, win);
            MPI_Accumulate(&one, 1, MPI_UINT64_T, 1, N, 1, MPI_UINT64_T, MPI_SUM, win);
            MPI_Accumulate(vec, V, MPI_UINT64_T, 1, N + 1, V, MPI_UINT64_T, MPI_SUM, win);
            MPI_Win_fence(0, win);
            MPI_Get(&got, 1, MPI_UINT64_T, 1, N, 1, MPI_UINT64_T, win);
            MPI_Get(vgot, V, MPI_UINT64_T, 1, N + 1, V, MPI_UINT64_T, win);
            MPI_Win_fence(0, win);
            if (got != (uint64_t)r) {
                fprintf(stderr, "rank 0: round %d: counter %llu, want %d\n", r, (unsigned long long)got, r);
                bad = 1;
            }
            for (int i = 0; i < V && !bad; i++) {
                if (vgot[i] != (uint64_t)i * (uint64_t)r) {
                    fprintf(stderr, "rank 0: round %d: vector[%d] %llu, want %llu\n", r, i,
                            (unsigned long long)vgot[i], (unsigned long long)i * r);
                    bad = 1;
                }
            }
        } else {
            MPI_Win_fence(0, win);
            for (int i = 0; i < N && !bad; i++) {
                if (base[i] != want(r, i)) {
                    fprintf(stderr, "rank 1: round %d: element %d is %llx, want %llx\n", r, i,
                            (unsigned long long)base[i], (unsigned long long)want(r, i));
                    bad = 1;
                }
            }
            MPI_Win_fence(0, win);
        }
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    MPI_Win_fence(0, win);
    /* Passive target: rank 0 writes, flushes, and reads back. */
    if (rank == 0 && !bad) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
        for (int r = 0; r < rounds && !bad; r++) {
            uint64_t v = want(r + 1000, r), got = 0;
            MPI_Put(&v, 1, MPI_UINT64_T, 1, r % N, 1, MPI_UINT64_T, win);
            MPI_Win_sync(win);
            MPI_Win_flush(1, win);
            MPI_Get(&got, 1, MPI_UINT64_T, 1, r % N, 1, MPI_UINT64_T, win);
            MPI_Win_flush(1, win);
            if (got != v) {
                fprintf(stderr, "rank 0: passive round %d: read %llx, want %llx\n", r,
                        (unsigned long long)got, (unsigned long long)v);
                bad = 1;
            }
        }
        MPI_Win_unlock(1, win);
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Win_free(&win);
    free(src);
    if (rank == 0 && !bad) printf("rma ok: %d rounds\n", rounds);
    MPI_Finalize();
    return bad;
}
