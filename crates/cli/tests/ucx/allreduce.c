/* MPI_Allreduce (sum, max) and MPI_Bcast checked against the values every
 * rank can compute itself, for 1 to 1M elements. Exit status 1 on a wrong
 * value. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const int counts[] = {1, 7, 1000, 65536, 1 << 20};
    int64_t *in = malloc(sizeof(int64_t) << 20), *out = malloc(sizeof(int64_t) << 20);
    int bad = 0;
    for (unsigned c = 0; c < sizeof counts / sizeof counts[0] && !bad; c++) {
        int n = counts[c];
        for (int round = 0; round < 3 && !bad; round++) {
            for (int i = 0; i < n; i++) in[i] = (int64_t)(rank + 1) * (i + 1) + round;
            MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
            for (int i = 0; i < n && !bad; i++) {
                int64_t want = (int64_t)np * (np + 1) / 2 * (i + 1) + (int64_t)np * round;
                if (out[i] != want) {
                    fprintf(stderr, "rank %d: sum of %d elements, [%d] = %lld, want %lld\n", rank,
                            n, i, (long long)out[i], (long long)want);
                    bad = 1;
                }
            }
            MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
            for (int i = 0; i < n && !bad; i++) {
                int64_t want = (int64_t)np * (i + 1) + round;
                if (out[i] != want) {
                    fprintf(stderr, "rank %d: max of %d elements, [%d] = %lld, want %lld\n", rank,
                            n, i, (long long)out[i], (long long)want);
                    bad = 1;
                }
            }
            int root = round % np;
            for (int i = 0; i < n; i++) out[i] = rank == root ? (int64_t)i * 3 + round : -1;
            MPI_Bcast(out, n, MPI_INT64_T, root, MPI_COMM_WORLD);
            for (int i = 0; i < n && !bad; i++) {
                if (out[i] != (int64_t)i * 3 + round) {
                    fprintf(stderr, "rank %d: bcast of %d elements from %d, [%d] = %lld\n", rank, n,
                            root, i, (long long)out[i]);
                    bad = 1;
                }
            }
        }
    }
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf(any ? "allreduce FAILED\n" : "allreduce ok (%d ranks)\n", np);
    free(in);
    free(out);
    MPI_Finalize();
    return any ? 1 : 0;
}
