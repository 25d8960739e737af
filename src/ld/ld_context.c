/*
 * ld_context.c - JSON-LD context processing as NGSI-LD needs it, and the
 * frozen tables that expansion and compaction look up.
 *
 * Building (once per distinct context): a builder collects term definitions
 * from a sequence of contexts - URL strings (fetched, recursively), objects
 * and arrays - with later definitions overriding earlier ones. Term values
 * are strings or objects with @id/@reverse/@type; compact IRIs expand with
 * prefixes defined locally, earlier, or in the core; a relative value is
 * resolved against @vocab. The core is protected: a user term that names a
 * core term is ignored, so the core behaves as the last entry of the array.
 * Scoped contexts are refused in user contexts (5.5.7); @container and the
 * like are accepted and ignored.
 *
 * Lookup (every request): core table, then the user table; both are open
 * addressing on the string hash, no allocation except interning the result
 * of an unknown term - and not even that on read paths (ld_expand_lookup).
 */
#include "ld_int.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEFINE_DEPTH 64

/* ---------------------------------------------------------------- helpers */

/* intern(a + b) without a heap allocation for ordinary sizes. */
static const char *intern_concat(const char *a, size_t al, const char *b, size_t bl)
{
    char stack[512];
    size_t n = al + bl;
    char *buf = n <= sizeof stack ? stack : cr_xmalloc(n);
    memcpy(buf, a, al);
    memcpy(buf + al, b, bl);
    const char *r = intern(buf, n);
    if (buf != stack)
        free(buf);
    return r;
}

/* Strings of a context being built: the core's are interned (it lives as
 * long as the process and its names are everyone's); a user context's live
 * in the builder's scratch arena and are copied into the context's own arena
 * when it is frozen, so that an evicted context takes its strings with it
 * and no sequence of contexts grows the intern table. */
static const char *bstr(const ld_builder_t *b, const char *s, size_t n)
{
    return b->core ? arena_strndup(b->tmp, s, n) : intern(s, n);
}

static const char *bconcat(const ld_builder_t *b, const char *x, size_t xl, const char *y, size_t yl)
{
    if (!b->core)
        return intern_concat(x, xl, y, yl);
    char *r = arena_alloc(b->tmp, xl + yl + 1);
    memcpy(r, x, xl);
    memcpy(r + xl, y, yl);
    r[xl + yl] = '\0';
    return r;
}

/* A name that can stand for itself after the @vocab (4.6.2 names: a letter,
 * then letters, digits or '_'; bytes of non-ASCII characters are taken as
 * letters). Anything else compacts to the full IRI, so that what we render
 * is always a name we accept back. */
static bool plain_name(const char *s, size_t len)
{
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        bool letter = ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') || ch >= 0x80;
        if (!(letter || (i > 0 && ((ch >= '0' && ch <= '9') || ch == '_'))))
            return false;
    }
    return true;
}

/* RFC 3987 forbids the first set in an IRI (an invalid IRI mapping, JSON-LD
 * 1.1, 4.2.2); the second, ' ( ) ; = , are the syntax of the NGSI-LD query
 * languages (4.9, 4.17), so a name holding them could never be queried and
 * entity_parse refuses it: a context that would produce one is refused here,
 * with a clear message, rather than at every entity that uses it. */
static bool iri_chars_ok(const char *s)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if (*c <= 0x20 || *c == 0x7f || strchr("<>\"{}|\\^`'();=", *c))
            return false;
    return true;
}

/* RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
static bool is_scheme(const char *s, size_t len)
{
    if (!len || !((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z'))
        return false;
    for (size_t i = 1; i < len; i++) {
        char ch = s[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '+' || ch == '-' || ch == '.';
        if (!ok)
            return false;
    }
    return true;
}

bool ld_is_core_url(const char *url, size_t len)
{
    static const char *const versions[] = {
        "", "-v1.0", "-v1.1", "-v1.2", "-v1.3", "-v1.4", "-v1.5", "-v1.6", "-v1.7", "-v1.8", "-v1.9",
    };
    static const char base[] = "://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context";
    static const char ext[] = ".jsonld";
    size_t skip;
    if (len > 5 && strncasecmp(url, "https", 5) == 0)
        skip = 5;
    else if (len > 4 && strncasecmp(url, "http", 4) == 0)
        skip = 4;
    else
        return false;
    url += skip;
    len -= skip;
    size_t bl = sizeof base - 1, el = sizeof ext - 1;
    if (len < bl + el || memcmp(url, base, bl) != 0 || memcmp(url + len - el, ext, el) != 0)
        return false;
    const char *v = url + bl;
    size_t vl = len - bl - el;
    for (size_t i = 0; i < CR_ARRAY_LEN(versions); i++)
        if (strlen(versions[i]) == vl && memcmp(versions[i], v, vl) == 0)
            return true;
    return false;
}

bool ld_is_fetchable_url(const char *s, size_t len)
{
    size_t skip;
    if (len > 8 && strncasecmp(s, "https://", 8) == 0)
        skip = 8;
    else if (len > 7 && strncasecmp(s, "http://", 7) == 0)
        skip = 7;
    else
        return false;
    if (len > LD_MAX_URL_LEN || s[skip] == '/' || s[skip] == '?' || s[skip] == '#')
        return false;                               /* no host */
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 0x20 || ch == 0x7f || ch == '<' || ch == '>' || ch == '"' || ch == '\\')
            return false;
    }
    return true;
}

