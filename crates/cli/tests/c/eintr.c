/* eintr.c -- blocking system calls while epoch signals fly: a read on a
 * pipe that a thread fills after 150 ms, a 100 ms nanosleep, a sem_wait,
 * a 100 ms poll, a 50 ms usleep, and 60 ms of ppoll (with an empty mask
 * of its own), pselect (with none) and epoll_pwait (with an empty mask),
 * each checked for EINTR. Prints "eintr: ok" when none was interrupted. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static sem_t sem;

static void busy_ms(long ms)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static void *writer(void *arg)
{
	(void)arg;
	busy_ms(150);
	if (write(fds[1], "x", 1) != 1)
		return (void *)1;
	busy_ms(100);
	sem_post(&sem);
	return NULL;
}

int main(void)
{
	int bad = 0;
	if (pipe(fds) != 0 || sem_init(&sem, 0, 0) != 0)
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, writer, NULL);
	char c;
	ssize_t n = read(fds[0], &c, 1);
	if (n != 1) {
		printf("eintr: read returned %zd (%s)\n", n, strerror(errno));
		bad = 1;
	}
	struct timespec req = {0, 100000000}, rem;
	if (nanosleep(&req, &rem) != 0) {
		printf("eintr: nanosleep interrupted (%s)\n", strerror(errno));
		bad = 1;
	}
	if (sem_wait(&sem) != 0) {
		printf("eintr: sem_wait failed (%s)\n", strerror(errno));
		bad = 1;
	}
	if (poll(NULL, 0, 100) != 0) {
		printf("eintr: poll interrupted (%s)\n", strerror(errno));
		bad = 1;
	}
	if (usleep(50000) != 0) {
		printf("eintr: usleep interrupted (%s)\n", strerror(errno));
		bad = 1;
	}
	sigset_t none;
	sigemptyset(&none);
	struct timespec ms60 = {0, 60000000};
	if (ppoll(NULL, 0, &ms60, &none) != 0) {
		printf("eintr: ppoll interrupted (%s)\n", strerror(errno));
		bad = 1;
	}
	if (pselect(0, NULL, NULL, NULL, &ms60, NULL) != 0) {
		printf("eintr: pselect interrupted (%s)\n", strerror(errno));
		bad = 1;
	}
	int ep = epoll_create1(0);
	struct epoll_event ev;
	if (ep < 0 || epoll_pwait(ep, &ev, 1, 60, &none) != 0) {
		printf("eintr: epoll_pwait interrupted (%s)\n", strerror(errno));
		bad = 1;
	}
	pthread_join(t, NULL);
	printf("eintr: %s\n", bad ? "FAILED" : "ok");
	return bad;
}
