/* Console API for identity (/api/v1, reference agent-sandbox-behaviour.md
 * §4.2, §4.5, §5): whoami and API keys, self-service and admin.
 *
 *   GET    /api/v1/auth/whoami          {role, user, team, mode, namespace, keyId, name}
 *   GET    /api/v1/api-keys             caller's live keys {items, total}; rawToken only
 *                                       for unrestricted callers
 *   POST   /api/v1/api-keys             {name?, expiresIn?, mode?} → 201 with "key" once;
 *                                       agent-mode callers get 403 FORBIDDEN_FOR_AGENT
 *   DELETE /api/v1/api-keys/{id}        204; another owner's key is 404
 *   GET    /api/v1/admin/api-keys       every key (?team=&user=&includeRevoked=true),
 *                                       never rawToken
 *   POST   /api/v1/admin/api-keys       {team, user, name?, role?, mode?, expiresIn?} → 201
 *   DELETE /api/v1/admin/api-keys/{id}  204
 * Errors: {"error": …, "errorCode": …}. Admin routes need an admin key
 * (403 FORBIDDEN otherwise). Loop thread; storage on database workers. */
#ifndef AGENTBOX_DASHBOARD_IDENTITY_API_H
#define AGENTBOX_DASHBOARD_IDENTITY_API_H

#include "dashboard-api/dashboard_api.h" /* identity_api_add_routes */

#endif
