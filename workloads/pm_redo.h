/*
 * pm_redo.h -- a per-thread redo log on pmlab.h, for the pm_* workloads
 *
 * A transaction stages its writes (destination, bytes) in DRAM. At commit
 * the staged records are streamed into the thread's persistent log with
 * non-temporal stores (pm_memcpy_nt), an ordering fence (pm_ofence) puts
 * them before the commit mark, and the commit mark is made durable
 * (pflush + pm_dfence): this is the transaction's one durability point.
 * The writes are then applied in place and flushed, ordered (pm_ofence)
 * before the log is cleared. Recovery (not exercised by the drivers) would
 * replay a committed log. Objects allocated in the transaction are written
 * directly and flushed before the commit (they are unreachable until the
 * commit applies), as libraries do for fresh allocations; later changes to
 * them in the same transaction go through the log like any other.
 *
 * A transaction may stage many writes (group commit: several operations
 * per transaction). A write to the same destination and length as an
 * earlier one replaces it in the stage, and redo_read gives the
 * transaction its own staged writes (read your writes). The log's
 * capacity is chosen at redo_init; a transaction that stages more fails
 * with an error message (the drivers size the log for OPS_PER_TX).
 *
 * The pmlab.h functions are weak references: under `pmlab run` or `pmlab
 * trace` (libpmlab preloaded) or when linked with -lpmlab they are
 * libpmlab's; otherwise small fallbacks (calloc, clflush, sfence) run, so
 * the drivers work anywhere.
 */
#ifndef PMLAB_PM_REDO_H
#define PMLAB_PM_REDO_H

#include <pmlab.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma weak pmalloc
#pragma weak pflush
#pragma weak pm_ofence
#pragma weak pm_dfence
#pragma weak pm_tx_begin
#pragma weak pm_tx_end
#pragma weak pm_memcpy_nt
#pragma weak pm_annotate_user_data

/* wl_pm_alloc -- zeroed persistent memory (pmalloc, else calloc) */
static inline void *
wl_pm_alloc(size_t n)
{
	if (pmalloc) {
		void *p = pmalloc(n);
		if (p)
			memset(p, 0, n);
		return p;
	}
	return calloc(1, n);
}

/* wl_flush -- write back [p, p+n) */
static inline void
wl_flush(const void *p, size_t n)
{
	if (pflush) {
		pflush(p, n);
		return;
	}
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)63;
	for (; a < (uintptr_t)p + n; a += 64)
		__asm__ volatile("clflush %0" : "+m"(*(volatile char *)a));
}

/* wl_ofence -- ordering point */
static inline void
wl_ofence(void)
{
	if (pm_ofence)
		pm_ofence();
	else
		__asm__ volatile("sfence" ::: "memory");
}

/* wl_dfence -- durability point */
static inline void
wl_dfence(void)
{
	if (pm_dfence)
		pm_dfence();
	else
		__asm__ volatile("sfence" ::: "memory");
}

/* wl_user -- annotate user data for write amplification */
static inline void
wl_user(const void *p, size_t n)
{
	if (pm_annotate_user_data)
		pm_annotate_user_data(p, n);
}

/* the smallest log capacity: what one-operation transactions always had */
#define REDO_LOG_BYTES (64 * 1024)

/* the persistent part: a header line, then records */
struct redo_log {
	uint64_t committed; /* 1 while records must be replayed */
	uint64_t used;      /* bytes of records */
	uint8_t pad[48];
	uint8_t data[];     /* the log's capacity (redo_init) */
};

/* a record in the log: destination, length, then the bytes (8-aligned) */
struct redo_rec {
	uint64_t dst;
	uint64_t len;
};

/* REDO_REC_BYTES -- log bytes of a record of len bytes */
#define REDO_REC_BYTES(len) (sizeof(struct redo_rec) + (((size_t)(len) + 7) & ~(size_t)7))

/* one thread's transaction state (DRAM) */
struct redo_tx {
	struct redo_log *log; /* in PM */
	size_t cap;           /* bytes of records the log holds */
	uint64_t id;
	size_t used;
	uint8_t *stage;       /* cap bytes */
};

