/*
 * time.c - clocks and the ISO 8601 forms NGSI-LD uses (4.6.3, 4.8).
 *
 * Times are kept as int64 milliseconds since the epoch (UTC) everywhere;
 * they are parsed once on input and formatted once on output. The parser
 * is strict: a calendar-valid date, 24-hour time, optional fraction (up to
 * 9 digits, kept to the millisecond), and 'Z' or a ±hh:mm offset (required
 * in a DateTime). The output is UTC with 'Z', with a fraction of three
 * digits only when the millisecond part is not zero.
 */
#include "core.h"

#include <time.h>

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

/* hh:mm:ss[.f+] -> ms since midnight */
static bool parse_time_part(const char **s, int64_t *ms)
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
            if (n < 3) frac = frac * 10 + (**s - '0');
            n++;
            (*s)++;
        }
        if (n == 0 || n > 9) return false;
        while (n < 3) { frac *= 10; n++; }
    }
    *ms = ((int64_t)h * 3600 + mi * 60 + se) * 1000 + frac;
    return true;
}

/* 'Z' or ±hh[:mm]; with no designator at all, the time is taken as UTC only
 * when the caller allows it (a Time of the q language; a DateTime always
 * needs one, 4.6.3). */
static bool parse_zone(const char **s, int64_t *offset_ms, bool required)
{
    *offset_ms = 0;
    if (**s == 'Z' || **s == 'z') { (*s)++; return true; }
    if (**s == '+' || **s == '-') {
        int sign = **s == '-' ? -1 : 1;
        (*s)++;
        int h, m = 0;
        if (!digits(s, 2, &h)) return false;
        if (**s == ':') (*s)++;
        if (**s) { if (!digits(s, 2, &m)) return false; }
        if (h > 23 || m > 59) return false;
        *offset_ms = sign * ((int64_t)h * 3600 + m * 60) * 1000;
        return true;
    }
    return !required && **s == '\0';
}

bool cr_parse_datetime(const char *s, int64_t *ms)
{
    int64_t days, t, off;
    if (!s || !parse_date_part(&s, &days)) return false;
    if (*s != 'T' && *s != 't') return false;
    s++;
    if (!parse_time_part(&s, &t)) return false;
    if (!parse_zone(&s, &off, true)) return false;
    if (*s) return false;
    *ms = days * 86400000LL + t - off;
    return true;
}

bool cr_parse_date(const char *s, int64_t *ms)
{
    int64_t days;
    if (!s || !parse_date_part(&s, &days) || *s) return false;
    *ms = days * 86400000LL;
    return true;
}

bool cr_parse_time(const char *s, int64_t *ms)
{
    int64_t t, off;
    if (!s || !parse_time_part(&s, &t)) return false;
    if (!parse_zone(&s, &off, false) || *s) return false;
    t -= off;
    t %= 86400000LL;
    if (t < 0) t += 86400000LL;
    *ms = t;
    return true;
}

int cr_format_datetime(int64_t ms, char out[32])
{
    int64_t days = ms >= 0 ? ms / 86400000LL : -((-ms + 86399999LL) / 86400000LL);
    int64_t rem = ms - days * 86400000LL;
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    int hh = (int)(rem / 3600000), mm = (int)(rem / 60000 % 60), ss = (int)(rem / 1000 % 60),
        fff = (int)(rem % 1000);
    if (y < 0 || y > 9999) y = y < 0 ? 0 : 9999;
    /* fixed layout, no printf on this path */
    char *p = out;
    p[0] = (char)('0' + y / 1000); p[1] = (char)('0' + y / 100 % 10);
    p[2] = (char)('0' + y / 10 % 10); p[3] = (char)('0' + y % 10); p[4] = '-';
    p[5] = (char)('0' + m / 10); p[6] = (char)('0' + m % 10); p[7] = '-';
    p[8] = (char)('0' + d / 10); p[9] = (char)('0' + d % 10); p[10] = 'T';
    p[11] = (char)('0' + hh / 10); p[12] = (char)('0' + hh % 10); p[13] = ':';
    p[14] = (char)('0' + mm / 10); p[15] = (char)('0' + mm % 10); p[16] = ':';
    p[17] = (char)('0' + ss / 10); p[18] = (char)('0' + ss % 10);
    if (fff == 0) {
        p[19] = 'Z'; p[20] = '\0';
        return 20;
    }
    p[19] = '.';
    p[20] = (char)('0' + fff / 100); p[21] = (char)('0' + fff / 10 % 10);
    p[22] = (char)('0' + fff % 10); p[23] = 'Z'; p[24] = '\0';
    return 24;
}
