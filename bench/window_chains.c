/* window_chains.c -- how many independent misses a program overlaps when
 * every access calls a hook (bench/hooked-window.sh). Eight random chains
 * over 256 MiB (huge pages where granted), walked in lock step; after
 * each chain's load, EXTRA loads of a small array that stays in the
 * caches (built with `pmlab cc` these are filter hits of the hooks,
 * natively they cost next to nothing). Prints "extra=E shape=S
 * ns_per_miss=T": on this VM natively T is about DRAM / 8 for every E;
 * under the hooks the reorder buffer holds fewer misses as E grows.
 * SHAPE says where the chain pointers live:
 *   reg    in registers (the default): one hooked call per miss;
 *   stack  in a local array indexed by the chain number, as memlat keeps
 *          them (a private stack slot: its loads and stores get no hook,
 *          but take room in the window);
 *   mem    in a global array, as idxchase -m keeps its state: the pointer's
 *          load and store share one update hook (a filter hit), then the
 *          chase's load (logged).
 * Usage: window_chains EXTRA [STEPS [SHAPE]]   (STEPS per chain, default
 * 500000) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CHAINS 8
#define LINE 64
#define REGION (256ul << 20)

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

volatile uint64_t pad[16];
/* The chain count, read at run time so that the stack shape's loop over
 * the chains is not unrolled into registers. */
volatile long chain_count = CHAINS;
/* The mem shape's chain pointers. */
void **volatile in_mem[CHAINS];

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: window_chains EXTRA [STEPS [reg|stack|mem]]\n");
		return 2;
	}
	long extra = strtol(argv[1], NULL, 10);
	long steps = argc > 2 ? strtol(argv[2], NULL, 10) : 500000;
	const char *shape = argc > 3 ? argv[3] : "reg";
	if (extra < 0 || extra > 16 || steps < 1) {
		fprintf(stderr, "window_chains: EXTRA must be 0..16 and STEPS >= 1\n");
		return 2;
	}
	if (strcmp(shape, "reg") && strcmp(shape, "stack") && strcmp(shape, "mem")) {
		fprintf(stderr, "window_chains: SHAPE '%s' is not one of reg, stack, mem\n", shape);
		return 2;
	}
	char *base = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		perror("window_chains: mmap");
		return 1;
	}
	madvise(base, REGION, MADV_HUGEPAGE);
	size_t lines = REGION / LINE, per = lines / CHAINS;
	uint32_t *order = malloc(lines * sizeof *order);
	if (!order) {
		perror("window_chains: malloc");
		return 1;
	}
	uint64_t s = 88172645463325252ull;
	for (size_t i = 0; i < lines; i++)
		order[i] = (uint32_t)i;
	for (size_t i = lines - 1; i > 0; i--) {
		size_t j = xorshift(&s) % (i + 1);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	void **head[CHAINS];
	for (size_t c = 0; c < CHAINS; c++) {
		uint32_t *o = order + c * per;
		for (size_t k = 0; k < per; k++)
			*(void **)(base + (size_t)o[k] * LINE) =
				base + (size_t)o[(k + 1) % per] * LINE;
		head[c] = (void **)(base + (size_t)o[0] * LINE);
	}
	free(order);
	void **p0 = head[0], **p1 = head[1], **p2 = head[2], **p3 = head[3];
	void **p4 = head[4], **p5 = head[5], **p6 = head[6], **p7 = head[7];
	uint64_t sum = 0;
#define STEP(p)                                       \
	do {                                          \
		p = (void **)*p;                      \
		for (long e = 0; e < extra; e++)      \
			sum += pad[e];                \
	} while (0)
	long n = chain_count;
	void **p[CHAINS];
	for (long c = 0; c < CHAINS; c++)
		p[c] = in_mem[c] = head[c];
	uint64_t t0 = now_ns(), t1;
	uintptr_t sink;
	if (!strcmp(shape, "reg")) {
		for (long i = 0; i < steps; i++) {
			STEP(p0); STEP(p1); STEP(p2); STEP(p3);
			STEP(p4); STEP(p5); STEP(p6); STEP(p7);
		}
		t1 = now_ns();
		sink = (uintptr_t)p0 ^ (uintptr_t)p1 ^ (uintptr_t)p2 ^
			(uintptr_t)p3 ^ (uintptr_t)p4 ^ (uintptr_t)p5 ^
			(uintptr_t)p6 ^ (uintptr_t)p7;
	} else if (!strcmp(shape, "stack")) {
		for (long i = 0; i < steps; i++)
			for (long c = 0; c < n; c++)
				STEP(p[c]);
		t1 = now_ns();
		sink = (uintptr_t)p[0] ^ (uintptr_t)p[n - 1];
	} else {
		for (long i = 0; i < steps; i++)
			for (long c = 0; c < n; c++)
				STEP(in_mem[c]);
		t1 = now_ns();
		sink = (uintptr_t)in_mem[0] ^ (uintptr_t)in_mem[n - 1];
	}
	sink ^= sum;
	printf("extra=%ld shape=%s ns_per_miss=%.2f sink=%lu\n", extra, shape,
			(double)(t1 - t0) / (double)(steps * CHAINS),
			(unsigned long)(sink & 1));
	munmap(base, REGION);
	return 0;
}
