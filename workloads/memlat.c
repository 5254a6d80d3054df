/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * memlat.c -- memory latency by pointer chasing (pmlab workload)
 *
 * Builds one or several independent random cyclic chains of cache lines over
 * a region (huge pages requested with madvise), then follows them, the
 * chains interleaved so that their loads can overlap (memory-level
 * parallelism = chains). Prints one line:
 *
 *   memlat: chains=1 region=268435456 accesses=20000000 huge_pages=1
 *           elapsed_ns=... ns_per_access=...
 *
 * With -q the chains are built in one sequential pass instead: each chain
 * covers an equal contiguous part of the region, linked in a pseudo-random
 * cycle (a full-period LCG over the next power of two, stepping past lines
 * out of range), written in address order. The timed loop is the same; the
 * set-up of a 1 GiB region takes a fraction of the shuffle's time, which
 * matters under emulation (pmlab validate's working-set study uses it).
 *
 * Usage: memlat [-c CHAINS] [-r REGION_MIB] [-n ACCESSES] [-s SEED] [-q]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "wl_common.h"
#include "args.h"

#define LINE 64
#define MAX_CHAINS 16

static void usage(void)
{
	fprintf(stderr, "usage: memlat [-c CHAINS (1-%d)] [-r REGION_MIB] "
			"[-n ACCESSES] [-s SEED] [-q]\n", MAX_CHAINS);
	exit(2);
}

int main(int argc, char **argv)
{
	long chains = 1, region_mib = 256, accesses = 20000000, seed = 12345;
	int opt, sequential = 0;
	while ((opt = getopt(argc, argv, "c:r:n:s:q")) != -1) {
		switch (opt) {
		case 'c': chains = wl_arg_long("memlat", opt, optarg, 1, MAX_CHAINS); break;
		case 'r': region_mib = wl_arg_long("memlat", opt, optarg, 1, 1 << 20); break;
		case 'n': accesses = wl_arg_long("memlat", opt, optarg, 1, 1L << 40); break;
		case 's': seed = wl_arg_long("memlat", opt, optarg, 1, 1L << 40); break;
		case 'q': sequential = 1; break;
		default: usage();
		}
	}
	size_t region = (size_t)region_mib << 20;
	char *base = mmap(NULL, region, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		fprintf(stderr, "memlat: cannot map %ld MiB: try a smaller -r\n",
				region_mib);
		return 1;
	}
	int huge = madvise(base, region, MADV_HUGEPAGE) == 0;

	/* One random cycle over all lines (Sattolo), cut into `chains`
	 * independent cycles of equal length. */
	size_t lines = region / LINE;
	size_t per = lines / (size_t)chains;
	if (per < 2) {
		fprintf(stderr, "memlat: region too small for %ld chains\n", chains);
		return 1;
	}
	void **heads[MAX_CHAINS];
	if (sequential) {
		uint64_t p2 = 1;
		while (p2 < per)
			p2 <<= 1;
		for (long c = 0; c < chains; c++) {
			size_t first = (size_t)c * per;
			for (size_t j = 0; j < per; j++) {
				uint64_t to = j;
				do
					to = (to * 6364136223846793005ull
							+ 1442695040888963407ull) & (p2 - 1);
				while (to >= per);
				*(void **)(base + (first + j) * LINE) =
						base + (first + to) * LINE;
			}
			heads[c] = (void **)(base + first * LINE);
		}
		goto linked;
	}
	uint32_t *order = malloc(lines * sizeof *order);
	if (!order) {
		fprintf(stderr, "memlat: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < lines; i++)
		order[i] = (uint32_t)i;
	uint64_t s = (uint64_t)seed * 2654435761u + 1;
	for (size_t i = lines - 1; i > 0; i--) {
		size_t j = wl_xorshift(&s) % i;
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (long c = 0; c < chains; c++) {
		uint32_t *o = order + (size_t)c * per;
		for (size_t k = 0; k < per; k++) {
			void **from = (void **)(base + (size_t)o[k] * LINE);
			*from = base + (size_t)o[(k + 1) % per] * LINE;
		}
		heads[c] = (void **)(base + (size_t)o[0] * LINE);
	}
	free(order);
linked:;

	/* Warm up (TLB, page faults), then measure. */
	void **p[MAX_CHAINS];
	for (long c = 0; c < chains; c++) {
		p[c] = heads[c];
		for (size_t k = 0; k < per && k < 100000; k++)
			p[c] = (void **)*p[c];
	}
	long rounds = accesses / chains;
	if (rounds < 1)
		rounds = 1;
	uint64_t t0 = wl_now_ns();
	for (long r = 0; r < rounds; r++)
		for (long c = 0; c < chains; c++)
			p[c] = (void **)*p[c];
	uint64_t t1 = wl_now_ns();
	uintptr_t sink = 0;
	for (long c = 0; c < chains; c++)
		sink ^= (uintptr_t)p[c];
	long done = rounds * chains;
	printf("memlat: chains=%ld region=%zu accesses=%ld huge_pages=%d "
			"elapsed_ns=%llu ns_per_access=%.2f sink=%lu\n",
			chains, region, done, huge,
			(unsigned long long)(t1 - t0),
			(double)(t1 - t0) / (double)done, (unsigned long)(sink & 1));
	munmap(base, region);
	return 0;
}
