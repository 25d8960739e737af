/*
 * test_cordb_log.c - unit tests of corDB on disk (issue 13): CRC32C, the
 * entity codec (round trip, every truncation refused), the record format
 * (seal, groups, a bad CRC, a short record), and the store on disk through
 * store.h: writes of every kind survive a close and a reopen, objects too; a
 * second broker on the directory is refused; a torn tail is cut; a torn
 * batch group is dropped whole; a corrupt record in the middle stops the
 * start with its file and offset, and --dbRecover truncate cuts there;
 * snapshots with segment roll-over and removal; roll-over at
 * --dbSegmentSize across restarts; every kind of store object from the
 * log and from a snapshot; a corrupt snapshot falls
 * back to the previous one and the longer log; held answers (--dbSync
 * always): writes between store_hold_begin and _end return pending, their
 * hooks run on the log's thread after the fsync, in seq order, and the
 * ticket answers once; without a hold, in RAM and with interval nothing is
 * held; with interval, appends are copied into the segment's mapping (the
 * space ahead: allocated), and a process crash leaves every acknowledged
 * record in the file with a tail of zeros that recovery takes for the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "json/json.h"
#include "ld/ld.h"
#include "model/codec.h"
#include "store/store.h"
#include "store/cordb/log.h"

#define T_V  "http://example.org/Vehicle"
#define A_S  "http://example.org/speed"
#define A_L  "http://example.org/location"

static char dir[256];

static int group_setup(void **state)
{
    char *argv[] = { "test_cordb_log", NULL };

    (void)state;
    if (!cr_config_load(1, argv))
        return -1;
    cr_log_open(NULL, LOG_ERROR);
    if (!ld_init())
        return -1;
    model_init();
    return 0;
}

static void rm_dir(const char *d)
{
    DIR           *dd = opendir(d);
    struct dirent *de;
    char           path[512];

    if (!dd)
        return;
    while ((de = readdir(dd))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", d, de->d_name);
        unlink(path);
    }
    closedir(dd);
    rmdir(d);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/coraine-unit-cordb-%d", (int)getpid());
    rm_dir(dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rm_dir(dir);
    cr_config.db_dir          = NULL;
    cr_config.db_recover      = "stop";
    cr_config.db_segment_size = 64u << 20;
    return 0;
}

static store_t *open_disk(const char *sync, problem_t *p)
{
    cr_config.database          = "corDB";
    cr_config.db_dir            = dir;
    cr_config.db_sync           = sync;
    cr_config.db_sync_interval_ms = 20;
    cr_config.db_snapshot_size  = 0;
    cr_config.db_lock_prefer    = "reads";
    return store_open(p);
}

/* A draft from normalized JSON, expanded with the core context (plus full IRIs). */
static cr_entity_t *draft(arena_t *a, const char *json)
{
    char      err[128];
    problem_t p = { 0 };
    json_t   *j = json_parse_copy(a, json, strlen(json), NULL, err, sizeof(err));

    assert_non_null(j);
    cr_entity_t *e = entity_parse(a, j, ld_core(), EP_CREATE, cr_now_us(), &p);
    if (!e)
        fail_msg("entity_parse: %s", p.detail);
    return e;
}

static const char *BIG =
    "{\"id\":\"urn:v:1\",\"type\":[\"" T_V "\",\"http://example.org/Car\"],"
    "\"scope\":[\"/a/b\",\"/c\"],"
    "\"" A_S "\":[{\"type\":\"Property\",\"value\":12.5,\"unitCode\":\"KMH\","
    "\"observedAt\":\"2024-01-02T03:04:05.678Z\","
    "\"" A_S "acc\":{\"type\":\"Property\",\"value\":{\"a\":[1,2,{\"b\":null,\"c\":true}],\"d\":\"x\"}}},"
    "{\"type\":\"Property\",\"value\":-7,\"datasetId\":\"urn:ds:2\"}],"
    "\"" A_L "\":{\"type\":\"GeoProperty\",\"value\":{\"type\":\"Point\",\"coordinates\":[2.35,48.85]}},"
    "\"http://example.org/owner\":{\"type\":\"Relationship\",\"object\":\"urn:p:1\",\"objectType\":\"http://example.org/P\"},"
    "\"http://example.org/name\":{\"type\":\"LanguageProperty\",\"languageMap\":{\"fr\":\"voiture\",\"en\":\"car\"}},"
    "\"http://example.org/list\":{\"type\":\"ListProperty\",\"valueList\":[1,\"two\",3.25]},"
    "\"http://example.org/j\":{\"type\":\"JsonProperty\",\"json\":{\"k\":[false,0]}}}";

