/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * planted.c -- a record made durable with pmlab.h, with planted bugs for
 * pmlab check and pmlab crash (crates/check/tests/planted.rs)
 *
 * Usage: planted VARIANT     write the record (PMLAB_PM_FILE names the pool)
 *        planted check       recovery check of the pool: exit 1 if it is
 *                            inconsistent (valid set, checksum wrong)
 *
 * The record spans three lines: the commit flag `valid` (line 0), the
 * length and checksum (line 1) and the payload (line 2). Recovery trusts
 * the payload when `valid` is set. Variants:
 *   ok        payload, length and checksum durable, then the flag
 *   noflush   the payload line is never flushed (missing flush)
 *   nofence   nothing is fenced before the transaction ends (missing fence)
 *   txlog     the transaction logs the flag and the length, not the payload
 *   txlog-ok  the transaction logs everything it writes
 *   late      the flag is made durable before the length and checksum
 *             (recovery trusts fields written after the commit flag)
 */
#include <pmlab.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct record {
	uint64_t valid;
	char pad0[56];
	uint64_t len;
	uint64_t sum;
	char pad1[48];
	char data[64];
};

static uint64_t checksum(const char *p, uint64_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (uint64_t i = 0; i < len && i < 64; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
	return h;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: planted ok|noflush|nofence|txlog|txlog-ok|late|check\n");
		return 2;
	}
	const char *v = argv[1];
	struct record *r = pmalloc(sizeof(*r));
	if (r == NULL) {
		fprintf(stderr, "planted: pmalloc: %s\n", pmlab_errormsg());
		return 2;
	}
	if (strcmp(v, "check") == 0) {
		if (r->valid == 1 && r->sum != checksum(r->data, r->len)) {
			printf("inconsistent: valid record with len %llu and a wrong checksum\n",
			       (unsigned long long)r->len);
			return 1;
		}
		return 0;
	}
	const char msg[] = "hello, persistent world";
	int late = strcmp(v, "late") == 0;
	int txlog = strcmp(v, "txlog") == 0 || strcmp(v, "txlog-ok") == 0;

	pm_tx_begin(1);
	if (txlog) {
		pm_tx_add(&r->valid, sizeof(r->valid));
		pm_tx_add(&r->len, 2 * sizeof(uint64_t));
		if (strcmp(v, "txlog-ok") == 0)
			pm_tx_add(r->data, sizeof(r->data));
	}
	for (size_t i = 0; i < sizeof(msg); i++)
		r->data[i] = msg[i];
	if (strcmp(v, "noflush") != 0)
		pflush(r->data, sizeof(r->data));
	if (!late) {
		r->len = sizeof(msg);
		r->sum = checksum(r->data, r->len);
		pflush(&r->len, 2 * sizeof(uint64_t));
	}
	if (strcmp(v, "nofence") != 0)
		pm_drain();
	r->valid = 1;
	pflush(&r->valid, sizeof(r->valid));
	if (strcmp(v, "nofence") != 0)
		pm_drain();
	if (late) {
		r->len = sizeof(msg);
		r->sum = checksum(r->data, r->len);
		pm_persist(&r->len, 2 * sizeof(uint64_t));
	}
	pm_tx_end(1);
	return 0;
}
