#ifndef AGENTBOX_VERSION_H
#define AGENTBOX_VERSION_H

#define AGENTBOX_VERSION "0.1.0"

const char *ab_version(void);

#endif
