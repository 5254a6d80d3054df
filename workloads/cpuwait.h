/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * cpuwait.h -- the CPU-holding wait behind the workloads' -x option
 * (mtlat.c, multilat.c): a native run that waits EXTRA_NS of the thread's
 * own time per access it makes, as a thread stalled on slower memory keeps
 * its CPU, so that it has the schedule the program would have if every
 * such access cost EXTRA_NS more, without any emulator. pmlab validate
 * uses it as a measured reference.
 *
 * The wait is on the TSC, calibrated against CLOCK_MONOTONIC once
 * (cw_init); a gap of over 1 us between two TSC reads in which the thread
 * was switched out lengthens the wait instead of counting in it (other
 * gaps, interrupts, count, as they would during a stall); what a wait
 * overshoots is taken off the next one.
 *
 * A wait costs two TSC reads, an lfence and its loop, a few ns: the
 * context-switch count (a getrusage system call, 300-500 ns on a VM) is
 * read at a thread's first wait and then only when a gap is seen, against
 * the count at its last gap, never per wait. Reading it at the start of
 * every wait added that system call to each wait: idxchase -x, which
 * waits after every load, read 631 ns per load at 300 ns (native 161 +
 * 140 of wait). A switch between two waits is then taken for one in the
 * next wait's gap, if that wait sees a gap: the gap is not counted, which
 * errs the way of a wait too long by one gap at most.
 *
 * Header-only, for one translation unit per program. bench/spin_gaps.c
 * uses its TSC calibration and context-switch count too.
 */
#ifndef PMLAB_CPUWAIT_H
#define PMLAB_CPUWAIT_H

#include <stdint.h>
#include <sys/resource.h>
#include <time.h>
#include <x86intrin.h>

static uint64_t cw_extra_ticks; /* per access, in TSC ticks; 0: no wait */
static uint64_t cw_gap_ticks; /* a longer gap may be time off the CPU: 1 us */
/* the calling thread's context switches at its first wait or last gap; -1:
 * not read yet */
static __thread long cw_switches_seen = -1;

/* cw_now_ns -- CLOCK_MONOTONIC in ns */
static inline uint64_t cw_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* cw_clock_tsc -- a (clock, TSC) pair read close together: retried until
 * the two TSC reads around the clock read are near, so that a preemption
 * between them cannot skew the calibration */
static inline void cw_clock_tsc(uint64_t *c, uint64_t *r)
{
	for (;;) {
		uint64_t a = __rdtsc(), t = cw_now_ns(), b = __rdtsc();
		if (b - a < 100000) {
			*c = t;
			*r = a + (b - a) / 2;
			return;
		}
	}
}

/* cw_tsc_per_ns -- TSC ticks per ns, from 20 ms of CLOCK_MONOTONIC */
static inline double cw_tsc_per_ns(void)
{
	uint64_t c0, r0, c1, r1;
	cw_clock_tsc(&c0, &r0);
	do
		cw_clock_tsc(&c1, &r1);
	while (c1 - c0 < 20000000);
	return (double)(r1 - r0) / (double)(c1 - c0);
}

/* cw_init -- wait extra_ns per access from now on (0: never wait);
 * calibrates the TSC (cw_tsc_per_ns) when extra_ns > 0 */
static inline void cw_init(long extra_ns)
{
	if (extra_ns <= 0)
		return;
	double per_ns = cw_tsc_per_ns();
	cw_extra_ticks = (uint64_t)((double)extra_ns * per_ns);
	cw_gap_ticks = (uint64_t)(1000.0 * per_ns);
}

/* cw_switches -- context switches of the calling thread so far */
static inline long cw_switches(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return 0;
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* cw_pay -- hold the CPU for `accesses` x the extra time more of the
 * thread's own time, less what earlier waits overshot (`*owed`, one per
 * thread, starting at 0, carries it). The lfence first: the wait starts
 * when the last access's load has returned, as a stall would. */
static inline void cw_pay(int64_t *owed, long accesses)
{
	if (cw_extra_ticks == 0 || accesses == 0)
		return;
	_mm_lfence();
	if (cw_switches_seen < 0)
		cw_switches_seen = cw_switches();
	*owed += (int64_t)cw_extra_ticks * accesses;
	uint64_t prev = __rdtsc(), now;
	int64_t done = 0;
	while (done < *owed) {
		now = __rdtsc();
		uint64_t d = now - prev;
		prev = now;
		if (d > cw_gap_ticks) {
			long s = cw_switches();
			if (s != cw_switches_seen) {
				cw_switches_seen = s;
				continue;
			}
		}
		done += (int64_t)d;
	}
	*owed -= done;
}

#endif /* PMLAB_CPUWAIT_H */
