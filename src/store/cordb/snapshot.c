/*
 * snapshot.c - a snapshot of corDB on disk: every tenant's objects and
 * entities as records (log.h) in snap-<seq>.cdb, written from the immutable
 * versions while writers go on, installed atomically (a temporary file,
 * fdatasync, rename, fsync of the directory), after which the log segments
 * no longer needed are removed (log.c).
 *
 * The log is rolled over to a new segment first; `seq` is the last record of
 * the old segments, all of which is in memory by then. The versions read
 * afterwards may be newer than seq (writers go on): that is harmless because
 * replaying the log after seq is idempotent (a record sets a version or
 * removes an id), so snapshot + log after seq = the state at the end of the
 * log, provided the records of those newer versions are on disk before the
 * snapshot is installed (cdb_log_sync: else a crash could leave a snapshot
 * holding part of a batch whose records were lost). Creation order is kept: each tenant's entities are written in slot
 * order. A tenant is read in chunks of CDB_SCAN_CHUNK under its read lock:
 * each chunk takes references (pins the versions), drops the lock, and only
 * then encodes and writes them.
 *
 * One snapshot at a time (snap_mu): the log's thread (every --dbSnapshotSize
 * of log) and POST /admin/snapshot share it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../model/codec.h"
#include "cordb.h"
#include "log.h"

static pthread_mutex_t snap_mu = PTHREAD_MUTEX_INITIALIZER;
/* The last snapshot's outcome (for GET /admin/snapshot), under last_mu. */
static pthread_mutex_t        last_mu = PTHREAD_MUTEX_INITIALIZER;
static store_snapshot_info_t  last_info;
static bool                   last_running, last_ok, last_any;
static char                   last_error[256];

typedef struct snap {
    int      fd;
    sbuf_t   sb;
    uint64_t n, bytes, entities, objects;
    uint64_t synced;            /* bytes written back (sync_file_range) */
    int      err;               /* errno of the first failed write */
} snap_t;

static void snap_flush(snap_t *sn, bool force)
{
    if (!sn->sb.len || (!force && sn->sb.len < (1u << 20)))
        return;
    cdb_rec_seal(sn->sb.p, sn->sb.len, sn->n + 1);
    for (size_t off = 0; off < sn->sb.len;) {   /* the seal counted the records: count again */
        uint32_t len = (uint32_t)(uint8_t)sn->sb.p[off] | (uint32_t)(uint8_t)sn->sb.p[off + 1] << 8 |
                       (uint32_t)(uint8_t)sn->sb.p[off + 2] << 16 |
                       (uint32_t)(uint8_t)sn->sb.p[off + 3] << 24;

        off += 8 + (size_t)len;
        sn->n++;
    }
    if (!sn->err) {
        const char *b = sn->sb.p;
        size_t      left = sn->sb.len;

        while (left) {
            ssize_t k = write(sn->fd, b, left);

            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                sn->err = k < 0 ? errno : EIO;
                break;
            }
            b += k;
            left -= (size_t)k;
        }
    }
    sn->bytes += sn->sb.len;
    sb_clear(&sn->sb);
    /* Write back as we go (every 8 MiB, waiting for the range before): a
     * snapshot of a large store would otherwise fill the page cache with
     * dirty pages, and the kernel then throttles every writer of the
     * process, the log's pwrite under a tenant's write lock included. */
    if (!sn->err && sn->bytes - sn->synced >= (8u << 20)) {
        sync_file_range(sn->fd, (off_t)sn->synced, (off_t)(sn->bytes - sn->synced),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                        SYNC_FILE_RANGE_WAIT_AFTER);
        posix_fadvise(sn->fd, 0, (off_t)sn->bytes, POSIX_FADV_DONTNEED);
        sn->synced = sn->bytes;
    }
}