/* ----------------------------------------------------- frozen-table lookup */

static const ld_def_t *find_term(const ld_context_t *c, const char *t, size_t len, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint32_t k = c->by_term[i];
        if (!k)
            return NULL;
        const ld_def_t *d = &c->defs[k - 1];
        if (d->term_hash == h && d->term_len == len && memcmp(d->term, t, len) == 0)
            return d;
    }
}

/* A term an NGSI-LD request may carry as a name (4.6.2): a plain name, or
 * one with a URI scheme before its ':' (a compact or absolute IRI). Others
 * - the core context's own "ngsi-ld", a user's "my-term" - expand fine but
 * no entity could be written back with them, so a rendering must not
 * produce them (ld_compact shows their IRI instead). Decided once per
 * definition, when its context is frozen. */
static bool term_names(const char *t, size_t len)
{
    const char *colon = memchr(t, ':', len);
    if (!colon)
        return plain_name(t, len);
    return is_scheme(t, (size_t)(colon - t)) && iri_chars_ok(t);
}

static const ld_def_t *find_iri(const ld_context_t *c, const char *iri, size_t len, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint32_t k = c->by_iri[i];
        if (!k)
            return NULL;
        const ld_def_t *d = &c->defs[k - 1];
        if (d->iri_hash == h && d->iri_len == len && (d->iri == iri || memcmp(d->iri, iri, len) == 0))
            return d;
    }
}

/* A term of c (core first: it is protected), or NULL. */
static const ld_def_t *lookup_term(const ld_context_t *core, const ld_context_t *c,
                                   const char *t, size_t len, uint64_t h)
{
    const ld_def_t *d = core ? find_term(core, t, len, h) : NULL;
    if (!d && c && c != core)
        d = find_term(c, t, len, h);
    return d;
}

static const char *vocab_of(const ld_context_t *core, const ld_context_t *c, size_t *len)
{
    const ld_context_t *v = c && c->vocab ? c : core;
    *len = v ? v->vocab_len : 0;
    return v ? v->vocab : NULL;
}

/* The name s[0..n): interned (a == NULL), or - lookup only - the interned
 * string when it exists, else a copy in a that no interned name equals. */
static const char *name_of(const char *s, size_t n, arena_t *a)
{
    if (!a)
        return intern(s, n);
    const char *in = intern_find(s, n);
    return in ? in : arena_strndup(a, s, n);
}

static const char *name_concat(const char *x, size_t xl, const char *y, size_t yl, arena_t *a)
{
    if (!a)
        return intern_concat(x, xl, y, yl);
    char stack[512];
    size_t n = xl + yl;
    char *buf = n <= sizeof stack ? stack : arena_alloc(a, n);
    memcpy(buf, x, xl);
    memcpy(buf + xl, y, yl);
    return name_of(buf, n, a);
}

/* The IRI of a term definition as a name: the core's are interned; a user
 * context's IRI is interned on its first use by a write (and remembered in
 * the definition); a read takes the interned one when the name exists, else
 * the context's own copy (valid while the request pins the context), which
 * equals no interned name. */
static const char *def_iri(const ld_def_t *dc, arena_t *a)
{
    ld_def_t *d = (ld_def_t *)dc;
    const char *in = __atomic_load_n(&d->iri_interned, __ATOMIC_ACQUIRE);
    if (in)
        return in;
    in = a ? intern_find(d->iri, d->iri_len) : intern(d->iri, d->iri_len);
    if (!in)
        return d->iri;
    __atomic_store_n(&d->iri_interned, in, __ATOMIC_RELEASE);
    return in;
}

