/*
 * filter.c - the entity filter (entity_filter_t of model.h) and the PCRE2
 * glue it shares with the q language.
 *
 * A filter combines everything that selects entities in a query: exact ids,
 * an idPattern, a type selection (4.17), a q expression (4.9), a geo-query
 * (4.10), a scopeQ (4.19) and an attribute list. filter_match() checks them
 * from the cheapest to the most expensive, so that most entities are
 * rejected by a pointer comparison before any regex or geometry runs.
 *
 * Regexes: a pattern is compiled once per request (or per subscription),
 * JIT-compiled when the platform allows, and freed with the arena that owns
 * it (arena_on_free). Matching needs a pcre2_match_data, which PCRE2 makes
 * with malloc and which cannot be shared by two threads matching at once.
 * Creating one per call would put a malloc on the hot path, and one per
 * compiled pattern would need a lock, because the same compiled q is
 * evaluated by concurrent readers (store queries, notification matching).
 * So every thread that matches gets ONE match data of its own, created on
 * its first match and freed by a pthread key destructor when the thread
 * exits. It is scratch space only (one ovector pair, overwritten by each
 * match), never request state. The compiled code and the match context
 * (the match limit) are read-only once made and are shared freely.
 *
 * Limits: a match that reaches the match or depth limit is neither a match
 * nor a non-match. It answers false and raises a thread-local flag (with the
 * pattern's name and the entity's id): the scan runs on one thread, so the
 * store clears the flag before it and reads it once after it
 * (filter_regex_overflow), and the query fails with BadRequestData instead
 * of silently leaving entities out. The common path pays nothing: the flag
 * is only written on that error.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model.h"

#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Backtracking budget per match: a hostile pattern such as (a+)+$ stops
 * here (and does not match) instead of holding a reader for seconds. */
#define FILTER_MATCH_LIMIT  1000000u
#define FILTER_DEPTH_LIMIT  10000u

static pthread_once_t        re_once = PTHREAD_ONCE_INIT;
static pthread_key_t         re_md_key;
static bool                  re_md_key_ok;
static pcre2_match_context  *re_mctx;      /* shared, read-only after re_init */

static void re_md_free(void *md)
{
    pcre2_match_data_free(md);
}

static void re_init(void)
{
    re_md_key_ok = pthread_key_create(&re_md_key, re_md_free) == 0;
    if (!re_md_key_ok)
        LOG_E("filter: pthread_key_create failed; regex matching disabled");

    re_mctx = pcre2_match_context_create(NULL);
    if (re_mctx) {
        pcre2_set_match_limit(re_mctx, FILTER_MATCH_LIMIT);
        pcre2_set_depth_limit(re_mctx, FILTER_DEPTH_LIMIT);
    }
}

/* This thread's match data, created on first use; NULL on OOM. */
static pcre2_match_data *re_match_data(void)
{
    pcre2_match_data *md;

    pthread_once(&re_once, re_init);
    if (CR_UNLIKELY(!re_md_key_ok))
        return NULL;

    md = pthread_getspecific(re_md_key);
    if (CR_LIKELY(md != NULL))
        return md;

    /* One pair is enough: we only ask "does it match". */
    md = pcre2_match_data_create(1, NULL);
    if (!md) {
        LOG_E("filter: out of memory for regex match data");
        return NULL;
    }
    if (pthread_setspecific(re_md_key, md) != 0) {
        pcre2_match_data_free(md);
        LOG_E("filter: pthread_setspecific failed");
        return NULL;
    }
    return md;
}

/* A compiled pattern and the name it is known by in error details. */
typedef struct re_code {
    pcre2_code *code;
    const char *what;           /* "idPattern", "q" (static strings) */
    const char *src;            /* the pattern's text (arena copy): for a backend that translates it */
    size_t      src_len;
} re_code_t;

/* This thread's overflow: the first pattern that reached a limit since the
 * last filter_regex_reset(), and the subject it was matched against. */
static _Thread_local const re_code_t *re_over;
static _Thread_local char             re_over_subject[128];

static void re_code_free(void *rc)
{
    pcre2_code_free(((re_code_t *)rc)->code);
}

