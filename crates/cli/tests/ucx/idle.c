/* An MPI rank that waits must not spin in softrdma: after connecting (a
 * barrier and a message each way), every rank sleeps 2 s and measures the
 * CPU time its process used meanwhile (all threads: UCX's async thread
 * waits on softrdma's completion-channel and async-event descriptors,
 * which must be readable only while an event is pending; softrdma's
 * progress thread must go to sleep). Exit status 1 if a rank used more
 * than half of the sleep. */
#include <mpi.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    int rank, np, x = 1, y = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_seconds();
    sleep(2);
    double used = cpu_seconds() - c0;
    int bad = used > 1.0 || y != np;
    printf("rank %d: %.3f s of CPU while asleep for 2 s\n", rank, used);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf(any ? "idle FAILED\n" : "idle ok\n");
    MPI_Finalize();
    return any;
}
