/*
 * cor_io.c - the output queue both ends of a cor:// connection write
 * through (cor.h): frames are appended, and sent as far as a non-blocking
 * socket takes them; what is left waits for the next flush (EPOLLOUT).
 */
#include "cor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

void cor_outq_add(cor_outq_t *q, const char *b, size_t n)
{
    if (q->len + n > q->cap) {
        size_t cap = q->cap ? q->cap : 16384;
        while (cap < q->len + n) cap *= 2;
        q->p = cr_xrealloc(q->p, cap);
        q->cap = cap;
    }
    memcpy(q->p + q->len, b, n);
    q->len += n;
}

bool cor_outq_flush(cor_outq_t *q, int fd)
{
    while (q->off < q->len) {
        ssize_t k = send(fd, q->p + q->off, q->len - q->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return false;
        }
        q->off += (size_t)k;
    }
    if (q->off == q->len) q->off = q->len = 0;
    return true;
}

void cor_outq_free(cor_outq_t *q)
{
    free(q->p);
    *q = (cor_outq_t){0};
}
