/*
 * log.c - corDB's write-ahead log on disk (log.h): records, CRC32C, segment
 * files and their roll-over, the lock file, group commit, the log thread
 * (the syncer of --dbSync always, interval fsyncs, repairs after a fault)
 * and the snapshot thread (snapshots, roll-overs).
 *
 * State under l->mu: the current segment (fd, end = bytes written, synced =
 * bytes known on disk), the next seq, the last synced seq, the waiters of
 * --dbSync always (a list in seq order), `syncing` (one thread runs fdatasync
 * at a time, never holding the mutex) and `failed`.
 *
 * Group commit: the log thread syncs while groups wait: it notes the last
 * seq and offset written, drops the mutex, fdatasyncs, and on success
 * publishes that seq as synced: every group appended before its fdatasync
 * began is covered by that one call. Fsyncs are numbered; a writer waits on
 * the futex word of the fsync that covers its group (fword[k & 1]), so an
 * fsync wakes only the writers it covered; those that arrived meanwhile
 * sleep on for the next. The syncer takes the covered writers off the list
 * itself and marks them done before the wake: a woken writer returns
 * without the log's mutex (with a condition variable each woken writer took
 * the mutex again, one after the other: more sleeps and switches). Anything
 * else (a fault, a repair, the close) raises the alarm count: the writers
 * that see it changed wait the slow way, under the mutex, on cv. (One
 * condition variable for everybody, broadcast per fsync and per unlink, cost
 * 18 futex calls a write.)
 *
 * Held waiters (log.h, store.h "Held answers"): nobody sleeps on them. A
 * publish moves the covered ones to `ready` (in seq order) and signals the
 * log thread, which completes them without the mutex (held_done each, then
 * held_round once: the hooks, the flushes, the answers) before its next
 * fsync; after a failed fsync it undoes a doomed held waiter when it is the
 * tail of the list (its turn in the reverse order), unlinks it, then
 * answers it. The thread stops only when none is left (n_held).
 *
 * Faults. A failed pwrite cuts the segment back to its previous end (nothing
 * of the group stays) and answers 503. A failed fdatasync cannot tell what
 * reached the disk (and Linux forgets the error once reported), so in always
 * mode every record after the last good sync is doomed: the log stops taking
 * records (503), each doomed writer undoes its change in reverse seq order
 * (the tail of the waiter list goes first) and answers 503, and the segment
 * is cut back to the last synced offset. In interval / none mode the writes
 * were acknowledged already: they stay, the log stops taking records until an
 * fdatasync succeeds again. The background thread retries the repair every
 * interval (or 100 ms); writes work again once the disk does.
 *
 * Space ahead, and appends as a memcpy. A pwrite per append cost about
 * 2 us of broker CPU (the syscall, and growing the file: its size, its
 * delayed allocation), and with --dbSync always an append that grows the file
 * makes its fdatasync write the inode too (the new size, the new blocks):
 * about 7-8 us of CPU per write on ext4. So the snapshot thread gives the
 * file space ahead of the appends (ZERO_CHUNK at a time, until ZERO_AHEAD
 * past the end): always writes zeros (blocks written: its fdatasyncs write
 * data only), the other modes fallocate (no data written; a disk full
 * surfaces there, before any write lands in the space). The current segment
 * is mapped MAP_SHARED (seg_map), and an append that fits below zero_end is
 * a memcpy into the mapping: in the page cache at once, as a pwrite's bytes
 * (a process crash keeps it), and covered by the same fdatasync (it writes
 * back the pages dirtied through the mapping; an I/O error surfaces there as
 * for a pwrite's pages). An append past zero_end (the space ahead failed or
 * lags, past --dbSegmentSize, past MAP_LEN) is a pwrite as before, which
 * meets a full disk itself. The space ahead is made outside the mutex, in a
 * range the appends cannot reach yet: it claims
 * [zero_from, zero_to) under the mutex, and an append that would reach into
 * a claimed range waits for it (it is ZERO_AHEAD behind: rare). Appends below
 * zero_end write into blocks the file has already, and their fdatasync
 * writes only the data. A roll-over and the close cut the segment back to
 * its records; after a crash, recovery takes a tail of zeros for the end
 * (recover.c). zero_epoch changes with every cut, so a zero write that
 * raced with one is not counted.
 *
 * Test builds' fault injection needs no hook here: test/crash/faultshim.c
 * (LD_PRELOAD) fails pwrite, pwritev, fallocate and fdatasync of log files
 * on demand, and mmap of them (the pwrite path alone) when asked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../../model/codec.h"
#include "log.h"

/* ------------------------------------------------------------ CRC32C */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_hw;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p,
                                                            size_t n)
{
    uint64_t c64 = c;

    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;

        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n; p++, n--)
        c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
#endif

uint32_t cdb_crc32c(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint32_t       c = ~crc;

    pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_sse42(c, p, len);
#endif
    for (; len >= 8; p += 8, len -= 8) {
        uint32_t lo, hi;

        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    }
    for (; len; p++, len--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p) & 0xff];
    return ~c;
}

/* ------------------------------------------------------------ records */

static void put_u32(char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (char)(v >> (8 * i));
}

