/*
 * hlog.c - the files of corDB history on --dbDir (hlog.h): replay at start,
 * appends, a thread that fdatasyncs the log every --dbSyncInterval ms, and
 * snapshots installed by rename.
 *
 * Why a file of its own and not records in corDB's log: history is written
 * by the change hook, after the store's atomic step, and the temporal API
 * writes history that no store change carries; its records therefore come
 * in the history's own order. Durability: the store's --dbSync promise.
 * always: the write waits (hlog_sync, from ops_admitted) for an fdatasync
 * of its history, one for every writer waiting at that time (group commit);
 * interval: a thread fdatasyncs every --dbSyncInterval ms (doc/history.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hlog.h"

struct hlog {
    char           *dir;
    int             fd;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    pthread_cond_t  synced_cv;      /* always: a waiter's bytes are synced */
    pthread_t       thread;
    bool            stop, dirty, failed;
    bool            always;         /* --dbSync always: group commit (hlog_sync) */
    int             sync_ms;
    uint64_t        size;
    /* bytes ever appended (across snapshots) and bytes known durable: a
     * waiter of hlog_sync waits until synced covers what was written */
    uint64_t        written, synced, want;
    uint64_t        fail_mark;      /* always: the bytes of the last failed fdatasync */
    uint64_t        fsyncs;
    uint64_t        gen;            /* generation of the log (its first record) */
};

/* hlog's own record: 0x00, u64 generation. The snapshot starts with the
 * generation of the log that continues it; a log of an older generation
 * (a crash between installing a snapshot and emptying the log) is covered
 * by the snapshot and not replayed. */
#define GEN_LEN 9
static void gen_record(uint8_t out[GEN_LEN], uint64_t gen)
{
    out[0] = 0;
    memcpy(out + 1, &gen, 8);
}

static bool is_gen(const uint8_t *p, size_t n, uint64_t *gen)
{
    if (n != GEN_LEN || p[0] != 0)
        return false;
    memcpy(gen, p + 1, 8);
    return true;
}

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0x82f63b78u ^ (c >> 1) : c >> 1;   /* CRC-32C */
        crc_table[i] = c;
    }
}

