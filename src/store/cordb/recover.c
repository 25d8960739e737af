/*
 * recover.c - corDB on disk at start: the newest valid snapshot, then every
 * log record after it, into a corDB in RAM; then the log takes new writes
 * (doc/cordb.md "Recovery").
 *
 * Snapshots are tried newest first; one that does not read whole (a bad
 * CRC, no END record, a count that does not match) is logged and the one
 * before it is tried, with the longer log. Log segments are read in order;
 * their records must continue the seqs without a gap. A group (CDB_REC_MORE)
 * is applied only when its last record has been read.
 *
 * A bad record where the last segment ends (a record cut short, or bytes
 * that are only zeros, or a bad record that runs to the end of the file, or
 * a record position holding zeros: a hole a machine crash left) is a torn
 * tail: a crash while writing, never acknowledged. It is cut off, from
 * the start of its group, and the bytes dropped are logged. With --dbSync
 * always the log writes zeros ahead of its appends (log.c): after a crash a
 * segment ends in zeros, the end of its records, cut without a warning (in
 * any segment: a crash between a roll-over and the cut of the old segment
 * leaves its zeros; the seqs of the next segment must still follow on), and
 * "runs to the end of the file" means to the end of what is not zeros. Any other bad
 * record stops the start with its file and offset, unless --dbRecover
 * truncate says to cut the log there (and drop the segments after it).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../model/codec.h"
#include "cordb.h"
#include "log.h"

typedef struct mapped {
    uint8_t *p;
    size_t   n;
    int      fd;
} mapped_t;

static bool map_file(const char *path, mapped_t *m, bool writable)
{
    struct stat st;

    m->p  = NULL;
    m->n  = 0;
    m->fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (m->fd < 0 || fstat(m->fd, &st) != 0) {
        if (m->fd >= 0)
            close(m->fd);
        m->fd = -1;
        return false;
    }
    m->n = (size_t)st.st_size;
    if (m->n) {
        m->p = mmap(NULL, m->n, PROT_READ, MAP_PRIVATE, m->fd, 0);
        if (m->p == MAP_FAILED) {
            close(m->fd);
            m->fd = -1;
            m->p  = NULL;
            return false;
        }
        madvise(m->p, m->n, MADV_SEQUENTIAL);
    }
    return true;
}

static void unmap_file(mapped_t *m)
{
    if (m->p)
        munmap(m->p, m->n);
    if (m->fd >= 0)
        close(m->fd);
    m->p  = NULL;
    m->fd = -1;
}

/* ------------------------------------------------------ applying records */

typedef struct replay {
    cdb_t   *db;
    arena_t *a;
    uint64_t puts, dels, objs;
} replay_t;

static bool apply_rec(replay_t *rp, const cdb_rec_t *r, problem_t *p)
{
    char        tenant[1024];
    cr_reader_t rd = { .p = r->payload, .end = r->payload + r->payload_len };
    const char *id, *json;
    size_t      n, jn;
    uint64_t    kind;
    bool        ok = true;

    if (r->tenant_len >= sizeof(tenant) || memchr(r->tenant, '\0', r->tenant_len))
        return problem_set(p, PB_INTERNAL_ERROR, "a record's tenant name is not valid");
    memcpy(tenant, r->tenant, r->tenant_len);
    tenant[r->tenant_len] = '\0';
    arena_reset(rp->a);

    switch (r->kind) {
    case CDB_REC_PUT: {
        cr_entity_t *d = entity_decode(rp->a, r->payload, r->payload_len), *e;

        if (!d)
            return problem_set(p, PB_INTERNAL_ERROR, "an entity record does not decode");
        e = entity_freeze(d);
        if (!e)
            return problem_set(p, PB_INTERNAL_ERROR, "an entity record is too large");
        rp->puts++;
        return cdb_replay_put(rp->db, tenant, e, p);
    }
    case CDB_REC_DEL:
        id = cr_get_str(&rd, &n);
        if (!id || rd.p != rd.end)
            return problem_set(p, PB_INTERNAL_ERROR, "a delete record does not decode");
        cdb_replay_del(rp->db, tenant, arena_strndup(rp->a, id, n));
        rp->dels++;
        return true;
    case CDB_REC_OBJ_PUT:
    case CDB_REC_OBJ_DEL:
        kind = cr_get_varint(&rd);
        id   = cr_get_str(&rd, &n);
        json = r->kind == CDB_REC_OBJ_PUT ? cr_get_str(&rd, &jn) : NULL;
        if (!id || rd.bad || rd.p != rd.end || kind < 1 || kind > 5 ||
            (r->kind == CDB_REC_OBJ_PUT && !json))
            return problem_set(p, PB_INTERNAL_ERROR, "an object record does not decode");
        rp->objs++;
        if (r->kind == CDB_REC_OBJ_PUT)
            ok = cdb_obj_put(rp->db, tenant, (int)kind, arena_strndup(rp->a, id, n), json, jn,
                             false, p);
        else
            cdb_obj_delete(rp->db, tenant, (int)kind, arena_strndup(rp->a, id, n), NULL);
        return ok;
    default:
        return problem_set(p, PB_INTERNAL_ERROR, "a record of unknown kind %d", r->kind);
    }
}