static void put_u64(char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (char)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

size_t cdb_rec_begin(sbuf_t *sb, int kind, const char *tenant)
{
    size_t start = sb->len, tn = tenant ? strlen(tenant) : 0;
    char   head[CDB_REC_HEAD] = { 0 };

    head[16] = (char)kind;
    sb_add(sb, head, sizeof(head));
    cr_put_str(sb, tenant ? tenant : "", tn);
    return start;
}

void cdb_rec_end(sbuf_t *sb, size_t start)
{
    put_u32(sb->p + start, (uint32_t)(sb->len - start - 8));
}

size_t cdb_rec_seal(char *buf, size_t len, uint64_t seq)
{
    size_t off = 0, n = 0;

    while (off < len) {
        uint32_t rl   = get_u32((const uint8_t *)buf + off);
        size_t   size = 8 + (size_t)rl;

        put_u64(buf + off + 8, seq++);
        buf[off + 17] = (char)(off + size < len ? CDB_REC_MORE : 0);
        put_u32(buf + off + 4, cdb_crc32c(0, buf + off + 8, rl));
        off += size;
        n++;
    }
    return n;
}

cdb_parse_t cdb_rec_parse(const uint8_t *buf, size_t avail, cdb_rec_t *r)
{
    uint32_t       len;
    cr_reader_t    rd;
    const char    *tname;
    size_t         tn;

    if (avail < 8)
        return CDB_PARSE_SHORT;
    len = get_u32(buf);
    if (len < CDB_REC_HEAD - 8 + 1 || len > CDB_REC_MAX)
        return CDB_PARSE_BAD;
    if (avail - 8 < len)
        return CDB_PARSE_SHORT;
    if (cdb_crc32c(0, buf + 8, len) != get_u32(buf + 4))
        return CDB_PARSE_BAD;
    r->seq   = get_u64(buf + 8);
    r->kind  = buf[16];
    r->flags = buf[17];
    rd    = (cr_reader_t){ .p = buf + CDB_REC_HEAD, .end = buf + 8 + len };
    tname = cr_get_str(&rd, &tn);
    if (!tname)
        return CDB_PARSE_BAD;
    r->tenant      = tname;
    r->tenant_len  = tn;
    r->payload     = rd.p;
    r->payload_len = (size_t)(rd.end - rd.p);
    r->size        = 8 + (size_t)len;
    return CDB_PARSE_OK;
}

/* ------------------------------------------------------------ files */

void cdb_seg_path(char *buf, size_t n, const char *dir, uint32_t seg)
{
    snprintf(buf, n, "%s/log-%08u.cdb", dir, seg);
}

void cdb_snap_path(char *buf, size_t n, const char *dir, uint64_t seq)
{
    snprintf(buf, n, "%s/snap-%016llx.cdb", dir, (unsigned long long)seq);
}

bool cdb_fsync_dir(const char *dir)
{
    int  fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok;

    if (fd < 0)
        return false;
    ok = fsync(fd) == 0;
    close(fd);
    return ok;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

bool cdb_list_files(const char *dir, cdb_files_t *out, problem_t *p)
{
    DIR           *d = opendir(dir);
    struct dirent *de;
    size_t         cap_seg = 0, cap_snap = 0;

    memset(out, 0, sizeof(*out));
    if (!d)
        return problem_set(p, PB_INTERNAL_ERROR, "--dbDir %.200s: %s", dir, strerror(errno));
    while ((de = readdir(d))) {
        unsigned           seg;
        unsigned long long seq;
        int                used = 0;

        if (sscanf(de->d_name, "log-%8u.cdb%n", &seg, &used) == 1 && used == 16 &&
            !de->d_name[used]) {
            if (out->n_seg == cap_seg) {
                cap_seg  = cap_seg ? cap_seg * 2 : 16;
                out->seg = cr_xreallocarray(out->seg, cap_seg, sizeof(*out->seg));
            }
            out->seg[out->n_seg++] = seg;
        } else if (sscanf(de->d_name, "snap-%16llx.cdb%n", &seq, &used) == 1 && used == 25 &&
                   !de->d_name[used]) {
            if (out->n_snap == cap_snap) {
                cap_snap  = cap_snap ? cap_snap * 2 : 4;
                out->snap = cr_xreallocarray(out->snap, cap_snap, sizeof(*out->snap));
            }
            out->snap[out->n_snap++] = seq;
        }
    }
    closedir(d);
    if (out->n_seg)
        qsort(out->seg, out->n_seg, sizeof(*out->seg), cmp_u32);
    if (out->n_snap)
        qsort(out->snap, out->n_snap, sizeof(*out->snap), cmp_u64);
    return true;
}

void cdb_files_free(cdb_files_t *f)
{
    free(f->seg);
    free(f->snap);
    memset(f, 0, sizeof(*f));
}

/* ------------------------------------------------------------ the log */

struct cdb_log {
    char           *dir;
    cdb_sync_t      mode;
    int             interval_ms;
    size_t          snapshot_size;
    size_t          seg_size;       /* --dbSegmentSize: roll over past it (0: at snapshots only) */
    int             lock_fd;
    pthread_mutex_t roll_mu;        /* one roll-over at a time (size, snapshot) */

    pthread_mutex_t mu;
    _Atomic uint32_t fword[2];      /* futex: writers whose group fsync number k covers: fword[k & 1] */
    _Atomic uint32_t alarm;         /* raised by wake_all: waiters go the slow way */
    pthread_cond_t  cv;             /* the end of any fsync (snapshots), doomed writers' turn */
    pthread_cond_t  thr_cv;         /* the log thread (always: the syncer) */
    pthread_cond_t  snap_cv;        /* the snapshot thread */
    uint64_t        sync_gen;       /* the number of the next fsync to start */
    bool            syncer_idle;    /* always: the log thread waits for work */
    bool            create_pending; /* the segment created at start: neither it nor the directory synced yet */
    int             fd;             /* the current segment */
    uint32_t        seg;            /* its number */
    uint64_t        end;            /* bytes written to it */
    uint64_t        synced_off;     /* bytes of it known on disk */
    int             old_fd;         /* the previous segment while its last fsync is pending (roll) */
    uint64_t        old_end, old_synced_off;
    uint64_t        next_seq, synced_seq;
    bool            syncing, failed, stop, started;
    cdb_logw_t     *head, *tail;    /* always: waiters in seq order */
    /* held waiters (log.h): on disk, for the log thread to complete, in seq order */
    cdb_logw_t     *ready_head, *ready_tail;
    uint64_t        n_held;         /* held waiters not completed yet (linked or ready) */
    void          (*held_undo)(void *ud, cdb_logw_t *w);
    void          (*held_done)(void *ud, cdb_logw_t *w, bool ok);
    void          (*held_round)(void *ud);
    void           *held_ud;
    uint64_t        since_snap;     /* bytes appended since the last snapshot's roll */
    bool            snap_wanted, roll_wanted;
    void          (*snapshot)(void *ud);
    void           *snapshot_ud;
    pthread_t       thread, snap_thread;
    bool            snap_thread_on;

    /* space ahead: see the top of the file */
    uint8_t        *map;            /* the current segment mapped (MAP_SHARED), NULL: pwrite only */
    size_t          map_len;
    uint64_t        zero_end;       /* bytes of the current segment the file has (records, zeros, allocated) */
    uint64_t        zero_from, zero_to;     /* the range being zeroed, when zeroing */
    uint64_t        zero_epoch;     /* changes with every cut of the file */
    bool            zeroing, zero_wanted, zero_off;

    time_t          last_fail_log;  /* second of the last "write failed" line */
    /* statistics (under mu) */
    uint64_t        appends, records, bytes, fsyncs, fsync_groups, failures, snapshots;
    uint64_t        fsync_us;
    uint64_t        held_completed;
    uint64_t        mapped;         /* appends copied into the mapping (no pwrite) */
};

#define ZERO_CHUNK  (1u << 20)     /* zeros written at a time */
#define ZERO_AHEAD  (4u << 20)     /* how far ahead of the appends */
#define ZERO_BUF    (64u << 10)

static const char zero_buf[ZERO_BUF];

/* Under mu: asks the snapshot thread for space ahead (zeros for always,
 * fallocate for the other modes) when the appends come near zero_end. */
static void zero_ask(cdb_log_t *l)
{
    if (!l->snap_thread_on || l->zeroing || l->zero_wanted ||
        l->zero_off || l->failed || l->zero_end >= l->end + ZERO_AHEAD ||
        (l->seg_size && l->zero_end >= l->seg_size))
        return;
    l->zero_wanted = true;
    pthread_cond_signal(&l->snap_cv);
}

/* Under mu: the file of the current segment was cut back to l->end. */
static void zero_reset(cdb_log_t *l)
{
    l->zero_end = l->end;
    l->zero_epoch++;
}

/* The snapshot thread, under mu: one ZERO_CHUNK past zero_end, without the
 * mutex: zeros written (one pwritev: always, whose fdatasync then writes no
 * metadata), or allocated (fallocate: the other modes, which sync seldom;
 * the zeros would double their writes). A failure (the disk full) is not an
 * error: the appends pwrite and grow the file, as without space ahead (and
 * meet the disk full themselves: 503), until the next segment. */
static void zero_ahead(cdb_log_t *l)
{
    struct iovec iov[ZERO_CHUNK / ZERO_BUF];
    uint64_t     from = l->zero_end > l->end ? l->zero_end : l->end, to = from + ZERO_CHUNK;
    uint64_t     epoch = l->zero_epoch;
    int          fd = l->fd;
    bool         ok;

    size_t       n = 0, len;

    l->zero_wanted = false;
    if (l->seg_size && to > l->seg_size)
        to = l->seg_size;               /* the roll-over comes there */
    if (l->failed || l->zero_off || from >= l->end + ZERO_AHEAD || to <= from)
        return;
    len = (size_t)(to - from);
    for (size_t left = len; left; n++) {
        size_t k = left < ZERO_BUF ? left : ZERO_BUF;

        iov[n] = (struct iovec){ .iov_base = (void *)zero_buf, .iov_len = k };
        left -= k;
    }
    l->zeroing   = true;
    l->zero_from = from;
    l->zero_to   = to;
    pthread_mutex_unlock(&l->mu);
    if (l->mode == CDB_SYNC_ALWAYS)
        ok = pwritev(fd, iov, (int)n, (off_t)from) == (ssize_t)len;
    else
        ok = fallocate(fd, 0, (off_t)from, (off_t)len) == 0;
    pthread_mutex_lock(&l->mu);
    l->zeroing = false;
    if (ok && epoch == l->zero_epoch && fd == l->fd)
        l->zero_end = to;
    else if (!ok)
        l->zero_off = true;             /* until the next segment */
    pthread_cond_broadcast(&l->cv);     /* an append waiting for the range */
}

/* Each writer thread's group buffer, freed when the thread exits. */
static pthread_key_t  buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

static void buf_free(void *v)
{
    sbuf_t *sb = v;

    sb_release(sb);
    free(sb);
}

static void buf_key_init(void)
{
    if (pthread_key_create(&buf_key, buf_free) != 0)
        cr_oom("corDB log buffer key", 0);
}

sbuf_t *cdb_log_buf(void)
{
    sbuf_t *sb;

    pthread_once(&buf_once, buf_key_init);
    sb = pthread_getspecific(buf_key);
    if (!sb) {
        sb = cr_xmalloc(sizeof(*sb));
        sb_init(sb, NULL, 4096);
        pthread_setspecific(buf_key, sb);
    }
    /* Give back what one huge batch grew it to. */
    if (sb->cap > (8u << 20)) {
        sb_release(sb);
        sb_init(sb, NULL, 4096);
    }
    sb_clear(sb);
    return sb;
}

const char *cdb_log_dir(const cdb_log_t *l) { return l->dir; }
cdb_sync_t  cdb_log_mode(const cdb_log_t *l) { return l->mode; }

static bool log_503(problem_t *p, const char *what, int err)
{
    problem_set(p, PB_HTTP, "the store cannot %s its log on disk (%s): nothing of this write was "
                "applied; retry when the disk has room or works again", what, strerror(err));
    if (p)
        p->status = 503;
    return false;
}

cdb_log_t *cdb_log_open(const char *dir, cdb_sync_t mode, int interval_ms, size_t snapshot_size,
                        size_t segment_size, problem_t *p)
{
    cdb_log_t *l;
    char       path[4096], pid[32];
    int        fd, n;

    if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
        problem_set(p, PB_INTERNAL_ERROR, "--dbDir %.200s: cannot create it: %s", dir,
                    strerror(errno));
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/LOCK", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0) {
        problem_set(p, PB_INTERNAL_ERROR, "--dbDir %.200s: cannot open its lock file: %s", dir,
                    strerror(errno));
        return NULL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char other[32] = "?";
        ssize_t k = pread(fd, other, sizeof(other) - 1, 0);

        if (k > 0) {
            other[k] = '\0';
            other[strcspn(other, "\n")] = '\0';
        }
        close(fd);
        problem_set(p, PB_INTERNAL_ERROR, "--dbDir %.200s is in use by another broker (pid %s): "
                    "one broker per directory", dir, other);
        return NULL;
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        LOG_W("corDB: cannot write the pid into %s: %s", path, strerror(errno));

    l = cr_xcalloc(1, sizeof(*l));
    l->dir           = cr_xstrdup(dir);
    l->mode          = mode;
    l->interval_ms   = interval_ms > 0 ? interval_ms : 100;
    l->snapshot_size = snapshot_size;
    l->seg_size      = segment_size;
    l->lock_fd       = fd;
    l->fd            = -1;
    l->old_fd        = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->roll_mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->thr_cv, NULL);
    pthread_cond_init(&l->snap_cv, NULL);
    return l;
}

/* A new empty segment number seg: created with its magic, fsynced, and the
 * directory fsynced (sync; else the first sync of the log does both: see
 * create_pending). -1 (errno) on failure. */
static int seg_create(const char *dir, uint32_t seg, bool sync)
{
    char path[4096];
    int  fd, err;

    cdb_seg_path(path, sizeof(path), dir, seg);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return -1;
    if (pwrite(fd, CDB_LOG_MAGIC, CDB_MAGIC_LEN, 0) != CDB_MAGIC_LEN ||
        (sync && (fdatasync(fd) != 0 || !cdb_fsync_dir(dir)))) {
        err = errno ? errno : EIO;
        close(fd);
        unlink(path);
        errno = err;
        return -1;
    }
    return fd;
}

/* The current segment (l->fd) mapped for the appends: MAP_LEN bytes, or
 * --dbSegmentSize (the space ahead stops there). Only the bytes below
 * zero_end are ever touched (the file has them: no SIGBUS). NULL when the
 * mapping fails (a 32-bit address space, a file system without shared
 * mappings): the appends pwrite. */
#define MAP_LEN     ((size_t)1 << 30)

static void seg_map(cdb_log_t *l)
{
    l->map     = NULL;
    l->map_len = 0;
    /* always: its appends pwrite into the zeros ahead. Through a mapping
     * they cost more there: each fdatasync cleans the pages, and the next
     * copy into the page takes a write fault (measured: 4.7 against 4.3 us
     * of CPU an append with an fdatasync every 14; without syncs 0.25 - 0.3
     * us against 0.65 - 0.9 us for the pwrite). */
    if (l->mode == CDB_SYNC_ALWAYS)
        return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len  = l->seg_size && l->seg_size < MAP_LEN ? (l->seg_size + page - 1) / page * page
                                                       : MAP_LEN;
    void  *m    = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, l->fd, 0);

    l->map     = m == MAP_FAILED ? NULL : m;
    l->map_len = l->map ? len : 0;
}