/* --------------------------------------------------------------- CRC */

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(cdb_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(cdb_crc32c(0, "", 0), 0);
    /* incremental = whole */
    assert_int_equal(cdb_crc32c(cdb_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

/* ------------------------------------------------------------- codec */

static void test_codec(void **state)
{
    arena_t     *a = arena_new(4096);
    cr_entity_t *d = draft(a, BIG), *e, *back, *e2;
    sbuf_t       s1, s2, r1, r2;

    (void)state;
    e = entity_freeze(d);
    sb_init(&s1, NULL, 256);
    entity_encode(&s1, e);
    back = entity_decode(a, s1.p, s1.len);
    assert_non_null(back);
    e2 = entity_freeze(back);
    sb_init(&s2, NULL, 256);
    entity_encode(&s2, e2);
    assert_int_equal(s1.len, s2.len);
    assert_memory_equal(s1.p, s2.p, s1.len);
    assert_int_equal(e2->created_at, e->created_at);
    assert_int_equal(e2->n_attrs, e->n_attrs);
    assert_ptr_equal(e2->types[0], e->types[0]);      /* interned again */
    /* the same rendering */
    {
        render_opts_t o = { 0 };
        json_writer_t w;

        sb_init(&r1, NULL, 256);
        sb_init(&r2, NULL, 256);
        o.ctx = ld_core();
        o.sys_attrs = true;
        jw_init(&w, &r1);
        entity_render(&w, e, &o);
        jw_init(&w, &r2);
        entity_render(&w, e2, &o);
        assert_string_equal(r1.p, r2.p);
        sb_release(&r1);
        sb_release(&r2);
    }
    /* every truncation and a trailing byte are refused */
    for (size_t n = 0; n < s1.len; n++)
        assert_null(entity_decode(a, s1.p, n));
    sb_addc(&s1, 0);
    assert_null(entity_decode(a, s1.p, s1.len));
    sb_release(&s1);
    sb_release(&s2);
    entity_unref(e);
    entity_unref(e2);
    arena_free(a);
}

/* ------------------------------------------------------------ records */

static void test_records(void **state)
{
    sbuf_t    sb;
    size_t    at, off = 0, n;
    cdb_rec_t r;
    int       k = 0;

    (void)state;
    sb_init(&sb, NULL, 128);
    for (int i = 0; i < 3; i++) {
        at = cdb_rec_begin(&sb, CDB_REC_DEL, i ? "tenant1" : "");
        cr_put_str(&sb, "urn:x", 5);
        cdb_rec_end(&sb, at);
    }
    n = cdb_rec_seal(sb.p, sb.len, 41);
    assert_int_equal(n, 3);
    while (off < sb.len) {
        assert_int_equal(cdb_rec_parse((uint8_t *)sb.p + off, sb.len - off, &r), CDB_PARSE_OK);
        assert_int_equal(r.seq, 41 + k);
        assert_int_equal(r.kind, CDB_REC_DEL);
        assert_int_equal(r.flags & CDB_REC_MORE, k < 2 ? CDB_REC_MORE : 0);
        assert_int_equal(r.tenant_len, k ? 7 : 0);
        assert_int_equal(r.payload_len, 6);
        off += r.size;
        k++;
    }
    /* short: every cut of the first record */
    assert_int_equal(cdb_rec_parse((uint8_t *)sb.p, sb.len, &r), CDB_PARSE_OK);
    for (size_t c = 0; c < r.size; c++)
        assert_int_equal(cdb_rec_parse((uint8_t *)sb.p, c, &r), CDB_PARSE_SHORT);
    /* a flipped payload byte: bad CRC */
    sb.p[20] ^= 1;
    assert_int_equal(cdb_rec_parse((uint8_t *)sb.p, sb.len, &r), CDB_PARSE_BAD);
    sb.p[20] ^= 1;
    /* a length beyond the limit */
    sb.p[3] = (char)0x7f;
    assert_int_equal(cdb_rec_parse((uint8_t *)sb.p, sb.len, &r), CDB_PARSE_BAD);
    sb_release(&sb);
}

/* --------------------------------------------------------- the store */

static const char *seg1(void)
{
    static char p[512];

    snprintf(p, sizeof(p), "%s/log-00000001.cdb", dir);
    return p;
}

static off_t file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? st.st_size : -1;
}

static void append_bytes(const char *path, const void *b, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, n), (ssize_t)n);
    close(fd);
}

