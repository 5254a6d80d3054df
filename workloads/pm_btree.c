/*
 * pm_btree.c -- a persistent B-tree on pmlab.h with redo logging
 *
 * The same B-tree as pmobj_btree.c (order 8, splits on the way down,
 * deletes without rebalancing; same keys, values and checksum for the same
 * arguments), in memory from pmalloc(), made crash-consistent with the
 * redo log of pm_redo.h at node granularity: a transaction reads nodes
 * through R(), and W() gives it a DRAM copy of a node to modify; at commit
 * every modified node's new image is logged (one durability point), then
 * written in place. Nodes allocated by the transaction are written
 * directly and flushed before the commit. One DRAM lock serialises the
 * threads. Key and value bytes are annotated as user data.
 *
 * A transaction holds OPS_PER_TX operations (default 1), which share its
 * write set: a node changed by several of them is logged once. The write
 * set and the log have room for 8 nodes per operation (at least 64 nodes
 * and 64 KiB); a transaction that changes more fails with an error.
 *
 * Usage and output: see wl_common.h (the pool file argument is ignored).
 */
#include <pthread.h>

#include "pm_redo.h"
#include "wl_common.h"

#define ORDER 8
#define MAXK (ORDER - 1)
#define WSET 64          /* the write set of a one-operation transaction */
#define WSET_PER_OP 8    /* write-set room per operation beyond that */

struct node {
	uint32_t n;
	uint32_t leaf;
	uint64_t keys[MAXK];
	uint64_t vals[MAXK];
	struct node *child[ORDER];
};

struct bt_root {
	struct node *top;
};

/* the write set of the running transaction (DRAM; ws_init sizes it) */
static struct {
	int n, nfresh, cap;
	struct node **pm;    /* [cap] */
	struct node *copy;   /* [cap] */
	struct node **fresh; /* [cap] */
	struct node *top;    /* new root, or NULL */
} ws;

/* ws_init -- room for the nodes of transactions of ops_per_tx operations */
static int
ws_init(int ops_per_tx)
{
	ws.cap = ops_per_tx * WSET_PER_OP > WSET ? ops_per_tx * WSET_PER_OP : WSET;
	ws.pm = malloc((size_t)ws.cap * sizeof(*ws.pm));
	ws.copy = malloc((size_t)ws.cap * sizeof(*ws.copy));
	ws.fresh = malloc((size_t)ws.cap * sizeof(*ws.fresh));
	return ws.pm && ws.copy && ws.fresh ? 0 : -1;
}

/* ws_full -- the error of a transaction that changes too many nodes */
static void
ws_full(void)
{
	fprintf(stderr, "pm_btree: error: a transaction changes more than %d nodes (use a smaller OPS_PER_TX)\n",
		ws.cap);
	exit(1);
}

static struct bt_root *root; /* in PM */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct redo_tx tx;

static int
is_fresh(struct node *p)
{
	for (int i = 0; i < ws.nfresh; i++)
		if (ws.fresh[i] == p)
			return 1;
	return 0;
}

/* R -- the transaction's view of node p */
static struct node *
R(struct node *p)
{
	for (int i = 0; i < ws.n; i++)
		if (ws.pm[i] == p)
			return &ws.copy[i];
	return p;
}

/* W -- a writable view of node p (a DRAM copy unless p is new) */
static struct node *
W(struct node *p)
{
	if (is_fresh(p))
		return p;
	for (int i = 0; i < ws.n; i++)
		if (ws.pm[i] == p)
			return &ws.copy[i];
	if (ws.n == ws.cap)
		ws_full();
	ws.pm[ws.n] = p;
	ws.copy[ws.n] = *p;
	return &ws.copy[ws.n++];
}

static struct node *
fresh_node(int leaf)
{
	if (ws.nfresh == ws.cap)
		ws_full();
	struct node *p = wl_pm_alloc(sizeof(*p));
	if (!p) {
		fprintf(stderr, "pm_btree: error: the PM pool is full (raise PMLAB_PM_POOL_SIZE)\n");
		exit(1);
	}
	p->leaf = (uint32_t)leaf;
	ws.fresh[ws.nfresh++] = p;
	return p;
}

static struct node *
top(void)
{
	return ws.top ? ws.top : root->top;
}

static void
tx_begin(void)
{
	ws.n = ws.nfresh = 0;
	ws.top = NULL;
	redo_begin(&tx);
}

static void
tx_commit(void)
{
	for (int i = 0; i < ws.nfresh; i++)
		wl_flush(ws.fresh[i], sizeof(struct node));
	for (int i = 0; i < ws.n; i++)
		redo_write(&tx, ws.pm[i], &ws.copy[i], sizeof(struct node));
	if (ws.top)
		redo_write(&tx, &root->top, &ws.top, sizeof(ws.top));
	redo_commit(&tx);
}

/* split_child -- split x's full child i around its median (x not full) */
static void
split_child(struct node *xp, uint32_t i)
{
	struct node *yp = R(xp)->child[i];
	struct node *y = W(yp);
	struct node *z = fresh_node((int)y->leaf);
	struct node *x = W(xp);
	uint32_t mid = MAXK / 2;
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
	x->child[i + 1] = z;
	x->keys[i] = y->keys[mid];
	x->vals[i] = y->vals[mid];
	x->n++;
	y->n = mid;
}

