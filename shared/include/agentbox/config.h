/* Configuration: YAML file + AGENTBOX_* environment + command-line flags, in
 * the precedence flag > environment > file > default.
 *
 * One option table per (sub)command. An option named "cluster_id" is:
 *   YAML key   cluster_id        (in the file given by --config or AGENTBOX_CONFIG)
 *   env        AGENTBOX_CLUSTER_ID  (and env_alias, e.g. DATABASE_URL, lower precedence)
 *   flag       --cluster-id VALUE  or --cluster-id=VALUE   (bool: --flag / --no-flag)
 * An unknown YAML key or flag, a value of the wrong type, or a missing required
 * value is an error whose message names the key and where it came from, e.g.
 *   "config file /etc/x.yaml line 3: unknown key 'clustr_id'"
 *   "environment AGENTBOX_TIMEOUT: 'abc' is not a duration (use 500ms, 30s, 5m)"
 *   "cluster_id is required: set --cluster-id, AGENTBOX_CLUSTER_ID or cluster_id in the config
 * file"
 */
#ifndef AGENTBOX_CONFIG_H
#define AGENTBOX_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

enum cfg_type {
    CFG_STRING,   /* char * (malloc'd, freed by cfg_free) */
    CFG_INT,      /* int64_t */
    CFG_BOOL,     /* bool; true/false/yes/no/1/0/on/off */
    CFG_DURATION, /* int64_t milliseconds; "250ms", "30s", "5m", "1h", or a bare number of seconds
                   */
    CFG_SIZE,     /* int64_t bytes; "512", "64KiB", "1MiB", "2GiB" */
};

struct cfg_option {
    const char *name; /* snake_case key */
    enum cfg_type type;
    const char *def; /* default as text, NULL for none */
    bool required;
    size_t offset;         /* offsetof(struct your_config, field) */
    const char *help;      /* one line for --help */
    const char *env_alias; /* optional extra environment variable, NULL for none */
};

#define CFG_MAX_POSITIONAL 8

struct cfg_result {
    const char *positional[CFG_MAX_POSITIONAL]; /* non-flag args in order (point into argv) */
    int npositional;
    bool help; /* --help or -h was given */
};

/* Fills *out (a struct described by opts) from defaults, the config file,
 * the environment and argv (argv[0] is NOT skipped: pass argv + 1 after the
 * subcommand). "--config FILE" and AGENTBOX_CONFIG name the file; "--" ends
 * flags. On error returns AB_EINVAL with the message in err. More than
 * CFG_MAX_POSITIONAL positionals is an error. When --help is given, required
 * checks are skipped and res->help is set. */
int cfg_load(const struct cfg_option *opts, size_t nopts, void *out, int argc, char **argv,
             struct cfg_result *res, char *err, size_t errlen);

/* Limits: a config file holds at most CFG_FILE_MAX bytes, one value (from a
 * file, the environment or a flag) at most CFG_VALUE_MAX bytes. */
#define CFG_FILE_MAX (1024 * 1024)
#define CFG_VALUE_MAX (64 * 1024)

/* Applies one YAML document (a flat mapping of scalar values, len <= CFG_FILE_MAX)
 * on top of *out: keys present replace the field (freeing an old string), YAML
 * null leaves it as it was. Errors name source_name and the line, e.g.
 *   "config file x.yaml line 3: unknown key 'clustr_id'; did you mean 'cluster_id'?"
 * On error *out may be partly updated but stays safe to cfg_free. Exposed for
 * tests and fuzzing; cfg_load uses it for --config / AGENTBOX_CONFIG. */
int cfg_load_yaml_buffer(const struct cfg_option *opts, size_t nopts, void *out, const char *buf,
                         size_t len, const char *source_name, char *err, size_t errlen);

/* Frees CFG_STRING fields of *out (and sets them to NULL). */
void cfg_free(const struct cfg_option *opts, size_t nopts, void *out);

/* Prints usage, then each option as flag, environment variable, YAML key,
 * default and help text. */
void cfg_print_help(FILE *f, const char *usage, const char *description,
                    const struct cfg_option *opts, size_t nopts);

/* Value parsers, exposed for reuse and tests. Return 0 or AB_EINVAL. */
int cfg_parse_bool(const char *s, bool *out);
int cfg_parse_duration(const char *s, int64_t *ms);
int cfg_parse_size(const char *s, int64_t *bytes);

#endif
