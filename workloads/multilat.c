/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * multilat.c -- one pointer chain across DRAM and PM (pmlab workload,
 * Quartz section 4.6)
 *
 * Two arrays of cache lines: one from malloc (DRAM) and one from pmalloc
 * (PM; found at run time, so the program needs libpmlab only when run under
 * `pmlab run` or linked with -lpmlab; otherwise the "PM" array is plain
 * memory and the line says pm=malloc). A single chain visits them in the
 * pattern given with -p (e.g. "DP": alternate, "DDDP": one PM access in
 * four), each array in its own random order. A count may precede a letter
 * ("200D100P" is 200 D then 100 P), so that long patterns stay short on
 * the command line. Prints one line:
 *
 *   multilat: pattern=DP pm=pmalloc region=... extra_ns=0 dram_accesses=...
 *             pm_accesses=... elapsed_ns=... ns_per_access=...
 *
 * With -x EXTRA_NS each run of P accesses in the pattern is followed by a
 * wait of EXTRA_NS per access of the thread's own time, holding the CPU
 * (cpuwait.h): with EXTRA_NS = L - DRAM latency the run takes the time
 * the chain would take if every PM access cost L, measured without any
 * emulator on a machine that has only DRAM (pmlab validate's reference
 * for multilat, beside the formula).
 *
 * Usage: multilat [-p PATTERN] [-r REGION_MIB per array] [-n ACCESSES]
 *                 [-x EXTRA_NS]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpuwait.h"

#define LINE 64