static uint32_t crc32c(const void *buf, size_t n)
{
    const uint8_t *p = buf;
    uint32_t       c = 0xffffffffu;

    pthread_once(&crc_once, crc_init);
    while (n--)
        c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool put_record(int fd, const void *payload, size_t len)
{
    uint8_t  head[8];
    uint32_t l = (uint32_t)len, c = crc32c(payload, len);
    memcpy(head, &l, 4);
    memcpy(head + 4, &c, 4);
    return write_all(fd, head, 8) && write_all(fd, payload, len);
}

/* Replays file path; *good gets the length of its well-formed prefix, *gen
 * its generation (0: none). A log whose generation is below min_gen is
 * skipped (*good 0). */
static bool replay_file(const char *path, bool snapshot, off_t *good, uint64_t *gen, uint64_t min_gen,
                        bool (*replay)(void *, const uint8_t *, size_t, bool), void *ud, problem_t *p)
{
    *gen = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *good = 0;
    if (fd < 0) {
        if (errno == ENOENT)
            return true;
        return problem_set(p, PB_INTERNAL_ERROR, "history: cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return problem_set(p, PB_INTERNAL_ERROR, "history: cannot read %s: %s", path, strerror(errno));
    }
    size_t   n   = (size_t)st.st_size;
    uint8_t *buf = n ? cr_xmalloc(n) : NULL;
    size_t   got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    bool   ok  = true;
    size_t off = 0;
    while (ok && off + 8 <= got) {
        uint32_t l, c;
        memcpy(&l, buf + off, 4);
        memcpy(&c, buf + off + 4, 4);
        if (off + 8 + l > got || crc32c(buf + off + 8, l) != c)
            break;                                  /* a torn tail */
        uint64_t g;
        if (off == 0 && is_gen(buf + 8, l, &g)) {
            *gen = g;
            if (!snapshot && g < min_gen) {         /* covered by the snapshot */
                LOG_I("history: %s is older than history.snap: not replayed", path);
                free(buf);
                *good = 0;
                return true;
            }
            off += 8 + l;
            continue;
        }
        if (!replay(ud, buf + off + 8, l, snapshot)) {
            ok = problem_set(p, PB_INTERNAL_ERROR, "history: %s: a record at offset %zu cannot be read", path, off);
            break;
        }
        off += 8 + l;
    }
    if (ok && snapshot && off != got)
        ok = problem_set(p, PB_INTERNAL_ERROR, "history: %s is damaged at offset %zu", path, off);
    else if (ok && off != got)
        LOG_W("history: %s: %zu bytes of a torn tail cut", path, got - off);
    free(buf);
    *good = (off_t)off;
    return ok;
}

/* The syncer. interval: an fdatasync every sync_ms when something was
 * written. always: an fdatasync as soon as a writer waits (hlog_sync), one
 * for every writer that waits meanwhile (group commit). */
static void *sync_main(void *arg)
{
    hlog_t *l = arg;

    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->always) {
            if (l->want <= l->synced) {
                pthread_cond_wait(&l->cv, &l->mu);
                continue;
            }
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)l->sync_ms * 1000000L;
            ts.tv_sec  += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        }
        if (l->dirty && l->fd >= 0) {
            int      fd     = l->fd;
            uint64_t target = l->written;
            l->dirty = false;
            pthread_mutex_unlock(&l->mu);
            int rc = fdatasync(fd);
            if (rc != 0)
                LOG_E("history: fdatasync of the history log: %s", strerror(errno));
            pthread_mutex_lock(&l->mu);
            l->fsyncs++;
            if (rc == 0 && target > l->synced)
                l->synced = target;
            else if (rc != 0) {
                l->dirty     = true;       /* tried again at the next write or interval */
                l->fail_mark = target;     /* the writers waiting for these bytes fail */
                if (l->want <= target)
                    l->want = l->synced;
            }
            pthread_cond_broadcast(&l->synced_cv);
        } else if (l->want > l->synced) {
            l->synced = l->want;           /* nothing dirty: what was written is synced */
            pthread_cond_broadcast(&l->synced_cv);
        }
    }
    pthread_cond_broadcast(&l->synced_cv);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

