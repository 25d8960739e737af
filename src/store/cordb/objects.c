/*
 * objects.c - corDB's stored objects beside the entities: subscriptions,
 * registrations and hosted @contexts (store.h "objects"), per tenant.
 *
 * A tenant keeps them in one array in creation order (a replace keeps the
 * place; a delete leaves a NULL until more than half are dead, then the array
 * is compacted and the id map rebuilt), and an id map whose key is the kind
 * as one byte followed by the id, so that ids are unique per kind. The JSON
 * text is copied; the store never parses it. Everything happens under the
 * tenant lock (write for put and delete, read for get and foreach); objects
 * are few and small next to entities, so no work is moved outside it.
 * When the last object of a tenant goes, the table is given back.
 *
 * On disk, a put or delete is one record (log.h), written under the lock
 * before the change is made (a failed write: 503, nothing changed); with
 * --dbSync always a failed fsync takes the change back (the old text, or the
 * deleted object appended again). A writer whose answer is held (store.h
 * "Held answers": store_pending) does not wait: its record's waiter is an
 * obj_held_t on the heap, which keeps what the undo needs (the replaced
 * text, the deleted object) until the log's thread completes it
 * (cdb_obj_held_undo in the reverse order of the log, then
 * cdb_obj_held_done, which also tells the object's owner: store_obj_undone).
 * Any other writer waits for its fsync after the unlock.
 */
#include <stdlib.h>
#include <string.h>

#include "../../model/codec.h"
#include "cordb.h"
#include "log.h"

static const char *objs_key_of(const void *ud, uint32_t v)
{
    const cdb_objs_t *o = ud;

    return o->v[v]->key;
}

void cdb_objs_init(cdb_objs_t *o)
{
    memset(o, 0, sizeof(*o));
    cdb_idmap_init(&o->ids, objs_key_of, o);
}

static void obj_free(cdb_obj_t *ob)
{
    if (!ob)
        return;
    free(ob->key);
    free(ob->json);
    free(ob);
}

void cdb_objs_free(cdb_objs_t *o)
{
    for (uint32_t i = 0; i < o->n; i++)
        obj_free(o->v[i]);
    free(o->v);
    cdb_idmap_free(&o->ids);
    cdb_objs_init(o);
}

/* kind byte + id, NUL-terminated, malloc'ed. */
static char *obj_key(int kind, const char *id, size_t *klen)
{
    size_t n = strlen(id);
    char  *k = cr_xmalloc(n + 2);

    k[0] = (char)('0' + kind);
    memcpy(k + 1, id, n + 1);
    *klen = n + 1;
    return k;
}

static uint32_t objs_find(const cdb_objs_t *o, const char *key, size_t klen)
{
    return cdb_idmap_find(&o->ids, key, cdb_hash_key(key, klen));
}

/* Slides the live objects down (creation order kept) and rebuilds the map. */
static void objs_maybe_compact(cdb_objs_t *o)
{
    uint32_t n = 0;

    if (!o->live) {
        cdb_objs_free(o);
        return;
    }
    if (o->n < 32 || (o->n - o->live) * 2 <= o->n)
        return;
    for (uint32_t i = 0; i < o->n; i++)
        if (o->v[i])
            o->v[n++] = o->v[i];
    o->n = n;
    cdb_idmap_clear(&o->ids);
    for (uint32_t i = 0; i < n; i++)
        cdb_idmap_insert(&o->ids, cdb_hash_key(o->v[i]->key, strlen(o->v[i]->key)), i);
}

/* Under the tenant lock: appends a new object (takes key and text). */
static void objs_add(cdb_objs_t *o, cdb_obj_t *ob)
{
    if (o->n == o->cap) {
        uint32_t cap = o->cap ? o->cap * 2 : 8;

        o->v   = cr_xreallocarray(o->v, cap, sizeof(*o->v));
        o->cap = cap;
    }
    if (!cdb_idmap_reserve(&o->ids, 1))
        cr_oom("corDB object index", sizeof(cdb_idmap_entry_t));
    o->v[o->n] = ob;
    cdb_idmap_insert(&o->ids, cdb_hash_key(ob->key, strlen(ob->key)), o->n);
    o->n++;
    o->live++;
}

