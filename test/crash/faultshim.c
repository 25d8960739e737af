/*
 * faultshim.c - fault injection for corDB's files, as an LD_PRELOAD library
 * (built by `make faultshim`, used by test/functional/test_cordb_disk.py and
 * test/crash/crash_loop.py). Nothing of it is in the broker.
 *
 * With CORAINE_FAULT_DIR=D in the environment, before each pwrite / pwritev /
 * write / fallocate / fdatasync / fsync on a file of corDB (its name has
 * "/log-" or "/snap-") the shim looks at D:
 *   D/write  containing ENOSPC or EIO: the write fails with that errno, and
 *            so does the log's space ahead (fallocate, the zeros' pwritev):
 *            appends go on into the space the segment has already (a memcpy
 *            into its mapping: allocated, nothing can fail), then meet the
 *            fault at their pwrite past it;
 *   D/nommap (at the broker's start): mmap of a log segment fails, so every
 *            append is a pwrite (the powercut below sees only those);
 *   D/fsync  containing ENOSPC or EIO: fdatasync / fsync fail so;
 *   D/fsyncdelay containing N: each fdatasync / fsync of a log segment
 *            first sleeps N ms (a slow disk: writes wait long for it);
 *   D/snapcrash: a write to a snapshot file kills the process (SIGKILL),
 *            a crash in the middle of a snapshot;
 *   D/powercut: the next write to a log segment cuts every segment back to
 *            its end at its last successful fdatasync / fsync and kills the
 *            process: what a machine crash leaves when the unsynced pages
 *            never reached the disk (the shim notes each segment's end
 *            before each successful sync: the end of its pwrites, or its
 *            size when none was seen; the space ahead does not count; log
 *            writes are serialized with the cut, so none lands after it).
 *            Appends through the mapping are not seen: use D/nommap.
 * And each fdatasync of corDB history's log (history.log) appends a byte
 * to D/hsyncs (when D exists): a test counts them; D/hfsync containing
 * ENOSPC or EIO makes those fdatasyncs fail so, and D/hwrite containing
 * ENOSPC or EIO makes the writes to history.log (and history.log.tmp) fail.
 * Removing the file ends the fault: the disk "works again".
 */
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <pthread.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static const char *fault_dir(void)
{
    static const char *d;
    static int         done;

    if (!done) {
        d    = getenv("CORAINE_FAULT_DIR");
        done = 1;
    }
    return d;
}

/* The start of D/name in buf (NUL-terminated): its length, -1 when the file
 * is not there (errno kept). */
static ssize_t fault_file(const char *name, char *buf, size_t size)
{
    const char *d = fault_dir();
    char        path[4096];
    int         fd, saved = errno;
    ssize_t     n;

    buf[0] = '\0';
    if (!d)
        return -1;
    snprintf(path, sizeof(path), "%s/%s", d, name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return -1;
    }
    n = read(fd, buf, size - 1);
    close(fd);
    errno = saved;
    buf[n > 0 ? n : 0] = '\0';
    return n > 0 ? n : 0;
}

/* 0: no fault; else the errno D/name asks for (-1: the file exists). */
static int fault(const char *name)
{
    char    buf[32];
    ssize_t n = fault_file(name, buf, sizeof(buf));

    if (n < 0)
        return 0;
    if (n > 0 && !strncmp(buf, "ENOSPC", 6))
        return ENOSPC;
    if (n > 0 && !strncmp(buf, "EIO", 3))
        return EIO;
    return -1;
}

/* 1: a log segment, 2: a snapshot, 0: another file. */
static int db_file(int fd)
{
    char    link[64], path[4096];
    ssize_t n;
    int     saved = errno;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    errno = saved;
    if (n <= 0)
        return 0;
    path[n] = '\0';
    if (strstr(path, "/log-"))
        return 1;
    if (strstr(path, "/snap-"))
        return 2;
    return 0;
}

/* powercut: each log segment's size at its last good sync */
static pthread_mutex_t cut_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char path[512]; off_t size; } synced[256];
static int n_synced;

/* each log segment's end of pwrites (the records; not the space ahead) */
static struct { char path[512]; off_t end; } wrote[256];
static int n_wrote;

static int fd_path(int fd, char *path, size_t n);

/* Under cut_mu. */
static void note_wrote(int fd, off_t end)
{
    char path[512];
    int  i;

    if (!fd_path(fd, path, sizeof(path)))
        return;
    for (i = 0; i < n_wrote && strcmp(wrote[i].path, path); i++)
        ;
    if (i == n_wrote && n_wrote < (int)(sizeof(wrote) / sizeof(wrote[0])))
        snprintf(wrote[n_wrote++].path, sizeof(wrote[0].path), "%s", path);
    if (i < n_wrote && end > wrote[i].end)
        wrote[i].end = end;
}

/* The end of fd's pwrites, or size when none was seen. */
static off_t wrote_end(int fd, off_t size)
{
    char  path[512];
    off_t end = size;

    if (!fd_path(fd, path, sizeof(path)))
        return size;
    pthread_mutex_lock(&cut_mu);
    for (int i = 0; i < n_wrote; i++)
        if (!strcmp(wrote[i].path, path))
            end = wrote[i].end;
    pthread_mutex_unlock(&cut_mu);
    return end;
}

static int fd_path(int fd, char *path, size_t n)
{
    char    link[64];
    ssize_t k;
    int     saved = errno;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    k = readlink(link, path, n - 1);
    errno = saved;
    if (k <= 0)
        return 0;
    path[k] = '\0';
    return 1;
}

