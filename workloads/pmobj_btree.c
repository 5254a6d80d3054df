/*
 * pmobj_btree.c -- a transactional persistent B-tree on libpmemobj
 *
 * A B-tree of order 8 (up to 7 keys per node) in a libpmemobj pool.
 * Inserts split full nodes on the way down; each insert, update and
 * delete is one libpmemobj transaction that snapshots every node it
 * changes (pmemobj_tx_add_range_direct) and allocates new nodes with
 * pmemobj_tx_zalloc. Deletes take the key out of its node (an inner
 * node's key is replaced by its predecessor from a leaf) and do not
 * rebalance: leaves may become empty, which searches and inserts handle.
 * With OPS_PER_TX > 1 that many operations share one transaction (group
 * commit). One DRAM lock serialises the threads' transactions.
 *
 * Usage and output: see wl_common.h.
 */
#include <libpmemobj.h>
#include <pthread.h>
#include <unistd.h>

#include "wl_common.h"

#define ORDER 8
#define MAXK (ORDER - 1)
#define POOL_SIZE (256UL << 20)

struct node {
	uint32_t n;
	uint32_t leaf;
	uint64_t keys[MAXK];
	uint64_t vals[MAXK];
	PMEMoid child[ORDER];
};

struct bt_root {
	PMEMoid top;
};

static PMEMobjpool *pop;
static struct bt_root *root;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct node *
N(PMEMoid o)
{
	return pmemobj_direct(o);
}

static void
snap(struct node *x)
{
	pmemobj_tx_add_range_direct(x, sizeof(*x));
}

static PMEMoid
new_node(int leaf)
{
	PMEMoid o = pmemobj_tx_zalloc(sizeof(struct node), 1);
	N(o)->leaf = (uint32_t)leaf;
	return o;
}

/* split_child -- split x's full child i around its median (x not full) */
static void
split_child(struct node *x, uint32_t i)
{
	struct node *y = N(x->child[i]);
	PMEMoid zo = new_node((int)y->leaf);
	struct node *z = N(zo);
	uint32_t mid = MAXK / 2;
	snap(y);
	snap(x);
	z->n = MAXK - mid - 1;
	for (uint32_t j = 0; j < z->n; j++) {
		z->keys[j] = y->keys[mid + 1 + j];
		z->vals[j] = y->vals[mid + 1 + j];
	}
	if (!y->leaf)
		for (uint32_t j = 0; j <= z->n; j++)
			z->child[j] = y->child[mid + 1 + j];
	for (uint32_t j = x->n; j > i; j--) {
		x->child[j + 1] = x->child[j];
		x->keys[j] = x->keys[j - 1];
		x->vals[j] = x->vals[j - 1];
	}
	x->child[i + 1] = zo;
	x->keys[i] = y->keys[mid];
	x->vals[i] = y->vals[mid];
	x->n++;
	y->n = mid;
}

/* bt_put -- insert or update, inside the running transaction */
static void
bt_put(uint64_t key, uint64_t val)
{
	struct node *r = N(root->top);
	if (r->n == MAXK) {
		PMEMoid so = new_node(0);
		N(so)->child[0] = root->top;
		pmemobj_tx_add_range_direct(&root->top, sizeof(PMEMoid));
		root->top = so;
		split_child(N(so), 0);
		r = N(so);
	}
	struct node *x = r;
	for (;;) {
		uint32_t i = 0;
		while (i < x->n && key > x->keys[i])
			i++;
		if (i < x->n && key == x->keys[i]) {
			pmemobj_tx_add_range_direct(&x->vals[i], sizeof(uint64_t));
			x->vals[i] = val;
			return;
		}
		if (x->leaf) {
			snap(x);
			for (uint32_t j = x->n; j > i; j--) {
				x->keys[j] = x->keys[j - 1];
				x->vals[j] = x->vals[j - 1];
			}
			x->keys[i] = key;
			x->vals[i] = val;
			x->n++;
			return;
		}
		if (N(x->child[i])->n == MAXK) {
			split_child(x, i);
			if (key == x->keys[i]) {
				pmemobj_tx_add_range_direct(&x->vals[i], sizeof(uint64_t));
				x->vals[i] = val;
				return;
			}
			if (key > x->keys[i])
				i++;
		}
		x = N(x->child[i]);
	}
}

