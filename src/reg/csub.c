/*
 * csub.c - context source registration subscriptions (5.11): every
 * tenant's, matched against registrations (5.11.2.4, 5.12), and the
 * CSourceNotifications (5.3.2, 5.11.7) they are due, handed to notify/
 * (notify_send) so that they share the endpoints, lanes, counters and
 * limits of every other notification.
 *
 * A registration write is rare, and so is a registration subscription: a
 * change is matched against the subscriptions of its tenant one by one,
 * under this file's mutex (which is never held while the registry's lock is
 * wanted the other way round: the registry never calls in here).
 * Periodic subscriptions (timeInterval) are sent by one ticker thread,
 * started with the first of them.
 */
#include "reg_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct csub {
    notify_sub_t *s;
    arena_t      *a;
    q_expr_t     *csf;
    int           timerel;            /* 0: no temporalQ; REG_TIMEREL_* */
    int64_t       time_at, end_time_at;
    bool          observed;
    int64_t       next_at;            /* periodic: the next notification (µs) */
} csub_t;

typedef struct ctenant {
    const char     *tenant;           /* interned */
    csub_t        **v;
    size_t          n, cap;
    struct ctenant *next;
} ctenant_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  g_cv = PTHREAD_COND_INITIALIZER;
static ctenant_t      *g_tenants;
static pthread_t       g_ticker;
static bool            g_ticker_on, g_stop;

/* ------------------------------------------------------------ what reg/ parses of the document */

static bool parse_extra(csub_t *c, const notify_sub_t *s, problem_t *p)
{
    size_t      len;
    const char *doc = notify_sub_doc(s, &len);
    char        err[128];
    json_t     *t = json_parse_copy(c->a, doc, len, &(json_limits_t){0}, err, sizeof err);
    if (!t) return problem_set(p, PB_INTERNAL_ERROR, "a stored subscription is not JSON: %s", err);
    const json_t *v = json_get(t, "csf");
    if (v && !(c->csf = q_parse_stored(c->a, v->str, notify_sub_context(s), p))) return false;
    if (c->csf && q_link_depth(c->csf))     /* a registration has no Relationships to follow */
        return problem_set(p, PB_BAD_REQUEST_DATA, "csf: a term into linked entities (rel{...}) selects "
                           "entities, not registrations");
    if ((v = json_get(t, "temporalQ"))) {
        if (!json_is_object(v)) return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ must be an object (5.2.21)");
        json_foreach(m, v)
            if (strcmp(m->key, "timerel") && strcmp(m->key, "timeAt") && strcmp(m->key, "endTimeAt") &&
                strcmp(m->key, "timeproperty"))
                return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ: unknown member '%s'", m->key);
        const json_t *rel = json_get(v, "timerel"), *at = json_get(v, "timeAt"), *end = json_get(v, "endTimeAt");
        const json_t *tp = json_get(v, "timeproperty");
        if (!json_is_string(rel)) return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ.timerel is mandatory");
        if (!strcmp(rel->str, "before")) c->timerel = REG_TIMEREL_BEFORE;
        else if (!strcmp(rel->str, "after")) c->timerel = REG_TIMEREL_AFTER;
        else if (!strcmp(rel->str, "between")) c->timerel = REG_TIMEREL_BETWEEN;
        else return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ.timerel must be before, after or between");
        if (!json_is_string(at) || !cr_datetime_parse(at->str, &c->time_at))
            return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ.timeAt must be a DateTime");
        if (c->timerel == REG_TIMEREL_BETWEEN &&
            (!json_is_string(end) || !cr_datetime_parse(end->str, &c->end_time_at) || c->end_time_at <= c->time_at))
            return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ.endTimeAt must be a DateTime after timeAt");
        c->observed = true;
        if (tp) {
            if (!json_is_string(tp)) return problem_set(p, PB_BAD_REQUEST_DATA, "temporalQ.timeproperty must be a string");
            if (!strcmp(tp->str, "createdAt") || !strcmp(tp->str, "modifiedAt") || !strcmp(tp->str, "deletedAt"))
                c->observed = false;
            else if (strcmp(tp->str, "observedAt"))
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "temporalQ.timeproperty must be observedAt, createdAt, modifiedAt or deletedAt");
        }
    }
    return true;
}

