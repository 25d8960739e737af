/*
 * query.c - the MongoDB store's reads: one entity, queries, discovery.
 *
 * A filter (model.h entity_filter_t) becomes a MongoDB filter (filter.c:
 * exact where it can be, else a prefilter). What the server cannot decide is
 * evaluated in the broker with filter_match() on the candidates the server
 * streams in creation order (c, _id: stable across processes, whose clocks
 * may tie). Only when the server's filter is exact do offset, limit and the
 * count go to the server (skip, limit, countDocuments). With orderBy every
 * match is read and sorted here with order_compare (every backend orders
 * alike).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgc.h"

static bool not_found(problem_t *p, const char *id)
{
    return problem_set(p, PB_RESOURCE_NOT_FOUND, "entity '%.400s' not found", id);
}

/* The version of a document: the cached one when its token is the
 * server's (cache.c), else decoded and cached. NULL: InternalError in p. */
static cr_entity_t *doc_entity(mgc_t *db, mgc_tenant_t *t, const mgc_docf_t *f, mgc_ver_t *ver, problem_t *p)
{
    cr_entity_t *e = NULL;

    if (f->id && f->ver.w)
        e = mgc_cache_get(db->cache, t, f->id, f->ver.w);
    if (!e && (e = mgc_doc_decode(f, p)) && f->ver.w)
        mgc_cache_put(db->cache, t, e, f->ver);
    if (e && ver)
        *ver = f->ver;
    return e;
}

/* The fields a read decodes (c: the commit number, v: the codec version, w:
 * the write token, e: the encoded entity), and a find answered in one batch
 * of n (no cursor to kill). */
static void append_read_tail(bson_t *cmd, int64_t n)
{
    bson_t sub;
    bson_append_document_begin(cmd, "projection", 10, &sub);
    BSON_APPEND_INT32(&sub, "c", 1);
    BSON_APPEND_INT32(&sub, "v", 1);
    BSON_APPEND_INT32(&sub, "w", 1);
    BSON_APPEND_INT32(&sub, "e", 1);
    bson_append_document_end(cmd, &sub);
    BSON_APPEND_INT64(cmd, "limit", n);
    BSON_APPEND_INT64(cmd, "batchSize", n);
    BSON_APPEND_BOOL(cmd, "singleBatch", true);
}

/* The find of one entity by id, {find: "entities", filter: {_id: id},
 * projection: {v: 1, w: 1, e: 1}, limit: 1, singleBatch: true}, as bytes
 * around the id (libbson's ten appends were ~4k instructions of a
 * retrieve, callgrind): the parts before and after the id are fixed. */
static void read_cmd(bson_t *cmd, const char *id)
{
    static const uint8_t head[] =
        "\0\0\0\0" "\x02" "find\0" "\x09\0\0\0" "entities\0"
        "\x03" "filter\0" "\0\0\0\0" "\x02" "_id\0";
    static const uint8_t tail[] =
        "\0"                                                    /* filter's end */
        "\x03" "projection\0" "\x1a\0\0\0"
        "\x10" "v\0" "\x01\0\0\0" "\x10" "w\0" "\x01\0\0\0" "\x10" "e\0" "\x01\0\0\0" "\0"
        "\x12" "limit\0" "\x01\0\0\0\0\0\0\0"
        "\x08" "singleBatch\0" "\x01"
        "\0";
    size_t   hn = sizeof head - 1, tn = sizeof tail - 1, n = strlen(id);
    size_t   len = hn + 4 + n + 1 + tn;
    uint8_t  local[512], *b = len <= sizeof local ? local : cr_xmalloc(len);
    uint32_t flen = (uint32_t)(4 + 1 + 4 + 4 + n + 1 + 1);     /* filter: len, "\x02_id\0", strlen, id\0, end */

    memcpy(b, head, hn);
    b[hn] = (uint8_t)(n + 1);
    b[hn + 1] = (uint8_t)((n + 1) >> 8);
    b[hn + 2] = (uint8_t)((n + 1) >> 16);
    b[hn + 3] = (uint8_t)((n + 1) >> 24);
    memcpy(b + hn + 4, id, n + 1);
    memcpy(b + hn + 4 + n + 1, tail, tn);
    for (int i = 0; i < 4; i++) {
        b[i] = (uint8_t)(len >> (8 * i));
        b[hn - 9 + i] = (uint8_t)(flen >> (8 * i));   /* before "\x02_id\0" */
    }
    bson_t st;

    if (!bson_init_static(&st, b, len)) {
        LOG_E("mongoc: a read command that does not parse; aborting");
        abort();
    }
    bson_copy_to(&st, cmd);         /* the caller's to destroy (the bytes may be on this stack) */
    if (b != local)
        free(b);
}

