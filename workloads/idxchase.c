/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * idxchase.c -- an index-linked chase, written as a user would (pmlab
 * workload, issue 16)
 *
 * An array of nodes (64 B by default) linked by index: each node holds the
 * index of the next one, and the chase is `i = next[i * K + OFF]` -- the
 * address of every load is computed from the value the previous load
 * returned (base + scale x value + offset), as in arrays of nodes, CSR
 * graphs, hash chains and B-tree children held as offsets. Plain C, no
 * pmlab API: under `pmlab run` every byte of it is PM.
 *
 * The links form a pseudo-random cycle over each chain's share of the
 * nodes (a full-period LCG over the next power of two, walking past
 * indices out of range), written in address order so that building even a
 * 1 GiB array is one sequential pass. Chains (-c) split the array in equal
 * contiguous parts and are followed interleaved.
 *
 * Prints one line:
 *
 *   idxchase: chains=1 region=268435456 bits=32 k=16 off=0 state=reg
 *             warmup=1 alloc=mmap huge_pages=1 extra_ns=0 accesses=...
 *             elapsed_ns=... ns_per_access=...
 *
 * Options:
 *   -c CHAINS   1-16 interleaved chains [1]
 *   -r MIB      size of the node array [256]
 *   -n N        loads to time (all chains together) [4000000]
 *   -b 32|64    width of an index [32]
 *   -k K        scale: elements per node, the node is K x bits/8 bytes,
 *               64 to 4096 B [64 B]
 *   -o OFF      offset of the link within its node, in elements [0]
 *   -m          chain state in memory (the current index of each chain is
 *               read from and written back to a global array every step)
 *               instead of in a register
 *   -W          no warm-up pass before timing
 *   -a heap|mmap  where the array comes from: malloc or an anonymous map [mmap]
 *   -H 0|1      ask for transparent huge pages (madvise) [1]
 *   -x EXTRA_NS hold the CPU EXTRA_NS of the thread's own time after each
 *               round of loads (cpuwait.h; one round is one load per
 *               chain): with EXTRA_NS = L - DRAM latency and one chain,
 *               the time the chase would take if every load cost L,
 *               measured without any emulator (pmlab validate's reference)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpuwait.h"
#include "args.h"

#define MAX_CHAINS 16

static void usage(void)
{
	fprintf(stderr, "usage: idxchase [-c CHAINS 1-%d] [-r MIB] [-n LOADS] "
			"[-b 32|64] [-k ELEMENTS_PER_NODE] [-o OFFSET] [-m] [-W] "
			"[-a heap|mmap] [-H 0|1] [-x EXTRA_NS 0-1000000]\n", MAX_CHAINS);
	exit(2);
}

/* The successor of j in a single cycle over [0, n): a full-period LCG
 * modulo the power of two p >= n (multiplier = 1 mod 4, odd increment),
 * stepped again while it falls outside [0, n). */
static uint64_t succ(uint64_t j, uint64_t n, uint64_t p)
{
	do
		j = (j * 6364136223846793005ull + 1442695040888963407ull) & (p - 1);
	while (j >= n);
	return j;
}

/* The chain state when it lives in memory (-m). */
static volatile uint64_t chain_pos[MAX_CHAINS];

/* The chase loops; PAY is what follows each round (nothing, or the
 * reference's wait), so that the plain chase has no extra load. */
#define CHASE_LOOPS(T, PAY)                                                  \
	if (in_mem) {                                                            \
		for (long r = 0; r < rounds; r++) {                                  \
			for (long c = 0; c < chains; c++)                                \
				chain_pos[c] = next[chain_pos[c] * k + off];                 \
			PAY;                                                             \
		}                                                                    \
	} else if (chains == 1) {                                                \
		T i = (T)pos[0];                                                     \
		for (long r = 0; r < rounds; r++) {                                  \
			i = next[(size_t)i * k + off];                                   \
			PAY;                                                             \
		}                                                                    \
		pos[0] = i;                                                          \
	} else {                                                                 \
		T p[MAX_CHAINS];                                                     \
		for (long c = 0; c < chains; c++)                                    \
			p[c] = (T)pos[c];                                                \
		for (long r = 0; r < rounds; r++) {                                  \
			for (long c = 0; c < chains; c++)                                \
				p[c] = next[(size_t)p[c] * k + off];                         \
			PAY;                                                             \
		}                                                                    \
		for (long c = 0; c < chains; c++)                                    \
			pos[c] = p[c];                                                   \
	}

#define CHASE(T)                                                             \
	static void chase_##T(const T *next, long chains, long rounds,          \
			long k, long off, int in_mem, uint64_t *pos, int64_t *owed)     \
	{                                                                        \
		if (cw_extra_ticks == 0) {                                           \
			CHASE_LOOPS(T, (void)owed)                                       \
		} else {                                                             \
			CHASE_LOOPS(T, cw_pay(owed, 1))                                  \
		}                                                                    \
	}
CHASE(uint32_t)
CHASE(uint64_t)