static const char *expand(const ld_context_t *c, const char *term, size_t len, arena_t *a)
{
    const ld_context_t *core = ld_core();
    if (!c)
        c = core;
    if (!term)
        return NULL;
    if (len == 0 || term[0] == '@')
        return name_of(term, len, a);

    uint64_t h = cr_hash(term, len);
    const ld_def_t *d = lookup_term(core, c, term, len, h);
    if (d)
        return def_iri(d, a);

    const char *colon = memchr(term, ':', len);
    if (colon) {
        size_t pl = (size_t)(colon - term);
        const char *suffix = colon + 1;
        size_t sl = len - pl - 1;
        if ((pl == 1 && term[0] == '_') || (sl >= 2 && suffix[0] == '/' && suffix[1] == '/' && is_scheme(term, pl)))
            return name_of(term, len, a);           /* blank node or hierarchical IRI */
        const ld_def_t *pd = lookup_term(core, c, term, pl, cr_hash(term, pl));
        if (pd && pd->iri[0] != '@')
            return name_concat(pd->iri, pd->iri_len, suffix, sl, a);
        if (is_scheme(term, pl))
            return name_of(term, len, a);           /* urn:..., mailto:..., etc. */
    }
    size_t vl;
    const char *vocab = vocab_of(core, c, &vl);
    if (!vocab)
        return name_of(term, len, a);
    return name_concat(vocab, vl, term, len, a);
}

const char *ld_expandn(const ld_context_t *c, const char *term, size_t len)
{
    return expand(c, term, len, NULL);
}

const char *ld_expandn_lookup(const ld_context_t *c, const char *term, size_t len, arena_t *a)
{
    return expand(c, term, len, a);
}

const char *ld_expand_lookup(const ld_context_t *c, const char *term, arena_t *a)
{
    return term ? expand(c, term, strlen(term), a) : NULL;
}

const char *ld_expand(const ld_context_t *c, const char *term)
{
    return term ? ld_expandn(c, term, strlen(term)) : NULL;
}

/* JSON-LD 1.1 IRI compaction, the compact IRI step: prefix:suffix with a
 * term that can be a prefix, the shortest (then the least) of the
 * candidates, never one that is itself a term, nor a suffix starting with
 * "//" (that would read as a hierarchical IRI). The prefix must also be a URI
 * scheme, so that the name reads back as an NGSI-LD name (4.6.2, a URI).
 * NULL: no candidate. */
static const char *compact_iri(const ld_context_t *core, const ld_context_t *c, const char *iri, size_t len)
{
    const ld_def_t *best = NULL;
    size_t          best_len = 0;
    for (int pass = 0; pass < 2; pass++) {
        const ld_context_t *t = pass == 0 ? c : core;
        if (!t || (pass == 1 && t == c))
            continue;
        for (uint32_t i = 0; i < t->n_prefixes; i++) {
            const ld_def_t *d = t->prefixes[i];
            if (d->iri_len >= len || memcmp(d->iri, iri, d->iri_len) != 0)
                continue;
            const char *suffix = iri + d->iri_len;
            size_t      cl = d->term_len + 1 + (len - d->iri_len);
            if ((suffix[0] == '/' && suffix[1] == '/') || !is_scheme(d->term, d->term_len))
                continue;
            if (best && (cl > best_len || (cl == best_len && strcmp(d->term, best->term) >= 0)))
                continue;
            char stack[512];
            char *cand = cl <= sizeof stack ? stack : cr_xmalloc(cl);
            memcpy(cand, d->term, d->term_len);
            cand[d->term_len] = ':';
            memcpy(cand + d->term_len + 1, suffix, len - d->iri_len);
            bool is_term = lookup_term(core, c, cand, cl, cr_hash(cand, cl)) != NULL;
            if (cand != stack)
                free(cand);
            if (is_term)
                continue;
            best = d;
            best_len = cl;
        }
    }
    if (!best)
        return NULL;
    char  stack[512];
    char *buf = best_len <= sizeof stack ? stack : cr_xmalloc(best_len);
    memcpy(buf, best->term, best->term_len);
    buf[best->term_len] = ':';
    memcpy(buf + best->term_len + 1, iri + best->iri_len, len - best->iri_len);
    const char *r = intern(buf, best_len);
    if (buf != stack)
        free(buf);
    return r;
}

const char *ld_compact(const ld_context_t *c, const char *iri)
{
    const ld_context_t *core = ld_core();
    if (!c)
        c = core;
    if (!iri)
        return NULL;
    size_t len = strlen(iri);
    uint64_t h = cr_hash(iri, len);
    const ld_def_t *d = NULL;
    if (c && c != core)
        d = find_iri(c, iri, len, h);
    if (d && d->names)
        return d->term;
    d = core ? find_iri(core, iri, len, h) : NULL;
    if (d && d->names)
        return d->term;

    /* @vocab: the remainder, when it expands back to the same IRI */
    size_t vl;
    const char *vocab = vocab_of(core, c, &vl);
    if (vocab && len > vl && memcmp(iri, vocab, vl) == 0) {
        const char *rest = iri + vl;
        size_t rl = len - vl;
        if (plain_name(rest, rl) && !lookup_term(core, c, rest, rl, cr_hash(rest, rl)))
            return intern(rest, rl);
    }
    const char *ci = compact_iri(core, c, iri, len);
    return ci ? ci : intern(iri, len);
}

