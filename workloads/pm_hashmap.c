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
static struct wl_args args;

struct worker {
	int id;
	long inserts, deletes;
	struct redo_tx tx;
};

static uint64_t
bucket_of(uint64_t key)
{
	return (key * 0x9E3779B97F4A7C15ULL) >> 52;
}

static void
hm_put(struct redo_tx *tx, uint64_t key, uint64_t value)
{
	uint64_t b = bucket_of(key);
	pthread_mutex_lock(&locks[b]);
	redo_begin(tx);
	struct entry *e = buckets[b];
	while (e && e->key != key)
		e = e->next;
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
		n->next = buckets[b];
		wl_flush(n, sizeof(*n));
		wl_user(n, 2 * sizeof(uint64_t));
		redo_write(tx, &buckets[b], &n, sizeof(n));
	}
	redo_commit(tx);
	pthread_mutex_unlock(&locks[b]);
}

static int
hm_del(struct redo_tx *tx, uint64_t key)
{
	uint64_t b = bucket_of(key);
	int found = 0;
	pthread_mutex_lock(&locks[b]);
	redo_begin(tx);
	struct entry **link = &buckets[b];
	while (*link) {
		if ((*link)->key == key) {
			struct entry *next = (*link)->next;
			redo_write(tx, link, &next, sizeof(next));
			found = 1;
			break;
		}
		link = &(*link)->next;
	}
	redo_commit(tx);
	pthread_mutex_unlock(&locks[b]);
	return found;
}

static void *
work(void *arg)
{
	struct worker *w = arg;
	uint64_t s = wl_seed(w->id);
	long keys = args.ops / 2 > 0 ? args.ops / 2 : 1;
	for (long i = 0; i < args.ops; i++) {
		uint64_t r = wl_next(&s);
		uint64_t key = wl_key(w->id, r >> 8, keys);
		if ((long)(r % 100) < args.delete_pct) {
			w->deletes += hm_del(&w->tx, key);
		} else {
			hm_put(&w->tx, key, r | 1);
			w->inserts++;
		}
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	args = wl_parse(argc, argv);
	buckets = wl_pm_alloc(NBUCKETS * sizeof(*buckets));
	if (!buckets) {
		fprintf(stderr, "pm_hashmap: error: cannot allocate the bucket array in PM\n");
		return 1;
	}
	wl_flush(buckets, NBUCKETS * sizeof(*buckets));
	wl_dfence();
	for (int i = 0; i < NBUCKETS; i++)
		pthread_mutex_init(&locks[i], NULL);

	static struct worker ws[64];
	pthread_t tid[64];
	for (int t = 0; t < args.threads; t++) {
		ws[t].id = t;
		if (redo_init(&ws[t].tx, (uint64_t)t << 40)) {
			fprintf(stderr, "pm_hashmap: error: cannot allocate a redo log in PM\n");
			return 1;
		}
	}
	double t0 = wl_now();
	for (int t = 0; t < args.threads; t++)
		pthread_create(&tid[t], NULL, work, &ws[t]);
	long inserts = 0, deletes = 0;
	for (int t = 0; t < args.threads; t++) {
		pthread_join(tid[t], NULL);
		inserts += ws[t].inserts;
		deletes += ws[t].deletes;
	}
	double secs = wl_now() - t0;
	uint64_t sum = 0, present = 0;
	for (int b = 0; b < NBUCKETS; b++)
		for (struct entry *e = buckets[b]; e; e = e->next) {
			sum += wl_mix(e->key, e->value);
			present++;
		}
	long ops = args.ops * args.threads;
	printf("workload=pm_hashmap threads=%d ops=%ld inserts=%ld deletes=%ld present=%lu checksum=0x%016lx seconds=%.6f ops_per_sec=%.0f\n",
		args.threads, ops, inserts, deletes, (unsigned long)present,
		(unsigned long)sum, secs, ops / secs);
	return 0;
}