/* Under the tenant lock: removes the object at i and returns it. */
static cdb_obj_t *objs_take(cdb_objs_t *o, uint32_t i)
{
    cdb_obj_t *ob = o->v[i];

    cdb_idmap_remove(&o->ids, cdb_hash_key(ob->key, strlen(ob->key)), i);
    o->v[i] = NULL;
    o->live--;
    objs_maybe_compact(o);
    return ob;
}

/* Under the tenant lock, on disk: logs a put (json) or a delete (json NULL). */
static bool obj_log(cdb_t *db, cdb_tenant_t *t, int kind, const char *id, const char *json,
                    size_t len, cdb_logw_t *w, problem_t *p)
{
    cdb_log_t *log = cdb_db_log(db);
    sbuf_t    *sb;
    size_t     at;

    w->linked = w->waits = false;
    if (!log)
        return true;
    sb = cdb_log_buf();
    at = cdb_rec_begin(sb, json ? CDB_REC_OBJ_PUT : CDB_REC_OBJ_DEL, t->name);
    cr_put_varint(sb, (uint64_t)kind);
    cr_put_str(sb, id, strlen(id));
    if (json)
        cr_put_str(sb, json, len);
    cdb_rec_end(sb, at);
    return cdb_log_append(log, sb, w, p);
}

static bool obj_not_found(problem_t *p, int kind, const char *id)
{
    static const char *const what[] = { "object", "subscription", "registration", "@context",
                                           "context source subscription", "EntityMap" };

    return problem_set(p, PB_RESOURCE_NOT_FOUND, "%s '%.400s' not found",
                       what[kind >= 1 && kind <= 5 ? kind : 0], id);
}

/* A held object write (see the top), completed by the log's thread. */
typedef struct obj_held {
    cdb_held_head_t  hh;            /* first (obj true) */
    cdb_tenant_t    *t;
    int              kind;
    char            *key;           /* kind byte + id */
    size_t           klen;
    bool             put;
    char            *old;           /* put: the replaced text (NULL: a new object) */
    size_t           old_len;
    cdb_obj_t       *gone;          /* delete: the object taken out */
    store_pending_t *sp;
} obj_held_t;

/* Under the tenant lock: the pending write the current call may become
 * (NULL: not held), its record not yet appended. */
static obj_held_t *held_new(cdb_t *db, cdb_tenant_t *t, int kind, const char *id, bool put)
{
    cdb_log_t       *log = cdb_db_log(db);
    store_pending_t *sp;
    obj_held_t      *h;

    if (!log || cdb_log_mode(log) != CDB_SYNC_ALWAYS || !(sp = store_pending()))
        return NULL;
    h = cr_xcalloc(1, sizeof(*h));
    h->hh.obj    = true;
    h->hh.w.held = true;
    h->t         = t;
    h->kind      = kind;
    h->key       = obj_key(kind, id, &h->klen);
    h->put       = put;
    h->sp        = sp;
    return h;
}

static void held_free(obj_held_t *h)
{
    free(h->key);
    free(h);
}

/* Under the tenant lock: logs a put or delete as h's record (false, p: 503
 * when the log cannot take it; h is freed then). */
static bool held_log(cdb_t *db, cdb_tenant_t *t, obj_held_t *h, const char *id, const char *json,
                     size_t len, problem_t *p)
{
    sbuf_t *sb = cdb_log_buf();
    size_t  at = cdb_rec_begin(sb, json ? CDB_REC_OBJ_PUT : CDB_REC_OBJ_DEL, t->name);

    cr_put_varint(sb, (uint64_t)h->kind);
    cr_put_str(sb, id, strlen(id));
    if (json)
        cr_put_str(sb, json, len);
    cdb_rec_end(sb, at);
    if (cdb_log_append(cdb_db_log(db), sb, &h->hh.w, p))
        return true;
    held_free(h);
    return false;
}

