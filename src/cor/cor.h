/*
 * cor.h - cor://, coraine's broker-to-broker protocol (doc/cor-protocol.md
 * is the specification; this header is the module's contract).
 *
 * One persistent TCP connection per peer carries many requests at once:
 * every frame names its request id, so answers come back in the order they
 * finish (no head-of-line blocking). A request is an NGSI-LD operation (an
 * operation code, or a method and path for any other resource), the few
 * headers that matter (tenant, Via, Link, Accept, Content-Type, the
 * contextSourceInfo pairs) and the body as received (JSON).
 *
 * Three parts:
 *  - the codec (cor_frame.c): frames to bytes and back, no I/O, no state:
 *    what the fuzz target and the unit test drive;
 *  - the server (cor_server.c, --corPort): a listener thread with epoll
 *    reads frames, a pool of workers (--connectionPoolSize plus
 *    --forwardThreads: a request waits for its forwards on its worker) runs
 *    each request through the HTTP
 *    API's own dispatch (http_exec: same routes, same handlers, same
 *    answers) and writes the answer as soon as it is ready;
 *  - the client (cor_client.c): one connection per peer (host:port), made
 *    on first use, checked by the egress policy, with a handshake and a
 *    window of requests in flight; reconnected with backoff after a failure;
 *    cor_submit() is asynchronous, cor_wait() collects the answer, so fwd/
 *    runs cor:// forwards in parallel with its HTTP ones.
 */
#ifndef CORAINE_COR_H
#define CORAINE_COR_H

#include "../core/core.h"
#include "../http/http.h"

/* ------------------------------------------------------------ the codec */

#define COR_VERSION     1
#define COR_MAGIC       0x434F5231u      /* "COR1", first bytes of a HELLO payload */
#define COR_HEAD        12               /* bytes of a frame header */
#define COR_MAX_FIELDS  64               /* header fields of one frame */
#define COR_FIELDS_MAX  ((size_t)16 << 10) /* bytes a frame may spend on its fields: the room of an HTTP head */
#define COR_WINDOW      64               /* requests in flight per connection this implementation accepts */

enum {                                   /* frame types (byte 4) */
    COR_HELLO = 1,                       /* handshake, both ways, first frame of each side */
    COR_REQUEST = 2,
    COR_RESPONSE = 3,
    COR_GOAWAY = 4,                      /* the sender closes the connection; a ProblemDetails says why */
};

enum {                                   /* operation codes of a REQUEST */
    COR_OP_RETRIEVE_ENTITY = 1,          /* GET    /ngsi-ld/v1/entities/{target} */
    COR_OP_QUERY_ENTITIES = 2,           /* GET    /ngsi-ld/v1/entities */
    COR_OP_QUERY_BATCH = 3,              /* POST   /ngsi-ld/v1/entityOperations/query */
    COR_OP_CREATE_ENTITY = 4,            /* POST   /ngsi-ld/v1/entities */
    COR_OP_UPDATE_ATTRS = 5,             /* PATCH  /ngsi-ld/v1/entities/{target}/attrs */
    COR_OP_APPEND_ATTRS = 6,             /* POST   /ngsi-ld/v1/entities/{target}/attrs */
    COR_OP_MERGE_ENTITY = 7,             /* PATCH  /ngsi-ld/v1/entities/{target} */
    COR_OP_REPLACE_ENTITY = 8,           /* PUT    /ngsi-ld/v1/entities/{target} */
    COR_OP_DELETE_ENTITY = 9,            /* DELETE /ngsi-ld/v1/entities/{target} */
    COR_OP_BATCH_CREATE = 10,            /* POST   /ngsi-ld/v1/entityOperations/create */
    COR_OP_BATCH_UPSERT = 11,            /* ... /upsert */
    COR_OP_BATCH_UPDATE = 12,            /* ... /update */
    COR_OP_BATCH_DELETE = 13,            /* ... /delete */
    COR_OP_BATCH_MERGE = 14,             /* ... /merge */
    COR_OP_HTTP = 255,                   /* COR_F_METHOD and COR_F_TARGET (a percent-encoded path) */
};

enum {                                   /* header field codes */
    COR_F_NAMED = 0,                     /* a header by name: name and value */
    COR_F_TARGET = 1,                    /* the entity id (decoded), or the path of COR_OP_HTTP */
    COR_F_QUERY = 2,                     /* the query string, percent-encoded as in a URL, without '?' */
    COR_F_METHOD = 3,                    /* COR_OP_HTTP only */
    COR_F_TENANT = 4,                    /* NGSILD-Tenant */
    COR_F_VIA = 5,                       /* Via */
    COR_F_LINK = 6,                      /* Link */
    COR_F_ACCEPT = 7,                    /* Accept */
    COR_F_CONTENT_TYPE = 8,              /* Content-Type */
    COR_F_WARNING = 9,                   /* NGSILD-Warning */
    COR_F_LOCATION = 10,                 /* Location */
    COR_F_RESULTS_COUNT = 11,            /* NGSILD-Results-Count */
    COR_F_LAST = 11,
};

enum { COR_ENC_NONE = 0, COR_ENC_JSON = 1 };   /* body encodings */

typedef struct cor_field {
    uint8_t     code;                    /* COR_F_* */
    const char *name;                    /* COR_F_NAMED only */
    size_t      name_len;
    const char *value;
    size_t      len;
} cor_field_t;

/* A decoded frame: the strings point into the decoded bytes (not
 * NUL-terminated); or the frame to encode. */
