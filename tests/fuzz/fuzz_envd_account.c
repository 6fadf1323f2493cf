/* passwd and group files as envd reads them (agent/envd/account.c): any
 * bytes are skipped or parsed, never crash, and what is found is what was
 * asked for, within its bounds. The input is both files at once, through a
 * memfd. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/envd/account.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("account", 0);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct envd_account a;
    if (envd_account_by_name(path, "user", &a) == 0 && strcmp(a.name, "user") != 0)
        abort();
    if (envd_account_by_uid(path, 1000, &a) == 0 && (a.uid != 1000 || strlen(a.home) >= PATH_MAX))
        abort();
    char name[ENVD_ACCOUNT_NAME_MAX + 1];
    if (envd_group_name(path, 27, name, sizeof(name)) == 0 && strlen(name) >= sizeof(name))
        abort();
    gid_t g[4];
    int n = envd_groups_of(path, "user", 1000, g, 4);
    if (n < 1 || n > 4 || g[0] != 1000)
        abort();
    close(fd);
    return 0;
}
