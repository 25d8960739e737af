/*
 * fwd_sub.c - distributed subscriptions (5.8.1.4): the remote subscriptions
 * a subscription here plants at the context sources registered for its
 * entities, their lifecycle (plant, patch, verify, delete, retry), and the
 * relay of what the sources notify back. The contract is fwd_sub.h.
 *
 * State: a list of parts (subscription x registration) under one mutex. A
 * change of a subscription or of a registration queues an event; the
 * thread reconciles it (which parts should exist, with which document) and
 * then sends what is due through fwd_run, the one sender of fwd/. A part
 * holds the document it last planted (its hash decides whether a PATCH is
 * due) and a reference to its registration (whose endpoint a DELETE needs
 * after the registration went).
 *
 * The remote copy (5.8.1.4): the subscription reduced to the entity
 * selectors the registration matches; q, geoQ and scopeQ kept, unless the
 * subscription's splitEntities (else --splitEntities) is true: an entity
 * may then be split over the sources, so the filters are left out of the
 * copy, and what a source notifies is merged (5.8.6) with this broker's
 * version and the other sources' (fwd_retrieve_map over a page naming the
 * matching registrations but the notifying source's: 5.8.6 asks every
 * source but that one; then fwd_merge_two with what was notified) and
 * relayed only when the merged entity matches q, geoQ and scopeQ; from
 * notification, attributes, pick, omit (and every rendering
 * member: format, showChanges, join, lang ...) removed, since this broker
 * renders the relayed notification with the subscription's own; throttling
 * and timeInterval not sent (applied here; a periodic subscription is not
 * planted). A subscription with localOnly true is not planted.
 */
#include "fwd_sub.h"

#include "fwd.h"
#include "fwd_int.h"
#include "../notify/notify.h"
#include "../reg/reg.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define ID_PREFIX     "urn:ngsi-ld:Subscription:dsub:"
#define MAX_CHAIN     32                 /* brokers a subscription is planted through */
#define BACKOFF_MIN   1000000            /* µs */
#define BACKOFF_MAX   60000000
#define VERIFY_EVERY  30000000           /* a planted part is checked at its source this often */
#define DELETE_TRIES  1440               /* about a day at BACKOFF_MAX */
#define SWEEP_PAGE    1000               /* subscriptions asked of a source per page when sweeping */
#define SWEEP_PAGES   64
#define BATCH         32                 /* parts sent in one fwd_run */

typedef struct part {
    struct part *next;
    struct part *next_key;               /* in g_by_key's bucket */
    char        *tenant, *sub_id, *reg_id, *remote_id;
    char         key[33];                /* the endpoint /dsub/{key}: random per run */
    reg_t       *reg;                    /* a reference: its latest version */
    char        *doc;                    /* the copy to plant (malloc'd), NULL: none yet */
    uint64_t     doc_hash, planted_hash; /* planted_hash: of the copy the source has */
    bool         want;                   /* it should exist at the source */
    bool         have;                   /* it exists there (as far as this broker knows) */
    bool         tried;                  /* a creation was attempted (it may exist) */
    bool         loop;                   /* the source answered 508: not retried until the copy changes */
    bool         dup;                    /* another part planted this id at the same broker (409) */
    int64_t      expires_at;             /* the subscription's (CR_NO_TIME: never): reconciled then */
    int64_t      sub_exp;                /* the subscription's expiresAt, kept (CR_NO_TIME: never) */
    int64_t      lease_at;               /* the expiresAt the source holds (CR_NO_TIME: none or unknown) */
    int64_t      next_at;                /* µs: due from then */
    unsigned     attempts;
    char         state[16];              /* pending, planted, failed, loop, refused */
    bool         split;                  /* the subscription splits entities (5.8.6) */
    char         why[160];
} part_t;

typedef struct event {
    struct event *next;
    char         *tenant, *id;           /* id NULL: every subscription of the tenant */
} event_t;

typedef struct seen {                    /* the tenants with subscriptions or registrations: swept */
    struct seen *next;
    char        *tenant;
} seen_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  g_cv = PTHREAD_COND_INITIALIZER;
static part_t         *g_parts;
static part_t         *g_by_key[1024];   /* the parts by endpoint key: a notification finds its part at once */
static event_t        *g_ev_head, *g_ev_tail;
static bool            g_stop, g_started;
static bool            g_ready;          /* fwd_sub_ready: cor:// and HTTP are up, sources may be swept */
static pthread_t       g_thread;
static uint64_t        g_me;             /* the stable hash of this broker's alias */
static seen_t         *g_seen;
static int64_t         g_sweep_at;       /* µs: the next sweep of every source for orphans (sweep_due) */
static bool            g_sweep_new;      /* a registration or subscription changed: sources not swept yet are */
static int64_t         g_fresh_at;       /* µs: not before then (one such sweep a second) */
static unsigned        g_sweep_fails;    /* sweeps in a row that a source did not answer (backoff_delay) */
static uint64_t       *g_swept;          /* the sources swept in this run (source_hash) */
static size_t          g_n_swept, g_cap_swept;

/* ------------------------------------------------------------ events */

