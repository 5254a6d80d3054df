/* fork.c -- fork while another thread runs; the child creates threads,
 * works and exits; prints "fork: ok" from both. (pmlab emulator test) */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The child uses its own lock: the parent's may be held by the other
 * thread at the moment of fork (a property of fork, not of pmlab). */
static pthread_mutex_t parent_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *m = &parent_lock;
static volatile long counter;

static void spin_ms(long ms)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		pthread_mutex_lock(m);
		counter++;
		pthread_mutex_unlock(m);
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static void *work(void *arg)
{
	spin_ms((long)arg);
	return NULL;
}

int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, work, (void *)60L);
	spin_ms(10);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		/* The other thread does not exist here; locks must work. */
		pthread_t c[4];
		m = &child_lock;
		for (long i = 0; i < 4; i++)
			pthread_create(&c[i], NULL, work, (void *)20L);
		spin_ms(20);
		for (int i = 0; i < 4; i++)
			pthread_join(c[i], NULL);
		printf("fork: child ok\n");
		return 0;
	}
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		printf("fork: child failed (status %d)\n", st);
		return 1;
	}
	pthread_join(t, NULL);
	printf("fork: parent ok\n");
	return 0;
}