/* ------------------------------------------------------------ snapshots */

static uint64_t le64(const uint8_t *b)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Loads the snapshot into rp->db; false (p) when it does not read whole. */
static bool snap_load(replay_t *rp, const char *path, uint64_t seq, problem_t *p)
{
    mapped_t  m;
    size_t    off = CDB_MAGIC_LEN + 8;
    uint64_t  count = 0;
    cdb_rec_t r;

    if (!map_file(path, &m, false))
        return problem_set(p, PB_INTERNAL_ERROR, "%s: %s", path, strerror(errno));
    if (m.n < off || memcmp(m.p, CDB_SNAP_MAGIC, CDB_MAGIC_LEN) != 0 ||
        le64(m.p + CDB_MAGIC_LEN) != seq) {
        unmap_file(&m);
        return problem_set(p, PB_INTERNAL_ERROR, "%s: not a corDB snapshot of seq %llu", path,
                           (unsigned long long)seq);
    }
    for (;;) {
        cdb_parse_t pr = cdb_rec_parse(m.p + off, m.n - off, &r);

        if (pr != CDB_PARSE_OK) {
            problem_set(p, PB_INTERNAL_ERROR, "%s: %s record at offset %zu", path,
                        pr == CDB_PARSE_SHORT ? "a cut" : "a corrupt", off);
            break;
        }
        off += r.size;
        if (r.kind == CDB_REC_END) {
            cr_reader_t rd = { .p = r.payload, .end = r.payload + r.payload_len };

            if (cr_get_varint(&rd) != count || rd.bad || off != m.n) {
                problem_set(p, PB_INTERNAL_ERROR, "%s: the END record does not match", path);
                break;
            }
            unmap_file(&m);
            return true;
        }
        if (r.kind != CDB_REC_PUT && r.kind != CDB_REC_OBJ_PUT) {
            problem_set(p, PB_INTERNAL_ERROR, "%s: a record of kind %d at offset %zu", path,
                        r.kind, off - r.size);
            break;
        }
        if (!apply_rec(rp, &r, p))
            break;
        count++;
    }
    unmap_file(&m);
    return false;
}

/* ------------------------------------------------------------ the log */

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

typedef struct seg_scan {
    replay_t   *rp;
    uint64_t    base;       /* records up to base are in the snapshot */
    uint64_t    expect;     /* the next seq to apply */
    bool        truncate;   /* --dbRecover truncate */
    bool        cut;        /* the log was cut: later segments are dropped */
} seg_scan_t;

