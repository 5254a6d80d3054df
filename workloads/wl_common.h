/*
 * wl_common.h -- small helpers shared by the persistent data-structure
 * workloads (hash map, B-tree; libpmemobj and pmlab.h variants): argument
 * parsing, a deterministic per-thread key generator and a clock.
 *
 * Every driver takes the same arguments:
 *   prog POOL_FILE [THREADS] [OPS_PER_THREAD] [DELETE_PERCENT]
 * and prints one line of key=value pairs, for example
 *   workload=pmobj_hashmap threads=2 ops=20000 inserts=16000 deletes=4000
 *   present=12345 checksum=0x... seconds=0.123 ops_per_sec=162000
 * The checksum depends only on the arguments, never on timing or on
 * whether the program runs under a tracer.
 */
#ifndef PMLAB_WL_COMMON_H
#define PMLAB_WL_COMMON_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct wl_args {
	const char *path;
	int threads;
	long ops;
	int delete_pct;
};

/* wl_usage -- print the usage line and exit with status 2 */
static inline void
wl_usage(const char *prog, const char *why)
{
	fprintf(stderr, "%s: error: %s\nusage: %s POOL_FILE [THREADS 1-64] [OPS_PER_THREAD] [DELETE_PERCENT 0-100]\n",
		prog, why, prog);
	exit(2);
}

/* wl_parse -- parse and check the common arguments */
static inline struct wl_args
wl_parse(int argc, char **argv)
{
	struct wl_args a = { NULL, 1, 10000, 20 };
	char *end;
	if (argc < 2 || argc > 5)
		wl_usage(argv[0], "wrong number of arguments");
	a.path = argv[1];
	if (argc > 2) {
		a.threads = (int)strtol(argv[2], &end, 10);
		if (*end || a.threads < 1 || a.threads > 64)
			wl_usage(argv[0], "THREADS must be a number from 1 to 64");
	}
	if (argc > 3) {
		a.ops = strtol(argv[3], &end, 10);
		if (*end || a.ops < 1 || a.ops > 100000000)
			wl_usage(argv[0], "OPS_PER_THREAD must be a number from 1 to 100000000");
	}
	if (argc > 4) {
		a.delete_pct = (int)strtol(argv[4], &end, 10);
		if (*end || a.delete_pct < 0 || a.delete_pct > 100)
			wl_usage(argv[0], "DELETE_PERCENT must be a number from 0 to 100");
	}
	return a;
}

/* wl_next -- xorshift64*: the next pseudo-random number of a stream */
static inline uint64_t
wl_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* wl_seed -- the seed of thread t's stream */
static inline uint64_t
wl_seed(int t)
{
	return 0x9E3779B97F4A7C15ULL * (uint64_t)(t + 1) + 1;
}

/*
 * wl_key -- thread t's i-th key: threads use disjoint key ranges (key mod
 * 64 is the thread), so the final contents do not depend on scheduling.
 */
static inline uint64_t
wl_key(int t, uint64_t r, long keys_per_thread)
{
	return ((r % (uint64_t)keys_per_thread) << 6 | (uint64_t)t) + 1;
}

/* wl_now -- monotonic time in seconds */
static inline double
wl_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* wl_mix -- fold a key/value pair into an order-independent checksum */
static inline uint64_t
wl_mix(uint64_t key, uint64_t val)
{
	uint64_t x = key * 0x9E3779B97F4A7C15ULL ^ val;
	x ^= x >> 31;
	return x * 0xBF58476D1CE4E5B9ULL;
}

#endif /* PMLAB_WL_COMMON_H */
