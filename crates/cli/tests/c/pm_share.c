/*
 * pm_share.c -- known numbers of PM and DRAM accesses, for the test of the
 * PM share of a traced `pmlab cc` program (crates/cli/tests/trace.rs).
 *
 * Every access goes through a volatile pointer in a loop, so the compiler
 * emits exactly one load or store per iteration:
 *   main:   100000 PM loads, 100000 PM stores, 250000 DRAM stores;
 *   thread:  50000 DRAM loads.
 * PM: 200000 accesses, DRAM: 300000: a PM share of 0.4. None of the counts
 * is a multiple of the runtime's batch (4096), so the test also sees
 * whether each thread's remainder reaches the trace.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

void *pmalloc(size_t size);

static void *dram_loads(void *arg)
{
	volatile long *d = arg;
	long s = 0;
	for (long i = 0; i < 50000; i++)
		s += d[i & 63];
	return (void *)s;
}

int main(void)
{
	volatile long *pm = pmalloc(64 * sizeof(long));
	volatile long *dram = malloc(64 * sizeof(long));
	pthread_t t;
	void *ts;
	long s = 0;
	if (!pm || !dram)
		return 1;
	for (long i = 0; i < 100000; i++)
		pm[i & 63] = i;
	for (long i = 0; i < 100000; i++)
		s += pm[i & 63];
	for (long i = 0; i < 250000; i++)
		dram[i & 63] = i;
	if (pthread_create(&t, NULL, dram_loads, (void *)dram) != 0)
		return 1;
	pthread_join(t, &ts);
	printf("%ld %ld\n", s, (long)ts);
	return 0;
}
