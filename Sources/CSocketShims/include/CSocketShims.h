#ifndef CSOCKETSHIMS_H
#define CSOCKETSHIMS_H

// No system headers here: including <sys/socket.h> would make this module the owner of its
// declarations in Swift and hide them from Glibc's. `address` is a struct sockaddr *, `length`
// a socklen_t * (an unsigned int on Linux).

/// accept4(2): accepts a connection and sets SOCK_NONBLOCK / SOCK_CLOEXEC on it atomically.
/// Glibc declares accept4 only under _GNU_SOURCE, so Swift's Glibc module does not import it;
/// without it close-on-exec takes a second call, and a process forked in between inherits the socket.
int socketstreams_accept4(int fd, void *address, unsigned int *length, int flags);

#endif
