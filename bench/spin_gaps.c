/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * spin_gaps.c -- what interrupts a TSC spin (bench/spin-gaps.sh)
 *
 * Spins on the TSC for SECONDS (default 2) and sorts every gap of more
 * than 1 us between two reads into bands by length, apart for gaps in
 * which the thread was switched out (its context-switch count,
 * getrusage(RUSAGE_THREAD), moved) and gaps in which it was not
 * (interrupts, the hypervisor). pmlab's delay spin counts the second kind
 * as delay and not the first. Prints a line per band and kind:
 *
 *   gaps: band_us=10..50 switched=0 count=702 total_ms=12.833
 *
 * and a last line with the spin's length and the TSC rate used.
 *
 * Usage: spin_gaps [SECONDS]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../workloads/cpuwait.h"

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	if (!(seconds > 0.0 && seconds <= 600.0)) {
		fprintf(stderr, "spin_gaps: SECONDS=%s: a number in (0, 600]\n", argv[1]);
		return 2;
	}
	static const double edge_us[] = { 1, 2, 5, 10, 50, 200, 1000, 1e15 };
	enum { BANDS = sizeof edge_us / sizeof edge_us[0] - 1 };
	uint64_t count[BANDS][2] = { { 0 } }, ticks[BANDS][2] = { { 0 } };
	double per_ns = cw_tsc_per_ns();
	uint64_t want = (uint64_t)(seconds * 1e9 * per_ns), gap = (uint64_t)(1000.0 * per_ns);
	long sw = cw_switches();
	uint64_t start = __rdtsc(), prev = start, now;
	while ((now = __rdtsc()) - start < want) {
		uint64_t d = now - prev;
		prev = now;
		if (d <= gap)
			continue;
		long s = cw_switches();
		int out = s != sw;
		sw = s;
		double us = (double)d / per_ns / 1000.0;
		int k = 0;
		while (k + 1 < BANDS && us > edge_us[k + 1])
			k++;
		count[k][out]++;
		ticks[k][out] += d;
		prev = __rdtsc(); /* the system call is not part of the next gap */
	}
	for (int k = 0; k < BANDS; k++)
		for (int out = 0; out < 2; out++)
			if (count[k][out])
				printf("gaps: band_us=%g..%g switched=%d count=%lu total_ms=%.3f\n",
				       edge_us[k], edge_us[k + 1], out, (unsigned long)count[k][out],
				       (double)ticks[k][out] / per_ns / 1e6);
	printf("spin: seconds=%g tsc_per_ns=%.4f\n", seconds, per_ns);
	return 0;
}
