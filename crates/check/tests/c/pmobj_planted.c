/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * pmobj_planted.c -- a libpmemobj transaction with a planted bug for
 * pmlab check (crates/cli/tests/check.rs)
 *
 * Usage: pmobj_planted POOL ok|txlog   run the transactions
 *        pmobj_planted POOL check      open the pool (libpmemobj rolls an
 *                                      interrupted transaction back) and
 *                                      check total == 10 * counter: exit 1
 *                                      if not
 *
 * The transaction updates two fields of the root object. `ok` adds both
 * to the transaction (pmemobj_tx_add_range); `txlog` adds only the first
 * and stores the second anyway: after a crash in the transaction the
 * second is not rolled back.
 */
#include <libpmemobj.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct root {
	uint64_t counter;
	char pad[56];
	uint64_t total;
};

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: pmobj_planted POOL ok|txlog|check\n");
		return 2;
	}
	if (strcmp(argv[2], "check") == 0) {
		PMEMobjpool *pop = pmemobj_open(argv[1], "planted");
		if (pop == NULL) {
			printf("pmemobj_open: %s\n", pmemobj_errormsg());
			return 1;
		}
		struct root *r = pmemobj_direct(pmemobj_root(pop, sizeof(struct root)));
		int bad = r->total != 10 * r->counter;
		if (bad)
			printf("inconsistent: counter %llu, total %llu\n",
			       (unsigned long long)r->counter, (unsigned long long)r->total);
		pmemobj_close(pop);
		return bad;
	}
	PMEMobjpool *pop = pmemobj_create(argv[1], "planted", PMEMOBJ_MIN_POOL, 0644);
	if (pop == NULL) {
		fprintf(stderr, "pmobj_planted: %s\n", pmemobj_errormsg());
		return 2;
	}
	PMEMoid root = pmemobj_root(pop, sizeof(struct root));
	struct root *r = pmemobj_direct(root);
	int bug = strcmp(argv[2], "txlog") == 0;
	for (int i = 0; i < 3; i++) {
		TX_BEGIN(pop) {
			pmemobj_tx_add_range(root, 0, sizeof(uint64_t));
			if (!bug)
				pmemobj_tx_add_range(root, offsetof(struct root, total),
						     sizeof(uint64_t));
			r->counter += 1;
			r->total += 10;
		} TX_ONABORT {
			fprintf(stderr, "pmobj_planted: transaction aborted\n");
			return 1;
		} TX_END
	}
	pmemobj_close(pop);
	return 0;
}
