/*
 * reg_int.h - what the files of reg/ share: the parsed registration and its
 * counters. Not for other modules.
 */
#ifndef CORAINE_REG_INT_H
#define CORAINE_REG_INT_H

#include "reg.h"

#include <stdatomic.h>

/* The read-only members of 5.2.9 Table 5.2.9-2: shared by a registration's
 * versions (an update keeps them), updated with atomics by the forwarders. */
typedef struct reg_counters {
    atomic_int           refs;
    atomic_uint_fast64_t sent, failed;
    _Atomic int64_t      last_success, last_failure;
    atomic_int           failing;
    uint64_t             order;          /* creation order in the registry */
} reg_counters_t;

typedef struct reg_kv {
    const char *key, *value;
} reg_kv_t;

struct reg {
    atomic_int          refs;
    arena_t            *a;               /* everything below but the counters */
    char               *doc;
    size_t              doc_len;
    json_t             *tree;
    const char         *tenant;          /* interned */
    const char         *id;
    const ld_context_t *ctx;
    const char         *endpoint, *alias, *source_tenant;
    reg_mode_t          mode;
    uint64_t            ops;
    reg_info_t         *info; size_t n_info;
    reg_kv_t           *csi;  size_t n_csi;
    int64_t             expires_at;
    int64_t             created_at, modified_at;
    bool                has_obs, has_mgmt, local_only;
    int64_t             obs_start, obs_end, mgmt_start, mgmt_end;
    long                timeout_ms, cooldown_ms;
    int64_t             cache_us;        /* management.cacheDuration, 0: none */
    cr_entity_t        *entity;          /* reg_as_entity: a draft in a */
    reg_counters_t     *c;
};

reg_counters_t *reg_counters_new(void);
/* csub.c: stops the ticker and frees the subscriptions (from reg_shutdown). */
void            reg_csub_shutdown(void);
void            reg_counters_unref(reg_counters_t *c);

#endif
