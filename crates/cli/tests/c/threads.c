/* threads.c -- create and join many threads in waves; each takes a lock.
 * Prints "threads: created=N ns_per_thread=X". Usage: threads [N] [WAVE] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long total;

static void *work(void *arg)
{
	pthread_mutex_lock(&m);
	total += (long)arg;
	pthread_mutex_unlock(&m);
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000;
	long wave = argc > 2 ? atol(argv[2]) : 500;
	if (n < 1 || wave < 1)
		return 2;
	pthread_t *t = calloc((size_t)wave, sizeof *t);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	long made = 0;
	while (made < n) {
		long k = n - made < wave ? n - made : wave;
		for (long i = 0; i < k; i++)
			if (pthread_create(&t[i], NULL, work, (void *)1L) != 0) {
				printf("threads: create failed at %ld\n", made + i);
				return 1;
			}
		for (long i = 0; i < k; i++)
			pthread_join(t[i], NULL);
		made += k;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
	printf("threads: created=%ld total=%ld ns_per_thread=%.0f\n", made, total, ns / (double)n);
	return total == n ? 0 : 1;
}
