#define _GNU_SOURCE
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include "CSocketShims.h"

int socketstreams_accept4(int fd, void *address, unsigned int *length, int flags) {
    return accept4(fd, (struct sockaddr *)address, (socklen_t *)length, flags);
}

_Static_assert(SOCKETCORE_EPOLLIN == EPOLLIN, "EPOLLIN");
_Static_assert(SOCKETCORE_EPOLLOUT == EPOLLOUT, "EPOLLOUT");
_Static_assert(SOCKETCORE_EPOLLERR == EPOLLERR, "EPOLLERR");
_Static_assert(SOCKETCORE_EPOLLHUP == EPOLLHUP, "EPOLLHUP");
_Static_assert(SOCKETCORE_EPOLLRDHUP == EPOLLRDHUP, "EPOLLRDHUP");
_Static_assert(SOCKETCORE_EPOLLET == (unsigned int)EPOLLET, "EPOLLET");

int socketcore_epoll_create(void) {
    return epoll_create1(EPOLL_CLOEXEC);
}

int socketcore_epoll_add(int epfd, int fd, unsigned int events, void *data) {
    struct epoll_event event = {.events = events, .data = {.ptr = data}};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event);
}

int socketcore_epoll_remove(int epfd, int fd) {
    // Kernels before 2.6.9 want a non-null event even for EPOLL_CTL_DEL.
    struct epoll_event unused = {0};
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &unused);
}

int socketcore_epoll_wait(int epfd, socketcore_epoll_event *events, int capacity, int timeout) {
    // struct epoll_event is packed on x86-64, so it is read here, not from Swift.
    struct epoll_event ready[256];
    if (capacity > 256) capacity = 256;
    int count = epoll_wait(epfd, ready, capacity, timeout);
    for (int i = 0; i < count; i++) {
        events[i].events = ready[i].events;
        events[i].data = ready[i].data.ptr;
    }
    return count;
}
