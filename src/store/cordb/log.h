/*
 * log.h - corDB on disk: the write-ahead log, its segment files, the lock
 * file, group commit, the background thread, and reading records back for
 * recovery and snapshots (doc/cordb.md "On disk" has the format and the
 * guarantees). Internal to src/store/cordb/.
 *
 * A record:  u32 len | u32 crc32c | u64 seq | u8 kind | u8 flags | tenant | payload
 *   len     bytes after the crc field (seq .. payload), little-endian;
 *   crc32c  of those len bytes;
 *   seq     the log's sequence number: 1, 2, 3 ... dense over all tenants;
 *   tenant  varint length + bytes ("" for the default tenant);
 *   flags   CDB_REC_MORE: the next record belongs to the same group (a batch,
 *           a purge chunk): recovery applies a group whole or not at all.
 * Segment files log-NNNNNNNN.cdb (a new one after --dbSegmentSize bytes, and
 * at each snapshot) start with the 8-byte magic "CDBLOG01"; a
 * snapshot snap-<seq, 16 hex>.cdb starts with "CDBSNAP1" and u64 seq (every
 * record up to seq is in it), holds records, and ends with an END record.
 *
 * Writers (cordb.c) build a group of records in a thread-local buffer while
 * they hold the tenant's write lock, append it (one pwrite under the log's
 * mutex, which also numbers the records), make the new versions visible,
 * unlock, and then, with --dbSync always, wait for the group's fdatasync
 * (cdb_log_wait), which the log's thread runs for every writer waiting at
 * that moment (group commit). A failed write changes nothing; a failed fsync dooms every record
 * after the last good sync: their writers undo their changes in the reverse
 * order of the log, and the log is cut back before it is written again.
 *
 * Held writes (--dbSync always, a writer whose answer is held: store.h
 * "Held answers"): its waiter lives on the heap (held set) and the writer
 * does not wait. The log's thread completes it instead: after the fsync
 * that covers it, held_done(ud, w, true), in seq order, then held_round(ud)
 * once per round; when an fsync before it failed, held_undo(ud, w) in its
 * turn of the reverse order (the writers undoing themselves take theirs),
 * then held_done(ud, w, false). After held_done the waiter is the callee's
 * (it frees it).
 */
#ifndef CORAINE_CORDB_LOG_H
#define CORAINE_CORDB_LOG_H

#include "../../core/core.h"

typedef struct cdb_log cdb_log_t;

enum {
    CDB_REC_PUT     = 1,    /* payload: entity_encode() of the new version */
    CDB_REC_DEL     = 2,    /* payload: the entity id (string) */
    CDB_REC_OBJ_PUT = 3,    /* payload: object kind (varint), id (string), JSON text (string) */
    CDB_REC_OBJ_DEL = 4,    /* payload: object kind, id */
    CDB_REC_END     = 5     /* snapshots: the last record; payload: records before it (varint) */
};
#define CDB_REC_MORE     1u
#define CDB_REC_HEAD     18u            /* len, crc, seq, kind, flags */
#define CDB_REC_MAX      (1u << 30)     /* the largest len accepted */
#define CDB_LOG_MAGIC    "CDBLOG01"
#define CDB_SNAP_MAGIC   "CDBSNAP1"
#define CDB_MAGIC_LEN    8

uint32_t cdb_crc32c(uint32_t crc, const void *buf, size_t len);

/* ------------------------------------------------------------ records */

/* Starts a record of kind for tenant at the end of sb (seq and crc are set by
 * cdb_log_append); the caller appends the payload, then cdb_rec_end(). */
size_t cdb_rec_begin(sbuf_t *sb, int kind, const char *tenant);
void   cdb_rec_end(sbuf_t *sb, size_t start);
/* Seals the records in buf[0..len) as a group numbered from seq: sets each
 * seq, the MORE flag on all but the last, and the CRCs; returns the count. */
size_t cdb_rec_seal(char *buf, size_t len, uint64_t seq);

typedef struct cdb_rec {
    uint64_t       seq;
    int            kind;
    unsigned       flags;
    const char    *tenant;      /* not NUL-terminated */
    size_t         tenant_len;
    const uint8_t *payload;
    size_t         payload_len;
    size_t         size;        /* the whole record */
} cdb_rec_t;

typedef enum { CDB_PARSE_OK = 0, CDB_PARSE_SHORT, CDB_PARSE_BAD } cdb_parse_t;
/* Parses the record at buf[0..avail): SHORT when it does not fit (a torn
 * tail), BAD when its length or CRC is wrong. */
cdb_parse_t cdb_rec_parse(const uint8_t *buf, size_t avail, cdb_rec_t *r);

/* ------------------------------------------------------------ the log */

typedef enum { CDB_SYNC_ALWAYS = 0, CDB_SYNC_INTERVAL, CDB_SYNC_NONE } cdb_sync_t;

/* A writer waiting for its group's fsync (always): lives on the writer's
 * stack from cdb_log_append to cdb_log_wait / cdb_log_undone. */
