#ifndef CSOCKETSHIMS_H
#define CSOCKETSHIMS_H

// No system headers here: including <sys/socket.h> would make this module the owner of its
// declarations in Swift and hide them from Glibc's. `address` is a struct sockaddr *, `length`
// a socklen_t * (an unsigned int on Linux).

/// accept4(2): accepts a connection and sets SOCK_NONBLOCK / SOCK_CLOEXEC on it atomically.
/// Glibc declares accept4 only under _GNU_SOURCE, so Swift's Glibc module does not import it;
/// without it close-on-exec takes a second call, and a process forked in between inherits the socket.
int socketstreams_accept4(int fd, void *address, unsigned int *length, int flags);

// epoll(7), which Swift's Glibc module does not import. The flags repeat <sys/epoll.h>'s values
// (shims.c checks them at compile time); an event carries a pointer, as epoll_data_t's ptr.

#define SOCKETCORE_EPOLLIN 0x001u
#define SOCKETCORE_EPOLLOUT 0x004u
#define SOCKETCORE_EPOLLERR 0x008u
#define SOCKETCORE_EPOLLHUP 0x010u
#define SOCKETCORE_EPOLLRDHUP 0x2000u
#define SOCKETCORE_EPOLLET 0x80000000u

/// One reported event: what is ready, and the pointer the descriptor was added with.
typedef struct socketcore_epoll_event {
    unsigned int events;
    void *data;
} socketcore_epoll_event;

/// epoll_create1(EPOLL_CLOEXEC): a new epoll descriptor, or -1 and errno.
int socketcore_epoll_create(void);
/// epoll_ctl(EPOLL_CTL_ADD): watches `fd` for `events`, reporting `data` with them; 0 or -1 and errno.
int socketcore_epoll_add(int epfd, int fd, unsigned int events, void *data);
/// epoll_ctl(EPOLL_CTL_DEL): stops watching `fd`; 0 or -1 and errno.
int socketcore_epoll_remove(int epfd, int fd);
/// epoll_wait: up to `capacity` (at most 256) ready events into `events`, waiting at most
/// `timeout` milliseconds; their count, or -1 and errno.
int socketcore_epoll_wait(int epfd, socketcore_epoll_event *events, int capacity, int timeout);

#endif