static void flip_byte(const char *path, off_t at)
{
    int           fd = open(path, O_RDWR);
    unsigned char c;

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &c, 1, at), 1);
    c ^= 0x55;
    assert_int_equal(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

static void fill(store_t *s, arena_t *a)
{
    problem_t          p = { 0 };
    store_batch_item_t it[3];
    op_result_t        res = { 0 };

    assert_true(store_create(s, NULL, draft(a, BIG), &p));
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:2\",\"type\":\"" T_V "\"}"), &p));
    assert_true(store_create(s, "t1", draft(a, "{\"id\":\"urn:v:3\",\"type\":\"" T_V "\","
                                                 "\"" A_S "\":{\"type\":\"Property\",\"value\":1}}"), &p));
    assert_true(store_modify(s, "t1", "urn:v:3", OP_UPDATE_ATTRS,
                             draft(a, "{\"id\":\"urn:v:3\",\"type\":\"" T_V "\","
                                      "\"" A_S "\":{\"type\":\"Property\",\"value\":2}}"),
                             &(op_args_t){ 0 }, &res, a, &p));
    assert_true(store_delete(s, NULL, "urn:v:2", &p));
    memset(it, 0, sizeof(it));
    it[0].kind  = STORE_B_CREATE;
    it[0].draft = draft(a, "{\"id\":\"urn:v:4\",\"type\":\"" T_V "\"}");
    it[1].kind  = STORE_B_UPSERT_REPLACE;
    it[1].draft = draft(a, "{\"id\":\"urn:v:5\",\"type\":\"" T_V "\"}");
    it[2].kind  = STORE_B_DELETE;
    it[2].id    = "urn:v:404";
    assert_true(store_batch(s, NULL, it, 3, a, &p));
    assert_true(it[0].ok && it[1].ok && !it[2].ok);
    /* a purge of a tenant: one group per chunk */
    for (int i = 0; i < 5; i++)
        assert_true(store_create(s, "t2", draft(a, arena_printf(a, "{\"id\":\"urn:p:%d\",\"type\":\"" T_V "\"}", i)), &p));
    {
        size_t gone = 0;

        assert_true(store_purge(s, "t2", NULL, &gone, &p));
        assert_int_equal(gone, 5);
    }
    assert_true(store_obj_put(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s:1", "{\"q\":1}", 7, true, &p));
    assert_true(store_obj_put(s, NULL, STORE_OBJ_CONTEXT, "urn:c:1", "[]", 2, true, &p));
    assert_true(store_obj_delete(s, NULL, STORE_OBJ_CONTEXT, "urn:c:1", &p));
}

static void check_filled_n(store_t *s, arena_t *a, uint64_t n_entities)
{
    problem_t    p = { 0 };
    cr_entity_t *e;
    size_t       len;
    store_stats_t st;

    e = store_get(s, NULL, "urn:v:1", &p);
    assert_non_null(e);
    assert_int_equal(e->n_attrs, 7);
    entity_unref(e);
    assert_null(store_get(s, NULL, "urn:v:2", &p));
    e = store_get(s, "t1", "urn:v:3", &p);
    assert_non_null(e);
    assert_int_equal(e->attrs[0].value->i, 2);
    entity_unref(e);
    e = store_get(s, NULL, "urn:v:5", &p);
    assert_non_null(e);
    entity_unref(e);
    assert_string_equal(store_obj_get(s, "t1", STORE_OBJ_SUBSCRIPTION, "urn:s:1", a, &len, &p),
                        "{\"q\":1}");
    assert_null(store_obj_get(s, NULL, STORE_OBJ_CONTEXT, "urn:c:1", a, &len, &p));
    assert_null(store_get(s, "t2", "urn:p:3", &p));
    store_get_stats(s, &st);
    assert_int_equal(st.entities, n_entities);
}

static void check_filled(store_t *s, arena_t *a)
{
    check_filled_n(s, a, 4);
}

static void test_reopen(void **state)
{
    arena_t  *a = arena_new(4096);
    problem_t p = { 0 };
    store_t  *s, *s2;
    const char *modes[] = { "always", "interval", "none" };

    (void)state;
    for (int m = 0; m < 3; m++) {
        rm_dir(dir);
        s = open_disk(modes[m], &p);
        assert_non_null(s);
        /* one broker per directory */
        s2 = open_disk(modes[m], &p);
        assert_null(s2);
        assert_non_null(strstr(p.detail, "in use by another broker"));
        fill(s, a);
        store_close(s);
        s = open_disk(modes[m], &p);
        assert_non_null(s);
        check_filled(s, a);
        store_close(s);
        arena_reset(a);
    }
    arena_free(a);
}

static void test_torn_tail(void **state)
{
    arena_t  *a = arena_new(4096);
    problem_t p = { 0 };
    store_t  *s;
    off_t     good;
    char      junk[40];

    (void)state;
    s = open_disk("always", &p);
    assert_non_null(s);
    fill(s, a);
    store_close(s);
    good = file_size(seg1());

    /* a record cut short */
    memset(junk, 0, sizeof(junk));
    junk[0] = 100;                          /* len 100, then only 36 bytes */
    append_bytes(seg1(), junk, sizeof(junk));
    s = open_disk("always", &p);
    assert_non_null(s);
    check_filled(s, a);
    store_close(s);
    assert_int_equal(file_size(seg1()), good);

    /* zeros (a file extended, never written) */
    memset(junk, 0, sizeof(junk));
    append_bytes(seg1(), junk, sizeof(junk));
    s = open_disk("always", &p);
    assert_non_null(s);
    store_close(s);
    assert_int_equal(file_size(seg1()), good);

    /* a hole of zeros, then written bytes (a machine crash: pages written
     * back out of order): the end of what was synced, cut */
    memset(junk, 0, sizeof(junk));
    memcpy(junk + 16, "\x30\0\0\0later page bytes", 20);
    append_bytes(seg1(), junk, sizeof(junk));
    s = open_disk("always", &p);
    assert_non_null(s);
    check_filled(s, a);
    store_close(s);
    assert_int_equal(file_size(seg1()), good);
    arena_free(a);
}

