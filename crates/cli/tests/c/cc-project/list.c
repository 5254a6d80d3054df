/* list.c -- list_build and list_sum (see list.h). */
#include "list.h"

static size_t gcd(size_t a, size_t b)
{
	while (b != 0) {
		size_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

struct node *list_build(struct node *nodes, size_t n, unsigned seed)
{
	size_t i;
	/* a permutation by a multiplicative step that is coprime with n */
	size_t step = 2 * (seed % 97) + 1;
	while (gcd(step, n) != 1)
		step += 2;
	for (i = 0; i < n; i++)
		nodes[i].value = (long)i;
	for (i = 0; i + 1 < n; i++)
		nodes[(i * step) % n].next = &nodes[((i + 1) * step) % n];
	nodes[((n - 1) * step) % n].next = NULL;
	return &nodes[0];
}

long list_sum(const struct node *head)
{
	long s = 0;
	for (; head != NULL; head = head->next)
		s += head->value;
	return s;
}
