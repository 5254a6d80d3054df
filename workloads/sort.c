/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * sort.c -- a compute-bound sort (pmlab workload, issue 17)
 *
 * Sorts an array of 32-bit keys that fits the last-level cache (16 MiB by
 * default), refilled with the same pseudo-random keys before each of -n
 * passes: qsort with a comparison function (calls and branches) or an
 * LSD radix sort (four byte-wide counting passes). Plain C, no pmlab API.
 *
 * Prints one line:
 *
 *   sort: algo=qsort elements=... passes=... elapsed_ns=... ns_per_element=...
 *
 * Usage: sort [-a qsort|radix] [-e ELEMENTS] [-n PASSES] [-s SEED]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "args.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return (a > b) - (a < b);
}

static void radix(uint32_t *v, uint32_t *tmp, size_t n)
{
	for (int shift = 0; shift < 32; shift += 8) {
		size_t cnt[257] = {0};
		for (size_t i = 0; i < n; i++)
			cnt[((v[i] >> shift) & 255) + 1]++;
		for (int d = 0; d < 256; d++)
			cnt[d + 1] += cnt[d];
		for (size_t i = 0; i < n; i++)
			tmp[cnt[(v[i] >> shift) & 255]++] = v[i];
		uint32_t *t = v;
		v = tmp;
		tmp = t;
	}
	/* four passes: the result is back in the caller's v */
}

static void usage(void)
{
	fprintf(stderr, "usage: sort [-a qsort|radix] [-e ELEMENTS] [-n PASSES] "
			"[-s SEED]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long elements = 4L << 20, passes = 3, seed = 5;
	int use_radix = 0, opt;
	while ((opt = getopt(argc, argv, "a:e:n:s:")) != -1) {
		switch (opt) {
		case 'a':
			if (strcmp(optarg, "qsort") == 0) use_radix = 0;
			else if (strcmp(optarg, "radix") == 0) use_radix = 1;
			else usage();
			break;
		case 'e': elements = wl_arg_long("sort", opt, optarg, 2, 1L << 32); break;
		case 'n': passes = wl_arg_long("sort", opt, optarg, 1, 1000); break;
		case 's': seed = wl_arg_long("sort", opt, optarg, 0, 1L << 40); break;
		default: usage();
		}
	}
	size_t n = (size_t)elements;
	uint32_t *v = malloc(n * sizeof *v), *tmp = malloc(n * sizeof *tmp);
	if (!v || !tmp) {
		fprintf(stderr, "sort: cannot allocate %ld elements: try a smaller -e\n",
				elements);
		return 1;
	}
	uint64_t total = 0;
	for (long p = 0; p < passes; p++) {
		uint64_t s = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
		for (size_t i = 0; i < n; i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			v[i] = (uint32_t)(s >> 11);
		}
		uint64_t t0 = now_ns();
		if (use_radix)
			radix(v, tmp, n);
		else
			qsort(v, n, sizeof *v, cmp);
		total += now_ns() - t0;
		for (size_t i = 1; i < n; i++)
			if (v[i - 1] > v[i]) {
				fprintf(stderr, "sort: not sorted at %zu\n", i);
				return 1;
			}
	}
	printf("sort: algo=%s elements=%zu passes=%ld elapsed_ns=%llu "
			"ns_per_element=%.2f\n", use_radix ? "radix" : "qsort", n, passes,
			(unsigned long long)total,
			(double)total / (double)passes / (double)n);
	return 0;
}
