/*
 * hlog.c - the files of corDB history on --dbDir (hlog.h): replay at start,
 * appends, a thread that fdatasyncs the log every --dbSyncInterval ms (or at
 * once for the writers waiting, --dbSync always), and snapshots written from
 * a consistent copy in memory and installed by rename while writers go on.
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
#include <stdatomic.h>
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
    bool            stop, dirty;
    _Atomic bool    failed;         /* written under mu; read without it (hlog_failed) */
    bool            always;         /* --dbSync always: group commit (hlog_sync) */
    bool            syncing;        /* the thread is in an fdatasync of fd (no lock held) */
    int             sync_ms;
    uint64_t        size;
    /* bytes ever appended (across snapshots) and bytes known durable: a
     * waiter of hlog_sync waits until synced covers what was written */
    uint64_t        written, synced, want;
    uint64_t        fail_mark;      /* always: the bytes of the last failed fdatasync */
    /* faults so far (a failed write or fdatasync); `failed` is cleared by a
     * snapshot whose mark came after the last of them (fault, compact) */
    uint64_t        faults;
    uint64_t        fsyncs;
    uint64_t        gen;            /* generation of the log (its first record) */
    /* a compaction's last round on: no fdatasync of the old log acknowledges
     * bytes (of written) past it (compact); UINT64_MAX: none */
    uint64_t        ack_cap;
    int             sync_fd;        /* the fd the syncer is syncing (syncing) */
};

/* hlog's own record, the first of each file: 0x00, u64 generation, and in
 * a snapshot u64 offset. A log starts with its generation; a snapshot with
 * the generation of the log it was taken from and the offset in that log
 * where the records it does not hold begin (the log's end at the time of the
 * consistent copy; 0: every record of that generation). So at start a log
 * of the snapshot's generation is replayed from that offset, a newer one
 * wholly, an older one (covered) not at all. After installing a snapshot
 * the log is compacted: its records from the offset on are copied into a
 * log of the next generation (installed by rename), while writers go on. */
#define GEN_LEN  9
#define SNAP_LEN 17
static void gen_record(uint8_t out[SNAP_LEN], uint64_t gen, uint64_t off)
{
    out[0] = 0;
    memcpy(out + 1, &gen, 8);
    memcpy(out + 9, &off, 8);
}

static bool is_gen(const uint8_t *p, size_t n, uint64_t *gen, uint64_t *off)
{
    if ((n != GEN_LEN && n != SNAP_LEN) || p[0] != 0)
        return false;
    memcpy(gen, p + 1, 8);
    *off = 0;
    if (n == SNAP_LEN)
        memcpy(off, p + 9, 8);
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

/* Under mu: a write or an fdatasync of the log failed, so the files may
 * not hold every record memory does (a failed fdatasync cannot tell what
 * reached the disk, and Linux forgets the error once reported: a later
 * fdatasync that succeeds proves nothing about the bytes before it). The
 * log is failed (hlog_sync answers false) until a snapshot marked after
 * this fault is installed and its compacted log synced (compact): the
 * snapshot holds what memory holds, the new log every record after its
 * mark. Appends go on meanwhile (best effort), for that new log. */
static void fault_locked(hlog_t *l, const char *what, int err)
{
    l->faults++;
    if (!l->failed)
        LOG_E("history: %s of the history log failed (%s): writes are answered 503 (--dbSync always) until a "
              "snapshot taken after the fault is on disk (tried while the fault lasts)", what, strerror(err));
    l->failed = true;
}

/* Replays file path; *good gets the length of its well-formed prefix, *gen
 * its generation (0: none), *off (a snapshot) the offset it covers its log
 * to. A log of generation min_gen is replayed from offset min_off, one below
 * min_gen is skipped (*good 0). */
static bool replay_file(const char *path, bool snapshot, off_t *good, uint64_t *gen, uint64_t *off,
                        uint64_t min_gen, uint64_t min_off,
                        bool (*replay)(void *, const uint8_t *, size_t, bool), void *ud, problem_t *p)
{
    *gen = 0;
    *off = 0;
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
    bool   ok   = true;
    size_t from = 0;                                /* records before it are in the snapshot */
    size_t o    = 0;
    while (ok && o + 8 <= got) {
        uint32_t l, c;
        memcpy(&l, buf + o, 4);
        memcpy(&c, buf + o + 4, 4);
        if (o + 8 + l > got || crc32c(buf + o + 8, l) != c)
            break;                                  /* a torn tail */
        uint64_t g, go;
        if (o == 0 && is_gen(buf + 8, l, &g, &go)) {
            *gen = g;
            *off = go;
            if (!snapshot && g < min_gen) {         /* covered by the snapshot */
                LOG_I("history: %s is older than history.snap: not replayed", path);
                free(buf);
                *good = 0;
                return true;
            }
            if (!snapshot && g == min_gen)
                from = min_off;
            o += 8 + l;
            continue;
        }
        if (o >= from && !replay(ud, buf + o + 8, l, snapshot)) {
            ok = problem_set(p, PB_INTERNAL_ERROR, "history: %s: a record at offset %zu cannot be read", path, o);
            break;
        }
        o += 8 + l;
    }
    if (ok && snapshot && o != got)
        ok = problem_set(p, PB_INTERNAL_ERROR, "history: %s is damaged at offset %zu", path, o);
    else if (ok && o != got)
        LOG_W("history: %s: %zu bytes of a torn tail cut", path, got - o);
    free(buf);
    *good = (off_t)o;
    return ok;
}

static bool dir_sync(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return false;
    bool ok = fsync(dfd) == 0;
    close(dfd);
    return ok;
}

/* Copies the log's records [from, upto) (read through fd) to the end of
 * out; *size counts what out holds. */
static bool copy_range(int fd, uint64_t from, uint64_t upto, int out, uint64_t *size)
{
    uint8_t buf[65536];

    for (uint64_t o = from; o < upto;) {
        size_t  want = upto - o > sizeof buf ? sizeof buf : (size_t)(upto - o);
        ssize_t r    = pread(fd, buf, want, (off_t)o);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || !write_all(out, buf, (size_t)r))
            return false;
        o     += (uint64_t)r;
        *size += (uint64_t)r;
    }
    return true;
}

