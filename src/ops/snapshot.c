/*
 * snapshot.c - /admin/snapshot as operations: start a snapshot of corDB on
 * disk in the store's own thread (e.g. before a backup: doc/cordb.md), and
 * tell how the last one went. The history (--history corDB) is snapshotted
 * too.
 */
#include "ops.h"

bool ops_snapshot_start(store_t *s, problem_t *p)
{
    /* the history's snapshot (corDB history on --dbDir) is written here, the
     * store's in its own thread */
    return history_snapshot(history_default, p) && store_snapshot_start(s, p);
}

bool ops_snapshot_last(store_t *s, store_snapshot_info_t *info, bool *running, problem_t *p)
{
    return store_snapshot_last(s, info, running, p);
}