/* A small direct-mapped memo per thread, keyed by the context's serial
 * (never reused, unlike its address once an evicted context is freed) and
 * the interned IRI (interned strings never move): an entry never goes
 * stale. No lock, no sharing between threads. */
#define COMPACT_MEMO 512
static __thread struct { uint64_t serial; const char *iri, *term; } compact_memo[COMPACT_MEMO];

uint64_t ld_context_serial(const ld_context_t *c)
{
    if (!c)
        c = ld_core();
    return c ? c->serial : 0;
}

const char *ld_compact_name(const ld_context_t *c, const char *iri)
{
    if (!iri)
        return NULL;
    if (!c)
        c = ld_core();
    uint64_t serial = c ? c->serial : 0;
    size_t slot = (size_t)(cr_hash_ptr(iri) ^ (serial * 0x9e3779b97f4a7c15ULL)) & (COMPACT_MEMO - 1);
    if (compact_memo[slot].iri == iri && compact_memo[slot].serial == serial)
        return compact_memo[slot].term;
    const char *term = ld_compact(c, iri);
    compact_memo[slot].serial = serial;
    compact_memo[slot].iri = iri;
    compact_memo[slot].term = term;
    return term;
}

const char *ld_term_type(const ld_context_t *c, const char *expanded_iri)
{
    const ld_context_t *core = ld_core();
    if (!c)
        c = core;
    if (!expanded_iri)
        return NULL;
    size_t len = strlen(expanded_iri);
    uint64_t h = cr_hash(expanded_iri, len);
    const ld_def_t *d = NULL;
    if (c && c != core)
        d = find_iri(c, expanded_iri, len, h);
    if (d && d->type)
        return d->type;
    d = core ? find_iri(core, expanded_iri, len, h) : NULL;
    return d ? d->type : NULL;
}

/* ------------------------------------------------------ builder: terms */

void ld_builder_init(ld_builder_t *b, const ld_context_t *core)
{
    memset(b, 0, sizeof *b);
    b->core = core;
    b->max_docs = cr_config.context_max_docs > 0 ? (unsigned)cr_config.context_max_docs : LD_MAX_REMOTE_DOCS;
    b->max_bytes = ld_max_doc_bytes();
    b->tmp = arena_new(16384);
}

void ld_builder_free(ld_builder_t *b)
{
    free(b->terms);
    if (b->tmp)
        arena_free(b->tmp);
    memset(b, 0, sizeof *b);
}

static ld_bterm_t *bterm_find(const ld_builder_t *b, const char *t, size_t len, uint64_t h)
{
    if (!b->cap)
        return NULL;
    size_t mask = b->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        ld_bterm_t *e = &b->terms[i];
        if (!e->term)
            return NULL;
        if (e->hash == h && strncmp(e->term, t, len) == 0 && e->term[len] == '\0')
            return e;
    }
}

static void bterm_set(ld_builder_t *b, const char *term, uint64_t h, const char *iri, const char *type,
                      bool prefix)
{
    if ((b->count + 1) * 2 > b->cap) {
        size_t ncap = b->cap ? b->cap * 2 : 64;
        ld_bterm_t *nt = cr_xcalloc(ncap, sizeof *nt);
        for (size_t i = 0; i < b->cap; i++) {
            if (!b->terms[i].term)
                continue;
            size_t j = (size_t)b->terms[i].hash & (ncap - 1);
            while (nt[j].term)
                j = (j + 1) & (ncap - 1);
            nt[j] = b->terms[i];
        }
        free(b->terms);
        b->terms = nt;
        b->cap = ncap;
    }
    size_t mask = b->cap - 1;
    size_t i = (size_t)h & mask;
    while (b->terms[i].term && (b->terms[i].hash != h || strcmp(b->terms[i].term, term) != 0))
        i = (i + 1) & mask;
    if (!b->terms[i].term)
        b->count++;
    b->terms[i] = (ld_bterm_t){ .term = term, .iri = iri, .type = type, .hash = h, .prefix = prefix };
}

/* ------------------------------------------- builder: one local context */

typedef struct local_ent {
    const char   *key;          /* NUL-terminated member name */
    size_t        klen;
    uint64_t      hash;
    const json_t *val;
    uint8_t       state;        /* 0 new, 1 being defined, 2 defined */
    const char   *iri;          /* NULL when mapped to null */
    const char   *type;
    bool          prefix;
} local_ent_t;

