/*
 * entitymaps.c - the EntityMaps (5.2.39) kept beside the entities, so that
 * corDB on disk and MongoDB keep them over a restart: one stored object
 * (STORE_OBJ_ENTITY_MAP) per map, in the map's tenant. fwd/fwd_map.c holds
 * the maps and says what to write (its text, fwd_map_keeper_t); main.c
 * wires the two, since only ops/ calls the store. A map is written when it
 * is made and when its expiry changes, and deleted when it is dropped; at
 * start the kept ones are read back, and those that expired meanwhile (or
 * are not maps) deleted.
 */
#include "ops.h"

#include <stdlib.h>

bool ops_emap_put(store_t *s, const char *tenant, const char *id, const char *text, size_t len)
{
    problem_t p = {0};
    if (store_obj_put(s, tenant, STORE_OBJ_ENTITY_MAP, id, text, len, false, &p)) return true;
    LOG_W("entity map %s not stored: %s", id, p.detail);
    return false;
}

void ops_emap_delete(store_t *s, const char *tenant, const char *id)
{
    problem_t p = {0};
    if (!store_obj_delete(s, tenant, STORE_OBJ_ENTITY_MAP, id, &p) && p.kind != PB_RESOURCE_NOT_FOUND &&
        p.kind != PB_NONEXISTENT_TENANT)
        LOG_W("entity map %s not deleted from the store: %s", id, p.detail);
}

typedef struct restore {
    bool   (*fn)(const char *tenant, const char *id, const char *text, size_t len);
    size_t   n;
    /* (tenant, id) pairs fn refused, deleted after the walk (store_obj_foreach's fn must not call the store) */
    char   **gone;
    size_t   n_gone, cap;
} restore_t;

static void restore_one(void *ud, const char *tenant, const char *id, const char *json, size_t len)
{
    restore_t *r = ud;
    if (r->fn(tenant, id, json, len)) {
        r->n++;
        return;
    }
    if (r->n_gone + 2 > r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 32;
        char **x = realloc(r->gone, nc * sizeof *x);
        if (!x) return;                        /* left in the store: read (and refused) again next start */
        r->gone = x;
        r->cap = nc;
    }
    r->gone[r->n_gone++] = cr_xstrdup(tenant);
    r->gone[r->n_gone++] = cr_xstrdup(id);
}

size_t ops_emap_restore(store_t *s, bool (*fn)(const char *tenant, const char *id, const char *text, size_t len))
{
    restore_t r = {.fn = fn};
    store_obj_foreach(s, STORE_OBJ_ENTITY_MAP, restore_one, &r);
    for (size_t i = 0; i + 1 < r.n_gone; i += 2) {
        ops_emap_delete(s, r.gone[i], r.gone[i + 1]);
        free(r.gone[i]);
        free(r.gone[i + 1]);
    }
    if (r.n_gone) LOG_I("%zu expired entity maps deleted", r.n_gone / 2);
    free(r.gone);
    return r.n;
}
