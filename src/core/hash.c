/*
 * hash.c - hashing and the process-wide string intern table.
 *
 * Interned strings make name comparisons pointer comparisons on every hot
 * path (attribute lookup, q evaluation, type index). The table is an open
 * addressing hash set behind a reader-writer lock: lookups of names that
 * exist (the common case, after the first request) take only the read lock.
 * Interned strings are never freed; the set only grows (names come from
 * contexts and data, and are few compared with entities).
 */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* wyhash-style 64-bit mixing over 8-byte words; fast and well spread.
 *
 * Hash flooding: the tables keyed by client strings (entity ids, tenant
 * names, attribute and type names, context terms and URLs) probe linearly,
 * so keys that collide would make every lookup a walk. All the constants the
 * function mixes in are therefore a per-process secret drawn from
 * getrandom() before main runs (a constructor: every user of cr_hash gets it
 * without a call). Every operand of every multiplication carries a secret
 * word, so no input block can zero the state independently of the key (the
 * weakness of wyhash under a public secret). A hash is thus only meaningful
 * inside one process: nothing may store one on disk or send it out (an
 * on-disk format must not contain these hashes; cr_hash_stable exists for
 * content addresses). */
static inline uint64_t rd64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint64_t rd32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t mix(uint64_t a, uint64_t b)
{
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

typedef struct { uint64_t k[4]; } hash_key_t;

#define STABLE_KEY {{ 0x9e3779b97f4a7c15ULL, 0xe7037ed1a0b428dbULL, 0x8ebc6af09c88c6e3ULL, 0x589965cc75374cc3ULL }}
static const hash_key_t stable_key = STABLE_KEY;
static hash_key_t       process_key = STABLE_KEY;   /* replaced before main */

__attribute__((constructor)) static void hash_key_init(void)
{
    hash_key_t k;
    if (getrandom(&k, sizeof k, 0) != (ssize_t)sizeof k) {
        /* no getrandom (very old kernel, seccomp): addresses under ASLR, time
         * and pid are a weaker secret, still not one a client can read */
        uint64_t x = (uint64_t)cr_mono_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&k;
        for (int i = 0; i < 4; i++) {
            x += 0x9e3779b97f4a7c15ULL;
            k.k[i] = mix(x ^ stable_key.k[i], (uint64_t)(uintptr_t)&process_key | 1);
        }
    }
    process_key = k;
}

static inline uint64_t hash_with(const hash_key_t *key, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t seed = key->k[0] ^ (len * 0xa0761d6478bd642fULL);
    size_t   i = len;
    while (i >= 16) {
        seed = mix(rd64(p) ^ key->k[1], rd64(p + 8) ^ seed);
        p += 16; i -= 16;
    }
    /* the tail in at most two loads (overlapping ones; with len mixed in,
     * every byte counts and the mapping stays one-to-one) */
    uint64_t a = 0, b = 0;
    if (i >= 8) { a = rd64(p); b = i > 8 ? rd64(p + i - 8) : 0; }
    else if (i >= 4) a = (uint64_t)rd32(p) << 32 | rd32(p + i - 4);
    else if (i > 0) a = (uint64_t)p[0] << 16 | (uint64_t)p[i >> 1] << 8 | p[i - 1];
    return mix(a ^ key->k[2] ^ seed, b ^ key->k[3] ^ len);
}

uint64_t cr_hash(const void *data, size_t len)
{
    return hash_with(&process_key, data, len);
}

uint64_t cr_hash_stable(const void *data, size_t len)
{
    return hash_with(&stable_key, data, len);
}

typedef struct intern_entry {
    uint64_t    hash;
    const char *str;
    size_t      len;
} intern_entry_t;

static pthread_rwlock_t intern_lock = PTHREAD_RWLOCK_INITIALIZER;
static intern_entry_t  *itab;
static size_t           icap;     /* power of two */
static size_t           icount;

/* String storage: interned strings are packed into large chunks. */
static char  *ichunk;
static size_t ichunk_left;

static const char *find_locked(const char *s, size_t len, uint64_t h)
{
    if (!itab) return NULL;
    size_t mask = icap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        intern_entry_t *e = &itab[i];
        if (!e->str) return NULL;
        if (e->hash == h && e->len == len && memcmp(e->str, s, len) == 0) return e->str;
    }
}

static void grow_locked(void)
{
    size_t          ncap = icap ? icap * 2 : 1024;
    intern_entry_t *nt = cr_xcalloc(ncap, sizeof(*nt));
    for (size_t j = 0; j < icap; j++) {
        if (!itab[j].str) continue;
        size_t i = itab[j].hash & (ncap - 1);
        while (nt[i].str) i = (i + 1) & (ncap - 1);
        nt[i] = itab[j];
    }
    free(itab);
    itab = nt;
    icap = ncap;
}

static char *store_string(const char *s, size_t len)
{
    if (len + 1 > ichunk_left) {
        size_t sz = len + 1 > 65536 ? len + 1 : 65536;
        ichunk = cr_xmalloc(sz);
        ichunk_left = sz;
    }
    char *p = ichunk;
    memcpy(p, s, len);
    p[len] = '\0';
    ichunk += len + 1;
    ichunk_left -= len + 1;
    return p;
}

const char *intern_find(const char *s, size_t len)
{
    uint64_t h = cr_hash(s, len);
    pthread_rwlock_rdlock(&intern_lock);
    const char *r = find_locked(s, len, h);
    pthread_rwlock_unlock(&intern_lock);
    return r;
}

const char *intern(const char *s, size_t len)
{
    uint64_t h = cr_hash(s, len);
    pthread_rwlock_rdlock(&intern_lock);
    const char *r = find_locked(s, len, h);
    pthread_rwlock_unlock(&intern_lock);
    if (r) return r;

    pthread_rwlock_wrlock(&intern_lock);
    r = find_locked(s, len, h);
    if (!r) {
        if ((icount + 1) * 4 >= icap * 3) grow_locked();
        char  *p = store_string(s, len);
        size_t i = h & (icap - 1);
        while (itab[i].str) i = (i + 1) & (icap - 1);
        itab[i] = (intern_entry_t){ h, p, len };
        icount++;
        r = p;
    }
    pthread_rwlock_unlock(&intern_lock);
    return r;
}

const char *intern_cstr(const char *s)
{
    return intern(s, strlen(s));
}

size_t intern_count(void)
{
    pthread_rwlock_rdlock(&intern_lock);
    size_t n = icount;
    pthread_rwlock_unlock(&intern_lock);
    return n;
}
