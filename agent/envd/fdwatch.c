/* Descriptor watches as lws raw-file wsis on a vhost of our own. */
#include "agent/envd/fdwatch.h"

#include <fcntl.h>
#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#define FD_PROTOCOL "agentbox-envd-fd"

struct envd_fd {
    struct lws *wsi;
    int fd;
    envd_fd_fn fn;
    void *arg;
    bool closing;
    bool paused;
    bool in_close; /* inside the ENVD_FD_CLOSED call */
};

static struct lws_vhost *g_vhost;

static int fd_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    struct envd_fd *w = wsi != NULL ? lws_get_opaque_user_data(wsi) : NULL;

    switch (reason) {
    case LWS_CALLBACK_RAW_RX_FILE:
        if (w == NULL || w->closing)
            return w == NULL ? -1 : 0;
        return w->fn(w, ENVD_FD_READ, w->arg) < 0 ? -1 : 0;
    case LWS_CALLBACK_RAW_WRITEABLE_FILE:
        if (w == NULL || w->closing)
            return w == NULL ? -1 : 0;
        return w->fn(w, ENVD_FD_WRITE, w->arg) < 0 ? -1 : 0;
    case LWS_CALLBACK_RAW_CLOSE_FILE:
        if (w == NULL)
            return 0;
        lws_set_opaque_user_data(wsi, NULL);
        w->wsi = NULL;
        w->in_close = true;
        w->fn(w, ENVD_FD_CLOSED, w->arg);
        free(w);
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols fd_protocols[] = {
    {FD_PROTOCOL, fd_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

int envd_fd_init(struct loop *l)
{
    struct lws_context_creation_info info;

    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = fd_protocols;
    info.vhost_name = "agentbox-envd-fds";
    g_vhost = lws_create_vhost(loop_lws(l), &info);
    if (g_vhost == NULL) {
        LOG_ERROR("cannot create the lws vhost for process pipes");
        return AB_EIO;
    }
    return 0;
}

struct envd_fd *envd_fd_watch(int fd, envd_fd_fn fn, void *arg)
{
    struct envd_fd *w;
    lws_sock_file_fd_type d;
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || g_vhost == NULL) {
        close(fd);
        return NULL;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        close(fd);
        return NULL;
    }
    w->fd = fd;
    w->fn = fn;
    w->arg = arg;
    d.filefd = fd;
    w->wsi = lws_adopt_descriptor_vhost(g_vhost, LWS_ADOPT_RAW_FILE_DESC, d, FD_PROTOCOL, NULL);
    if (w->wsi == NULL) {
        /* lws closes the descriptor when adoption fails. */
        free(w);
        return NULL;
    }
    lws_set_opaque_user_data(w->wsi, w);
    return w;
}

int envd_fd_get(const struct envd_fd *w)
{
    return w->fd;
}

void envd_fd_want_write(struct envd_fd *w)
{
    if (w->wsi != NULL && !w->closing)
        lws_callback_on_writable(w->wsi);
}

void envd_fd_pause_read(struct envd_fd *w, bool paused)
{
    if (w->wsi == NULL || w->closing || w->paused == paused)
        return;
    w->paused = paused;
    lws_rx_flow_control(w->wsi, paused ? 0 : 1);
}

int envd_fd_take(struct envd_fd *w)
{
    /* lws closes the descriptor after this callback returns: a duplicate
     * keeps the pipe's buffered bytes readable. */
    if (!w->in_close || w->closing)
        return -1;
    return fcntl(w->fd, F_DUPFD_CLOEXEC, 0);
}

void envd_fd_close(struct envd_fd *w)
{
    if (w->wsi == NULL || w->closing)
        return;
    w->closing = true;
    lws_set_timeout(w->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}