/* remove_at -- take key i out of node x (keys and values shift left) */
static void
remove_at(struct node *x, uint32_t i)
{
	snap(x);
	for (uint32_t j = i; j + 1 < x->n; j++) {
		x->keys[j] = x->keys[j + 1];
		x->vals[j] = x->vals[j + 1];
	}
	x->n--;
}

/*
 * pred_leaf -- the leaf holding the largest key under child i of x: the
 * rightmost leaf of that subtree, or NULL when it is empty (then the
 * largest key may sit in an inner node, and the caller keeps the deleted
 * key as a tombstone instead)
 */
static struct node *
pred_leaf(struct node *x, uint32_t i)
{
	struct node *y = N(x->child[i]);
	while (!y->leaf)
		y = N(y->child[y->n]);
	return y->n > 0 ? y : NULL;
}

/* bt_del -- delete key inside the running transaction; 1 if deleted */
static int
bt_del(uint64_t key)
{
	struct node *x = N(root->top);
	while (x) {
		uint32_t i = 0;
		while (i < x->n && key > x->keys[i])
			i++;
		if (i < x->n && key == x->keys[i]) {
			if (x->vals[i] == 0)
				return 0; /* a tombstone: already deleted */
			struct node *p = x->leaf ? NULL : pred_leaf(x, i);
			if (p) {
				snap(x);
				x->keys[i] = p->keys[p->n - 1];
				x->vals[i] = p->vals[p->n - 1];
				remove_at(p, p->n - 1);
			} else if (x->leaf) {
				remove_at(x, i);
			} else {
				/* no leaf holds the predecessor: removal would
				 * need a merge; keep the key as a tombstone
				 * (value 0) instead */
				pmemobj_tx_add_range_direct(&x->vals[i], sizeof(uint64_t));
				x->vals[i] = 0;
			}
			return 1;
		}
		x = x->leaf ? NULL : N(x->child[i]);
	}
	return 0;
}

/* bt_tx -- op[0..n) as one transaction; how many deletes found their key */
static int
bt_tx(int t, const struct wl_op *op, int n)
{
	(void)t; /* one lock serialises the threads */
	volatile int found = 0;
	TX_BEGIN(pop) {
		for (int i = 0; i < n; i++) {
			if (op[i].del)
				found += bt_del(op[i].key);
			else
				bt_put(op[i].key, op[i].val);
		}
	} TX_ONABORT {
		fprintf(stderr, "pmobj_btree: error: a transaction of %d operations aborted: %s\n",
			n, pmemobj_errormsg());
		exit(1);
	} TX_END
	return found;
}

static void
walk(struct node *x, uint64_t *sum, uint64_t *count, uint64_t *last, int *sorted)
{
	for (uint32_t i = 0; i <= x->n; i++) {
		if (!x->leaf)
			walk(N(x->child[i]), sum, count, last, sorted);
		if (i < x->n) {
			if (x->keys[i] <= *last)
				*sorted = 0;
			*last = x->keys[i];
			if (x->vals[i]) {
				*sum += wl_mix(x->keys[i], x->vals[i]);
				(*count)++;
			}
		}
	}
}

int
main(int argc, char **argv)
{
	struct wl_args args = wl_parse(argc, argv);
	unlink(args.path);
	pop = pmemobj_create(args.path, "pmlab_btree", POOL_SIZE, 0600);
	if (!pop) {
		fprintf(stderr, "pmobj_btree: error: cannot create pool %s: %s\n",
			args.path, pmemobj_errormsg());
		return 1;
	}
	root = pmemobj_direct(pmemobj_root(pop, sizeof(*root)));
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(root, sizeof(*root));
		root->top = new_node(1);
	} TX_END

	struct wl_ops ops = { bt_tx, &lock };
	struct wl_result res = wl_run(&args, &ops);
	uint64_t sum = 0, present = 0, last = 0;
	int sorted = 1;
	walk(N(root->top), &sum, &present, &last, &sorted);
	if (!sorted) {
		fprintf(stderr, "pmobj_btree: error: keys out of order after the run\n");
		return 1;
	}
	wl_report("pmobj_btree", &args, &res, present, sum);
	pmemobj_close(pop);
	return 0;
}