/* bt_put -- insert or update, inside the running transaction */
static void
bt_put(uint64_t key, uint64_t val)
{
	struct node *xp = top();
	if (R(xp)->n == MAXK) {
		struct node *s = fresh_node(0);
		s->child[0] = xp;
		ws.top = s;
		split_child(s, 0);
		xp = s;
	}
	for (;;) {
		struct node *x = R(xp);
		uint32_t i = 0;
		while (i < x->n && key > x->keys[i])
			i++;
		if (i < x->n && key == x->keys[i]) {
			W(xp)->vals[i] = val;
			wl_user(&xp->vals[i], sizeof(val));
			break;
		}
		if (x->leaf) {
			struct node *w = W(xp);
			for (uint32_t j = w->n; j > i; j--) {
				w->keys[j] = w->keys[j - 1];
				w->vals[j] = w->vals[j - 1];
			}
			w->keys[i] = key;
			w->vals[i] = val;
			w->n++;
			wl_user(&xp->keys[i], sizeof(key));
			wl_user(&xp->vals[i], sizeof(val));
			break;
		}
		if (R(x->child[i])->n == MAXK) {
			split_child(xp, i);
			x = R(xp);
			if (key == x->keys[i]) {
				W(xp)->vals[i] = val;
				wl_user(&xp->vals[i], sizeof(val));
				break;
			}
			if (key > x->keys[i])
				i++;
		}
		xp = R(xp)->child[i];
	}
}

/*
 * pred_leaf -- the rightmost leaf under child i of x, or NULL when it is
 * empty (the caller then keeps the key as a tombstone; see pmobj_btree.c)
 */
static struct node *
pred_leaf(struct node *xp, uint32_t i)
{
	struct node *yp = R(xp)->child[i];
	while (!R(yp)->leaf)
		yp = R(yp)->child[R(yp)->n];
	return R(yp)->n > 0 ? yp : NULL;
}

static void
remove_at(struct node *xp, uint32_t i)
{
	struct node *x = W(xp);
	for (uint32_t j = i; j + 1 < x->n; j++) {
		x->keys[j] = x->keys[j + 1];
		x->vals[j] = x->vals[j + 1];
	}
	x->n--;
}

/* bt_del -- delete inside the running transaction; 1 if key was present */
static int
bt_del(uint64_t key)
{
	int found = 0;
	struct node *xp = top();
	while (xp) {
		struct node *x = R(xp);
		uint32_t i = 0;
		while (i < x->n && key > x->keys[i])
			i++;
		if (i < x->n && key == x->keys[i]) {
			if (x->vals[i] == 0)
				break; /* a tombstone: already deleted */
			found = 1;
			struct node *pp = x->leaf ? NULL : pred_leaf(xp, i);
			if (pp) {
				struct node *p = R(pp);
				uint64_t k = p->keys[p->n - 1], v = p->vals[p->n - 1];
				struct node *w = W(xp);
				w->keys[i] = k;
				w->vals[i] = v;
				remove_at(pp, R(pp)->n - 1);
			} else if (x->leaf) {
				remove_at(xp, i);
			} else {
				W(xp)->vals[i] = 0; /* as pmobj_btree.c */
			}
			break;
		}
		xp = x->leaf ? NULL : x->child[i];
	}
	return found;
}

/* bt_tx -- op[0..n) as one transaction (one lock serialises the threads) */
static int
bt_tx(int t, const struct wl_op *op, int n)
{
	(void)t;
	int found = 0;
	tx_begin();
	for (int i = 0; i < n; i++) {
		if (op[i].del)
			found += bt_del(op[i].key);
		else
			bt_put(op[i].key, op[i].val);
	}
	tx_commit();
	return found;
}

static void
walk(struct node *x, uint64_t *sum, uint64_t *count, uint64_t *last, int *sorted)
{
	for (uint32_t i = 0; i <= x->n; i++) {
		if (!x->leaf)
			walk(x->child[i], sum, count, last, sorted);
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
	if (ws_init(args.ops_per_tx)) {
		fprintf(stderr, "pm_btree: error: out of memory for the write set\n");
		return 1;
	}
	root = wl_pm_alloc(sizeof(*root));
	/* the log holds the whole write set and the root pointer */
	if (!root || redo_init(&tx, 0, (size_t)ws.cap * REDO_REC_BYTES(sizeof(struct node)) + REDO_REC_BYTES(sizeof(struct node *)))) {
		fprintf(stderr, "pm_btree: error: cannot allocate the root or the redo log in PM\n");
		return 1;
	}
	tx_begin();
	ws.top = fresh_node(1);
	tx_commit();

	struct wl_ops ops = { bt_tx, &lock };
	struct wl_result res = wl_run(&args, &ops);
	uint64_t sum = 0, present = 0, last = 0;
	int sorted = 1;
	walk(root->top, &sum, &present, &last, &sorted);
	if (!sorted) {
		fprintf(stderr, "pm_btree: error: keys out of order after the run\n");
		return 1;
	}
	wl_report("pm_btree", &args, &res, present, sum);
	return 0;
}