/*
 * redo_init -- allocate the thread's log, with room for `need` bytes of
 * records (at least REDO_LOG_BYTES); 0 on success, -1 when PM or DRAM is
 * short
 */
static inline int
redo_init(struct redo_tx *tx, uint64_t first_id, size_t need)
{
	tx->cap = need > REDO_LOG_BYTES ? need : REDO_LOG_BYTES;
	tx->log = wl_pm_alloc(sizeof(struct redo_log) + tx->cap);
	tx->stage = malloc(tx->cap);
	tx->id = first_id;
	tx->used = 0;
	return tx->log && tx->stage ? 0 : -1;
}

/* redo_begin -- start a transaction */
static inline void
redo_begin(struct redo_tx *tx)
{
	tx->used = 0;
	tx->id++;
	if (pm_tx_begin)
		pm_tx_begin(tx->id);
}

/*
 * redo_write -- stage `len` bytes for `dst` (applied at commit); replaces
 * the staged write of the same destination and length when no other
 * staged write overlaps it after it
 */
static inline void
redo_write(struct redo_tx *tx, void *dst, const void *src, size_t len)
{
	uint64_t d = (uint64_t)(uintptr_t)dst;
	size_t same = SIZE_MAX;
	for (size_t off = 0; off < tx->used;) {
		struct redo_rec r;
		memcpy(&r, tx->stage + off, sizeof(r));
		if (r.dst == d && r.len == len)
			same = off;
		else if (r.dst < d + len && d < r.dst + r.len)
			same = SIZE_MAX; /* a later partial overlap: keep the order */
		off += REDO_REC_BYTES(r.len);
	}
	if (same != SIZE_MAX) {
		memcpy(tx->stage + same + sizeof(struct redo_rec), src, len);
		return;
	}
	if (tx->used + REDO_REC_BYTES(len) > tx->cap) {
		fprintf(stderr, "pm_redo: error: a transaction stages more than the redo log's %zu bytes (use a smaller OPS_PER_TX)\n",
			tx->cap);
		exit(1);
	}
	struct redo_rec r = { d, len };
	memcpy(tx->stage + tx->used, &r, sizeof(r));
	memcpy(tx->stage + tx->used + sizeof(r), src, len);
	tx->used += REDO_REC_BYTES(len);
}

/*
 * redo_read -- copy `len` bytes at `src` into `out` as the transaction
 * sees them: memory, overlaid with the staged writes in their order
 */
static inline void
redo_read(const struct redo_tx *tx, void *out, const void *src, size_t len)
{
	uint64_t s = (uint64_t)(uintptr_t)src;
	memcpy(out, src, len);
	for (size_t off = 0; off < tx->used;) {
		struct redo_rec r;
		memcpy(&r, tx->stage + off, sizeof(r));
		uint64_t lo = r.dst > s ? r.dst : s;
		uint64_t hi = r.dst + r.len < s + len ? r.dst + r.len : s + len;
		if (lo < hi)
			memcpy((uint8_t *)out + (lo - s),
				tx->stage + off + sizeof(r) + (lo - r.dst), hi - lo);
		off += REDO_REC_BYTES(r.len);
	}
}

/* redo_commit -- log, commit durably, apply, clear */
static inline void
redo_commit(struct redo_tx *tx)
{
	struct redo_log *log = tx->log;
	if (tx->used) {
		if (pm_memcpy_nt) {
			pm_memcpy_nt(log->data, tx->stage, tx->used);
		} else {
			memcpy(log->data, tx->stage, tx->used);
			wl_flush(log->data, tx->used);
		}
		wl_ofence();
		log->used = tx->used;
		log->committed = 1;
		wl_flush(log, 16);
		wl_dfence();
		for (size_t off = 0; off < tx->used;) {
			struct redo_rec r;
			memcpy(&r, tx->stage + off, sizeof(r));
			void *dst = (void *)(uintptr_t)r.dst;
			memcpy(dst, tx->stage + off + sizeof(r), r.len);
			wl_flush(dst, r.len);
			off += REDO_REC_BYTES(r.len);
		}
		wl_ofence();
		log->committed = 0;
		wl_flush(log, 16);
		wl_ofence();
	}
	if (pm_tx_end)
		pm_tx_end(tx->id);
}

#endif /* PMLAB_PM_REDO_H */
