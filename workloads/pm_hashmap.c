/*
 * pm_hashmap.c -- a persistent hash map on pmlab.h with redo logging
 *
 * The same chained hash map as pmobj_hashmap.c (same keys, values and
 * checksum for the same arguments), in memory from pmalloc(), made
 * crash-consistent with the per-thread redo log of pm_redo.h: an insert
 * writes and flushes the new entry, then logs the bucket's new head; an
 * update logs the value; a delete logs the predecessor's link. One
 * durability point (pm_dfence) per transaction; every other fence is an
 * ordering fence (pm_ofence). Key and value bytes are annotated as user
 * data. Deleted entries are not reused (a crash-consistent allocator is
 * out of scope: memory leaks, as in Mnemosyne).
 *
 * A transaction holds OPS_PER_TX operations (default 1): it locks the
 * buckets of all its keys first (in bucket order), reads links through
 * its own staged writes (redo_read), and logs at most one 8-byte write
 * per operation, so its log never needs more than 24 bytes per operation.
 *
 * Usage and output: see wl_common.h (the pool file argument is accepted
 * and ignored: pmalloc's pool is set by PMLAB_PM_* variables).
 */
#include <pthread.h>

#include "pm_redo.h"
#include "wl_common.h"

#define NBUCKETS 4096

struct entry {
	uint64_t key;
	uint64_t value;
	struct entry *next;
};

static struct entry **buckets; /* in PM */
static pthread_mutex_t locks[NBUCKETS];
static struct redo_tx txs[64]; /* thread t's redo log: txs[t] */

static uint64_t
bucket_of(uint64_t key)
{
	return (key * 0x9E3779B97F4A7C15ULL) >> 52;
}

/* link -- the pointer at *p as transaction tx sees it */
static struct entry *
link_of(const struct redo_tx *tx, struct entry *const *p)
{
	struct entry *e;
	redo_read(tx, &e, p, sizeof(e));
	return e;
}

/* hm_put -- insert or update key, inside transaction tx */
static void
hm_put(struct redo_tx *tx, uint64_t key, uint64_t value)
{
	uint64_t b = bucket_of(key);
	struct entry *e = link_of(tx, &buckets[b]);
	while (e && e->key != key)
		e = link_of(tx, &e->next);
	if (e) {
		redo_write(tx, &e->value, &value, sizeof(value));
		wl_user(&e->value, sizeof(value));
	} else {
		struct entry *n = wl_pm_alloc(sizeof(*n));
		if (!n) {
			fprintf(stderr, "pm_hashmap: error: the PM pool is full (raise PMLAB_PM_POOL_SIZE)\n");
			exit(1);
		}
		n->key = key;
		n->value = value;
		n->next = link_of(tx, &buckets[b]);
		wl_flush(n, sizeof(*n));
		wl_user(n, 2 * sizeof(uint64_t));
		redo_write(tx, &buckets[b], &n, sizeof(n));
	}
}

/* hm_del -- delete key inside transaction tx; 1 if it was present */
static int
hm_del(struct redo_tx *tx, uint64_t key)
{
	uint64_t b = bucket_of(key);
	struct entry **link = &buckets[b];
	for (struct entry *e; (e = link_of(tx, link)); link = &e->next) {
		if (e->key == key) {
			struct entry *next = link_of(tx, &e->next);
			redo_write(tx, link, &next, sizeof(next));
			return 1;
		}
	}
	return 0;
}

/* hm_tx -- thread t's operations op[0..n) as one transaction */
static int
hm_tx(int t, const struct wl_op *op, int n)
{
	struct redo_tx *tx = &txs[t];
	uint64_t held[WL_MAX_OPS_PER_TX];
	int found = 0;
	for (int i = 0; i < n; i++)
		held[i] = bucket_of(op[i].key);
	int m = wl_lock_set(locks, held, n);
	redo_begin(tx);
	for (int i = 0; i < n; i++) {
		if (op[i].del)
			found += hm_del(tx, op[i].key);
		else
			hm_put(tx, op[i].key, op[i].val);
	}
	redo_commit(tx);
	wl_unlock_set(locks, held, m);
	return found;
}

int
main(int argc, char **argv)
{
	struct wl_args args = wl_parse(argc, argv);
	buckets = wl_pm_alloc(NBUCKETS * sizeof(*buckets));
	if (!buckets) {
		fprintf(stderr, "pm_hashmap: error: cannot allocate the bucket array in PM\n");
		return 1;
	}
	wl_flush(buckets, NBUCKETS * sizeof(*buckets));
	wl_dfence();
	for (int i = 0; i < NBUCKETS; i++)
		pthread_mutex_init(&locks[i], NULL);

	for (int t = 0; t < args.threads; t++) {
		if (redo_init(&txs[t], (uint64_t)t << 40,
			(size_t)args.ops_per_tx * REDO_REC_BYTES(sizeof(struct entry *)))) {
			fprintf(stderr, "pm_hashmap: error: cannot allocate a redo log in PM\n");
			return 1;
		}
	}
	struct wl_ops ops = { hm_tx, NULL };
	struct wl_result res = wl_run(&args, &ops);
	uint64_t sum = 0, present = 0;
	for (int b = 0; b < NBUCKETS; b++)
		for (struct entry *e = buckets[b]; e; e = e->next) {
			sum += wl_mix(e->key, e->value);
			present++;
		}
	wl_report("pm_hashmap", &args, &res, present, sum);
	return 0;
}
