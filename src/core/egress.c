/*
 * egress.c - the egress policy: which hosts and addresses the broker itself
 * may connect to (remote @contexts, notification endpoints, forwarded
 * requests to registrations). A client must not be able to make the broker read
 * the cloud metadata service or other link-local endpoints for it (SSRF).
 *
 * Rules: built-in refusals (link-local 169.254.0.0/16 and fe80::/10, the
 * metadata addresses fd00:ec2::254 and 100.100.100.200, the metadata host
 * names), then the user's --egressDeny and --egressAllow lists (comma
 * separated CIDRs, addresses or host names; "*.example.org" matches the
 * subdomains). Precedence, for one connection:
 *   1. a host-name rule that matches the URL's host decides: the most
 *      specific (an exact name, else the longest "*.suffix"), then a user
 *      rule over a built-in one, then deny over allow;
 *   2. else the address rules that contain the connected address: the longest
 *      prefix decides; on a tie a user rule beats a built-in one, and deny
 *      beats allow;
 *   3. else the connection is allowed (loopback and private networks
 *      included: local context servers are common).
 * So `--egressAllow 169.254.169.254` lifts one built-in refusal, and
 * `--egressDeny 0.0.0.0/0,::/0 --egressAllow 10.1.0.0/16` allows one network only.
 * The address checked is the one actually connected (the caller hooks the
 * socket opening), so DNS answers and redirects cannot get around it.
 */
#include "core.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#define MAX_RULES 256

typedef struct rule {
    bool    deny;
    bool    builtin;
    bool    is_host;
    uint8_t addr[16];           /* IPv4 as ::ffff:a.b.c.d */
    int     prefix;             /* bits of addr, 0..128 */
    char    host[128];          /* lower case; "*.x" matches subdomains of x */
    char    text[140];          /* as written, for messages */
} rule_t;

static rule_t          g_rules[MAX_RULES];
static int             g_nrules;
static pthread_once_t  g_once = PTHREAD_ONCE_INIT;
static bool            g_configured;

static const char *const builtin_deny[] = {
    "169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32",
    "metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal",
};

static void v4_mapped(uint8_t out[16], const struct in_addr *a)
{
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, a, 4);
}

/* Parses one rule; false when it is neither a CIDR/address nor a host name. */
static bool parse_rule(const char *s, size_t n, bool deny, bool builtin, rule_t *r)
{
    char buf[140];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    memset(r, 0, sizeof *r);
    r->deny = deny;
    r->builtin = builtin;
    snprintf(r->text, sizeof r->text, "%s", buf);
    char *slash = strchr(buf, '/');
    int prefix = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        long v = strtol(slash + 1, &end, 10);
        if (*end || end == slash + 1 || v < 0 || v > 128)
            return false;
        prefix = (int)v;
    }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, buf, &a4) == 1) {
        if (prefix > 32)
            return false;
        v4_mapped(r->addr, &a4);
        r->prefix = 96 + (prefix < 0 ? 32 : prefix);
        return true;
    }
    if (inet_pton(AF_INET6, buf, &a6) == 1) {
        memcpy(r->addr, &a6, 16);
        r->prefix = prefix < 0 ? 128 : prefix;
        return true;
    }
    if (slash)
        return false;
    /* a host name: letters, digits, '-', '.', an optional leading "*." */
    for (size_t i = 0; buf[i]; i++) {
        char c = buf[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                  c == '.' || (c == '*' && i == 0 && buf[1] == '.');
        if (!ok)
            return false;
        r->host[i] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
    }
    r->is_host = true;
    return true;
}

static bool add_list(const char *list, bool deny, bool builtin, char *err, size_t errlen)
{
    for (const char *s = list; s && *s;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        size_t n = strcspn(s, ", ");
        if (g_nrules >= MAX_RULES) {
            snprintf(err, errlen, "more than %d egress rules", MAX_RULES);
            return false;
        }
        if (!parse_rule(s, n, deny, builtin, &g_rules[g_nrules])) {
            snprintf(err, errlen, "--egress%s: '%.*s' is neither an address, a CIDR nor a host name",
                     deny ? "Deny" : "Allow", (int)(n > 100 ? 100 : n), s);
            return false;
        }
        g_nrules++;
        s += n;
    }
    return true;
}

static void add_builtins(void)
{
    char err[160];
    for (size_t i = 0; i < CR_ARRAY_LEN(builtin_deny); i++)
        add_list(builtin_deny[i], true, true, err, sizeof err);
}