static void event_add(const char *tenant, const char *id)
{
    event_t *e = cr_xcalloc(1, sizeof *e);
    e->tenant = cr_xstrdup(tenant ? tenant : "");
    e->id = id ? cr_xstrdup(id) : NULL;
    pthread_mutex_lock(&g_mu);
    seen_t *t = g_seen;
    while (t && strcmp(t->tenant, e->tenant)) t = t->next;
    if (!t) {
        t = cr_xcalloc(1, sizeof *t);
        t->tenant = cr_xstrdup(e->tenant);
        t->next = g_seen;
        g_seen = t;
    }
    if (g_ev_tail) g_ev_tail->next = e;
    else g_ev_head = e;
    g_ev_tail = e;
    g_sweep_new = true;                  /* the sources not asked yet are asked (sweep_due) */
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void on_sub(const char *tenant, const char *id)
{
    event_add(tenant, id);
}

static void on_reg(const char *tenant)
{
    event_add(tenant, NULL);
}

/* ------------------------------------------------------------ ids and chains */

static uint64_t alias_hash(const char *s, size_t n)
{
    return cr_hash_stable(s, n);
}

/* The chain of alias hashes in a subscription id of ours; false: not ours. */
static bool chain_of(const char *id, uint64_t *chain, size_t *n)
{
    *n = 0;
    if (strncmp(id, ID_PREFIX, sizeof ID_PREFIX - 1)) return false;
    const char *s = strchr(id + sizeof ID_PREFIX - 1, ':');
    if (!s) return false;
    for (s++; *s && *n < MAX_CHAIN + 1;) {
        char *end;
        chain[(*n)++] = strtoull(s, &end, 16);
        if (end == s) return false;
        s = *end == '.' ? end + 1 : end;
        if (*end && *end != '.') return false;
    }
    return true;
}

static bool in_chain(const uint64_t *chain, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        if (chain[i] == h) return true;
    return false;
}

bool fwd_sub_admit(const json_t *body, const char *via, problem_t *p)
{
    uint64_t      chain[MAX_CHAIN + 1];
    size_t        n = 0;
    const json_t *id = json_get(body, "id");
    bool loop = via && fwd_via_loop(via);
    if (!loop && json_is_string(id) && chain_of(id->str, chain, &n)) loop = in_chain(chain, n, g_me);
    if (!loop) return true;
    p->kind = PB_HTTP;
    p->status = 508;
    snprintf(p->detail, sizeof p->detail, "this subscription was planted through this broker (%s) already: "
             "a registration loop (5.8.1.4, 6.3.18)", fwd_alias());
    return false;
}

/* ------------------------------------------------------------ reconciling */

static bool same_str(const char *x, const char *y)
{
    return x == y || (x && y && !strcmp(x, y));
}

/* Two registrations that reach the same source: the same endpoint and source tenant. */
static bool same_source(const reg_t *x, const reg_t *y)
{
    return same_str(reg_endpoint(x), reg_endpoint(y)) && same_str(reg_source_tenant(x), reg_source_tenant(y));
}

/* The part of (tenant, sub_id) at r's source (one per source, whichever of
 * its registrations matched: a registration PATCHed to another source makes
 * a new part; the old one is deleted at the old source). */
static part_t *part_find(const char *tenant, const char *sub_id, const reg_t *r)
{
    for (part_t *x = g_parts; x; x = x->next)
        if (x->sub_id[0] && !strcmp(x->tenant, tenant) && !strcmp(x->sub_id, sub_id) && same_source(x->reg, r))
            return x;
    return NULL;
}

static part_t **key_bucket(const char *key)
{
    return &g_by_key[cr_hash(key, strlen(key)) % CR_ARRAY_LEN(g_by_key)];
}

static void part_free(part_t *x)
{
    for (part_t **pp = key_bucket(x->key); *pp; pp = &(*pp)->next_key)
        if (*pp == x) {
            *pp = x->next_key;
            break;
        }
    free(x->tenant);
    free(x->sub_id);
    free(x->reg_id);
    free(x->remote_id);
    free(x->doc);
    reg_unref(x->reg);
    free(x);
}

/* The registrations s is to be planted at (createSubscription, not in the
 * chain), each with the mask of s's entity selectors it matches (bit i; all
 * bits when s has none). */
typedef struct target {
    reg_t   *r;
    uint64_t sel_mask;
} target_t;

static size_t targets(arena_t *a, const notify_sub_t *s, const uint64_t *chain, size_t n_chain, target_t **out)
{
    notify_selection_t sel;
    notify_sub_selection(s, &sel);
    size_t    cap = 8, n = 0;
    target_t *v = arena_alloc(a, cap * sizeof *v);
    size_t    rounds = sel.n_sel ? sel.n_sel : 1;
    int64_t   now = cr_now_us();
    for (size_t i = 0; i < rounds && i < 64; i++) {
        reg_query_t q = {.attrs = sel.watched, .n_attrs = sel.n_watched,
                         .ops = REG_OP_BIT(REG_OP_CREATE_SUBSCRIPTION)};
        if (sel.n_sel) {
            const entity_selector_t *es = &sel.sel[i];
            q.types = es->types;
            q.ids = es->id ? &es->id : NULL;
            q.n_ids = es->id ? 1 : 0;
            q.id_pattern = es->id_pattern;
        }
        size_t  m;
        reg_t **rs = reg_match(notify_sub_tenant(s), &q, now, a, &m, NULL);
        for (size_t k = 0; k < m; k++) {
            const char *alias = reg_alias(rs[k]);
            bool skip = alias && in_chain(chain, n_chain, alias_hash(alias, strlen(alias)));
            size_t j = 0;       /* one target per source: several registrations of it plant one copy */
            while (j < n && !same_source(v[j].r, rs[k])) j++;
            if (skip || j < n) {
                if (!skip) v[j].sel_mask |= (uint64_t)1 << i;
                reg_unref(rs[k]);
                continue;
            }
            v = arena_grow(a, v, n, &cap, sizeof *v, 8);
            v[n++] = (target_t){rs[k], sel.n_sel ? (uint64_t)1 << i : ~(uint64_t)0};
        }
    }
    *out = v;
    return n;
}

static bool doc_bool(const json_t *t, const char *k);

/* splitEntities (5.2.12): the subscription's, else --splitEntities. */
static bool doc_split(const json_t *t)
{
    const json_t *v = json_get(t, "splitEntities");
    return v ? v->type == JSON_TRUE : cr_config.split_entities;
}

/* The copy of s planted at the source of r (see the head of this file). */
static char *copy_doc(arena_t *a, const json_t *t, const char *remote_id, const char *key, uint64_t sel_mask)
{
    bool split = doc_split(t);
    json_t *o = json_new(a, JSON_OBJECT);
    json_add(o, "id", json_new_string(a, remote_id));
    json_add(o, "type", json_new_string(a, "Subscription"));
    /* expiresAt is added when sent: the lease (see lease_end) */
    static const char *const kept[] = {"subscriptionName", "description", "watchedAttributes",
        "notificationTrigger", "q", "geoQ", "scopeQ", "datasetId", "isActive", NULL};
    for (const char *const *k = kept; *k; k++) {
        if (split && (!strcmp(*k, "q") || !strcmp(*k, "geoQ") || !strcmp(*k, "scopeQ"))) continue;
        const json_t *v = json_get(t, *k);
        if (v) json_add(o, *k, json_clone(a, v));
    }
    const json_t *ents = json_get(t, "entities");
    if (json_is_array(ents)) {
        json_t *e = json_new(a, JSON_ARRAY);
        size_t  i = 0;
        for (const json_t *x = ents->child; x; x = x->next, i++)
            if (i >= 64 || (sel_mask >> i & 1)) json_add(e, NULL, json_clone(a, x));
        json_add(o, "entities", e);
    }
    json_t *n = json_new(a, JSON_OBJECT), *ep = json_new(a, JSON_OBJECT);
    json_add(n, "format", json_new_string(a, "normalized"));
    json_add(n, "sysAttrs", json_new_bool(a, true));   /* the source's createdAt/modifiedAt are relayed */
    json_add(ep, "uri", json_new_string(a, arena_printf(a, "%s%s%s", cr_config.public_url, FWD_SUB_PATH, key)));
    json_add(ep, "accept", json_new_string(a, "application/json"));
    json_add(n, "endpoint", ep);
    json_add(o, "notification", n);
    const json_t *ctx = json_get(t, "@context");
    if (ctx) json_add(o, "@context", json_clone(a, ctx));
    sbuf_t sb;
    sb_init(&sb, a, 1024);
    json_render(&sb, o);
    return sb.p;
}

static bool doc_bool(const json_t *t, const char *k)
{
    const json_t *v = json_get(t, k);
    return v && v->type == JSON_TRUE;
}

static void new_key(char key[33])
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t x = cr_hash_u64((uint64_t)cr_now_us()), y = cr_hash_u64(x);
        memcpy(b, &x, 8);
        memcpy(b + 8, &y, 8);
    }
    for (int i = 0; i < 16; i++) snprintf(key + 2 * i, 3, "%02x", b[i]);
}