/* A compaction (after a snapshot: the log keeps only the records after its
 * mark), so that appends wait for a bounded piece only, never for a sync:
 *  1. no lock held (the caller is the only compaction): the log's records
 *     from `from` to its end as of now are copied into history.log.tmp,
 *     behind the next generation's record, and fdatasync'ed;
 *  2. rounds, no lock held: what was appended meanwhile is copied and
 *     fdatasync'ed, again, until a round's tail is at most HLOG_TAIL_SMALL
 *     bytes (or HLOG_ROUNDS rounds were made). When the last round starts,
 *     ack_cap is set at its end: an fdatasync of the old log acknowledges
 *     nothing after it from then on (hlog_sync waits), so every record
 *     acknowledged is in the synced part of the new file;
 *  3. under l->mu (what appends wait for, O(HLOG_TAIL_SMALL)): the last
 *     small piece is copied (no sync), the file renamed over history.log
 *     and made the log appends go to;
 *  4. no lock held: the new log is fdatasync'ed and the directory synced;
 *     then ack_cap goes and what that fdatasync covered is acknowledged.
 * A crash at any point recovers exactly: before the rename history.log is
 * the old log (all of it on disk, every acknowledged record synced there),
 * after it the new one (all of it in the page cache after a kill; after a
 * power cut, everything acknowledged: up to ack_cap it was synced before
 * the rename, after it nothing is acknowledged before step 4). At start a
 * log of the snapshot's generation is replayed from the snapshot's mark, a
 * newer one wholly (hlog_open). A test stops the process at each step
 * (hlog_step_hook, test/unit/test_history_log.c). */
#define HLOG_TAIL_SMALL (64u << 10)
#define HLOG_ROUNDS     16

void (*hlog_step_hook)(hlog_step_t step);

static void step(hlog_step_t s)
{
    if (hlog_step_hook)
        hlog_step_hook(s);
}