/* A batch's group whose last record is missing is dropped whole. */
static void test_torn_group(void **state)
{
    arena_t           *a = arena_new(4096);
    problem_t          p = { 0 };
    store_t           *s;
    store_batch_item_t it[3];
    off_t              before, after;
    int                fd;

    (void)state;
    s = open_disk("always", &p);
    assert_non_null(s);
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:0\",\"type\":\"" T_V "\"}"), &p));
    store_close(s);
    before = file_size(seg1());
    s = open_disk("always", &p);
    memset(it, 0, sizeof(it));
    for (int i = 0; i < 3; i++) {
        it[i].kind  = STORE_B_CREATE;
        it[i].draft = draft(a, arena_printf(a, "{\"id\":\"urn:b:%d\",\"type\":\"" T_V "\"}", i));
    }
    assert_true(store_batch(s, NULL, it, 3, a, &p));
    store_close(s);
    after = file_size(seg1());
    /* cut inside the third record */
    fd = open(seg1(), O_WRONLY);
    assert_int_equal(ftruncate(fd, after - 5), 0);
    close(fd);
    s = open_disk("always", &p);
    assert_non_null(s);
    assert_null(store_get(s, NULL, "urn:b:0", &p));
    assert_null(store_get(s, NULL, "urn:b:1", &p));
    cr_entity_t *e = store_get(s, NULL, "urn:v:0", &p);
    assert_non_null(e);
    entity_unref(e);
    store_close(s);
    assert_int_equal(file_size(seg1()), before);
    arena_free(a);
}

static void test_corrupt_middle(void **state)
{
    arena_t  *a = arena_new(4096);
    problem_t p = { 0 };
    store_t  *s;
    cr_entity_t *e;

    (void)state;
    s = open_disk("always", &p);
    assert_non_null(s);
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:0\",\"type\":\"" T_V "\"}"), &p));
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:1\",\"type\":\"" T_V "\"}"), &p));
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:2\",\"type\":\"" T_V "\"}"), &p));
    store_close(s);
    /* a byte of the second record's payload */
    {
        int       fd = open(seg1(), O_RDONLY);
        uint8_t   buf[4096];
        ssize_t   n = read(fd, buf, sizeof(buf));
        cdb_rec_t r;

        close(fd);
        assert_int_equal(cdb_rec_parse(buf + 8, (size_t)n - 8, &r), CDB_PARSE_OK);
        flip_byte(seg1(), 8 + (off_t)r.size + 25);
        s = open_disk("always", &p);
        assert_null(s);
        assert_non_null(strstr(p.detail, "log-00000001.cdb"));
        assert_non_null(strstr(p.detail, arena_printf(a, "offset %zu", 8 + r.size)));
        assert_non_null(strstr(p.detail, "--dbRecover truncate"));
    }
    cr_config.db_recover = "truncate";
    s = open_disk("always", &p);
    assert_non_null(s);
    e = store_get(s, NULL, "urn:v:0", &p);
    assert_non_null(e);
    entity_unref(e);
    assert_null(store_get(s, NULL, "urn:v:2", &p));
    store_close(s);
    cr_config.db_recover = "stop";
    s = open_disk("always", &p);            /* cut for good: starts again */
    assert_non_null(s);
    store_close(s);
    arena_free(a);
}

static size_t count_files(const char *prefix)
{
    DIR           *dd = opendir(dir);
    struct dirent *de;
    size_t         n = 0;

    while ((de = readdir(dd)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    closedir(dd);
    return n;
}

static void test_snapshots(void **state)
{
    arena_t              *a = arena_new(4096);
    problem_t             p = { 0 };
    store_t              *s;
    store_snapshot_info_t si;
    cr_entity_t          *e;
    char                  path[512];

    (void)state;
    s = open_disk("interval", &p);
    assert_non_null(s);
    fill(s, a);
    assert_true(store_snapshot(s, &si, &p));
    assert_int_equal(si.entities, 4);
    assert_int_equal(si.objects, 1);
    assert_int_equal(count_files("log-"), 2);           /* rolled over */
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:6\",\"type\":\"" T_V "\"}"), &p));
    assert_true(store_snapshot(s, &si, &p));
    assert_int_equal(count_files("snap-"), 2);
    assert_true(store_delete(s, NULL, "urn:v:6", &p));
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:7\",\"type\":\"" T_V "\"}"), &p));
    assert_true(store_snapshot(s, &si, &p));
    /* three snapshots: the oldest goes, and the segments only it needed */
    assert_int_equal(count_files("snap-"), 2);
    assert_true(count_files("log-") <= 3);
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:v:8\",\"type\":\"" T_V "\"}"), &p));
    store_close(s);

    s = open_disk("interval", &p);
    assert_non_null(s);
    check_filled_n(s, a, 6);
    e = store_get(s, NULL, "urn:v:8", &p);
    assert_non_null(e);
    entity_unref(e);
    assert_null(store_get(s, NULL, "urn:v:6", &p));
    store_close(s);

    /* the newest snapshot corrupt: the previous one and the longer log */
    snprintf(path, sizeof(path), "%s", si.file);
    flip_byte(path, 30);
    s = open_disk("interval", &p);
    assert_non_null(s);
    check_filled_n(s, a, 6);
    e = store_get(s, NULL, "urn:v:7", &p);
    assert_non_null(e);
    entity_unref(e);
    e = store_get(s, NULL, "urn:v:8", &p);
    assert_non_null(e);
    entity_unref(e);
    store_close(s);
    arena_free(a);
}