/* One find command, not a cursor: libmongoc's cursor selects and copies the
 * server's description twice per find (half of a retrieve's work, callgrind). */
cr_entity_t *mgc_read(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *id, mgc_ver_t *ver,
                      bool *failed, problem_t *p)
{
    bson_t       cmd, reply, doc;
    bson_iter_t  it, batch;
    bson_error_t err;
    cr_entity_t *e = NULL;

    *failed = false;
    read_cmd(&cmd, id);
    if (!mongoc_client_read_command_with_opts(c, t->dbname, &cmd, NULL, mgc_copts(db, c), &reply, &err)) {
        *failed = true;
        mgc_fail(p, "read", &err);
    } else if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch", &batch) &&
               BSON_ITER_HOLDS_ARRAY(&batch) && bson_iter_recurse(&batch, &it) && bson_iter_next(&it) &&
               BSON_ITER_HOLDS_DOCUMENT(&it)) {
        const uint8_t *data;
        uint32_t       len;

        bson_iter_document(&it, &len, &data);
        if (!bson_init_static(&doc, data, len)) {
            *failed = true;
            problem_set(p, PB_INTERNAL_ERROR, "MongoDB: a reply that does not parse");
        } else {
            mgc_docf_t f;

            mgc_doc_fields(&doc, &f);
            if (!(e = doc_entity(db, t, &f, ver, p)))
                *failed = true;
        }
    }
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return e;
}

void mgc_idmap_init(mgc_idmap_t *m, const char *const *ids, size_t n, arena_t *a)
{
    uint32_t cap = 16;

    while (cap < 2 * n)
        cap *= 2;
    m->ids  = ids;
    m->mask = cap - 1;
    m->slot = arena_calloc(a, cap * sizeof(*m->slot));
    for (size_t i = 0; i < n; i++) {
        uint32_t j = (uint32_t)cr_hash(ids[i], strlen(ids[i])) & m->mask;

        while (m->slot[j] && strcmp(ids[m->slot[j] - 1], ids[i]))
            j = (j + 1) & m->mask;
        if (!m->slot[j])
            m->slot[j] = (int32_t)i + 1;
    }
}

int32_t mgc_idmap_find(const mgc_idmap_t *m, const char *id)
{
    uint32_t j = (uint32_t)cr_hash(id, strlen(id)) & m->mask;

    while (m->slot[j]) {
        if (!strcmp(m->ids[m->slot[j] - 1], id))
            return m->slot[j] - 1;
        j = (j + 1) & m->mask;
    }
    return -1;
}

/* The current versions of ids[0..n) (distinct) in one find ($in on _id) per
 * MGC_REPLY_CUT of reply: out[i] (a new reference) and ver[i], or NULL when
 * the entity is not there. A reply so large that the server may have cut
 * it is completed one id at a time. */
#define MGC_REPLY_CUT (8u << 20)    /* a reply this large may have been cut at 16 MB */