static void snap_tenant(snap_t *sn, cdb_tenant_t *t)
{
    cr_entity_t *chunk[CDB_SCAN_CHUNK], *e;
    cdb_scan_t   sc;
    size_t       k;

    pthread_rwlock_rdlock(&t->lock);
    for (uint32_t i = 0; i < t->objs.n; i++) {
        const cdb_obj_t *ob = t->objs.v[i];
        size_t           at;

        if (!ob)
            continue;
        at = cdb_rec_begin(&sn->sb, CDB_REC_OBJ_PUT, t->name);
        cr_put_varint(&sn->sb, (uint64_t)(ob->key[0] - '0'));
        cr_put_str(&sn->sb, ob->key + 1, strlen(ob->key + 1));
        cr_put_str(&sn->sb, ob->json, ob->len);
        cdb_rec_end(&sn->sb, at);
        sn->objects++;
    }
    cdb_scan_begin(&sc, t, NULL, NULL);
    for (;;) {
        k = 0;
        while (k < CDB_SCAN_CHUNK && (e = cdb_scan_next(&sc, NULL))) {
            entity_ref(e);
            chunk[k++] = e;
        }
        if (k == CDB_SCAN_CHUNK)
            cdb_scan_pause(&sc);
        pthread_rwlock_unlock(&t->lock);
        for (size_t i = 0; i < k; i++) {
            size_t at = cdb_rec_begin(&sn->sb, CDB_REC_PUT, t->name);

            entity_encode(&sn->sb, chunk[i]);
            cdb_rec_end(&sn->sb, at);
            entity_unref(chunk[i]);
        }
        sn->entities += k;
        snap_flush(sn, false);
        if (k < CDB_SCAN_CHUNK)
            break;
        cdb_scan_yield(t);
        pthread_rwlock_rdlock(&t->lock);
        cdb_scan_resume(&sc);
    }
    cdb_scan_end(&sc);
}

typedef struct tlist {
    cdb_tenant_t **v;
    size_t         n, cap;
} tlist_t;

static void collect_tenant(void *ud, cdb_tenant_t *t)
{
    tlist_t *l = ud;

    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v   = cr_xreallocarray(l->v, l->cap, sizeof(*l->v));
    }
    l->v[l->n++] = t;
}

static bool snap_fail(problem_t *p, const char *what, const char *path, int err)
{
    problem_set(p, PB_HTTP, "corDB: the snapshot cannot %s %s (%s); the previous snapshot and "
                "the log stay as they are", what, path, strerror(err));
    if (p)
        p->status = 503;
    return false;
}