static csub_t *csub_new(notify_sub_t *s, problem_t *p)
{
    csub_t *c = cr_xcalloc(1, sizeof *c);
    c->a = arena_new(1024);
    if (!parse_extra(c, s, p)) {
        arena_free(c->a);
        free(c);
        return NULL;
    }
    notify_sub_ref(s);
    c->s = s;
    return c;
}

static void csub_free(csub_t *c)
{
    if (!c) return;
    notify_sub_unref(c->s);
    arena_free(c->a);
    free(c);
}

bool reg_csub_check(const notify_sub_t *s, problem_t *p)
{
    csub_t c = {.a = arena_new(1024)};
    bool   ok = parse_extra(&c, s, p);
    arena_free(c.a);
    return ok;
}

/* ------------------------------------------------------------ matching */

/* The RegistrationInfo elements of r that c selects (5.11.2.4), 0: r does not match. */
static uint64_t csub_match(const csub_t *c, const reg_t *r, int64_t now)
{
    notify_selection_t sel;
    notify_sub_selection(c->s, &sel);
    if (reg_temporal(r) != (c->timerel != 0)) return 0;
    if (now && r->expires_at != CR_NO_TIME && r->expires_at <= now) return 0;
    /* 5.12: notification.attributes absent: no attribute restriction; else with watchedAttributes */
    const char *attrs[256];
    size_t      na = 0;
    for (size_t i = 0; sel.n_attrs && i < sel.n_watched && na < 256; i++) attrs[na++] = sel.watched[i];
    for (size_t i = 0; i < sel.n_attrs && na < 256; i++) attrs[na++] = sel.attrs[i];
    uint64_t mask = 0;
    for (size_t k = 0; k < (sel.n_sel ? sel.n_sel : 1); k++) {
        reg_query_t q = {.attrs = attrs, .n_attrs = na};
        if (sel.n_sel) {
            q.types = sel.sel[k].types;
            q.ids = sel.sel[k].id ? &sel.sel[k].id : NULL;
            q.n_ids = sel.sel[k].id ? 1 : 0;
            q.id_pattern = sel.sel[k].id_pattern;
        }
        for (size_t i = 0; i < r->n_info && i < 64; i++)
            if (reg_info_match(r, i, &q)) mask |= (uint64_t)1 << i;
    }
    if (!mask) return 0;
    const cr_entity_t *e = r->entity;
    if ((sel.geo && !geoq_match(sel.geo, e)) || (sel.scope && !scopeq_match(sel.scope, e)) ||
        (c->csf && !q_match(c->csf, e)))
        return 0;
    if (c->timerel && !reg_time_match(r, c->timerel, c->time_at, c->end_time_at, c->observed)) return 0;
    return mask;
}

/* Renders regs (with their masks) as the data array and has notify/ send it. */
static void send(const csub_t *c, const reg_t *const *regs, const uint64_t *masks, size_t n, const char *reason)
{
    sbuf_t        sb;
    json_writer_t w;
    arena_t      *a = arena_new(4096);
    sb_init(&sb, a, 4096);
    jw_init(&w, &sb);
    jw_array_begin(&w);
    for (size_t i = 0; i < n; i++) reg_render(&w, regs[i], notify_sub_out_context(c->s), false, false, masks[i]);
    jw_array_end(&w);
    notify_send(c->s, sb.p, sb.len, reason);
    arena_free(a);
}

/* Every registration of c's tenant that c matches, in one notification. */
static void send_all(const csub_t *c, const char *reason, bool even_empty)
{
    arena_t *a = arena_new(4096);
    size_t   n, total;
    int64_t  now = cr_now_us();
    reg_t  **v = reg_list(notify_sub_tenant(c->s), 0, SIZE_MAX, now, a, &n, &total);
    uint64_t *m = arena_alloc(a, n * sizeof *m + 1);
    size_t    k = 0;
    for (size_t i = 0; i < n; i++) {
        if ((m[k] = csub_match(c, v[i], now))) v[k++] = v[i];
        else reg_unref(v[i]);
    }
    if (k || even_empty) send(c, (const reg_t *const *)v, m, k, reason);
    for (size_t i = 0; i < k; i++) reg_unref(v[i]);
    arena_free(a);
}

