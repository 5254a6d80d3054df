/*
 * pm_register.c -- a C program that maps PM itself, for the tests of
 * pmlab_pm_register (crates/cli/tests/pm_ranges.rs).
 *
 * pm_register FILE: maps FILE (64 KiB, created) shared, registers the
 * mapping, checks pm_is_pmem and the error codes, then makes 100 8-byte
 * records durable one by one (a volatile store, pflush of its line,
 * pm_fence), unregisters and prints the range as "base=... len=...".
 * Linked with libpmlab (pmlab cc); exits 1 naming a failed check.
 */
#include <fcntl.h>
#include <pmlab.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEN (64 * 1024)
#define RECORDS 100

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "pm_register: failed: %s\n", #c); return 1; } } while (0)

int main(int argc, char **argv)
{
	CHECK(argc == 2);
	CHECK(pmlab_check_version(PMLAB_MAJOR_VERSION, PMLAB_MINOR_VERSION) == NULL);
	int fd = open(argv[1], O_RDWR | O_CREAT, 0644);
	CHECK(fd >= 0 && ftruncate(fd, LEN) == 0);
	char *base = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	CHECK(base != MAP_FAILED);

	CHECK(pm_is_pmem(base, LEN) == 0);
	CHECK(pmlab_pm_register(base, LEN) == PMLAB_OK);
	CHECK(pm_is_pmem(base, LEN) == 1);
	CHECK(pm_is_pmem(base, LEN + 1) == 0);
	CHECK(pmlab_pm_register(NULL, 64) == PMLAB_E_INVALID_RANGE);
	CHECK(pmlab_errno() == PMLAB_E_INVALID_RANGE);
	CHECK(pmlab_pm_unregister(base, 64) == PMLAB_E_NO_RANGE);

	for (int i = 0; i < RECORDS; i++) {
		volatile uint64_t *p = (volatile uint64_t *)(base + 64 * i);
		*p = (uint64_t)i * 3 + 1;
		pflush((const void *)p, sizeof(*p));
		pm_fence();
	}

	CHECK(pmlab_pm_unregister(base, LEN) == PMLAB_OK);
	CHECK(pm_is_pmem(base, LEN) == 0);
	printf("base=%lu len=%d\n", (unsigned long)(uintptr_t)base, LEN);
	munmap(base, LEN);
	return 0;
}
