/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * lenschase.c -- LENS's pointer-chasing and overwrite probes as a program
 * (pmlab workload; `pmlab validate --device`, docs/validation.md)
 *
 * Chase mode (default): the region is cut into blocks of -b bytes, visited
 * in a random order (seeded); inside a block every 64 B line is visited in
 * address order. Each line holds the address of the next line to visit, so
 * every load depends on the one before, as in LENS's pointer chasing and
 * in `pmlab probe ptrchase` (whose simulator target reads a block's lines
 * one after the other, in order). Before every pass the whole region is
 * flushed with pflush() (pmlab.h), so that every line of the pass misses
 * the CPU caches, as LENS's probes ensure; the runtime sees the flushes.
 * One untimed pass, then passes until at least -n lines were visited.
 * Prints one line:
 *
 *   lenschase: mode=chase region=... block=... lines=... passes=...
 *              elapsed_ns=... ns_per_line=... chase_ns_per_line=...
 *              clock=wall|cpu huge_pct=... flush=...
 *
 * elapsed_ns covers the timed passes with their flushes: the flushes cost
 * the same with and without emulation, so the difference between an
 * emulated run and a native one is the delay injected per line.
 * chase_ns_per_line is the chase alone (the flushes' time left out): in a
 * native run, what one access costs on this machine. Under emulation
 * (pmlab_emulating()) the lines are flushed with libpmlab's pflush, so
 * that the runtime sees the flushes; otherwise, linked with libpmlab or
 * not, with clflushopt where the CPU has it (else clflush), the evicting
 * instruction libpmlab's pflush uses under pmlab run --device (outside it
 * libpmlab's pflush uses clwb, which on AMD's Zen leaves the line cached:
 * a native chase over 4-16 KiB then read the CPU's caches, 13-28 ns per
 * line, against 136-153 evicted). flush= names the one used (pflush,
 * clflushopt, clflush, or none with -F).
 *
 * The region is mapped on 2 MiB boundaries and advised to transparent
 * huge pages (madvise; -H asks for 4 KiB pages instead), so that the
 * chase's TLB misses stay few, as in LENS (whose TLB miss rate is flat
 * over its regions) and as in the simulator, which has no TLB: over
 * 256 MiB to 1 GiB in 4 KiB pages a native chase costs 1.6-1.8 times as
 * much per line (page walks). Where the kernel grants none (THP "never",
 * no contiguous memory), the chase runs on 4 KiB pages; huge_pct= says
 * what share of the region is on huge pages.
 *
 * Overwrite mode (-o ITERATIONS): one 256 B block is written (4 lines),
 * flushed and fenced ITERATIONS times, each iteration timed on its own
 * (LENS's overwrite probe). Prints the iterations slower than 10x the
 * median and than 20 us (a wear-leveling stall is ~50 us; the floor keeps
 * a busy machine's shorter hiccups out), and their period: the distance
 * between two slow iterations that the most slow iterations repeat (see
 * tail_period; stray slow iterations, a preemption or an emulator's
 * hiccup, rarely repeat one, where the median distance would halve at
 * each of them):
 *
 *   lenschase: mode=overwrite iterations=... median_ns=... tails=...
 *              tail_period=... tail_ns=... slow_at=I,J,...
 *
 * slow_at lists the first 4096 slow iterations as ITERATION:NS (pmlab
 * validate --device keeps those as long as a wear-leveling stall before
 * it applies the same rule, tested there).
 *
 * -F skips the flushes (regions far larger than the last-level cache miss
 * it anyway; flushing them costs more than the chase).
 *
 * -c times the chase's passes on the thread's CPU clock instead of the
 * monotonic one: time the thread spent switched out (another task on its
 * CPU) is not memory latency (pmlab's calibration times its chase the
 * same way; an emulated run also needs a CPU for the emulator's modeller
 * thread, which on a small machine leaves the program none to spare).
 * A delay the emulator injects is spun on the thread's CPU and counts.
 *
 * Usage: lenschase [-r REGION_BYTES] [-b BLOCK_BYTES] [-n MIN_LINES]
 *                  [-s SEED] [-F] [-c] [-H] [-o ITERATIONS]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <cpuid.h>
#include <unistd.h>

#include "pmlab.h"
#include "wl_common.h"

#define LINE 64

/* Weak references: libpmlab's under pmlab run (and with -lpmlab), else
 * the fallbacks below, so that the program builds and runs anywhere. */
#pragma weak pflush
#pragma weak pm_drain
#pragma weak pmlab_emulating

/* The CPU has clflushopt (cpuid leaf 7, EBX bit 23). */
static int has_clflushopt(void)
{
	unsigned a, b, c, d;
	return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1);
}

static int opt = -1, emulated = -1;

/* The flush the run uses: libpmlab's pflush under emulation, else the
 * instruction (printed as flush=). */
static const char *flush_name(void)
{
	if (emulated < 0)
		emulated = pflush && pmlab_emulating && pmlab_emulating();
	if (opt < 0)
		opt = has_clflushopt();
	return emulated ? "pflush" : opt ? "clflushopt" : "clflush";
}

static void flush_lines(const void *p, size_t len)
{
	if (emulated < 0 || opt < 0)
		flush_name();
	if (emulated) {
		pflush(p, len);
		return;
	}
	/* Not emulated (a plain build, or one linked with libpmlab but run
	 * outside pmlab run, whose pflush would use clwb: on AMD's Zen that
	 * keeps the line cached, and the chase then hits the CPU's caches),
	 * the lines are evicted as libpmlab's pflush does under pmlab run
	 * --device (clflushopt where the CPU has it), so that the native and
	 * the emulated build flush alike. */
	for (size_t o = 0; o < len; o += LINE) {
		const char *l = (const char *)p + o;
		if (opt)
			__asm__ volatile("clflushopt %0" : "+m"(*(volatile char *)l));
		else
			__builtin_ia32_clflush(l);
	}
}

static void drain(void)
{
	static int emulated = -1;
	if (emulated < 0)
		emulated = pm_drain && pmlab_emulating && pmlab_emulating();
	if (emulated)
		pm_drain();
	else
		__builtin_ia32_sfence();
}

static void usage(const char *why)
{
	fprintf(stderr, "lenschase: error: %s\nusage: lenschase [-r REGION_BYTES] "
			"[-b BLOCK_BYTES (64..REGION, a multiple of 64)] [-n MIN_LINES] "
			"[-s SEED] [-F] [-c] [-H] [-o ITERATIONS]\n", why);
	exit(2);
}

static long long arg_ll(const char *s, long long lo, long long hi, const char *what)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < lo || v > hi)
		usage(what);
	return v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int no_flush, cpu_clock;

