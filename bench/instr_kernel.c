/* instr_kernel.c -- cost of pmlab's instrumentation on compute-bound code.
 *
 * Two kernels, each timed with clock_gettime and printed as one line:
 *   hit  N loads of an 8 KiB table (always in cache, hits the hooks'
 *        filter), one instrumented load per iteration;
 *   sort an insertion sort of 2048 ints repeated, a typical compute-bound
 *        loop with loads and stores;
 *   miss a pointer chase over 256 MiB (every step misses every cache and
 *        the hooks' model: their slow path), one load per step.
 * Output: "kernel=hit iters=N ns_per_iter=X",
 *         "kernel=sort reps=R ns_per_rep=Y" and "kernel=miss steps=S ns_per_step=Z".
 * bench/instr.sh builds it with clang and with `pmlab cc` and compares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t table[1024];

static __attribute__((noinline)) uint64_t hit_kernel(long iters)
{
	uint64_t s = 0;
	unsigned idx = 1;
	for (long i = 0; i < iters; i++) {
		s += table[idx & 1023];
		idx = idx * 1103515245u + 12345u;
	}
	return s;
}

static __attribute__((noinline)) void sort_kernel(int *v, int n)
{
	for (int i = 1; i < n; i++) {
		int x = v[i], j = i - 1;
		while (j >= 0 && v[j] > x) {
			v[j + 1] = v[j];
			j--;
		}
		v[j + 1] = x;
	}
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 50000000;
	int reps = argc > 2 ? atoi(argv[2]) : 20;
	for (int i = 0; i < 1024; i++)
		table[i] = (uint64_t)i * 7;
	double t0 = now_ns();
	uint64_t s = hit_kernel(iters);
	double t1 = now_ns();
	printf("kernel=hit iters=%ld ns_per_iter=%.3f check=%llu\n", iters,
	       (t1 - t0) / iters, (unsigned long long)s);

	int n = 2048;
	int *v = malloc(n * sizeof(int));
	if (v == NULL)
		return 1;
	double total = 0;
	long check = 0;
	for (int r = 0; r < reps; r++) {
		unsigned x = 12345u + r;
		for (int i = 0; i < n; i++) {
			x = x * 1664525u + 1013904223u;
			v[i] = (int)(x >> 8);
		}
		double a = now_ns();
		sort_kernel(v, n);
		total += now_ns() - a;
		check += v[n / 2];
	}
	printf("kernel=sort reps=%d ns_per_rep=%.0f check=%ld\n", reps, total / reps, check);
	free(v);

	size_t lines = (256u << 20) / 64;
	long steps = argc > 3 ? atol(argv[3]) : 2000000;
	char *region = malloc(lines * 64);
	uint32_t *order = malloc(lines * sizeof(*order));
	if (region == NULL || order == NULL)
		return 1;
	for (size_t i = 0; i < lines; i++)
		order[i] = (uint32_t)i;
	uint64_t x = 88172645463325252ull;
	for (size_t i = lines - 1; i > 0; i--) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		size_t j = x % i;
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < lines; i++)
		*(void **)(region + (size_t)order[i] * 64) = region + (size_t)order[(i + 1) % lines] * 64;
	void **p = (void **)(region + (size_t)order[0] * 64);
	for (long k = 0; k < 200000; k++)
		p = (void **)*p;
	double m0 = now_ns();
	for (long k = 0; k < steps; k++)
		p = (void **)*p;
	double m1 = now_ns();
	printf("kernel=miss steps=%ld ns_per_step=%.2f check=%d\n", steps, (m1 - m0) / steps, p != NULL);
	free(order);
	free(region);
	return 0;
}