static void note_synced(int fd, off_t size)
{
    char path[512];
    int  i;

    if (!fd_path(fd, path, sizeof(path)))
        return;
    pthread_mutex_lock(&cut_mu);
    for (i = 0; i < n_synced && strcmp(synced[i].path, path); i++)
        ;
    if (i == n_synced && n_synced < (int)(sizeof(synced) / sizeof(synced[0])))
        snprintf(synced[n_synced++].path, sizeof(synced[0].path), "%s", path);
    if (i < n_synced && size > synced[i].size)
        synced[i].size = size;
    pthread_mutex_unlock(&cut_mu);
}

/* Under cut_mu: the cut, then the kill (no write can come between). */
static void power_cut(void)
{
    for (int i = 0; i < n_synced; i++)
        if (truncate(synced[i].path, synced[i].size) != 0 && errno != ENOENT)
            perror("faultshim: truncate");
    kill(getpid(), SIGKILL);
}

static int write_fault(int fd)
{
    int k;

    if (!fault_dir())
        return 0;
    k = db_file(fd);
    if (!k)
        return 0;
    if (k == 2 && fault("snapcrash"))
        kill(getpid(), SIGKILL);
    k = fault("write");
    return k > 0 ? k : 0;
}

static int sync_fault(int fd)
{
    int k;

    if (!fault_dir() || !db_file(fd))
        return 0;
    k = fault("fsync");
    return k > 0 ? k : 0;
}

static int is_history_log(int fd);

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    static ssize_t (*real)(int, const void *, size_t, off_t);
    int            e = write_fault(fd);
    ssize_t        k;

    if (e) {
        errno = e;
        return -1;
    }
    if (!real)
        real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    if (!fault_dir() || db_file(fd) != 1)
        return real(fd, buf, n, off);
    pthread_mutex_lock(&cut_mu);
    if (fault("powercut"))
        power_cut();
    k = real(fd, buf, n, off);
    if (k > 0)
        note_wrote(fd, off + k);
    pthread_mutex_unlock(&cut_mu);
    return k;
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
    static ssize_t (*real)(int, const struct iovec *, int, off_t);
    int            e = write_fault(fd);

    if (e) {
        errno = e;
        return -1;
    }
    if (!real)
        real = (ssize_t (*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    return real(fd, iov, n, off);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t off)
{
    return pwritev(fd, iov, n, off);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    static int (*real)(int, int, off_t, off_t);
    int        e = write_fault(fd);

    if (e) {
        errno = e;
        return -1;
    }
    if (!real)
        real = (int (*)(int, int, off_t, off_t))dlsym(RTLD_NEXT, "fallocate");
    return real(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    static void *(*real)(void *, size_t, int, int, int, off_t);

    if (fd >= 0 && fault_dir() && db_file(fd) == 1 && fault("nommap")) {
        errno = ENODEV;
        return MAP_FAILED;
    }
    if (!real)
        real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    return real(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return pwrite(fd, buf, n, off);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    static ssize_t (*real)(int, const void *, size_t);
    int            e = write_fault(fd);

    if (!e && fault_dir() && is_history_log(fd)) {
        int h = fault("hwrite");

        e = h > 0 ? h : 0;
    }
    if (e) {
        errno = e;
        return -1;
    }
    if (!real)
        real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    return real(fd, buf, n);
}

/* D/fsyncdelay: its number of ms (0: none). */
static int sync_delay_ms(void)
{
    char buf[32];

    return fault_file("fsyncdelay", buf, sizeof(buf)) > 0 ? atoi(buf) : 0;
}

/* A sync of a log segment: its size before the call is on disk after it. */
static int synced_call(int (*real)(int), int fd)
{
    struct stat st;
    int         log = fault_dir() && db_file(fd) == 1;
    int         have = log && fstat(fd, &st) == 0;
    int         ms = log ? sync_delay_ms() : 0;

    if (ms > 0)
        usleep((useconds_t)ms * 1000);
    int rc = real(fd);

    if (rc == 0 && have)
        note_synced(fd, wrote_end(fd, st.st_size));
    return rc;
}

/* D/hsyncs gets a byte per fdatasync of history.log; 1 when fd is it. */
static int count_history_sync(int fd)
{
    char        link[64], path[4096];
    const char *d = fault_dir();
    ssize_t     n;
    int         saved = errno, is = 0;

    if (!d)
        return 0;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    if (n > 0) {
        path[n] = '\0';
        if (strstr(path, "/history.log")) {
            is = 1;
            snprintf(path, sizeof(path), "%s/hsyncs", d);
            int c = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
            if (c >= 0) {
                if (write(c, "s", 1) != 1) { /* a test sees a short count */ }
                close(c);
            }
        }
    }
    errno = saved;
    return is;
}

/* 1 when fd is history.log (or its compaction's history.log.tmp). */
static int is_history_log(int fd)
{
    char path[4096];

    return fd_path(fd, path, sizeof(path)) && strstr(path, "/history.log") != NULL;
}

int fdatasync(int fd)
{
    static int (*real)(int);
    int        e = sync_fault(fd);

    if (count_history_sync(fd) && !e) {
        int h = fault("hfsync");

        e = h > 0 ? h : 0;
    }

    if (e) {
        errno = e;
        return -1;
    }
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return synced_call(real, fd);
}

int fsync(int fd)
{
    static int (*real)(int);
    int        e = sync_fault(fd);

    if (e) {
        errno = e;
        return -1;
    }
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return synced_call(real, fd);
}