/* The log's thread: h's fsync failed, its turn in the reverse order of the
 * log (every later write is undone): the object as it was before h. */
void cdb_obj_held_undo(cdb_held_head_t *hh)
{
    obj_held_t *h = (obj_held_t *)hh;
    cdb_objs_t *o = &h->t->objs;
    uint32_t    i;

    cdb_tenant_wrlock(h->t);
    if (h->put) {
        i = objs_find(o, h->key, h->klen);
        if (i != CDB_NONE && h->old) {          /* the replaced text comes back */
            free(o->v[i]->json);
            o->v[i]->json = h->old;
            o->v[i]->len  = h->old_len;
            h->old        = NULL;
        } else if (i != CDB_NONE) {
            obj_free(objs_take(o, i));
        }
    } else if (h->gone) {                       /* back, at the end of the creation order */
        objs_add(o, h->gone);
        h->gone = NULL;
    }
    pthread_rwlock_unlock(&h->t->lock);
}

/* The log's thread: h is durable (ok) or undone; its owner is told of an
 * undo before the write is answered. */
void cdb_obj_held_done(cdb_held_head_t *hh, bool ok)
{
    obj_held_t *h = (obj_held_t *)hh;

    if (!ok)
        store_obj_undone(h->sp, h->t->name, h->kind, h->key + 1);
    store_pending_done(h->sp, NULL, 0, ok);
    free(h->old);
    obj_free(h->gone);
    held_free(h);
}

bool cdb_obj_put(cdb_t *db, const char *tenant, int kind, const char *id, const char *json,
                 size_t len, bool create_only, problem_t *p)
{
    cdb_tenant_t *t = cdb_tenant_open(db, tenant, p);
    cdb_objs_t   *o;
    cdb_obj_t    *ob;
    cdb_logw_t    w = { 0 };
    obj_held_t   *h;
    size_t        klen, old_len = 0;
    char         *key, *text, *old = NULL;
    uint32_t      i;

    if (!t)
        return false;
    key  = obj_key(kind, id, &klen);
    text = cr_xmalloc(len + 1);
    memcpy(text, json, len);
    text[len] = '\0';

    cdb_tenant_wrlock(t);
    o = &t->objs;
    i = objs_find(o, key, klen);
    if (i != CDB_NONE && create_only) {
        pthread_rwlock_unlock(&t->lock);
        free(key);
        free(text);
        return problem_set(p, PB_ALREADY_EXISTS, "'%.400s' already exists", id);
    }
    h = held_new(db, t, kind, id, true);
    if (h ? !held_log(db, t, h, id, text, len, p) : !obj_log(db, t, kind, id, text, len, &w, p)) {
        pthread_rwlock_unlock(&t->lock);
        free(key);
        free(text);
        return false;
    }
    if (i != CDB_NONE) {
        ob       = o->v[i];
        old      = ob->json;
        old_len  = ob->len;
        ob->json = text;
        ob->len  = len;
        free(key);
        key = NULL;
    } else {
        ob       = cr_xmalloc(sizeof(*ob));
        ob->key  = key;
        ob->json = text;
        ob->len  = len;
        objs_add(o, ob);
    }
    if (h) {                                /* the log's thread's now, the replaced text kept */
        h->old     = old;
        h->old_len = old_len;
        pthread_rwlock_unlock(&t->lock);
        store_pending_adopt();
        return true;
    }
    pthread_rwlock_unlock(&t->lock);

    if (w.waits && cdb_log_wait(cdb_db_log(db), &w, p) == CDB_WAIT_DOOMED) {
        size_t k2;
        char  *k = obj_key(kind, id, &k2);

        cdb_tenant_wrlock(t);
        i = objs_find(&t->objs, k, k2);
        if (i != CDB_NONE) {
            if (old) {                      /* the replaced text comes back */
                ob = t->objs.v[i];
                free(ob->json);
                ob->json = old;
                ob->len  = old_len;
                old      = NULL;
            } else {
                obj_free(objs_take(&t->objs, i));
            }
        }
        pthread_rwlock_unlock(&t->lock);
        cdb_log_undone(cdb_db_log(db), &w);
        free(k);
        free(old);
        return false;
    }
    free(old);
    return true;
}

