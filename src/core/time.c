/*
 * time.c - clocks and the ISO 8601 forms NGSI-LD uses (4.6.3, 4.8).
 *
 * Times of the data model are int64 microseconds since the epoch (UTC);
 * they are parsed once on input and formatted once on output. The parser
 * is strict: a calendar-valid date, 24-hour time, optional fraction (up to
 * 9 digits, kept to the microsecond), and 'Z' or a ±hh:mm offset (required
 * in a DateTime). The output is UTC with 'Z', with a fraction of three (or six)
 * digits only when there is one.
 */
#include "core.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#define US_PER_S   1000000LL
#define US_PER_DAY (86400LL * US_PER_S)

int64_t cr_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * US_PER_S + ts.tv_nsec / 1000;
}

int64_t cr_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t cr_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian), Howard Hinnant's algorithm. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t  era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    const int64_t  era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool digits(const char **s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*s)[i];
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    *s += n;
    *out = v;
    return true;
}

static bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static bool parse_date_part(const char **s, int64_t *days)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, m, d;
    if (!digits(s, 4, &y) || **s != '-') return false;
    (*s)++;
    if (!digits(s, 2, &m) || **s != '-') return false;
    (*s)++;
    if (!digits(s, 2, &d)) return false;
    if (m < 1 || m > 12 || d < 1) return false;
    int md = mdays[m - 1] + (m == 2 && leap(y));
    if (d > md) return false;
    *days = days_from_civil(y, (unsigned)m, (unsigned)d);
    return true;
}

/* hh:mm:ss[.f+] -> µs since midnight (digits beyond the sixth are dropped) */
static bool parse_time_part(const char **s, int64_t *us)
{
    int h, mi, se;
    if (!digits(s, 2, &h) || **s != ':') return false;
    (*s)++;
    if (!digits(s, 2, &mi)) return false;
    se = 0;
    if (**s == ':') {
        (*s)++;
        if (!digits(s, 2, &se)) return false;
    }
    if (h > 23 || mi > 59 || se > 60) return false;
    int64_t frac = 0;
    if (**s == '.' || **s == ',') {
        (*s)++;
        int n = 0;
        while (**s >= '0' && **s <= '9') {
            if (n < 6) frac = frac * 10 + (**s - '0');
            n++;
            (*s)++;
        }
        if (n == 0 || n > 9) return false;
        while (n < 6) { frac *= 10; n++; }
    }
    *us = ((int64_t)h * 3600 + mi * 60 + se) * US_PER_S + frac;
    return true;
}

/* 'Z' or ±hh[:mm]; with no designator at all, the time is taken as UTC only
 * when the caller allows it (a Time of the q language; a DateTime always
 * needs one, 4.6.3). */
static bool parse_zone(const char **s, int64_t *offset_us, bool required)
{
    *offset_us = 0;
    if (**s == 'Z' || **s == 'z') { (*s)++; return true; }
    if (**s == '+' || **s == '-') {
        int sign = **s == '-' ? -1 : 1;
        (*s)++;
        int h, m = 0;
        if (!digits(s, 2, &h)) return false;
        if (**s == ':') (*s)++;
        if (**s) { if (!digits(s, 2, &m)) return false; }
        if (h > 23 || m > 59) return false;
        *offset_us = sign * ((int64_t)h * 3600 + m * 60) * US_PER_S;
        return true;
    }
    return !required && **s == '\0';
}

bool cr_datetime_parse(const char *s, int64_t *us)
{
    int64_t days, t, off;
    if (!s || !parse_date_part(&s, &days)) return false;
    if (*s != 'T' && *s != 't') return false;
    s++;
    if (!parse_time_part(&s, &t)) return false;
    if (!parse_zone(&s, &off, true)) return false;
    if (*s) return false;
    *us = days * US_PER_DAY + t - off;
    return true;
}

bool cr_date_parse(const char *s, int64_t *us)
{
    int64_t days;
    if (!s || !parse_date_part(&s, &days) || *s) return false;
    *us = days * US_PER_DAY;
    return true;
}

bool cr_time_parse(const char *s, int64_t *us)
{
    int64_t t, off;
    if (!s || !parse_time_part(&s, &t)) return false;
    if (!parse_zone(&s, &off, false) || *s) return false;
    t -= off;
    t %= US_PER_DAY;
    if (t < 0) t += US_PER_DAY;
    *us = t;
    return true;
}

static char *put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
    return p + 2;
}

/* The text of the value formatted last on this thread: a page renders the
 * same observedAt / modifiedAt over and over (one write stamps many
 * attributes), and a copy is a tenth of the formatting. */
static __thread int64_t dt_memo_us = INT64_MIN;
static __thread char    dt_memo_txt[32];
static __thread int     dt_memo_len;

static int datetime_format_slow(int64_t us, char out[32]);

int cr_datetime_format(int64_t us, char out[32])
{
    if (CR_LIKELY(us == dt_memo_us && us != INT64_MIN)) {
        memcpy(out, dt_memo_txt, (size_t)dt_memo_len + 1);
        return dt_memo_len;
    }
    int n = datetime_format_slow(us, out);
    memcpy(dt_memo_txt, out, (size_t)n + 1);
    dt_memo_len = n;
    dt_memo_us = us;
    return n;
}

static int datetime_format_slow(int64_t us, char out[32])
{
    int64_t days = us >= 0 ? us / US_PER_DAY : -((-us + US_PER_DAY - 1) / US_PER_DAY);
    int64_t rem = us - days * US_PER_DAY;
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    int64_t secs = rem / US_PER_S;
    int     frac = (int)(rem % US_PER_S);
    if (y < 0 || y > 9999) y = y < 0 ? 0 : 9999;
    /* fixed layout, no printf on this path */
    char *p = out;
    p = put2(p, (int)(y / 100));
    p = put2(p, (int)(y % 100));
    *p++ = '-';
    p = put2(p, (int)m);
    *p++ = '-';
    p = put2(p, (int)d);
    *p++ = 'T';
    p = put2(p, (int)(secs / 3600));
    *p++ = ':';
    p = put2(p, (int)(secs / 60 % 60));
    *p++ = ':';
    p = put2(p, (int)(secs % 60));
    if (frac) {
        int digits6 = frac % 1000 ? 6 : 3;      /* milliseconds, or microseconds when needed */
        int v = digits6 == 6 ? frac : frac / 1000;
        *p++ = '.';
        for (int i = digits6 - 1; i >= 0; i--) { p[i] = (char)('0' + v % 10); v /= 10; }
        p += digits6;
    }
    *p++ = 'Z';
    *p = '\0';
    return (int)(p - out);
}
