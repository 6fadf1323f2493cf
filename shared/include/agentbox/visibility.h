/* Who may see a SandboxTemplate (reference §6.1): the one rule the hub's
 * catalogue (dashboard-api/templates_api.c) and every agent's native API
 * (agent/native/system.c) apply, so a template hidden on one is hidden on
 * the other.
 *
 *   spec.visibility.rules[] = {team, users[]}
 *   no rules (or none at all)      public
 *   an admin                       sees every template
 *   inside one rule                team AND users (a part left out or empty
 *                                  does not restrict; a rule with neither
 *                                  grants nothing)
 *   across rules                   OR
 *
 * A users[] entry that is not a string matches no one. Pure, any thread. */
#ifndef AGENTBOX_VISIBILITY_H
#define AGENTBOX_VISIBILITY_H

#include <jansson.h>
#include <stdbool.h>

/* Whether the principal (admin, its team and user name; NULL as "") may see
 * a template with this spec (NULL: no rules). */
bool vis_template_visible(const json_t *spec, bool admin, const char *team, const char *user);

#endif
