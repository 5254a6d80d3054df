/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * skiplist.c -- lookups in a skip list (pmlab workload, issue 16)
 *
 * A skip list of 64-byte nodes (a key and up to 7 forward pointers), the
 * nodes placed in a random order in one region, each node's height drawn
 * with p = 1/8 (so 7 levels cover 2^21 nodes, 128 MiB, at about 4 nodes
 * a level). A lookup starts at the head's top level and, level by level,
 * follows forward pointers while the next node's key is below the one
 * looked for: a short chain of dependent misses (each node's address is
 * the pointer the previous one held, and whether to follow it is a branch
 * on the key just loaded), with compares between. Lookups are of random
 * present keys and independent of each other. Plain C, no pmlab API; a
 * held-out check of the estimator (B+-tree's children are found by
 * position, these by pointer and by an unpredictable branch).
 *
 * With -d each lookup's key is picked with the key the previous lookup
 * found (no overlap between lookups). With -x EXTRA_NS every node's key
 * load is timed and counted as a miss past -t THRESHOLD_NS [90], and the
 * thread holds the CPU EXTRA_NS after each miss (cpuwait.h): the lookups
 * as they would run if every load that misses natively cost EXTRA_NS more;
 * -x 0 is the timed baseline (see bptree.c); lane_misses gives the misses
 * per lookup by lane, top lane first.
 *
 * Diagnostics (as bptree.c's): -P 4k maps the nodes with MADV_NOHUGEPAGE
 * instead of MADV_HUGEPAGE; -g GAP_NS spins between lookups; -H (with -x)
 * prints the timed loads' latency histogram per lane, per lookup, on a
 * second line; thp_kib is the process's AnonHugePages at the end.
 *
 * Prints one line:
 *
 *   skiplist: region=... nodes=... height=... lookups=... elapsed_ns=...
 *             ns_per_lookup=... nodes_per_lookup=... [dependent=...
 *             extra_ns=... threshold_ns=... misses_per_lookup=...
 *             lane_misses=...] pages=2m|4k gap_ns=... thp_kib=...
 *
 * Usage: skiplist [-r MIB] [-n LOOKUPS] [-s SEED] [-d] [-x EXTRA_NS]
 *                 [-t THRESHOLD_NS] [-P 2m|4k] [-g GAP_NS] [-H]
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

#define HEIGHT 7

struct node {
	uint64_t key;
	struct node *next[HEIGHT];
};

static void usage(void)
{
	fprintf(stderr, "usage: skiplist [-r MIB] [-n LOOKUPS] [-s SEED] [-d] "
			"[-x EXTRA_NS 0-1000000] [-t THRESHOLD_NS 1-100000] [-P 2m|4k] "
			"[-g GAP_NS 0-1000000] [-H]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long region_mib = 128, lookups = 1000000, seed = 5, extra_ns = -1, threshold_ns = 90;
	long gap_ns = 0;
	int opt, dependent = 0, hist = 0, small_pages = 0;
	while ((opt = getopt(argc, argv, "r:n:s:dx:t:P:g:H")) != -1) {
		switch (opt) {
		case 'r': region_mib = wl_arg_long("skiplist", opt, optarg, 1, 1 << 20); break;
		case 'n': lookups = wl_arg_long("skiplist", opt, optarg, 1, 1L << 40); break;
		case 's': seed = wl_arg_long("skiplist", opt, optarg, 0, 1L << 40); break;
		case 'd': dependent = 1; break;
		case 'x': extra_ns = wl_arg_long("skiplist", opt, optarg, 0, 1000000); break;
		case 't': threshold_ns = wl_arg_long("skiplist", opt, optarg, 1, 100000); break;
		case 'P':
			if (strcmp(optarg, "4k") == 0)
				small_pages = 1;
			else if (strcmp(optarg, "2m") != 0)
				usage();
			break;
		case 'g': gap_ns = wl_arg_long("skiplist", opt, optarg, 0, 1000000); break;
		case 'H': hist = 1; break;
		default: usage();
		}
	}
	size_t bytes = (size_t)region_mib << 20;
	uint64_t n = bytes / sizeof(struct node);
	struct node *pool = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t *slot = malloc(n * sizeof(uint32_t));
	if (pool == MAP_FAILED || slot == NULL) {
		fprintf(stderr, "skiplist: cannot map %ld MiB: try a smaller -r\n", region_mib);
		return 1;
	}
	madvise(pool, bytes, small_pages ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
	/* Node i of the list (key 2i + 1) lives at pool[slot[i]]: a random
	 * permutation. */
	uint64_t r = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
	for (uint64_t i = 0; i < n; i++)
		slot[i] = (uint32_t)i;
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = rng(&r) % (i + 1);
		uint32_t t = slot[i];
		slot[i] = slot[j];
		slot[j] = t;
	}
	/* Linked back to front: last[l] is the nearest node after i of height
	 * above l. */
	struct node head = {0, {NULL}};
	struct node *last[HEIGHT] = {NULL};
	int top = 0;
	for (uint64_t i = n; i-- > 0;) {
		struct node *x = &pool[slot[i]];
		int h = 1;
		while (h < HEIGHT && rng(&r) % 8 == 0)
			h++;
		x->key = 2 * i + 1;
		for (int l = 0; l < HEIGHT; l++) {
			x->next[l] = l < h ? last[l] : NULL;
			if (l < h)
				last[l] = x;
		}
		if (h > top)
			top = h;
	}
	for (int l = 0; l < HEIGHT; l++)
		head.next[l] = last[l];
	free(slot);
	int timed = extra_ns >= 0;
	uint64_t threshold = 0, misses = 0, visits = 0, sum = 0, found = 0;
	uint64_t lane_misses[HEIGHT] = {0}, lane_hist[HEIGHT][NBANDS], band_ticks[NBANDS - 1];
	memset(lane_hist, 0, sizeof lane_hist);
	double per_ns = timed || gap_ns > 0 ? cw_tsc_per_ns() : 1.0;
	uint64_t gap_ticks = (uint64_t)((double)gap_ns * per_ns);
	lat_band_ticks(band_ticks, per_ns);
	if (timed) {
		cw_init(extra_ns);
		threshold = (uint64_t)((double)threshold_ns * per_ns);
	}
	int64_t owed = 0;
	long warm = lookups / 10 < 100000 ? lookups / 10 : 100000;
	uint64_t t0 = 0;
	for (long q = -warm; q < lookups; q++) {
		if (q == 0) {
			misses = visits = 0;
			memset(lane_misses, 0, sizeof lane_misses);
			memset(lane_hist, 0, sizeof lane_hist);
			t0 = cw_now_ns();
		}
		if (gap_ticks)
			spin_ticks(gap_ticks);
		uint64_t pick = dependent ? rng(&r) ^ found : rng(&r);
		uint64_t key = 2 * (pick % n) + 1;
		struct node *x = &head;
		for (int l = top - 1; l >= 0; l--) {
			for (;;) {
				struct node *nx = x->next[l];
				if (nx == NULL)
					break;
				uint64_t k;
				visits++;
				if (timed) {
					uint64_t took = timed_load(&nx->key, &k);
					if (hist) {
						lane_hist[top - 1 - l][lat_band(took, band_ticks)]++;
					}
					if (took > threshold) {
						misses++;
						lane_misses[top - 1 - l]++;
						if (q >= 0)
							cw_pay(&owed, 1);
					}
				} else {
					k = nx->key;
				}
				if (k > key)
					break;
				x = nx;
				if (k == key)
					goto done;
			}
		}
	done:
		sum += x->key == key;
		found = x->key;
	}
	uint64_t t1 = cw_now_ns();
	if (sum != (uint64_t)(lookups + warm)) {
		fprintf(stderr, "skiplist: %llu of %ld lookups found their key\n",
				(unsigned long long)sum, lookups + warm);
		return 1;
	}
	printf("skiplist: region=%zu nodes=%llu height=%d lookups=%ld elapsed_ns=%llu "
			"ns_per_lookup=%.2f nodes_per_lookup=%.3f",
			bytes, (unsigned long long)n, top, lookups, (unsigned long long)(t1 - t0),
			(double)(t1 - t0) / (double)lookups, (double)visits / (double)lookups);
	if (timed) {
		printf(" dependent=%d extra_ns=%ld threshold_ns=%ld misses_per_lookup=%.3f "
				"lane_misses=", dependent, extra_ns, threshold_ns,
				(double)misses / (double)lookups);
		for (int l = 0; l < top; l++)
			printf("%s%.3f", l ? "/" : "", (double)lane_misses[l] / (double)lookups);
	}
	printf(" pages=%s gap_ns=%ld thp_kib=%ld\n", small_pages ? "4k" : "2m", gap_ns, thp_kib());
	if (timed && hist)
		print_lat_hist("skiplist", "lane", top, (const uint64_t (*)[NBANDS])lane_hist, lookups);
	return 0;
}
