/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * pmobj_open.c -- libpmemobj's own recovery as a check command for
 * pmlab crash: open the pool (which rolls back an interrupted transaction)
 * and close it. Exit 0 when the pool opens, 1 when libpmemobj refuses it.
 *
 * Usage: pmobj_open POOL
 */
#include <libpmemobj.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: pmobj_open POOL\n");
		return 2;
	}
	PMEMobjpool *pop = pmemobj_open(argv[1], NULL);
	if (pop == NULL) {
		printf("pmemobj_open: %s\n", pmemobj_errormsg());
		return 1;
	}
	pmemobj_close(pop);
	return 0;
}