void *filter_regex_compile(arena_t *a, const char *pattern, size_t len, const char *what,
                           problem_t *p)
{
    pcre2_code *code;
    re_code_t  *rc;
    int         err;
    PCRE2_SIZE  off;
    PCRE2_UCHAR msg[160];

    pthread_once(&re_once, re_init);

    code = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err, &off,
                         NULL);
    if (!code) {
        if (pcre2_get_error_message(err, msg, sizeof(msg)) < 0)
            strcpy((char *)msg, "invalid regular expression");
        problem_set(p, PB_BAD_REQUEST_DATA, "%s: invalid regular expression at offset %zu: %s",
                    what ? what : "pattern", (size_t)off, (const char *)msg);
        return NULL;
    }

    /* JIT is an optimisation: when it is unavailable the interpreter runs. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);

    rc = arena_alloc(a, sizeof(*rc));
    rc->code = code;
    rc->what = what ? what : "pattern";
    rc->src_len = len;
    rc->src = arena_alloc(a, len + 1);
    memcpy((char *)rc->src, pattern, len);
    ((char *)rc->src)[len] = '\0';
    arena_on_free(a, re_code_free, rc);
    return rc;
}

const char *filter_regex_source(const void *code, size_t *len)
{
    const re_code_t *rc = code;

    if (len)
        *len = rc ? rc->src_len : 0;
    return rc ? rc->src : NULL;
}

bool filter_regex_match(const void *code, const char *s, size_t len)
{
    pcre2_match_data *md;
    int               rc;

    if (!code || !s)
        return false;
    md = re_match_data();
    if (!md)
        return false;

    rc = pcre2_match(((const re_code_t *)code)->code, (PCRE2_SPTR)s, len, 0, 0, md, re_mctx);
    /* rc == 0: matched, but the ovector was too small to hold the groups. */
    if (CR_LIKELY(rc >= 0 || rc == PCRE2_ERROR_NOMATCH))
        return rc >= 0;
    if ((rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
         rc == PCRE2_ERROR_HEAPLIMIT) && !re_over) {
        re_over = code;
        size_t n = len > 100 ? 100 : len;

        while (n < len && n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;                /* cut on a UTF-8 boundary */
        snprintf(re_over_subject, sizeof(re_over_subject), "%.*s", (int)n, s);
    }
    return false;
}

void filter_regex_reset(void)
{
    re_over = NULL;
}

bool filter_regex_overflow(problem_t *p)
{
    if (CR_LIKELY(!re_over))
        return false;
    problem_set(p, PB_BAD_REQUEST_DATA,
                "%s: the regular expression needs more than the match limit (%u steps) on the "
                "value '%s': simplify it (nested quantifiers such as (a+)+ backtrack exponentially)",
                re_over->what, FILTER_MATCH_LIMIT, re_over_subject);
    re_over = NULL;
    return true;
}

void *filter_compile_pattern(arena_t *a, const char *pattern, problem_t *p)
{
    if (!pattern) {
        problem_set(p, PB_BAD_REQUEST_DATA, "idPattern: missing pattern");
        return NULL;
    }
    return filter_regex_compile(a, pattern, strlen(pattern), "idPattern", p);
}

/* ------------------------------------------------------------- matching */

static bool filter_has_any_attr(const cr_entity_t *e, const char *const *names, size_t n)
{
    /* Names are interned: pointer comparisons. An entity has tens of
     * attributes and a request names a few, so the double loop is cheaper
     * than building any index. */
    for (size_t i = 0; i < e->n_attrs; i++)
        for (size_t j = 0; j < n; j++)
            if (e->attrs[i].name == names[j])
                return true;
    return false;
}

static bool filter_selector_match(const entity_selector_t *sl, const cr_entity_t *e)
{
    if (sl->id && sl->id != e->id && strcmp(sl->id, e->id) != 0)
        return false;
    if (sl->types && !typesel_match(sl->types, e))
        return false;
    if (sl->id_pattern && !filter_regex_match(sl->id_pattern, e->id, strlen(e->id)))
        return false;
    return true;
}

bool filter_match(const entity_filter_t *f, const cr_entity_t *e)
{
    if (!f)
        return true;
    if (!e)
        return false;

    if (f->n_ids) {
        size_t i;
        for (i = 0; i < f->n_ids; i++)
            if (f->ids[i] == e->id || strcmp(f->ids[i], e->id) == 0)
                break;
        if (i == f->n_ids)
            return false;
    }

    if (f->types && !typesel_match(f->types, e))
        return false;

    if (f->n_sel) {
        size_t i;
        for (i = 0; i < f->n_sel; i++)
            if (filter_selector_match(&f->sel[i], e))
                break;
        if (i == f->n_sel)
            return false;
    }

    if (f->n_attrs && !filter_has_any_attr(e, f->attrs, f->n_attrs))
        return false;

    if (f->scope && !scopeq_match(f->scope, e))
        return false;

    if (f->id_pattern && !filter_regex_match(f->id_pattern, e->id, strlen(e->id)))
        return false;

    if (f->q && !q_match(f->q, e))
        return false;

    if (f->geo && !geoq_match(f->geo, e))
        return false;

    return true;
}