static void seg_unmap(uint8_t *map, size_t len)
{
    if (map && munmap(map, len) != 0)
        LOG_W("corDB: munmap of a log segment failed: %s", strerror(errno));
}

static void futex_wake(_Atomic uint32_t *word)
{
    atomic_fetch_add_explicit(word, 1, memory_order_release);
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* Under mu: wakes every waiter (a fault, a repair, the close): the alarm
 * sends them the slow way, under the mutex. */
static void wake_all(cdb_log_t *l)
{
    atomic_fetch_add_explicit(&l->alarm, 1, memory_order_release);
    futex_wake(&l->fword[0]);
    futex_wake(&l->fword[1]);
    pthread_cond_broadcast(&l->cv);
    pthread_cond_signal(&l->thr_cv);        /* doomed held waiters are the log thread's */
}

static void unlink_w(cdb_log_t *l, cdb_logw_t *w);

/* Under mu, after a good fsync of everything up to upto: it is synced; the
 * writers it covers (a prefix of the list, in seq order) are taken off it
 * and marked done; the caller then wakes fword[k & 1]. After done, w is
 * its writer's again (it may return and leave its stack frame). */
static void publish_locked(cdb_log_t *l, uint64_t upto)
{
    if (upto > l->synced_seq)
        l->synced_seq = upto;
    while (l->head && l->head->last <= l->synced_seq) {
        cdb_logw_t *w = l->head;

        unlink_w(l, w);
        if (w->held) {
            /* the log thread completes it (it may be this thread) */
            w->next = NULL;
            if (l->ready_tail)
                l->ready_tail->next = w;
            else
                l->ready_head = w;
            l->ready_tail = w;
            pthread_cond_signal(&l->thr_cv);
            continue;
        }
        atomic_store_explicit(&w->done, true, memory_order_release);
    }
}

/* The log thread, under mu: completes the held waiters on disk (ready), in
 * seq order, without the mutex; false when there were none. */
static bool held_complete_locked(cdb_log_t *l)
{
    cdb_logw_t *w = l->ready_head;
    uint64_t    k = 0;

    if (!w)
        return false;
    for (cdb_logw_t *q = w; q; q = q->next)
        k++;
    l->held_completed += k;                     /* counted before they are answered */
    l->ready_head = l->ready_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (w) {
        cdb_logw_t *next = w->next;

        l->held_done(l->held_ud, w, true);      /* w is the callee's now */
        w = next;
    }
    l->held_round(l->held_ud);
    pthread_mutex_lock(&l->mu);
    l->n_held -= k;
    return true;
}

/* The log thread, under mu, the log failed: when the newest doomed waiter
 * is held, its turn to be undone has come (every later group is undone):
 * undone here, then answered. false when there is none. */
static bool held_doom_locked(cdb_log_t *l)
{
    cdb_logw_t *w = l->tail;

    if (!l->failed || !w || !w->held || w->last <= l->synced_seq)
        return false;
    pthread_mutex_unlock(&l->mu);
    l->held_undo(l->held_ud, w);                /* w stays the tail: nobody else's turn */
    pthread_mutex_lock(&l->mu);
    unlink_w(l, w);
    l->held_completed++;
    pthread_cond_broadcast(&l->cv);             /* the next doomed writer's turn */
    pthread_mutex_unlock(&l->mu);
    l->held_done(l->held_ud, w, false);
    l->held_round(l->held_ud);
    pthread_mutex_lock(&l->mu);
    l->n_held--;
    return true;
}

/* Under mu: with the log failed, tries to make the files what the log says
 * they are (cut back to the good end, fdatasync); clears `failed` on success. */
static void log_repair_locked(cdb_log_t *l)
{
    uint64_t cut     = l->mode == CDB_SYNC_ALWAYS ? l->synced_off : l->end;
    uint64_t old_cut = l->mode == CDB_SYNC_ALWAYS ? l->old_synced_off : l->old_end;

    if (!l->failed || l->syncing)
        return;
    if (l->mode == CDB_SYNC_ALWAYS && l->tail && l->tail->last > l->synced_seq)
        return;                             /* doomed writers still undoing */
    if (l->old_fd >= 0) {
        if (ftruncate(l->old_fd, (off_t)old_cut) != 0 || fdatasync(l->old_fd) != 0)
            return;
        close(l->old_fd);
        l->old_fd = -1;
    }
    if (ftruncate(l->fd, (off_t)cut) != 0 || fdatasync(l->fd) != 0 ||
        (l->create_pending && !cdb_fsync_dir(l->dir)))
        return;
    l->create_pending = false;
    l->end        = cut;
    zero_reset(l);
    l->zero_off   = false;
    l->synced_off = cut;
    l->synced_seq = l->next_seq - 1;
    l->failed     = false;
    wake_all(l);
    LOG_W("corDB: the log on disk works again (segment %u, %llu bytes); writes resume", l->seg,
          (unsigned long long)cut);
}

/* Under mu, not syncing: fdatasyncs everything written so far without the
 * mutex (the caller becomes the syncer). It is fsync number k: the writers
 * whose groups were appended before it began wait on fword[k & 1] (those
 * appended meanwhile, on the other one, for the next fsync), so an fsync
 * wakes only the writers it covers. */
static void log_sync_locked(cdb_log_t *l)
{
    uint64_t target = l->next_seq - 1, off = l->end, k;
    int      fd = l->fd, rc, err;
    size_t   groups = 0;

    if (target <= l->synced_seq || l->failed)
        return;
    for (cdb_logw_t *w = l->head; w; w = w->next)
        groups += w->last > l->synced_seq && w->last <= target;
    k          = l->sync_gen++;
    l->syncing = true;
    bool dir_too = l->create_pending;
    pthread_mutex_unlock(&l->mu);
    int64_t t0 = cr_mono_ns();
    rc  = fdatasync(fd);
    err = errno;
    int64_t t1 = cr_mono_ns();
    cr_fsync_observe(CR_FSYNC_STORE, t1 - t0);
    if (rc == 0 && dir_too && !cdb_fsync_dir(l->dir)) {
        rc  = -1;
        err = errno ? errno : EIO;
    }
    pthread_mutex_lock(&l->mu);
    l->syncing = false;
    l->fsync_us += (uint64_t)(t1 - t0) / 1000;
    if (rc == 0 && dir_too)
        l->create_pending = false;
    l->fsyncs++;
    l->fsync_groups += groups;
    if (rc == 0) {
        publish_locked(l, target);
        if (fd == l->fd && off > l->synced_off)
            l->synced_off = off;
    } else {
        l->failures++;
        l->failed = true;
        if (l->mode == CDB_SYNC_ALWAYS) {
            /* Everything after the last good sync is doomed: it will be cut. */
            l->end      = l->synced_off;
            l->next_seq = l->synced_seq + 1;
            LOG_E("corDB: fdatasync of the log failed (%s): the writes not yet on disk are "
                  "undone and answered 503; no write until the disk works", strerror(err));
        } else {
            LOG_E("corDB: fdatasync of the log failed (%s): writes of the last %d ms may not be "
                  "on disk; no write until the disk works", strerror(err), l->interval_ms);
        }
        wake_all(l);
    }
    futex_wake(&l->fword[k & 1]);
    pthread_cond_broadcast(&l->cv);
}

/* The log thread: with --dbSync always, the syncer (fdatasync back to back
 * while groups wait for one, so a writer never runs the fsync on its HTTP
 * thread and waits once, for exactly the fsync that covers it); with
 * interval, an fdatasync every --dbSyncInterval ms; in every mode the repair
 * after a fault (every interval, or 100 ms). */
static void *log_thread(void *ud)
{
    cdb_log_t      *l  = ud;
    int             ms = l->mode == CDB_SYNC_INTERVAL ? l->interval_ms : 100;
    struct timespec due, now;

    clock_gettime(CLOCK_REALTIME, &due);
    pthread_mutex_lock(&l->mu);
    /* At the close, the held writes still waiting are synced (or undone)
     * and answered first: none is left behind. */
    while (!l->stop || l->n_held) {
        if (held_complete_locked(l) || held_doom_locked(l))
            continue;
        if (l->mode == CDB_SYNC_ALWAYS && !l->failed && !l->syncing &&
            l->next_seq - 1 > l->synced_seq) {
            log_sync_locked(l);
            continue;
        }
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec > due.tv_sec || (now.tv_sec == due.tv_sec && now.tv_nsec >= due.tv_nsec)) {
            /* the tick: every interval (or 100 ms), however often woken */
            due = now;
            due.tv_sec += ms / 1000;
            due.tv_nsec += (long)(ms % 1000) * 1000000L;
            if (due.tv_nsec >= 1000000000L) {
                due.tv_sec++;
                due.tv_nsec -= 1000000000L;
            }
            if (l->failed)
                log_repair_locked(l);
            else if (l->mode == CDB_SYNC_INTERVAL && !l->syncing)
                log_sync_locked(l);
            continue;
        }
        l->syncer_idle = l->mode == CDB_SYNC_ALWAYS;
        pthread_cond_timedwait(&l->thr_cv, &l->mu, &due);
        l->syncer_idle = false;
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static bool log_roll(cdb_log_t *l, bool for_snapshot, uint64_t *upto, uint32_t *first_kept,
                     problem_t *p);

/* The snapshot thread: snapshots, and the roll-overs at --dbSegmentSize (a
 * roll creates and fsyncs a file: done here, the syncer goes on meanwhile). */
static void *snap_thread(void *ud)
{
    cdb_log_t *l = ud;

    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->roll_wanted) {
            uint64_t  upto;
            uint32_t  kept;
            problem_t p = { 0 };

            pthread_mutex_unlock(&l->mu);
            if (!log_roll(l, false, &upto, &kept, &p) && p.detail[0])
                LOG_W("corDB: the log did not roll over to a new segment: %s", p.detail);
            pthread_mutex_lock(&l->mu);
            l->roll_wanted = false;         /* asked again by the next append past the size */
            continue;
        }
        if (l->zero_wanted) {
            zero_ahead(l);
            continue;
        }
        if (!l->snap_wanted) {
            pthread_cond_wait(&l->snap_cv, &l->mu);
            continue;
        }
        l->snap_wanted = false;
        pthread_mutex_unlock(&l->mu);
        l->snapshot(l->snapshot_ud);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

bool cdb_log_start(cdb_log_t *l, uint64_t next_seq, void (*snapshot)(void *ud), void *ud,
                   problem_t *p)
{
    cdb_files_t f;

    if (!cdb_list_files(l->dir, &f, p))
        return false;
    /* Recovery read the last segment whole (and cut a torn tail): appends
     * go on at its end. */
    l->end = CDB_MAGIC_LEN;
    if (f.n_seg) {
        char        path[4096];
        struct stat st;

        l->seg = f.seg[f.n_seg - 1];
        cdb_seg_path(path, sizeof(path), l->dir, l->seg);
        l->fd = open(path, O_RDWR | O_CLOEXEC);
        if (l->fd >= 0 && fstat(l->fd, &st) == 0 && st.st_size >= CDB_MAGIC_LEN) {
            l->end = (uint64_t)st.st_size;
        } else if (l->fd >= 0) {
            close(l->fd);
            l->fd = -1;
        }
    }
    if (l->fd < 0) {
        l->seg = f.n_seg ? f.seg[f.n_seg - 1] + 1 : 1;
        /* The start does not wait for the disk: the first sync makes the
         * new file and its directory entry durable, before anything in it
         * counts as synced (an empty start in about 1 ms, not 5 - 20). */
        l->fd  = seg_create(l->dir, l->seg, false);
        l->create_pending = l->fd >= 0;
    }
    cdb_files_free(&f);
    if (l->fd < 0)
        return problem_set(p, PB_INTERNAL_ERROR, "--dbDir %.200s: cannot create a log segment: %s",
                           l->dir, strerror(errno));
    l->synced_off = l->end;
    l->zero_end   = l->end;
    seg_map(l);
    l->next_seq    = next_seq;
    l->synced_seq  = next_seq - 1;
    l->snapshot    = snapshot;
    l->snapshot_ud = ud;
    if (pthread_create(&l->thread, NULL, log_thread, l) != 0)
        return problem_set(p, PB_INTERNAL_ERROR, "corDB: cannot start the log thread");
    if (snapshot && pthread_create(&l->snap_thread, NULL, snap_thread, l) == 0)
        l->snap_thread_on = true;
    l->started = true;
    return true;
}

void cdb_log_close(cdb_log_t *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    wake_all(l);
    pthread_cond_broadcast(&l->thr_cv);
    pthread_cond_broadcast(&l->snap_cv);
    pthread_mutex_unlock(&l->mu);
    if (l->started)
        pthread_join(l->thread, NULL);
    if (l->snap_thread_on)
        pthread_join(l->snap_thread, NULL);
    seg_unmap(l->map, l->map_len);
    if (l->fd >= 0) {
        /* the space ahead goes: a clean close leaves the records only */
        if (!l->failed && l->zero_end > l->end && ftruncate(l->fd, (off_t)l->end) != 0)
            LOG_W("corDB: cannot cut the log's zeros ahead at close: %s", strerror(errno));
        if (!l->failed && (fdatasync(l->fd) != 0 ||
                           (l->create_pending && !cdb_fsync_dir(l->dir))))
            LOG_E("corDB: fdatasync of the log at close failed: %s", strerror(errno));
        close(l->fd);
    }
    if (l->old_fd >= 0)
        close(l->old_fd);
    close(l->lock_fd);              /* releases the flock */
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->thr_cv);
    pthread_cond_destroy(&l->snap_cv);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->roll_mu);
    free(l->dir);
    free(l);
}

