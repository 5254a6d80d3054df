/*
 * wl_common.h -- small helpers shared by the persistent data-structure
 * workloads (hash map, B-tree; libpmemobj and pmlab.h variants): argument
 * parsing, a deterministic per-thread key generator, a clock, and the
 * driver (wl_run, wl_report) that runs the threads and prints the result;
 * the latency probes (memlat, lenschase) use its clock and xorshift only.
 *
 * Every driver takes the same arguments:
 *   prog POOL_FILE [THREADS] [OPS_PER_THREAD] [DELETE_PERCENT] [OPS_PER_TX]
 * and prints one line of key=value pairs, for example
 *   workload=pmobj_hashmap threads=2 ops=20000 inserts=16000 deletes=4000
 *   present=12345 checksum=0x... seconds=0.123 ops_per_sec=162000
 * OPS_PER_TX (default 1) groups each thread's operations N at a time into
 * one crash-consistent transaction (group commit: all N or none); the
 * line then also says ops_per_tx=N after ops=. The checksum depends only
 * on THREADS, OPS_PER_THREAD and DELETE_PERCENT, never on OPS_PER_TX, on
 * timing or on whether the program runs under a tracer.
 */
#ifndef PMLAB_WL_COMMON_H
#define PMLAB_WL_COMMON_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* the largest OPS_PER_TX: bounds the transactions' logs and write sets */
#define WL_MAX_OPS_PER_TX 4096

#define WL_STR_(x) #x
#define WL_STR(x) WL_STR_(x)

struct wl_args {
	const char *prog; /* argv[0], for messages */
	const char *path;
	int threads;
	long ops;
	int delete_pct;
	int ops_per_tx;
};

/* wl_usage -- print the usage line and exit with status 2 */
static inline void
wl_usage(const char *prog, const char *why)
{
	fprintf(stderr, "%s: error: %s\nusage: %s POOL_FILE [THREADS 1-64] [OPS_PER_THREAD] [DELETE_PERCENT 0-100] [OPS_PER_TX 1-%d]\n",
		prog, why, prog, WL_MAX_OPS_PER_TX);
	exit(2);
}

