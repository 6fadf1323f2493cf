/* Registry host rewrite for regions (seed "The same image in every region"):
 * one image name everywhere, pulled from the region's registry mirror.
 *
 * Rule format (ours; the reference names the annotation but no format): a
 * comma-separated list of FROM=TO pairs, whitespace around items ignored.
 * FROM is a registry host (optionally :port), compared case-insensitively
 * with the image's registry host; TO is a registry host (optionally :port)
 * with an optional /path prefix. The first rule whose FROM equals the
 * image's host wins; no match leaves the image as it is. An image without
 * a registry host ("python:3.12", "team/app:1") is on docker.io and a
 * one-component docker.io name gets its implied "library/":
 *   docker.io=mirror.cn:5000/hub   python:3.12 → mirror.cn:5000/hub/library/python:3.12
 *   ghcr.io=ghcr.cn                ghcr.io/a/b@sha256:… → ghcr.cn/a/b@sha256:…
 *
 * Sources, in order: the SandboxTemplate annotation
 * agentbox.navix.sh/registry-rewrite, then the agent's --registry-rewrite
 * (the region's default). Pure functions; tests/unit/test_agent_kube_registry.c. */
#ifndef AGENT_RUNTIME_KUBE_REGISTRY_H
#define AGENT_RUNTIME_KUBE_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#define KUBE_REWRITE_ANNOTATION "agentbox.navix.sh/registry-rewrite"
#define KUBE_REWRITE_RULES_MAX 16 /* per rule set: annotation and flag together */
#define KUBE_REWRITE_HOST_MAX 256 /* a DNS name is at most 253 characters, plus :port */

struct kube_rewrite_rule {
    char from[KUBE_REWRITE_HOST_MAX];
    char to[KUBE_REWRITE_HOST_MAX]; /* host[:port][/path] */
};

struct kube_rewrite {
    int n;
    struct kube_rewrite_rule r[KUBE_REWRITE_RULES_MAX];
};

/* Appends the rules of spec (NULL or "" → none) to *rw. what names the
 * source in errors ("annotation agentbox.navix.sh/registry-rewrite on
 * SandboxTemplate 'x'", "--registry-rewrite"). AB_EINVAL with err naming the
 * source, the rule's position and what is wrong; *rw is then unchanged. */
int kube_rewrite_parse(struct kube_rewrite *rw, const char *spec, const char *what, char *err,
                       size_t errlen);

/* The image's registry host ("docker.io" when it names none) into host;
 * *rest points at the part after it (the repository path, tag, digest). */
void kube_image_host(const char *image, char *host, size_t hostlen, const char **rest);

/* image rewritten by the first matching rule (or copied as it is) into out.
 * *changed (may be NULL) says whether a rule matched. AB_EINVAL when the
 * result does not fit outlen (out then holds ""). */
int kube_rewrite_image(const struct kube_rewrite *rw, const char *image, char *out, size_t outlen,
                       bool *changed);

#endif