bool mgc_read_many(mgc_t *db, mongoc_client_t *c, mgc_tenant_t *t, const char *const *ids, size_t n,
                   cr_entity_t **out, mgc_ver_t *ver, arena_t *a, problem_t *p)
{
    mgc_idmap_t m;
    bool   *seen = arena_calloc(a, n ? n : 1);

    memset(out, 0, n * sizeof(*out));
    if (!n)
        return true;
    mgc_idmap_init(&m, ids, n, a);
    {
        bson_t       cmd, sub, in, arr, reply, doc;
        bson_iter_t  it, batch;
        bson_error_t err;
        char         nk[16];
        const char  *kp;
        uint32_t     k = 0;
        bool         cut, ok = true;

        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "find", "entities");
        bson_append_document_begin(&cmd, "filter", 6, &sub);
        bson_append_document_begin(&sub, "_id", 3, &in);
        bson_append_array_begin(&in, "$in", 3, &arr);
        for (size_t i = 0; i < n; i++) {
            bson_uint32_to_string(k++, &kp, nk, sizeof nk);
            bson_append_utf8(&arr, kp, -1, ids[i], -1);
        }
        bson_append_array_end(&in, &arr);
        bson_append_document_end(&sub, &in);
        bson_append_document_end(&cmd, &sub);
        append_read_tail(&cmd, (int64_t)k);
        if (!mongoc_client_read_command_with_opts(c, t->dbname, &cmd, NULL, mgc_copts(db, c), &reply, &err)) {
            bson_destroy(&reply);
            bson_destroy(&cmd);
            ok = mgc_fail(p, "read", &err);
            goto fail;
        }
        bson_destroy(&cmd);
        cut = reply.len > MGC_REPLY_CUT;
        if (!bson_iter_init(&it, &reply) || !bson_iter_find_descendant(&it, "cursor.firstBatch", &batch) ||
            !BSON_ITER_HOLDS_ARRAY(&batch) || !bson_iter_recurse(&batch, &it)) {
            bson_destroy(&reply);
            ok = problem_set(p, PB_INTERNAL_ERROR, "MongoDB: a find reply without its batch");
            goto fail;
        }
        while (ok && bson_iter_next(&it)) {
            const uint8_t *data;
            uint32_t       len;
            mgc_docf_t     f;
            int32_t        i;

            if (!BSON_ITER_HOLDS_DOCUMENT(&it))
                continue;
            bson_iter_document(&it, &len, &data);
            if (!bson_init_static(&doc, data, len)) {
                ok = problem_set(p, PB_INTERNAL_ERROR, "MongoDB: a reply that does not parse");
                break;
            }
            mgc_doc_fields(&doc, &f);
            if (!f.id || (i = mgc_idmap_find(&m, f.id)) < 0 || seen[i])
                continue;
            seen[i] = true;
            if (!(out[i] = doc_entity(db, t, &f, &ver[i], p)))
                ok = false;
        }
        bson_destroy(&reply);
        if (!ok)
            goto fail;
        if (cut)                        /* cut at the server's 16 MB: the rest one by one */
            for (size_t i = 0; i < n; i++) {
                bool failed = false;

                if (seen[i])
                    continue;
                out[i] = mgc_read(db, c, t, ids[i], &ver[i], &failed, p);
                if (failed)
                    goto fail;
            }
    }
    return true;
fail:
    for (size_t i = 0; i < n; i++)
        if (out[i]) {
            entity_unref(out[i]);
            out[i] = NULL;
        }
    return false;
}

cr_entity_t *mgc_get(mgc_t *db, const char *tenant, const char *id, problem_t *p)
{
    mgc_tenant_t    *t = mgc_tenant_get(db, tenant, p);
    mongoc_client_t *c;
    cr_entity_t     *e;
    bool             failed;

    if (!t)
        return NULL;
    if (!id) {
        problem_set(p, PB_BAD_REQUEST_DATA, "no entity id");
        return NULL;
    }
    c = mgc_pop(db);
    e = mgc_read(db, c, t, id, NULL, &failed, p);
    mgc_push(db, c);
    if (!e && !failed)
        not_found(p, id);
    return e;
}