typedef struct local_ctx {
    local_ent_t *ents;
    size_t       n;
    uint32_t    *idx;           /* open addressing: entry index + 1 */
    size_t       mask;
    const char  *vocab;         /* this object's @vocab, when vocab_set */
    bool         vocab_set;
} local_ctx_t;

static local_ent_t *local_find(const local_ctx_t *L, const char *t, size_t len, uint64_t h)
{
    local_ent_t *found = NULL;
    for (size_t i = (size_t)h & L->mask;; i = (i + 1) & L->mask) {
        uint32_t k = L->idx[i];
        if (!k)
            return found;
        local_ent_t *e = &L->ents[k - 1];
        if (e->hash == h && e->klen == len && memcmp(e->key, t, len) == 0)
            found = e;                              /* duplicate members: the last wins */
    }
}

static bool define_local(ld_builder_t *b, local_ctx_t *L, local_ent_t *e, int depth, problem_t *p);

static const char *active_vocab(const ld_builder_t *b, const local_ctx_t *L)
{
    if (L && L->vocab_set && L->vocab)
        return L->vocab;
    if (L && L->vocab_set)                          /* "@vocab": null -> the core's */
        return b->core ? b->core->vocab : NULL;
    if (b->vocab)
        return b->vocab;
    return b->core ? b->core->vocab : NULL;
}

/* Looks name up as a term: core (protected), this object, earlier contexts.
 * *found tells whether it is defined; *iri is NULL for a term mapped to null. */
static bool lookup_name(ld_builder_t *b, local_ctx_t *L, const char *name, size_t len, int depth,
                        bool *found, const char **iri, const char **type, problem_t *p)
{
    uint64_t h = cr_hash(name, len);
    *found = false;
    *iri = *type = NULL;
    const ld_def_t *d = b->core ? find_term(b->core, name, len, h) : NULL;
    if (d) {
        *found = true;
        *iri = d->iri;
        *type = d->type;
        return true;
    }
    local_ent_t *e = L ? local_find(L, name, len, h) : NULL;
    if (e) {
        if (!define_local(b, L, e, depth + 1, p))
            return false;
        *found = true;
        *iri = e->iri;
        *type = e->type;
        return true;
    }
    ld_bterm_t *t = bterm_find(b, name, len, h);
    if (t) {
        *found = true;
        *iri = t->iri;
        *type = t->type;
    }
    return true;
}

/* IRI expansion of a value inside a context definition (vocab-relative).
 * self: the term being defined (a term mapped to its own name is relative). */
static const char *expand_value(ld_builder_t *b, local_ctx_t *L, const char *s, size_t len,
                                const char *self, int depth, problem_t *p)
{
    bool found;
    const char *iri, *type;
    if (len == 0) {
        problem_set(p, PB_BAD_REQUEST_DATA, "@context: term '%s' maps to an empty IRI", self);
        return NULL;
    }
    if (s[0] == '@')
        return bstr(b, s, len);
    if (!(strlen(self) == len && memcmp(self, s, len) == 0)) {   /* a defined term */
        if (!lookup_name(b, L, s, len, depth, &found, &iri, &type, p))
            return NULL;
        if (found && iri)
            return iri;
    }
    const char *colon = memchr(s, ':', len);
    if (colon) {
        size_t pl = (size_t)(colon - s);
        const char *suffix = colon + 1;
        size_t sl = len - pl - 1;
        if ((pl == 1 && s[0] == '_') || (sl >= 2 && suffix[0] == '/' && suffix[1] == '/' && is_scheme(s, pl)))
            return bstr(b, s, len);
        if (!(strlen(self) == pl && memcmp(self, s, pl) == 0)) {
            if (!lookup_name(b, L, s, pl, depth, &found, &iri, &type, p))
                return NULL;
            if (found && iri && iri[0] != '@')
                return bconcat(b, iri, strlen(iri), suffix, sl);
        }
        if (is_scheme(s, pl))
            return bstr(b, s, len);
        /* not an IRI: a term or vocab-relative, as ld_expandn() treats it */
    }
    const char *vocab = active_vocab(b, L);
    if (!vocab)
        return bstr(b, s, len);
    return bconcat(b, vocab, strlen(vocab), s, len);
}