static void seg_path_n(char *buf, size_t n, uint32_t seg)
{
    snprintf(buf, n, "%s/log-%08u.cdb", dir, seg);
}

static void create_n(store_t *s, arena_t *a, int from, int to)
{
    problem_t p = { 0 };

    for (int i = from; i < to; i++)
        assert_true(store_create(s, NULL, draft(a, arena_printf(a, "{\"id\":\"urn:r:%d\",\"type\":\""
                                 T_V "\",\"" A_S "\":{\"type\":\"Property\",\"value\":%d}}", i, i)), &p));
}

static void check_n(store_t *s, int from, int to, int gone_from, int gone_to)
{
    problem_t p = { 0 };

    for (int i = from; i < to; i++) {
        char         id[32];
        cr_entity_t *e;

        snprintf(id, sizeof(id), "urn:r:%d", i);
        e = store_get(s, NULL, id, &p);
        if (i >= gone_from && i < gone_to) {
            assert_null(e);
            continue;
        }
        if (!e)
            fail_msg("%s is missing", id);
        assert_int_equal(e->n_attrs, 1);
        assert_int_equal((int)e->attrs[0].value->i, i);
        entity_unref(e);
    }
}

/* --dbSegmentSize: the log rolls over to new segment files by itself; every
 * record comes back from them in order; a corrupt record in an older segment
 * stops the start with that file's name; snapshots remove the segments they
 * cover. */
static void test_segment_roll(void **state)
{
    arena_t  *a = arena_new(4096);
    problem_t p = { 0 };
    store_t  *s;
    char      path[512];
    size_t    nseg;

    (void)state;
    cr_config.db_segment_size = 1024;
    s = open_disk("always", &p);
    assert_non_null(s);
    create_n(s, a, 0, 100);
    for (int i = 0; i < 10; i++)
        assert_true(store_delete(s, NULL, arena_printf(a, "urn:r:%d", 50 + i), &p));
    /* the roll-overs are the snapshot thread's: one pending at a time, so
     * how many segments 11 KiB of log makes depends on its pace */
    for (int k = 0; k < 200 && count_files("log-") < 3; k++)
        usleep(10000);
    store_close(s);
    nseg = count_files("log-");
    assert_true(nseg >= 3);
    /* every segment but the last is past the size (a roll-over only follows
     * an append past it), and each starts with the magic */
    for (uint32_t i = 1; i <= nseg; i++) {
        seg_path_n(path, sizeof(path), i);
        assert_true(file_size(path) >= 8);
        if (i < nseg)
            assert_true(file_size(path) >= 1024);
    }

    s = open_disk("always", &p);
    assert_non_null(s);
    check_n(s, 0, 100, 50, 60);
    create_n(s, a, 100, 140);                   /* appends go on after a restart */
    for (int k = 0; k < 200 && count_files("log-") <= nseg; k++)
        usleep(10000);                          /* (the roll-over is the snapshot thread's) */
    assert_true(count_files("log-") > nseg);
    store_close(s);
    s = open_disk("none", &p);
    assert_non_null(s);
    check_n(s, 0, 140, 50, 60);
    store_close(s);

    /* a corrupt record in an older segment: the start stops, naming it */
    seg_path_n(path, sizeof(path), 2);
    flip_byte(path, 8 + 30);
    s = open_disk("always", &p);
    assert_null(s);
    assert_non_null(strstr(p.detail, "log-00000002.cdb"));
    assert_non_null(strstr(p.detail, "offset 8"));
    flip_byte(path, 8 + 30);                    /* repaired */

    /* snapshots: the segments the older of the two kept covers go */
    s = open_disk("interval", &p);
    assert_non_null(s);
    assert_true(store_snapshot(s, NULL, &p));
    create_n(s, a, 140, 150);
    assert_true(store_snapshot(s, NULL, &p));
    create_n(s, a, 150, 160);
    assert_true(store_snapshot(s, NULL, &p));
    assert_true(file_size(seg1()) < 0);         /* in the older snapshot kept: removed */
    store_close(s);
    s = open_disk("interval", &p);
    assert_non_null(s);
    check_n(s, 0, 160, 50, 60);
    store_close(s);
    arena_free(a);
}