static bool compact(hlog_t *l, uint64_t from, uint64_t mark_faults, int64_t *held_us)
{
    char     tmp[4096], logp[4096];
    uint8_t  g[SNAP_LEN];
    uint64_t upto, size = 8 + GEN_LEN;

    *held_us = 0;
    snprintf(tmp, sizeof tmp, "%s/history.log.tmp", l->dir);
    snprintf(logp, sizeof logp, "%s/history.log", l->dir);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    pthread_mutex_lock(&l->mu);
    gen_record(g, l->gen + 1, 0);
    upto   = l->size;
    int in = l->fd >= 0 ? dup(l->fd) : -1;    /* the log's fd is replaced only by a compaction */
    pthread_mutex_unlock(&l->mu);
    if (from < 8 + GEN_LEN)
        from = upto;                          /* nothing to keep: a log that was never written */
    bool ok = in >= 0 && put_record(fd, g, GEN_LEN) && copy_range(in, from, upto, fd, &size) &&
              fdatasync(fd) == 0;
    step(HLOG_STEP_COPIED);
    for (int round = 1; ok; round++) {        /* 2: the tail, in rounds */
        pthread_mutex_lock(&l->mu);
        uint64_t end  = l->size;
        bool     last = end - upto <= HLOG_TAIL_SMALL || round == HLOG_ROUNDS;
        if (last)
            l->ack_cap = l->written;          /* == end, in the bytes ever written */
        pthread_mutex_unlock(&l->mu);
        ok = copy_range(in, upto, end, fd, &size) && (end == upto || fdatasync(fd) == 0);
        upto = end;
        step(HLOG_STEP_ROUND);
        if (last)
            break;
    }
    int err = errno, old = -1;
    pthread_mutex_lock(&l->mu);               /* 3: the switch */
    int64_t  t0 = cr_now_us();
    ok = ok && copy_range(in, upto, l->size, fd, &size);
    step(HLOG_STEP_LAST_PIECE);
    ok = ok && rename(tmp, logp) == 0 && lseek(fd, 0, SEEK_END) >= 0;
    if (ok) {
        step(HLOG_STEP_RENAMED);
        old      = l->fd;
        l->fd    = fd;
        l->gen++;
        l->size  = size;
        l->dirty = true;                      /* the last piece is not synced yet */
    } else {
        err = errno;
        l->ack_cap = UINT64_MAX;
        pthread_cond_broadcast(&l->cv);
    }
    uint64_t target = l->written;
    *held_us = cr_now_us() - t0;
    pthread_mutex_unlock(&l->mu);
    if (!ok) {
        if (in >= 0)
            close(in);
        close(fd);
        unlink(tmp);
        errno = err;
        return false;
    }
    step(HLOG_STEP_SWITCHED);
    bool synced = fdatasync(fd) == 0;         /* 4: no lock held */
    err = errno;
    synced = synced && dir_sync(l->dir);
    if (!synced)
        err = errno;
    step(HLOG_STEP_SYNCED);
    pthread_mutex_lock(&l->mu);
    l->ack_cap = UINT64_MAX;
    if (synced && target > l->synced)
        l->synced = target;
    else if (!synced) {
        l->fail_mark = target;                /* the writers waiting for these bytes fail */
        fault_locked(l, "the fdatasync of the compacted log", err);
    }
    if (synced && l->failed && l->faults == mark_faults) {
        /* the snapshot holds memory as of its mark (after every fault), the
         * new log, synced, every record after it: the files are whole again */
        l->failed = false;
        LOG_W("history: the history log works again (a snapshot rewrote it): writes are answered again");
    }
    while (l->syncing && l->sync_fd == old)   /* the syncer is done with the old fd before it is closed */
        pthread_cond_wait(&l->synced_cv, &l->mu);
    pthread_cond_broadcast(&l->synced_cv);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (old >= 0)
        close(old);
    close(in);
    return synced;
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
            if (l->want <= l->synced || l->synced >= l->ack_cap) {
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
            l->dirty   = false;
            l->syncing = true;
            l->sync_fd = fd;
            pthread_mutex_unlock(&l->mu);
            int64_t t0 = cr_mono_ns();
            int rc = fdatasync(fd);
            cr_fsync_observe(CR_FSYNC_HISTORY, cr_mono_ns() - t0);
            int err = errno;
            pthread_mutex_lock(&l->mu);
            l->syncing = false;
            l->fsyncs++;
            if (rc == 0 && target > l->ack_cap)
                target = l->ack_cap;       /* a compaction acknowledges the rest (compact) */
            if (rc == 0 && target > l->synced)
                l->synced = target;
            else if (rc != 0) {
                fault_locked(l, "an fdatasync", err);
                l->dirty     = true;       /* tried again at the next write or interval */
                l->fail_mark = target;     /* the writers waiting for these bytes fail */
                if (l->want <= target)
                    l->want = l->synced;
            }
            pthread_cond_broadcast(&l->synced_cv);
        } else if (l->want > l->synced && l->want <= l->ack_cap) {
            l->synced = l->want;           /* nothing dirty: what was written is synced */
            pthread_cond_broadcast(&l->synced_cv);
        }
    }
    pthread_cond_broadcast(&l->synced_cv);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

