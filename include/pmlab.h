/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * pmlab.h -- the persistent-memory API of libpmlab (see docs/emulator.md)
 *
 * Programs allocate emulated persistent memory with pmalloc(), write it
 * with ordinary stores, and make it durable with pflush() + pm_drain() (or
 * the pm_memcpy_persist() family). Run under `pmlab run`, libpmlab injects
 * the delays of slower memory; linked with -lpmlab and run directly, every
 * function works and no delay is injected.
 *
 * Thread-safety: every function may be called from any thread.
 * Errors: functions that can fail set a per-thread code, read with
 * pmlab_errno() / pmlab_errormsg(); each entry point that can fail clears
 * it first.
 */

#ifndef PMLAB_H
#define PMLAB_H 1

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- versions --- */

#define PMLAB_MAJOR_VERSION 1
#define PMLAB_MINOR_VERSION 2   /* 1: pmlab_pm_register(), pmlab_pm_unregister(); 2: pm_tx_add() */

/*
 * pmlab_check_version -- check that the library matches this header
 *
 * Returns NULL when the library implements major version `major` and at
 * least minor version `minor`, else a static message saying what differs.
 * Usage: pmlab_check_version(PMLAB_MAJOR_VERSION, PMLAB_MINOR_VERSION).
 */
const char *pmlab_check_version(unsigned major, unsigned minor);

/* ------------------------------------------------------- error codes --- */

#define PMLAB_OK                0   /* success */
#define PMLAB_E_INVALID_FLAGS (-1)  /* flag bits outside the *_VALID_FLAGS mask */
#define PMLAB_E_NOMEM         (-2)  /* the PM pool is full or cannot be created */
#define PMLAB_E_NOPOOL        (-3)  /* no PM pool exists yet */
#define PMLAB_E_NOT_OURS      (-4)  /* pointer is not a live block of the pool */
#define PMLAB_E_INVALID_RANGE (-5)  /* range empty, at NULL, or wrapping around */
#define PMLAB_E_TOO_MANY_RANGES (-6) /* PMLAB_MAX_PM_RANGES ranges registered already */
#define PMLAB_E_NO_RANGE      (-7)  /* no registered range has this start and length */

/*
 * pmlab_errno -- the calling thread's last error code
 *
 * Returns PMLAB_OK or one of the PMLAB_E_* codes above, as left by the last
 * pmalloc(), pmalloc_flags(), pfree(), pmlab_pool_range(),
 * pmlab_pm_register() or pmlab_pm_unregister() of this thread.
 * See also: pmlab_errormsg().
 */
int pmlab_errno(void);

/*
 * pmlab_errormsg -- the text of the calling thread's last error
 *
 * Returns a static, NUL-terminated message (never NULL).
 * See also: pmlab_errno().
 */
const char *pmlab_errormsg(void);

/*
 * pmlab_emulating -- is delay injection on?
 *
 * Returns 1 when the program runs under `pmlab run` with the emulator
 * active, 0 when the API works without emulation.
 */
int pmlab_emulating(void);

/* ---------------------------------------------------------- the pool --- */

/* flags of pmalloc_flags() */
#define PMLAB_ALLOC_ZERO        (1U << 0)   /* zero the block */
#define PMLAB_ALLOC_VALID_FLAGS (PMLAB_ALLOC_ZERO)

/*
 * pmalloc -- allocate `size` bytes of emulated persistent memory
 *
 * The block is 64-byte (cache-line) aligned and comes from the PM pool:
 * an anonymous mapping, or a shared mapping of PMLAB_PM_FILE, bound to NUMA
 * node PMLAB_PM_NODE in two-memory mode. The pool (PMLAB_PM_POOL_SIZE,
 * default 1 GiB of address space) is created on the first call.
 *
 * Returns the block, or NULL with errno ENOMEM and pmlab_errno()
 * PMLAB_E_NOMEM when the pool is full or cannot be created.
 * See also: pmalloc_flags(), pfree(), pm_is_pmem().
 */