/* Which parts subscription (tenant, id) should have; g_mu not held (reads the registries). */
static void reconcile(const char *tenant, const char *id)
{
    arena_t      *a = arena_new(8192);
    notify_sub_t *s = notify_find(tenant, id);
    target_t     *tg = NULL;
    size_t        nt = 0;
    uint64_t      chain[MAX_CHAIN + 1];
    size_t        n_chain = 0;
    json_t       *t = NULL;
    int64_t       now = cr_now_us(), expires = CR_NO_TIME;

    if (s) {
        size_t      len;
        const char *doc = notify_sub_doc(s, &len);
        char        err[96];
        t = json_parse_copy(a, doc, len, &(json_limits_t){0}, err, sizeof err);
        notify_selection_t sel;
        notify_sub_selection(s, &sel);
        const json_t *ex = t ? json_get(t, "expiresAt") : NULL;
        if (json_is_string(ex) && !cr_datetime_parse(ex->str, &expires)) expires = CR_NO_TIME;
        bool expired = expires != CR_NO_TIME && expires <= now;
        chain_of(id, chain, &n_chain);
        bool ok = t && !sel.interval_us && !doc_bool(t, "localOnly") && !expired && n_chain < MAX_CHAIN;
        if (ok) {
            chain[n_chain++] = g_me;
            nt = targets(a, s, chain, n_chain, &tg);
        }
    }

    pthread_mutex_lock(&g_mu);
    for (part_t *x = g_parts; x; x = x->next)
        if (!strcmp(x->tenant, tenant) && !strcmp(x->sub_id, id)) x->want = false;
    for (size_t i = 0; i < nt; i++) {
        reg_t  *r = tg[i].r;
        part_t *x = part_find(tenant, id, r);
        if (!x) {
            x = cr_xcalloc(1, sizeof *x);
            x->tenant = cr_xstrdup(tenant);
            x->sub_id = cr_xstrdup(id);
            x->reg_id = cr_xstrdup(reg_id(r));
            sbuf_t rid;
            sb_init(&rid, a, 256);
            char   hs[2048];   /* no registration nor endpoint: two ways to one broker name one copy */
            const char *st = reg_source_tenant(r);
            snprintf(hs, sizeof hs, "%s\n%s\n%s\n%s", fwd_alias(), tenant, id, st ? st : "");
            sb_printf(&rid, ID_PREFIX "%016llx:", (unsigned long long)cr_hash_stable(hs, strlen(hs)));
            for (size_t k = 0; k < n_chain; k++) sb_printf(&rid, "%s%016llx", k ? "." : "", (unsigned long long)chain[k]);
            x->remote_id = cr_xstrdup(rid.p);
            new_key(x->key);
            x->lease_at = CR_NO_TIME;
            snprintf(x->state, sizeof x->state, "pending");
            x->next = g_parts;
            g_parts = x;
            part_t **b = key_bucket(x->key);
            x->next_key = *b;
            *b = x;
        }
        if (x->reg != r) {
            reg_ref(r);
            reg_unref(x->reg);
            x->reg = r;
            if (strcmp(x->reg_id, reg_id(r))) {   /* another registration of the same source */
                free(x->reg_id);
                x->reg_id = cr_xstrdup(reg_id(r));
            }
        }
        char    *doc = copy_doc(a, t, x->remote_id, x->key, tg[i].sel_mask);
        uint64_t h = cr_hash_stable(doc, strlen(doc));
        if (!x->doc || h != x->doc_hash) {
            free(x->doc);
            x->doc = cr_xstrdup(doc);
            x->doc_hash = h;
            x->loop = false;
            x->attempts = 0;
            x->next_at = 0;
        }
        if (!x->want && !x->have) x->next_at = 0;
        x->want = true;
        x->split = doc_split(t);
        x->expires_at = expires;
        if (x->sub_exp != expires && x->have) {   /* the expiresAt sent changes: PATCHed */
            x->planted_hash = 0;
            x->next_at = 0;
        }
        x->sub_exp = expires;
    }
    for (part_t *x = g_parts; x; x = x->next)
        if (!strcmp(x->tenant, tenant) && !strcmp(x->sub_id, id) && !x->want && !x->loop) {
            if (x->next_at > now + BACKOFF_MIN) x->next_at = 0;
        }
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < nt; i++) reg_unref(tg[i].r);
    if (s) notify_sub_unref(s);
    arena_free(a);
}

