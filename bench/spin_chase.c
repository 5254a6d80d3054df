/* spin_chase.c -- why bench/synthetic-delay.sh chases a region larger than
 * the LLC: builds a random chain over REGION_MIB, optionally spins SPIN_MS
 * on the clock (as an injected delay would), then times 100,000 steps of the
 * chain (huge pages, as memlat). On a shared host the caches go cold
 * during the spin.
 * With ROUNDS, STEPS and SPIN_US (bench/spin-interleave.sh), it then runs
 * ROUNDS times STEPS steps of the chain followed by a SPIN_US spin, as a
 * chase under an emulator that injects its delay between stretches of the
 * program, and prints the time per step of the chase alone (the spins are
 * not timed): on ideal hardware it does not depend on SPIN_US. With
 * "sleep" after SPIN_US the pause is a nanosleep instead of a spin.
 * Usage: spin_chase SPIN_MS REGION_MIB [ROUNDS STEPS SPIN_US [sleep]];
 * prints "spin_ms=.. chase_ms=.." and, with ROUNDS, "ns_per_step=..". */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 6 && !(argc == 7 && strcmp(argv[6], "sleep") == 0)) {
		fprintf(stderr, "usage: spin_chase SPIN_MS REGION_MIB [ROUNDS STEPS SPIN_US [sleep]]\n");
		return 2;
	}
	int sleeping = argc == 7;
	long spin = atol(argv[1]), mib = atol(argv[2]);
	long rounds = argc >= 6 ? atol(argv[3]) : 0, steps = argc >= 6 ? atol(argv[4]) : 0;
	long spin_us = argc >= 6 ? atol(argv[5]) : 0;
	if (argc >= 6 && (rounds < 1 || steps < 1 || spin_us < 0)) {
		fprintf(stderr, "spin_chase: ROUNDS and STEPS must be positive, SPIN_US at least 0\n");
		return 2;
	}
	size_t n = ((size_t)mib << 20) / 64;
	/* 2 MiB-aligned with transparent huge pages, as memlat's region. */
	uint64_t *a = aligned_alloc(2 << 20, ((n * 64) + (2 << 20) - 1) & ~(size_t)((2 << 20) - 1));
	if (a)
		madvise(a, n * 64, MADV_HUGEPAGE);
	size_t *perm = malloc(n * sizeof *perm);
	if (!a || !perm || n < 2) {
		fprintf(stderr, "spin_chase: cannot allocate %ld MiB\n", mib);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	uint64_t s = 88172645463325252ull;
	for (size_t i = n - 1; i > 0; i--) {
		s ^= s << 13; s ^= s >> 7; s ^= s << 17;
		size_t j = s % (i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (size_t i = 0; i < n; i++)
		a[perm[i] * 8] = perm[(i + 1) % n] * 8;
	if (spin > 0) {
		uint64_t end = now_ns() + (uint64_t)spin * 1000000ull;
		while (now_ns() < end)
			__builtin_ia32_pause();
	}
	uint64_t t0 = now_ns();
	size_t p = 0;
	for (int i = 0; i < 100000; i++)
		p = a[p];
	uint64_t t1 = now_ns();
	printf("spin_ms=%ld region_mib=%ld chase_ms=%.2f sink=%zu\n", spin, mib,
			(double)(t1 - t0) / 1e6, p & 1);
	if (rounds > 0) {
		uint64_t chase = 0;
		for (long r = 0; r < rounds; r++) {
			uint64_t c0 = now_ns();
			for (long i = 0; i < steps; i++)
				p = a[p];
			uint64_t c1 = now_ns();
			chase += c1 - c0;
			if (sleeping && spin_us > 0) {
				struct timespec ts = {spin_us / 1000000, (spin_us % 1000000) * 1000};
				nanosleep(&ts, NULL);
				continue;
			}
			uint64_t end = c1 + (uint64_t)spin_us * 1000ull;
			while (spin_us > 0 && now_ns() < end)
				__builtin_ia32_pause();
		}
		printf("rounds=%ld steps=%ld %s_us=%ld ns_per_step=%.2f sink=%zu\n", rounds, steps,
				sleeping ? "sleep" : "spin", spin_us, (double)chase / (double)(rounds * steps), p & 1);
	}
	return 0;
}