/* ------------------------------------------------------------ scans */

/* A scan reads the candidates in creation order (c, _id) as pages, each one
 * find command (no cursor is left open: a page that ends the scan early
 * costs no killCursors), the next page starting after the last (c, _id)
 * seen: keyset pagination, stable while others write, since neither field
 * of an entity changes. The first page is as large as the caller expects
 * to need (want), the next ones grow up to SCAN_PAGE_MAX. */
#define SCAN_PAGE_MAX 1000
typedef struct scan {
    mgc_t           *db;
    mgc_tenant_t    *t;
    mongoc_client_t *c;
    const bson_t    *q;
    int64_t          skip, left;    /* the server's skip (first page) and limit (-1: none) */
    int64_t          page;          /* the size of the next page */
    int64_t          last_c;        /* the last candidate's (c, _id) */
    char            *last_id;       /* (id_cap bytes) */
    size_t           id_cap;
    bson_t           reply;
    bool             have_reply, ended, cut;   /* cut: the server ended the page short of n */
    bool             refused;       /* the server refused the find (mgc_refused) */
    bson_iter_t      it;            /* over the page's documents */
    int64_t          in_page, asked;
    uint64_t         docs, matched; /* for /statistics: read, and kept by the caller */
} scan_t;

static void scan_open(scan_t *s, mgc_t *db, mgc_tenant_t *t, const bson_t *q, int64_t skip,
                      int64_t limit, int64_t want)
{
    memset(s, 0, sizeof(*s));
    s->db    = db;
    s->t     = t;
    s->c     = mgc_pop(db);
    s->q     = q;
    s->skip  = skip;
    s->left  = limit > 0 ? limit : -1;
    s->page  = want > 0 && want < SCAN_PAGE_MAX ? want : SCAN_PAGE_MAX;
}

/* The next page into s->reply; false: an error (p). */
static bool scan_page(scan_t *s, problem_t *p)
{
    bson_t       cmd, sub, and, el, or, o1, o2, c1, c2;
    bson_iter_t  it;
    bson_error_t err;
    int64_t      n = s->left >= 0 && s->left < s->page ? s->left : s->page;
    bool         ok;

    if (s->have_reply)
        bson_destroy(&s->reply);
    s->have_reply = false;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", "entities");
    bson_append_document_begin(&cmd, "filter", 6, &sub);
    if (!s->last_id) {
        bson_concat(&sub, s->q);
    } else {
        /* q AND (c > last_c OR (c == last_c AND _id > last_id)) */
        bson_append_array_begin(&sub, "$and", 4, &and);
        BSON_APPEND_DOCUMENT(&and, "0", s->q);
        bson_append_document_begin(&and, "1", 1, &el);
        bson_append_array_begin(&el, "$or", 3, &or);
        bson_append_document_begin(&or, "0", 1, &o1);
        bson_append_document_begin(&o1, "c", 1, &c1);
        BSON_APPEND_INT64(&c1, "$gt", s->last_c);
        bson_append_document_end(&o1, &c1);
        bson_append_document_end(&or, &o1);
        bson_append_document_begin(&or, "1", 1, &o2);
        BSON_APPEND_INT64(&o2, "c", s->last_c);
        bson_append_document_begin(&o2, "_id", 3, &c2);
        BSON_APPEND_UTF8(&c2, "$gt", s->last_id);
        bson_append_document_end(&o2, &c2);
        bson_append_document_end(&or, &o2);
        bson_append_array_end(&el, &or);
        bson_append_document_end(&and, &el);
        bson_append_array_end(&sub, &and);
    }
    bson_append_document_end(&cmd, &sub);
    bson_append_document_begin(&cmd, "sort", 4, &sub);
    BSON_APPEND_INT32(&sub, "c", 1);
    BSON_APPEND_INT32(&sub, "_id", 1);
    bson_append_document_end(&cmd, &sub);
    if (s->skip > 0 && !s->last_id)
        BSON_APPEND_INT64(&cmd, "skip", s->skip);
    append_read_tail(&cmd, n);
    ok = mongoc_client_read_command_with_opts(s->c, s->t->dbname, &cmd, NULL, mgc_copts(s->db, s->c), &s->reply, &err);
    s->have_reply = true;
    bson_destroy(&cmd);
    if (!ok) {
        s->refused = mgc_refused(&err);
        return mgc_fail(p, "query", &err);
    }
    s->in_page = 0;
    s->cut     = false;
    if (!bson_iter_init(&it, &s->reply) || !bson_iter_find_descendant(&it, "cursor.firstBatch", &s->it) ||
        !BSON_ITER_HOLDS_ARRAY(&s->it) || !bson_iter_recurse(&s->it, &s->it))
        return problem_set(p, PB_INTERNAL_ERROR, "MongoDB: a find reply without its batch");
    /* singleBatch: the server closes the cursor (FerretDB leaves a cursor
     * reached by its limit open otherwise, and each would cost a
     * killCursors); a batch that stops short of n because the reply reached
     * the server's 16 MB is not the end: the next page starts after it */
    s->cut = s->reply.len > MGC_REPLY_CUT;
    s->page = s->page * 4 < SCAN_PAGE_MAX ? s->page * 4 : SCAN_PAGE_MAX;
    s->asked = n;
    return true;
}