bool cdb_snapshot(cdb_t *db, store_snapshot_info_t *info, problem_t *p)
{
    cdb_log_t      *log = cdb_db_log(db);
    struct timespec t0, t1;
    snap_t          sn = { .fd = -1 };
    tlist_t         tl = { 0 };
    uint64_t        seq, upto;
    uint32_t        seg;
    char            tmp[4096], path[4096], head[CDB_MAGIC_LEN + 8];
    size_t          at;
    bool            ok = false;
    const char     *dir;

    if (!log)
        return problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                           "corDB runs in RAM (no --dbDir): there is nothing to snapshot to");
    dir = cdb_log_dir(log);
    pthread_mutex_lock(&snap_mu);
    pthread_mutex_lock(&last_mu);
    last_running = true;
    pthread_mutex_unlock(&last_mu);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!cdb_log_roll(log, &seq, &seg, p)) {
        if (p)
            p->kind = PB_HTTP, p->status = 503;
        goto done;
    }
    snprintf(tmp, sizeof(tmp), "%s/snap-%016llx.tmp", dir, (unsigned long long)seq);
    cdb_snap_path(path, sizeof(path), dir, seq);
    sn.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (sn.fd < 0) {
        snap_fail(p, "create", tmp, errno);
        goto done;
    }
    memcpy(head, CDB_SNAP_MAGIC, CDB_MAGIC_LEN);
    for (int i = 0; i < 8; i++)
        head[CDB_MAGIC_LEN + i] = (char)(seq >> (8 * i));
    if (write(sn.fd, head, sizeof(head)) != (ssize_t)sizeof(head)) {
        snap_fail(p, "write", tmp, errno ? errno : EIO);
        goto done;
    }
    sb_init(&sn.sb, NULL, 1u << 20);
    cdb_tenant_each(db, collect_tenant, &tl);
    for (size_t i = 0; i < tl.n && !sn.err; i++)
        snap_tenant(&sn, tl.v[i]);
    snap_flush(&sn, true);
    at = cdb_rec_begin(&sn.sb, CDB_REC_END, "");
    cr_put_varint(&sn.sb, sn.n);
    cdb_rec_end(&sn.sb, at);
    snap_flush(&sn, true);
    if (sn.err) {
        snap_fail(p, "write", tmp, sn.err);
        goto done;
    }
    if (fdatasync(sn.fd) != 0) {
        snap_fail(p, "sync", tmp, errno);
        goto done;
    }
    /* The versions read may be newer than seq, up to the last record logged
     * now: those records must be on disk before the snapshot is installed,
     * else a snapshot could hold part of a batch (or a write) whose records
     * a crash then loses. With them on disk, replaying the log after seq
     * makes every entity exact again. */
    if (!cdb_log_sync(log, &upto, p)) {
        if (p)
            p->kind = PB_HTTP, p->status = 503;
        goto done;
    }
    close(sn.fd);
    sn.fd = -1;
    if (rename(tmp, path) != 0) {
        snap_fail(p, "install", path, errno);
        goto done;
    }
    if (!cdb_fsync_dir(dir)) {
        snap_fail(p, "sync the directory of", path, errno);
        goto done;
    }
    cdb_log_snapshot_done(log, seq, seg);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ok = true;
    pthread_mutex_lock(&last_mu);
    last_info.seq      = seq;
    last_info.entities = sn.entities;
    last_info.objects  = sn.objects;
    last_info.bytes    = sn.bytes + sizeof(head);
    last_info.ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    snprintf(last_info.file, sizeof(last_info.file), "%.255s", path);
    if (info)
        *info = last_info;
    pthread_mutex_unlock(&last_mu);
    LOG_I("corDB: snapshot %s: %llu entities, %llu objects, %llu bytes", path,
          (unsigned long long)sn.entities, (unsigned long long)sn.objects,
          (unsigned long long)(sn.bytes + sizeof(head)));
done:
    if (sn.fd >= 0) {
        close(sn.fd);
        unlink(tmp);
    }
    if (sn.sb.p)
        sb_release(&sn.sb);
    free(tl.v);
    pthread_mutex_lock(&last_mu);
    last_running = false;
    last_any     = true;
    last_ok      = ok;
    snprintf(last_error, sizeof(last_error), "%.255s", ok || !p ? "" : p->detail);
    pthread_mutex_unlock(&last_mu);
    pthread_mutex_unlock(&snap_mu);
    return ok;
}

bool cdb_snapshot_start(cdb_t *db, problem_t *p)
{
    cdb_log_t *log = cdb_db_log(db);

    if (!log)
        return problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                           "corDB runs in RAM (no --dbDir): there is nothing to snapshot to");
    if (!cdb_log_want_snapshot(log))
        return problem_set(p, PB_INTERNAL_ERROR, "corDB: the snapshot thread is not running");
    return true;
}

bool cdb_snapshot_last(cdb_t *db, store_snapshot_info_t *info, bool *running, problem_t *p)
{
    bool any;

    if (!cdb_db_log(db))
        return problem_set(p, PB_OPERATION_NOT_SUPPORTED,
                           "corDB runs in RAM (no --dbDir): there are no snapshots");
    pthread_mutex_lock(&last_mu);
    *info    = last_info;
    *running = last_running;
    any      = last_any;
    if (any && !last_ok)
        snprintf(info->error, sizeof(info->error), "%s", last_error);
    else
        info->error[0] = '\0';
    pthread_mutex_unlock(&last_mu);
    return true;
}
