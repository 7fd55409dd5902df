/*
 * Threads softrdma starts block every signal, as tgtd needs: tgtd blocks
 * SIGUSR2 in its own threads, reads it from a signalfd, and its I/O
 * threads kill(getpid(), SIGUSR2) after each I/O. The kernel delivers a
 * process-directed signal to any thread that does not block it; if that
 * is one of softrdma's threads, the default action kills the process.
 *
 * Usage: signals KILLERS SIGNALS_EACH
 * The device is opened and a pair of QPs connected before the program
 * blocks SIGUSR2 (so softrdma's thread is started from a thread that
 * blocks nothing); then KILLERS threads each send SIGUSR2 to the process
 * SIGNALS_EACH times while the main thread ping-pongs SENDs over the pair
 * (the progress thread busy) and a reader thread takes the signals from a
 * signalfd. Every softrdma thread's blocked mask (/proc/self/task/N/status)
 * must hold every signal. Exit status 0 when all went through.
 */
#include "citizen.h"
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>

static long each;
static atomic_long sent, taken;
static atomic_int stop;
static int sfd;

static void *killer(void *arg)
{
	(void)arg;
	for (long i = 0; i < each; i++) {
		if (kill(getpid(), SIGUSR2))
			die("kill");
		atomic_fetch_add(&sent, 1);
		if (i % 64 == 0)
			usleep(100);
	}
	return NULL;
}

static void *reader(void *arg)
{
	(void)arg;
	struct signalfd_siginfo si;
	while (!atomic_load(&stop)) {
		ssize_t r = read(sfd, &si, sizeof si);
		if (r == (ssize_t)sizeof si && si.ssi_signo == SIGUSR2)
			atomic_fetch_add(&taken, 1);
		else if (r < 0 && errno != EAGAIN && errno != EINTR)
			die("read signalfd");
		else if (r < 0)
			usleep(200);
	}
	return NULL;
}

/* Checks the blocked mask of every thread softrdma started; returns how
 * many such threads there are, or -1 when one leaves a signal unblocked. */
static int check_masks(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		die("opendir /proc/self/task");
	struct dirent *e;
	int found = 0, bad = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], line[256], name[64] = "";
		unsigned long long blk = 0;
		snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof line, f)) {
			sscanf(line, "Name:\t%63s", name);
			sscanf(line, "SigBlk:\t%llx", &blk);
		}
		fclose(f);
		if (strncmp(name, "softrdma", 8))
			continue;
		found++;
		/* Every signal but SIGKILL and SIGSTOP (never blockable) and
		 * glibc's two internal ones (32, 33: cancellation, setxid). */
		unsigned long long want = ~0ULL;
		want &= ~(1ULL << (SIGKILL - 1)) & ~(1ULL << (SIGSTOP - 1));
		want &= ~(1ULL << 31) & ~(1ULL << 32);
		if ((blk & want) != want) {
			printf("thread %s (%s) leaves signals unblocked: SigBlk %016llx\n", e->d_name,
			       name, blk);
			bad = 1;
		}
	}
	closedir(d);
	return bad ? -1 : found;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: signals KILLERS SIGNALS_EACH\n");
		return 2;
	}
	int killers = atoi(argv[1]);
	each = atol(argv[2]);
	/* Our threads are "prog"; softrdma's are named softrdma*. */
	prctl(PR_SET_NAME, "prog");
	struct pair p;
	pair_open(&p, 0);
	if (pair_ping(&p, 1))
		die("first ping");

	/* As tgtd: block SIGUSR2 here (every thread created from now on
	 * inherits it) and read it from a signalfd. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	if (pthread_sigmask(SIG_BLOCK, &set, NULL))
		die("pthread_sigmask");
	sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0)
		die("signalfd");
	pthread_t rd, k[64];
	if (killers > 64)
		killers = 64;
	pthread_create(&rd, NULL, reader, NULL);
	for (int i = 0; i < killers; i++)
		pthread_create(&k[i], NULL, killer, NULL);
	uint32_t seq = 2;
	while (atomic_load(&sent) < killers * each)
		if (pair_ping(&p, seq++))
			die("ping during the signals");
	for (int i = 0; i < killers; i++)
		pthread_join(k[i], NULL);
	/* A second device opened now, from a thread that blocks SIGUSR2 only. */
	struct pair q;
	pair_open(&q, 1);
	for (int i = 0; i < 100; i++)
		if (kill(getpid(), SIGUSR2))
			die("kill");
	atomic_fetch_add(&sent, 100);
	if (pair_ping(&q, 7) || pair_ping(&p, seq++))
		die("ping after the signals");
	usleep(100000);
	atomic_store(&stop, 1);
	pthread_join(rd, NULL);
	int threads = check_masks();
	pair_close(&q);
	pair_close(&p);
	close(sfd);
	/* Signals of one kind coalesce while pending: fewer may be read. */
	printf("%ld signals sent, %ld read from the signalfd, %u pings, %d softrdma threads\n",
	       atomic_load(&sent), atomic_load(&taken), seq - 1, threads);
	if (threads < 2) {
		printf("FAIL: %s\n", threads < 0 ? "a softrdma thread leaves signals unblocked"
						 : "fewer softrdma threads than devices");
		return 1;
	}
	printf("OK: the process survived every signal\n");
	return 0;
}
