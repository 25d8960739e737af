/*
 * trivial_responder.c - the yardstick for GET /entities/{id}: libmicrohttpd
 * built and configured as coraine's HTTP layer is (internal thread pool,
 * epoll, answer on the second call, the same 16 KiB connection memory pool),
 * answering every request with a fixed
 * ~400-byte JSON entity. Whatever coraine does beyond this costs requests/s.
 *
 *   trivial_responder <port> [threads] [n] [spin_ns]
 *
 * With n > 0 the answer is a JSON array of n copies of the entity: the
 * yardstick for a query page of n entities (the same bytes on the wire).
 * With spin_ns > 0 each answer first busy-waits that long in user space (on
 * the vDSO clock: no system call), standing for a broker's own work per
 * request: test/perf/tune/ingest_headroom.py measures what each microsecond
 * of it costs in requests/s on the machine.
 */
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char entity[] =
    "{\"id\":\"urn:ngsi-ld:Vehicle:1\",\"type\":\"Vehicle\",\"speed\":{\"type\":\"Property\",\"value\":55,"
    "\"observedAt\":\"2024-01-01T00:00:00.000Z\",\"accuracy\":{\"type\":\"Property\",\"value\":0.5}},"
    "\"location\":{\"type\":\"GeoProperty\",\"value\":{\"type\":\"Point\",\"coordinates\":[-3.7,40.4]}},"
    "\"isParked\":{\"type\":\"Relationship\",\"object\":\"urn:ngsi-ld:Parking:1\"},"
    "\"brand\":{\"type\":\"Property\",\"value\":\"Mercedes\"}}";

static const char *body = entity;
static size_t      body_len = sizeof entity - 1;
static long        spin_ns;

static void spin(void)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < spin_ns);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **req_cls)
{
    static int marker;
    (void)cls; (void)url; (void)method; (void)version; (void)upload;
    if (*req_cls == NULL) { *req_cls = &marker; return MHD_YES; }
    if (*upload_size) { *upload_size = 0; return MHD_YES; }
    if (spin_ns > 0) spin();
    struct MHD_Response *r = MHD_create_response_from_buffer(body_len, (void *)body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Link", "<https://uri.etsi.org/ngsi-ld/v1/ngsi-ld-core-context-v1.8.jsonld>; "
                                       "rel=\"http://www.w3.org/ns/json-ld#context\"; type=\"application/ld+json\"");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

int main(int argc, char **argv)
{
    int port = argc > 1 ? atoi(argv[1]) : 8080;
    int threads = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int n = argc > 3 ? atoi(argv[3]) : 0;
    spin_ns = argc > 4 ? atol(argv[4]) : 0;
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n > 0) {
        size_t el = sizeof entity - 1;
        char  *b = malloc(n * (el + 1) + 2);
        if (!b) return 1;
        size_t k = 0;
        b[k++] = '[';
        for (int i = 0; i < n; i++) {
            if (i) b[k++] = ',';
            memcpy(b + k, entity, el);
            k += el;
        }
        b[k++] = ']';
        body = b;
        body_len = k;
    }
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port, NULL,
                                            NULL, handler, NULL, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
                                            MHD_OPTION_CONNECTION_LIMIT, 4096u,
                                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(16 * 1024), MHD_OPTION_END);
    if (!d) { fprintf(stderr, "cannot listen on %d\n", port); return 1; }
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigprocmask(SIG_BLOCK, &s, NULL);
    int sig;
    sigwait(&s, &sig);
    MHD_stop_daemon(d);
    return 0;
}
