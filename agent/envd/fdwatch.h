/* Watching arbitrary file descriptors (pipes, a PTY master, signalfd,
 * inotify) on the process's lws loop. The only envd file that includes
 * libwebsockets.h. Loop thread only. */
#ifndef ENVD_FDWATCH_H
#define ENVD_FDWATCH_H

#include <stdbool.h>

struct loop;
struct envd_fd;

enum envd_fd_event {
    ENVD_FD_READ,   /* readable: read until EAGAIN; return < 0 at EOF to close */
    ENVD_FD_WRITE,  /* writable after envd_fd_want_write(w, true) */
    ENVD_FD_CLOSED, /* the watch ended (EOF, hang-up or envd_fd_close): last call */
};

/* Returns 0 to keep watching, < 0 to close the watch (and the fd). */
typedef int (*envd_fd_fn)(struct envd_fd *w, enum envd_fd_event ev, void *arg);

/* Creates the vhost envd adopts descriptors on. Returns 0 or AB_EIO. */
int envd_fd_init(struct loop *l);
/* Takes ownership of fd (made non-blocking); it is closed when the watch
 * ends. NULL on failure (fd is then closed too). */
struct envd_fd *envd_fd_watch(int fd, envd_fd_fn fn, void *arg);
int envd_fd_get(const struct envd_fd *w);
void envd_fd_want_write(struct envd_fd *w);
/* Stops/starts POLLIN (backpressure from slow stream subscribers). */
void envd_fd_pause_read(struct envd_fd *w, bool paused);
/* Only from fn's ENVD_FD_CLOSED call of a watch that lws ended (EOF, or a
 * hang-up seen while reading was paused), not by envd_fd_close: returns a
 * duplicate of the descriptor (non-blocking, close-on-exec) so that what is
 * still buffered can be read, or -1. */
int envd_fd_take(struct envd_fd *w);
/* Ends the watch soon; fn gets ENVD_FD_CLOSED from the loop, never from
 * inside this call. */
void envd_fd_close(struct envd_fd *w);

#endif