static bool define_local(ld_builder_t *b, local_ctx_t *L, local_ent_t *e, int depth, problem_t *p)
{
    if (e->state == 2)
        return true;
    if (e->state == 1)
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context: cyclic IRI mapping for term '%s'", e->key);
    if (depth > MAX_DEFINE_DEPTH)
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context: term definitions nest too deeply at '%s'",
                           e->key);
    e->state = 1;
    const json_t *v = e->val;
    const char *iri = NULL, *type = NULL;
    bool prefix_flag = false;                       /* an expanded definition's "@prefix": true */

    switch (v->type) {
    case JSON_NULL:
        break;
    case JSON_STRING:
        if (!(iri = expand_value(b, L, v->str, v->len, e->key, depth, p)))
            return false;
        break;
    case JSON_OBJECT: {
        if (b->core && json_get(v, "@context"))      /* 4.4, 5.5.7: only the core may scope */
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "@context: term '%s' has a scoped @context; user contexts shall not "
                               "contain scoped contexts (5.5.7)", e->key);
        const json_t *id = json_get(v, "@id");
        if (!id)
            id = json_get(v, "@reverse");
        if (id) {
            if (id->type == JSON_STRING) {
                if (!(iri = expand_value(b, L, id->str, id->len, e->key, depth, p)))
                    return false;
            } else if (id->type != JSON_NULL) {
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "@context: the @id of term '%s' must be a string", e->key);
            }
        } else {
            /* no @id: a compact IRI names itself, a plain term is vocab-relative */
            if (!(iri = expand_value(b, L, e->key, e->klen, e->key, depth, p)))
                return false;
        }
        const json_t *t = json_get(v, "@type");
        if (t) {
            if (t->type != JSON_STRING || t->len == 0)
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "@context: the @type of term '%s' must be a non-empty string", e->key);
            if (t->str[0] == '@')
                type = bstr(b, t->str, t->len);
            else if (!(type = expand_value(b, L, t->str, t->len, "", depth, p)))
                return false;
        }
        const json_t *pf = json_get(v, "@prefix");
        prefix_flag = pf && pf->type == JSON_TRUE;
        break;
    }
    default:
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "@context: the definition of term '%s' must be a string, an object or null",
                           e->key);
    }
    if (iri && iri[0] != '@' && !iri_chars_ok(iri))
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context: term '%s' maps to '%.200s', which is not an IRI usable as an NGSI-LD name "
                           "(no spaces, controls or <>\"{}|\\^`'();=)",
                           e->key, iri);
    e->iri = iri;
    e->type = type;
    /* JSON-LD 1.1, Create Term Definition: a term without ':' or '/' is a
     * prefix when its simple definition ends with a gen-delim character, or
     * its expanded one says "@prefix": true */
    if (iri && iri[0] != '@' && !memchr(e->key, ':', e->klen) && !memchr(e->key, '/', e->klen))
        e->prefix = v->type == JSON_STRING ? strchr(":/?#[]@", iri[strlen(iri) - 1]) != NULL : prefix_flag;
    e->state = 2;
    return true;
}

static bool add_object(ld_builder_t *b, const json_t *obj, problem_t *p)
{
    local_ctx_t L = { 0 };
    L.n = obj->len;
    size_t cap = 16;
    while (cap < L.n * 2)
        cap <<= 1;
    L.mask = cap - 1;
    L.ents = arena_calloc(b->tmp, (L.n ? L.n : 1) * sizeof *L.ents);
    L.idx = arena_calloc(b->tmp, cap * sizeof *L.idx);

    size_t n = 0;
    json_foreach(m, obj) {
        const char *k = m->key ? m->key : "";
        size_t kl = strlen(k);
        if (kl == 0)
            return problem_set(p, PB_BAD_REQUEST_DATA, "@context: a term cannot be the empty string");
        if (k[0] == '@')
            continue;                               /* keywords: handled below or ignored */
        local_ent_t *e = &L.ents[n];
        *e = (local_ent_t){ .key = k, .klen = kl, .hash = cr_hash(k, kl), .val = m };
        size_t i = (size_t)e->hash & L.mask;
        while (L.idx[i])
            i = (i + 1) & L.mask;
        L.idx[i] = (uint32_t)(++n);
    }
    L.n = n;

    const json_t *vocab = json_get(obj, "@vocab");
    if (vocab) {
        if (vocab->type == JSON_NULL) {
            L.vocab = NULL;
        } else if (vocab->type == JSON_STRING) {
            if (vocab->len == 0 || memchr(vocab->str, ':', vocab->len)) {
                if (vocab->len == 0)
                    L.vocab = active_vocab(b, NULL);
                else if (!(L.vocab = expand_value(b, &L, vocab->str, vocab->len, "", 0, p)))
                    return false;
            } else {                                /* relative: against the current @vocab */
                const char *cur = active_vocab(b, NULL);
                L.vocab = cur ? bconcat(b, cur, strlen(cur), vocab->str, vocab->len)
                              : bstr(b, vocab->str, vocab->len);
            }
            if (L.vocab && L.vocab[0] == '@')
                return problem_set(p, PB_BAD_REQUEST_DATA, "@context: invalid @vocab '%s'", vocab->str);
        } else {
            return problem_set(p, PB_BAD_REQUEST_DATA, "@context: @vocab must be a string or null");
        }
        L.vocab_set = true;
    }

    for (size_t i = 0; i < L.n; i++)
        if (!define_local(b, &L, &L.ents[i], 0, p))
            return false;

    if (L.vocab_set)
        b->vocab = L.vocab;
    for (size_t i = 0; i < L.n; i++) {
        local_ent_t *e = &L.ents[i];
        if (b->core && find_term(b->core, e->key, e->klen, e->hash))
            continue;                               /* core terms are protected */
        const char *term = bstr(b, e->key, e->klen);
        bterm_set(b, term, e->hash, e->iri, e->type, e->prefix);
    }
    return true;
}

