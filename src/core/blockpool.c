/*
 * blockpool.c - the long-lived blocks of the store (frozen entities) on
 * transparent huge pages.
 *
 * Why: a store in RAM grows by its frozen entities, one block each (about
 * 700 bytes for workload.ingest's Meter: 88 % of the heap's growth over
 * 20,000 creates, valgrind --tool=massif). glibc extends a thread's arena a
 * page at a time (an mprotect and a page fault per 4 KiB) and never on huge
 * pages; on the 2-core VM of doc/tuning.md those faults were ~15 % of the
 * broker's CPU in workload.ingest (perf record -a: clear_page under
 * do_anonymous_page under sysmalloc), a fresh 4 KiB page costing 11-13 µs
 * there. A 2 MiB huge page is one fault for ~3,000 such entities, and fewer
 * TLB misses for every later read of them.
 *
 * How: one reservation of address space (PROT_NONE, nothing committed),
 * madvise'd MADV_HUGEPAGE (the kernel's "madvise" mode is enough; without
 * THP the pool works on 4 KiB pages), made writable as it is used. It is cut
 * into 64 KiB slabs, each holding blocks of one size class (64-byte steps up
 * to 512 bytes, then 8 classes per power of two up to BP_MAX: at most 12.5 %
 * slack); slabs are handed out in address order, so whatever the mix of
 * classes the resident size grows one huge page at a time. A slab keeps its
 * own free list and count of live blocks; a class allocates from the first
 * slab of its list of slabs with room. A slab whose last block is freed goes
 * back to the system (MADV_DONTNEED) and to the pool's empty slabs, for any
 * class, unless it is its class's only slab with room (a class that empties
 * and fills one slab over and over would give memory back and fault it in
 * again each time). So memory freed in one class serves the others once its
 * slabs empty, and a store that shrinks gives memory back, which glibc's
 * arenas seldom do.
 * A block larger than BP_MAX, any block once the reservation is full or the
 * system refuses to commit more, and every block while the pool is off is
 * malloc'd; blockpool_free tells the two apart by the address, so no setting
 * can mismatch a free. One mutex: an allocation is a pop or a bump, a free a
 * push, both O(1).
 */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#define BP_SLAB    ((size_t)64 << 10)       /* blocks of one class */
#define BP_COMMIT  ((size_t)2 << 20)        /* made writable at a time; a huge page */
#define BP_MAX     ((size_t)16 << 10)       /* larger blocks are malloc'd */
#define BP_CLASSES 48                       /* 8 up to 512, then 8 per octave to BP_MAX */
#define BP_NONE    UINT32_MAX

typedef struct slab {
    void    *free;                          /* freed blocks, linked through their first word */
    uint32_t live;                          /* blocks handed out and not freed */
    uint32_t bump;                          /* bytes carved from the slab's start */
    uint32_t prev, next;                    /* in its class's list of slabs with room, or the empty list */
    uint8_t  cls;
    bool     listed;                        /* in its class's list */
} slab_t;

static pthread_once_t  g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char    *g_base;                     /* the reservation, BP_COMMIT-aligned; NULL: none */
static size_t   g_len;
static slab_t  *g_slabs;                    /* g_len / BP_SLAB of them, zero pages until used */
static uint32_t g_fresh;                    /* slabs [g_fresh, ...) never used */
static size_t   g_writable;                 /* bytes made writable from g_base */
static size_t   g_in_use;                   /* bytes of live blocks (class sizes) */
static size_t   g_released;                 /* bytes of slabs given back to the system and not reused */
static uint32_t g_empty = BP_NONE;          /* slabs given back, for any class (linked by next) */
static uint32_t g_room[BP_CLASSES];         /* per class: its slabs with room, BP_NONE-terminated */

/* The class of an n-byte block (1 <= n <= BP_MAX) and its size. */
static unsigned class_of(size_t n, size_t *size)
{
    if (n <= 512) {
        unsigned c = (unsigned)((n - 1) / 64);
        *size = (size_t)(c + 1) * 64;
        return c;
    }
    unsigned k    = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1));   /* 2^k <= n-1 < 2^(k+1) */
    size_t   step = (size_t)1 << (k - 3);
    size_t   r    = (n + step - 1) & ~(step - 1);
    *size = r;
    return 8u + (k - 9u) * 8u + (unsigned)((r - ((size_t)1 << k)) / step) - 1u;
}

static size_t class_size(unsigned c)
{
    if (c < 8)
        return (size_t)(c + 1) * 64;
    unsigned k = 9u + (c - 8u) / 8u;
    return ((size_t)1 << k) + (size_t)((c - 8u) % 8u + 1u) * ((size_t)1 << (k - 3));
}

/* The largest reservation the system grants (an address-space limit, a
 * valgrind), from 64 GiB down to 1 GiB, and the slabs' table; none: malloc. */