/* The next candidate (a new reference), or NULL at the end or on an error (p). */
static cr_entity_t *scan_next(scan_t *s, bool *failed, problem_t *p)
{
    *failed = false;
    for (;;) {
        if (s->ended)
            return NULL;
        if (!s->have_reply || !bson_iter_next(&s->it)) {
            if (s->have_reply && ((s->in_page < s->asked && !s->cut) || s->left == 0)) {
                s->ended = true;    /* a page shorter than asked: the last */
                return NULL;
            }
            if (!scan_page(s, p)) {
                s->ended = *failed = true;
                return NULL;
            }
            continue;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&s->it))
            continue;

        const uint8_t *data;
        uint32_t       len;
        bson_t         doc;
        mgc_docf_t     f;
        cr_entity_t   *e;

        bson_iter_document(&s->it, &len, &data);
        if (!bson_init_static(&doc, data, len)) {
            s->ended = *failed = true;
            problem_set(p, PB_INTERNAL_ERROR, "MongoDB: a reply that does not parse");
            return NULL;
        }
        s->in_page++;
        s->docs++;
        if (s->left > 0)
            s->left--;
        mgc_doc_fields(&doc, &f);
        s->last_c = f.c;
        if (f.id && (!s->last_id || strcmp(s->last_id, f.id))) {
            size_t n = strlen(f.id) + 1;

            if (n > s->id_cap) {
                s->id_cap  = n < 128 ? 128 : n;
                s->last_id = cr_xrealloc(s->last_id, s->id_cap);
            }
            memcpy(s->last_id, f.id, n);
        }
        if (!(e = doc_entity(s->db, s->t, &f, NULL, p)))
            s->ended = *failed = true;
        return e;
    }
}

static void scan_close(scan_t *s)
{
    atomic_fetch_add_explicit(&s->db->scan_docs, s->docs, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->db->scan_matched, s->matched, memory_order_relaxed);
    if (s->have_reply)
        bson_destroy(&s->reply);
    free(s->last_id);
    mgc_push(s->db, s->c);
}