/* Every kind of store object is a record kind: subscriptions,
 * registrations and hosted @contexts (the same id in each kind is three
 * objects) come back from the log and from a snapshot. */
static void test_object_kinds(void **state)
{
    arena_t    *a = arena_new(4096);
    problem_t   p = { 0 };
    store_t    *s;
    size_t      len;
    const int   kinds[] = { STORE_OBJ_SUBSCRIPTION, STORE_OBJ_REGISTRATION, STORE_OBJ_CONTEXT };
    const char *texts[] = { "{\"s\":1}", "{\"r\":2}", "{\"@context\":{}}" };

    (void)state;
    s = open_disk("always", &p);
    assert_non_null(s);
    for (int k = 0; k < 3; k++)
        assert_true(store_obj_put(s, NULL, kinds[k], "urn:x:1", texts[k], strlen(texts[k]), true, &p));
    assert_true(store_obj_put(s, NULL, STORE_OBJ_REGISTRATION, "urn:x:1", "{\"r\":3}", 7, false, &p));
    store_close(s);
    for (int round = 0; round < 2; round++) {
        s = open_disk("always", &p);
        assert_non_null(s);
        for (int k = 0; k < 3; k++) {
            const char *want = k == 1 ? "{\"r\":3}" : texts[k];
            const char *got  = store_obj_get(s, NULL, kinds[k], "urn:x:1", a, &len, &p);

            if (round == 1 && k == 2) {
                assert_null(got);
                continue;
            }
            assert_non_null(got);
            assert_int_equal(len, strlen(want));
            assert_memory_equal(got, want, len);
        }
        if (round == 0) {                   /* then from a snapshot, and a delete after it */
            assert_true(store_snapshot(s, NULL, &p));
            assert_true(store_obj_delete(s, NULL, STORE_OBJ_CONTEXT, "urn:x:1", &p));
        }
        store_close(s);
    }
    arena_free(a);
}

/* --dbSnapshotSize: the log's thread takes a snapshot by itself. */
static void test_snapshot_size(void **state)
{
    arena_t  *a = arena_new(4096);
    problem_t p = { 0 };
    store_t  *s;

    (void)state;
    s = open_disk("none", &p);
    assert_non_null(s);
    store_close(s);
    cr_config.db_snapshot_size = 4096;
    s = store_open(&p);
    cr_config.db_snapshot_size = 0;
    assert_non_null(s);
    for (int i = 0; i < 100; i++)
        assert_true(store_create(s, NULL, draft(a, arena_printf(a, "{\"id\":\"urn:z:%d\",\"type\":\"" T_V "\","
                                                      "\"" A_S "\":{\"type\":\"Property\",\"value\":%d}}", i, i)), &p));
    for (int k = 0; k < 200 && !count_files("snap-"); k++)
        usleep(10000);
    assert_true(count_files("snap-") >= 1);
    store_close(s);
    s = open_disk("none", &p);
    assert_non_null(s);
    cr_entity_t *e = store_get(s, NULL, "urn:z:99", &p);
    assert_non_null(e);
    entity_unref(e);
    store_close(s);
    arena_free(a);
}

/* ---------------------------------------------------------- held answers */

static struct {
    pthread_t        writer;            /* the test's thread */
    _Atomic int      on_writer, elsewhere;
    _Atomic uint64_t last_seq;
    _Atomic int      out_of_order;
} hk;

static void held_hook(void *ud, const store_change_t *g, size_t n)
{
    (void)ud;
    for (size_t i = 0; i < n; i++) {
        if (g[i].seq != atomic_load(&hk.last_seq) + 1)
            atomic_fetch_add(&hk.out_of_order, 1);
        atomic_store(&hk.last_seq, g[i].seq);
    }
    if (pthread_equal(pthread_self(), hk.writer))
        atomic_fetch_add(&hk.on_writer, 1);
    else
        atomic_fetch_add(&hk.elsewhere, 1);
}

static struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             calls;
    bool            ok;
} tk = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false };

static void ticket_cb(void *ud, bool ok, const problem_t *p)
{
    (void)ud;
    (void)p;
    pthread_mutex_lock(&tk.mu);
    tk.calls++;
    tk.ok = ok;
    pthread_cond_broadcast(&tk.cv);
    pthread_mutex_unlock(&tk.mu);
}

