/* The seccomp filter of every local sandbox (DESIGN §10a): an allow-list in
 * the spirit of Docker's default profile, kept as one table in seccomp.c.
 * Anything not in the table fails with EPERM; system call entry points of
 * other architectures (i386 through int 0x80, x32) kill the process.
 *
 * The filter is compiled once (libseccomp allocates) and then only read, so
 * a child between clone() and exec() can install it without malloc. */
#ifndef AGENTBOX_RUNTIME_LOCAL_SECCOMP_H
#define AGENTBOX_RUNTIME_LOCAL_SECCOMP_H

#include <stddef.h>
#include <linux/filter.h>

enum lsec_rule {
    LSEC_ALLOW,     /* always allowed */
    LSEC_NO_NS,     /* allowed unless its flags argument creates a namespace */
    LSEC_PERSONA,   /* personality(2): only the harmless personas */
    LSEC_ENOSYS,    /* refused with ENOSYS so libc falls back (clone3: flags not inspectable) */
    LSEC_DENY,      /* refused with EPERM, listed to say why */
    LSEC_NOT_LISTED /* not in the table: refused with EPERM */
};

/* The rule the table gives a system call name (x86-64 names). */
enum lsec_rule lsec_rule_of(const char *name);

/* The compiled filter, built on first use and kept for the life of the
 * process (borrowed, never freed). AB_EIO with err naming the failure. Safe
 * to call from several threads. */
int lsec_program(const struct sock_fprog **out, char *err, size_t errlen);

/* Installs prog on the calling thread; no_new_privs must already be set.
 * Allocation-free: usable between clone() and exec(). 0 or -1 (errno). */
int lsec_install(const struct sock_fprog *prog);

#endif