bool cdb_obj_delete(cdb_t *db, const char *tenant, int kind, const char *id, problem_t *p)
{
    cdb_tenant_t *t = cdb_tenant_get(db, tenant, p);
    cdb_obj_t    *ob = NULL;
    cdb_logw_t    w = { 0 };
    obj_held_t   *h;
    size_t        klen;
    char         *key;
    uint32_t      i;

    if (!t)
        return false;
    key = obj_key(kind, id, &klen);
    cdb_tenant_wrlock(t);
    i = objs_find(&t->objs, key, klen);
    if (i != CDB_NONE) {
        h = held_new(db, t, kind, id, false);
        if (h ? !held_log(db, t, h, id, NULL, 0, p) : !obj_log(db, t, kind, id, NULL, 0, &w, p)) {
            pthread_rwlock_unlock(&t->lock);
            free(key);
            return false;
        }
        ob = objs_take(&t->objs, i);
        if (h) {                            /* the log's thread's now, the object kept */
            h->gone = ob;
            pthread_rwlock_unlock(&t->lock);
            free(key);
            store_pending_adopt();
            return true;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    free(key);
    if (!ob)
        return obj_not_found(p, kind, id);
    if (w.waits && cdb_log_wait(cdb_db_log(db), &w, p) == CDB_WAIT_DOOMED) {
        cdb_tenant_wrlock(t);               /* back, at the end of the creation order */
        objs_add(&t->objs, ob);
        pthread_rwlock_unlock(&t->lock);
        cdb_log_undone(cdb_db_log(db), &w);
        return false;
    }
    obj_free(ob);
    return true;
}

char *cdb_obj_get(cdb_t *db, const char *tenant, int kind, const char *id, arena_t *a,
                  size_t *len, problem_t *p)
{
    cdb_tenant_t *t = cdb_tenant_get(db, tenant, p);
    char         *key, *out = NULL;
    size_t        klen;
    uint32_t      i;

    if (len)
        *len = 0;
    if (!t)
        return NULL;
    key = obj_key(kind, id, &klen);
    pthread_rwlock_rdlock(&t->lock);
    i = objs_find(&t->objs, key, klen);
    if (i != CDB_NONE) {
        const cdb_obj_t *ob = t->objs.v[i];

        out = arena_strndup(a, ob->json, ob->len);
        if (len)
            *len = ob->len;
    }
    pthread_rwlock_unlock(&t->lock);
    free(key);
    if (!out)
        obj_not_found(p, kind, id);
    return out;
}

typedef struct obj_each {
    char kind;
    void (*fn)(void *ud, const char *tenant, const char *id, const char *json, size_t len);
    void *ud;
} obj_each_t;

static void obj_each_tenant(void *ud, cdb_tenant_t *t)
{
    obj_each_t *e = ud;

    pthread_rwlock_rdlock(&t->lock);
    for (uint32_t i = 0; i < t->objs.n; i++) {
        const cdb_obj_t *ob = t->objs.v[i];

        if (ob && ob->key[0] == e->kind)
            e->fn(e->ud, t->name, ob->key + 1, ob->json, ob->len);
    }
    pthread_rwlock_unlock(&t->lock);
}

void cdb_obj_foreach(cdb_t *db, int kind,
                     void (*fn)(void *ud, const char *tenant, const char *id, const char *json,
                                size_t len),
                     void *ud)
{
    obj_each_t e = { .kind = (char)('0' + kind), .fn = fn, .ud = ud };

    cdb_tenant_each(db, obj_each_tenant, &e);
}