/* ------------------------------------------------------------ the ticker (timeInterval) */

static void *ticker_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_mu);
    while (!g_stop) {
        int64_t now = cr_now_us(), next = now + 1000000;
        for (ctenant_t *t = g_tenants; t; t = t->next)
            for (size_t i = 0; i < t->n; i++) {
                csub_t            *c = t->v[i];
                notify_selection_t sel;
                notify_sub_selection(c->s, &sel);
                if (!sel.interval_us) continue;
                if (c->next_at <= now) {
                    if (notify_sub_active(c->s, now)) send_all(c, NULL, true);   /* 5.11.7: regardless of changes */
                    c->next_at = now + sel.interval_us;
                }
                if (c->next_at < next) next = c->next_at;
            }
        struct timespec ts = {.tv_sec = next / 1000000, .tv_nsec = (next % 1000000) * 1000};
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* ------------------------------------------------------------ the registry */

static ctenant_t *ct_get(const char *tenant, bool create)
{
    const char *t = intern_cstr(tenant ? tenant : "");
    for (ctenant_t *x = g_tenants; x; x = x->next)
        if (x->tenant == t) return x;
    if (!create) return NULL;
    ctenant_t *x = cr_xcalloc(1, sizeof *x);
    x->tenant = t;
    x->next = g_tenants;
    g_tenants = x;
    return x;
}

static size_t ct_find(const ctenant_t *t, const char *id)
{
    for (size_t i = 0; t && i < t->n; i++)
        if (!strcmp(notify_sub_id(t->v[i]->s), id)) return i;
    return SIZE_MAX;
}

static void ticker_need(const notify_sub_t *s)
{
    notify_selection_t sel;
    notify_sub_selection(s, &sel);
    if (!sel.interval_us || g_ticker_on) return;
    if (pthread_create(&g_ticker, NULL, ticker_main, NULL) == 0) g_ticker_on = true;
    else LOG_E("cannot start the registration subscription ticker: periodic notifications are not sent");
}

bool reg_csub_add(notify_sub_t *s, bool initial, problem_t *p)
{
    csub_t *c = csub_new(s, p);
    if (!c) return false;
    pthread_mutex_lock(&g_mu);
    ctenant_t *t = ct_get(notify_sub_tenant(s), true);
    if (ct_find(t, notify_sub_id(s)) != SIZE_MAX) {
        pthread_mutex_unlock(&g_mu);
        csub_free(c);
        return problem_set(p, PB_ALREADY_EXISTS, "subscription '%s' already exists", notify_sub_id(s));
    }
    notify_csub_start(s, NULL);
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 8;
        t->v = cr_xreallocarray(t->v, t->cap, sizeof *t->v);
    }
    t->v[t->n++] = c;
    ticker_need(s);
    /* initially on subscription (5.11.2.4); a periodic one: its first tick, now */
    notify_selection_t sel;
    notify_sub_selection(s, &sel);
    if (initial && notify_sub_active(s, cr_now_us())) send_all(c, sel.interval_us ? NULL : "newlyMatching", sel.interval_us != 0);
    c->next_at = cr_now_us() + sel.interval_us;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return true;
}

bool reg_csub_replace(notify_sub_t *s, problem_t *p)
{
    csub_t *c = csub_new(s, p);
    if (!c) return false;
    pthread_mutex_lock(&g_mu);
    ctenant_t *t = ct_get(notify_sub_tenant(s), false);
    size_t     i = ct_find(t, notify_sub_id(s));
    if (i == SIZE_MAX) {
        pthread_mutex_unlock(&g_mu);
        csub_free(c);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no subscription '%s'", notify_sub_id(s));
    }
    csub_t *old = t->v[i];
    notify_csub_start(s, old->s);
    t->v[i] = c;
    ticker_need(s);
    notify_selection_t sel;
    notify_sub_selection(s, &sel);
    /* 5.11.3.4: then a notification with every currently matching registration */
    if (notify_sub_active(s, cr_now_us())) send_all(c, sel.interval_us ? NULL : "newlyMatching", sel.interval_us != 0);
    c->next_at = cr_now_us() + sel.interval_us;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    csub_free(old);
    return true;
}

