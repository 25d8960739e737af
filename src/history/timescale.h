/*
 * timescale.h - history in PostgreSQL (--history timescale), the backend's
 * own parts, shared by its two files: timescale.c (the connection, the
 * schema, the bounded queue and the writer thread, the backend table) and
 * timescale_read.c (the temporal query, aggregation in SQL, deletes and
 * instance modification). The rest of the broker sees it only through
 * history.h's history_backend_t (history_timescale).
 *
 * The schema: one set of tables for every tenant, with a tenant column (why:
 * doc/history.md "PostgreSQL"). Times are bigint µs since the epoch (the
 * broker's own unit: exact round trips, no time-zone parsing on ingest),
 * NULL when absent.
 *   coraine_instances  one row per attribute instance: tenant, entity_id,
 *                      attr (expanded name), dataset_id ('' = default),
 *                      iid (bigint identity: the instanceId), kind
 *                      (attr_kind_t), value (json, verbatim; NULL for a
 *                      deletion), num (the value as a number, booleans 0/1,
 *                      for the aggregations), unit_code, object_type,
 *                      observed_at, created_at, modified_at, deleted_at, sub
 *                      (the sub-attributes in model/codec.h's encoding, NULL
 *                      when none). A hypertable on modified_at when the
 *                      timescaledb extension is installed, else a plain table
 *                      with a BRIN index on modified_at; btree indexes on
 *                      (tenant, entity_id, attr, dataset_id,
 *                      coalesce(observed_at, created_at), iid) (the series index:
 *                      a query by another timeproperty reads the series
 *                      through its prefix) and on iid.
 *   coraine_entities   one row per entity with a history: tenant, entity_id,
 *                      types (expanded), created_at, modified_at (of the last
 *                      write that created it, changed its types or deleted
 *                      it: PATCHes of values add no entity row), deleted_at,
 *                      seq (creation order).
 */
#ifndef CORAINE_HISTORY_TIMESCALE_H
#define CORAINE_HISTORY_TIMESCALE_H

#include <libpq-fe.h>

#include "history.h"

typedef struct hts hts_t;

/* Read-your-writes: returns once every write queued before the call is
 * committed in PostgreSQL, or false (503) after --historyQueueTimeout. */
bool    hts_flush(hts_t *h, problem_t *p);

/* A connection for a read or a temporal delete, from a small pool; NULL with
 * p (503) when none can be made. hts_conn_put gives it back (bad: it failed
 * in a way that may leave it unusable, it is closed). */
PGconn *hts_conn_get(hts_t *h, problem_t *p);
void    hts_conn_put(hts_t *h, PGconn *c, bool bad);

/* The store, to read an entity's current version (q, geo, scope). */
store_t *hts_store(hts_t *h);

/* Execs sql (no parameters); false with p (503: the server's message). */
bool    hts_exec(PGconn *c, const char *sql, problem_t *p);
/* PQexecParams with text parameters; the result, or NULL with p (503) and
 * the result freed. want: PGRES_TUPLES_OK or PGRES_COMMAND_OK. */
PGresult *hts_query(PGconn *c, const char *sql, int n, const char *const *params,
                    ExecStatusType want, problem_t *p);

/* timescale_read.c: the history_backend_t functions it implements. */
bool hts_be_query(void *be, const char *tenant, const hist_query_t *q, arena_t *a,
                  hist_result_t *out, problem_t *p);
bool hts_be_aggregate(void *be, const char *tenant, const hist_query_t *q, unsigned methods,
                      int64_t period, arena_t *a, hist_result_t *out, problem_t *p);
bool hts_be_entity_info(void *be, const char *tenant, const char *id, arena_t *a,
                        const char *const **types, size_t *n_types);
bool hts_be_delete_entity(void *be, const char *tenant, const char *id, problem_t *p);
bool hts_be_delete_attr(void *be, const char *tenant, const char *id, const char *name,
                        const char *dataset_id, bool delete_all, problem_t *p);
bool hts_be_delete_instance(void *be, const char *tenant, const char *id, const char *name,
                            uint64_t instance_id, problem_t *p);
bool hts_be_modify_instance(void *be, const char *tenant, const char *id, const char *name,
                            uint64_t instance_id, const cr_attr_t *with, int64_t now,
                            problem_t *p);

/* Rows in COPY text format and the values of a row (shared by the writer
 * and modify_instance). */
void hts_put_value(sbuf_t *sb, sbuf_t *tmp, const cr_attr_t *at);   /* value json text, or nothing */
bool hts_num_of(const cr_attr_t *at, double *v);                     /* the num column */
/* \x... of the sub-attributes (copy: escaped for COPY text) */
void hts_put_sub_hex(sbuf_t *sb, sbuf_t *tmp, const cr_attr_t *at, bool copy);

#endif