static bool count_exact(mgc_t *db, mgc_tenant_t *t, const bson_t *q, size_t *count, bool *refused,
                        problem_t *p)
{
    mongoc_client_t     *c   = mgc_pop(db);
    mongoc_collection_t *col = mgc_coll(db, c, t, "entities");
    bson_error_t         err;
    int64_t              n   = mongoc_collection_count_documents(col, q, NULL, NULL, NULL, &err);

    mongoc_collection_destroy(col);
    mgc_push(db, c);
    if (n < 0) {
        *refused = mgc_refused(&err);
        return mgc_fail(p, "count", &err);
    }
    *count = (size_t)n;
    return true;
}

typedef struct vec {
    cr_entity_t **v;
    size_t        n, cap;
} vec_t;

static void vec_push(vec_t *v, cr_entity_t *e)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->v   = cr_xreallocarray(v->v, v->cap, sizeof(*v->v));
    }
    v->v[v->n++] = e;
}

static int order_cmp(const void *a, const void *b, void *o)
{
    cr_entity_t *const *x = a, *const *y = b;
    int                 r = order_compare(o, *x, *y);

    if (r)
        return r;
    /* ties: creation order, as the scan gave them */
    if ((*x)->created_at != (*y)->created_at)
        return (*x)->created_at < (*y)->created_at ? -1 : 1;
    return strcmp((*x)->id, (*y)->id);
}

static bool query_ordered(mgc_t *db, mgc_tenant_t *t, const entity_filter_t *f, const bson_t *q,
                          size_t offset, size_t limit, arena_t *a, store_page_t *out, size_t *matched,
                          bool *refused, problem_t *p)
{
    scan_t       s;
    vec_t        v = { 0 };
    cr_entity_t *e;
    bool         failed = false;

    scan_open(&s, db, t, q, 0, 0, 0);
    while ((e = scan_next(&s, &failed, p))) {
        if (filter_match(f, e)) {
            s.matched++;
            vec_push(&v, e);
        } else
            entity_unref(e);
    }
    *refused = s.refused && !s.docs;
    scan_close(&s);
    if (!failed && v.n)
        qsort_r(v.v, v.n, sizeof(*v.v), order_cmp, (void *)f->order_by);
    *matched = v.n;
    if (!failed && limit && offset < v.n) {
        size_t room = v.n - offset < limit ? v.n - offset : limit;
        out->items  = arena_alloc(a, room * sizeof(*out->items));
        for (size_t i = offset; i < offset + room; i++) {
            out->items[out->n++] = v.v[i];
            v.v[i] = NULL;
        }
    }
    for (size_t i = 0; i < v.n; i++)
        if (v.v[i])
            entity_unref(v.v[i]);
    free(v.v);
    return !failed;
}

/* A server that passed the probe (conn.c) may still refuse a spherical
 * filter at query time (a geometry it finds invalid, a 2dsphere index it
 * lost, a server behind the same URI that differs): then the query runs
 * again on the box prefilter alone, which every server answers and which
 * is a superset too (the broker judges every candidate). Only a refusal
 * before the first document: nothing has been handed on yet. */
static bool geo_fallback(mgc_t *db, const entity_filter_t *f, bool geo2d, bool refused, problem_t *p)
{
    if (!geo2d || !refused || !f || !f->geo)
        return false;
    uint64_t n = atomic_fetch_add_explicit(&db->geo_refused, 1, memory_order_relaxed) + 1;

    if (!(n & (n - 1)))         /* the 1st, 2nd, 4th, ...: not one line per query */
        LOG_W("mongoc: the server refused a spherical geo-filter (%.300s; %llu so far): the query "
              "runs on the box prefilter", p ? p->detail : "", (unsigned long long)n);
    return true;
}

