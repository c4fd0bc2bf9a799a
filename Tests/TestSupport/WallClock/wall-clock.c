// A wall clock set by hand, for a `redis-server` under test (HandHeldWallClock.swift): loaded
// with LD_PRELOAD, it answers `clock_gettime(CLOCK_REALTIME…)`, `gettimeofday` and `time` with
// the milliseconds written, as decimal digits, in the file `$CHAT_TEST_WALL_CLOCK`, so Redis's
// `TIME`, the append script's stamps and its key expiries follow the test's clock. Every other
// clock (the monotonic one Redis's event loop runs on) is the kernel's.
//
// It calls the kernel directly (syscall) and allocates nothing: the allocator Redis links
// (jemalloc) reads the clock while it starts, before anything else may be called safely, which
// is why libfaketime deadlocks in Redis and this file exists.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int clock_file = -2;

static int wall_millis(uint64_t *millis) {
    int file = __atomic_load_n(&clock_file, __ATOMIC_ACQUIRE);
    if (file == -2) {
        const char *path = getenv("CHAT_TEST_WALL_CLOCK");
        int opened = path ? (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC) : -1;
        int expected = -2;
        if (!__atomic_compare_exchange_n(&clock_file, &expected, opened, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) && opened >= 0)
            syscall(SYS_close, opened);
        file = __atomic_load_n(&clock_file, __ATOMIC_ACQUIRE);
    }
    if (file < 0) return 0;
    char text[24];
    long count = syscall(SYS_pread64, file, text, sizeof text, 0);
    if (count <= 0) return 0;
    uint64_t value = 0;
    for (long i = 0; i < count && text[i] >= '0' && text[i] <= '9'; i++) value = value * 10 + (uint64_t)(text[i] - '0');
    *millis = value;
    return 1;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    uint64_t millis;
    if ((clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) && wall_millis(&millis)) {
        now->tv_sec = (time_t)(millis / 1000);
        now->tv_nsec = (long)(millis % 1000) * 1000000;
        return 0;
    }
    return (int)syscall(SYS_clock_gettime, clock, now);
}

int gettimeofday(struct timeval *restrict now, void *restrict zone) {
    uint64_t millis;
    if (now && wall_millis(&millis)) {
        now->tv_sec = (time_t)(millis / 1000);
        now->tv_usec = (long)(millis % 1000) * 1000;
        return 0;
    }
    return (int)syscall(SYS_gettimeofday, now, zone);
}

time_t time(time_t *now) {
    uint64_t millis;
    struct timeval current;
    time_t seconds = wall_millis(&millis) ? (time_t)(millis / 1000) : (syscall(SYS_gettimeofday, &current, NULL), current.tv_sec);
    if (now) *now = seconds;
    return seconds;
}