/* Reads one segment; last: it is the newest. */
static bool seg_replay(seg_scan_t *ss, const char *dir, uint32_t seg, bool last, problem_t *p)
{
    char      path[4096];
    mapped_t  m;
    size_t    off = CDB_MAGIC_LEN, group_at = CDB_MAGIC_LEN, bad_at = 0;
    cdb_rec_t r;
    const char *why = NULL;
    bool      ok = true, holed = false, zeros = false;
    size_t    data_end;

    cdb_seg_path(path, sizeof(path), dir, seg);
    if (!map_file(path, &m, true))
        return problem_set(p, PB_INTERNAL_ERROR, "%s: %s", path, strerror(errno));
    if (m.n < CDB_MAGIC_LEN || memcmp(m.p, CDB_LOG_MAGIC, CDB_MAGIC_LEN) != 0) {
        unmap_file(&m);
        if (last && m.n < CDB_MAGIC_LEN) {        /* created, not yet written: nothing in it */
            LOG_W("corDB: %s is an empty segment cut short; removed", path);
            unlink(path);
            return true;
        }
        return problem_set(p, PB_INTERNAL_ERROR, "%s: not a corDB log segment", path);
    }

    /* the end of what is not zeros (the zeros ahead of a crashed log) */
    data_end = m.n;
    while (data_end > CDB_MAGIC_LEN && data_end % 8 && !m.p[data_end - 1])
        data_end--;
    while (data_end >= CDB_MAGIC_LEN + 8 && all_zero(m.p + data_end - 8, 8))
        data_end -= 8;
    while (data_end > CDB_MAGIC_LEN && !m.p[data_end - 1])
        data_end--;

    while (off < m.n) {
        cdb_parse_t pr = cdb_rec_parse(m.p + off, m.n - off, &r);

        if (pr != CDB_PARSE_OK) {
            bool torn = pr == CDB_PARSE_SHORT || off >= data_end;

            zeros = off >= data_end;

            /* A record that starts with 8 zero bytes (length 0: no record
             * is) is space that was never written: after a machine crash,
             * pages written back out of order leave such a hole in front
             * of later ones that reached the disk before their fsync. In
             * the last segment that is the end of what was synced. */
            if (!torn && last && m.n - off >= 8 && all_zero(m.p + off, 8)) {
                torn = true;
                holed = true;
            }

            if (!torn && m.n - off >= 8) {
                /* a bad record that runs to the end of the file */
                uint32_t len = (uint32_t)m.p[off] | (uint32_t)m.p[off + 1] << 8 |
                               (uint32_t)m.p[off + 2] << 16 | (uint32_t)m.p[off + 3] << 24;
                torn = (uint64_t)off + 8 + len >= data_end;
            }
            bad_at = off;
            why    = torn && (last || (zeros && group_at == off)) ? "torn" : "corrupt";
            break;
        }
        if (r.seq > ss->base) {
            if (r.seq != ss->expect) {
                bad_at = off;
                why    = "out of sequence";
                break;
            }
            ss->expect++;
        }
        off += r.size;
        if (!(r.flags & CDB_REC_MORE)) {
            /* the group is whole: apply it */
            size_t at = group_at;

            while (at < off) {
                cdb_rec_t g = {0};

                cdb_rec_parse(m.p + at, off - at, &g);
                if (g.seq > ss->base && !apply_rec(ss->rp, &g, p)) {
                    char d[sizeof(p->detail)];

                    snprintf(d, sizeof(d), "%s", p->detail);
                    problem_set(p, PB_INTERNAL_ERROR, "%s, offset %zu: %s", path, at, d);
                    unmap_file(&m);
                    return false;
                }
                at += g.size;
            }
            group_at = off;
        }
    }
    if (!why && group_at < m.n) {
        /* the file ends inside a group (its last record never written) */
        bad_at = group_at;
        why    = last ? "torn" : "corrupt";
    }
    if (why) {
        /* Seqs of the group's records read so far are taken back. */
        for (size_t at = group_at; at < bad_at;) {
            cdb_rec_t g;

            cdb_rec_parse(m.p + at, bad_at - at, &g);
            if (g.seq > ss->base)
                ss->expect--;
            at += g.size;
        }
        if (!strcmp(why, "torn") && zeros && group_at == bad_at) {
            LOG_I("corDB: %s: the log's zeros ahead cut at offset %zu (%zu bytes)", path,
                  group_at, m.n - group_at);
        } else if (!strcmp(why, "torn") && holed) {
            LOG_W("corDB: %s: a torn tail (a machine crash while writing: never-written zeros at "
                  "offset %zu, written bytes after them) cut at offset %zu: %zu bytes dropped, "
                  "never synced", path, bad_at, group_at, m.n - group_at);
        } else if (!strcmp(why, "torn")) {
            LOG_W("corDB: %s: a torn tail (a crash while writing) cut at offset %zu: %zu bytes "
                  "dropped, never acknowledged", path, group_at, m.n - group_at);
        } else if (ss->truncate) {
            LOG_W("corDB: %s: a %s record at offset %zu; --dbRecover truncate: the log is cut "
                  "there, %zu bytes of this segment and every later segment dropped", path, why,
                  bad_at, m.n - group_at);
            ss->cut = true;
        } else {
            problem_set(p, PB_INTERNAL_ERROR, "corDB: %s: a %s record at offset %zu (nothing is "
                        "thrown away silently: to accept the loss of the log from there, start "
                        "once with --dbRecover truncate)", path, why, bad_at);
            ok = false;
        }
        if (ok && ftruncate(m.fd, (off_t)group_at) != 0) {
            problem_set(p, PB_INTERNAL_ERROR, "%s: cannot cut the log: %s", path,
                        strerror(errno));
            ok = false;
        }
        if (ok && fsync(m.fd) != 0)
            ok = problem_set(p, PB_INTERNAL_ERROR, "%s: fsync: %s", path, strerror(errno));
    }
    unmap_file(&m);
    return ok;
}