void *pmalloc(size_t size);

/*
 * pmalloc_flags -- pmalloc() with flags
 *
 * `flags` is 0 or PMLAB_ALLOC_ZERO (within PMLAB_ALLOC_VALID_FLAGS).
 * Returns the block, or NULL with:
 *   PMLAB_E_INVALID_FLAGS (errno EINVAL): unknown flag bits;
 *   PMLAB_E_NOMEM (errno ENOMEM): the pool is full or cannot be created.
 * See also: pmalloc().
 */
void *pmalloc_flags(size_t size, uint32_t flags);

/*
 * pfree -- return a block to the pool
 *
 * NULL is ignored. A pointer that is not a live pool block is left alone
 * and pmlab_errno() becomes PMLAB_E_NOT_OURS (nothing is corrupted).
 * See also: pmalloc().
 */
void pfree(void *ptr);

/*
 * pmlab_pool_range -- where the pool is
 *
 * Stores the pool's base and size through the non-NULL pointers.
 * Returns PMLAB_OK, or PMLAB_E_NOPOOL when nothing was allocated yet.
 * See also: pm_is_pmem().
 */
int pmlab_pool_range(void **base, size_t *size);

/*
 * pm_is_pmem -- is [addr, addr+len) PM?
 *
 * Returns 1 if the range lies inside the PM pool or inside one range
 * registered with pmlab_pm_register(), else 0.
 */
int pm_is_pmem(const void *addr, size_t len);

/* ------------------------------------------- the program's own mappings --- */

/* how many ranges pmlab_pm_register() keeps at once */
#define PMLAB_MAX_PM_RANGES 64

/*
 * pmlab_pm_register -- [base, base+len) is persistent memory
 *
 * For programs that map PM themselves (a file mapped shared, a DAX file, a
 * pool of their own): from this call on, the range counts as PM like the
 * pmalloc() pool. Under `pmlab run --source instrumented` its loads and
 * stores are given the PM latency (the first registration, or the first
 * pmalloc(), ends the default "everything is PM" mode: from then on only
 * the pool and registered ranges are PM; PMLAB_INSTR_PM=all keeps
 * everything PM); under `pmlab trace` its stores are recorded one by one
 * (for programs built with `pmlab cc` or `pmlab cargo`); pm_is_pmem()
 * answers 1 for it. The hw and synthetic counter sources see no
 * addresses and are unaffected. Flushes and fences are recorded when they
 * go through pflush(), pm_fence() and pm_drain(), wherever they point; a
 * clwb or sfence of the program's own (inline assembly) is not seen.
 *
 * The mapping itself is left alone (not remapped, bound or flushed). Ranges
 * may overlap; registering the same range twice takes two entries.
 * Programs that must run without libpmlab too look the function up at run
 * time: dlsym(RTLD_DEFAULT, "pmlab_pm_register"), or a weak reference.
 *
 * Returns PMLAB_OK, or (also left in pmlab_errno()):
 *   PMLAB_E_INVALID_RANGE: base is NULL, len is 0, or base+len wraps;
 *   PMLAB_E_TOO_MANY_RANGES: PMLAB_MAX_PM_RANGES ranges are registered.
 * See also: pmlab_pm_unregister(), pm_is_pmem(), pmalloc().
 */
int pmlab_pm_register(void *base, size_t len);

/*
 * pmlab_pm_unregister -- [base, base+len) is no longer persistent memory
 *
 * Call it before unmapping a registered range (its addresses may be reused
 * for DRAM). `base` and `len` must be those given to pmlab_pm_register();
 * one registration is removed. Unregistering the last range does not bring
 * back the "everything is PM" default.
 *
 * Returns PMLAB_OK, or (also left in pmlab_errno()):
 *   PMLAB_E_INVALID_RANGE: base is NULL, len is 0, or base+len wraps;
 *   PMLAB_E_NO_RANGE: no registered range has this start and length.
 * See also: pmlab_pm_register().
 */
