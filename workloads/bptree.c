/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bptree.c -- lookups in a B+-tree (pmlab workload, issue 16)
 *
 * A static B+-tree over sorted 64-bit keys: the leaves are the sorted key
 * array (the region), each inner level holds the first key of every node
 * of the level below, in nodes of B keys (one 64-byte line by default),
 * children found by position (node n's child j is node n x B + j of the
 * level below, as in a bulk-loaded tree). Every lookup walks from the root
 * to a leaf: a short dependent chain of loads -- the child's address comes
 * from comparing the keys just loaded -- with a scan of B keys (compute)
 * at each node. The upper levels stay in the caches; the lowest ones and
 * the leaves miss. Lookups are of random present keys and independent of
 * each other. Plain C, no pmlab API.
 *
 * With -d each lookup's key is picked with the key the previous lookup
 * found: the same work with every lookup behind the previous one (no
 * overlap between lookups), to measure that overlap natively.
 *
 * With -x EXTRA_NS the first load of every node is timed (lfence, TSC,
 * the load, rdtscp: the load has returned) and counted as a miss when it
 * took more than -t THRESHOLD_NS [90: between an LLC hit and a DRAM
 * access here]; after each such miss the thread holds the CPU EXTRA_NS
 * more of its own time (cpuwait.h). So the lookups run as they would if
 * every load that misses natively cost EXTRA_NS more, measured without
 * any emulator; the misses per lookup, and per level, are printed. The
 * timing costs its own time: -x 0 (timed, no wait) is the baseline the
 * waits are measured against (pmlab validate's reference takes the
 * difference).
 *
 * Diagnostics (issue 16, which misses count): -P 4k maps the tree with
 * MADV_NOHUGEPAGE instead of MADV_HUGEPAGE (the default), so a TLB miss
 * on every level below the cached ones can be told from an LLC miss;
 * -g GAP_NS spins GAP_NS on the TSC between lookups (compute that leaves
 * the caches to the machine's other users for longer); -H (with -x)
 * prints the timed loads' latency histogram per level on a second line,
 * per lookup, in the bands of LAT_BANDS ns (an L1/L2 hit, an LLC hit, a
 * TLB miss on an LLC hit or a near miss, DRAM, beyond). thp_kib is the
 * process's AnonHugePages at the end: how much of the tree THP backed.
 *
 * Prints one line:
 *
 *   bptree: region=... keys=... fanout=8 levels=... lookups=...
 *           elapsed_ns=... ns_per_lookup=... [dependent=... extra_ns=...
 *           threshold_ns=... misses_per_lookup=... level_misses=l0/l1/...]
 *           pages=2m|4k gap_ns=... thp_kib=...
 *
 * and with -H a second line
 *
 *   bptree: hist_ns=<30/30-60/... level0=a/b/... level1=...
 *
 * Usage: bptree [-r LEAF_MIB] [-n LOOKUPS] [-f FANOUT 4-64] [-s SEED] [-d]
 *               [-x EXTRA_NS] [-t THRESHOLD_NS] [-P 2m|4k] [-g GAP_NS] [-H]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpuwait.h"
#include "timedload.h"
#include "args.h"

#define MAX_LEVELS 32

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(void)
{
	fprintf(stderr, "usage: bptree [-r LEAF_MIB] [-n LOOKUPS] [-f FANOUT 4-64] "
			"[-s SEED] [-d] [-x EXTRA_NS 0-1000000] [-t THRESHOLD_NS 1-100000] "
			"[-P 2m|4k] [-g GAP_NS 0-1000000] [-H]\n");
	exit(2);
}

static int small_pages; /* -P 4k */

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "bptree: cannot map %zu bytes: try a smaller -r\n", bytes);
		exit(1);
	}
	madvise(p, bytes, small_pages ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
	return p;
}