static bool query_run(mgc_t *db, mgc_tenant_t *t, const entity_filter_t *f, bool geo2d, arena_t *a,
                      store_page_t *out, bool *refused, problem_t *p)
{
    size_t        offset = f->offset, limit = f->limit, matched = 0;
    bool          want_count = f->count, exact, failed = false;
    bson_t        q;
    scan_t        s;
    cr_entity_t  *e;
    vec_t         v = { 0 };

    *refused   = false;
    out->items = NULL;
    out->n     = 0;
    out->count = 0;
    if (!limit && !want_count)
        return true;
    exact = mgc_filter(f, geo2d, &q);
    filter_regex_reset();
    if (f->order_by) {
        bool ok = query_ordered(db, t, f, &q, offset, limit, a, out, &matched, refused, p);
        bson_destroy(&q);
        if (!ok || filter_regex_overflow(p)) {
            store_page_release(out);
            return false;
        }
        out->count = want_count ? matched : 0;
        return true;
    }
    if (exact) {
        /* the server's page and count are the answer; a page shorter than
         * the limit that is not past the end holds the last match, so the
         * count is offset + its size without a count of the server's (on
         * FerretDB a second scan) */
        if (limit) {
            scan_open(&s, db, t, &q, offset > INT64_MAX ? INT64_MAX : (int64_t)offset,
                      limit > INT64_MAX ? 0 : (int64_t)limit, limit > INT64_MAX ? 0 : (int64_t)limit);
            while ((e = scan_next(&s, &failed, p)))
                vec_push(&v, e);
            s.matched = s.docs;
            *refused  = s.refused && !s.docs;
            scan_close(&s);
        }
        if (want_count && !failed) {
            if (limit && v.n < limit && (v.n || !offset))
                out->count = offset + v.n;
            else if (!count_exact(db, t, &q, &out->count, refused, p))
                failed = true;
        }
    } else {
        /* the candidates likely needed: the page and a quarter more, unless counted */
        scan_open(&s, db, t, &q, 0, 0,
                  want_count || limit > SCAN_PAGE_MAX || offset > SCAN_PAGE_MAX ? 0
                                                                       : (int64_t)(offset + limit + (offset + limit) / 4 + 1));
        while ((e = scan_next(&s, &failed, p))) {
            if (!filter_match(f, e) || (s.matched++, ++matched <= offset) || v.n >= limit) {
                entity_unref(e);
                if (v.n >= limit && !want_count)
                    break;
                continue;
            }
            vec_push(&v, e);
            if (v.n >= limit && !want_count)
                break;
        }
        *refused = s.refused && !s.docs;
        scan_close(&s);
        if (want_count)
            out->count = matched;
    }
    bson_destroy(&q);
    if (v.n) {
        out->items = arena_alloc(a, v.n * sizeof(*out->items));
        memcpy(out->items, v.v, v.n * sizeof(*v.v));
        out->n = v.n;
    }
    free(v.v);
    if (failed || filter_regex_overflow(p)) {
        store_page_release(out);
        return false;
    }
    return true;
}

bool mgc_query(mgc_t *db, const char *tenant, const entity_filter_t *f, arena_t *a, store_page_t *out,
               problem_t *p)
{
    mgc_tenant_t *t = mgc_tenant_get(db, tenant, p);
    bool          refused;

    if (!t) {
        out->items = NULL;
        out->n = out->count = 0;
        return false;
    }
    return query_run(db, t, f, db->geo2d, a, out, &refused, p) ||
           (geo_fallback(db, f, db->geo2d, refused, p) && query_run(db, t, f, false, a, out, &refused, p));
}

static bool foreach_run(mgc_t *db, mgc_tenant_t *t, const entity_filter_t *f, bool geo2d,
                        void (*fn)(void *ud, const cr_entity_t *e), void *ud, bool *refused, problem_t *p)
{
    bson_t        q;
    scan_t        s;
    cr_entity_t  *e;
    bool          failed = false;

    mgc_filter(f, geo2d, &q);
    filter_regex_reset();
    scan_open(&s, db, t, &q, 0, 0, 0);
    while ((e = scan_next(&s, &failed, p))) {
        if (!f || filter_match(f, e)) {
            s.matched++;
            fn(ud, e);
        }
        entity_unref(e);
    }
    *refused = s.refused && !s.docs;
    scan_close(&s);
    bson_destroy(&q);
    return !failed && !filter_regex_overflow(p);
}