typedef struct cdb_logw {
    struct cdb_logw *prev, *next;
    uint64_t         last;      /* the group's last seq */
    uint64_t         gen;       /* the number of the fsync that covers it */
    uint32_t         alarm;     /* the log's alarm count at the append (log.c) */
    bool             linked;    /* in the log's list (under its mutex) */
    bool             waits;     /* the writer waits (always): set by cdb_log_append, the writer's own */
    bool             held;      /* completed by the log's thread (held_done), never waited for */
    _Atomic bool     done;      /* on disk: unlinked by the syncer, the writer returns */
} cdb_logw_t;

typedef enum { CDB_WAIT_OK = 0, CDB_WAIT_DOOMED } cdb_wait_t;

/* Opens dir (created if missing), takes its lock file (a second broker on the
 * same directory: NULL with a message naming the pid holding it). Recovery is
 * the caller's (cdb_log_segments); the log then appends to a new segment. */
cdb_log_t *cdb_log_open(const char *dir, cdb_sync_t mode, int interval_ms, size_t snapshot_size,
                        size_t segment_size, problem_t *p);
/* Starts appending (a new segment after the last one found, next seq given)
 * and the background thread; snapshot(ud) is called from a thread of the
 * log when --dbSnapshotSize bytes were logged since the last snapshot. */
bool       cdb_log_start(cdb_log_t *l, uint64_t next_seq, void (*snapshot)(void *ud), void *ud,
                         problem_t *p);
void       cdb_log_close(cdb_log_t *l);             /* syncs, stops the thread, unlocks */
/* Before the first append: the completions of held waiters (see the top);
 * the log's thread runs them without the log's mutex. */
void       cdb_log_set_held(cdb_log_t *l, void (*held_undo)(void *ud, cdb_logw_t *w),
                            void (*held_done)(void *ud, cdb_logw_t *w, bool ok),
                            void (*held_round)(void *ud), void *ud);
const char *cdb_log_dir(const cdb_log_t *l);
cdb_sync_t  cdb_log_mode(const cdb_log_t *l);

/* The thread-local buffer a writer builds its group in (emptied). */
sbuf_t    *cdb_log_buf(void);
/* Appends the group in sb (at least one record): false with a 503 problem
 * when the log cannot be written (nothing of the group is in it then). With
 * --dbSync always, w is linked for cdb_log_wait (w->held: for the log's
 * thread to complete; the caller must not touch w after a true return). */
bool       cdb_log_append(cdb_log_t *l, sbuf_t *sb, cdb_logw_t *w, problem_t *p);
/* --dbSync always (no lock held): returns when w's group is on disk, or
 * DOOMED (p: 503) when an fsync failed before it: the caller must undo its
 * changes (w's turn: every later group was undone first), then call
 * cdb_log_undone. Other modes: OK at once. */
cdb_wait_t cdb_log_wait(cdb_log_t *l, cdb_logw_t *w, problem_t *p);
void       cdb_log_undone(cdb_log_t *l, cdb_logw_t *w);
/* Asks the log's snapshot thread for a snapshot now (false: it has none). */
bool       cdb_log_want_snapshot(cdb_log_t *l);
/* Every record appended so far on disk (*upto: the last); false (503) when
 * the log is failed or the fsync fails. */
bool       cdb_log_sync(cdb_log_t *l, uint64_t *upto, problem_t *p);

/* Snapshots: rolls the log over to a new segment and returns the last seq
 * the old segments hold (every record up to it is in memory now: the caller
 * holds no tenant lock, and versions it reads later may be newer: replay
 * is idempotent). false when the log is failed. */
bool       cdb_log_roll(cdb_log_t *l, uint64_t *upto, uint32_t *first_kept_segment, problem_t *p);
/* After a snapshot of everything up to seq was installed: removes the
 * segments and the snapshots no longer needed (the previous snapshot and
 * the segments after it are kept, for a fall-back). */
void       cdb_log_snapshot_done(cdb_log_t *l, uint64_t seq, uint32_t first_segment_after);

typedef struct cdb_log_stats {
    uint64_t appends, records, bytes, fsyncs, fsync_groups, failures, snapshots;
    uint64_t fsync_us;          /* time in the log's fdatasyncs */
    uint64_t held;              /* held waiters completed by the log's thread */
    uint64_t mapped;            /* appends copied into the segment's mapping (the rest: pwrite) */
    uint64_t synced_seq, next_seq;
    bool     failed;
} cdb_log_stats_t;
void       cdb_log_get_stats(cdb_log_t *l, cdb_log_stats_t *st);

/* ------------------------------------------------------------ files */

/* fsync of a directory (after a rename or create in it). */
bool cdb_fsync_dir(const char *dir);
/* The segment and snapshot files of dir, sorted: segment numbers, snapshot seqs. */
typedef struct cdb_files {
    uint32_t *seg;  size_t n_seg;
    uint64_t *snap; size_t n_snap;
} cdb_files_t;
bool cdb_list_files(const char *dir, cdb_files_t *out, problem_t *p);
void cdb_files_free(cdb_files_t *f);
void cdb_seg_path(char *buf, size_t n, const char *dir, uint32_t seg);
void cdb_snap_path(char *buf, size_t n, const char *dir, uint64_t seq);

#endif
