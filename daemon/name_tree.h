/*
 * name_tree.h - an ordered set of names: an intrusive AVL tree.
 *
 * The lock table keeps its locks in one, by name. Unlike tsearch(3), it
 * can start a walk at any name: a listing resumes after the last name it
 * wrote, and a glob with a literal prefix starts at the prefix. Every
 * operation is O(log n) (the tree stays balanced whatever the names).
 * The tree allocates nothing: a node lives inside its owner's structure.
 */
#ifndef LOCKBROKER_NAME_TREE_H
#define LOCKBROKER_NAME_TREE_H

struct name_node {
    struct name_node *left, *right;  /* names before and after this one */
    int height;                      /* of the subtree rooted here: a leaf is 1 */
    const char *name;                /* the key (strcmp order); the owner's, set
                                      * before the insert and not changed while in */
};

/* The node named name, or NULL. */
struct name_node *name_tree_find(struct name_node *root, const char *name);

/* Inserts n (n->name set); returns n, or the node already named so (then n
 * is not inserted). */
struct name_node *name_tree_insert(struct name_node **root, struct name_node *n);

/* Removes n, which is in the tree. */
void name_tree_remove(struct name_node **root, struct name_node *n);

/* The first node in name order whose name is greater than after (NULL:
 * the first node of all), or NULL when there is none. */
struct name_node *name_tree_after(struct name_node *root, const char *after);

/* The first node whose name is at least from, or NULL. */
struct name_node *name_tree_from(struct name_node *root, const char *from);

/* Calls free_node for every node, children before their parent. */
void name_tree_destroy(struct name_node *root, void (*free_node)(struct name_node *n));

#endif