int pmlab_pm_unregister(void *base, size_t len);

/* ------------------------------------------------------- persistence --- */

/*
 * pflush -- write back the cache lines of [addr, addr+len)
 *
 * Uses clwb, else clflushopt, else clflush, as cpuid reports; the
 * environment variable PMLAB_FLUSH=clflushopt or clflush picks an older
 * instruction (never one the CPU lacks; `pmlab run` and `pmlab trace`
 * refuse other values). clflush and clflushopt evict the line. Under the
 * emulator each line is posted to the write model (PMLAB_WRITE_LATENCY,
 * PMLAB_WRITE_PARALLELISM): flushes overlap, and the next durability point
 * pays only for what has not completed (the pcommit model of Quartz
 * section 6). Not durable before pm_drain() or pm_dfence(). No return value.
 * See also: pm_drain(), pm_persist().
 */
void pflush(const void *addr, size_t len);

/*
 * pm_fence -- ordering point (sfence): later stores and flushes are ordered
 * after earlier ones. Does not wait for the write model.
 * See also: pm_drain(), pm_ofence().
 */
void pm_fence(void);

/*
 * pm_drain -- durability point: earlier flushes are complete when it
 * returns. Under the emulator the thread stalls for the flushes still in
 * flight in the write model.
 * See also: pflush(), pm_dfence().
 */
void pm_drain(void);

/*
 * pm_persist -- pflush(addr, len) then pm_drain().
 */
void pm_persist(const void *addr, size_t len);

/*
 * pm_ofence -- HOPS ordering fence: ends a persist epoch, ordering only.
 * See also: pm_dfence() (WHISPER/HOPS, docs/emulator.md).
 */
void pm_ofence(void);

/*
 * pm_dfence -- HOPS durability fence: waits until earlier writes are
 * durable (pays the write model like pm_drain()).
 * See also: pm_ofence().
 */
void pm_dfence(void);

/*
 * pm_tx_begin, pm_tx_end -- mark a failure-atomic transaction `id` for
 * traces (pmlab trace); no effect on emulation.
 */
void pm_tx_begin(uint64_t id);
void pm_tx_end(uint64_t id);

/*
 * pm_tx_add -- declare that the calling thread's open transaction (between
 * pm_tx_begin() and pm_tx_end()) logs [addr, addr+len): the program's own
 * undo or redo log covers a crash in the middle of its stores there.
 *
 * For traces only (`pmlab check`, like pmemobj_tx_add_range for
 * libpmemobj): no effect on memory or emulation, no return value. A
 * transaction that declares at least one range is checked: each PM store
 * inside it must fall in a declared range, the log itself included
 * (declare the log area too). Since minor version 2.
 * See also: pm_tx_begin().
 */
void pm_tx_add(const void *addr, size_t len);

/*
 * pm_memcpy_persist -- copy `len` bytes, flush them, drain
 *
 * Regions may overlap (memmove semantics). Returns `dst`.
 * See also: pm_memcpy_nt(), pm_memset_persist().
 */
void *pm_memcpy_persist(void *dst, const void *src, size_t len);

/*
 * pm_memcpy_nt -- copy with non-temporal (cache-bypassing) stores
 *
 * Regions must not overlap. Not durable until pm_drain() (the stores are
 * posted to the write model like flushes). Returns `dst`.
 * See also: pm_memcpy_persist().
 */
void *pm_memcpy_nt(void *dst, const void *src, size_t len);

/*
 * pm_memset_persist -- fill `len` bytes with `c`, flush them, drain.
 * Returns `dst`.
 */
void *pm_memset_persist(void *dst, int c, size_t len);

/*
 * pm_annotate_user_data -- mark [addr, addr+len) as user data (as opposed
 * to logs or metadata) in traces, for write amplification (pmlab analyze).
 * No effect on emulation.
 */
void pm_annotate_user_data(const void *addr, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* PMLAB_H */