int main(int argc, char **argv)
{
	long chains = 1, region_mib = 256, accesses = 4000000, bits = 32;
	long k = -1, off = 0, huge_req = 1, extra_ns = 0;
	int in_mem = 0, warmup = 1, use_mmap = 1, opt;
	while ((opt = getopt(argc, argv, "c:r:n:b:k:o:mWa:H:x:")) != -1) {
		switch (opt) {
		case 'c': chains = wl_arg_long("idxchase", opt, optarg, 1, MAX_CHAINS); break;
		case 'r': region_mib = wl_arg_long("idxchase", opt, optarg, 1, 1 << 20); break;
		case 'n': accesses = wl_arg_long("idxchase", opt, optarg, 1, 1L << 40); break;
		case 'b': bits = wl_arg_long("idxchase", opt, optarg, 32, 64);
			if (bits != 32 && bits != 64) usage();
			break;
		case 'k': k = wl_arg_long("idxchase", opt, optarg, 1, 4096); break;
		case 'o': off = wl_arg_long("idxchase", opt, optarg, 0, 4095); break;
		case 'm': in_mem = 1; break;
		case 'W': warmup = 0; break;
		case 'a':
			if (strcmp(optarg, "heap") == 0) use_mmap = 0;
			else if (strcmp(optarg, "mmap") == 0) use_mmap = 1;
			else usage();
			break;
		case 'H': huge_req = wl_arg_long("idxchase", opt, optarg, 0, 1); break;
		case 'x': extra_ns = wl_arg_long("idxchase", opt, optarg, 0, 1000000); break;
		default: usage();
		}
	}
	size_t elem = (size_t)bits / 8;
	if (k < 0)
		k = (long)(64 / elem);
	size_t node = (size_t)k * elem;
	if (node < 64 || node > 4096 || off >= k) {
		fprintf(stderr, "idxchase: a node of -k %ld x %ld-bit elements is %zu B "
				"(use 64 to 4096 B) and -o must be below -k\n", k, bits, node);
		return 2;
	}
	size_t region = (size_t)region_mib << 20;
	uint64_t nodes = region / node, per = nodes / (uint64_t)chains;
	if (per < 2 || (bits == 32 && nodes > UINT32_MAX)) {
		fprintf(stderr, "idxchase: %ld MiB holds %llu nodes of %zu B: too few "
				"for %ld chains, or too many for 32-bit indices (-b 64)\n",
				region_mib, (unsigned long long)nodes, node, chains);
		return 2;
	}
	void *base;
	if (use_mmap) {
		base = mmap(NULL, region, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (base == MAP_FAILED)
			base = NULL;
	} else {
		base = aligned_alloc(4096, region);
	}
	if (!base) {
		fprintf(stderr, "idxchase: cannot allocate %ld MiB: try a smaller -r\n",
				region_mib);
		return 1;
	}
	int huge = madvise(base, region, huge_req ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0
			&& huge_req;
	uint64_t p2 = 1;
	while (p2 < per)
		p2 <<= 1;
	/* Link each chain's part, in address order. */
	uint64_t pos[MAX_CHAINS];
	for (long c = 0; c < chains; c++) {
		uint64_t first = (uint64_t)c * per;
		for (uint64_t j = 0; j < per; j++) {
			uint64_t to = first + succ(j, per, p2);
			if (bits == 32)
				((uint32_t *)base)[(first + j) * (uint64_t)k + (uint64_t)off] = (uint32_t)to;
			else
				((uint64_t *)base)[(first + j) * (uint64_t)k + (uint64_t)off] = to;
		}
		pos[c] = first;
	}
	long rounds = accesses / chains;
	if (rounds < 1)
		rounds = 1;
	int64_t owed = 0;
	for (long c = 0; c < chains; c++)
		chain_pos[c] = pos[c];
	if (warmup) {
		/* One pass of up to 100000 loads a chain (TLB, page faults). */
		long w = per < 100000 ? (long)per : 100000;
		if (bits == 32)
			chase_uint32_t(base, chains, w, k, off, in_mem, pos, &owed);
		else
			chase_uint64_t(base, chains, w, k, off, in_mem, pos, &owed);
	}
	cw_init(extra_ns);
	uint64_t t0 = cw_now_ns();
	if (bits == 32)
		chase_uint32_t(base, chains, rounds, k, off, in_mem, pos, &owed);
	else
		chase_uint64_t(base, chains, rounds, k, off, in_mem, pos, &owed);
	uint64_t t1 = cw_now_ns();
	uint64_t sink = 0;
	for (long c = 0; c < chains; c++)
		sink ^= in_mem ? chain_pos[c] : pos[c];
	long done = rounds * chains;
	printf("idxchase: chains=%ld region=%zu bits=%ld k=%ld off=%ld state=%s "
			"warmup=%d alloc=%s huge_pages=%d extra_ns=%ld accesses=%ld "
			"elapsed_ns=%llu ns_per_access=%.2f sink=%llu\n",
			chains, region, bits, k, off, in_mem ? "mem" : "reg", warmup,
			use_mmap ? "mmap" : "heap", huge, extra_ns, done,
			(unsigned long long)(t1 - t0), (double)(t1 - t0) / (double)done,
			(unsigned long long)(sink & 1));
	return 0;
}
