/*
 * watch.c - the change stream that tells this process another one wrote a
 * stored object (subscription, registration, hosted @context), where the
 * server has change streams (a replica set; FerretDB has none).
 *
 * Every object write bumps the version document {_id: "objects", v} in the
 * default database's "meta" (objects.c). Without a stream, each process
 * reads that document every --syncInterval (ops/objsync.c through
 * mgc_obj_changed) and reloads the objects when it moved. With one, a thread
 * here watches that document (a change stream on "meta", $match on its
 * _id) and raises a flag at each event; mgc_obj_changed then asks the flag,
 * not the server: no round trip per interval, and the same reload when it
 * is raised. The bound stays: objsync asks every --syncInterval, so a change
 * is seen within about that time, whichever path is live.
 *
 * Failure: the stream is a cursor on one pooled client, read with
 * maxAwaitTimeMS (below --dbTimeout, so a stalled server fails it by the
 * socket timeout rather than leaving it silent); libmongoc resumes it once
 * by itself on a resumable error. Any error it reports, or an invalidate
 * event, closes it: the flag is raised (a reload: what happened meanwhile
 * is not known), mgc_obj_changed polls again (its version as last read is
 * old, so the first poll reloads too), and the thread opens the stream
 * again after WATCH_RETRY_MS (doubled after each failure in a row, up to
 * WATCH_RETRY_MAX: a server without streams is asked rarely), resuming after the last resume token it kept
 * (postBatchResumeToken or the last event's _id), or from now when the
 * server says that token is gone. Opening it raises the flag once, for
 * what was written while it was closed.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mgc.h"

#define WATCH_RETRY_MS 10000        /* a failed stream is opened again after this, doubled per */
#define WATCH_RETRY_MAX 300000      /* failure in a row up to this */

struct mgc_watch {
    mgc_t      *db;
    pthread_t   thr;
    _Atomic int stop;
    _Atomic int live;               /* the stream is open: mgc_watch_changed answers */
    _Atomic int changed;            /* an event (or an opening) since the last ask */
    bson_t     *resume;             /* the resume token kept (the thread's) */
};

void mgc_watch_pipeline(bson_t *pipeline)
{
    bson_t arr, st, m, or, a, b;

    bson_init(pipeline);
    bson_append_array_begin(pipeline, "pipeline", 8, &arr);
    bson_append_document_begin(&arr, "0", 1, &st);
    bson_append_document_begin(&st, "$match", 6, &m);
    bson_append_array_begin(&m, "$or", 3, &or);
    bson_append_document_begin(&or, "0", 1, &a);
    BSON_APPEND_UTF8(&a, "documentKey._id", "objects");
    bson_append_document_end(&or, &a);
    bson_append_document_begin(&or, "1", 1, &b);
    BSON_APPEND_UTF8(&b, "operationType", "invalidate");
    bson_append_document_end(&or, &b);
    bson_append_array_end(&m, &or);
    bson_append_document_end(&st, &m);
    bson_append_document_end(&arr, &st);
    bson_append_array_end(pipeline, &arr);
}

void mgc_watch_opts(bson_t *opts, const bson_t *resume, int32_t await_ms)
{
    bson_init(opts);
    BSON_APPEND_INT64(opts, "maxAwaitTimeMS", await_ms);
    if (resume)
        BSON_APPEND_DOCUMENT(opts, "resumeAfter", resume);
}

static void nap(mgc_watch_t *w, int ms)
{
    for (; ms > 0 && !atomic_load(&w->stop); ms -= 100)
        nanosleep(&(struct timespec){ 0, 100 * 1000000L }, NULL);
}

static bool is_invalidate(const bson_t *ev)
{
    bson_iter_t it;

    return bson_iter_init_find(&it, ev, "operationType") && BSON_ITER_HOLDS_UTF8(&it) &&
           !strcmp(bson_iter_utf8(&it, NULL), "invalidate");
}

/* One stream, from its opening to its failure (or the stop); true when it
 * was open. */
