/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * stream.c -- STREAM-like copy, triad and sum (pmlab workload, issue 17)
 *
 * Three arrays of doubles (-r MiB each, 128 by default); copy is
 * c[i] = a[i], triad a[i] = b[i] + s x c[i], sum adds up a[i] (read only,
 * two partial sums), split in equal contiguous parts over -t threads,
 * which meet at a barrier around every pass. Each thread first touches
 * its own part. One untimed pass, then -n timed passes; the bandwidth
 * counts the bytes as STREAM does -- copy reads one array and writes one
 * (16 B per element), triad reads two and writes one (24 B per element),
 * sum reads one (8 B); the write-allocate reads of the stored lines are
 * not counted -- over the timed passes' total time. Beside it, the
 * traffic the memory itself carries with ordinary (write-allocate)
 * stores: every stored line is also read first, so copy moves 24 B per
 * element, triad 32 B and sum 8 B (mem_bytes, mem_gbps). Plain C, no
 * pmlab API.
 *
 * Prints one line:
 *
 *   stream: kernel=triad threads=1 array=134217728 passes=3
 *           bytes=... elapsed_ns=... gbps=... best_gbps=...
 *           mem_bytes=... mem_gbps=...
 *
 * Usage: stream [-k copy|triad|sum] [-t THREADS 1-64] [-r MIB] [-n PASSES]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "args.h"

enum kernel { COPY, TRIAD, SUM };
static double *a, *b, *c;
static double sums[64];
static size_t n;
static int threads, passes;
static enum kernel kernel = TRIAD;
static pthread_barrier_t bar;
static uint64_t pass_ns[1000];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *worker(void *arg)
{
	long id = (long)arg;
	size_t lo = n * (size_t)id / (size_t)threads;
	size_t hi = n * (size_t)(id + 1) / (size_t)threads;
	for (size_t i = lo; i < hi; i++) {
		a[i] = 1.0;
		b[i] = 2.0;
		c[i] = 0.5;
	}
	const double s = 3.0;
	for (int p = -1; p < passes; p++) {
		pthread_barrier_wait(&bar);
		uint64_t t0 = id == 0 ? now_ns() : 0;
		if (kernel == TRIAD) {
			for (size_t i = lo; i < hi; i++)
				a[i] = b[i] + s * c[i];
		} else if (kernel == COPY) {
			for (size_t i = lo; i < hi; i++)
				c[i] = a[i];
		} else {
			/* Two partial sums, one 16-byte load per pair (more
			 * would be vectorized into loads wider than 16 bytes,
			 * which the sampling plugin leaves unhooked). */
			double s0 = 0, s1 = 0;
			size_t i = lo;
			for (; i + 2 <= hi; i += 2) {
				s0 += a[i];
				s1 += a[i + 1];
			}
			for (; i < hi; i++)
				s0 += a[i];
			sums[id] = s0 + s1;
		}
		pthread_barrier_wait(&bar);
		if (id == 0 && p >= 0)
			pass_ns[p] = now_ns() - t0;
	}
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: stream [-k copy|triad|sum] [-t THREADS 1-64] "
			"[-r MIB per array] [-n PASSES 1-1000]\n");
	exit(2);
}

static double *array(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "stream: cannot map %zu bytes: try a smaller -r\n", bytes);
		exit(1);
	}
	madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

int main(int argc, char **argv)
{
	long mib = 128;
	int opt;
	threads = 1;
	passes = 3;
	while ((opt = getopt(argc, argv, "k:t:r:n:")) != -1) {
		switch (opt) {
		case 'k':
			if (strcmp(optarg, "triad") == 0) kernel = TRIAD;
			else if (strcmp(optarg, "copy") == 0) kernel = COPY;
			else if (strcmp(optarg, "sum") == 0) kernel = SUM;
			else usage();
			break;
		case 't': threads = (int)wl_arg_long("stream", opt, optarg, 1, 64); break;
		case 'r': mib = wl_arg_long("stream", opt, optarg, 1, 1 << 20); break;
		case 'n': passes = (int)wl_arg_long("stream", opt, optarg, 1, 1000); break;
		default: usage();
		}
	}
	size_t bytes = (size_t)mib << 20;
	n = bytes / sizeof(double);
	a = array(bytes);
	b = array(bytes);
	c = array(bytes);
	pthread_barrier_init(&bar, NULL, (unsigned)threads);
	pthread_t tid[64];
	for (long i = 1; i < threads; i++)
		if (pthread_create(&tid[i], NULL, worker, (void *)i) != 0) {
			fprintf(stderr, "stream: cannot start thread %ld\n", i);
			return 1;
		}
	worker((void *)0);
	for (long i = 1; i < threads; i++)
		pthread_join(tid[i], NULL);
	uint64_t total = 0, best = UINT64_MAX;
	for (int p = 0; p < passes; p++) {
		total += pass_ns[p];
		if (pass_ns[p] < best)
			best = pass_ns[p];
	}
	/* Arrays read and written per pass, STREAM's count. */
	static const int arrays[] = { [COPY] = 2, [TRIAD] = 3, [SUM] = 1 };
	static const char *const names[] = { [COPY] = "copy", [TRIAD] = "triad",
		[SUM] = "sum" };
	double per_pass = (double)n * sizeof(double) * arrays[kernel];
	double moved = per_pass * passes;
	/* One more array's worth per pass for a kernel that stores: the
	 * stored array's lines are read before they are written
	 * (write-allocate). */
	double mem_moved = (double)n * sizeof(double) *
		(arrays[kernel] + (kernel != SUM)) * passes;
	double check = kernel == TRIAD ? a[n / 2] : kernel == COPY ? c[n / 2] : 0;
	for (int i = 0; kernel == SUM && i < threads; i++)
		check += sums[i] / (double)n;
	printf("stream: kernel=%s threads=%d array=%zu passes=%d bytes=%.0f "
			"elapsed_ns=%llu gbps=%.3f best_gbps=%.3f check=%.1f "
			"mem_bytes=%.0f mem_gbps=%.3f\n",
			names[kernel], threads, bytes, passes, moved,
			(unsigned long long)total, moved / (double)total,
			per_pass / (double)best, check, mem_moved,
			mem_moved / (double)total);
	return 0;
}