hlog_t *hlog_open(const char *dir, bool always, int sync_ms,
                  bool (*replay)(void *, const uint8_t *, size_t, bool), void *ud, problem_t *p)
{
    char     snap[4096], logp[4096];
    off_t    good;
    uint64_t snap_gen, snap_off, log_gen, log_off;

    snprintf(snap, sizeof snap, "%s/history.snap", dir);
    snprintf(logp, sizeof logp, "%s/history.log", dir);
    if (!replay_file(snap, true, &good, &snap_gen, &snap_off, 0, 0, replay, ud, p))
        return NULL;
    if (!replay_file(logp, false, &good, &log_gen, &log_off, snap_gen, snap_off, replay, ud, p))
        return NULL;
    hlog_t *l = cr_xcalloc(1, sizeof *l);
    l->dir     = cr_xstrdup(dir);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->synced_cv, NULL);
    l->sync_ms = sync_ms > 0 ? sync_ms : 100;
    l->ack_cap = UINT64_MAX;
    l->sync_fd = -1;
    l->always  = always;
    l->fd      = open(logp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (l->fd < 0 || ftruncate(l->fd, good) != 0 || lseek(l->fd, good, SEEK_SET) < 0) {
        problem_set(p, PB_INTERNAL_ERROR, "history: cannot write %s: %s", logp, strerror(errno));
        if (l->fd >= 0) close(l->fd);
        free(l->dir);
        free(l);
        return NULL;
    }
    l->size = (uint64_t)good;
    l->gen  = snap_gen > log_gen ? snap_gen : log_gen;
    bool ok = true;
    if (!good) {                            /* a new (or covered) log starts with the next generation */
        uint8_t g[SNAP_LEN];
        l->gen++;
        gen_record(g, l->gen, 0);
        ok = put_record(l->fd, g, GEN_LEN);
        l->size = 8 + GEN_LEN;
    } else if (log_gen == snap_gen && snap_off) {
        /* the compaction after the snapshot did not happen: do it now */
        int64_t held;
        ok = compact(l, snap_off < (uint64_t)good ? snap_off : (uint64_t)good, 0, &held);
    }
    if (!ok) {
        problem_set(p, PB_INTERNAL_ERROR, "history: cannot write %s: %s", logp, strerror(errno));
        close(l->fd);
        free(l->dir);
        free(l);
        return NULL;
    }
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
    ok = put_record(l->fd, payload, len);
    if (ok) {
        l->size    += 8 + len;
        l->written += 8 + len;
        l->dirty    = true;
    } else {
        int err = errno;
        /* no piece of the record stays: the next one is written over it
         * (and if the cut fails, replay stops at the torn piece's CRC) */
        if (ftruncate(l->fd, (off_t)l->size) != 0) { /* logged with the fault */ }
        if (lseek(l->fd, (off_t)l->size, SEEK_SET) < 0) { /* idem */ }
        fault_locked(l, "a write", err);
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

bool hlog_failed(hlog_t *l)
{
    return atomic_load_explicit(&l->failed, memory_order_relaxed);   /* on every append: no lock */
}

uint64_t hlog_size(hlog_t *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->size;
    pthread_mutex_unlock(&l->mu);
    return n;
}

struct hlog_image {
    uint64_t gen, off;          /* the log's position the copy holds everything up to */
    uint64_t faults;            /* the log's faults at the mark */
    uint8_t *p;
    size_t   len, cap;
};

hlog_image_t *hlog_image_begin(hlog_t *l)
{
    hlog_image_t *im = cr_xcalloc(1, sizeof *im);

    pthread_mutex_lock(&l->mu);
    im->gen    = l->gen;
    im->off    = l->size;
    im->faults = l->faults;
    pthread_mutex_unlock(&l->mu);
    uint8_t g[SNAP_LEN];
    gen_record(g, im->gen, im->off);
    hlog_image_add(im, g, SNAP_LEN);
    return im;
}

void hlog_image_add(void *ctx, const void *payload, size_t n)
{
    hlog_image_t *im = ctx;
    uint32_t      l = (uint32_t)n, c = crc32c(payload, n);

    if (im->len + 8 + n > im->cap) {
        size_t cap = im->cap ? im->cap : 65536;
        while (cap < im->len + 8 + n)
            cap *= 2;
        im->p   = cr_xrealloc(im->p, cap);
        im->cap = cap;
    }
    memcpy(im->p + im->len, &l, 4);
    memcpy(im->p + im->len + 4, &c, 4);
    memcpy(im->p + im->len + 8, payload, n);
    im->len += 8 + n;
}

bool hlog_image_install(hlog_t *l, hlog_image_t *im, int64_t *held_us, problem_t *p)
{
    char tmp[4096], snap[4096];
    bool ok;

    snprintf(tmp, sizeof tmp, "%s/history.snap.tmp", l->dir);
    snprintf(snap, sizeof snap, "%s/history.snap", l->dir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ok = fd >= 0 && write_all(fd, im->p, im->len) && fdatasync(fd) == 0;
    if (fd >= 0)
        close(fd);
    /* installed by rename (the commit point); then the log drops what it holds */
    ok = ok && rename(tmp, snap) == 0 && dir_sync(l->dir);
    step(HLOG_STEP_SNAPSHOT);
    if (ok) {
        pthread_mutex_lock(&l->mu);
        bool same = l->gen == im->gen;       /* (it is: one snapshot at a time) */
        pthread_mutex_unlock(&l->mu);
        if (same && !compact(l, im->off, im->faults, held_us))
            LOG_W("history: the history log could not be compacted after a snapshot (%s): it is at the next "
                  "snapshot or start", strerror(errno));
    }
    free(im->p);
    free(im);
    if (!ok) {
        unlink(tmp);
        return problem_set(p, PB_INTERNAL_ERROR, "history: the snapshot could not be written: %s", strerror(errno));
    }
    return true;
}