/* wl_parse -- parse and check the common arguments */
static inline struct wl_args
wl_parse(int argc, char **argv)
{
	struct wl_args a = { argv[0], NULL, 1, 10000, 20, 1 };
	char *end;
	if (argc < 2 || argc > 6)
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
	if (argc > 5) {
		long n = strtol(argv[5], &end, 10);
		if (*end || n < 1 || n > WL_MAX_OPS_PER_TX)
			wl_usage(argv[0], "OPS_PER_TX must be a number from 1 to " WL_STR(WL_MAX_OPS_PER_TX));
		a.ops_per_tx = (int)n;
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

/* wl_now_ns -- monotonic time in nanoseconds */
static inline uint64_t
wl_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* wl_xorshift -- xorshift64 (13, 7, 17): the next number of the stream *s */
static inline uint64_t
wl_xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

/* wl_mix -- fold a key/value pair into an order-independent checksum */
static inline uint64_t
wl_mix(uint64_t key, uint64_t val)
{
	uint64_t x = key * 0x9E3779B97F4A7C15ULL ^ val;
	x ^= x >> 31;
	return x * 0xBF58476D1CE4E5B9ULL;
}

/* struct wl_op -- one operation: delete key, or insert (update) key=val */
struct wl_op {
	uint64_t key;
	uint64_t val; /* not 0; unused by a delete */
	int del;
};

/*
 * struct wl_ops -- what a workload gives wl_run: tx runs thread t's
 * operations op[0..n) in order as one crash-consistent transaction (all
 * of them take effect or none; n is 1 to OPS_PER_TX) and returns how
 * many of its deletes found their key; lock is the lock wl_run holds
 * around each call (NULL when tx locks for itself).
 */
struct wl_ops {
	int (*tx)(int t, const struct wl_op *op, int n);
	pthread_mutex_t *lock;
};

/* wl_cmp_u64 -- qsort order of uint64_t */
static inline int
wl_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/*
 * wl_lock_set -- lock locks[idx[i]] for every i < n, each lock once and
 * in ascending index order (so that threads locking overlapping sets
 * cannot deadlock); sorts idx, drops its duplicates and returns how many
 * remain, for wl_unlock_set
 */
static inline int
wl_lock_set(pthread_mutex_t *locks, uint64_t *idx, int n)
{
	int m = 0;
	qsort(idx, (size_t)n, sizeof(*idx), wl_cmp_u64);
	for (int i = 0; i < n; i++)
		if (m == 0 || idx[m - 1] != idx[i])
			idx[m++] = idx[i];
	for (int i = 0; i < m; i++)
		pthread_mutex_lock(&locks[idx[i]]);
	return m;
}

/* wl_unlock_set -- unlock what wl_lock_set locked */
static inline void
wl_unlock_set(pthread_mutex_t *locks, const uint64_t *idx, int m)
{
	for (int i = m - 1; i >= 0; i--)
		pthread_mutex_unlock(&locks[idx[i]]);
}

/* struct wl_result -- what the threads did, and how long they took */
struct wl_result {
	long inserts, deletes;
	double seconds;
};

struct wl_thread {
	const struct wl_args *args;
	const struct wl_ops *ops;
	int id;
	long inserts, deletes;
};

/*
 * wl_thread_main -- one thread's run: args->ops operations on its own keys,
 * DELETE_PERCENT of them deletes, the rest inserts, in transactions of
 * OPS_PER_TX operations (the last one takes what remains)
 */
static inline void *
wl_thread_main(void *arg)
{
	struct wl_thread *w = arg;
	const struct wl_args *a = w->args;
	const struct wl_ops *o = w->ops;
	uint64_t s = wl_seed(w->id);
	long keys = a->ops / 2 > 0 ? a->ops / 2 : 1;
	struct wl_op *batch = malloc((size_t)a->ops_per_tx * sizeof(*batch));
	int n = 0;
	if (!batch) {
		fprintf(stderr, "%s: error: out of memory for a transaction of %d operations\n",
			a->prog, a->ops_per_tx);
		exit(1);
	}
	for (long i = 0; i < a->ops; i++) {
		uint64_t r = wl_next(&s);
		struct wl_op *op = &batch[n++];
		op->key = wl_key(w->id, r >> 8, keys);
		op->val = r | 1;
		op->del = (long)(r % 100) < a->delete_pct;
		if (!op->del)
			w->inserts++;
		if (n < a->ops_per_tx && i + 1 < a->ops)
			continue;
		if (o->lock)
			pthread_mutex_lock(o->lock);
		w->deletes += o->tx(w->id, batch, n);
		if (o->lock)
			pthread_mutex_unlock(o->lock);
		n = 0;
	}
	free(batch);
	return NULL;
}

/* wl_run -- run args->threads threads of wl_thread_main and time them */
static inline struct wl_result
wl_run(const struct wl_args *args, const struct wl_ops *ops)
{
	pthread_t tid[64];
	struct wl_thread ws[64];
	struct wl_result res = { 0, 0, 0.0 };
	double t0 = wl_now();
	for (int t = 0; t < args->threads; t++) {
		ws[t] = (struct wl_thread){ args, ops, t, 0, 0 };
		pthread_create(&tid[t], NULL, wl_thread_main, &ws[t]);
	}
	for (int t = 0; t < args->threads; t++) {
		pthread_join(tid[t], NULL);
		res.inserts += ws[t].inserts;
		res.deletes += ws[t].deletes;
	}
	res.seconds = wl_now() - t0;
	return res;
}

/* wl_report -- print the result line (see the top of this file) */
static inline void
wl_report(const char *name, const struct wl_args *args,
	const struct wl_result *res, uint64_t present, uint64_t sum)
{
	long ops = args->ops * args->threads;
	char per_tx[32] = "";
	if (args->ops_per_tx > 1)
		snprintf(per_tx, sizeof(per_tx), " ops_per_tx=%d", args->ops_per_tx);
	printf("workload=%s threads=%d ops=%ld%s inserts=%ld deletes=%ld present=%lu checksum=0x%016lx seconds=%.6f ops_per_sec=%.0f\n",
		name, args->threads, ops, per_tx, res->inserts, res->deletes,
		(unsigned long)present, (unsigned long)sum, res->seconds,
		ops / res->seconds);
}

#endif /* PMLAB_WL_COMMON_H */