/* Now, ns: the monotonic clock, or with -c the thread's CPU clock. */
static uint64_t chase_now_ns(void)
{
	struct timespec ts;
	if (!cpu_clock)
		return wl_now_ns();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The first slow iteration at or after iteration `at` in idx[0..n)
 * (sorted), as an index into idx; n when none. */
static long long first_from(const long long *idx, long long n, long long at)
{
	long long lo = 0, hi = n;
	while (lo < hi) {
		long long mid = lo + (hi - lo) / 2;
		if (idx[mid] < at)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* How many of the slow iterations idx[0..n) (sorted) have another one
 * `gap` iterations later, give or take max(gap / 50, 64) (an emulator
 * charges a stall up to a log's worth of iterations late). */
static long long repeats(const long long *idx, long long n, long long gap)
{
	long long tol = gap / 50 > 64 ? gap / 50 : 64, count = 0;
	for (long long i = 0; i < n; i++) {
		long long j = first_from(idx, n, idx[i] + gap - tol);
		if (j < n && idx[j] <= idx[i] + gap + tol && j != i)
			count++;
	}
	return count;
}

/* The period of the slow iterations idx[0..n) (sorted): of the distances
 * between any two of them, the one the most of them repeat ([repeats]);
 * among equal counts the shortest. A wear-leveling stall every P
 * iterations makes every stall but the last repeat P; stray slow
 * iterations at random places rarely repeat any distance. With no
 * distance repeated twice, the median distance between neighbours. 0
 * with fewer than two. Only the first 256 slow iterations are looked at
 * (a run with more is too noisy to show a period). */
static uint64_t tail_period(const long long *idx, long long n, uint64_t *scratch)
{
	if (n > 256)
		n = 256;
	if (n < 2)
		return 0;
	long long best = 0, best_count = 0;
	for (long long a = 0; a < n; a++)
		for (long long b = a + 1; b < n; b++) {
			long long gap = idx[b] - idx[a];
			long long c = repeats(idx, n, gap);
			if (c > best_count || (c == best_count && gap < best)) {
				best = gap;
				best_count = c;
			}
		}
	if (best_count >= 2)
		return (uint64_t)best;
	for (long long i = 1; i < n; i++)
		scratch[i - 1] = (uint64_t)(idx[i] - idx[i - 1]);
	qsort(scratch, (size_t)(n - 1), sizeof *scratch, cmp_u64);
	return scratch[(n - 1) / 2];
}

static void flush_region(char *base, size_t region)
{
	if (no_flush)
		return;
	flush_lines(base, region);
	drain();
}

static int overwrite(long long iterations)
{
	char *block = aligned_alloc(4096, 4096);
	uint64_t *t = malloc((size_t)iterations * sizeof *t);
	uint64_t *sorted = malloc((size_t)iterations * sizeof *sorted);
	if (!block || !t || !sorted) {
		fprintf(stderr, "lenschase: out of memory\n");
		return 1;
	}
	memset(block, 0, 4096);
	for (long long i = 0; i < iterations; i++) {
		uint64_t t0 = wl_now_ns();
		for (int l = 0; l < 256 / LINE; l++)
			*(volatile uint64_t *)(block + l * LINE) = (uint64_t)i;
		flush_lines(block, 256);
		drain();
		t[i] = wl_now_ns() - t0;
	}
	memcpy(sorted, t, (size_t)iterations * sizeof *t);
	qsort(sorted, (size_t)iterations, sizeof *sorted, cmp_u64);
	uint64_t median = sorted[iterations / 2];
	long long tails = 0;
	uint64_t tail_sum = 0;
	long long *idx = (long long *)sorted; /* reused: the slow iterations */
	for (long long i = 0; i < iterations; i++) {
		if (t[i] > 10 * median && t[i] > 20000) {
			idx[tails++] = i;
			tail_sum += t[i];
		}
	}
	uint64_t *scratch = malloc((size_t)(tails > 1 ? tails : 1) * sizeof *scratch);
	uint64_t period = scratch ? tail_period(idx, tails, scratch) : 0;
	free(scratch);
	printf("lenschase: mode=overwrite iterations=%lld median_ns=%llu tails=%lld "
			"tail_period=%llu tail_ns=%llu slow_at=", iterations,
			(unsigned long long)median, tails, (unsigned long long)period,
			(unsigned long long)(tails ? tail_sum / (uint64_t)tails : 0));
	for (long long i = 0; i < tails && i < 4096; i++)
		printf("%s%lld:%llu", i ? "," : "", idx[i], (unsigned long long)t[idx[i]]);
	printf("\n");
	return 0;
}

#define HUGE (2u << 20)

static int no_huge;

/* The region, on 2 MiB boundaries and advised to transparent huge pages
 * (unless -H): a random chase over 4 KiB pages misses the TLB at nearly
 * every line from a few MiB on, a page walk the device model knows
 * nothing of (LENS reads the TLB miss rate and finds it flat over its
 * regions; the simulator's chase has no TLB). Where the kernel gives no
 * huge pages (THP off, no contiguous memory) the region keeps 4 KiB pages:
 * huge_pct= says how much of it is huge. NULL when nothing can be mapped. */
static char *map_region(size_t region)
{
	size_t len = region + (region >= HUGE ? HUGE : 0);
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	if (region < HUGE)
		return m;
	char *base = (char *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
	if (base > m)
		munmap(m, (size_t)(base - m));
	size_t tail = (size_t)(m + len - (base + region));
	if (tail)
		munmap(base + region, tail);
	madvise(base, region, no_huge ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
	return base;
}

/* Percent of [base, base + len) the kernel backs with huge pages (from
 * /proc/self/smaps: AnonHugePages of the mappings inside it); -1 when it
 * cannot be read. */
static int huge_pct(const char *base, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	if (!f)
		return -1;
	char line[512];
	int inside = 0;
	unsigned long long huge_kb = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long long lo, hi, kb;
		if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			inside = lo >= (uintptr_t)base && hi <= (uintptr_t)base + len;
			continue;
		}
		if (inside && sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
			huge_kb += kb;
	}
	fclose(f);
	return (int)(huge_kb * 1024 * 100 / (len ? len : 1));
}

int main(int argc, char **argv)
{
	long long region = 1 << 20, block = 64, min_lines = 1 << 16, seed = 0x1E45;
	long long iterations = 0;
	int opt;
	while ((opt = getopt(argc, argv, "r:b:n:s:o:FcH")) != -1) {
		switch (opt) {
		case 'r': region = arg_ll(optarg, LINE, 1LL << 40, "bad -r"); break;
		case 'b': block = arg_ll(optarg, LINE, 1 << 20, "bad -b"); break;
		case 'n': min_lines = arg_ll(optarg, 1, 1LL << 40, "bad -n"); break;
		case 's': seed = arg_ll(optarg, 1, 1LL << 62, "bad -s"); break;
		case 'o': iterations = arg_ll(optarg, 2, 1LL << 32, "bad -o"); break;
		case 'F': no_flush = 1; break;
		case 'c': cpu_clock = 1; break;
		case 'H': no_huge = 1; break;
		default: usage("unknown option");
		}
	}
	if (iterations > 0)
		return overwrite(iterations);
	if (block % LINE || region % block)
		usage("the block must be a multiple of 64 and divide the region");
	char *base = map_region((size_t)region);
	if (!base) {
		fprintf(stderr, "lenschase: cannot map %lld bytes: try a smaller -r\n",
				region);
		return 1;
	}
	size_t blocks = (size_t)(region / block);
	size_t per = (size_t)(block / LINE);
	uint32_t *order = malloc(blocks * sizeof *order);
	if (!order) {
		fprintf(stderr, "lenschase: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < blocks; i++)
		order[i] = (uint32_t)i;
	uint64_t s = (uint64_t)seed * 2654435761u + 1;
	for (size_t i = blocks - 1; i > 0; i--) {
		size_t j = wl_xorshift(&s) % (i + 1);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	/* Line k of block order[i] points at line k+1, the last line at the
	 * first line of block order[i+1] (cyclic). */
	for (size_t i = 0; i < blocks; i++) {
		char *b = base + (size_t)order[i] * (size_t)block;
		char *next = base + (size_t)order[(i + 1) % blocks] * (size_t)block;
		for (size_t k = 0; k + 1 < per; k++)
			*(void **)(b + k * LINE) = b + (k + 1) * LINE;
		*(void **)(b + (per - 1) * LINE) = next;
	}
	void **head = (void **)(base + (size_t)order[0] * (size_t)block);
	free(order);
	size_t lines = blocks * per;
	long long passes = (min_lines + (long long)lines - 1) / (long long)lines;
	if (passes < 1)
		passes = 1;
	if (passes > 1 << 20)
		passes = 1 << 20;

	void **p = head;
	flush_region(base, (size_t)region);
	for (size_t k = 0; k < lines; k++)
		p = (void **)*p;
	uint64_t t0 = chase_now_ns(), chase = 0;
	for (long long r = 0; r < passes; r++) {
		flush_region(base, (size_t)region);
		uint64_t c0 = chase_now_ns();
		for (size_t k = 0; k < lines; k++)
			p = (void **)*p;
		chase += chase_now_ns() - c0;
	}
	uint64_t elapsed = chase_now_ns() - t0;
	if (p == NULL)
		puts("unreachable");
	double total = (double)lines * (double)passes;
	printf("lenschase: mode=chase region=%lld block=%lld lines=%zu passes=%lld "
			"elapsed_ns=%llu ns_per_line=%.2f chase_ns_per_line=%.2f clock=%s "
			"huge_pct=%d flush=%s\n",
			region, block, lines, passes, (unsigned long long)elapsed,
			(double)elapsed / total, (double)chase / total,
			cpu_clock ? "cpu" : "wall", huge_pct(base, (size_t)region),
			no_flush ? "none" : flush_name());
	return 0;
}
