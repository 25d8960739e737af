/*
 * ld_link.c - the HTTP Link header (RFC 8288) as JSON-LD 1.1 uses it to name
 * a context (6.3.5):
 *
 *   Link: <http://x/ctx.jsonld>; rel="http://www.w3.org/ns/json-ld#context";
 *         type="application/ld+json"
 *
 * Several comma-separated links may come in one header; exactly one must be
 * the JSON-LD context link (rel required, type optional but when present
 * application/ld+json). Whitespace is tolerated wherever RFC 8288 allows it.
 */
#include "ld_int.h"

#include <string.h>
#include <strings.h>

#define JSONLD_CONTEXT_REL "http://www.w3.org/ns/json-ld#context"

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Reads a token or a quoted-string at *ps into out (unescaped, truncated to
 * outsz-1); false when malformed. */
static bool read_value(const char **ps, char *out, size_t outsz)
{
    const char *s = *ps;
    size_t n = 0;
    if (*s == '"') {
        s++;
        for (;;) {
            char c = *s++;
            if (c == '\0')
                return false;                       /* unterminated */
            if (c == '"')
                break;
            if (c == '\\') {
                c = *s++;
                if (c == '\0')
                    return false;
            }
            if (n + 1 < outsz)
                out[n++] = c;
        }
    } else {
        while (is_tchar(*s) || *s == '/' || *s == ':') {   /* tolerate unquoted URIs */
            if (n + 1 < outsz)
                out[n++] = *s;
            s++;
        }
        if (n == 0)
            return false;
    }
    out[n] = '\0';
    *ps = s;
    return true;
}

static bool rel_has_context(const char *rel)
{
    size_t rl = strlen(JSONLD_CONTEXT_REL);
    for (const char *s = rel; *s;) {
        while (*s == ' ' || *s == '\t')
            s++;
        const char *e = s;
        while (*e && *e != ' ' && *e != '\t')
            e++;
        if ((size_t)(e - s) == rl && strncasecmp(s, JSONLD_CONTEXT_REL, rl) == 0)
            return true;
        s = e;
    }
    return false;
}

bool ld_link_parse(const char *header, const char **url, size_t *len, problem_t *p)
{
    const char *s = header ? header : "";
    const char *found = NULL;
    size_t found_len = 0;
    int nfound = 0;

    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        if (!*s)
            break;
        if (*s != '<')
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "Link header: expected '<' at offset %zu", (size_t)(s - header));
        const char *u = s + 1;
        const char *e = strchr(u, '>');
        if (!e)
            return problem_set(p, PB_BAD_REQUEST_DATA, "Link header: missing '>' after the URL");
        s = e + 1;

        char rel[256] = "", type[256] = "";
        bool have_rel = false, have_type = false;
        for (;;) {
            s = skip_ws(s);
            if (*s == ',' || *s == '\0')
                break;
            if (*s != ';')
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "Link header: expected ';' or ',' at offset %zu", (size_t)(s - header));
            s = skip_ws(s + 1);
            if (*s == ';' || *s == ',' || *s == '\0')
                continue;                           /* empty parameter */
            const char *name = s;
            while (is_tchar(*s))
                s++;
            size_t nl = (size_t)(s - name);
            if (nl == 0)
                return problem_set(p, PB_BAD_REQUEST_DATA,
                                   "Link header: bad parameter name at offset %zu", (size_t)(s - header));
            s = skip_ws(s);
            char val[256] = "";
            if (*s == '=') {
                s = skip_ws(s + 1);
                if (!read_value(&s, val, sizeof val))
                    return problem_set(p, PB_BAD_REQUEST_DATA,
                                       "Link header: bad value of parameter '%.*s'", (int)nl, name);
            }
            if (nl == 3 && strncasecmp(name, "rel", 3) == 0 && !have_rel) {
                have_rel = true;
                memcpy(rel, val, sizeof rel);
            } else if (nl == 4 && strncasecmp(name, "type", 4) == 0 && !have_type) {
                have_type = true;
                memcpy(type, val, sizeof type);
            }
        }
        if (!have_rel || !rel_has_context(rel))
            continue;                               /* some other link */
        if (have_type && strcasecmp(type, "application/ld+json") != 0)
            return problem_set(p, PB_BAD_REQUEST_DATA,
                               "Link header: a JSON-LD @context link must have type "
                               "\"application/ld+json\", not \"%.100s\"", type);
        while (u < e && (*u == ' ' || *u == '\t'))
            u++;
        const char *ue = e;
        while (ue > u && (ue[-1] == ' ' || ue[-1] == '\t'))
            ue--;
        if (ue == u)
            return problem_set(p, PB_BAD_REQUEST_DATA, "Link header: empty URL");
        found = u;
        found_len = (size_t)(ue - u);
        nfound++;
    }
    if (nfound == 0)
        return problem_set(p, PB_BAD_REQUEST_DATA,
                           "Link header is not a JSON-LD @context link (rel=\"" JSONLD_CONTEXT_REL "\")");
    if (nfound > 1)
        return problem_set(p, PB_BAD_REQUEST_DATA, "Link header: more than one JSON-LD @context link");
    *url = found;
    *len = found_len;
    return true;
}
