/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * timedload.h -- what the lookup workloads (hashprobe.c, bptree.c,
 * skiplist.c, survive.c) share to count their misses natively: a load
 * timed on the TSC (timed_load), the latency bands of their -H
 * histograms (LAT_BANDS, lat_band, print_lat_hist), the huge pages the process holds (thp_kib), a
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

/* band_ticks[i]: LAT_BANDS[i] in TSC ticks, at per_ns ticks a ns. */
static inline void lat_band_ticks(uint64_t band_ticks[NBANDS - 1], double per_ns)
{
	for (size_t i = 0; i + 1 < NBANDS; i++)
		band_ticks[i] = (uint64_t)(LAT_BANDS[i] * per_ns);
}

/* The band of a load that took `took` ticks (0 to NBANDS - 1). */
static inline size_t lat_band(uint64_t took, const uint64_t band_ticks[NBANDS - 1])
{
	size_t band = 0;
	while (band + 1 < NBANDS && took >= band_ticks[band])
		band++;
	return band;
}

/* The -H line: "PROG: hist_ns=<30/30-60/.../>250 ROW0=a/b/... ROW1=...",
 * each row's counts per band over `lookups`. */
static inline void print_lat_hist(const char *prog, const char *row, int rows,
		const uint64_t (*hist)[NBANDS], long lookups)
{
	printf("%s: hist_ns=<%.0f", prog, LAT_BANDS[0]);
	for (size_t i = 1; i + 1 < NBANDS; i++)
		printf("/%.0f-%.0f", LAT_BANDS[i - 1], LAT_BANDS[i]);
	printf("/>%.0f", LAT_BANDS[NBANDS - 2]);
	for (int l = 0; l < rows; l++) {
		printf(" %s%d=", row, l);
		for (size_t i = 0; i < NBANDS; i++)
			printf("%s%.3f", i ? "/" : "", (double)hist[l][i] / (double)lookups);
	}
	printf("\n");
}

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