static void init_default(void)
{
    if (!g_configured)
        add_builtins();
}

bool egress_configure(const char *allow, const char *deny, char *err, size_t errlen)
{
    g_nrules = 0;
    g_configured = true;
    add_builtins();
    return add_list(deny, true, false, err, errlen) && add_list(allow, false, false, err, errlen);
}

static bool host_matches(const rule_t *r, const char *host)
{
    if (r->host[0] == '*') {                        /* "*.x": any subdomain of x */
        size_t hl = strlen(host), sl = strlen(r->host + 1);
        return hl > sl && strcasecmp(host + hl - sl, r->host + 1) == 0;
    }
    return strcasecmp(host, r->host) == 0;
}

/* An exact name is more specific than any "*.suffix"; longer suffixes more
 * than shorter ones. */
static int host_specificity(const rule_t *r)
{
    return r->host[0] == '*' ? (int)strlen(r->host) : 1000;
}

static bool prefix_matches(const rule_t *r, const uint8_t a[16])
{
    int bits = r->prefix;
    int bytes = bits / 8;
    if (memcmp(r->addr, a, (size_t)bytes) != 0)
        return false;
    int rest = bits % 8;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (r->addr[bytes] & mask) == (a[bytes] & mask);
}

bool egress_check_host(const char *host, const struct sockaddr *sa, char *why, size_t whylen)
{
    pthread_once(&g_once, init_default);
    char hostbuf[256] = "";
    if (host) {                                     /* [v6] literal: the brackets go */
        size_t hl = strlen(host);
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof hostbuf) {
            memcpy(hostbuf, host + 1, hl - 2);
            host = hostbuf;
        }
        size_t n = strlen(host);
        if (n && host[n - 1] == '.' && n < sizeof hostbuf) {   /* "metadata.google.internal." */
            memmove(hostbuf, host, n - 1);
            hostbuf[n - 1] = '\0';
            host = hostbuf;
        }
    }
    const rule_t *best = NULL;
    if (host && *host) {
        for (int i = 0; i < g_nrules; i++) {
            const rule_t *r = &g_rules[i];
            if (!r->is_host || !host_matches(r, host))
                continue;
            int rs = host_specificity(r), bs = best ? host_specificity(best) : -1;
            if (!best || rs > bs ||
                (rs == bs && ((best->builtin && !r->builtin) || (best->builtin == r->builtin && r->deny))))
                best = r;
        }
        if (best) {
            if (best->deny)
                snprintf(why, whylen, "the host %.100s (rule %s)", host, best->text);
            return !best->deny;
        }
    }
    if (!sa)
        return true;
    uint8_t a[16];
    char text[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        v4_mapped(a, &s4->sin_addr);
        inet_ntop(AF_INET, &s4->sin_addr, text, sizeof text);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        memcpy(a, &s6->sin6_addr, 16);
        inet_ntop(AF_INET6, &s6->sin6_addr, text, sizeof text);
    } else {
        snprintf(why, whylen, "an address of family %d", sa->sa_family);
        return false;
    }
    for (int i = 0; i < g_nrules; i++) {
        const rule_t *r = &g_rules[i];
        if (r->is_host || !prefix_matches(r, a))
            continue;
        if (!best || r->prefix > best->prefix ||
            (r->prefix == best->prefix && ((best->builtin && !r->builtin) || (best->builtin == r->builtin && r->deny))))
            best = r;
    }
    if (best && best->deny) {
        snprintf(why, whylen, "the address %s (rule %s)", text, best->text);
        return false;
    }
    return true;
}

/* url without "user:password@", "?query" and "#fragment", into out[cap] */
void egress_url_shown(const char *url, char *out, size_t cap)
{
    const char *s = url ? url : "", *scheme = strstr(s, "://");
    size_t      k = 0;
    if (!cap) return;
    if (scheme) {
        size_t n = (size_t)(scheme - s) + 3;
        const char *auth = s + n, *end = auth + strcspn(auth, "/?#"), *at = memchr(auth, '@', (size_t)(end - auth));
        for (size_t i = 0; i < n && k < cap - 1; i++) out[k++] = s[i];
        s = at ? at + 1 : auth;
    }
    for (; *s && *s != '?' && *s != '#' && k < cap - 1; s++) out[k++] = *s;
    while (k > 0 && out[k - 1] == '/') k--;
    out[k] = '\0';
}
