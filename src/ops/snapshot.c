/*
 * snapshot.c - POST /admin/snapshot as an operation: forces a snapshot of
 * corDB on disk (store_snapshot), e.g. before a backup (doc/cordb.md).
 */
#include "ops.h"

bool ops_snapshot(store_t *s, store_snapshot_info_t *info, problem_t *p)
{
    return store_snapshot(s, info, p);
}