static void shuffle(uint32_t *o, size_t n, uint64_t s)
{
	for (size_t i = 0; i < n; i++)
		o[i] = (uint32_t)i;
	s |= 1;
	for (size_t i = n - 1; i > 0; i--) {
		s ^= s << 13; s ^= s >> 7; s ^= s << 17;
		size_t j = s % i;
		uint32_t t = o[i]; o[i] = o[j]; o[j] = t;
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: multilat [-p PATTERN of D and P, each letter may "
			"have a count before it: 200D100P] [-r REGION_MIB] [-n ACCESSES] "
			"[-x EXTRA_NS per PM access, 0-1000000]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *pattern = "DP";
	long region_mib = 128, accesses = 10000000, extra_ns = 0;
	int opt;
	char *end;
	while ((opt = getopt(argc, argv, "p:r:n:x:")) != -1) {
		switch (opt) {
		case 'p': pattern = optarg; break;
		case 'r': region_mib = strtol(optarg, &end, 10);
			if (*end || region_mib < 1) usage();
			break;
		case 'n': accesses = strtol(optarg, &end, 10);
			if (*end || accesses < 1) usage();
			break;
		case 'x': extra_ns = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end || extra_ns < 0 || extra_ns > 1000000)
				usage();
			break;
		default: usage();
		}
	}
	/* Expand counts: "200D100P" -> 200 D then 100 P. */
	size_t plen = 0, cap = 0, nd = 0, np = 0;
	char *expanded = NULL;
	for (const char *c = pattern; *c;) {
		unsigned long n = 1;
		if (*c >= '0' && *c <= '9') {
			n = strtoul(c, &end, 10);
			c = end;
			if (n == 0 || n > 100000000ul) {
				fprintf(stderr, "multilat: a count in the pattern must be 1..100000000\n");
				return 2;
			}
		}
		if (*c != 'D' && *c != 'P')
			usage();
		if (plen + n > cap) {
			cap = (plen + n) * 2;
			expanded = realloc(expanded, cap);
			if (!expanded) {
				fprintf(stderr, "multilat: out of memory for the pattern\n");
				return 1;
			}
		}
		memset(expanded + plen, *c, n);
		plen += n;
		if (*c == 'D') nd += n; else np += n;
		c++;
	}
	if (plen == 0)
		usage();
	if (nd == 0 || np == 0) {
		fprintf(stderr, "multilat: the pattern needs at least one D and one P\n");
		return 2;
	}
	size_t bytes = (size_t)region_mib << 20, lines = bytes / LINE;
	void *(*pm_alloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "pmalloc");
	char *dram = NULL, *pm;
	if (posix_memalign((void **)&dram, 2 << 20, bytes) != 0) {
		fprintf(stderr, "multilat: cannot allocate %ld MiB of DRAM\n", region_mib);
		return 1;
	}
	madvise(dram, bytes, MADV_HUGEPAGE);
	pm = pm_alloc ? pm_alloc(bytes) : NULL;
	if (pm_alloc && !pm) {
		fprintf(stderr, "multilat: pmalloc(%zu) failed: raise --pm-pool-size\n", bytes);
		return 1;
	}
	if (!pm && posix_memalign((void **)&pm, 2 << 20, bytes) != 0) {
		fprintf(stderr, "multilat: cannot allocate %ld MiB\n", region_mib);
		return 1;
	}
	madvise(pm, bytes, MADV_HUGEPAGE);

	/* Visit order: step k of the pattern takes the next line of its
	 * array's own random permutation. The chain has one cycle of
	 * `steps` nodes. */
	uint32_t *od = malloc(lines * sizeof *od), *op = malloc(lines * sizeof *op);
	if (!od || !op) {
		fprintf(stderr, "multilat: out of memory\n");
		return 1;
	}
	shuffle(od, lines, 11);
	shuffle(op, lines, 29);
	size_t reps = lines / (nd > np ? nd : np);
	size_t steps = reps * plen;
	void **first = NULL, **prev = NULL;
	size_t id = 0, ip = 0;
	for (size_t k = 0; k < steps; k++) {
		char c = expanded[k % plen];
		void **node = c == 'D' ? (void **)(dram + (size_t)od[id++] * LINE)
				: (void **)(pm + (size_t)op[ip++] * LINE);
		if (prev)
			*prev = node;
		else
			first = node;
		prev = node;
	}
	*prev = first;
	free(od);
	free(op);

	/* With -x: run[i] is how many of the pattern's letters from i on are
	 * the same as its letter i (up to the pattern's end). */
	uint32_t *run = NULL;
	if (extra_ns > 0) {
		run = malloc(plen * sizeof *run);
		if (!run) {
			fprintf(stderr, "multilat: out of memory\n");
			return 1;
		}
		for (size_t i = plen; i-- > 0;)
			run[i] = i + 1 < plen && expanded[i + 1] == expanded[i] ? run[i + 1] + 1 : 1;
		cw_init(extra_ns);
	}

	void **p = first;
	size_t warm = steps < 100000 ? steps : 100000;
	for (size_t k = 0; k < warm; k++)
		p = (void **)*p;
	uint64_t t0 = cw_now_ns();
	if (!run) {
		for (long k = 0; k < accesses; k++)
			p = (void **)*p;
	} else {
		/* Timed step k is pattern position (k + warm) % plen (steps is
		 * a multiple of plen); each run of P is followed by its wait. */
		int64_t owed = 0;
		size_t pos = warm % plen;
		for (long k = 0; k < accesses;) {
			long n = run[pos];
			if (n > accesses - k)
				n = accesses - k;
			for (long j = 0; j < n; j++)
				p = (void **)*p;
			if (expanded[pos] == 'P')
				cw_pay(&owed, n);
			k += n;
			pos = (pos + (size_t)n) % plen;
		}
	}
	uint64_t t1 = cw_now_ns();
	free(run);
	/* Exact counts of the timed accesses: step k of the chain is pattern
	 * position k % plen (steps is a multiple of plen). */
	long dram_done = 0;
	for (long k = 0; k < accesses; k++)
		dram_done += expanded[((size_t)k + warm) % steps % plen] == 'D';
	printf("multilat: pattern=%s pm=%s region=%zu extra_ns=%ld dram_accesses=%ld "
			"pm_accesses=%ld elapsed_ns=%llu ns_per_access=%.2f sink=%lu\n",
			pattern, pm_alloc ? "pmalloc" : "malloc", bytes, extra_ns,
			dram_done, accesses - dram_done,
			(unsigned long long)(t1 - t0), (double)(t1 - t0) / (double)accesses,
			(unsigned long)((uintptr_t)p & 1));
	return 0;
}