bool reg_csub_remove(const char *tenant, const char *id, problem_t *p)
{
    pthread_mutex_lock(&g_mu);
    ctenant_t *t = ct_get(tenant, false);
    size_t     i = ct_find(t, id);
    if (i == SIZE_MAX) {
        pthread_mutex_unlock(&g_mu);
        return problem_set(p, PB_RESOURCE_NOT_FOUND, "no subscription '%s'", id);
    }
    csub_t *c = t->v[i];
    memmove(t->v + i, t->v + i + 1, (t->n - i - 1) * sizeof *t->v);
    t->n--;
    pthread_mutex_unlock(&g_mu);
    notify_csub_stop(c->s);    /* what is still queued for it is not sent */
    csub_free(c);
    return true;
}

notify_sub_t *reg_csub_find(const char *tenant, const char *id)
{
    pthread_mutex_lock(&g_mu);
    ctenant_t    *t = ct_get(tenant, false);
    size_t        i = ct_find(t, id);
    notify_sub_t *s = i == SIZE_MAX ? NULL : t->v[i]->s;
    if (s) notify_sub_ref(s);
    pthread_mutex_unlock(&g_mu);
    return s;
}

notify_sub_t **reg_csub_list(const char *tenant, size_t offset, size_t limit, arena_t *a, size_t *n, size_t *total)
{
    pthread_mutex_lock(&g_mu);
    ctenant_t     *t = ct_get(tenant, false);
    size_t         all = t ? t->n : 0, k = 0;
    notify_sub_t **v = arena_alloc(a, (limit < all ? limit : all) * sizeof *v + 1);
    for (size_t i = offset; i < all && k < limit; i++) {
        notify_sub_ref(t->v[i]->s);
        v[k++] = t->v[i]->s;
    }
    pthread_mutex_unlock(&g_mu);
    *n = k;
    *total = all;
    return v;
}

bool reg_csub_tenant_known(const char *tenant)
{
    pthread_mutex_lock(&g_mu);
    bool k = ct_get(tenant, false) != NULL;
    pthread_mutex_unlock(&g_mu);
    return k;
}

void reg_csub_changed(const reg_t *before, const reg_t *after)
{
    const reg_t *any = after ? after : before;
    if (!any) return;
    int64_t now = cr_now_us();
    pthread_mutex_lock(&g_mu);
    ctenant_t *t = ct_get(any->tenant, false);
    for (size_t i = 0; t && i < t->n; i++) {
        const csub_t      *c = t->v[i];
        notify_selection_t sel;
        notify_sub_selection(c->s, &sel);
        if (sel.interval_us || !notify_sub_active(c->s, now)) continue;
        uint64_t mb = before ? csub_match(c, before, 0) : 0,   /* 0: as it was, even if it has expired now */
                 ma = after ? csub_match(c, after, now) : 0;
        if (!mb && !ma) continue;
        const char  *reason = !mb ? "newlyMatching" : ma ? "updated" : "noLongerMatching";
        const reg_t *r = after ? after : before;
        uint64_t     m = ma ? ma : after ? ~(uint64_t)0 : mb;
        send(c, &r, &m, 1, reason);
    }
    pthread_mutex_unlock(&g_mu);
}

void reg_csub_shutdown(void)
{
    pthread_mutex_lock(&g_mu);
    g_stop = true;
    pthread_cond_broadcast(&g_cv);
    bool on = g_ticker_on;
    pthread_mutex_unlock(&g_mu);
    if (on) pthread_join(g_ticker, NULL);
    pthread_mutex_lock(&g_mu);
    for (ctenant_t *t = g_tenants, *n; t; t = n) {
        n = t->next;
        for (size_t i = 0; i < t->n; i++) csub_free(t->v[i]);
        free(t->v);
        free(t);
    }
    g_tenants = NULL;
    g_ticker_on = false;
    g_stop = false;
    pthread_mutex_unlock(&g_mu);
}
