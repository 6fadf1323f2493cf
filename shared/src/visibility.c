/* Template visibility (visibility.h). */
#include "agentbox/visibility.h"

#include <string.h>

bool vis_template_visible(const json_t *spec, bool admin, const char *team, const char *user)
{
    const json_t *rules = json_object_get(json_object_get(spec, "visibility"), "rules"), *r, *u;
    size_t i, j;

    if (admin || json_array_size(rules) == 0)
        return true;
    team = team ? team : "";
    user = user ? user : "";
    json_array_foreach(rules, i, r)
    {
        const char *rteam = json_string_value(json_object_get(r, "team"));
        const json_t *users = json_object_get(r, "users");
        bool user_ok = json_array_size(users) == 0;
        if (rteam && rteam[0] && strcmp(rteam, team) != 0)
            continue;
        json_array_foreach(users, j, u)
        {
            if (json_is_string(u) && !strcmp(json_string_value(u), user))
                user_ok = true;
        }
        if (user_ok && ((rteam && rteam[0]) || json_array_size(users) > 0))
            return true;
    }
    return false;
}