static void reconcile_tenant(const char *tenant)
{
    arena_t        *a = arena_new(4096);
    size_t          n, total;
    notify_sub_t  **v = notify_list(tenant, 0, SIZE_MAX, a, &n, &total);
    char          **ids = cr_xmalloc((n + 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        ids[i] = cr_xstrdup(notify_sub_id(v[i]));
        notify_sub_unref(v[i]);
    }
    arena_free(a);
    for (size_t i = 0; i < n; i++) {
        reconcile(tenant, ids[i]);
        free(ids[i]);
    }
    free(ids);
}

/* ------------------------------------------------------------ sending */

enum { OP_NONE, OP_POST, OP_PATCH, OP_DELETE, OP_GET };

/* The lease (--dsubLease): a copy planted at a source that supports
 * updateSubscription expires then unless renewed, so a copy this broker lost
 * track of (unreachable source at the delete, a registration gone, a
 * restart without a store) dies at its source on its own. The expiresAt
 * sent: the sooner of now + lease and the subscription's; CR_NO_TIME: none. */
static bool leased(const part_t *x)
{
    return cr_config.dsub_lease_s > 0 && (reg_ops(x->reg) & REG_OP_BIT(REG_OP_UPDATE_SUBSCRIPTION));
}

static int64_t lease_end(const part_t *x, int64_t now)
{
    if (!leased(x)) return x->sub_exp;
    int64_t l = (now / 1000000 + cr_config.dsub_lease_s) * 1000000;   /* whole seconds */
    return x->sub_exp != CR_NO_TIME && x->sub_exp < l ? x->sub_exp : l;
}

/* When the lease of a planted part is renewed: at half of it (CR_NO_TIME: never). */
static int64_t renew_at(const part_t *x)
{
    if (!x->want || !x->have || x->dup || x->lease_at == CR_NO_TIME || !leased(x)) return CR_NO_TIME;
    if (x->sub_exp != CR_NO_TIME && x->lease_at >= x->sub_exp) return CR_NO_TIME;   /* ends with the subscription */
    return x->lease_at - (int64_t)cr_config.dsub_lease_s * 500000;
}

static int due_op(const part_t *x, int64_t now)
{
    int64_t r = renew_at(x);             /* before the next verification; a failed renewal backs off */
    if (r != CR_NO_TIME && r <= now && !x->attempts && !x->loop) return OP_PATCH;
    if (x->next_at > now) return OP_NONE;
    uint64_t ops = reg_ops(x->reg);
    if (!x->want) return (x->have || x->tried) && (ops & REG_OP_BIT(REG_OP_DELETE_SUBSCRIPTION)) ? OP_DELETE : OP_NONE;
    if (x->loop || x->dup) return OP_NONE;
    if (!x->have) return OP_POST;
    if (x->planted_hash != x->doc_hash || (r != CR_NO_TIME && r <= now))
        return ops & REG_OP_BIT(REG_OP_UPDATE_SUBSCRIPTION) ? OP_PATCH
             : ops & REG_OP_BIT(REG_OP_DELETE_SUBSCRIPTION) ? OP_DELETE : OP_NONE;
    return ops & REG_OP_BIT(REG_OP_RETRIEVE_SUBSCRIPTION) ? OP_GET : OP_NONE;
}

/* The parts of x's subscription with x's remote id at other endpoints (another way to the same broker). */
static part_t *sibling(const part_t *x, bool planted)
{
    for (part_t *y = g_parts; y; y = y->next)
        if (y != x && y->want && !strcmp(y->remote_id, x->remote_id) && !strcmp(y->tenant, x->tenant) &&
            (!planted || (y->have && !y->dup)))
            return y;
    return NULL;
}

/* µs to wait after the n-th failure in a row (n >= 1): 1 s doubling to 60 s. */
static int64_t backoff_delay(unsigned n)
{
    int64_t d = BACKOFF_MIN;
    for (unsigned i = 1; i < n && d < BACKOFF_MAX; i++) d *= 2;
    return d < BACKOFF_MAX ? d : BACKOFF_MAX;
}

static void backoff(part_t *x, int64_t now, const char *state, const char *why)
{
    x->next_at = now + backoff_delay(++x->attempts);
    snprintf(x->state, sizeof x->state, "%s", state);
    snprintf(x->why, sizeof x->why, "%s", why);
}

static const char *call_why(arena_t *a, const call_t *c)
{
    if (c->refused) return "refused by the egress policy";
    if (c->rc != CURLE_OK) return c->rc == CURLE_OPERATION_TIMEDOUT ? "no answer in time" : curl_easy_strerror(c->rc);
    return arena_printf(a, "HTTP %ld", c->status);
}

/* The outcome of c for x (g_mu held); true: x is to be freed. */
static bool outcome(arena_t *a, part_t *x, int op, const call_t *c, int64_t lease, int64_t now)
{
    bool answered = !c->refused && c->rc == CURLE_OK;
    long st = answered ? c->status : 0;
    bool ok2 = st >= 200 && st < 300;
    if (op != OP_GET || !ok2) fwd_counted(x->reg, ok2 || st == 409 || (st == 404 && op != OP_PATCH), now);
    switch (op) {
    case OP_POST:
        x->tried = true;
        if (st == 409 && x->want && sibling(x, true)) {   /* planted through another endpoint of that broker */
            x->dup = true;
            x->tried = false;            /* not this part's to delete */
            snprintf(x->state, sizeof x->state, "duplicate");
            snprintf(x->why, sizeof x->why, "the source is reached through registration %s already",
                     sibling(x, true)->reg_id);
            return false;
        }
        if (ok2 || st == 409) {          /* 409: planted before (a restart): PATCHed with this run's endpoint */
            x->have = true;
            x->lease_at = ok2 ? lease : CR_NO_TIME;
            x->attempts = 0;
            x->planted_hash = ok2 ? x->doc_hash : 0;
            x->next_at = ok2 ? now + VERIFY_EVERY : 0;
            snprintf(x->state, sizeof x->state, "planted");
            x->why[0] = '\0';
        } else if (st == 508) {
            x->loop = true;
            snprintf(x->state, sizeof x->state, "loop");
            snprintf(x->why, sizeof x->why, "the source answered 508: it is on this subscription's way already");
        } else backoff(x, now, st >= 400 && st < 500 ? "refused" : "failed", call_why(a, c));
        return false;
    case OP_PATCH:
        if (ok2) {
            x->planted_hash = x->doc_hash;
            x->lease_at = lease;
            x->attempts = 0;
            x->next_at = now + VERIFY_EVERY;
            snprintf(x->state, sizeof x->state, "planted");
            x->why[0] = '\0';
        } else if (st == 404) {
            x->have = false;
            x->next_at = 0;
        } else backoff(x, now, "failed", call_why(a, c));
        return false;
    case OP_GET:
        if (st == 404) {                 /* the source lost it (restarted without its store): planted again */
            LOG_I("dsub: the subscription %s at the source of registration %s is gone: planted again", x->remote_id,
                  x->reg_id);
            x->have = false;
            x->next_at = 0;
        } else x->next_at = now + (ok2 ? VERIFY_EVERY : BACKOFF_MIN * 5);
        return false;
    case OP_DELETE:
        if (ok2 || st == 404) {
            for (part_t *y = g_parts; y; y = y->next)   /* a way to the same broker waiting: it plants now */
                if (y != x && y->dup && !strcmp(y->remote_id, x->remote_id) && !strcmp(y->tenant, x->tenant)) {
                    y->dup = y->have = y->tried = false;
                    y->next_at = 0;
                }
            if (x->want) {               /* deleted to be planted anew (no updateSubscription) */
                x->have = x->tried = false;
                x->next_at = 0;
                return false;
            }
            return true;
        }
        backoff(x, now, "failed", call_why(a, c));
        if (x->attempts >= DELETE_TRIES) {   /* past its lease it notifies nothing; deleted to leave no trace */
            LOG_W("dsub: the subscription %s at the source of registration %s could not be deleted (%s): left to "
                  "its expiry", x->remote_id, x->reg_id, x->why);   /* or to the next sweep (sweep_due) */
            return true;
        }
        return false;
    }
    return false;
}

/* One round: what is due, sent in parallel; the earliest next time (µs). */
static int64_t send_due(void)
{
    int64_t  now = cr_now_us(), next = now + VERIFY_EVERY;
    part_t  *px[BATCH];
    int      ops[BATCH];
    int64_t  leases[BATCH];
    size_t   n = 0;
    arena_t *a = arena_new(8192);

    pthread_mutex_lock(&g_mu);
    for (part_t **pp = &g_parts, *x; (x = *pp);) {
        int op = due_op(x, now);
        if (op == OP_NONE && !x->want && !(x->have || x->tried) ) {   /* nothing there: forgotten */
            *pp = x->next;
            part_free(x);
            continue;
        }
        if (op == OP_NONE && !x->want && !(reg_ops(x->reg) & REG_OP_BIT(REG_OP_DELETE_SUBSCRIPTION))) {
            LOG_W("dsub: the source of registration %s does not support deleteSubscription: %s is left to its "
                  "expiry", x->reg_id, x->remote_id);
            *pp = x->next;
            part_free(x);
            continue;
        }
        if (op != OP_NONE && n < BATCH) {
            px[n] = x;
            leases[n] = lease_end(x, now);
            ops[n++] = op;
            reg_ref(x->reg);
        } else {
            int64_t r = renew_at(x);
            if (r != CR_NO_TIME && r < next) next = r > now ? r : now + BACKOFF_MIN;
            if (x->next_at > now && x->next_at < next && !(x->loop && x->want) && !(x->dup && x->want))
                next = x->next_at;
            if (x->want && x->expires_at != CR_NO_TIME && x->expires_at < next) next = x->expires_at;
        }
        pp = &x->next;
    }
    call_t *calls = arena_alloc(a, (n ? n : 1) * sizeof *calls);
    memset(calls, 0, (n ? n : 1) * sizeof *calls);
    for (size_t i = 0; i < n; i++) {
        part_t  *x = px[i];
        call_t  *c = &calls[i];
        fwd_in_t in = {.tenant = x->tenant, .ctx = ld_core(), .arena = a};
        sbuf_t   u;
        sb_init(&u, a, 256);
        fwd_endpoint(&u, x->reg);
        sb_adds(&u, "subscriptions");
        if (ops[i] != OP_POST) {
            sb_addc(&u, '/');
            fwd_url_encode(&u, x->remote_id);
        }
        c->url = u.p;
        c->reg = x->reg;
        c->ctx = in.ctx;
        static const char *const methods[] = {NULL, "POST", "PATCH", "DELETE", "GET"};
        c->method = methods[ops[i]];
        if (ops[i] == OP_POST || ops[i] == OP_PATCH) {
            char    err[64];
            json_t *t = json_parse_copy(a, x->doc, strlen(x->doc), &(json_limits_t){0}, err, sizeof err);
            if (t) {
                if (ops[i] == OP_PATCH) {   /* the members as they are (id and type stay) */
                    json_remove(t, "id");
                    json_remove(t, "type");
                }
                if (leases[i] != CR_NO_TIME) {
                    char ts[32];
                    cr_datetime_format(leases[i], ts);
                    json_add(t, "expiresAt", json_new_stringn(a, ts, strlen(ts)));
                }
                sbuf_t sb;
                sb_init(&sb, a, strlen(x->doc) + 64);
                json_render(&sb, t);
                c->post = sb.p;
            } else c->skipped = true;
        }
        if (!c->skipped && !fwd_headers(&in, c, x->reg, NULL, c->post ? "application/ld+json" : NULL)) c->skipped = true;
    }
    pthread_mutex_unlock(&g_mu);

    if (n) fwd_run(calls, n);

    pthread_mutex_lock(&g_mu);
    now = cr_now_us();
    /* the 409s of creations last: a copy planted (201) by another way to the same broker in this round
     * makes them duplicates, not the owners */
    for (size_t k = 0; k < 2 * n; k++) {
        size_t i = k % n;
        bool   late = ops[i] == OP_POST && !calls[i].skipped && !calls[i].refused && calls[i].rc == CURLE_OK &&
                      calls[i].status == 409;
        if (late != (k >= n)) continue;
        part_t *x = NULL;
        for (part_t *y = g_parts; y && !x; y = y->next) x = y == px[i] ? y : NULL;
        if (x && !calls[i].skipped && outcome(a, x, ops[i], &calls[i], leases[i], now)) {
            for (part_t **pp = &g_parts; *pp; pp = &(*pp)->next)
                if (*pp == x) {
                    *pp = x->next;
                    break;
                }
            part_free(x);
        } else if (x && calls[i].skipped) backoff(x, now, "failed", "out of memory");
        reg_unref(calls[i].reg);
        if (calls[i].hdrs) curl_slist_free_all(calls[i].hdrs);
    }
    if (n) next = now;   /* another round at once: what followed (a PATCH after a 409) */
    pthread_mutex_unlock(&g_mu);
    arena_free(a);
    return next;
}

/* ------------------------------------------------------------ sweeping for orphans */

/* A subscription at a source whose id is one of ours (its chain ends with
 * this broker) but that no part holds is an orphan: planted by a previous
 * run (a restart without a store, or after a delete that never reached the
 * source), or a part given up. Every source (endpoint and tenant) of the
 * registrations that allow querySubscription and deleteSubscription, in a
 * tenant that has subscriptions here, is asked for its subscriptions after
 * the restored state is reconciled, on a source not asked yet, then every
 * --dsubLease (600 s without one); each orphan becomes a part to delete
 * (retried as any delete). No source is asked before fwd_sub_ready (the
 * cor:// client and the HTTP server up). A source that does not answer is
 * asked again as one not asked yet, after 1 s, then 2, 4 ... up to 60 s
 * (one that answers 4xx, at the next sweep). A subscription or a
 * registration that changes has the sources not asked yet asked (at most
 * once a second): a tenant's first subscription after a restart has its
 * sources asked. */
typedef struct sweep {
    reg_t   *r;
    size_t   offset;
    bool     more;
} sweep_t;

static bool is_ours(const char *id)
{
    uint64_t chain[MAX_CHAIN + 1];
    size_t   n;
    return chain_of(id, chain, &n) && n && chain[n - 1] == g_me;
}

/* The orphans in the answer c (a page of GET /subscriptions from w's source), as parts to delete (g_mu
 * held); whether a full page came (more may follow). */
static bool sweep_page(arena_t *a, const sweep_t *w, const call_t *c)
{
    char    err[64];
    json_t *t = c->status == 200 && c->body.p ? json_parse_copy(a, c->body.p, c->body.len, &(json_limits_t){0},
                                                                 err, sizeof err) : NULL;
    if (!json_is_array(t)) return false;
    for (const json_t *e = t->child; e; e = e->next) {
        const json_t *id = json_get(e, "id");
        if (!json_is_string(id) || !is_ours(id->str)) continue;
        part_t *x = g_parts;             /* held by a part at any source: another way to that broker, or */
        while (x && strcmp(x->remote_id, id->str)) x = x->next;   /* its copy elsewhere (left to the lease) */
        if (x) continue;
        x = cr_xcalloc(1, sizeof *x);
        x->tenant = cr_xstrdup(reg_tenant(w->r));
        x->sub_id = cr_xstrdup("");      /* no subscription here: matched by no reconcile */
        x->reg_id = cr_xstrdup(reg_id(w->r));
        x->remote_id = cr_xstrdup(id->str);
        reg_ref(w->r);
        x->reg = w->r;
        x->have = x->tried = true;
        x->lease_at = x->sub_exp = x->expires_at = CR_NO_TIME;
        snprintf(x->state, sizeof x->state, "orphan");
        LOG_I("dsub: %s at the source of registration %s is an orphan of this broker's: deleted", x->remote_id,
              x->reg_id);
        x->next = g_parts;
        g_parts = x;
    }
    return t->len >= SWEEP_PAGE;
}

static uint64_t source_hash(const reg_t *r)
{
    const char *e = reg_endpoint(r), *t = reg_source_tenant(r);
    char        b[2048];
    int         n = snprintf(b, sizeof b, "%s\n%s\n%s", reg_tenant(r), e ? e : "", t ? t : "");
    return cr_hash_stable(b, n > 0 && (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

static bool swept(uint64_t h)
{
    for (size_t i = 0; i < g_n_swept; i++)
        if (g_swept[i] == h) return true;
    return false;
}

static void unswept(uint64_t h)
{
    for (size_t i = 0; i < g_n_swept; i++)
        if (g_swept[i] == h) {
            g_swept[i] = g_swept[--g_n_swept];
            return;
        }
}

static void sweep_due(void)
{
    int64_t now = cr_now_us();
    pthread_mutex_lock(&g_mu);
    bool all = g_ready && now >= g_sweep_at, fresh = g_ready && g_sweep_new && now >= g_fresh_at;
    if (all || fresh) g_sweep_new = false;
    pthread_mutex_unlock(&g_mu);
    if (!all && !fresh) return;
    g_fresh_at = now + 1000000;
    if (all) g_sweep_at = now + (int64_t)(cr_config.dsub_lease_s > 0 ? cr_config.dsub_lease_s : 600) * 1000000;
    arena_t *a = arena_new(16384);
    size_t   nw = 0, cap = 16;
    sweep_t *w = arena_alloc(a, cap * sizeof *w);
    pthread_mutex_lock(&g_mu);
    size_t nt = 0;
    for (seen_t *t = g_seen; t; t = t->next) nt++;
    const char **tenants = arena_alloc(a, (nt + 1) * sizeof *tenants);
    nt = 0;
    for (seen_t *t = g_seen; t; t = t->next) tenants[nt++] = arena_strdup(a, t->tenant);
    pthread_mutex_unlock(&g_mu);
    const uint64_t need = REG_OP_BIT(REG_OP_QUERY_SUBSCRIPTION) | REG_OP_BIT(REG_OP_DELETE_SUBSCRIPTION);
    for (size_t i = 0; i < nt; i++) {
        size_t         n, total;
        notify_sub_t **subs = notify_list(tenants[i], 0, 1, a, &n, &total);
        for (size_t k = 0; k < n; k++) notify_sub_unref(subs[k]);
        if (!total) continue;            /* a tenant without subscriptions plants nothing: its sources are not asked */
        reg_t **rs = reg_list(tenants[i], 0, SIZE_MAX, now, a, &n, &total);
        for (size_t k = 0; k < n; k++) {
            size_t j = 0;
            while (j < nw && !same_source(w[j].r, rs[k])) j++;
            if (j < nw || (reg_ops(rs[k]) & need) != need || (!all && swept(source_hash(rs[k])))) {
                reg_unref(rs[k]);
                continue;
            }
            w = arena_grow(a, w, nw, &cap, sizeof *w, 16);
            w[nw++] = (sweep_t){rs[k], 0, true};
        }
    }
    bool     failed = false;
    call_t  *calls = arena_alloc(a, (nw ? nw : 1) * sizeof *calls);
    sweep_t **of = arena_alloc(a, (nw ? nw : 1) * sizeof *of);
    for (int page = 0; page < SWEEP_PAGES; page++) {
        size_t n = 0;
        memset(calls, 0, (nw ? nw : 1) * sizeof *calls);
        for (size_t j = 0; j < nw; j++) {
            if (!w[j].more) continue;
            call_t  *c = &calls[n];
            fwd_in_t in = {.tenant = reg_tenant(w[j].r), .ctx = ld_core(), .arena = a};
            sbuf_t   u;
            sb_init(&u, a, 256);
            fwd_endpoint(&u, w[j].r);
            sb_printf(&u, "subscriptions?limit=%d&offset=%zu", SWEEP_PAGE, w[j].offset);
            c->url = u.p;
            c->reg = w[j].r;
            c->ctx = in.ctx;
            c->method = "GET";
            if (!fwd_headers(&in, c, w[j].r, NULL, NULL)) c->skipped = true;
            of[n++] = &w[j];
        }
        if (!n) break;
        fwd_run(calls, n);
        pthread_mutex_lock(&g_mu);
        for (size_t i = 0; i < n; i++) {
            bool answered = !calls[i].skipped && !calls[i].refused && calls[i].rc == CURLE_OK;
            of[i]->more = answered && sweep_page(a, of[i], &calls[i]);
            uint64_t h = source_hash(of[i]->r);
            if (!answered || calls[i].status >= 500) {
                unswept(h);              /* asked again as a source not asked yet, after a while */
                failed = true;
            } else if (!swept(h)) {       /* answered (a 4xx too: asking again soon would not help) */
                if (g_n_swept == g_cap_swept) {
                    g_cap_swept = g_cap_swept ? 2 * g_cap_swept : 16;
                    g_swept = cr_xrealloc(g_swept, g_cap_swept * sizeof *g_swept);
                }
                g_swept[g_n_swept++] = h;
            }
            of[i]->offset += SWEEP_PAGE;
            if (calls[i].hdrs) curl_slist_free_all(calls[i].hdrs);
        }
        pthread_mutex_unlock(&g_mu);
    }
    for (size_t j = 0; j < nw; j++) reg_unref(w[j].r);
    arena_free(a);
    pthread_mutex_lock(&g_mu);
    if (failed) {
        g_sweep_new = true;
        g_fresh_at = now + backoff_delay(++g_sweep_fails);
    } else g_sweep_fails = 0;
    pthread_mutex_unlock(&g_mu);
}

static void *thread_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_mu);
    while (!g_stop) {
        event_t *e = g_ev_head;
        g_ev_head = g_ev_tail = NULL;
        pthread_mutex_unlock(&g_mu);
        /* expired subscriptions first: their parts go */
        for (event_t *n; e; e = n) {
            n = e->next;
            if (e->id) reconcile(e->tenant, e->id);
            else reconcile_tenant(e->tenant);
            free(e->tenant);
            free(e->id);
            free(e);
        }
        pthread_mutex_lock(&g_mu);
        int64_t now = cr_now_us();
        char  **exp_t = NULL, **exp_i = NULL;
        size_t  n_exp = 0, cap = 0;
        for (part_t *x = g_parts; x; x = x->next)
            if (x->want && x->expires_at != CR_NO_TIME && x->expires_at <= now) {
                if (n_exp == cap) {
                    cap = cap ? 2 * cap : 8;
                    exp_t = cr_xrealloc(exp_t, cap * sizeof *exp_t);
                    exp_i = cr_xrealloc(exp_i, cap * sizeof *exp_i);
                }
                exp_t[n_exp] = cr_xstrdup(x->tenant);
                exp_i[n_exp++] = cr_xstrdup(x->sub_id);
                x->expires_at = CR_NO_TIME;
            }
        pthread_mutex_unlock(&g_mu);
        for (size_t i = 0; i < n_exp; i++) {
            reconcile(exp_t[i], exp_i[i]);
            free(exp_t[i]);
            free(exp_i[i]);
        }
        free(exp_t);
        free(exp_i);
        sweep_due();
        int64_t next = send_due();
        pthread_mutex_lock(&g_mu);
        if (g_ready && next > g_sweep_at) next = g_sweep_at;
        if (g_ready && g_sweep_new && next > g_fresh_at) next = g_fresh_at;
        if (g_stop || g_ev_head) continue;
        now = cr_now_us();
        if (next > now) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t d = next - now;
            ts.tv_sec += d / 1000000;
            ts.tv_nsec += (d % 1000000) * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&g_cv, &g_mu, &ts);
        }
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* ------------------------------------------------------------ the remote state in GET (sysAttrs) */

static void render_extra(json_writer_t *w, const notify_sub_t *s)
{
    const char *tenant = notify_sub_tenant(s), *id = notify_sub_id(s);
    bool        any = false;
    pthread_mutex_lock(&g_mu);
    for (part_t *x = g_parts; x; x = x->next) {
        if (!x->want || strcmp(x->tenant, tenant) || strcmp(x->sub_id, id)) continue;
        if (!any) {
            jw_key(w, "coraine:remote");
            jw_array_begin(w);
            any = true;
        }
        jw_object_begin(w);
        jw_key(w, "registrationId");
        jw_string(w, x->reg_id);
        jw_key(w, "subscriptionId");
        jw_string(w, x->remote_id);
        jw_key(w, "status");
        jw_string(w, x->state);
        if (x->attempts) {
            jw_key(w, "attempts");
            jw_int(w, x->attempts);
        }
        if (x->why[0]) {
            jw_key(w, "reason");
            jw_string(w, x->why);
        }
        jw_object_end(w);
    }
    if (any) jw_array_end(w);
    pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------ receiving */

/* 5.8.6 with splitEntities: e merged with the versions here (local) and at every source that has it but
 * the notifying one (from: its registration; not asked again), or NULL when the merged entity does not
 * match s's q, geoQ and scopeQ (a reference otherwise). */
static cr_entity_t *split_merge(notify_sub_t *s, const char *tenant, cr_entity_t *e, const reg_t *from,
                                fwd_sub_local_fn local, arena_t *a)
{
    cr_entity_t *loc = local ? local(tenant, e->id, a) : NULL, *got = NULL, *m = NULL;
    fwd_in_t     in = {.tenant = tenant, .ctx = notify_sub_context(s), .arena = a};
    fwd_out_t    out;
    problem_t    q = {0};
    /* the other sources, as the page of an entity map naming them alone for e (at most 63: the bits of a
     * page's origins; beyond, every source is asked, the notifying one too) */
    reg_query_t  rq = {.ids = (const char *const *)&e->id, .n_ids = 1};
    size_t       nr;
    reg_t      **rs = reg_match(tenant, &rq, cr_now_us(), a, &nr, NULL);
    const char **ids = arena_alloc(a, (nr + 1) * sizeof *ids), **none = arena_calloc(a, (nr + 1) * sizeof *none);
    uint64_t     bits = 0;
    size_t       k = 0;
    for (size_t i = 0; i < nr; i++) {
        if (k < 63 && !same_source(rs[i], from)) {
            ids[k] = arena_strdup(a, reg_id(rs[i]));
            bits |= (uint64_t)1 << (k + 1);
            k++;
        }
        reg_unref(rs[i]);
    }
    fwd_map_page_t pg = {.id = "", .ids = (const char **)&e->id, .origins = &bits, .n = k ? 1 : 0, .reg_ids = ids,
                         .linked = none, .n_regs = k, .total = 1, .live = 1};
    bool asked = nr > 63 + 1 ? fwd_retrieve(&in, e->id, NULL, NULL, 0, NULL, 0, loc, &out, &q)
                             : fwd_retrieve_map(&in, e->id, NULL, NULL, 0, NULL, 0, &pg, loc, &out, &q);
    if (asked && out.forwarded && out.n) got = out.items[0];
    else if (loc) {
        entity_ref(loc);
        got = loc;
    }
    if (loc) entity_unref(loc);
    if (got) {
        m = fwd_merge_two(a, got, e);    /* merged with the notified version (5.8.6) */
        entity_unref(got);
    }
    if (!m) {                            /* nothing else has it (or too large): what was notified */
        entity_ref(e);
        m = e;
    }
    notify_selection_t sel;
    notify_sub_selection(s, &sel);
    entity_filter_t f = {.q = (q_expr_t *)sel.q, .geo = (geoq_t *)sel.geo, .scope = (scopeq_t *)sel.scope};
    if (filter_match(&f, m)) return m;
    entity_unref(m);
    return NULL;
}

bool fwd_sub_receive(const char *key, const json_t *body, fwd_sub_local_fn local, problem_t *p)
{
    char  *tenant = NULL, *sub_id = NULL;
    bool   split = false;
    reg_t *from = NULL;                  /* the notifying source's registration (a reference) */
    pthread_mutex_lock(&g_mu);
    for (part_t *x = *key_bucket(key); x && !tenant; x = x->next_key)
        if (x->want && !strcmp(x->key, key)) {
            tenant = cr_xstrdup(x->tenant);
            sub_id = cr_xstrdup(x->sub_id);
            split = x->split;
            reg_ref(x->reg);
            from = x->reg;
        }
    pthread_mutex_unlock(&g_mu);
    if (!tenant) return problem_set(p, PB_RESOURCE_NOT_FOUND, "no distributed subscription at this endpoint");

    bool          ok = false;
    notify_sub_t *s = notify_find(tenant, sub_id);
    const json_t *data = json_get(body, "data");
    if (!s) {
        problem_set(p, PB_RESOURCE_NOT_FOUND, "subscription '%s' is gone", sub_id);
        goto done;
    }
    if (!json_is_object(body) || !json_is_array(data)) {
        problem_set(p, PB_BAD_REQUEST_DATA, "a Notification with a data array was expected (5.3.1)");
        goto done;
    }
    arena_t     *a = arena_new(8192);
    int64_t      now = cr_now_us();
    size_t       n = 0;
    cr_entity_t **es = arena_alloc(a, (data->len + 1) * sizeof *es);
    bool         *del = arena_alloc(a, (data->len + 1) * sizeof *del);
    ok = true;
    for (const json_t *x = data->child; x && ok; x = x->next) {
        problem_t    q = {0};
        cr_entity_t *d = json_is_object(x) ? entity_parse(a, x, notify_sub_context(s), EP_CREATE, now, &q) : NULL;
        if (d) {                         /* the times are the source's (the order of its changes) */
            const json_t *ca = json_get(x, "createdAt"), *ma = json_get(x, "modifiedAt");
            int64_t       t;
            if (json_is_string(ca) && cr_datetime_parse(ca->str, &t)) d->created_at = t;
            if (json_is_string(ma) && cr_datetime_parse(ma->str, &t)) d->modified_at = t;
        }
        cr_entity_t *e = d ? entity_freeze(d) : NULL;
        if (!e) {
            problem_set(p, PB_BAD_REQUEST_DATA, "an entity of the notification is not valid: %s",
                        q.kind ? q.detail : "not an object");
            ok = false;
            break;
        }
        del[n] = json_get(x, "deletedAt") != NULL;
        es[n++] = e;
    }
    /* all or nothing: a notification is relayed whole */
    for (size_t i = 0; i < n; i++) {
        cr_entity_t *m = es[i];
        if (ok && split && !del[i]) m = split_merge(s, tenant, es[i], from, local, a);
        else if (ok) entity_ref(m);
        if (ok && m) notify_relay(s, m, del[i], now);
        if (m) entity_unref(m);
        entity_unref(es[i]);
    }
    arena_free(a);
done:
    if (s) notify_sub_unref(s);
    if (from) reg_unref(from);
    free(tenant);
    free(sub_id);
    return ok;
}

/* ------------------------------------------------------------ start, stop */

void fwd_sub_init(void)
{
    notify_set_watcher(on_sub);
    reg_set_listener(on_reg);
    notify_set_render_extra(render_extra);
}

bool fwd_sub_start(problem_t *p)
{
    const char *al = fwd_alias();
    g_me = alias_hash(al, strlen(al));
    g_stop = false;
    g_sweep_at = g_fresh_at = 0;         /* once ready and the restored state is reconciled */
    g_sweep_fails = 0;
    g_ready = false;
    if (pthread_create(&g_thread, NULL, thread_main, NULL) != 0)
        return problem_set(p, PB_INTERNAL_ERROR, "cannot start the distributed subscription thread");
    g_started = true;
    return true;
}

void fwd_sub_ready(void)
{
    pthread_mutex_lock(&g_mu);
    g_ready = true;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

void fwd_sub_stop(void)
{
    notify_set_watcher(NULL);
    reg_set_listener(NULL);
    pthread_mutex_lock(&g_mu);
    g_stop = true;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    if (g_started) pthread_join(g_thread, NULL);
    g_started = false;
    notify_set_render_extra(NULL);
    pthread_mutex_lock(&g_mu);
    for (part_t *x = g_parts, *n; x; x = n) {
        n = x->next;
        part_free(x);
    }
    g_parts = NULL;
    for (event_t *e = g_ev_head, *n; e; e = n) {
        n = e->next;
        free(e->tenant);
        free(e->id);
        free(e);
    }
    g_ev_head = g_ev_tail = NULL;
    for (seen_t *t = g_seen, *n; t; t = n) {
        n = t->next;
        free(t->tenant);
        free(t);
    }
    g_seen = NULL;
    free(g_swept);
    g_swept = NULL;
    g_n_swept = g_cap_swept = 0;
    pthread_mutex_unlock(&g_mu);
}
