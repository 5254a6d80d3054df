/* bench/memcpy_kernel.c -- cost of libc copies through pmlab's memcpy
 * interposer (bench/memfns.sh). Copies SIZE bytes between two buffers
 * that stay in the cache, N times, through a volatile function pointer
 * so that the compiler cannot inline the call. Prints one line:
 *   memcpy: size=64 calls=20000000 ns_per_call=...
 * Usage: memcpy_kernel SIZE N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *(*volatile copy)(void *, const void *, size_t) = memcpy;

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
	long n = argc > 2 ? atol(argv[2]) : 20000000;
	char *a = malloc(size + 64), *b = malloc(size + 64);
	if (!a || !b || size == 0 || n <= 0)
		return 2;
	memset(a, 1, size);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++)
		copy(b, a, size);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
	printf("memcpy: size=%zu calls=%ld ns_per_call=%.2f check=%d\n", size, n, ns / n, b[size - 1]);
	return 0;
}