static void test_held(void **state)
{
    arena_t           *a = arena_new(4096);
    problem_t          p = { 0 };
    store_t           *s;
    store_ticket_t    *t;
    store_batch_item_t items[2];
    const char        *modes[] = { "interval", NULL };

    (void)state;
    hk.writer = pthread_self();
    /* interval and RAM: nothing is held, the hooks run on the writer */
    for (int m = 0; m < 2; m++) {
        rm_dir(dir);
        if (modes[m])
            s = open_disk(modes[m], &p);
        else {
            cr_config.db_dir = NULL;
            s = store_open(&p);
        }
        assert_non_null(s);
        store_add_hook(s, held_hook, NULL);
        atomic_store(&hk.on_writer, 0);
        atomic_store(&hk.last_seq, 0);
        store_hold_begin(s);
        assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:h:1\",\"type\":\"" T_V "\"}"), &p));
        assert_false(store_hold_pending());
        assert_null(store_hold_end());
        assert_int_equal(atomic_load(&hk.on_writer), 1);
        store_close(s);
    }

    rm_dir(dir);
    s = open_disk("always", &p);
    assert_non_null(s);
    store_add_hook(s, held_hook, NULL);
    atomic_store(&hk.on_writer, 0);
    atomic_store(&hk.elsewhere, 0);
    atomic_store(&hk.last_seq, 0);
    atomic_store(&hk.out_of_order, 0);

    /* not held: durable on return, hooks on the writer */
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:h:1\",\"type\":\"" T_V "\"}"), &p));
    assert_int_equal(atomic_load(&hk.on_writer), 1);

    /* a hold without writes: no ticket */
    store_hold_begin(s);
    entity_unref(store_get(s, NULL, "urn:h:1", &p));
    assert_null(store_hold_end());

    /* a hold with a create, a PATCH, a failed PATCH, a batch and a delete */
    store_hold_begin(s);
    assert_true(store_create(s, NULL, draft(a, "{\"id\":\"urn:h:2\",\"type\":\"" T_V "\"}"), &p));
    assert_true(store_hold_pending());
    assert_true(store_modify(s, NULL, "urn:h:1", OP_APPEND_ATTRS,
                             draft(a, "{\"id\":\"urn:h:1\",\"type\":\"" T_V "\",\"" A_S "\":"
                                      "{\"type\":\"Property\",\"value\":3}}"),
                             &(op_args_t){ 0 }, NULL, a, &p));
    assert_false(store_modify(s, NULL, "urn:nope", OP_APPEND_ATTRS,
                              draft(a, "{\"id\":\"urn:nope\",\"type\":\"" T_V "\"}"),
                              &(op_args_t){ 0 }, NULL, a, &p));
    memset(items, 0, sizeof(items));
    items[0].kind  = STORE_B_CREATE;
    items[0].draft = draft(a, "{\"id\":\"urn:h:3\",\"type\":\"" T_V "\"}");
    items[1].kind  = STORE_B_CREATE;
    items[1].draft = draft(a, "{\"id\":\"urn:h:4\",\"type\":\"" T_V "\"}");
    assert_true(store_batch(s, NULL, items, 2, a, &p));
    assert_true(items[0].ok && items[1].ok);
    assert_true(store_delete(s, NULL, "urn:h:2", &p));
    /* visible at once, before the fsync */
    cr_entity_t *e = store_get(s, NULL, "urn:h:3", &p);
    assert_non_null(e);
    entity_unref(e);
    t = store_hold_end();
    assert_non_null(t);
    store_ticket_wait(t, ticket_cb, NULL);
    pthread_mutex_lock(&tk.mu);
    while (!tk.calls)
        pthread_cond_wait(&tk.cv, &tk.mu);
    assert_int_equal(tk.calls, 1);
    assert_true(tk.ok);
    pthread_mutex_unlock(&tk.mu);
    /* the pending groups' hooks ran on the log's thread, in seq order
     * (create 2, PATCH 3, batch 4-5, delete 6) */
    assert_int_equal(atomic_load(&hk.on_writer), 1);
    assert_int_equal(atomic_load(&hk.elsewhere), 4);
    assert_int_equal(atomic_load(&hk.last_seq), 6);
    assert_int_equal(atomic_load(&hk.out_of_order), 0);
    store_stats_t st;
    store_get_stats(s, &st);
    assert_int_equal(st.log_held, 4);
    assert_int_equal(st.creates, 4);
    assert_int_equal(st.updates, 1);
    assert_int_equal(st.deletes, 1);
    store_close(s);

    /* all of it on disk */
    s = open_disk("always", &p);
    assert_non_null(s);
    assert_null(store_get(s, NULL, "urn:h:2", &p));
    for (int i = 1; i <= 4; i++) {
        char id[16];

        if (i == 2)
            continue;
        snprintf(id, sizeof(id), "urn:h:%d", i);
        e = store_get(s, NULL, id, &p);
        assert_non_null(e);
        entity_unref(e);
    }
    store_close(s);
    arena_free(a);
}

/* Stored objects in a hold (--dbSync always): pending like entity writes,
 * answered by the ticket after the log's thread synced them, durable; with
 * interval nothing is held. */
