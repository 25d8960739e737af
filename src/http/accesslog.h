/*
 * accesslog.h - private to http/: the --accessLog file (accesslog.c).
 */
#ifndef CORAINE_HTTP_ACCESSLOG_H
#define CORAINE_HTTP_ACCESSLOG_H

#include "http.h"

typedef struct accesslog_entry {
    const char *client;      /* address of the peer */
    const char *user;        /* the token's subject, or NULL */
    const char *method, *uri, *proto;   /* method and uri NULL: no request line (written "-") */
    const char *referer, *agent, *request_id;
    int         status;
    size_t      bytes;       /* of the body sent */
    int64_t     ns;          /* from the arrival of the head to the answer */
} accesslog_entry_t;

/* Opens --accessLog and starts its writer thread; false with p. */
bool accesslog_start(const char *path, problem_t *p);
/* Writes what is buffered, closes the file, stops the thread. */
void accesslog_stop(void);
bool accesslog_enabled(void);
/* Formats one line into the buffer (a memcpy under a short lock: the disk is
 * the writer thread's); a full buffer drops the line, counted. */
void accesslog_write(const accesslog_entry_t *e);
/* SIGHUP: the file is opened again by its name (after logrotate). */
void accesslog_reopen(void);
uint64_t accesslog_dropped(void);

#endif
