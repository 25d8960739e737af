/*
 * arena.c - region allocator for everything a request allocates.
 *
 * A request gets one arena; every allocation is a pointer bump in the
 * current block, and the whole request is freed in one step (arena_free or
 * arena_reset, which keeps the first block for the next request on the same
 * connection). Large allocations get a block of their own. Cleanup callbacks
 * (arena_on_free) let foreign objects such as compiled regexes share the
 * request's lifetime.
 */
#include "core.h"

#include <stdlib.h>
#include <string.h>

typedef struct arena_block {
    struct arena_block *next;
    size_t              size;     /* usable bytes after the header */
    size_t              used;
    _Alignas(16) unsigned char data[];
} arena_block_t;

typedef struct arena_cleanup {
    struct arena_cleanup *next;
    void                (*fn)(void *);
    void                 *ptr;
} arena_cleanup_t;

struct arena {
    arena_block_t   *head;        /* current block (most recent) */
    arena_block_t   *first;       /* kept across arena_reset */
    arena_cleanup_t *cleanups;
    size_t           next_size;
    size_t           total;       /* bytes handed out */
};

#define ARENA_ALIGN 16
#define ARENA_MIN_BLOCK 4096

static arena_block_t *block_new(size_t size)
{
    if (CR_UNLIKELY(size > SIZE_MAX - sizeof(arena_block_t))) cr_oom("arena block", size);
    arena_block_t *b = cr_xmalloc(sizeof(*b) + size);
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

arena_t *arena_new(size_t first_block)
{
    arena_t *a = cr_xcalloc(1, sizeof(*a));
    if (first_block < ARENA_MIN_BLOCK) first_block = ARENA_MIN_BLOCK;
    a->first = block_new(first_block);
    a->head = a->first;
    a->next_size = first_block * 2;
    return a;
}

static void run_cleanups(arena_t *a)
{
    arena_cleanup_t *c = a->cleanups;
    a->cleanups = NULL;
    for (; c; c = c->next) c->fn(c->ptr);   /* nodes live in the arena */
}

/* The largest block (up to ARENA_KEEP_MAX) is kept for the next request:
 * a connection whose requests outgrow the first block pays malloc once, not
 * on every request. */
#define ARENA_KEEP_MAX ((size_t)1 << 20)

void arena_reset(arena_t *a)
{
    arena_reset_keep(a, ARENA_KEEP_MAX);
}

/* The block kept is the largest of at most keep_max bytes, else (every block
 * is larger) the smallest one. */
void arena_reset_keep(arena_t *a, size_t keep_max)
{
    if (!a) return;
    run_cleanups(a);
    arena_block_t *keep = NULL;
    for (arena_block_t *b = a->head; b; b = b->next) {
        if (!keep) keep = b;
        else if (keep->size > keep_max ? b->size < keep->size : (b->size > keep->size && b->size <= keep_max))
            keep = b;
    }
    arena_block_t *b = a->head;
    while (b) {
        arena_block_t *n = b->next;
        if (b != keep) free(b);
        b = n;
    }
    a->head = a->first = keep;
    keep->next = NULL;
    keep->used = 0;
    a->next_size = keep->size * 2;   /* block growth starts over, as after arena_new */
    a->total = 0;
}

void arena_free(arena_t *a)
{
    if (!a) return;
    arena_reset(a);
    free(a->first);
    free(a);
}

void *arena_alloc(arena_t *a, size_t n)
{
    /* a size near SIZE_MAX would round up to 0 and hand out a block of
     * nothing: it is a request no memory can satisfy */
    if (CR_UNLIKELY(n > SIZE_MAX - ARENA_ALIGN)) cr_oom("arena", n);
    size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    arena_block_t *b = a->head;
    if (CR_LIKELY(b->size - b->used >= need)) {
        void *p = b->data + b->used;
        b->used += need;
        a->total += need;
        return p;
    }
    size_t size = a->next_size;
    if (size < need) size = need;
    arena_block_t *nb = block_new(size);
    if (a->next_size < (64u << 20)) a->next_size *= 2;
    nb->next = a->head;
    a->head = nb;
    nb->used = need;
    a->total += need;
    return nb->data;
}

void *arena_calloc(arena_t *a, size_t n)
{
    void *p = arena_alloc(a, n);
    memset(p, 0, n);
    return p;
}

char *arena_strndup(arena_t *a, const char *s, size_t n)
{
    if (CR_UNLIKELY(n == SIZE_MAX)) cr_oom("arena string", n);
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *arena_strdup(arena_t *a, const char *s)
{
    return arena_strndup(a, s, strlen(s));
}

void *arena_grow(arena_t *a, void *v, size_t n, size_t *cap, size_t size, size_t first)
{
    if (n < *cap) return v;
    size_t nc = *cap ? *cap * 2 : first;
    void  *w = arena_alloc(a, nc * size);     /* aborts on a size that overflows */
    if (n) memcpy(w, v, n * size);
    *cap = nc;
    return w;
}

char *arena_printf(arena_t *a, const char *fmt, ...)
{
    va_list ap;
    char    small[256];
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return arena_strdup(a, "");
    if ((size_t)n < sizeof small) return arena_strndup(a, small, (size_t)n);
    char *p = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

size_t arena_used(const arena_t *a)
{
    return a->total;
}

void arena_on_free(arena_t *a, void (*fn)(void *), void *ptr)
{
    arena_cleanup_t *c = arena_alloc(a, sizeof(*c));
    c->fn = fn;
    c->ptr = ptr;
    c->next = a->cleanups;
    a->cleanups = c;
}

/* ------------------------------------------------------------ sbuf */

void sb_init(sbuf_t *sb, arena_t *a, size_t cap)
{
    if (cap < 64) cap = 64;
    sb->a = a;
    sb->len = 0;
    sb->cap = cap;
    sb->p = a ? arena_alloc(a, cap) : cr_xmalloc(cap);
    sb->p[0] = '\0';
}

void sb_release(sbuf_t *sb)
{
    if (!sb->a) free(sb->p);
    sb->p = NULL;
    sb->len = sb->cap = 0;
}

static void sb_grow(sbuf_t *sb, size_t extra)
{
    if (CR_UNLIKELY(extra > SIZE_MAX / 2 - 1 - sb->len)) cr_oom("sbuf", extra);
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap) return;
    size_t cap = sb->cap * 2;
    while (cap < need) cap *= 2;            /* need <= SIZE_MAX / 2: no wrap */
    char *np;
    if (sb->a) {
        np = arena_alloc(sb->a, cap);
        memcpy(np, sb->p, sb->len + 1);
    } else {
        np = cr_xrealloc(sb->p, cap);
    }
    sb->p = np;
    sb->cap = cap;
}

void sb_add(sbuf_t *sb, const char *s, size_t n)
{
    if (CR_UNLIKELY(sb->len + n + 1 > sb->cap)) sb_grow(sb, n);
    memcpy(sb->p + sb->len, s, n);
    sb->len += n;
    sb->p[sb->len] = '\0';
}

void sb_adds(sbuf_t *sb, const char *s)
{
    sb_add(sb, s, strlen(s));
}

void sb_addc(sbuf_t *sb, char c)
{
    if (CR_UNLIKELY(sb->len + 2 > sb->cap)) sb_grow(sb, 1);
    sb->p[sb->len++] = c;
    sb->p[sb->len] = '\0';
}

void sb_printf(sbuf_t *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sb->p + sb->len, sb->cap - sb->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sb->cap - sb->len) {
        sb_grow(sb, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(sb->p + sb->len, sb->cap - sb->len, fmt, ap);
        va_end(ap);
    }
    sb->len += (size_t)n;
}

void sb_addi(sbuf_t *sb, int64_t v)
{
    char     tmp[24];
    char    *e = tmp + sizeof tmp;
    char    *q = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { *--q = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) *--q = '-';
    sb_add(sb, q, (size_t)(e - q));
}
