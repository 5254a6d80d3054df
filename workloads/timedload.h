/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * timedload.h -- what the lookup workloads (hashprobe.c, bptree.c,
 * skiplist.c, survive.c) share to count their misses natively: a load
 * timed on the TSC (timed_load), the latency bands of their -H
 * histograms (LAT_BANDS), the huge pages the process holds (thp_kib), a
 * spin of some TSC ticks between lookups (spin_ticks) and a small LCG
 * (rng).
 *
 * Header-only, for one translation unit per program (beside cpuwait.h,
 * which calibrates the TSC).
 */
#ifndef PMLAB_TIMEDLOAD_H
#define PMLAB_TIMEDLOAD_H

#include <stdint.h>
#include <stdio.h>
#include <x86intrin.h>

/* The histogram's band edges, ns: below 30 an L1/L2 hit (the timing adds
 * ~20), 30-60 an LLC hit, 60-90 and 90-130 a TLB miss with an LLC hit or
 * a fast DRAM access, 130-250 DRAM, above 250 DRAM plus a page walk or an
 * interruption. */
static const double LAT_BANDS[] = {30, 60, 90, 130, 250};
#define NBANDS (sizeof(LAT_BANDS) / sizeof(LAT_BANDS[0]) + 1)

/* The TSC ticks a load of *p took, from before it issued to after it
 * returned; its value in *v. */
static inline uint64_t timed_load(const uint64_t *p, uint64_t *v)
{
	unsigned aux;
	_mm_lfence();
	uint64_t a = __rdtsc();
	_mm_lfence();
	*v = *(const volatile uint64_t *)p;
	uint64_t b = __rdtscp(&aux);
	_mm_lfence();
	return b - a;
}

/* AnonHugePages of this process, KiB (-1 if unreadable). */
static inline long thp_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = -1;
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* Spin `ticks` TSC ticks. */
static inline void spin_ticks(uint64_t ticks)
{
	uint64_t end = __rdtsc() + ticks;
	while (__rdtsc() < end)
		_mm_pause();
}

/* The next number of a 64-bit LCG whose state is *r (its high bits). */
static inline uint64_t rng(uint64_t *r)
{
	*r = *r * 6364136223846793005ull + 1442695040888963407ull;
	return *r >> 17;
}

#endif
