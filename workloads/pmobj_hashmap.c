/*
 * pmobj_hashmap.c -- a transactional persistent hash map on libpmemobj
 *
 * Chained hash map in a libpmemobj pool: a bucket array of object ids,
 * entries allocated in transactions. Every insert, update and delete is
 * one libpmemobj transaction (undo logging: snapshot with
 * pmemobj_tx_add_range_direct, allocate with pmemobj_tx_alloc, free with
 * pmemobj_tx_free), or OPS_PER_TX of them share one (group commit).
 * Threads work on disjoint keys and take a DRAM lock per bucket around
 * their transaction: the locks of all its keys' buckets, in bucket order,
 * held until it ends.
 *
 * Usage and output: see wl_common.h. Run it under `pmlab trace` to record
 * its PM behaviour through libpmem's entry points.
 */
#include <libpmemobj.h>
#include <pthread.h>
#include <unistd.h>

#include "wl_common.h"

#define NBUCKETS 4096
#define POOL_SIZE (256UL << 20)

struct entry {
	uint64_t key;
	uint64_t value;
	PMEMoid next;
};

struct hm_root {
	uint64_t nbuckets;
	PMEMoid buckets; /* PMEMoid[nbuckets] */
};

static PMEMobjpool *pop;
static PMEMoid *buckets;
static pthread_mutex_t locks[NBUCKETS];

static uint64_t
bucket_of(uint64_t key)
{
	return (key * 0x9E3779B97F4A7C15ULL) >> 52; /* 12 bits: NBUCKETS */
}

/* hm_put -- insert or update key, inside the running transaction */
static void
hm_put(uint64_t key, uint64_t value)
{
	uint64_t b = bucket_of(key);
	PMEMoid cur = buckets[b];
	struct entry *e = NULL;
	while (!OID_IS_NULL(cur)) {
		e = pmemobj_direct(cur);
		if (e->key == key)
			break;
		cur = e->next;
		e = NULL;
	}
	if (e) {
		pmemobj_tx_add_range_direct(&e->value, sizeof(e->value));
		e->value = value;
	} else {
		PMEMoid n = pmemobj_tx_alloc(sizeof(struct entry), 1);
		struct entry *ne = pmemobj_direct(n);
		ne->key = key;
		ne->value = value;
		ne->next = buckets[b];
		pmemobj_tx_add_range_direct(&buckets[b], sizeof(PMEMoid));
		buckets[b] = n;
	}
}

/* hm_del -- delete key inside the running transaction; 1 if deleted */
static int
hm_del(uint64_t key)
{
	PMEMoid *link = &buckets[bucket_of(key)];
	while (!OID_IS_NULL(*link)) {
		struct entry *e = pmemobj_direct(*link);
		if (e->key == key) {
			PMEMoid victim = *link;
			pmemobj_tx_add_range_direct(link, sizeof(PMEMoid));
			*link = e->next;
			pmemobj_tx_free(victim);
			return 1;
		}
		link = &e->next;
	}
	return 0;
}

/* hm_tx -- op[0..n) as one transaction; how many deletes found their key */
static int
hm_tx(int t, const struct wl_op *op, int n)
{
	(void)t; /* the bucket locks serialise the threads */
	uint64_t held[WL_MAX_OPS_PER_TX];
	volatile int found = 0;
	for (int i = 0; i < n; i++)
		held[i] = bucket_of(op[i].key);
	volatile int m = wl_lock_set(locks, held, n); /* live across setjmp */
	TX_BEGIN(pop) {
		for (int i = 0; i < n; i++) {
			if (op[i].del)
				found += hm_del(op[i].key);
			else
				hm_put(op[i].key, op[i].val);
		}
	} TX_ONABORT {
		fprintf(stderr, "pmobj_hashmap: error: a transaction of %d operations aborted: %s\n",
			n, pmemobj_errormsg());
		exit(1);
	} TX_END
	wl_unlock_set(locks, held, m);
	return found;
}

int
main(int argc, char **argv)
{
	struct wl_args args = wl_parse(argc, argv);
	unlink(args.path);
	pop = pmemobj_create(args.path, "pmlab_hashmap", POOL_SIZE, 0600);
	if (!pop) {
		fprintf(stderr, "pmobj_hashmap: error: cannot create pool %s: %s\n",
			args.path, pmemobj_errormsg());
		return 1;
	}
	struct hm_root *root = pmemobj_direct(pmemobj_root(pop, sizeof(*root)));
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(root, sizeof(*root));
		root->nbuckets = NBUCKETS;
		root->buckets = pmemobj_tx_zalloc(NBUCKETS * sizeof(PMEMoid), 2);
	} TX_END
	buckets = pmemobj_direct(root->buckets);
	for (int i = 0; i < NBUCKETS; i++)
		pthread_mutex_init(&locks[i], NULL);

	struct wl_ops ops = { hm_tx, NULL };
	struct wl_result res = wl_run(&args, &ops);

	uint64_t sum = 0, present = 0;
	for (int b = 0; b < NBUCKETS; b++) {
		for (PMEMoid cur = buckets[b]; !OID_IS_NULL(cur);) {
			struct entry *e = pmemobj_direct(cur);
			sum += wl_mix(e->key, e->value);
			present++;
			cur = e->next;
		}
	}
	wl_report("pmobj_hashmap", &args, &res, present, sum);
	pmemobj_close(pop);
	return 0;
}