bool mgc_foreach(mgc_t *db, const char *tenant, const entity_filter_t *f,
                 void (*fn)(void *ud, const cr_entity_t *e), void *ud, problem_t *p)
{
    mgc_tenant_t *t = mgc_tenant_get(db, tenant, p);
    bool          refused;

    if (!t)
        return false;
    return foreach_run(db, t, f, db->geo2d, fn, ud, &refused, p) ||
           (geo_fallback(db, f, db->geo2d, refused, p) && foreach_run(db, t, f, false, fn, ud, &refused, p));
}

/* distinct(key) over the tenant's entities: fn for each (interned) string. */
static bool distinct(mgc_t *db, const char *tenant, const char *key, void (*fn)(void *ud, const char *s),
                     void *ud, problem_t *p)
{
    mgc_tenant_t      *t = mgc_tenant_get(db, tenant, p);
    mongoc_client_t   *c;
    mongoc_database_t *d;
    bson_t            *cmd, reply;
    bson_error_t       err;
    bson_iter_t        it, arr;
    bool               ok;

    if (!t)
        return false;
    c   = mgc_pop(db);
    d   = mongoc_client_get_database(c, t->dbname);
    cmd = BCON_NEW("distinct", BCON_UTF8("entities"), "key", BCON_UTF8(key));
    ok  = mongoc_database_read_command_with_opts(d, cmd, NULL, NULL, &reply, &err);
    if (ok && bson_iter_init_find(&it, &reply, "values") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            uint32_t    len;
            const char *s;

            if (!BSON_ITER_HOLDS_UTF8(&arr))
                continue;
            s = bson_iter_utf8(&arr, &len);
            fn(ud, intern(s, len));
        }
    }
    bson_destroy(&reply);
    bson_destroy(cmd);
    mongoc_database_destroy(d);
    mgc_push(db, c);
    return ok || mgc_fail(p, "distinct", &err);
}

bool mgc_types(mgc_t *db, const char *tenant, void (*fn)(void *ud, const char *type), void *ud,
               problem_t *p)
{
    return distinct(db, tenant, "t", fn, ud, p);
}

bool mgc_attributes(mgc_t *db, const char *tenant, void (*fn)(void *ud, const char *name), void *ud,
                    problem_t *p)
{
    return distinct(db, tenant, "a", fn, ud, p);
}

typedef struct stats_acc {
    mgc_t   *db;
    uint64_t entities, tenants;
} stats_acc_t;

static void stats_one(void *ud, mgc_tenant_t *t)
{
    stats_acc_t         *s   = ud;
    mongoc_client_t     *c   = mgc_pop(s->db);
    mongoc_collection_t *col = mongoc_client_get_collection(c, t->dbname, "entities");
    bson_error_t         err;
    int64_t              n   = mongoc_collection_estimated_document_count(col, NULL, NULL, NULL, &err);

    if (n > 0)
        s->entities += (uint64_t)n;
    s->tenants++;
    mongoc_collection_destroy(col);
    mgc_push(s->db, c);
}

/* One tenant's entity count for /metrics: the collection's metadata count
 * (estimatedDocumentCount: no scan on MongoDB), one round trip. */
bool mgc_tenant_entities(mgc_t *db, const char *tenant, uint64_t *n)
{
    mgc_tenant_t *t = mgc_tenant_get(db, tenant, NULL);

    if (!t)
        return false;
    stats_acc_t s = { .db = db };
    stats_one(&s, t);
    *n = s.entities;
    return true;
}

void mgc_stats(mgc_t *db, uint64_t *entities, uint64_t *tenants)
{
    stats_acc_t s = { .db = db };

    mgc_tenant_each(db, stats_one, &s);
    if (entities)
        *entities = s.entities;
    if (tenants)
        *tenants = s.tenants;
}