int main(int argc, char **argv)
{
	long region_mib = 128, lookups = 2000000, fanout = 8, seed = 11;
	long extra_ns = -1, threshold_ns = 90, gap_ns = 0;
	int opt, dependent = 0, hist = 0;
	while ((opt = getopt(argc, argv, "r:n:f:s:dx:t:P:g:H")) != -1) {
		switch (opt) {
		case 'r': region_mib = wl_arg_long("bptree", opt, optarg, 1, 1 << 20); break;
		case 'n': lookups = wl_arg_long("bptree", opt, optarg, 1, 1L << 40); break;
		case 'f': fanout = wl_arg_long("bptree", opt, optarg, 4, 64); break;
		case 's': seed = wl_arg_long("bptree", opt, optarg, 0, 1L << 40); break;
		case 'd': dependent = 1; break;
		case 'x': extra_ns = wl_arg_long("bptree", opt, optarg, 0, 1000000); break;
		case 't': threshold_ns = wl_arg_long("bptree", opt, optarg, 1, 100000); break;
		case 'P':
			if (strcmp(optarg, "4k") == 0)
				small_pages = 1;
			else if (strcmp(optarg, "2m") != 0)
				usage();
			break;
		case 'g': gap_ns = wl_arg_long("bptree", opt, optarg, 0, 1000000); break;
		case 'H': hist = 1; break;
		default: usage();
		}
	}
	uint64_t b = (uint64_t)fanout;
	uint64_t n = ((uint64_t)region_mib << 20) / sizeof(uint64_t);
	n -= n % b;
	/* level[0] is the root; level[levels-1] the leaves. Each level is
	 * padded to whole nodes with the largest key. */
	uint64_t *level[MAX_LEVELS], count[MAX_LEVELS];
	int levels = 0;
	uint64_t *leaves = map(n * sizeof(uint64_t));
	for (uint64_t i = 0; i < n; i++)
		leaves[i] = 2 * i + 1; /* sorted, odd: every lookup finds its key */
	uint64_t *below = leaves, nb = n;
	uint64_t *lv[MAX_LEVELS], lc[MAX_LEVELS];
	lv[0] = leaves;
	lc[0] = n;
	int up = 1;
	while (nb > b) {
		uint64_t nodes = (nb + b - 1) / b;
		uint64_t padded = (nodes + b - 1) / b * b;
		uint64_t *l = map(padded * sizeof(uint64_t));
		for (uint64_t j = 0; j < padded; j++)
			l[j] = j < nodes ? below[j * b] : UINT64_MAX;
		lv[up] = l;
		lc[up] = padded;
		up++;
		below = l;
		nb = padded;
	}
	levels = up;
	for (int i = 0; i < levels; i++) {
		level[i] = lv[levels - 1 - i];
		count[i] = lc[levels - 1 - i];
	}
	(void)count;
	uint64_t sum = 0, r = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1, found = 0;
	long warm = lookups / 10 < 100000 ? lookups / 10 : 100000;
	int timed = extra_ns >= 0;
	uint64_t threshold = 0, misses = 0, level_misses[MAX_LEVELS] = {0};
	uint64_t band_ticks[NBANDS - 1], level_hist[MAX_LEVELS][NBANDS];
	memset(level_hist, 0, sizeof level_hist);
	double per_ns = timed || gap_ns > 0 ? cw_tsc_per_ns() : 1.0;
	uint64_t gap_ticks = (uint64_t)((double)gap_ns * per_ns);
	lat_band_ticks(band_ticks, per_ns);
	if (timed) {
		cw_init(extra_ns);
		threshold = (uint64_t)((double)threshold_ns * per_ns);
	}
	int64_t owed = 0;
	uint64_t t0 = 0;
	for (long q = -warm; q < lookups; q++) {
		if (q == 0) {
			misses = 0;
			for (int l = 0; l < levels; l++)
				level_misses[l] = 0;
			memset(level_hist, 0, sizeof level_hist);
			t0 = now_ns();
		}
		if (gap_ticks)
			spin_ticks(gap_ticks);
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t pick = dependent ? (r >> 17) ^ found : r >> 17;
		uint64_t key = 2 * (pick % n) + 1;
		uint64_t node = 0;
		for (int l = 0; l < levels; l++) {
			const uint64_t *k = level[l] + node * b;
			uint64_t j = 0, first;
			if (timed) {
				uint64_t took = timed_load(&k[0], &first);
				if (hist) {
					level_hist[l][lat_band(took, band_ticks)]++;
				}
				if (took > threshold) {
					misses++;
					level_misses[l]++;
					cw_pay(&owed, 1);
				}
				(void)first; /* k[0] is never above `key` */
			}
			/* the last key of the node not above `key` */
			for (uint64_t x = 1; x < b; x++)
				j += k[x] <= key;
			if (l == levels - 1) {
				sum += k[j] == key;
				found = k[j];
				break;
			}
			node = node * b + j;
		}
	}
	uint64_t t1 = now_ns();
	if (sum != (uint64_t)(lookups + warm)) {
		fprintf(stderr, "bptree: %llu of %ld lookups found their key\n",
				(unsigned long long)sum, lookups + warm);
		return 1;
	}
	printf("bptree: region=%llu keys=%llu fanout=%ld levels=%d lookups=%ld "
			"elapsed_ns=%llu ns_per_lookup=%.2f",
			(unsigned long long)(n * sizeof(uint64_t)), (unsigned long long)n,
			fanout, levels, lookups, (unsigned long long)(t1 - t0),
			(double)(t1 - t0) / (double)lookups);
	if (timed) {
		printf(" dependent=%d extra_ns=%ld threshold_ns=%ld misses_per_lookup=%.3f "
				"level_misses=", dependent, extra_ns, threshold_ns,
				(double)misses / (double)lookups);
		for (int l = 0; l < levels; l++)
			printf("%s%.3f", l ? "/" : "", (double)level_misses[l] / (double)lookups);
	}
	printf(" pages=%s gap_ns=%ld thp_kib=%ld\n", small_pages ? "4k" : "2m", gap_ns, thp_kib());
	if (timed && hist)
		print_lat_hist("bptree", "level", levels, (const uint64_t (*)[NBANDS])level_hist, lookups);
	return 0;
}
