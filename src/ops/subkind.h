/*
 * subkind.h - ops-internal: the one implementation of the operations on
 * subscription documents, for both kinds that have them: subscriptions
 * (5.8, subscriptions.c) and context source registration subscriptions
 * (5.11, csubscriptions.c). notify/ validates and parses the document, the
 * store keeps it (one store_obj kind each), and an in-memory registry
 * (notify/'s or reg/'s) is what matches against it; a kind names its parser
 * and its registry. Writes of both kinds are serialised by one mutex, so
 * that store and registries always agree.
 */
#ifndef CORAINE_OPS_SUBKIND_H
#define CORAINE_OPS_SUBKIND_H

#include "ops.h"

#include "../notify/notify.h"

typedef struct ops_sub_kind {
    store_obj_kind_t kind;
    const char      *what;       /* "subscription", for log lines */
    notify_sub_t  *(*build)(const char *tenant, const char *doc, size_t len, int64_t now, problem_t *p);
    bool           (*add)(notify_sub_t *s, bool initial, problem_t *p);   /* initial: created now, not restored */
    bool           (*replace)(notify_sub_t *s, problem_t *p);
    bool           (*remove)(const char *tenant, const char *id, problem_t *p);
    notify_sub_t  *(*find)(const char *tenant, const char *id);         /* a reference, or NULL */
    notify_sub_t **(*list)(const char *tenant, size_t offset, size_t limit, arena_t *a, size_t *n, size_t *total);
    bool           (*tenant_known)(const char *tenant);                 /* the registry knows the tenant */
} ops_sub_kind_t;

bool           ops_subk_create(const ops_sub_kind_t *k, const ops_req_t *rq, const json_t *body, const char **id,
                               problem_t *p);
notify_sub_t  *ops_subk_retrieve(const ops_sub_kind_t *k, const ops_req_t *rq, const char *id, problem_t *p);
bool           ops_subk_update(const ops_sub_kind_t *k, const ops_req_t *rq, const char *id, const json_t *body,
                               problem_t *p);
bool           ops_subk_delete(const ops_sub_kind_t *k, const ops_req_t *rq, const char *id, problem_t *p);
notify_sub_t **ops_subk_query(const ops_sub_kind_t *k, const ops_req_t *rq, size_t offset, size_t limit, size_t *n,
                              size_t *total, problem_t *p);
size_t         ops_subk_restore(const ops_sub_kind_t *k, store_t *s);
void           ops_subk_sync(const ops_sub_kind_t *k, store_t *s);   /* objsync.c: other processes' writes */
/* objsync.c: a write of the store undone (store_obj_undo_fn): the registry follows the store again. */
void           ops_subk_resync(const ops_sub_kind_t *k, store_t *s, const char *tenant, const char *id);

#endif