/* ----------------------------------------------- builder: any @context */

static bool add_document(ld_builder_t *b, const char *url, const char *text, size_t tlen, problem_t *p);

static bool add_url(ld_builder_t *b, const char *url, size_t len, problem_t *p)
{
    if (ld_is_core_url(url, len))
        return true;                                /* the core is always there, last */
    const char *colon = memchr(url, ':', len);
    if (!colon || !is_scheme(url, (size_t)(colon - url)))
        return problem_set(p, PB_BAD_REQUEST_DATA, "@context: '%.200s' is not a URL", url);
    unsigned max_depth = cr_config.context_max_depth > 0 ? (unsigned)cr_config.context_max_depth
                                                          : LD_MAX_REMOTE_DEPTH;
    if (b->remote_depth >= max_depth)
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: remote contexts nest deeper than %u (--contextMaxDepth)", url,
                           max_depth);
    char own[17];
    if (ld_own_url(url, len, own)) {                /* Hosted or ImplicitlyCreated here: never fetched */
        const char *text;
        size_t tlen;
        if (!ld_own_doc(own, b->tmp, &text, &tlen))
            return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s: this broker holds no such @context",
                               url);
        return add_document(b, url, text, tlen, p);
    }
    if (!ld_is_fetchable_url(url, len))
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: only http and https URLs can be fetched", url);
    if (b->docs >= b->max_docs)
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: the request's @contexts need more than %u remote documents "
                           "(--contextMaxDocs)", url, b->max_docs);
    b->docs++;
    const char *text;
    size_t tlen;
    char ubuf[LD_MAX_URL_LEN + 1];
    memcpy(ubuf, url, len);                         /* ld_is_fetchable_url bounds len */
    ubuf[len] = '\0';
    int64_t expires = 0;
    int st = ld_doc_get(ubuf, b->tmp, &text, &tlen, &expires, b->waiter, p);
    if (st == LD_DOC_PENDING) {
        b->pending = true;                          /* go on: other documents start downloading too */
        return true;
    }
    if (st != LD_DOC_READY)
        return false;
    if (expires && (!b->expires_ms || expires < b->expires_ms))
        b->expires_ms = expires;
    b->doc_bytes += tlen;
    if (b->doc_bytes > b->max_bytes)
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: the request's remote @contexts hold more than %zu bytes "
                           "(--contextMaxBytes)", url, b->max_bytes);
    return add_document(b, url, text, tlen, p);
}

/* The document at url (its text in b->tmp): its @context member, one level deeper. */
static bool add_document(ld_builder_t *b, const char *url, const char *text, size_t tlen, problem_t *p)
{
    char err[128];
    json_limits_t lim = { .max_depth = LD_JSON_MAX_DEPTH, .max_size = 0 };
    json_t *doc = json_parse(b->tmp, (char *)text, tlen, &lim, err, sizeof err);
    if (!doc)
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.300s is not valid JSON: %s",
                           url, err);
    const json_t *ctx = json_get(doc, "@context");
    if (!ctx)
        return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE,
                           "@context %.300s: the document has no @context member", url);
    problem_t sub = { 0 };
    b->remote_depth++;
    bool ok = ld_builder_add(b, ctx, &sub);
    b->remote_depth--;
    if (!ok) {
        if (sub.kind == PB_BAD_REQUEST_DATA)
            return problem_set(p, PB_LD_CONTEXT_NOT_AVAILABLE, "@context %.200s is invalid: %.280s",
                               url, sub.detail);
        if (p)
            *p = sub;
        return false;
    }
    return true;
}

bool ld_builder_add(ld_builder_t *b, const json_t *v, problem_t *p)
{
    if (!v)
        return true;
    switch (v->type) {
    case JSON_NULL:                                 /* resets the user context */
        memset(b->terms, 0, b->cap * sizeof *b->terms);
        b->count = 0;
        b->vocab = NULL;
        return true;
    case JSON_STRING:
        return add_url(b, v->str, v->len, p);
    case JSON_OBJECT:
        return add_object(b, v, p);
    case JSON_ARRAY:
        json_foreach(e, v) {
            if (e->type == JSON_ARRAY)
                return problem_set(p, PB_BAD_REQUEST_DATA, "@context: arrays cannot nest");
            if (!ld_builder_add(b, e, p))
                return false;
        }
        return true;
    default:
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "@context must be a URL string, an object or an array, not a %s",
                           v->type == JSON_NUMBER ? "number" : "boolean");
    }
}