hlog_t *hlog_open(const char *dir, bool always, int sync_ms, bool (*replay)(void *, const uint8_t *, size_t, bool), void *ud,
                  problem_t *p)
{
    char     snap[4096], logp[4096];
    off_t    good;
    uint64_t snap_gen, log_gen;

    snprintf(snap, sizeof snap, "%s/history.snap", dir);
    snprintf(logp, sizeof logp, "%s/history.log", dir);
    if (!replay_file(snap, true, &good, &snap_gen, 0, replay, ud, p))
        return NULL;
    if (!replay_file(logp, false, &good, &log_gen, snap_gen, replay, ud, p))
        return NULL;
    hlog_t *l = cr_xcalloc(1, sizeof *l);
    l->dir     = cr_xstrdup(dir);
    l->sync_ms = sync_ms > 0 ? sync_ms : 100;
    l->always  = always;
    l->fd      = open(logp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (l->fd < 0 || ftruncate(l->fd, good) != 0 || lseek(l->fd, good, SEEK_SET) < 0) {
        problem_set(p, PB_INTERNAL_ERROR, "history: cannot write %s: %s", logp, strerror(errno));
        if (l->fd >= 0) close(l->fd);
        free(l->dir);
        free(l);
        return NULL;
    }
    l->size = (uint64_t)good;
    l->gen  = snap_gen > log_gen ? snap_gen : log_gen;
    if (!good) {                            /* a new (or covered) log starts with its generation */
        uint8_t g[GEN_LEN];
        if (!l->gen) l->gen = 1;
        gen_record(g, l->gen);
        if (!put_record(l->fd, g, GEN_LEN)) {
            problem_set(p, PB_INTERNAL_ERROR, "history: cannot write %s: %s", logp, strerror(errno));
            close(l->fd);
            free(l->dir);
            free(l);
            return NULL;
        }
        l->size = 8 + GEN_LEN;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->synced_cv, NULL);
    if (pthread_create(&l->thread, NULL, sync_main, l) != 0) {
        LOG_E("history: cannot start the sync thread; aborting");
        abort();
    }
    return l;
}

void hlog_close(hlog_t *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    if (l->fd >= 0) {
        if (fdatasync(l->fd) != 0)
            LOG_E("history: fdatasync of the history log at close: %s", strerror(errno));
        close(l->fd);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->synced_cv);
    free(l->dir);
    free(l);
}

bool hlog_append(hlog_t *l, const void *payload, size_t len)
{
    bool ok;

    pthread_mutex_lock(&l->mu);
    ok = !l->failed && put_record(l->fd, payload, len);
    if (ok) {
        l->size    += 8 + len;
        l->written += 8 + len;
        l->dirty    = true;
    } else if (!l->failed) {
        l->failed = true;
        LOG_E("history: the history log cannot be written (%s): history is kept in memory only until a "
              "snapshot succeeds", strerror(errno));
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

bool hlog_sync(hlog_t *l)
{
    bool ok = true;

    pthread_mutex_lock(&l->mu);
    if (l->always && !l->failed) {
        uint64_t target = l->written;
        if (target > l->want) {
            l->want = target;
            pthread_cond_signal(&l->cv);
        }
        while (l->synced < target && !l->stop && !l->failed) {
            pthread_cond_wait(&l->synced_cv, &l->mu);
            if (l->synced < target && l->fail_mark >= target) {
                ok = false;                /* the fdatasync of our bytes failed */
                break;
            }
        }
    }
    ok = ok && !l->failed;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

uint64_t hlog_fsyncs(hlog_t *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->fsyncs;
    pthread_mutex_unlock(&l->mu);
    return n;
}

uint64_t hlog_size(hlog_t *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->size;
    pthread_mutex_unlock(&l->mu);
    return n;
}

typedef struct emit_ctx {
    int  fd;
    bool ok;
} emit_ctx_t;

static void emit(void *ctx, const void *payload, size_t n)
{
    emit_ctx_t *e = ctx;
    if (e->ok)
        e->ok = put_record(e->fd, payload, n);
}

bool hlog_snapshot(hlog_t *l, void (*dump)(void *, void (*)(void *, const void *, size_t), void *), void *ud,
                   problem_t *p)
{
    char tmp[4096], snap[4096], logp[4096];

    snprintf(tmp, sizeof tmp, "%s/history.snap.tmp", l->dir);
    snprintf(snap, sizeof snap, "%s/history.snap", l->dir);
    snprintf(logp, sizeof logp, "%s/history.log", l->dir);
    pthread_mutex_lock(&l->mu);
    emit_ctx_t e = { open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), true };
    if (e.fd < 0) {
        pthread_mutex_unlock(&l->mu);
        return problem_set(p, PB_INTERNAL_ERROR, "history: cannot write %s: %s", tmp, strerror(errno));
    }
    uint8_t g[GEN_LEN];
    gen_record(g, l->gen + 1);
    emit(&e, g, GEN_LEN);
    dump(ud, emit, &e);
    if (e.ok && fdatasync(e.fd) != 0)
        e.ok = false;
    close(e.fd);
    /* installed by rename; then the log starts empty */
    if (e.ok && rename(tmp, snap) != 0)
        e.ok = false;
    if (e.ok) {
        int dfd = open(l->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            if (fsync(dfd) != 0) e.ok = false;
            close(dfd);
        }
    }
    if (e.ok) {
        /* the snapshot is in (commit point): the log starts again at the next generation */
        l->gen++;
        gen_record(g, l->gen);
        if (ftruncate(l->fd, 0) != 0 || lseek(l->fd, 0, SEEK_SET) < 0 || !put_record(l->fd, g, GEN_LEN)) {
            l->failed = true;
            LOG_E("history: the history log cannot be started again after a snapshot (%s)", strerror(errno));
        } else {
            l->size   = 8 + GEN_LEN;
            l->failed = false;
            /* everything written so far is in the synced snapshot */
            l->synced = l->want = l->written;
            pthread_cond_broadcast(&l->synced_cv);
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (!e.ok) {
        unlink(tmp);
        return problem_set(p, PB_INTERNAL_ERROR, "history: the snapshot could not be written: %s", strerror(errno));
    }
    return true;
}
