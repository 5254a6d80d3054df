/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * survive.c -- how long the LLC keeps lines left untouched (pmlab
 * workload, issue 16)
 *
 * On a shared machine the LLC's other users fill lines all the time, so a
 * line of ours left untouched is lost at a rate per second whatever we do
 * in between (bptree -g shows it per tree level). This measures it: read
 * a set of SET_KIB (in a random order, one load a line), then -f
 * FLUSH_KIB [2048] of other memory (so that the set leaves the core's L2
 * for the LLC, as a tree level's lines do between visits), -p PASSES [2]
 * times (a line reused from the LLC may be kept longer than one read
 * once),
 * spin TAU_US on the TSC touching no memory, then time one load per line
 * (lfence, TSC, the load, rdtscp) and count the lines that came back in
 * under -t THRESHOLD_NS [90] (between an LLC hit and a DRAM access here):
 * the share that survived. Repeated -k times per TAU_US, each time on a
 * fresh order. Lines are timed in the order they were last touched, so
 * each waited TAU_US plus the time of the timed loads before it; the
 * first -m MEASURE lines [1024] only are timed, so that this is small.
 *
 * crates/model's foreign_fill_rate turns a share `s` after `tau` into the
 * other users' fill rate of the model: S (p - (w - p) ln s) / tau lines a
 * second for S sets of w ways, p protected (docs/accuracy.md).
 *
 * Prints one line per TAU_US:
 *
 *   survive: set_kib=... tau_us=... lines_timed=... survived=...
 *
 * Usage: survive [-s SET_KIB] [-f FLUSH_KIB] [-p PASSES] [-t THRESHOLD_NS]
 *                [-k ROUNDS] [-m MEASURE] TAU_US...
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpuwait.h"
#include "timedload.h"
#include "args.h"

#define LINE 64

static void usage(void)
{
	fprintf(stderr, "usage: survive [-s SET_KIB 64-1048576] [-f FLUSH_KIB 0-1048576] "
			"[-p PASSES 1-100] [-t THRESHOLD_NS 1-100000] [-k ROUNDS 1-1000] [-m MEASURE 1-1000000] "
			"TAU_US...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long set_kib = 4096, flush_kib = 2048, threshold_ns = 90, rounds = 5, measure = 1024;
	long passes = 2;
	int opt;
	while ((opt = getopt(argc, argv, "s:f:p:t:k:m:")) != -1) {
		switch (opt) {
		case 's': set_kib = wl_arg_long("survive", opt, optarg, 64, 1 << 20); break;
		case 'f': flush_kib = wl_arg_long("survive", opt, optarg, 0, 1 << 20); break;
		case 'p': passes = wl_arg_long("survive", opt, optarg, 1, 100); break;
		case 't': threshold_ns = wl_arg_long("survive", opt, optarg, 1, 100000); break;
		case 'k': rounds = wl_arg_long("survive", opt, optarg, 1, 1000); break;
		case 'm': measure = wl_arg_long("survive", opt, optarg, 1, 1000000); break;
		default: usage();
		}
	}
	if (optind >= argc)
		usage();
	size_t bytes = (size_t)set_kib << 10, lines = bytes / LINE;
	if ((size_t)measure > lines)
		measure = (long)lines;
	size_t flush_bytes = (size_t)flush_kib << 10;
	char *set = mmap(NULL, bytes + flush_bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *order = malloc(lines * sizeof(uint32_t));
	if (set == MAP_FAILED || order == NULL) {
		fprintf(stderr, "survive: cannot map %ld KiB: try a smaller -s\n", set_kib);
		return 1;
	}
	madvise(set, bytes + flush_bytes, MADV_HUGEPAGE);
	for (size_t i = 0; i < bytes + flush_bytes; i += 4096)
		set[i] = 1;
	const char *flush = set + bytes;
	double per_ns = cw_tsc_per_ns();
	uint64_t threshold = (uint64_t)((double)threshold_ns * per_ns);
	uint64_t r = 0x9e3779b97f4a7c15ull;
	for (int a = optind; a < argc; a++) {
		long tau_us = wl_arg_long("survive", 0, argv[a], 0, 10000000);
		uint64_t tau_ticks = (uint64_t)((double)tau_us * 1000.0 * per_ns);
		uint64_t kept = 0, timed = 0;
		for (long k = 0; k < rounds; k++) {
			for (size_t i = 0; i < lines; i++)
				order[i] = (uint32_t)i;
			for (size_t i = lines - 1; i > 0; i--) {
				size_t j = rng(&r) % (i + 1);
				uint32_t t = order[i];
				order[i] = order[j];
				order[j] = t;
			}
			/* The timed lines last: the most recently used when the
			 * wait starts. */
			for (long pass = 0; pass < passes; pass++) {
				for (size_t i = lines; i-- > 0;)
					(void)*(volatile uint64_t *)(set + (size_t)order[i] * LINE);
				for (size_t i = 0; i < flush_bytes; i += LINE)
					(void)*(const volatile uint64_t *)(flush + i);
			}
			spin_ticks(tau_ticks);
			for (long i = 0; i < measure; i++) {
				uint64_t v;
				kept += timed_load((const uint64_t *)(set + (size_t)order[i] * LINE), &v) <= threshold;
				timed++;
			}
		}
		printf("survive: set_kib=%ld flush_kib=%ld passes=%ld tau_us=%ld lines_timed=%llu "
				"survived=%.4f\n", set_kib, flush_kib, passes, tau_us,
				(unsigned long long)timed, (double)kept / (double)timed);
	}
	return 0;
}
