/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * mtlat.c -- threads entering critical sections (pmlab workload, Quartz 4.5)
 *
 * N threads each enter K critical sections guarded by one mutex; inside,
 * a thread follows IN pointer-chasing steps of a chain over a shared region,
 * outside OUT steps of its own chain. Prints one line:
 *
 *   mtlat: threads=2 sections=1000 inside=100 outside=0 elapsed_ns=...
 *          ns_per_section=... lock_wait_ns=... lock_hold_ns=...
 *
 * lock_wait_ns is the total time threads spent waiting in
 * pthread_mutex_lock, lock_hold_ns the total time from acquiring the lock
 * to the return of pthread_mutex_unlock (a delay injected at the unlock
 * lengthens it), both summed over threads.
 *
 * With -x EXTRA_NS each stretch of steps (a critical section, the work
 * outside) is followed by a busy wait of EXTRA_NS per step of the
 * thread's own time (cpuwait.h: on the TSC; time switched out does not
 * count), the section's before the unlock: the lock is held, and the CPU
 * kept, as long as if every access had cost its DRAM time plus EXTRA_NS,
 * as a thread stalled on slower memory keeps its CPU. With EXTRA_NS = L - DRAM
 * latency the run has the schedule the program would have if every
 * access cost L, without any emulator (pmlab validate's reference for
 * mtlat).
 *
 * Usage: mtlat [-t THREADS] [-k SECTIONS] [-i INSIDE] [-o OUTSIDE] [-r REGION_MIB] [-x EXTRA_NS]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpuwait.h"
#include "args.h"

#define LINE 64
#define MAX_THREADS 256

static long nthreads = 2, sections = 1000, inside = 100, outside = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void **shared_head;
static size_t region_bytes;
static uint64_t wait_ns[MAX_THREADS], hold_ns[MAX_THREADS];
static void **own_head[MAX_THREADS];

/* A random cycle over the lines of a fresh region; returns its head. */
static void **make_chain(size_t bytes, uint64_t seed)
{
	char *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return NULL;
	madvise(base, bytes, MADV_HUGEPAGE);
	size_t lines = bytes / LINE;
	uint32_t *o = malloc(lines * sizeof *o);
	if (!o)
		return NULL;
	for (size_t i = 0; i < lines; i++)
		o[i] = (uint32_t)i;
	uint64_t s = seed | 1;
	for (size_t i = lines - 1; i > 0; i--) {
		s ^= s << 13; s ^= s >> 7; s ^= s << 17;
		size_t j = s % i;
		uint32_t t = o[i]; o[i] = o[j]; o[j] = t;
	}
	for (size_t k = 0; k < lines; k++)
		*(void **)(base + (size_t)o[k] * LINE) =
			base + (size_t)o[(k + 1) % lines] * LINE;
	void **head = (void **)(base + (size_t)o[0] * LINE);
	free(o);
	return head;
}

static void *worker(void *arg)
{
	long id = (long)arg;
	void **own = own_head[id];
	void **sh;
	int64_t owed = 0;
	for (long k = 0; k < sections; k++) {
		uint64_t t0 = cw_now_ns();
		pthread_mutex_lock(&lock);
		uint64_t t1 = cw_now_ns();
		wait_ns[id] += t1 - t0;
		sh = shared_head;
		for (long i = 0; i < inside; i++)
			sh = (void **)*sh;
		shared_head = sh;
		cw_pay(&owed, inside);
		pthread_mutex_unlock(&lock);
		hold_ns[id] += cw_now_ns() - t1;
		for (long i = 0; i < outside; i++)
			own = (void **)*own;
		cw_pay(&owed, outside);
	}
	return (void *)((uintptr_t)own & 1);
}

int main(int argc, char **argv)
{
	long region_mib = 64, extra_ns = 0;
	int opt;
	while ((opt = getopt(argc, argv, "t:k:i:o:r:x:")) != -1) {
		switch (opt) {
		case 't': nthreads = wl_arg_long("mtlat", opt, optarg, 1, MAX_THREADS); break;
		case 'k': sections = wl_arg_long("mtlat", opt, optarg, 1, 1L << 40); break;
		case 'i': inside = wl_arg_long("mtlat", opt, optarg, 0, 1L << 30); break;
		case 'o': outside = wl_arg_long("mtlat", opt, optarg, 0, 1L << 30); break;
		case 'r': region_mib = wl_arg_long("mtlat", opt, optarg, 1, 1 << 16); break;
		case 'x': extra_ns = wl_arg_long("mtlat", opt, optarg, 0, 1000000); break;
		default:
			fprintf(stderr, "usage: mtlat [-t THREADS (1-%d)] [-k SECTIONS] "
					"[-i INSIDE] [-o OUTSIDE] [-r REGION_MIB] [-x EXTRA_NS]\n", MAX_THREADS);
			return 2;
		}
	}
	cw_init(extra_ns);
	region_bytes = (size_t)region_mib << 20;
	shared_head = make_chain(region_bytes, 4242);
	if (!shared_head) {
		fprintf(stderr, "mtlat: cannot map %ld MiB: try a smaller -r\n", region_mib);
		return 1;
	}
	for (long i = 0; i < nthreads; i++) {
		/* Each thread's private chain is built before timing starts. */
		own_head[i] = outside > 0 ? make_chain(region_bytes, 977 + (uint64_t)i)
				: shared_head;
		if (!own_head[i]) {
			fprintf(stderr, "mtlat: cannot map %ld MiB: try a smaller -r\n",
					region_mib);
			return 1;
		}
	}
	pthread_t th[MAX_THREADS];
	uint64_t t0 = cw_now_ns();
	for (long i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)i) != 0) {
			fprintf(stderr, "mtlat: cannot create thread %ld\n", i);
			return 1;
		}
	for (long i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	uint64_t t1 = cw_now_ns();
	uint64_t wait = 0, hold = 0;
	for (long i = 0; i < nthreads; i++) {
		wait += wait_ns[i];
		hold += hold_ns[i];
	}
	printf("mtlat: threads=%ld sections=%ld inside=%ld outside=%ld extra_ns=%ld "
			"elapsed_ns=%llu ns_per_section=%.1f lock_wait_ns=%llu lock_hold_ns=%llu\n",
			nthreads, sections, inside, outside, extra_ns,
			(unsigned long long)(t1 - t0),
			(double)(t1 - t0) / (double)(nthreads * sections),
			(unsigned long long)wait, (unsigned long long)hold);
	return 0;
}
