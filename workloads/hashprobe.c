/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hashprobe.c -- random lookups in an open-addressing hash table (pmlab
 * workload, issue 16)
 *
 * A table of 16-byte slots (key, value) with linear probing, filled to half
 * its capacity with pseudo-random keys, then probed with lookups of keys
 * drawn at random from those inserted. Each lookup's slot comes from a
 * hash of a key that does not depend on the previous lookup, so the
 * lookups are independent and their misses overlap (the out-of-order core
 * keeps several in flight). Plain C, no pmlab API.
 *
 * With -d each lookup's key is picked with the value the previous lookup
 * found: the same work with every lookup's misses behind the previous
 * one's (no overlap between lookups), to measure the overlap natively.
 *
 * With -i N the lookups go N at a time: the N slots' first keys are loaded
 * one after another before any of them is compared, so no branch on a
 * missed key separates their misses (they overlap natively, up to the
 * fill buffers), then each lookup finishes its probe as usual. lookups/s
 * with -i 1 against -i N shows what the compare-and-branch after each
 * miss costs in overlap on this machine.
 *
 * With -w KEYS every lookup is of one of KEYS keys spread evenly over the
 * insertion order (key i x (keys / KEYS)): the same table, the same code
 * and the same probe lengths, with few enough lines touched (KEYS <= 4096:
 * 256 KiB) that they stay in the core's own caches after the warm-up. Its
 * time per lookup is the lookups' compute without memory waits (pmlab
 * validate's in-cache reference: a small table instead would hit the LLC
 * rather than L2 once it outgrows L2, and its TLB reach differs).
 *
 * With -x EXTRA_NS every key load of a probe is timed (lfence, TSC, the
 * load, rdtscp: the load has returned) and counted as a miss when it took
 * more than -t THRESHOLD_NS [90: between an LLC hit and a DRAM access
 * here]; after each such miss the thread holds the CPU EXTRA_NS more of
 * its own time (cpuwait.h). With EXTRA_NS = L - DRAM latency, the lookups
 * as they would run if every load that misses natively cost L, without
 * any emulator; the misses per lookup are printed. The timing costs its
 * own time: -x 0 (timed, no wait) is the baseline the waits are measured
 * against (pmlab validate's reference takes the difference). A wait per
 * lookup instead (as before) also waited after the lookups whose line the
 * LLC held (4-6% of them in a 256 MiB table here) and paid its lfence on
 * top: 14-31 ns a lookup above native + (L - DRAM).
 *
 * Prints one line:
 *
 *   hashprobe: region=... slots=... keys=... dependent=0 lookups=...
 *              elapsed_ns=... ns_per_lookup=... probes_per_lookup=...
 *              [threshold_ns=... misses_per_lookup=...]
 *
 * Usage: hashprobe [-r TABLE_MIB] [-n LOOKUPS] [-d] [-i N] [-w KEYS] [-s SEED]
 *                  [-x EXTRA_NS] [-t THRESHOLD_NS]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpuwait.h"
#include "timedload.h"
#include "args.h"

struct slot {
	uint64_t key; /* 0: empty */
	uint64_t val;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A 64-bit mixer (a bijection). */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* The i-th inserted key (never 0). */
static uint64_t key_of(uint64_t i, uint64_t seed)
{
	return mix(i ^ seed) | 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: hashprobe [-r TABLE_MIB, a power of two] "
			"[-n LOOKUPS] [-d] [-i N 1-16] [-w HOT_KEYS] [-s SEED] "
			"[-x EXTRA_NS 0-1000000] [-t THRESHOLD_NS 1-100000]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long region_mib = 128, lookups = 2000000, seed = 7, extra_ns = -1, hot = 0;
	long threshold_ns = 90;
	int dependent = 0, opt;
	long inter = 1;
	while ((opt = getopt(argc, argv, "r:n:di:w:s:x:t:")) != -1) {
		switch (opt) {
		case 'r': region_mib = wl_arg_long("hashprobe", opt, optarg, 1, 1 << 20); break;
		case 'n': lookups = wl_arg_long("hashprobe", opt, optarg, 1, 1L << 40); break;
		case 'd': dependent = 1; break;
		case 'i': inter = wl_arg_long("hashprobe", opt, optarg, 1, 16); break;
		case 'w': hot = wl_arg_long("hashprobe", opt, optarg, 1, 1L << 40); break;
		case 's': seed = wl_arg_long("hashprobe", opt, optarg, 0, 1L << 40); break;
		case 'x': extra_ns = wl_arg_long("hashprobe", opt, optarg, 0, 1000000); break;
		case 't': threshold_ns = wl_arg_long("hashprobe", opt, optarg, 1, 100000); break;
		default: usage();
		}
	}
	if (region_mib & (region_mib - 1)) {
		fprintf(stderr, "hashprobe: -r %ld: the table size must be a power of "
				"two (MiB)\n", region_mib);
		return 2;
	}
	int timed = extra_ns >= 0;
	if (timed && inter > 1) {
		fprintf(stderr, "hashprobe: -x times each lookup's loads: use it with -i 1\n");
		return 2;
	}
	size_t bytes = (size_t)region_mib << 20;
	uint64_t slots = bytes / sizeof(struct slot), mask = slots - 1;
	uint64_t keys = slots / 2;
	if ((uint64_t)hot > keys) {
		fprintf(stderr, "hashprobe: -w %ld: the table holds %llu keys: use "
				"fewer hot keys or a larger -r\n", hot, (unsigned long long)keys);
		return 2;
	}
	/* Lookups draw from `draw` keys, `spread` apart in insertion order. */
	uint64_t draw = hot ? (uint64_t)hot : keys, spread = keys / draw;
	struct slot *t = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED) {
		fprintf(stderr, "hashprobe: cannot map %ld MiB: try a smaller -r\n",
				region_mib);
		return 1;
	}
	madvise(t, bytes, MADV_HUGEPAGE);
	for (uint64_t i = 0; i < keys; i++) {
		uint64_t k = key_of(i, (uint64_t)seed);
		uint64_t h = mix(k * 31) & mask;
		while (t[h].key != 0)
			h = (h + 1) & mask;
		t[h].key = k;
		t[h].val = i;
	}
	/* Warm up (TLB, page faults), then time. */
	uint64_t sum = 0, probes = 0, r = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
	long warm = lookups / 10 < 100000 ? lookups / 10 : 100000;
	uint64_t t0 = 0, threshold = 0, misses = 0;
	int64_t owed = 0;
	if (timed) {
		cw_init(extra_ns);
		threshold = (uint64_t)((double)threshold_ns * cw_tsc_per_ns());
	}
	for (long n = -warm; n < lookups; n += inter) {
		if (n <= 0 && n + inter > 0) {
			probes = misses = 0;
			t0 = now_ns();
		}
		uint64_t k[16], h[16], first[16];
		for (long j = 0; j < inter; j++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			uint64_t pick = dependent ? (r >> 17) ^ sum : r >> 17;
			k[j] = key_of(pick % draw * spread, (uint64_t)seed);
			h[j] = mix(k[j] * 31) & mask;
			if (inter > 1)
				first[j] = t[h[j]].key; /* no branch between these misses */
		}
		for (long j = 0; j < inter; j++) {
			uint64_t hj = h[j], key;
			if (inter > 1)
				key = first[j];
			else if (timed && timed_load(&t[hj].key, &key) > threshold) {
				misses++;
				if (n >= 0)
					cw_pay(&owed, 1);
			} else if (!timed)
				key = t[hj].key;
			for (;;) {
				probes++;
				if (key == k[j]) {
					sum += t[hj].val;
					break;
				}
				if (key == 0)
					break;
				hj = (hj + 1) & mask;
				if (timed && timed_load(&t[hj].key, &key) > threshold) {
					misses++;
					if (n >= 0)
						cw_pay(&owed, 1);
				} else if (!timed)
					key = t[hj].key;
			}
		}
	}
	uint64_t t1 = now_ns();
	lookups = (lookups + inter - 1) / inter * inter;
	printf("hashprobe: region=%zu slots=%llu keys=%llu dependent=%d interleave=%ld hot=%ld "
			"extra_ns=%ld lookups=%ld elapsed_ns=%llu ns_per_lookup=%.2f probes_per_lookup=%.3f "
			"sink=%llu",
			bytes, (unsigned long long)slots, (unsigned long long)keys,
			dependent, inter, hot, extra_ns, lookups, (unsigned long long)(t1 - t0),
			(double)(t1 - t0) / (double)lookups,
			(double)probes / (double)lookups, (unsigned long long)(sum & 1));
	if (timed)
		printf(" threshold_ns=%ld misses_per_lookup=%.3f", threshold_ns,
				(double)misses / (double)lookups);
	printf("\n");
	return 0;
}