/* ------------------------------------------------------------ open */

static cdb_sync_t sync_mode(void)
{
    const char *m = cr_config.db_sync;

    if (m && !strcasecmp(m, "always"))
        return CDB_SYNC_ALWAYS;
    if (m && !strcasecmp(m, "none"))
        return CDB_SYNC_NONE;
    return CDB_SYNC_INTERVAL;
}

static void snapshot_cb(void *ud)
{
    problem_t p = { 0 };

    if (!cdb_snapshot(ud, NULL, &p))
        LOG_E("corDB: snapshot failed: %s", p.detail);
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

cdb_t *cdb_open_disk(bool prefer_writers, problem_t *p)
{
    const char     *dir = cr_config.db_dir;
    struct timespec t0;
    cdb_log_t      *log;
    cdb_files_t     f;
    cdb_t          *db = NULL;
    replay_t        rp = { 0 };
    seg_scan_t      ss = { 0 };
    uint64_t        base = 0, entities = 0;
    char            path[4096];

    clock_gettime(CLOCK_MONOTONIC, &t0);
    log = cdb_log_open(dir, sync_mode(), cr_config.db_sync_interval_ms,
                       cr_config.db_snapshot_size, cr_config.db_segment_size, p);
    if (!log)
        return NULL;
    if (!cdb_list_files(dir, &f, p)) {
        cdb_log_close(log);
        return NULL;
    }
    rp.a = arena_new(64 * 1024);

    for (size_t i = f.n_snap; i-- > 0 && !db;) {
        problem_t sp = { 0 };

        rp.db = cdb_open(prefer_writers, p);
        if (!rp.db)
            goto fail;
        cdb_snap_path(path, sizeof(path), dir, f.snap[i]);
        if (snap_load(&rp, path, f.snap[i], &sp)) {
            db   = rp.db;
            base = f.snap[i];
            LOG_I("corDB: snapshot %s loaded (%llu entities, %llu objects)", path,
                  (unsigned long long)rp.puts, (unsigned long long)rp.objs);
            rp.puts = rp.objs = 0;
        } else {
            LOG_E("corDB: snapshot %s is not valid (%s); falling back to the one before it and "
                  "the longer log", path, sp.detail);
            cdb_close(rp.db);
            rp.db = NULL;
            rp.puts = rp.objs = 0;
        }
    }
    if (!db) {
        db = rp.db = cdb_open(prefer_writers, p);
        if (!db)
            goto fail;
    }

    ss.rp       = &rp;
    ss.base     = base;
    ss.expect   = base + 1;
    ss.truncate = cr_config.db_recover && !strcasecmp(cr_config.db_recover, "truncate");
    for (size_t i = 0; i < f.n_seg; i++) {
        if (ss.cut) {
            cdb_seg_path(path, sizeof(path), dir, f.seg[i]);
            LOG_W("corDB: %s dropped (after the cut)", path);
            unlink(path);
            continue;
        }
        if (!seg_replay(&ss, dir, f.seg[i], i + 1 == f.n_seg, p))
            goto fail;
    }
    /* Without a valid snapshot the log must reach back to seq 1: a first
     * record after it was out of sequence above. */
    cdb_stats(db, &entities, NULL);
    cdb_set_log(db, log);
    if (!cdb_log_start(log, ss.expect, snapshot_cb, db, p)) {
        cdb_files_free(&f);
        arena_free(rp.a);
        cdb_close(db);              /* closes the log too */
        return NULL;
    }
    LOG_I("corDB: recovered %s in %.1f ms: %llu entities (snapshot seq %llu, then %llu log "
          "records: %llu versions, %llu deletes, %llu objects); next seq %llu",
          dir, ms_since(&t0), (unsigned long long)entities, (unsigned long long)base,
          (unsigned long long)(ss.expect - base - 1), (unsigned long long)rp.puts,
          (unsigned long long)rp.dels, (unsigned long long)rp.objs,
          (unsigned long long)ss.expect);
    cdb_files_free(&f);
    arena_free(rp.a);
    return db;

fail:
    cdb_files_free(&f);
    arena_free(rp.a);
    if (rp.db)
        cdb_close(rp.db);
    cdb_log_close(log);
    return NULL;
}
