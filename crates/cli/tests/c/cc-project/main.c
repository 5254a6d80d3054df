/* main.c -- build a list of N nodes (argv[1], default 1000), print the sum
 * of its values: N*(N-1)/2 when every node was visited once. */
#include <stdio.h>
#include <stdlib.h>
#include "list.h"

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000;
	struct node *nodes;
	if (n == 0) {
		fprintf(stderr, "usage: listsum N (N >= 1)\n");
		return 2;
	}
	nodes = calloc(n, sizeof(*nodes));
	if (nodes == NULL) {
		perror("calloc");
		return 1;
	}
	printf("sum %ld\n", list_sum(list_build(nodes, n, 7)));
	free(nodes);
	return 0;
}
