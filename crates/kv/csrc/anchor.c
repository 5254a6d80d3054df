/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * anchor.c -- the anchor engine's libpmemobj side (see src/anchor.rs)
 *
 * A singly linked list of versioned records, newest first, hanging from
 * the pool's root object. Every change -- append, rollback, unlinking
 * discarded records, restore -- is one libpmemobj transaction, so that
 * the pool is always either before or after it: the way PM programmers
 * use PMDK today, which the other engines are measured against.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <libpmemobj.h>

#define KVA_LAYOUT "pmlab-kv-anchor-1"
#define KVA_MAGIC 0x4b56524bu

struct kva_root {
	uint64_t head;  /* offset of the newest record, 0: none */
	uint64_t last;  /* highest version written */
	uint64_t floor; /* discard floor */
	uint64_t count; /* records on the list */
};

struct kva_rec {
	uint64_t next;   /* offset of the next older record, 0: none */
	uint64_t version;
	uint32_t klen;
	uint32_t vlen;
	uint32_t kind;   /* 1 set, 2 delete */
	uint32_t magic;  /* KVA_MAGIC */
	/* key, then value */
};

/* kva_errormsg -- the last libpmemobj error message of this thread */
const char *
kva_errormsg(void)
{
	return pmemobj_errormsg();
}

/* kva_open -- create or open a pool; NULL with errno on failure */
PMEMobjpool *
kva_open(const char *path, int create, uint64_t size)
{
	/* Our engines flush with instructions only; so does libpmem when it
	 * takes the mapping for PM. The caller may export 0 to compare. */
	setenv("PMEM_IS_PMEM_FORCE", "1", 0);
	if (create)
		return pmemobj_create(path, KVA_LAYOUT, (size_t)size, 0644);
	return pmemobj_open(path, KVA_LAYOUT);
}

/* kva_close -- close the pool */
void
kva_close(PMEMobjpool *pop)
{
	pmemobj_close(pop);
}

/* kva_root -- the root object (allocated, zeroed, on first use) */
struct kva_root *
kva_root(PMEMobjpool *pop)
{
	PMEMoid r = pmemobj_root(pop, sizeof(struct kva_root));
	return (struct kva_root *)pmemobj_direct(r);
}

/* kva_usable -- usable bytes of the allocation at offset off */
uint64_t
kva_usable(PMEMobjpool *pop, uint64_t off)
{
	PMEMoid root = pmemobj_root(pop, sizeof(struct kva_root));
	PMEMoid o = {root.pool_uuid_lo, off};
	return (uint64_t)pmemobj_alloc_usable_size(o);
}

static PMEMoid
oid_at(PMEMobjpool *pop, uint64_t off)
{
	PMEMoid root = pmemobj_root(pop, sizeof(struct kva_root));
	PMEMoid o = {root.pool_uuid_lo, off};
	return o;
}

/* new_rec -- allocate and fill a record inside the current transaction */
static uint64_t
new_rec(PMEMobjpool *pop, uint32_t kind, uint64_t version, const void *key,
	uint32_t klen, const void *val, uint32_t vlen, uint64_t next)
{
	size_t sz = sizeof(struct kva_rec) + klen + vlen;
	PMEMoid o = pmemobj_tx_alloc(sz, 1);
	struct kva_rec *r = (struct kva_rec *)pmemobj_direct(o);
	r->next = next;
	r->version = version;
	r->klen = klen;
	r->vlen = vlen;
	r->kind = kind;
	r->magic = KVA_MAGIC;
	memcpy((char *)(r + 1), key, klen);
	if (vlen)
		memcpy((char *)(r + 1) + klen, val, vlen);
	pmemobj_persist(pop, r, sz);
	return o.off;
}

/* kva_append -- push a record (1 set, 2 delete); 0 or an errno value */
int
kva_append(PMEMobjpool *pop, uint32_t kind, uint64_t version, const void *key,
	uint32_t klen, const void *val, uint32_t vlen, uint64_t *off)
{
	struct kva_root *root = kva_root(pop);
	volatile int ret = 0;
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(root, sizeof(*root));
		uint64_t o = new_rec(pop, kind, version, key, klen, val, vlen,
			root->head);
		root->head = o;
		root->last = version;
		root->count++;
		*off = o;
	} TX_ONABORT {
		ret = errno ? errno : EIO;
	} TX_END
	return ret;
}

/* kva_rollback -- free every record above version idx */
int
kva_rollback(PMEMobjpool *pop, uint64_t idx)
{
	struct kva_root *root = kva_root(pop);
	volatile int ret = 0;
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(root, sizeof(*root));
		while (root->head) {
			struct kva_rec *r = (struct kva_rec *)
				pmemobj_direct(oid_at(pop, root->head));
			if (r->version <= idx)
				break;
			uint64_t next = r->next;
			pmemobj_tx_free(oid_at(pop, root->head));
			root->head = next;
			root->count--;
		}
		if (root->last > idx)
			root->last = idx;
	} TX_ONABORT {
		ret = errno ? errno : EIO;
	} TX_END
	return ret;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* kva_unlink -- free the records at the n sorted offsets, set the floor */
int
kva_unlink(PMEMobjpool *pop, const uint64_t *offs, size_t n, uint64_t floor)
{
	struct kva_root *root = kva_root(pop);
	volatile int ret = 0;
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(root, sizeof(*root));
		uint64_t *link = &root->head;
		size_t left = n;
		while (*link && left) {
			uint64_t cur = *link;
			struct kva_rec *r = (struct kva_rec *)
				pmemobj_direct(oid_at(pop, cur));
			if (bsearch(&cur, offs, n, sizeof(uint64_t), cmp_u64)) {
				if (link != &root->head)
					pmemobj_tx_add_range_direct(link,
						sizeof(*link));
				*link = r->next;
				pmemobj_tx_free(oid_at(pop, cur));
				root->count--;
				left--;
			} else {
				link = &r->next;
			}
		}
		root->floor = floor;
	} TX_ONABORT {
		ret = errno ? errno : EIO;
	} TX_END
	return ret;
}

/* kva_restore -- replace every record with n sets at version idx */
int
kva_restore(PMEMobjpool *pop, uint64_t idx, size_t n, const void *const *keys,
	const uint32_t *klens, const void *const *vals, const uint32_t *vlens)
{
	struct kva_root *root = kva_root(pop);
	volatile int ret = 0;
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(root, sizeof(*root));
		while (root->head) {
			struct kva_rec *r = (struct kva_rec *)
				pmemobj_direct(oid_at(pop, root->head));
			uint64_t next = r->next;
			pmemobj_tx_free(oid_at(pop, root->head));
			root->head = next;
		}
		root->count = 0;
		for (size_t i = 0; i < n; i++) {
			root->head = new_rec(pop, 1, idx, keys[i], klens[i],
				vals[i], vlens[i], root->head);
			root->count++;
		}
		root->last = idx;
		root->floor = idx;
	} TX_ONABORT {
		ret = errno ? errno : EIO;
	} TX_END
	return ret;
}