static bool watch_once(mgc_watch_t *w, int retry_ms)
{
    mgc_t                  *db = w->db;
    mongoc_client_t        *c  = mgc_pop(db);
    mongoc_collection_t    *col = mongoc_client_get_collection(c, db->prefix, "meta");
    int32_t                 await = db->timeout_ms / 2 < 1000 ? db->timeout_ms / 2 : 1000;
    bson_t                  pipeline, opts;
    const bson_t           *ev, *edoc, *tok;
    bson_error_t            err;
    mongoc_change_stream_t *cs;
    bool                    opened = false, invalid = false;

    mgc_watch_pipeline(&pipeline);
    mgc_watch_opts(&opts, w->resume, await > 0 ? await : 1);
    cs = mongoc_collection_watch(col, &pipeline, &opts);
    bson_destroy(&pipeline);
    bson_destroy(&opts);
    memset(&err, 0, sizeof err);
    while (!atomic_load(&w->stop)) {
        bool got = mongoc_change_stream_next(cs, &ev);

        if (mongoc_change_stream_error_document(cs, &err, &edoc))
            break;
        if (got && is_invalidate(ev)) {
            invalid = true;
            snprintf(err.message, sizeof err.message, "the collection was dropped or renamed (invalidate)");
            break;
        }
        if (!opened) {
            opened = true;
            atomic_store(&w->changed, 1);   /* what was written while it was closed */
            atomic_store(&w->live, 1);
            LOG_I("mongoc: a change stream on %s.meta tells this process of other processes' objects "
                  "(the version document is no longer polled)", db->prefix);
        }
        if (got)
            atomic_store(&w->changed, 1);
        if ((tok = mongoc_change_stream_get_resume_token(cs)) && (!w->resume || !bson_equal(w->resume, tok))) {
            if (w->resume)
                bson_destroy(w->resume);
            w->resume = bson_copy(tok);
        }
    }
    if (!atomic_load(&w->stop)) {
        atomic_store(&w->live, 0);
        /* 286 ChangeStreamHistoryLost, 280 ChangeStreamFatalError: the
         * token cannot be resumed from; an invalidated stream neither */
        if (w->resume && (invalid || err.code == 286 || err.code == 280)) {
            bson_destroy(w->resume);
            w->resume = NULL;
        }
        LOG_W("mongoc: the change stream on %s.meta %s: %s; the version document is polled every "
              "--syncInterval (the stream is tried again in %d s)", db->prefix,
              opened ? "failed" : "cannot be opened", err.message, (opened ? WATCH_RETRY_MS : retry_ms) / 1000);
    }
    atomic_store(&w->live, 0);
    atomic_store(&w->changed, 1);
    mongoc_change_stream_destroy(cs);
    mongoc_collection_destroy(col);
    mgc_push(db, c);
    return opened;
}

static void *watch_main(void *arg)
{
    mgc_watch_t *w = arg;
    int          retry = WATCH_RETRY_MS;

    while (!atomic_load(&w->stop)) {
        if (watch_once(w, retry))
            retry = WATCH_RETRY_MS;
        nap(w, retry);
        if (retry < WATCH_RETRY_MAX)
            retry = retry * 2 < WATCH_RETRY_MAX ? retry * 2 : WATCH_RETRY_MAX;
    }
    return NULL;
}

void mgc_watch_start(mgc_t *db)
{
    const char  *force = getenv("CORAINE_MONGOC_WATCH");
    mgc_watch_t *w;

    if (!db->replset && !(force && !strcmp(force, "1")))
        return;
    w = cr_xcalloc(1, sizeof(*w));
    w->db = db;
    if (pthread_create(&w->thr, NULL, watch_main, w) != 0) {
        LOG_W("mongoc: cannot start the change stream's thread: the version document is polled");
        free(w);
        return;
    }
    db->watch = w;
}

void mgc_watch_stop(mgc_t *db)
{
    mgc_watch_t *w = db ? db->watch : NULL;

    if (!w)
        return;
    atomic_store(&w->stop, 1);
    pthread_join(w->thr, NULL);
    if (w->resume)
        bson_destroy(w->resume);
    free(w);
    db->watch = NULL;
}

int mgc_watch_changed(mgc_t *db)
{
    mgc_watch_t *w = db->watch;

    if (!w || !atomic_load(&w->live))
        return -1;
    return atomic_exchange(&w->changed, 0);
}
