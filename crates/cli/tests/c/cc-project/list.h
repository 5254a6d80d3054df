/* list.h -- a singly linked list, to give the instrumented build loads
 * and stores through pointers. */
#ifndef CC_PROJECT_LIST_H
#define CC_PROJECT_LIST_H

#include <stddef.h>

struct node {
	struct node *next;
	long value;
};

/* list_build -- link n nodes from the array `nodes` in a shuffled order */
struct node *list_build(struct node *nodes, size_t n, unsigned seed);

/* list_sum -- follow the list from head and add the values */
long list_sum(const struct node *head);

#endif
