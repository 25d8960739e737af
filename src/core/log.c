/*
 * log.c - one line per event on stderr (or --logFile), with time and level.
 * The level check happens in the LOG_* macros, so a disabled level costs a
 * comparison; nothing is logged on the hot path at the default level.
 */
#include "core.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int          cr_log_level = LOG_INFO;
static FILE *log_out;
static char *log_path;           /* --logFile, for cr_log_reopen */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
static _Thread_local const char *log_request;   /* the request id of what this thread handles */

void cr_log_set_request(const char *id)
{
    log_request = id;
}

const char *cr_log_request(void)
{
    return log_request;
}

void cr_log_open(const char *file, int level)
{
    cr_log_level = level;
    if (file && *file) {
        FILE *f = fopen(file, "a");
        if (f) {
            setvbuf(f, NULL, _IOLBF, 0);
            log_out = f;
            free(log_path);
            log_path = cr_xstrdup(file);
            return;
        }
        fprintf(stderr, "coraine: cannot open log file %s, logging to stderr\n", file);
    }
    log_out = NULL;
}

bool cr_log_reopen(void)
{
    if (!log_path) return true;
    FILE *f = fopen(log_path, "a");
    if (!f) {
        LOG_E("cannot reopen the log file %s: %s; logging on to the old one", log_path, strerror(errno));
        return false;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&log_lock);
    FILE *old = log_out;
    log_out = f;
    pthread_mutex_unlock(&log_lock);
    if (old) fclose(old);
    return true;
}

void cr_log(int level, const char *fmt, ...)
{
    char    line[2048];
    char    ts[32];
    va_list ap;
    if (level > cr_log_level) return;
    cr_datetime_format(cr_now_us(), ts);
    int n = snprintf(line, sizeof line, log_request ? "%s %-5s [%.128s] " : "%s %-5s ", ts,
                     level_names[level < 0 ? 0 : level > 3 ? 3 : level], log_request);
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    for (size_t i = (size_t)n; i < len; i++) if (line[i] == '\n') line[i] = ' ';
    line[len++] = '\n';
    pthread_mutex_lock(&log_lock);
    fwrite(line, 1, len, log_out ? log_out : stderr);
    pthread_mutex_unlock(&log_lock);
}