static bool pwrite_all(int fd, const char *buf, size_t len, uint64_t off)
{
    while (len) {
        ssize_t k = pwrite(fd, buf, len, (off_t)off);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return false;
        }
        buf += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
    return true;
}

bool cdb_log_append(cdb_log_t *l, sbuf_t *sb, cdb_logw_t *w, problem_t *p)
{
    size_t n;
    int    err;

    w->linked = w->waits = false;
    pthread_mutex_lock(&l->mu);
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        return log_503(p, "write", EIO);
    }
    /* Never into the range the snapshot thread is zeroing (it is
     * ZERO_AHEAD ahead: this waits only when the appends caught up). */
    while (l->zeroing && l->end + sb->len > l->zero_from && !l->failed)
        pthread_cond_wait(&l->cv, &l->mu);
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        return log_503(p, "write", EIO);
    }
    n = cdb_rec_seal(sb->p, sb->len, l->next_seq);
    if (l->map && l->end + sb->len <= l->zero_end && l->end + sb->len <= l->map_len) {
        /* into the space ahead: the page cache has it now, as after a
         * pwrite (a process crash keeps it), and the fsync covers it */
        memcpy(l->map + l->end, sb->p, sb->len);
        l->mapped++;
    } else if (!pwrite_all(l->fd, sb->p, sb->len, l->end)) {
        err = errno;
        l->failures++;
        /* Nothing of the group may stay: cut back; if even that fails the
         * log is failed until the background thread manages it. */
        if (ftruncate(l->fd, (off_t)l->end) != 0) {
            l->failed = true;
            LOG_E("corDB: the log cannot be cut back after a failed write (%s)", strerror(errno));
        }
        zero_reset(l);
        /* One line per second at most while the disk fails (each write is
         * answered 503 and logged by http/ anyway). */
        bool say = l->last_fail_log != time(NULL);

        l->last_fail_log = time(NULL);
        pthread_mutex_unlock(&l->mu);
        if (say)
            LOG_W("corDB: a log write failed (%s): answered 503 (more may follow, not logged)",
                  strerror(err));
        return log_503(p, "write", err);
    }
    l->end += sb->len;
    if (l->zero_end < l->end)
        l->zero_end = l->end;
    zero_ask(l);
    l->next_seq += n;
    l->appends++;
    l->records += n;
    l->bytes += sb->len;
    l->since_snap += sb->len;
    if (l->seg_size && l->end >= l->seg_size && !l->roll_wanted && l->snap_thread_on) {
        l->roll_wanted = true;
        pthread_cond_signal(&l->snap_cv);
    }
    if (l->snapshot_size && l->since_snap >= l->snapshot_size && !l->snap_wanted &&
        l->snap_thread_on) {
        l->since_snap  = 0;
        l->snap_wanted = true;
        pthread_cond_signal(&l->snap_cv);
    }
    if (l->mode == CDB_SYNC_ALWAYS) {
        w->gen    = l->sync_gen;        /* the next fsync to start covers it */
        if (l->syncer_idle)
            pthread_cond_signal(&l->thr_cv);
        w->last   = l->next_seq - 1;
        w->next   = NULL;
        w->prev   = l->tail;
        w->alarm  = atomic_load_explicit(&l->alarm, memory_order_relaxed);
        atomic_store_explicit(&w->done, false, memory_order_relaxed);
        w->linked = w->waits = true;
        l->n_held += w->held;
        if (l->tail)
            l->tail->next = w;
        else
            l->head = w;
        l->tail = w;
    }
    pthread_mutex_unlock(&l->mu);
    return true;
}

