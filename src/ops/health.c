/*
 * health.c - what GET /ready and GET /metrics ask of the store and the
 * history: entity counts per tenant, whether the store takes writes (corDB on
 * disk: its log has not failed), the history's queue and its database.
 */
#include "ops.h"
#include "../history/history.h"

#include <string.h>

typedef struct names {
    const char **v;
    size_t       n, cap;
    arena_t     *a;
} names_t;

static void add_name(void *ud, const char *tenant)
{
    names_t *nm = ud;
    if (nm->n == nm->cap) return;
    nm->v[nm->n++] = arena_strdup(nm->a, tenant);
}

size_t ops_tenant_sizes(store_t *s, arena_t *a, size_t max, const char ***tenants, uint64_t **entities)
{
    names_t nm = {.v = arena_alloc(a, (max ? max : 1) * sizeof(char *)), .cap = max, .a = a};
    /* the names first: the store calls add_name under its tenant table's
     * lock, and a count takes the tenant's own lock */
    store_tenants(s, add_name, &nm);
    uint64_t *n = arena_alloc(a, (nm.n ? nm.n : 1) * sizeof(uint64_t));
    size_t    k = 0;
    for (size_t i = 0; i < nm.n; i++)
        if (store_tenant_entities(s, nm.v[i], &n[k])) nm.v[k++] = nm.v[i];
    *tenants = nm.v;
    *entities = n;
    return k;
}

void ops_history_health(uint64_t *queued, bool *reachable)
{
    history_health(history_default, queued, reachable);
}

bool ops_ready(store_t *s, problem_t *p)
{
    store_stats_t st;
    uint64_t      queued;
    bool          reachable;

    store_get_stats(s, &st);
    if (st.on_disk && st.log_failed)
        return problem_set(p, PB_HTTP, "the store's log on disk failed: writes are refused (see the log)");
    history_health(history_default, &queued, &reachable);
    if (!reachable)
        return problem_set(p, PB_HTTP, "the history's database (--history %s) does not answer", cr_config.history);
    return true;
}