/* ------------------------------------------------------------- freezing */

static bool better_term(const ld_def_t *a, const ld_def_t *b)
{
    if (a->term_len != b->term_len)
        return a->term_len < b->term_len;
    return strcmp(a->term, b->term) < 0;
}

static int by_iri_len_desc(const void *x, const void *y)
{
    const ld_def_t *a = *(const ld_def_t *const *)x, *b = *(const ld_def_t *const *)y;
    if (a->iri_len != b->iri_len)
        return a->iri_len > b->iri_len ? -1 : 1;
    return strcmp(a->term, b->term);
}

ld_context_t *ld_builder_freeze(ld_builder_t *b, bool is_core)
{
    size_t n = 0;
    for (size_t i = 0; i < b->cap; i++)
        if (b->terms[i].term && b->terms[i].iri)
            n++;
    size_t cap = 8;
    while (cap < n * 2)
        cap <<= 1;

    arena_t *a = arena_new(4096 + n * (sizeof(ld_def_t) + 2 * 2 * sizeof(uint32_t)));
    static uint64_t serials;
    ld_context_t *c = arena_calloc(a, sizeof *c);
    c->arena = a;
    c->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    c->refs = 1;
    c->is_core = is_core;
    c->defs = arena_calloc(a, (n ? n : 1) * sizeof *c->defs);
    c->by_term = arena_calloc(a, cap * sizeof *c->by_term);
    c->by_iri = arena_calloc(a, cap * sizeof *c->by_iri);
    c->mask = (uint32_t)(cap - 1);

    for (size_t i = 0; i < b->cap; i++) {
        const ld_bterm_t *t = &b->terms[i];
        if (!t->term || !t->iri)
            continue;
        uint32_t k = c->ndefs++;
        ld_def_t *d = &c->defs[k];
        d->term_len = (uint32_t)strlen(t->term);
        d->term = is_core ? t->term : arena_strndup(a, t->term, d->term_len);
        d->term_hash = t->hash;
        d->iri_len = (uint32_t)strlen(t->iri);
        d->iri = is_core ? t->iri : arena_strndup(a, t->iri, d->iri_len);
        d->iri_hash = cr_hash(d->iri, d->iri_len);
        d->type = is_core || !t->type ? t->type : arena_strdup(a, t->type);
        d->iri_interned = is_core ? d->iri : NULL;
        d->prefix = t->prefix;
        d->names = term_names(d->term, d->term_len);
        if (d->prefix)
            c->n_prefixes++;

        uint32_t j = (uint32_t)d->term_hash & c->mask;
        while (c->by_term[j])
            j = (j + 1) & c->mask;
        c->by_term[j] = k + 1;

        for (j = (uint32_t)d->iri_hash & c->mask;; j = (j + 1) & c->mask) {
            uint32_t o = c->by_iri[j];
            if (!o) {
                c->by_iri[j] = k + 1;
                break;
            }
            const ld_def_t *od = &c->defs[o - 1];
            if (od->iri_hash == d->iri_hash && od->iri_len == d->iri_len &&
                memcmp(od->iri, d->iri, d->iri_len) == 0) {   /* the same IRI */
                if (better_term(d, &c->defs[o - 1]))
                    c->by_iri[j] = k + 1;
                break;
            }
        }
    }
    /* the prefixes, longest IRI first: the first that fits leaves the shortest suffix */
    c->prefixes = arena_alloc(a, (c->n_prefixes ? c->n_prefixes : 1) * sizeof *c->prefixes);
    c->n_prefixes = 0;
    for (uint32_t k = 0; k < c->ndefs; k++)
        if (c->defs[k].prefix)
            c->prefixes[c->n_prefixes++] = &c->defs[k];
    qsort(c->prefixes, c->n_prefixes, sizeof *c->prefixes, by_iri_len_desc);
    const char *vocab = b->vocab;
    if (!vocab && !is_core && b->core)
        vocab = b->core->vocab;
    if (vocab && !is_core && (!b->core || vocab != b->core->vocab))
        vocab = arena_strdup(a, vocab);             /* the builder's scratch goes */
    c->vocab = vocab;
    c->vocab_len = vocab ? strlen(vocab) : 0;
    return c;
}

void ld_context_free(ld_context_t *c)
{
    if (c)
        arena_free(c->arena);
}
