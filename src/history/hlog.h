/*
 * hlog.h - the files of corDB history on --dbDir (internal to src/history/):
 * an append-only log (history.log) of the history's writes and a snapshot
 * (history.snap) of its whole state, both sequences of records
 *     u32 len | u32 crc32c(payload) | payload[len]
 * A torn or corrupt tail of the log is cut at the first bad record; a bad
 * snapshot refuses the start (it was installed whole by rename, so it is
 * never torn). hcordb.c says what the payloads mean.
 */
#ifndef CORAINE_HISTORY_HLOG_H
#define CORAINE_HISTORY_HLOG_H

#include "../core/core.h"

typedef struct hlog hlog_t;

/* Opens (creating) dir/history.log, after calling replay(ud, payload, len)
 * for every record of dir/history.snap, then of the log, in order (a false
 * from replay refuses the start). The log is then appended to; a thread
 * fdatasyncs it every sync_ms, or with always when hlog_sync asks. */
hlog_t *hlog_open(const char *dir, bool always, int sync_ms,
                  bool (*replay)(void *ud, const uint8_t *payload, size_t len, bool from_snapshot), void *ud,
                  problem_t *p);
void    hlog_close(hlog_t *l);
/* Appends one record (false when the disk fails: logged once, the history
 * stays correct in memory; the log is failed, see hlog_failed). */
bool    hlog_append(hlog_t *l, const void *payload, size_t len);
/* always: returns when every record appended before the call is on disk
 * (one fdatasync serves every caller waiting meanwhile); false when the
 * log failed or that fdatasync did. Without always: true at once. */
bool    hlog_sync(hlog_t *l);
uint64_t hlog_fsyncs(hlog_t *l);   /* fdatasyncs of the log so far */
/* A write or an fdatasync of the log failed, and no snapshot marked after
 * the last such fault is installed yet: the files may miss records memory
 * holds (hlog_sync answers false). The caller recovers with a snapshot
 * (hlog_image_begin ... hlog_image_install), which clears it once its
 * compacted log is synced and no fault came after its mark. */
bool    hlog_failed(hlog_t *l);
/* Bytes in the log since the last snapshot. */
uint64_t hlog_size(hlog_t *l);

/* A snapshot, in three steps so that writers wait only for the copy:
 * hlog_image_begin, with the caller holding what keeps the state and the log
 * still, marks the log's position; the caller then adds every record of the
 * state (hlog_image_add, in memory) and lets writers go on;
 * hlog_image_install writes the copy to history.snap (by rename) and
 * compacts the log to the records after the mark: the records are copied
 * and synced with no lock held, in rounds until what was appended meanwhile
 * is small; appends wait (*held_us) only while that last piece (at most
 * 64 KiB) is copied, unsynced, and the new log renamed into place; it is
 * synced after, no lock held, and nothing after the last round is
 * acknowledged by hlog_sync before that. It frees im. */
typedef struct hlog_image hlog_image_t;
hlog_image_t *hlog_image_begin(hlog_t *l);
void          hlog_image_add(void *im, const void *payload, size_t len);
bool          hlog_image_install(hlog_t *l, hlog_image_t *im, int64_t *held_us, problem_t *p);

/* For tests (test/unit/test_history_log.c): called, when set, at each step
 * of hlog_image_install, so that a test can stop the process there. Steps
 * marked (locked) run under the log's mutex: the hook must not append. */
typedef enum {
    HLOG_STEP_SNAPSHOT = 1,     /* history.snap installed */
    HLOG_STEP_COPIED,           /* the records after the mark copied into history.log.tmp, synced */
    HLOG_STEP_ROUND,            /* a round of the tail copied and synced */
    HLOG_STEP_LAST_PIECE,       /* (locked) the last piece copied, not synced */
    HLOG_STEP_RENAMED,          /* (locked) history.log.tmp renamed over history.log */
    HLOG_STEP_SWITCHED,         /* appends go to the new log */
    HLOG_STEP_SYNCED            /* the new log and the directory synced */
} hlog_step_t;
extern void (*hlog_step_hook)(hlog_step_t step);

#endif