static void test_held_objects(void **state)
{
    arena_t        *a = arena_new(4096);
    problem_t       p = { 0 };
    store_t        *s;
    store_ticket_t *t;
    store_stats_t   st;
    size_t          len;
    char           *j;

    (void)state;
    rm_dir(dir);
    s = open_disk("interval", &p);
    assert_non_null(s);
    store_hold_begin(s);
    assert_true(store_obj_put(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:1", "{}", 2, true, &p));
    assert_null(store_hold_end());
    store_close(s);

    rm_dir(dir);
    s = open_disk("always", &p);
    assert_non_null(s);
    assert_true(store_obj_put(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:gone", "{}", 2, true, &p));
    tk.calls = 0;
    store_hold_begin(s);
    assert_true(store_obj_put(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:1", "{\"v\":1}", 7, true, &p));
    assert_true(store_obj_put(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:1", "{\"v\":2}", 7, false, &p));
    assert_false(store_obj_put(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:1", "{}", 2, true, &p));
    assert_true(store_obj_delete(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:gone", &p));
    assert_false(store_obj_delete(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:none", &p));
    j = store_obj_get(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:1", a, &len, &p);   /* visible before the sync */
    assert_non_null(j);
    assert_string_equal(j, "{\"v\":2}");
    t = store_hold_end();
    assert_non_null(t);
    store_ticket_wait(t, ticket_cb, NULL);
    pthread_mutex_lock(&tk.mu);
    while (!tk.calls)
        pthread_cond_wait(&tk.cv, &tk.mu);
    assert_int_equal(tk.calls, 1);
    assert_true(tk.ok);
    pthread_mutex_unlock(&tk.mu);
    store_get_stats(s, &st);
    assert_int_equal(st.log_held, 3);
    store_close(s);

    s = open_disk("always", &p);
    assert_non_null(s);
    j = store_obj_get(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:1", a, &len, &p);
    assert_non_null(j);
    assert_string_equal(j, "{\"v\":2}");
    assert_null(store_obj_get(s, "", STORE_OBJ_SUBSCRIPTION, "urn:s:gone", a, &len, &p));
    store_close(s);
    arena_free(a);
}

static void test_ram_no_snapshot(void **state)
{
    problem_t p = { 0 };
    store_t  *s;

    (void)state;
    cr_config.db_dir = NULL;
    s = store_open(&p);
    assert_non_null(s);
    assert_false(store_snapshot(s, NULL, &p));
    assert_int_equal(p.kind, PB_OPERATION_NOT_SUPPORTED);
    store_close(s);
}

static void no_snapshot(void *ud)
{
    (void)ud;
}

/* The child of test_mapped_crash: n appends to a log with interval, then
 * _exit without a close (a process crash). 0: every append was answered,
 * and the later ones were copied into the mapping. */
static int mapped_child(int n)
{
    problem_t       p = { 0 };
    cdb_log_t      *l = cdb_log_open(dir, CDB_SYNC_INTERVAL, 20, 0, 0, &p);
    cdb_log_stats_t st;

    if (!l || !cdb_log_start(l, 1, no_snapshot, NULL, &p))
        return 2;
    for (int i = 0; i < n; i++) {
        sbuf_t    *sb = cdb_log_buf();
        cdb_logw_t w  = { 0 };
        char       id[32];
        size_t     at = cdb_rec_begin(sb, CDB_REC_DEL, NULL);
        int        k  = snprintf(id, sizeof(id), "urn:m:%d", i);

        cr_put_str(sb, id, (size_t)k);
        cdb_rec_end(sb, at);
        if (!cdb_log_append(l, sb, &w, &p))
            return 3;
        if (i == 10)
            usleep(200 * 1000);            /* the space ahead is made meanwhile */
    }
    cdb_log_get_stats(l, &st);
    return st.mapped > (uint64_t)n / 2 ? 0 : 4;
}

static void test_mapped_crash(void **state)
{
    const int n = 3000;
    problem_t p = { 0 };
    pid_t     pid;
    int       status, fd, count = 0;
    struct stat st;
    uint8_t  *buf;
    size_t    off = CDB_MAGIC_LEN;
    store_t  *s;

    (void)state;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(mapped_child(n));
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* every record there, then zeros to the end of the file */
    fd = open(seg1(), O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &st), 0);
    buf = malloc((size_t)st.st_size);
    assert_non_null(buf);
    assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    for (;;) {
        cdb_rec_t r;

        if (cdb_rec_parse(buf + off, (size_t)st.st_size - off, &r) != CDB_PARSE_OK)
            break;
        assert_int_equal(r.seq, (uint64_t)count + 1);
        count++;
        off += r.size;
    }
    assert_int_equal(count, n);
    assert_true((size_t)st.st_size > off);          /* the space ahead */
    for (size_t i = off; i < (size_t)st.st_size; i++)
        assert_int_equal(buf[i], 0);
    free(buf);

    /* recovery takes the zeros for the end and cuts them */
    s = open_disk("interval", &p);
    assert_non_null(s);
    store_close(s);
    assert_int_equal(file_size(seg1()), (off_t)off);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_records),
        cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_middle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_snapshot_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_segment_roll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_object_kinds, setup, teardown),
        cmocka_unit_test(test_ram_no_snapshot),
        cmocka_unit_test_setup_teardown(test_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mapped_crash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_held_objects, setup, teardown),
    };

    return cmocka_run_group_tests(tests, group_setup, NULL);
}