typedef struct cor_frame {
    uint8_t     type;                    /* COR_HELLO ... */
    uint32_t    id;                      /* request id; 0 for HELLO and GOAWAY */
    /* HELLO */
    uint16_t    version;                 /* the highest the sender speaks (the answer: the one chosen) */
    uint16_t    window;                  /* requests in flight the sender accepts */
    uint32_t    max_frame;               /* largest frame (all its bytes) the sender accepts */
    const char *alias;                   /* the sender's broker alias */
    size_t      alias_len;
    /* REQUEST */
    uint8_t     op;                      /* COR_OP_* */
    /* RESPONSE, GOAWAY */
    uint16_t    status;                  /* an HTTP status */
    /* REQUEST, RESPONSE, GOAWAY */
    uint8_t     enc;                     /* COR_ENC_* */
    cor_field_t fields[COR_MAX_FIELDS];
    size_t      n_fields;
    const char *body;
    size_t      body_len;
} cor_frame_t;

/* The total length of the frame at buf (n bytes available): 0 while fewer
 * than 4 bytes are there; -1 with p set when it exceeds max_frame or is
 * shorter than a header. */
int64_t cor_frame_size(const uint8_t *buf, size_t n, size_t max_frame, problem_t *p);
/* Decodes the one whole frame buf[0..n) (n from cor_frame_size). false with
 * p set (400, naming what is wrong) for anything malformed. */
bool cor_frame_decode(const uint8_t *buf, size_t n, cor_frame_t *f, problem_t *p);
/* Appends the frame to out. false when it does not fit the format (a field
 * of 64 KiB or more, too many fields). */
bool cor_frame_encode(sbuf_t *out, const cor_frame_t *f);
/* The header name of a field code ("NGSILD-Tenant"), NULL for NAMED and the
 * request-line fields; the code of a header name, COR_F_NAMED if none. */
const char *cor_field_header(uint8_t code);
uint8_t     cor_field_code(const char *name, size_t len);
/* The method and path of an operation: path prefix, whether the target
 * follows it, the suffix after the target. false for an unknown op. */
bool cor_op_route(uint8_t op, const char **method, const char **prefix, bool *has_target, const char **suffix);
/* The operation of method + path (decoded target in *target, a slice of
 * path that may hold %XX escapes: *target_len), COR_OP_HTTP if none. */
uint8_t cor_op_of(const char *method, const char *path, size_t path_len, const char **target, size_t *target_len);

/* ------------------------------------------------------------ start/stop */

/* The client always; the server when --corPort is set (routes: the HTTP
 * API's table, kept). alias: this broker's, sent in handshakes. */
bool cor_start(const http_route_t *routes, size_t n_routes, const char *alias, problem_t *p);
void cor_stop(void);

/* ------------------------------------------------------------ the client */

typedef struct cor_call cor_call_t;

enum { COR_OK = 0, COR_E_CONNECT, COR_E_REFUSED, COR_E_TIMEOUT, COR_E_LOST, COR_E_PROTOCOL, COR_E_TOO_BIG };

/* Whether url names cor://. */
bool cor_is_url(const char *url);
/* Sends method url (cor://host:port/ngsi-ld/v1/...?query: the path from
 * /ngsi-ld/ on) with the headers ("Name: value" lines) and body (NULL:
 * none) to the peer; answers by timeout_ms. Never blocks on the network.
 * NULL with p set when the URL is not a cor:// URL. */
cor_call_t *cor_submit(const char *method, const char *url, const char *const *headers, size_t n_headers,
                       const char *body, size_t body_len, long timeout_ms, problem_t *p);
/* Waits for the answer (or the call's deadline). COR_OK: *status and the
 * body (valid until cor_release) are set; else a COR_E_* with *why. */
int  cor_wait(cor_call_t *c, int *status, const char **body, size_t *body_len, const char **why);
/* The answer's header of that name (after cor_wait): *len bytes, not
 * NUL-terminated, valid until cor_release; NULL when absent. */
const char *cor_header(cor_call_t *c, const char *name, size_t *len);
/* Frees the call (an unanswered one is abandoned: its answer is dropped). */
void cor_release(cor_call_t *c);

typedef struct cor_stats {
    uint64_t server_connections, server_requests, server_errors;   /* errors: protocol errors (GOAWAY sent) */
    uint64_t client_connects, client_requests, client_failures;
} cor_stats_t;
void cor_get_stats(cor_stats_t *st);

/* internal: the output queue of a connection (cor_io.c) */
typedef struct cor_outq {
    char  *p;
    size_t len, off, cap;       /* bytes [off, len) wait to be sent */
} cor_outq_t;
void cor_outq_add(cor_outq_t *q, const char *b, size_t n);
/* Sends what the socket takes now; false when it failed. */
bool cor_outq_flush(cor_outq_t *q, int fd);
void cor_outq_free(cor_outq_t *q);

/* internal: the parts' start and stop (cor_start calls them) */
bool cor_server_start(const http_route_t *routes, size_t n_routes, const char *alias, problem_t *p);
void cor_server_stop(void);
bool cor_client_start(const char *alias, problem_t *p);
void cor_client_stop(void);
void cor_stat_add(int which, uint64_t n);
enum { CS_SRV_CONN, CS_SRV_REQ, CS_SRV_ERR, CS_CLI_CONN, CS_CLI_REQ, CS_CLI_FAIL };

#endif
