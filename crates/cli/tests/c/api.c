/* api.c -- every function of pmlab.h, linked with -lpmlab. Run directly it
 * must work with no emulation; run under `pmlab run` it must too.
 * Prints "api: ok emulating=N". */
#include <errno.h>
#include <pmlab.h>
#include <stdio.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("api: FAILED %s (line %d)\n", #c, __LINE__); return 1; } } while (0)

int main(void)
{
	CHECK(pmlab_check_version(PMLAB_MAJOR_VERSION, PMLAB_MINOR_VERSION) == NULL);
	CHECK(pmlab_check_version(PMLAB_MAJOR_VERSION + 1, 0) != NULL);
	void *base; size_t size;
	char *p = pmalloc(4096);
	CHECK(p != NULL);
	CHECK(((unsigned long)p & 63) == 0);
	CHECK(pm_is_pmem(p, 4096) == 1);
	CHECK(pmlab_pool_range(&base, &size) == PMLAB_OK && size >= 4096);
	char *z = pmalloc_flags(128, PMLAB_ALLOC_ZERO);
	CHECK(z != NULL && z[127] == 0);
	CHECK(pmalloc_flags(8, 0x80) == NULL && pmlab_errno() == PMLAB_E_INVALID_FLAGS && errno == EINVAL);
	CHECK(strlen(pmlab_errormsg()) > 0);
	memset(p, 1, 4096);
	pflush(p, 4096);
	pm_fence();
	pm_drain();
	pm_persist(p, 64);
	pm_ofence();
	pm_dfence();
	pm_tx_begin(7);
	char src[300];
	memset(src, 9, sizeof src);
	CHECK(pm_memcpy_persist(p + 3, src, sizeof src) == p + 3 && p[302] == 9);
	CHECK(pm_memcpy_nt(p + 1000, src, sizeof src) == p + 1000 && p[1299] == 9);
	pm_drain();
	CHECK(pm_memset_persist(p, 5, 10) == p && p[9] == 5);
	pm_annotate_user_data(p, 10);
	pm_tx_end(7);
	pfree(p);
	CHECK(pmlab_errno() == PMLAB_OK);
	pfree(src);
	CHECK(pmlab_errno() == PMLAB_E_NOT_OURS);
	pfree(NULL);
	CHECK(pmalloc((size_t)1 << 50) == NULL && pmlab_errno() == PMLAB_E_NOMEM);
	/* many flushes then one drain: the write model overlaps them */
	char *q = pmalloc(1 << 20);
	CHECK(q != NULL);
	for (int r = 0; r < 20; r++) {
		memset(q, r, 1 << 20);
		pflush(q, 1 << 20);
		pm_drain();
	}
	pfree(q);
	printf("api: ok emulating=%d\n", pmlab_emulating());
	return 0;
}