static void unlink_w(cdb_log_t *l, cdb_logw_t *w)
{
    if (!w->linked)
        return;
    if (w->prev)
        w->prev->next = w->next;
    else
        l->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        l->tail = w->prev;
    w->linked = false;
}

cdb_wait_t cdb_log_wait(cdb_log_t *l, cdb_logw_t *w, problem_t *p)
{
    _Atomic uint32_t *word = &l->fword[w->gen & 1];

    if (!w->waits)
        return CDB_WAIT_OK;
    /* The fast way: sleep on the fsync's futex word until the syncer marks
     * w done (it unlinked w): no mutex. The word is read before done, so a
     * wake between the two makes FUTEX_WAIT return at once. */
    for (;;) {
        uint32_t v = atomic_load_explicit(word, memory_order_acquire);

        if (atomic_load_explicit(&w->done, memory_order_acquire))
            return CDB_WAIT_OK;
        if (atomic_load_explicit(&l->alarm, memory_order_acquire) != w->alarm)
            break;
        syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
    }
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (atomic_load_explicit(&w->done, memory_order_relaxed)) {
            pthread_mutex_unlock(&l->mu);
            return CDB_WAIT_OK;
        }
        if (l->synced_seq >= w->last) {
            unlink_w(l, w);
            /* Only doomed writers wait for a change of the list (their
             * turn to undo); on the fast path one broadcast per fsync is
             * all the waking there is (it was 18 futex calls a write). */
            if (l->failed)
                pthread_cond_broadcast(&l->cv);
            pthread_mutex_unlock(&l->mu);
            return CDB_WAIT_OK;
        }
        if (l->failed) {
            if (l->tail == w) {             /* my turn to undo (later groups are undone) */
                pthread_mutex_unlock(&l->mu);
                log_503(p, "sync", EIO);
                return CDB_WAIT_DOOMED;
            }
            pthread_cond_wait(&l->cv, &l->mu);
            continue;
        }
        /* The log thread syncs (it is never stopped while a writer waits);
         * cv is broadcast at the end of every fsync. */
        pthread_cond_wait(&l->cv, &l->mu);
    }
}