static void reserve(void)
{
    for (unsigned c = 0; c < BP_CLASSES; c++)
        g_room[c] = BP_NONE;
    for (size_t len = (size_t)64 << 30; len >= ((size_t)1 << 30); len >>= 2) {
        size_t tlen = len / BP_SLAB * sizeof(slab_t);
        void  *t    = mmap(NULL, tlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (t == MAP_FAILED)
            continue;
        char *p = mmap(NULL, len + BP_COMMIT, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            munmap(t, tlen);
            continue;
        }
        char *base = (char *)(((uintptr_t)p + BP_COMMIT - 1) & ~(uintptr_t)(BP_COMMIT - 1));
        if (base > p)
            munmap(p, (size_t)(base - p));
        munmap(base + len, (size_t)(p + len + BP_COMMIT - (base + len)));
        (void)madvise(base, len, MADV_HUGEPAGE);   /* EINVAL without THP: 4 KiB pages then */
        g_slabs = t;
        g_base  = base;
        g_len   = len;
        return;
    }
    LOG_W("block pool: no address space could be reserved; frozen entities are malloc'd");
}

bool blockpool_available(void)
{
    pthread_once(&g_once, reserve);
    return g_base != NULL;
}

static void room_add(unsigned c, uint32_t k)
{
    slab_t *s = &g_slabs[k];
    s->prev = BP_NONE;
    s->next = g_room[c];
    if (s->next != BP_NONE)
        g_slabs[s->next].prev = k;
    g_room[c] = k;
    s->listed = true;
}

static void room_remove(unsigned c, uint32_t k)
{
    slab_t *s = &g_slabs[k];
    if (s->prev != BP_NONE)
        g_slabs[s->prev].next = s->next;
    else
        g_room[c] = s->next;
    if (s->next != BP_NONE)
        g_slabs[s->next].prev = s->prev;
    s->listed = false;
}

/* A slab for class c: an empty one given back earlier, else the next fresh
 * one (made writable BP_COMMIT at a time); BP_NONE when none can be had. */
static uint32_t slab_new(unsigned c)
{
    uint32_t k = g_empty;
    if (k != BP_NONE) {
        g_empty = g_slabs[k].next;
        g_released -= BP_SLAB;
    } else {
        if ((size_t)g_fresh >= g_len / BP_SLAB)
            return BP_NONE;
        size_t end = ((size_t)g_fresh + 1) * BP_SLAB;
        if (end > g_writable) {
            size_t want = g_len - g_writable < BP_COMMIT ? g_len - g_writable : BP_COMMIT;
            if (mprotect(g_base + g_writable, want, PROT_READ | PROT_WRITE) != 0)
                return BP_NONE;
            g_writable += want;
        }
        k = g_fresh++;
    }
    g_slabs[k] = (slab_t){ .cls = (uint8_t)c, .prev = BP_NONE, .next = BP_NONE };
    room_add(c, k);
    return k;
}

void *blockpool_alloc(size_t n)
{
    if (n == 0 || n > BP_MAX || !blockpool_available())
        return cr_xmalloc(n);
    size_t   size;
    unsigned c = class_of(n, &size);
    void    *p = NULL;

    pthread_mutex_lock(&g_lock);
    uint32_t k = g_room[c] != BP_NONE ? g_room[c] : slab_new(c);
    if (k != BP_NONE) {
        slab_t *s = &g_slabs[k];
        if (s->free) {
            p = s->free;
            s->free = *(void **)p;
        } else {
            p = g_base + (size_t)k * BP_SLAB + s->bump;
            s->bump += (uint32_t)size;
        }
        s->live++;
        if (!s->free && s->bump + size > BP_SLAB)
            room_remove(c, k);                      /* full */
        g_in_use += size;
    }
    pthread_mutex_unlock(&g_lock);
    return p ? p : cr_xmalloc(n);   /* the reservation is full, or the system refused to commit more */
}

void blockpool_free(void *p)
{
    if (!p)
        return;
    if (!blockpool_available() || (char *)p < g_base || (char *)p >= g_base + g_len) {
        free(p);
        return;
    }
    uint32_t k = (uint32_t)(((char *)p - g_base) / BP_SLAB);   /* its slab knows the class */

    pthread_mutex_lock(&g_lock);
    slab_t  *s = &g_slabs[k];
    unsigned c = s->cls;
    *(void **)p = s->free;
    s->free = p;
    s->live--;
    g_in_use -= class_size(c);
    if (s->live == 0 && (s->listed ? g_room[c] != k || s->next != BP_NONE : g_room[c] != BP_NONE)) {
        /* empty, and its class has another slab with room: back to the system */
        if (s->listed)
            room_remove(c, k);
        (void)madvise(g_base + (size_t)k * BP_SLAB, BP_SLAB, MADV_DONTNEED);
        s->free = NULL;
        s->bump = 0;
        s->next = g_empty;
        g_empty = k;
        g_released += BP_SLAB;
    } else if (!s->listed) {
        room_add(c, k);
    }
    pthread_mutex_unlock(&g_lock);
}

void blockpool_stats(blockpool_stats_t *st)
{
    pthread_mutex_lock(&g_lock);
    st->reserved = g_len;
    st->writable = g_writable;
    st->in_use   = g_in_use;
    st->slabs    = (size_t)g_fresh * BP_SLAB - g_released;
    st->released = g_released;
    pthread_mutex_unlock(&g_lock);
}
