/* signals.c -- a program with its own signal handling: it claims the
 * real-time signals (including the one pmlab uses), blocks every signal in
 * its threads, and relies on its own SIGUSR1 handler. Prints
 * "signals: ok usr1=N" when its own handling worked. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t usr1, rt;

static void on_usr1(int s) { (void)s; usr1++; }
static void on_rt(int s) { (void)s; rt++; }

/* Spin for `ms` reading the clock with the raw system call: the libc
 * clock_gettime is a sync point under pmlab (every read would end the
 * epoch), and this test is about the epoch *signal* reaching threads. */
static void busy_ms(long ms)
{
	struct timespec a, b;
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &a);
	do
		syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static void *blocked_worker(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	busy_ms(50);
	return NULL;
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_rt;
	for (int s = SIGRTMIN; s <= SIGRTMIN + 10; s++) {
		if (sigaction(s, &sa, NULL) != 0) {
			printf("signals: sigaction(%d) failed\n", s);
			return 1;
		}
	}
	signal(SIGRTMIN + 7, on_rt);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	sigprocmask(SIG_UNBLOCK, &all, NULL);
	pthread_t t;
	pthread_create(&t, NULL, blocked_worker, NULL);
	for (int i = 0; i < 3; i++) {
		raise(SIGUSR1);
		busy_ms(10);
	}
	pthread_join(t, NULL);
	struct sigaction old;
	sigaction(SIGRTMIN + 6, NULL, &old);
	int kept = old.sa_handler == on_rt;
	printf("signals: %s usr1=%d own_handler_reported=%d\n",
			usr1 == 3 ? "ok" : "FAILED", (int)usr1, kept);
	return usr1 == 3 && kept ? 0 : 1;
}
