#define _GNU_SOURCE
#include <sys/socket.h>
#include "CSocketShims.h"

int socketstreams_accept4(int fd, void *address, unsigned int *length, int flags) {
    return accept4(fd, (struct sockaddr *)address, (socklen_t *)length, flags);
}
