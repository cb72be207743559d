// A disk that fills up, without privileges: an LD_PRELOAD library for scripts/fault_test.sh (built as
// tg_disk_full; no sanitizer instrumentation, so it preloads into the normal and the ASan build alike).
//   TG_DISK_FULL_PATH=PREFIX  the "disk": every file whose path (as /proc/self/fd names it) starts with PREFIX
//   TG_DISK_FULL_BYTES=N      its capacity: the bytes written to those files by this process, all together
//                             (nothing is ever freed, as on a disk whose deletions come too late)
//   TG_DISK_FULL_AT=write     (default) the write that crosses N writes what still fits and fails with ENOSPC,
//                             and every later one fails at once: what a full local disk does
//   TG_DISK_FULL_AT=fsync     writes succeed; fsync/fdatasync of such a file fails with ENOSPC once more than N
//                             bytes were written: a file system that reports the full disk only when it
//                             flushes (NFS, delayed allocation)
// Without TG_DISK_FULL_PATH every call goes straight through. Intercepted: fwrite (glibc's stdio flushes its
// buffers through internal calls that no preload sees, so stdio is counted where the bytes enter it), write,
// pwrite, pwrite64, writev, fsync, fdatasync. Each failure sets errno = ENOSPC.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static const char* g_prefix;  // NULL: not configured, every call passes through
static long long g_capacity;
static int g_fail_at_fsync;
static atomic_llong g_used;

__attribute__((constructor)) static void disk_full_init(void) {
  const char* prefix = getenv("TG_DISK_FULL_PATH");
  const char* bytes = getenv("TG_DISK_FULL_BYTES");
  const char* at = getenv("TG_DISK_FULL_AT");
  if (!prefix || !*prefix || !bytes) return;
  g_capacity = atoll(bytes);
  g_fail_at_fsync = at && strcmp(at, "fsync") == 0;
  g_prefix = prefix;
}

static void* next_symbol(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "tg_disk_full: %s not found after this library\n", name);
    abort();
  }
  return f;
}

// Whether fd is a file on the "disk".
static int on_disk(int fd) {
  if (!g_prefix || fd < 0) return 0;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strncmp(path, g_prefix, strlen(g_prefix)) == 0;
}

// How many of `bytes` more fit (all of them in fsync mode, which only counts); errno = ENOSPC when not all.
static size_t reserve(size_t bytes) {
  const long long before = atomic_fetch_add(&g_used, (long long)bytes);
  if (g_fail_at_fsync) return bytes;
  const long long room = g_capacity - before;
  if (room >= (long long)bytes) return bytes;
  atomic_fetch_sub(&g_used, (long long)bytes - (room > 0 ? room : 0));
  errno = ENOSPC;
  return room > 0 ? (size_t)room : 0;
}

size_t fwrite(const void* data, size_t size, size_t count, FILE* stream) {
  static size_t (*real)(const void*, size_t, size_t, FILE*);
  if (!real) real = (size_t(*)(const void*, size_t, size_t, FILE*))next_symbol("fwrite");
  if (size == 0 || count == 0 || !on_disk(fileno(stream))) return real(data, size, count, stream);
  const size_t fits = reserve(size * count) / size;  // whole items only, as fwrite counts
  if (fits == count) return real(data, size, count, stream);
  const int saved = errno;
  const size_t done = fits > 0 ? real(data, size, fits, stream) : 0;
  errno = saved;
  return done;
}

ssize_t write(int fd, const void* data, size_t bytes) {
  static ssize_t (*real)(int, const void*, size_t);
  if (!real) real = (ssize_t(*)(int, const void*, size_t))next_symbol("write");
  if (bytes == 0 || !on_disk(fd)) return real(fd, data, bytes);
  const size_t fits = reserve(bytes);
  if (fits == 0) return -1;
  return real(fd, data, fits);  // a short count: the caller's next write gets ENOSPC
}

typedef ssize_t (*PwriteFn)(int, const void*, size_t, off_t);

static ssize_t limited_pwrite(PwriteFn real, int fd, const void* data, size_t bytes, off_t offset) {
  if (bytes == 0 || !on_disk(fd)) return real(fd, data, bytes, offset);
  const size_t fits = reserve(bytes);
  if (fits == 0) return -1;
  return real(fd, data, fits, offset);
}

ssize_t pwrite(int fd, const void* data, size_t bytes, off_t offset) {
  static PwriteFn real;
  if (!real) real = (PwriteFn)next_symbol("pwrite");
  return limited_pwrite(real, fd, data, bytes, offset);
}

ssize_t pwrite64(int fd, const void* data, size_t bytes, off_t offset) {
  static PwriteFn real;
  if (!real) real = (PwriteFn)next_symbol("pwrite64");
  return limited_pwrite(real, fd, data, bytes, offset);
}

ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  static ssize_t (*real)(int, const struct iovec*, int);
  if (!real) real = (ssize_t(*)(int, const struct iovec*, int))next_symbol("writev");
  size_t bytes = 0;
  for (int i = 0; i < iovcnt; ++i) bytes += iov[i].iov_len;
  if (bytes == 0 || !on_disk(fd)) return real(fd, iov, iovcnt);
  const size_t fits = reserve(bytes);
  if (fits == bytes) return real(fd, iov, iovcnt);
  if (fits == 0) return -1;
  struct iovec cut[iovcnt];  // only what fits: the leading buffers, the last of them cut
  int n = 0;
  for (size_t left = fits; left > 0; ++n) {
    cut[n] = iov[n];
    if (cut[n].iov_len > left) cut[n].iov_len = left;
    left -= cut[n].iov_len;
  }
  return real(fd, cut, n);
}

static int full_at_flush(int fd) {
  if (!g_fail_at_fsync || !on_disk(fd) || atomic_load(&g_used) <= g_capacity) return 0;
  errno = ENOSPC;
  return 1;
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))next_symbol("fsync");
  return full_at_flush(fd) ? -1 : real(fd);
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))next_symbol("fdatasync");
  return full_at_flush(fd) ? -1 : real(fd);
}
