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
 * commit applies), as libraries do for fresh allocations.
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

#define REDO_LOG_BYTES (64 * 1024)
#define REDO_MAX_STAGED 64

/* the persistent part: a header line, then records */
struct redo_log {
	uint64_t committed; /* 1 while records must be replayed */
	uint64_t used;      /* bytes of records */
	uint8_t pad[48];
	uint8_t data[REDO_LOG_BYTES];
};

/* a record in the log: destination, length, then the bytes (8-aligned) */
struct redo_rec {
	uint64_t dst;
	uint64_t len;
};

/* one thread's transaction state (DRAM) */
struct redo_tx {
	struct redo_log *log; /* in PM */
	uint64_t id;
	size_t used;
	uint8_t stage[REDO_LOG_BYTES];
};

/* redo_init -- allocate the thread's log; 0 on success */
static inline int
redo_init(struct redo_tx *tx, uint64_t first_id)
{
	tx->log = wl_pm_alloc(sizeof(struct redo_log));
	tx->id = first_id;
	tx->used = 0;
	return tx->log ? 0 : -1;
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

/* redo_write -- stage `len` bytes for `dst` (applied at commit) */
static inline void
redo_write(struct redo_tx *tx, void *dst, const void *src, size_t len)
{
	size_t need = sizeof(struct redo_rec) + ((len + 7) & ~(size_t)7);
	if (tx->used + need > REDO_LOG_BYTES)
		abort(); /* transactions of the drivers are far smaller */
	struct redo_rec r = { (uint64_t)(uintptr_t)dst, len };
	memcpy(tx->stage + tx->used, &r, sizeof(r));
	memcpy(tx->stage + tx->used + sizeof(r), src, len);
	tx->used += need;
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
			off += sizeof(r) + ((r.len + 7) & ~(uint64_t)7);
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
