/*
 * name_tree.c - an ordered set of names as an AVL tree (see name_tree.h).
 * Insert and remove are recursive: the depth is at most about 1.44 log2(n).
 */
#include "config.h"
#include "name_tree.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static int height(const struct name_node *n)
{
    return n ? n->height : 0;
}

static void update(struct name_node *n)
{
    int l = height(n->left), r = height(n->right);

    n->height = (l > r ? l : r) + 1;
}

static struct name_node *rotate_right(struct name_node *n)
{
    struct name_node *l = n->left;

    n->left = l->right;
    l->right = n;
    update(n);
    update(l);
    return l;
}

static struct name_node *rotate_left(struct name_node *n)
{
    struct name_node *r = n->right;

    n->right = r->left;
    r->left = n;
    update(n);
    update(r);
    return r;
}

/* Restores the balance at n, whose subtrees differ in height by 2 at most. */
static struct name_node *rebalance(struct name_node *n)
{
    int bal;

    update(n);
    bal = height(n->left) - height(n->right);
    if (bal > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (bal < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

struct name_node *name_tree_find(struct name_node *root, const char *name)
{
    while (root) {
        int cmp = strcmp(name, root->name);

        if (cmp == 0)
            return root;
        root = cmp < 0 ? root->left : root->right;
    }
    return NULL;
}

/* Inserts n below at; *found: the node of that name (n when inserted). */
static struct name_node *insert(struct name_node *at, struct name_node *n,
                                struct name_node **found)
{
    int cmp;

    if (!at) {
        n->left = n->right = NULL;
        n->height = 1;
        *found = n;
        return n;
    }
    cmp = strcmp(n->name, at->name);
    if (cmp == 0) {
        *found = at;
        return at;
    }
    if (cmp < 0)
        at->left = insert(at->left, n, found);
    else
        at->right = insert(at->right, n, found);
    return *found == n ? rebalance(at) : at;
}

struct name_node *name_tree_insert(struct name_node **root, struct name_node *n)
{
    struct name_node *found = NULL;

    *root = insert(*root, n, &found);
    return found;
}

/* Takes the leftmost node out of the subtree at; *min: that node. */
static struct name_node *remove_min(struct name_node *at, struct name_node **min)
{
    if (!at->left) {
        *min = at;
        return at->right;
    }
    at->left = remove_min(at->left, min);
    return rebalance(at);
}

static struct name_node *remove_node(struct name_node *at, struct name_node *n)
{
    struct name_node *min;
    int cmp;

    if (!at)
        return NULL;            /* not in the tree: nothing to do */
    cmp = strcmp(n->name, at->name);
    if (cmp < 0) {
        at->left = remove_node(at->left, n);
    } else if (cmp > 0) {
        at->right = remove_node(at->right, n);
    } else {
        /* at is n: its successor (the right subtree's first) takes its place. */
        if (!at->left || !at->right)
            return at->left ? at->left : at->right;
        at->right = remove_min(at->right, &min);
        min->left = at->left;
        min->right = at->right;
        at = min;
    }
    return rebalance(at);
}

void name_tree_remove(struct name_node **root, struct name_node *n)
{
    *root = remove_node(*root, n);
}

/* The first node whose name is > key (strict) or >= key (!strict). */
static struct name_node *bound(struct name_node *at, const char *key, bool strict)
{
    struct name_node *best = NULL;

    while (at) {
        int cmp = strcmp(at->name, key);

        if (cmp > 0 || (cmp == 0 && !strict)) {
            best = at;
            at = at->left;
        } else {
            at = at->right;
        }
    }
    return best;
}

struct name_node *name_tree_after(struct name_node *root, const char *after)
{
    if (!after) {
        while (root && root->left)
            root = root->left;
        return root;
    }
    return bound(root, after, true);
}

struct name_node *name_tree_from(struct name_node *root, const char *from)
{
    return bound(root, from, false);
}

void name_tree_destroy(struct name_node *root, void (*free_node)(struct name_node *n))
{
    if (!root)
        return;
    name_tree_destroy(root->left, free_node);
    name_tree_destroy(root->right, free_node);
    free_node(root);
}