bool cdb_log_want_snapshot(cdb_log_t *l)
{
    bool ok;

    pthread_mutex_lock(&l->mu);
    ok = l->snap_thread_on;
    if (ok) {
        l->snap_wanted = true;
        pthread_cond_signal(&l->snap_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

bool cdb_log_sync(cdb_log_t *l, uint64_t *upto, problem_t *p)
{
    pthread_mutex_lock(&l->mu);
    *upto = l->next_seq - 1;
    for (;;) {
        if (l->synced_seq >= *upto) {
            pthread_mutex_unlock(&l->mu);
            return true;
        }
        if (l->failed) {
            pthread_mutex_unlock(&l->mu);
            return log_503(p, "sync", EIO);
        }
        if (!l->syncing)
            log_sync_locked(l);
        else
            pthread_cond_wait(&l->cv, &l->mu);
    }
}

void cdb_log_undone(cdb_log_t *l, cdb_logw_t *w)
{
    pthread_mutex_lock(&l->mu);
    unlink_w(l, w);
    pthread_cond_broadcast(&l->cv);
    if (l->n_held)
        pthread_cond_signal(&l->thr_cv);    /* a held waiter's turn to be undone, maybe */
    pthread_mutex_unlock(&l->mu);
}

void cdb_log_set_held(cdb_log_t *l, void (*held_undo)(void *ud, cdb_logw_t *w),
                      void (*held_done)(void *ud, cdb_logw_t *w, bool ok),
                      void (*held_round)(void *ud), void *ud)
{
    l->held_undo  = held_undo;
    l->held_done  = held_done;
    l->held_round = held_round;
    l->held_ud    = ud;
}

bool cdb_log_roll(cdb_log_t *l, uint64_t *upto, uint32_t *first_kept, problem_t *p)
{
    return log_roll(l, true, upto, first_kept, p);
}

/* Rolls over to a new segment (a snapshot's, or one past --dbSegmentSize:
 * then nothing happens when the segment is below the size by now, and p is
 * left empty). */
static bool log_roll(cdb_log_t *l, bool for_snapshot, uint64_t *upto, uint32_t *first_kept,
                     problem_t *p)
{
    uint32_t seg;
    int      fd, oldfd, rc, err;
    uint64_t k;

    pthread_mutex_lock(&l->roll_mu);
    pthread_mutex_lock(&l->mu);
    seg = l->seg + 1;
    if (!for_snapshot && (l->end < l->seg_size || l->failed)) {
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_unlock(&l->roll_mu);
        return false;
    }
    pthread_mutex_unlock(&l->mu);
    fd = seg_create(l->dir, seg, true);
    if (fd < 0) {
        pthread_mutex_unlock(&l->roll_mu);
        return problem_set(p, PB_INTERNAL_ERROR, "corDB: cannot create a log segment: %s",
                           strerror(errno));
    }

    pthread_mutex_lock(&l->mu);
    while (l->syncing || l->zeroing)
        pthread_cond_wait(&l->cv, &l->mu);
    if (l->failed || l->old_fd >= 0) {
        pthread_mutex_unlock(&l->mu);
        pthread_mutex_unlock(&l->roll_mu);
        close(fd);
        {
            char path[4096];

            cdb_seg_path(path, sizeof(path), l->dir, seg);
            unlink(path);                   /* empty: not needed */
        }
        return problem_set(p, PB_INTERNAL_ERROR, "corDB: the log is failed; no roll-over now");
    }
    /* The old segment's last fsync runs as this thread's sync (syncing set:
     * writers of always wait for it, then sync the new segment). */
    oldfd             = l->fd;
    uint8_t *old_map  = l->map;
    size_t old_map_len = l->map_len;
    uint64_t old_end  = l->end;
    bool old_zeros    = l->zero_end > l->end;
    l->old_fd         = oldfd;
    l->old_end        = l->end;
    l->old_synced_off = l->synced_off;
    l->fd             = fd;
    l->seg            = seg;
    seg_map(l);
    l->end = l->synced_off = CDB_MAGIC_LEN;
    zero_reset(l);
    l->zero_off       = false;
    *upto             = l->next_seq - 1;
    *first_kept       = seg;
    if (for_snapshot)
        l->since_snap = 0;
    l->syncing        = true;
    k                 = l->sync_gen++;    /* it is the fsync that covers the groups so far */
    pthread_mutex_unlock(&l->mu);

    /* The old segment keeps its records only (no appends reach it now). */
    seg_unmap(old_map, old_map_len);
    int64_t t0 = cr_mono_ns();
    rc  = old_zeros && ftruncate(oldfd, (off_t)old_end) != 0 ? -1 : fdatasync(oldfd);
    err = errno;
    cr_fsync_observe(CR_FSYNC_STORE, cr_mono_ns() - t0);

    pthread_mutex_lock(&l->mu);
    l->syncing = false;
    l->fsyncs++;
    if (rc == 0) {
        publish_locked(l, *upto);
        close(oldfd);
        l->old_fd         = -1;
        l->create_pending = false;      /* the new segment's creation fsynced the directory */
    } else {
        l->failures++;
        l->failed = true;
        if (l->mode == CDB_SYNC_ALWAYS) {
            l->old_end  = l->old_synced_off;
            l->end      = CDB_MAGIC_LEN;
            l->next_seq = l->synced_seq + 1;
        }
        LOG_E("corDB: fdatasync of a log segment failed (%s)", strerror(err));
        wake_all(l);
    }
    futex_wake(&l->fword[k & 1]);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_unlock(&l->roll_mu);
    if (rc != 0)
        return problem_set(p, PB_INTERNAL_ERROR, "corDB: fdatasync of the log failed: %s",
                           strerror(err));
    return true;
}

void cdb_log_snapshot_done(cdb_log_t *l, uint64_t seq, uint32_t first_after)
{
    cdb_files_t f;
    char        path[4096];
    uint64_t    prev = 0;
    uint32_t    keep_from = first_after;

    pthread_mutex_lock(&l->mu);
    l->snapshots++;
    pthread_mutex_unlock(&l->mu);
    if (!cdb_list_files(l->dir, &f, NULL))
        return;
    /* Keep this snapshot and the one before it (prev), and every segment
     * holding a record after prev: a segment can go when the next one's
     * first record is at most prev + 1. Without an older snapshot, the whole
     * log stays (the fall-back from this one is the log from the start). */
    for (size_t i = 0; i < f.n_snap; i++)
        if (f.snap[i] < seq)
            prev = f.snap[i];
    for (size_t i = 0; i < f.n_snap; i++) {
        if (f.snap[i] < prev) {
            cdb_snap_path(path, sizeof(path), l->dir, f.snap[i]);
            unlink(path);
        }
    }
    /* A segment can go when the next one starts at or before prev + 1 (all
     * its records are in the older snapshot). */
    for (size_t i = 0; i + 1 < f.n_seg && f.seg[i] < keep_from; i++) {
        char     next[4096];
        uint8_t  head[CDB_MAGIC_LEN + 16];
        int      fd;
        ssize_t  k;
        uint64_t first;

        cdb_seg_path(next, sizeof(next), l->dir, f.seg[i + 1]);
        fd = open(next, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        k = pread(fd, head, sizeof(head), 0);
        close(fd);
        if (k < (ssize_t)sizeof(head) || !get_u32(head + CDB_MAGIC_LEN))
            break;              /* the next segment is empty (or zeros ahead): no first seq yet */
        first = get_u64(head + CDB_MAGIC_LEN + 8);
        if (!prev || first > prev + 1)
            break;
        cdb_seg_path(path, sizeof(path), l->dir, f.seg[i]);
        unlink(path);
    }
    cdb_fsync_dir(l->dir);
    cdb_files_free(&f);
}

void cdb_log_get_stats(cdb_log_t *l, cdb_log_stats_t *st)
{
    pthread_mutex_lock(&l->mu);
    st->appends      = l->appends;
    st->records      = l->records;
    st->bytes        = l->bytes;
    st->fsyncs       = l->fsyncs;
    st->fsync_groups = l->fsync_groups;
    st->fsync_us     = l->fsync_us;
    st->held         = l->held_completed;
    st->mapped       = l->mapped;
    st->failures     = l->failures;
    st->snapshots    = l->snapshots;
    st->synced_seq   = l->synced_seq;
    st->next_seq     = l->next_seq;
    st->failed       = l->failed;
    pthread_mutex_unlock(&l->mu);
}
