#include "agentbox/version.h"

const char *ab_version(void)
{
    return AGENTBOX_VERSION;
}
