// An in-test Kubernetes API server (no npm dependencies), faithful enough to
// kubernetes-api.md §14 that both our C client and the real kubectl can talk
// to it: one global resourceVersion counter, namespaced and cluster-scoped
// resources, get/list/create/update/patch/delete, watch streams with
// bookmarks and a bounded history (410 once compacted), 409 on stale
// versions, Status errors, status/scale subresources, finalizers, generation,
// discovery and an OpenAPI v3 index for kubectl.
//
// What it does not model: namespaces as objects, server-side apply (415),
// pruning below spec's first level,
// CRD schemas beyond required/enum/minimum/defaults of the three agentbox
// CRDs, garbage collection. The simulated kubelet (option `kubelet`) runs no
// real processes unless given `envd`: then every Pod gets its own loopback
// address (127.0.a.b) and its first container is a real agentbox-envd bound
// there (restarted, fresh, on every image change; Ready once /health answers).
// With `netns` as well, every Pod gets a network namespace of its own behind a
// veth from the host (Pod IP 10.N.a.b, the host's end its node address), init
// containers run to completion and native sidecars (restartPolicy Always) keep
// running in it, each container a real process (command[0] mapped through
// `bins`) with its securityContext's capabilities as its bounding set, and
// envd listens on the Pod IP inside it. Each container's stdout and stderr
// are kept for the Pod log API (GET .../pods/{name}/log).
//
//   const api = await startKubeApi({ token: 'sekret', historyLimit: 100 });
//   api.url; api.kubeconfig(dir); api.compact(); api.inject({...}); await api.close();
import { spawn, execFile } from 'node:child_process';
import { randomUUID, randomBytes } from 'node:crypto';
import net from 'node:net';
import os from 'node:os';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const MAX_BODY = 3 * 1024 * 1024;
const CR_GROUP = 'agents.navix.sh';

// kind, plural, scope, status/scale subresources, schema checks (CRs only).
const RESOURCES = [
    { group: '', version: 'v1', kind: 'Pod', name: 'pods', namespaced: true, status: true, short: ['po'] },
    { group: '', version: 'v1', kind: 'Event', name: 'events', namespaced: true, short: ['ev'] },
    { group: 'coordination.k8s.io', version: 'v1', kind: 'Lease', name: 'leases', namespaced: true },
    {
        group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition',
        name: 'customresourcedefinitions', namespaced: false, status: true, short: ['crd', 'crds'],
    },
    {
        group: CR_GROUP, version: 'v1alpha1', kind: 'SandboxTemplate', name: 'sandboxtemplates',
        namespaced: false, status: true, cr: true, short: ['sbt'],
    },
    {
        group: CR_GROUP, version: 'v1alpha1', kind: 'SandboxEnv', name: 'sandboxenvs',
        namespaced: true, status: true, cr: true, short: ['sbe'],
    },
    {
        group: CR_GROUP, version: 'v1alpha1', kind: 'SandboxPool', name: 'sandboxpools',
        namespaced: true, status: true, scale: true, cr: true, short: ['sbp'],
    },
];
// --- helm: the kinds the charts render (tests/integration/helm.test.mjs) ------------------
// Stored and served as generic objects (CRUD, list, watch, kubectl apply); no
// controller acts on them and their spec is not validated. A Secret's
// stringData folds into base64 data on every write, as the real server does
// (`normalize`, called by create and update).
function secretNormalize(obj) {
    if (isObj(obj.stringData)) {
        obj.data = { ...(obj.data ?? {}) };
        for (const [k, v] of Object.entries(obj.stringData)) obj.data[k] = Buffer.from(String(v)).toString('base64');
    }
    delete obj.stringData;
    obj.type ??= 'Opaque';
}
RESOURCES.push(
    { group: '', version: 'v1', kind: 'Service', name: 'services', namespaced: true, short: ['svc'] },
    { group: '', version: 'v1', kind: 'ServiceAccount', name: 'serviceaccounts', namespaced: true, short: ['sa'] },
    { group: '', version: 'v1', kind: 'Secret', name: 'secrets', namespaced: true, normalize: secretNormalize },
    { group: '', version: 'v1', kind: 'ConfigMap', name: 'configmaps', namespaced: true, short: ['cm'] },
    { group: 'apps', version: 'v1', kind: 'Deployment', name: 'deployments', namespaced: true, short: ['deploy'] },
    { group: 'apps', version: 'v1', kind: 'StatefulSet', name: 'statefulsets', namespaced: true, short: ['sts'] },
    { group: 'batch', version: 'v1', kind: 'Job', name: 'jobs', namespaced: true },
    { group: 'policy', version: 'v1', kind: 'PodDisruptionBudget', name: 'poddisruptionbudgets', namespaced: true, short: ['pdb'] },
    { group: 'networking.k8s.io', version: 'v1', kind: 'Ingress', name: 'ingresses', namespaced: true, short: ['ing'] },
    { group: 'rbac.authorization.k8s.io', version: 'v1', kind: 'Role', name: 'roles', namespaced: true },
    { group: 'rbac.authorization.k8s.io', version: 'v1', kind: 'RoleBinding', name: 'rolebindings', namespaced: true },
    { group: 'rbac.authorization.k8s.io', version: 'v1', kind: 'ClusterRole', name: 'clusterroles', namespaced: false },
    { group: 'rbac.authorization.k8s.io', version: 'v1', kind: 'ClusterRoleBinding', name: 'clusterrolebindings', namespaced: false },
);
// --- end of the helm section ------------------------------------------------------------------

// --- Secret: the typed Secrets the agent writes (the ips-<env> pull secret) -------------------
// As the real server's ValidateSecret: kubernetes.io/dockerconfigjson needs
// data[".dockerconfigjson"], the base64 of a JSON object; a Secret's type is
// immutable. Runs after secretNormalize (stringData already folded into data).
function secretValidate(obj, prev) {
    const r = RESOURCES.find((x) => x.name === 'secrets');
    const name = obj.metadata?.name ?? '';
    const causes = [];
    if (prev && (prev.type ?? 'Opaque') !== obj.type)
        causes.push({ reason: 'FieldValueInvalid', field: 'type', message: 'Invalid value: "' + obj.type + '": field is immutable' });
    if (obj.type === 'kubernetes.io/dockerconfigjson') {
        const raw = obj.data?.['.dockerconfigjson'];
        let parsed;
        try {
            parsed = raw === undefined ? undefined : JSON.parse(Buffer.from(raw, 'base64').toString('utf8'));
        } catch {
            parsed = null;
        }
        if (raw === undefined)
            causes.push({ reason: 'FieldValueRequired', field: 'data[.dockerconfigjson]', message: 'Required value' });
        else if (!isObj(parsed))
            causes.push({ reason: 'FieldValueInvalid', field: 'data[.dockerconfigjson]', message: 'Invalid value: "<secret contents redacted>": invalid character in JSON' });
    }
    if (causes.length) throw invalid(r, name, causes);
}
{
    const r = RESOURCES.find((x) => x.name === 'secrets');
    r.normalize = (obj, prev) => {
        secretNormalize(obj);
        secretValidate(obj, prev);
    };
}
// --- end of the Secret section ----------------------------------------------------------------

for (const r of RESOURCES) {
    r.apiVersion = r.group ? `${r.group}/${r.version}` : r.version;
    r.prefix = r.group ? `/apis/${r.group}/${r.version}` : `/api/${r.version}`;
    r.qualified = r.group ? `${r.name}.${r.group}` : r.name; // for messages
    r.kindQualified = r.group ? `${r.kind}.${r.group}` : r.kind;
}

const VERBS = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'];

// --- small helpers -------------------------------------------------------------------

const clone = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const nowTime = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

function deepEqual(a, b) {
    return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}
function sortKeys(v) {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (!isObj(v)) return v;
    const o = {};
    for (const k of Object.keys(v).sort()) o[k] = sortKeys(v[k]);
    return o;
}

class ApiError extends Error {
    constructor(code, reason, message, details) {
        super(message);
        this.code = code;
        this.reason = reason;
        this.details = details;
    }
}

function statusBody(code, reason, message, details) {
    const s = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
    if (details) s.details = details;
    return s;
}

const detailsOf = (r, name) => {
    const d = { name, kind: r.name };
    if (r.group) d.group = r.group;
    return d;
};
const notFound = (r, name) =>
    new ApiError(404, 'NotFound', `${r.qualified} "${name}" not found`, detailsOf(r, name));
const conflict = (r, name, cause = 'the object has been modified; please apply your changes to the latest version and try again') =>
    new ApiError(409, 'Conflict', `Operation cannot be fulfilled on ${r.qualified} "${name}": ${cause}`, detailsOf(r, name));
function invalid(r, name, causes) {
    const text = causes.map((c) => `${c.field}: ${c.message}`).join(', ');
    const d = { name, kind: r.kind, causes };
    if (r.group) d.group = r.group;
    return new ApiError(422, 'Invalid', `${r.kindQualified} "${name}" is invalid: ${text}`, d);
}
const badRequest = (msg) => new ApiError(400, 'BadRequest', msg);

// --- selectors -------------------------------------------------------------------------

// Label selector string → predicate over a labels map (§8.1). Throws 400.
export function parseLabelSelector(s) {
    if (!s) return () => true;
    const reqs = [];
    // split on commas outside parentheses
    const parts = [];
    let depth = 0;
    let cur = '';
    for (const ch of s) {
        if (ch === '(') depth++;
        if (ch === ')') depth--;
        if (ch === ',' && depth === 0) {
            parts.push(cur);
            cur = '';
        } else cur += ch;
    }
    parts.push(cur);
    for (let p of parts) {
        p = p.trim();
        let m;
        if ((m = p.match(/^([^\s!=<>()]+)\s+(in|notin)\s+\(([^)]*)\)$/))) {
            const vals = m[3].split(',').map((v) => v.trim());
            const [k, op] = [m[1], m[2]];
            reqs.push(op === 'in' ? (l) => k in l && vals.includes(l[k]) : (l) => !(k in l) || !vals.includes(l[k]));
        } else if ((m = p.match(/^([^\s!=<>()]+)\s*(==|=|!=)\s*([^\s!=<>(),]*)$/))) {
            const [k, op, v] = [m[1], m[2], m[3]];
            reqs.push(op === '!=' ? (l) => l[k] !== v : (l) => l[k] === v);
        } else if ((m = p.match(/^!([^\s!=<>()]+)$/))) {
            const k = m[1];
            reqs.push((l) => !(k in l));
        } else if ((m = p.match(/^([^\s!=<>()]+)$/))) {
            const k = m[1];
            reqs.push((l) => k in l);
        } else if ((m = p.match(/^([^\s!=<>()]+)\s*(<|>)\s*(-?\d+)$/))) {
            const [k, op, n] = [m[1], m[2], Number(m[3])];
            reqs.push((l) => k in l && /^-?\d+$/.test(l[k]) && (op === '<' ? Number(l[k]) < n : Number(l[k]) > n));
        } else {
            throw badRequest(`unable to parse requirement: ${JSON.stringify(p)}`);
        }
    }
    return (labels) => reqs.every((f) => f(labels || {}));
}

const POD_FIELDS = {
    'spec.nodeName': (o) => o.spec?.nodeName ?? '',
    'spec.restartPolicy': (o) => o.spec?.restartPolicy ?? '',
    'spec.schedulerName': (o) => o.spec?.schedulerName ?? '',
    'spec.serviceAccountName': (o) => o.spec?.serviceAccountName ?? '',
    'spec.hostNetwork': (o) => String(!!o.spec?.hostNetwork),
    'status.phase': (o) => o.status?.phase ?? '',
    'status.podIP': (o) => o.status?.podIP ?? '',
    'status.nominatedNodeName': (o) => o.status?.nominatedNodeName ?? '',
};
const EVENT_FIELDS = Object.fromEntries(
    ['kind', 'namespace', 'name', 'uid', 'apiVersion', 'resourceVersion', 'fieldPath']
        .map((f) => [`involvedObject.${f}`, (o) => o.involvedObject?.[f] ?? ''])
        .concat([
            ['reason', (o) => o.reason ?? ''],
            ['reportingComponent', (o) => o.reportingComponent ?? ''],
            ['source', (o) => o.source?.component ?? ''],
            ['type', (o) => o.type ?? ''],
        ]),
);

// Field selector (§8.2): =, ==, != on the fields the resource supports; 400 otherwise.
export function parseFieldSelector(r, s) {
    if (!s) return () => true;
    const fields = {
        'metadata.name': (o) => o.metadata?.name ?? '',
        ...(r.namespaced ? { 'metadata.namespace': (o) => o.metadata?.namespace ?? '' } : {}),
        ...(r.name === 'pods' ? POD_FIELDS : {}),
        ...(r.name === 'events' ? EVENT_FIELDS : {}),
    };
    const reqs = s.split(',').map((p) => {
        const m = p.trim().match(/^([^!=]+?)\s*(==|=|!=)\s*(.*)$/);
        if (!m) throw badRequest(`invalid selector: '${s}'; can't understand '${p}'`);
        const get = fields[m[1]];
        if (!get) throw badRequest(`field label not supported: ${m[1]}`);
        return m[2] === '!=' ? (o) => get(o) !== m[3] : (o) => get(o) === m[3];
    });
    return (o) => reqs.every((f) => f(o));
}

// --- patches ---------------------------------------------------------------------------

// RFC 7386: objects merge, null deletes, everything else (arrays too) replaces.
export function mergePatch(target, patch) {
    if (!isObj(patch)) return clone(patch);
    const out = isObj(target) ? clone(target) : {};
    for (const [k, v] of Object.entries(patch)) {
        if (v === null) delete out[k];
        else out[k] = mergePatch(out[k], v);
    }
    return out;
}

// Strategic merge for built-ins, as far as Pods need it: lists of named
// things merge by key, finalizers merge as a set, `$patch: delete` removes a
// list element, the `$setElementOrder`/`$retainKeys` directives are ignored.
const SMP_KEYS = {
    containers: 'name', initContainers: 'name', ephemeralContainers: 'name', volumes: 'name',
    env: 'name', volumeMounts: 'mountPath', ports: 'containerPort', imagePullSecrets: 'name',
    conditions: 'type', tolerations: null, finalizers: '$set',
};
export function strategicMerge(target, patch) {
    if (!isObj(patch)) return clone(patch);
    const out = isObj(target) ? clone(target) : {};
    for (const [k, v] of Object.entries(patch)) {
        if (k.startsWith('$setElementOrder/') || k === '$retainKeys' || k.startsWith('$deleteFromPrimitiveList/')) continue;
        if (v === null) {
            delete out[k];
            continue;
        }
        const key = SMP_KEYS[k];
        if (key && Array.isArray(v) && Array.isArray(out[k] ?? [])) {
            const list = clone(out[k] ?? []);
            if (key === '$set') {
                for (const e of v) if (!list.includes(e)) list.push(e);
            } else {
                for (const e of v) {
                    const i = list.findIndex((x) => isObj(x) && isObj(e) && x[key] === e[key]);
                    if (isObj(e) && e.$patch === 'delete') {
                        if (i >= 0) list.splice(i, 1);
                    } else if (i >= 0) list[i] = strategicMerge(list[i], e);
                    else list.push(clone(e));
                }
            }
            out[k] = list;
        } else {
            out[k] = strategicMerge(out[k], v);
        }
    }
    return out;
}

function pointer(p) {
    if (p === '') return [];
    if (!p.startsWith('/')) throw new Error(`JSON pointer must start with /: ${p}`);
    return p.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

// RFC 6902; any failure (including `test`) throws a plain Error → 422.
export function jsonPatch(doc, ops) {
    if (!Array.isArray(ops)) throw new Error('json patch must be a list of operations');
    if (ops.length > 10000) throw new Error('the allowed maximum operations in a JSON patch is 10000');
    let root = clone(doc);
    const parentOf = (segs) => {
        let cur = root;
        for (const s of segs.slice(0, -1)) {
            if (cur === null || typeof cur !== 'object' || !(s in cur)) throw new Error(`doc is missing path: ${'/' + segs.join('/')}`);
            cur = cur[s];
        }
        return cur;
    };
    const get = (segs) => {
        let cur = root;
        for (const s of segs) {
            if (cur === null || typeof cur !== 'object' || !(s in cur)) throw new Error(`doc is missing path: /${segs.join('/')}`);
            cur = cur[s];
        }
        return cur;
    };
    const add = (segs, value) => {
        if (!segs.length) return void (root = value);
        const par = parentOf(segs);
        const last = segs[segs.length - 1];
        if (Array.isArray(par)) {
            const i = last === '-' ? par.length : Number(last);
            if (!Number.isInteger(i) || i < 0 || i > par.length) throw new Error(`index out of range: ${last}`);
            par.splice(i, 0, value);
        } else if (isObj(par)) par[last] = value;
        else throw new Error(`doc is missing path: /${segs.join('/')}`);
    };
    const remove = (segs) => {
        const par = parentOf(segs);
        const last = segs[segs.length - 1];
        if (Array.isArray(par)) {
            const i = Number(last);
            if (!(i >= 0 && i < par.length)) throw new Error(`index out of range: ${last}`);
            par.splice(i, 1);
        } else {
            if (!isObj(par) || !(last in par)) throw new Error(`doc is missing path: /${segs.join('/')}`);
            delete par[last];
        }
    };
    for (const op of ops) {
        const segs = pointer(op.path ?? '');
        switch (op.op) {
            case 'add': add(segs, clone(op.value)); break;
            case 'remove': remove(segs); break;
            case 'replace': get(segs); remove(segs); add(segs, clone(op.value)); break;
            case 'move': { const v = get(pointer(op.from)); remove(pointer(op.from)); add(segs, v); break; }
            case 'copy': add(segs, clone(get(pointer(op.from)))); break;
            case 'test':
                if (!deepEqual(get(segs), op.value)) throw new Error(`testing value ${op.path} failed`);
                break;
            default: throw new Error(`Unexpected kind: ${op.op}`);
        }
    }
    return root;
}

// --- defaults and validation -------------------------------------------------------------

const NAME_RE = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

function podDefaults(o) {
    const s = (o.spec ??= {});
    s.restartPolicy ??= 'Always';
    s.terminationGracePeriodSeconds ??= 30;
    s.dnsPolicy ??= 'ClusterFirst';
    s.schedulerName ??= 'default-scheduler';
    s.enableServiceLinks ??= true;
    for (const c of [...(s.containers ?? []), ...(s.initContainers ?? [])]) {
        c.terminationMessagePath ??= '/dev/termination-log';
        c.terminationMessagePolicy ??= 'File';
        const tagged = /:[^/:]+$/.test(c.image ?? '') || (c.image ?? '').includes('@');
        c.imagePullPolicy ??= !tagged || /:latest$/.test(c.image ?? '') ? 'Always' : 'IfNotPresent';
    }
}

function crDefaults(r, o) {
    const s = o.spec;
    if (!isObj(s)) return;
    if (r.kind === 'SandboxPool') s.podCreationImagePolicy ??= 'IdleImage';
    // RuntimeSpec.protocol defaults to TCP (crds-and-charts.md §1.1)
    if (r.kind === 'SandboxTemplate') for (const rt of Array.isArray(s.runtimes) ? s.runtimes : []) if (isObj(rt)) rt.protocol ??= 'TCP';
    if (r.kind === 'SandboxEnv') {
        s.mode ??= 'WarmPool';
        for (const g of s.autoscaling?.groups ?? []) {
            g.enabled ??= false;
            g.minReplicas ??= 0;
            const up = (g.scaleUpPolicy ??= {});
            up.mode ??= 'Default';
            up.cooldownSeconds ??= 30;
            up.idleThresholdSeconds ??= 30;
            up.idleZeroQuietWindowSeconds ??= 300;
            up.saturationCooldownSeconds ??= 60;
            const down = (g.scaleDownPolicy ??= {});
            down.idleTimeoutSeconds ??= 300;
            down.stabilizationSeconds ??= 60;
            down.protectionWindowSeconds ??= 10;
        }
        for (const c of s.clusters ?? []) for (const m of c.members ?? []) if (m.config) m.config.scalingGroup ??= 'default';
    }
}

// The CRD schema rules a misbehaving agent would trip over.
function crValidate(r, o) {
    const causes = [];
    const bad = (field, message, reason = 'FieldValueInvalid') => causes.push({ reason, message, field });
    const s = o.spec;
    if (!isObj(s)) bad('spec', 'Required value', 'FieldValueRequired');
    else if (r.kind === 'SandboxPool') {
        if (s.replicas === undefined) bad('spec.replicas', 'Required value', 'FieldValueRequired');
        else if (!Number.isInteger(s.replicas)) bad('spec.replicas', `Invalid value: "${typeof s.replicas}": spec.replicas in body must be of type integer: "${typeof s.replicas}"`, 'FieldValueTypeInvalid');
        else if (s.replicas < 0) bad('spec.replicas', `Invalid value: ${s.replicas}: spec.replicas in body should be greater than or equal to 0`);
        if (s.podCreationImagePolicy !== undefined && !['PoolDefaultImage', 'IdleImage'].includes(s.podCreationImagePolicy))
            bad('spec.podCreationImagePolicy', `Unsupported value: "${s.podCreationImagePolicy}": supported values: "PoolDefaultImage", "IdleImage"`, 'FieldValueNotSupported');
    } else if (r.kind === 'SandboxEnv') {
        if (!isObj(s.templateRef)) bad('spec.templateRef', 'Required value', 'FieldValueRequired');
        else if (typeof s.templateRef.name !== 'string') bad('spec.templateRef.name', 'Required value', 'FieldValueRequired');
        if (!['WarmPool', 'OnDemandJob'].includes(s.mode))
            bad('spec.mode', `Unsupported value: "${s.mode}": supported values: "WarmPool", "OnDemandJob"`, 'FieldValueNotSupported');
        for (const [i, g] of (s.autoscaling?.groups ?? []).entries()) {
            if (g.scaleUpPolicy?.mode === 'Aggressive' && g.maxReplicas === undefined)
                bad(`spec.autoscaling.groups[${i}]`, 'Invalid value: "object": Aggressive mode needs maxReplicas on the group');
        }
    }
    return causes;
}

// Fields of a Pod spec that may change after creation (§9.1).
function podSpecMutable(oldSpec, newSpec) {
    const strip = (s) => {
        const c = clone(s ?? {});
        for (const k of ['containers', 'initContainers']) for (const x of c[k] ?? []) delete x.image;
        delete c.activeDeadlineSeconds;
        delete c.tolerations;
        delete c.terminationGracePeriodSeconds;
        return c;
    };
    return deepEqual(strip(oldSpec), strip(newSpec));
}

// Pruning (trap 32): fields the CRD schemas do not declare are dropped, at
// the root and directly under spec (deeper levels are not modelled; the
// embedded `template` is schemaless anyway).
const CR_SPEC_FIELDS = {
    SandboxTemplate: ['template', 'idleImage', 'runtimes', 'version', 'description', 'visibility'],
    SandboxPool: ['replicas', 'templateName', 'defaultStartupTimeout', 'defaultIdleTimeout', 'podCreationImagePolicy',
        'maxUnavailable', 'networkPolicy', 'template', 'idleImage', 'runtimes'],
    SandboxEnv: ['templateRef', 'mode', 'defaults', 'clusters', 'autoscaling', 'overrides'],
};

// Returns the paths it dropped; fieldValidation=Strict makes them a 400.
function prune(r, obj, mode) {
    if (!r.cr) return [];
    const dropped = [];
    for (const k of Object.keys(obj)) if (!['apiVersion', 'kind', 'metadata', 'spec', 'status'].includes(k)) dropped.push(k);
    if (isObj(obj.spec)) for (const k of Object.keys(obj.spec)) if (!CR_SPEC_FIELDS[r.kind].includes(k)) dropped.push(`spec.${k}`);
    if (dropped.length && mode === 'Strict')
        throw badRequest(`strict decoding error: ${dropped.map((d) => `unknown field "${d}"`).join(', ')}`);
    for (const d of dropped) {
        const parts = d.split('.');
        if (parts.length === 1) delete obj[d];
        else delete obj.spec[parts[1]];
    }
    return mode === 'Ignore' ? [] : dropped;
}

// --- the server ---------------------------------------------------------------------------

// Starts the server on 127.0.0.1. Options:
//   token            bearer token required (null = no auth); api.setToken() rotates it
//   historyLimit     watch events kept for resumption (older → 410)
//   bookmarkMs       BOOKMARK interval for watches that allow them (0 = never)
//   watch410         'event' (ERROR event in a 200 stream) or 'http' (HTTP 410)
//   watchTimeoutSec  default server-side end of a watch
//   podGraceMs       how long a deleted scheduled Pod lingers without a kubelet
//   kubelet          true or {node, podIP, pullDelayMs, readyDelayMs, stopDelayMs,
//                    failImages (RegExp or list), normalise, envd (path of
//                    agentbox-envd: a real one per Pod), envdPort (49983)}:
//                    the simulated node; api.options.kubelet may be changed
//                    while running
export async function startKubeApi(opts = {}) {
    const o = {
        token: null, historyLimit: 1000, bookmarkMs: 1000, watch410: 'event', watchTimeoutSec: 1800,
        podGraceMs: 0, port: 0, ...opts,
    };
    let token = o.token;
    let rv = 0; // the one counter shared by every kind
    let compactedRv = 0; // history holds every event with rv > compactedRv
    const store = new Map(); // `${resource}/${ns}/${name}` → object
    const history = []; // {rv, type, r, obj, prev}
    const watchers = new Set();
    const snapshots = new Map(); // continue tokens
    const injections = [];
    const requests = [];
    const sockets = new Set();
    const timers = new Set();
    let closed = false;

    const keyOf = (r, ns, name) => `${r.name}/${r.namespaced ? ns : ''}/${name}`;

    function emit(type, r, obj, prev) {
        const ev = { rv, type, r, obj: clone(obj), prev: clone(prev) };
        history.push(ev);
        while (history.length > o.historyLimit) compactedRv = history.shift().rv;
        for (const w of watchers) if (w.r === r) w.deliver(ev);
        if (o.kubelet && r.name === 'pods' && type !== 'DELETED') kubeletKick(obj);
        if (r.name === 'pods' && type === 'DELETED') void envdStop(obj.metadata.uid).then(() => podNetDown(obj.metadata.uid)).then(() => podLogs.delete(obj.metadata.uid));
    }

    function persist(r, obj, prev) {
        rv += 1;
        obj.metadata.resourceVersion = String(rv);
        store.set(keyOf(r, obj.metadata.namespace, obj.metadata.name), obj);
        emit(prev ? 'MODIFIED' : 'ADDED', r, obj, prev);
        return obj;
    }

    function remove(r, obj) {
        rv += 1;
        const last = clone(obj);
        last.metadata.resourceVersion = String(rv);
        store.delete(keyOf(r, obj.metadata.namespace, obj.metadata.name));
        emit('DELETED', r, last, obj);
        return last;
    }

    function lookup(r, ns, name) {
        const cur = store.get(keyOf(r, ns, name));
        if (!cur) throw notFound(r, name);
        return cur;
    }

    function withKind(r, obj) {
        return { apiVersion: r.apiVersion, kind: r.kind, ...obj };
    }

    function validateMeta(r, obj) {
        const name = obj.metadata.name;
        const causes = [];
        if (!name) causes.push({ reason: 'FieldValueRequired', message: 'Required value: name or generateName is required', field: 'metadata.name' });
        else if (name.length > 253 || !NAME_RE.test(name))
            causes.push({
                reason: 'FieldValueInvalid', field: 'metadata.name',
                message: `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
            });
        for (const [k, v] of Object.entries(obj.metadata.labels ?? {})) {
            if (typeof v !== 'string' || v.length > 63 || !/^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/.test(v))
                causes.push({ reason: 'FieldValueInvalid', field: `metadata.labels`, message: `Invalid value: "${v}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character` });
            const kn = k.includes('/') ? k.split('/').pop() : k;
            if (!kn || kn.length > 63 || !/^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(kn))
                causes.push({ reason: 'FieldValueInvalid', field: 'metadata.labels', message: `Invalid value: "${k}": name part must consist of alphanumeric characters, '-', '_' or '.'` });
        }
        const annSize = Object.entries(obj.metadata.annotations ?? {}).reduce((n, [k, v]) => n + k.length + String(v).length, 0);
        if (annSize > 256 * 1024)
            causes.push({ reason: 'FieldValueTooLong', field: 'metadata.annotations', message: `Too long: must have at most 262144 bytes` });
        const owners = obj.metadata.ownerReferences ?? [];
        if (owners.filter((x) => x.controller).length > 1)
            causes.push({ reason: 'FieldValueInvalid', field: 'metadata.ownerReferences', message: 'Invalid value: []: Only one reference can have Controller set to true' });
        if (r.cr) causes.push(...crValidate(r, obj));
        if (causes.length) throw invalid(r, name || obj.metadata.generateName || '', causes);
    }

    // create (POST collection)
    function create(r, ns, body, dryRun, fv = {}) {
        if (!isObj(body) || !isObj(body.metadata ?? {})) throw badRequest('the body must be a JSON object');
        if (body.kind && body.kind !== r.kind) throw badRequest(`the API version in the data (${body.apiVersion}) does not match the expected API version (${r.apiVersion}) or kind ${body.kind} is not ${r.kind}`);
        const obj = withKind(r, clone(body));
        obj.apiVersion = r.apiVersion;
        obj.kind = r.kind;
        const md = (obj.metadata ??= {});
        if (r.namespaced) {
            if (md.namespace && md.namespace !== ns)
                throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
            md.namespace = ns;
        } else delete md.namespace;
        if (!md.name && md.generateName) md.name = md.generateName.slice(0, 58) + randomBytes(5).toString('hex').replace(/[^a-z0-9]/g, 'x').slice(0, 5);
        if (md.resourceVersion) throw invalid(r, md.name ?? '', [{ reason: 'FieldValueInvalid', field: 'metadata.resourceVersion', message: 'Invalid value: must be empty on create' }]);
        for (const k of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation', 'selfLink', 'managedFields']) delete md[k];
        if (r.status) {
            delete obj.status;
            if (r.name === 'pods') obj.status = { phase: 'Pending', qosClass: 'BestEffort' };
        }
        if (r.name === 'pods') podDefaults(obj);
        r.normalize?.(obj);
        if (r.cr) fv.warnings = prune(r, obj, fv.mode);
        if (r.cr) crDefaults(r, obj);
        validateMeta(r, obj);
        if (store.has(keyOf(r, ns, md.name)))
            throw new ApiError(409, 'AlreadyExists', `${r.qualified} "${md.name}" already exists`, detailsOf(r, md.name));
        md.uid = randomUUID();
        md.creationTimestamp = nowTime();
        md.generation = 1;
        if (dryRun) return obj;
        return persist(r, obj, null);
    }

    // update of an existing object: the one place preconditions, immutability,
    // generation, finalizers-during-deletion and no-op suppression live.
    // `sub` is '' (main endpoint) or 'status'.
    function update(r, cur, next, sub, { requireRv, dryRun, fv = {} } = {}) {
        const name = cur.metadata.name;
        if (!isObj(next) || !isObj(next.metadata ?? {})) throw badRequest('the body must be a JSON object');
        next = clone(next);
        next.apiVersion = r.apiVersion;
        next.kind = r.kind;
        const md = (next.metadata ??= {});
        if (md.name && md.name !== name) throw badRequest(`the name of the object (${md.name}) does not match the name on the URL (${name})`);
        if (r.namespaced && md.namespace && md.namespace !== cur.metadata.namespace)
            throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
        if (md.resourceVersion !== undefined && md.resourceVersion !== '' && md.resourceVersion !== cur.metadata.resourceVersion)
            throw conflict(r, name);
        if (requireRv && !md.resourceVersion)
            throw invalid(r, name, [{ reason: 'FieldValueInvalid', field: 'metadata.resourceVersion', message: 'Invalid value: 0x0: must be specified for an update' }]);
        if (sub === 'status') {
            // only status moves (pods also keep label/annotation changes)
            const merged = clone(cur);
            merged.status = next.status;
            if (r.name === 'pods') {
                merged.metadata.labels = md.labels;
                merged.metadata.annotations = md.annotations;
            }
            next = merged;
        } else {
            for (const k of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation'])
                if (cur.metadata[k] !== undefined) md[k] = cur.metadata[k];
                else delete md[k];
            md.name = name;
            if (r.namespaced) md.namespace = cur.metadata.namespace;
            if (r.status) {
                if (cur.status !== undefined) next.status = clone(cur.status);
                else delete next.status;
            }
            if (r.name === 'pods') {
                podDefaults(next);
                if (!podSpecMutable(cur.spec, next.spec))
                    throw invalid(r, name, [{
                        reason: 'FieldValueForbidden', field: 'spec',
                        message: 'Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)',
                    }]);
            }
            r.normalize?.(next, cur);
            if (r.cr) fv.warnings = prune(r, next, fv.mode);
            if (r.cr) crDefaults(r, next);
            validateMeta(r, next);
            if (cur.metadata.deletionTimestamp) {
                const had = new Set(cur.metadata.finalizers ?? []);
                const added = (md.finalizers ?? []).filter((f) => !had.has(f));
                if (added.length)
                    throw invalid(r, name, [{ reason: 'FieldValueForbidden', field: 'metadata.finalizers', message: `Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{${added.map((f) => JSON.stringify(f)).join(', ')}}` }]);
            }
            const body = (x) => { const c = clone(x); delete c.metadata; delete c.status; delete c.apiVersion; delete c.kind; return c; };
            if (!deepEqual(body(cur), body(next))) md.generation = (cur.metadata.generation ?? 1) + 1;
        }
        next.metadata.resourceVersion = cur.metadata.resourceVersion;
        if (deepEqual(next, cur)) return cur; // no-op: no bump, no event
        if (dryRun) return next;
        if (next.metadata.deletionTimestamp && !(next.metadata.finalizers ?? []).length && !podLingers(r, next)) return remove(r, next);
        return persist(r, next, cur);
    }

    // A scheduled Pod stays Terminating until its (simulated) kubelet is done.
    const podLingers = (r, obj) => r.name === 'pods' && !!obj.spec?.nodeName && obj.metadata.deletionGracePeriodSeconds > 0 && !obj.__gone;

    function del(r, cur, opts) {
        const name = cur.metadata.name;
        const pre = opts.preconditions ?? {};
        if (pre.uid && pre.uid !== cur.metadata.uid)
            throw conflict(r, name, `Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${cur.metadata.uid}`);
        if (pre.resourceVersion && pre.resourceVersion !== cur.metadata.resourceVersion)
            throw conflict(r, name, `Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${cur.metadata.resourceVersion}`);
        let grace = opts.gracePeriodSeconds;
        if (r.name === 'pods') {
            if (!cur.spec?.nodeName || ['Succeeded', 'Failed'].includes(cur.status?.phase)) grace = 0;
            grace ??= cur.spec?.terminationGracePeriodSeconds ?? 30;
        }
        const finalizers = cur.metadata.finalizers ?? [];
        if (!finalizers.length && !(r.name === 'pods' && grace > 0)) {
            if (opts.dryRun) return cur;
            return { gone: true, obj: remove(r, cur) };
        }
        if (cur.metadata.deletionTimestamp && (r.name !== 'pods' || grace >= cur.metadata.deletionGracePeriodSeconds)) return { obj: cur };
        const next = clone(cur);
        next.metadata.deletionTimestamp ??= nowTime();
        next.metadata.deletionGracePeriodSeconds = r.name === 'pods' ? grace : 0;
        next.metadata.generation = (cur.metadata.generation ?? 1) + 1;
        if (opts.dryRun) return { obj: next };
        persist(r, next, cur);
        if (r.name === 'pods' && grace > 0 && !o.kubelet) {
            const t = setTimeout(() => {
                timers.delete(t);
                const now = store.get(keyOf(r, next.metadata.namespace, name));
                if (now && now.metadata.uid === next.metadata.uid) podTerminated(r, now);
            }, o.podGraceMs);
            timers.add(t);
        }
        return { obj: store.get(keyOf(r, next.metadata.namespace, name)) };
    }

    // The kubelet has stopped the Pod: it goes once no finalizer holds it.
    function podTerminated(r, pod) {
        if ((pod.metadata.finalizers ?? []).length) {
            const next = clone(pod);
            next.metadata.deletionGracePeriodSeconds = 0;
            if (!deepEqual(next, pod)) persist(r, next, pod);
            return;
        }
        remove(r, pod);
    }


    // --- the simulated kubelet (§14 "Simulated node behaviour") -----------------------
    //
    // Per Pod, one step at a time: schedule (spec.nodeName, PodScheduled), start
    // every container (after the pull delay, or ErrImagePull → ImagePullBackOff
    // for images matching failImages), restart a container whose spec image
    // changed (Killing event, restartCount + 1, lastState.terminated, a new
    // containerID, Ready False then True, podIP kept), stop a deleted Pod.
    // Every status change is a /status write: it bumps the RV and is watched.
    const podRes = RESOURCES.find((x) => x.name === 'pods');
    const busy = new Map(); // uid → {again}
    const kubeletOpts = () => ({ node: 'node-1', podIP: '127.0.0.1', pullDelayMs: 0, readyDelayMs: 0, stopDelayMs: 0, failImages: null, ...(o.kubelet === true ? {} : o.kubelet) });
    const sleep = (ms) => new Promise((res) => {
        const t = setTimeout(() => { timers.delete(t); res(); }, ms);
        timers.add(t);
    });

    // --- envd per Pod (kubelet.envd) ---
    // A Pod's address: its own 127.0.a.b, so the agent's data plane reaches
    // envd and any other port of "the Pod" there, and Pods never share one.
    const podIPs = new Map(); // uid → ip
    let ipNext = 0;
    const ipNet = 100 + (process.pid % 150); // apart from other servers on this machine
    const allocIP = (uid) => {
        if (!podIPs.has(uid)) {
            const n = ipNext++;
            podIPs.set(uid, `127.${ipNet}.${1 + Math.floor(n / 250) % 250}.${1 + (n % 250)}`);
        }
        return podIPs.get(uid);
    };
    const envds = new Map(); // uid → {proc, dir, exited, fwd, socks}
    async function envdStop(uid) {
        const e = envds.get(uid);
        if (!e) return;
        envds.delete(uid);
        for (const so of e.socks) so.destroy();
        if (e.fwd) await new Promise((res) => e.fwd.close(() => res()));
        if (e.proc.exitCode === null && e.proc.signalCode === null) {
            // a container ends whole (a kubelet kills its cgroup): the
            // commands envd started go with it, not on as orphans
            const tree = descendantsOf(e.proc.pid);
            e.proc.kill('SIGKILL');
            for (const pid of tree) {
                try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
            }
            await e.exited;
        }
        fs.rmSync(e.dir, { recursive: true, force: true });
    }
    // Every live descendant of pid, from /proc's parent links.
    function descendantsOf(pid) {
        const children = new Map();
        for (const d of fs.readdirSync('/proc')) {
            if (!/^[0-9]+$/.test(d)) continue;
            try {
                const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
                const ppid = Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]);
                if (!children.has(ppid)) children.set(ppid, []);
                children.get(ppid).push(Number(d));
            } catch { /* exited meanwhile */ }
        }
        const out = [];
        for (let i = 0, todo = [pid]; i < todo.length; i++) {
            for (const c of children.get(todo[i]) ?? []) {
                out.push(c);
                todo.push(c);
            }
        }
        return out;
    }
    const freeLoopbackPort = () => new Promise((res, rej) => {
        const srv = net.createServer();
        srv.once('error', rej);
        srv.listen(0, '127.0.0.1', () => {
            const { port } = srv.address();
            srv.close(() => res(port));
        });
    });
    // Resolves the wait between two /health probes as soon as envd logs that
    // it serves (or exits), so a restart is not a probe period late; 10 ms
    // apart once it said so.
    const untilServing = (proc) => {
        let said = false;
        let tail = '';
        const serving = new Promise((res) => {
            const on = (d) => {
                tail = (tail + d).slice(-256);
                if (!tail.includes('"envd serving"')) return;
                said = true;
                proc.stderr.off('data', on);
                res();
            };
            proc.stderr.on('data', on);
            proc.once('exit', res);
        });
        const period = () => new Promise((r) => setTimeout(r, 10));
        return () => (said ? period() : Promise.race([serving, period()]));
    };
    // Starts a fresh envd for the Pod (the container's restart) and waits,
    // with a deadline, until /health answers at the Pod's address. envd
    // serves on a port of its own and a forwarder owns <podIP>:<envdPort>
    // (our HTTP server binds every interface whatever the host it is
    // given, so envds could not share one port on different addresses).
    async function envdStart(uid, ip, name, container) {
        await envdStop(uid);
        const kl = kubeletOpts();
        if (kl.netns && podNets.has(uid)) return envdStartNetns(uid, ip, name, container);
        // the container's port named envd, as a Service would target it
        const port = (container.ports ?? []).find((x) => x.name === 'envd')?.containerPort ?? kl.envdPort ?? 49983;
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), `kpod-${name.slice(0, 40)}-`));
        // The simulated container shares the host's filesystem; an image
        // would have the sandbox user's home (the default workdir).
        fs.mkdirSync('/home/user', { recursive: true });
        const inner = await freeLoopbackPort();
        const proc = spawn(kl.envd, ['--listen', `127.0.0.1:${inner}`, '--state-dir', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
        let log = '';
        podLogs.get(uid)?.delete(container.name); // a new container: its log starts empty
        proc.stderr.on('data', (d) => {
            log = (log + d).slice(-4000);
            logLine(uid, container.name, d);
        });
        const exited = new Promise((res) => proc.once('exit', res));
        const socks = new Set();
        const fwd = net.createServer((c) => {
            const up = net.connect(inner, '127.0.0.1');
            socks.add(c);
            socks.add(up);
            const done = () => { c.destroy(); up.destroy(); socks.delete(c); socks.delete(up); };
            c.on('error', done).on('close', done);
            up.on('error', done).on('close', done);
            c.pipe(up);
            up.pipe(c);
        });
        const pause = untilServing(proc);
        envds.set(uid, { proc, dir, exited, fwd, socks, log: () => log, startedAt: Date.now() });
        await new Promise((res, rej) => { fwd.once('error', rej); fwd.listen(port, ip, res); });
        const deadline = Date.now() + 10000;
        for (;;) {
            const ok = await fetch(`http://${ip}:${port}/health`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status === 204, () => false);
            if (ok) break;
            if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`envd of Pod ${name} did not answer at ${ip}:${port}: ${log}`);
            await pause();
        }
    }

    // --- Pod network namespaces, init containers, sidecars, container logs (kubelet.netns) ---
    // One namespace per Pod (`ip netns add`), a veth pair with the host's end
    // 10.N.a.4k+1 (the Pod's node address: status.hostIP) and the Pod's eth0
    // 10.N.a.4k+2 (status.podIP), its default route via the host's end.
    // Processes enter it with nsenter (never `ip netns exec`, which remounts
    // /sys) and get their capabilities through setpriv.
    const podNets = new Map(); // uid → {ns, hostIf, ip, hostIP, procs: Map(name → {proc, exited, code})}
    const podLogs = new Map(); // uid → Map(container → [{t, line}])
    const LOG_LINES = 5000;
    let netNext = 0;
    const netBase = 160 + (process.pid % 30);
    const sh = (cmd, args) => new Promise((res, rej) => execFile(cmd, args, { timeout: 10000 }, (e, so, se) => (e ? rej(new Error(`${cmd} ${args.join(' ')}: ${se || e.message}`)) : res(so))));
    async function podNetUp(uid) {
        const n = netNext++;
        const a = Math.floor(n / 64) % 250, k = n % 64;
        const hostIP = `10.${netBase}.${a}.${4 * k + 1}`, ip = `10.${netBase}.${a}.${4 * k + 2}`;
        const ns = `kp-${process.pid}-${n}`, hostIf = `kp${process.pid % 100000}x${n}`;
        const net = { ns, hostIf, ip, hostIP, procs: new Map() };
        podNets.set(uid, net);
        const inNs = (...args) => sh('nsenter', [`--net=/run/netns/${ns}`, '--', 'ip', ...args]);
        await sh('ip', ['netns', 'add', ns]);
        await sh('ip', ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
        await sh('ip', ['addr', 'add', `${hostIP}/30`, 'dev', hostIf]);
        await sh('ip', ['link', 'set', hostIf, 'up']);
        await inNs('addr', 'add', `${ip}/30`, 'dev', 'eth0');
        await inNs('link', 'set', 'eth0', 'up');
        await inNs('link', 'set', 'lo', 'up');
        await inNs('route', 'add', 'default', 'via', hostIP);
        return net;
    }
    async function podNetDown(uid) {
        const net = podNets.get(uid);
        if (!net) return;
        podNets.delete(uid);
        await Promise.all([...net.procs.values()].map(async (p) => {
            if (p.proc.exitCode === null && p.proc.signalCode === null) p.proc.kill('SIGTERM');
            const t = setTimeout(() => p.proc.kill('SIGKILL'), 3000);
            await p.exited;
            clearTimeout(t);
        }));
        await sh('ip', ['netns', 'del', net.ns]).catch(() => {});
        await sh('ip', ['link', 'del', net.hostIf]).catch(() => {});
    }
    const DEFAULT_CAPS = ['chown', 'dac_override', 'fowner', 'fsetid', 'kill', 'setgid', 'setuid', 'setpcap', 'net_bind_service', 'net_raw', 'sys_chroot', 'mknod', 'audit_write', 'setfcap'];
    // A container runtime's default capabilities, then securityContext's drop and add.
    function capsOf(c) {
        const sc = c.securityContext ?? {};
        if (sc.privileged) return null;
        const norm = (x) => String(x).toLowerCase().replace(/^cap_/, '');
        let set = new Set(DEFAULT_CAPS);
        for (const d of sc.capabilities?.drop ?? []) norm(d) === 'all' ? (set = new Set()) : set.delete(norm(d));
        for (const x of sc.capabilities?.add ?? []) if (norm(x) !== 'all') set.add(norm(x));
        return [...set];
    }
    function envOf(pod, c, net) {
        const env = { PATH: process.env.PATH, HOME: '/root', ...(process.env.ASAN_OPTIONS ? { ASAN_OPTIONS: process.env.ASAN_OPTIONS } : {}), ...(process.env.UBSAN_OPTIONS ? { UBSAN_OPTIONS: process.env.UBSAN_OPTIONS } : {}) };
        const field = { 'status.podIP': net.ip, 'status.hostIP': net.hostIP, 'metadata.name': pod.metadata.name, 'metadata.namespace': pod.metadata.namespace, 'metadata.uid': pod.metadata.uid };
        for (const e of c.env ?? []) {
            if (typeof e.value === 'string') env[e.name] = e.value;
            else if (e.valueFrom?.fieldRef) env[e.name] = field[e.valueFrom.fieldRef.fieldPath] ?? '';
        }
        return env;
    }
    function logLine(uid, container, text) {
        if (!podLogs.has(uid)) podLogs.set(uid, new Map());
        const m = podLogs.get(uid);
        if (!m.has(container)) m.set(container, []);
        const lines = m.get(container);
        for (const line of String(text).split('\n')) {
            if (!line) continue;
            lines.push({ t: new Date().toISOString().replace(/(\.\d{3})Z$/, '$1000000Z'), line });
            if (lines.length > LOG_LINES) lines.splice(0, lines.length - LOG_LINES);
        }
    }
    // Runs container c of the Pod as a process in the Pod's namespace.
    function containerSpawn(pod, c, net, argv) {
        const kl = kubeletOpts();
        const caps = capsOf(c);
        const cmd = argv ?? [...(c.command ?? []), ...(c.args ?? [])];
        if (!cmd.length) throw new Error(`container ${c.name} has no command`);
        const bin = kl.bins?.[cmd[0]] ?? cmd[0];
        const priv = caps ? ['setpriv', `--bounding-set=-all${caps.map((x) => `,+${x}`).join('')}`, '--inh-caps=-all', '--'] : [];
        const proc = spawn('nsenter', [`--net=/run/netns/${net.ns}`, '--', ...priv, bin, ...cmd.slice(1)], { stdio: ['ignore', 'pipe', 'pipe'], env: envOf(pod, c, net) });
        let tail = '';
        const out = (d) => {
            tail = (tail + d).slice(-4000);
            logLine(pod.metadata.uid, c.name, d);
        };
        proc.stdout.on('data', out);
        proc.stderr.on('data', out);
        const rec = { proc, exited: null, log: () => tail };
        rec.exited = new Promise((res) => proc.once('exit', (code, sig) => res(code ?? (sig ? 128 : 1))));
        return rec;
    }
    async function probeReady(c, pn, rec, deadlineMs) {
        const pr = c.readinessProbe ?? c.startupProbe;
        if (!pr?.httpGet && !pr?.tcpSocket) return;
        const port = pr.httpGet?.port ?? pr.tcpSocket?.port;
        const deadline = Date.now() + deadlineMs;
        for (;;) {
            const ok = pr.httpGet
                ? await fetch(`http://${pn.ip}:${port}${pr.httpGet.path ?? '/'}`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status >= 200 && r.status < 400, () => false)
                : await new Promise((res) => { const so = net.connect(port, pn.ip); so.once('connect', () => { so.destroy(); res(true); }); so.once('error', () => res(false)); });
            if (ok) return;
            if (rec.proc.exitCode !== null || Date.now() > deadline) throw new Error(`container ${c.name} did not become ready: ${rec.log()}`);
            await new Promise((r) => setTimeout(r, 20));
        }
    }
    // Init containers in order: the ordinary ones to completion (a failure
    // stops the Pod here, as Init:Error), native sidecars (restartPolicy
    // Always) started and, with a probe, ready before the next one.
    async function runInits(ns, name, uid, pod, net) {
        const statuses = [];
        for (const c of pod.spec.initContainers ?? []) {
            const rec = containerSpawn(pod, c, net);
            const sidecar = c.restartPolicy === 'Always';
            const startedAt = nowTime();
            if (sidecar) {
                net.procs.set(c.name, rec);
                await probeReady(c, net, rec, 10000);
                statuses.push({ name: c.name, image: c.image, imageID: imageID(c.image), containerID: containerID(), ready: true, started: true, restartCount: 0, state: { running: { startedAt } } });
            } else {
                const code = await rec.exited;
                statuses.push({ name: c.name, image: c.image, imageID: imageID(c.image), containerID: containerID(), ready: false, started: false, restartCount: 0, state: { terminated: { exitCode: code, reason: code === 0 ? 'Completed' : 'Error', startedAt, finishedAt: nowTime() } } });
                if (code !== 0) {
                    kubeletEvent(pod, 'Warning', 'BackOff', `init container ${c.name} failed (exit ${code}): ${rec.log().slice(-300)}`, c.name);
                    writeStatus(ns, name, uid, (s) => { s.initContainerStatuses = statuses; });
                    return false;
                }
            }
            kubeletEvent(pod, 'Normal', 'Started', `Started container ${c.name}`, c.name);
        }
        writeStatus(ns, name, uid, (s) => { s.initContainerStatuses = statuses; });
        return true;
    }
    // envd inside the Pod's namespace, on the Pod IP: no forwarder.
    async function envdStartNetns(uid, ip, name, container) {
        const kl = kubeletOpts();
        const net = podNets.get(uid);
        const pod = [...store.values()].find((x) => x.metadata?.uid === uid && x.kind === 'Pod') ?? { metadata: { uid, name, namespace: '' } };
        const port = (container.ports ?? []).find((x) => x.name === 'envd')?.containerPort ?? kl.envdPort ?? 49983;
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), `kpod-${name.slice(0, 40)}-`));
        fs.mkdirSync('/home/user', { recursive: true });
        podLogs.get(uid)?.delete(container.name);
        const rec = containerSpawn(pod, container, net, [kl.envd, '--listen', `${net.ip}:${port}`, '--state-dir', dir]);
        const pause = untilServing(rec.proc);
        envds.set(uid, { proc: rec.proc, dir, exited: rec.exited, fwd: null, socks: new Set(), log: rec.log, startedAt: Date.now() });
        const deadline = Date.now() + 10000;
        for (;;) {
            const ok = await fetch(`http://${net.ip}:${port}/health`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status === 204, () => false);
            if (ok) break;
            if (rec.proc.exitCode !== null || Date.now() > deadline) throw new Error(`envd of Pod ${name} did not answer at ${net.ip}:${port}: ${rec.log()}`);
            await pause();
        }
    }

    const hash = (s) => {
        let h = 0x811c9dc5;
        for (const ch of s) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
        return h.toString(16).padStart(8, '0');
    };
    const imageID = (img) => `docker-pullable://${img.replace(/[:@].*$/, '')}@sha256:${hash(img).repeat(8)}`;
    const containerID = () => `containerd://${randomBytes(32).toString('hex')}`;

    function kubeletKick(obj) {
        const uid = obj.metadata.uid;
        const b = busy.get(uid);
        if (b) return void (b.again = true);
        const entry = { again: false };
        busy.set(uid, entry);
        setImmediate(async () => {
            try {
                do {
                    entry.again = false;
                    await kubeletStep(obj.metadata.namespace, obj.metadata.name, uid);
                } while (entry.again && !closed);
            } finally {
                busy.delete(uid);
            }
        });
    }

    function podNow(ns, name, uid) {
        const p = store.get(keyOf(podRes, ns, name));
        return p && p.metadata.uid === uid ? p : null;
    }

    // A status write from the kubelet; fn edits a copy of the current status.
    function writeStatus(ns, name, uid, fn) {
        const cur = podNow(ns, name, uid);
        if (!cur) return null;
        const next = clone(cur);
        next.status ??= {};
        fn(next.status, next);
        return update(podRes, cur, next, 'status');
    }

    function setCond(st, type, status, reason) {
        st.conditions ??= [];
        const c = st.conditions.find((x) => x.type === type);
        if (c && c.status === status) return;
        const entry = { type, status, lastProbeTime: null, lastTransitionTime: nowTime(), ...(reason ? { reason } : {}) };
        if (c) Object.assign(c, entry);
        else st.conditions.push(entry);
    }

    function kubeletEvent(pod, type, reason, message, container) {
        const ns = pod.metadata.namespace;
        const kl = kubeletOpts();
        const t = nowTime();
        create(RESOURCES.find((x) => x.name === 'events'), ns, {
            metadata: { name: `${pod.metadata.name}.${randomBytes(8).toString('hex')}`, namespace: ns },
            involvedObject: { kind: 'Pod', namespace: ns, name: pod.metadata.name, uid: pod.metadata.uid, apiVersion: 'v1', ...(container ? { fieldPath: `spec.containers{${container}}` } : {}) },
            reason, message, type, count: 1, firstTimestamp: t, lastTimestamp: t,
            source: { component: 'kubelet', host: kl.node }, reportingComponent: 'kubelet', reportingInstance: kl.node,
        });
    }

    const pullFails = (img) => {
        const f = kubeletOpts().failImages;
        return !!f && (f instanceof RegExp ? f.test(img) : f.includes(img));
    };

    function recomputeReady(st) {
        const all = (st.containerStatuses ?? []).length > 0 && st.containerStatuses.every((c) => c.ready);
        setCond(st, 'ContainersReady', all ? 'True' : 'False', all ? undefined : 'ContainersNotReady');
        setCond(st, 'Ready', all ? 'True' : 'False', all ? undefined : 'ContainersNotReady');
    }

    async function kubeletStep(ns, name, uid) {
        const kl = kubeletOpts();
        let pod = podNow(ns, name, uid);
        if (!pod || closed) return;
        if (!pod.spec?.nodeName) {
            if (pod.metadata.deletionTimestamp) return;
            // the scheduler's binding: nodeName is not writable through update
            const next = clone(pod);
            next.spec.nodeName = kl.node;
            next.status ??= {};
            setCond(next.status, 'PodScheduled', 'True');
            persist(podRes, next, pod);
            kubeletEvent(next, 'Normal', 'Scheduled', `Successfully assigned ${ns}/${name} to ${kl.node}`);
            return void kubeletKick(next);
        }
        if (pod.metadata.deletionTimestamp) {
            if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed' || pod.metadata.deletionGracePeriodSeconds === 0) {
                if (!(pod.metadata.finalizers ?? []).length) remove(podRes, pod);
                return;
            }
            for (const c of pod.spec.containers) kubeletEvent(pod, 'Normal', 'Killing', `Stopping container ${c.name}`, c.name);
            await sleep(kl.stopDelayMs);
            await envdStop(uid);
            await podNetDown(uid);
            pod = podNow(ns, name, uid);
            if (!pod) return;
            writeStatus(ns, name, uid, (st) => {
                for (const c of st.containerStatuses ?? []) {
                    c.state = { terminated: { exitCode: 0, reason: 'Completed', startedAt: c.state?.running?.startedAt, finishedAt: nowTime(), containerID: c.containerID } };
                    c.ready = false;
                    c.started = false;
                }
                st.phase = 'Succeeded'; // stopped cleanly within its grace period
                recomputeReady(st);
            });
            pod = podNow(ns, name, uid);
            if (pod) podTerminated(podRes, pod);
            return;
        }
        const st = pod.status ?? {};
        if (!st.containerStatuses) {
            // first start: sandbox ready, pull, run
            let pn = null;
            if (kl.netns && kl.envd && !podNets.has(uid)) {
                pn = await podNetUp(uid);
                if (!podNow(ns, name, uid)) return void (await podNetDown(uid));
            }
            writeStatus(ns, name, uid, (s) => {
                s.phase = 'Pending';
                s.hostIP = pn ? pn.hostIP : '127.0.0.1';
                s.hostIPs = [{ ip: s.hostIP }];
                const ip = pn ? pn.ip : kl.envd ? allocIP(uid) : kl.podIP;
                s.podIP = ip;
                s.podIPs = [{ ip }];
                s.startTime = nowTime();
                setCond(s, 'PodReadyToStartContainers', 'True');
                setCond(s, 'Initialized', 'True');
                s.containerStatuses = pod.spec.containers.map((c) => ({
                    name: c.name, image: c.image, imageID: '', ready: false, started: false, restartCount: 0,
                    state: { waiting: { reason: 'ContainerCreating' } }, lastState: {},
                }));
                recomputeReady(s);
            });
            if (pn && !(await runInits(ns, name, uid, pod, pn))) return;
            kubeletKick(pod);
            return;
        }
        // containers whose spec image differs from what runs (or is waiting to run)
        for (const c of pod.spec.containers) {
            const cs = st.containerStatuses.find((x) => x.name === c.name);
            if (!cs) continue;
            const wants = cs.image !== c.image || cs.state?.waiting?.reason === 'ContainerCreating';
            const backoff = cs.state?.waiting && /ErrImagePull|ImagePullBackOff/.test(cs.state.waiting.reason) && cs.image === c.image;
            if (!wants || backoff) continue;
            const wasRunning = !!cs.state?.running;
            if (wasRunning) {
                kubeletEvent(pod, 'Normal', 'Killing', `Container ${c.name} definition changed, will be restarted`, c.name);
                if (kl.envd && c.name === pod.spec.containers[0].name) await envdStop(uid);
                writeStatus(ns, name, uid, (s) => {
                    const x = s.containerStatuses.find((y) => y.name === c.name);
                    x.lastState = { terminated: { exitCode: 137, reason: 'Error', startedAt: x.state.running.startedAt, finishedAt: nowTime(), containerID: x.containerID } };
                    x.state = { waiting: { reason: 'ContainerCreating' } };
                    x.image = c.image;
                    x.ready = false;
                    x.started = false;
                    x.restartCount += 1;
                    recomputeReady(s);
                });
            }
            kubeletEvent(pod, 'Normal', 'Pulling', `Pulling image "${c.image}"`, c.name);
            await sleep(kubeletOpts().pullDelayMs);
            pod = podNow(ns, name, uid);
            if (!pod || pod.metadata.deletionTimestamp) return void (pod && kubeletKick(pod));
            const specNow = pod.spec.containers.find((y) => y.name === c.name);
            if (specNow.image !== c.image) return void kubeletKick(pod); // changed again meanwhile
            if (pullFails(c.image)) {
                const msg = `Failed to pull image "${c.image}": rpc error: code = NotFound desc = failed to pull and unpack image "${c.image}": not found`;
                kubeletEvent(pod, 'Warning', 'Failed', msg, c.name);
                writeStatus(ns, name, uid, (s) => {
                    const x = s.containerStatuses.find((y) => y.name === c.name);
                    x.image = c.image;
                    x.state = { waiting: { reason: 'ErrImagePull', message: msg } };
                    x.ready = false;
                    recomputeReady(s);
                });
                await sleep(Math.max(10, kubeletOpts().pullDelayMs));
                writeStatus(ns, name, uid, (s) => {
                    const x = s.containerStatuses.find((y) => y.name === c.name);
                    if (x.state?.waiting?.reason === 'ErrImagePull' && x.image === c.image)
                        x.state = { waiting: { reason: 'ImagePullBackOff', message: `Back-off pulling image "${c.image}"` } };
                });
                continue;
            }
            kubeletEvent(pod, 'Normal', 'Pulled', `Successfully pulled image "${c.image}"`, c.name);
            if (kubeletOpts().envd && c.name === pod.spec.containers[0].name) {
                try {
                    await envdStart(uid, pod.status?.podIP || allocIP(uid), name, c);
                } catch (e) {
                    // visible as a container that does not start, not a hang
                    await envdStop(uid);
                    kubeletEvent(pod, 'Warning', 'Failed', `Error: ${e.message}`.slice(0, 1000), c.name);
                    writeStatus(ns, name, uid, (s) => {
                        const x = s.containerStatuses.find((y) => y.name === c.name);
                        x.image = c.image;
                        x.state = { waiting: { reason: 'RunContainerError', message: String(e.message).slice(0, 1000) } };
                        x.ready = false;
                        recomputeReady(s);
                    });
                    continue;
                }
                pod = podNow(ns, name, uid);
                if (!pod || pod.metadata.deletionTimestamp) {
                    await envdStop(uid);
                    return void (pod && kubeletKick(pod));
                }
            }
            const id = containerID();
            writeStatus(ns, name, uid, (s) => {
                const x = s.containerStatuses.find((y) => y.name === c.name);
                x.image = kubeletOpts().normalise && !c.image.includes('/') ? `docker.io/library/${c.image}` : c.image;
                x.imageID = imageID(c.image);
                x.containerID = id;
                x.state = { running: { startedAt: nowTime() } };
                x.started = true;
                x.ready = kubeletOpts().readyDelayMs <= 0;
                s.phase = 'Running';
                recomputeReady(s);
            });
            kubeletEvent(pod, 'Normal', 'Started', `Started container ${c.name}`, c.name);
            if (kubeletOpts().readyDelayMs > 0) {
                await sleep(kubeletOpts().readyDelayMs);
                writeStatus(ns, name, uid, (s) => {
                    const x = s.containerStatuses.find((y) => y.name === c.name);
                    if (x.containerID === id) x.ready = true;
                    recomputeReady(s);
                });
            }
        }
    }

    function list(r, ns) {
        const out = [];
        for (const [k, v] of store) {
            if (!k.startsWith(`${r.name}/`)) continue;
            if (r.namespaced && ns && v.metadata.namespace !== ns) continue;
            out.push(v);
        }
        out.sort((a, b) => `${a.metadata.namespace ?? ''}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace ?? ''}/${b.metadata.name}`));
        return out;
    }

    // --- watch -----------------------------------------------------------------------------

    function startWatch(req, res, r, ns, q, match) {
        const from = q.get('resourceVersion');
        const bookmarks = q.get('allowWatchBookmarks') === 'true' || q.get('allowWatchBookmarks') === '1';
        const timeoutSec = Number(q.get('timeoutSeconds') || o.watchTimeoutSec);
        const inNs = (obj) => !r.namespaced || !ns || obj.metadata.namespace === ns;
        if (from && from !== '0' && Number(from) < compactedRv && o.watch410 === 'http') {
            throw new ApiError(410, 'Expired', `too old resource version: ${from} (${compactedRv + 1})`);
        }
        res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache' });
        res.flushHeaders();
        const w = { r, res, closed: false };
        const writeEvent = (type, object) => {
            if (w.closed) return;
            const line = JSON.stringify({ type, object }) + '\n';
            if (o.splitEvents && line.length > 2) {
                const half = Math.floor(line.length / 2);
                res.write(line.slice(0, half));
                res.write(line.slice(half));
            } else res.write(line);
        };
        w.end = () => {
            if (w.closed) return;
            w.closed = true;
            watchers.delete(w);
            clearInterval(w.bm);
            clearTimeout(w.to);
            res.end();
        };
        w.deliver = (ev) => {
            if (!inNs(ev.obj)) return;
            const now = ev.type !== 'DELETED' && match(ev.obj);
            const before = ev.prev ? match(ev.prev) : false;
            if (ev.type === 'DELETED') {
                if (before) writeEvent('DELETED', ev.obj);
            } else if (now && !before) writeEvent('ADDED', ev.obj);
            else if (now && before) writeEvent(ev.type === 'ADDED' ? 'ADDED' : 'MODIFIED', ev.obj);
            else if (!now && before) {
                const gone = clone(ev.prev);
                gone.metadata.resourceVersion = String(ev.rv);
                writeEvent('DELETED', gone);
            }
        };
        if (!from || from === '0') {
            for (const obj of list(r, ns)) if (match(obj)) writeEvent('ADDED', obj);
        } else if (Number(from) < compactedRv) {
            writeEvent('ERROR', statusBody(410, 'Expired', `too old resource version: ${from} (${compactedRv + 1})`));
            res.end();
            return;
        } else {
            for (const ev of history) if (ev.r === r && ev.rv > Number(from)) w.deliver(ev);
        }
        watchers.add(w);
        if (bookmarks && o.bookmarkMs > 0)
            w.bm = setInterval(() => writeEvent('BOOKMARK', { kind: r.kind, apiVersion: r.apiVersion, metadata: { resourceVersion: String(rv) } }), o.bookmarkMs);
        w.to = setTimeout(w.end, timeoutSec * 1000);
        // (not req 'close': that fires once the request body is read)
        res.on('close', w.end);
    }

    // --- discovery -------------------------------------------------------------------------

    function resourceList(groupVersion) {
        const resources = [];
        for (const r of RESOURCES.filter((x) => x.apiVersion === groupVersion)) {
            resources.push({
                name: r.name, singularName: r.kind.toLowerCase(), namespaced: r.namespaced, kind: r.kind,
                verbs: VERBS, ...(r.short ? { shortNames: r.short } : {}), ...(r.cr ? { categories: ['all'] } : {}),
            });
            if (r.status) resources.push({ name: `${r.name}/status`, singularName: '', namespaced: r.namespaced, kind: r.kind, verbs: ['get', 'patch', 'update'] });
            if (r.scale)
                resources.push({ name: `${r.name}/scale`, singularName: '', namespaced: r.namespaced, group: 'autoscaling', version: 'v1', kind: 'Scale', verbs: ['get', 'patch', 'update'] });
        }
        return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources };
    }

    function groupList() {
        const groups = [...new Set(RESOURCES.filter((r) => r.group).map((r) => r.group))].map((g) => {
            const v = RESOURCES.find((r) => r.group === g).version;
            const gv = { groupVersion: `${g}/${v}`, version: v };
            return { name: g, versions: [gv], preferredVersion: gv };
        });
        return { kind: 'APIGroupList', apiVersion: 'v1', groups };
    }

    // OpenAPI v3, only what kubectl's query-parameter verifier reads: a PATCH
    // per kind carrying the GVK extension and the fieldValidation parameter,
    // so kubectl leaves validation to the server instead of fetching /openapi/v2.
    function openapiDoc(gv) {
        const paths = {};
        for (const r of RESOURCES.filter((x) => x.apiVersion === gv)) {
            const gvk = { group: r.group, version: r.version, kind: r.kind }; // an object on operations
            const item = r.namespaced ? `${r.prefix}/namespaces/{namespace}/${r.name}/{name}` : `${r.prefix}/${r.name}/{name}`;
            const op = (verb) => ({
                'x-kubernetes-action': verb, 'x-kubernetes-group-version-kind': gvk,
                parameters: [{ name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } }],
                requestBody: { content: { 'application/merge-patch+json': { schema: { type: 'object' } }, 'application/json-patch+json': { schema: { type: 'object' } } } },
                responses: { 200: { description: 'OK' } },
            });
            paths[item] = { patch: op('patch'), put: op('put') };
        }
        return { openapi: '3.0.0', info: { title: 'Kubernetes', version: 'v1.32.0' }, paths, components: { schemas: {} } };
    }

    function openapiIndex() {
        const paths = {};
        for (const gv of new Set(RESOURCES.map((r) => r.apiVersion))) {
            const p = gv.includes('/') ? `apis/${gv}` : `api/${gv}`;
            paths[p] = { serverRelativeURL: `/openapi/v3/${p}?hash=0000` };
        }
        return { paths };
    }

    // --- routing ---------------------------------------------------------------------------

    // → {r, ns, name, sub} or null
    function route(p) {
        const segs = p.split('/').filter(Boolean);
        let rest;
        let prefixGv;
        if (segs[0] === 'api' && segs.length >= 2) {
            prefixGv = segs[1];
            rest = segs.slice(2);
        } else if (segs[0] === 'apis' && segs.length >= 3) {
            prefixGv = `${segs[1]}/${segs[2]}`;
            rest = segs.slice(3);
        } else return null;
        let ns = null;
        if (rest[0] === 'namespaces' && rest.length >= 3) {
            ns = rest[1];
            rest = rest.slice(2);
        }
        const r = RESOURCES.find((x) => x.apiVersion === prefixGv && x.name === rest[0]);
        if (!r || rest.length > 3) return null;
        if (!r.namespaced && ns !== null) return null;
        const name = rest[1] ?? null;
        const sub = rest[2] ?? '';
        if (r.namespaced && name && ns === null) return null; // items need a namespace
        if (sub && !((sub === 'status' && r.status) || (sub === 'scale' && r.scale))) return null;
        return { r, ns, name, sub };
    }

    function scaleOf(obj) {
        return {
            kind: 'Scale', apiVersion: 'autoscaling/v1',
            metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace, uid: obj.metadata.uid, resourceVersion: obj.metadata.resourceVersion, creationTimestamp: obj.metadata.creationTimestamp },
            spec: { replicas: obj.spec?.replicas ?? 0 },
            status: { replicas: obj.status?.runningReplicas ?? 0, selector: obj.status?.selector ?? '' },
        };
    }

    function applyPatch(r, cur, ctype, patch) {
        const t = (ctype || '').split(';')[0].trim();
        if (t === 'application/json-patch+json') {
            try {
                return jsonPatch(cur, patch);
            } catch (e) {
                throw new ApiError(422, 'Invalid', e.message);
            }
        }
        if (t === 'application/merge-patch+json') return mergePatch(cur, patch);
        if (t === 'application/strategic-merge-patch+json' && !r.cr) return strategicMerge(cur, patch);
        throw new ApiError(415, 'UnsupportedMediaType',
            'the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json' + (r.cr ? ', application/apply-patch+yaml' : ', application/strategic-merge-patch+json'));
    }

    // --- Pod log API and metrics.k8s.io PodMetrics (kubelet.envd) ---
    // GET /api/v1/namespaces/{ns}/pods/{name}/log: container (required when
    // the Pod has several), tailLines, sinceTime, sinceSeconds, timestamps,
    // limitBytes; text/plain, the current container's output.
    function podLog(res, ns, name, q) {
        const pod = store.get(keyOf(podRes, ns, name));
        if (!pod) throw new ApiError(404, 'NotFound', `pods "${name}" not found`, { name, kind: 'pods' });
        const names = pod.spec.containers.map((c) => c.name);
        const all = [...names, ...(pod.spec.initContainers ?? []).map((c) => c.name)];
        let c = q.get('container');
        if (!c) {
            if (names.length !== 1) throw badRequest(`a container name must be specified for pod ${name}, choose one of: [${names.join(' ')}]`);
            c = names[0];
        }
        if (!all.includes(c)) throw badRequest(`container ${c} is not valid for pod ${name}`);
        let lines = podLogs.get(pod.metadata.uid)?.get(c) ?? [];
        const since = q.get('sinceTime') ? Date.parse(q.get('sinceTime')) : q.get('sinceSeconds') ? Date.now() - 1000 * Number(q.get('sinceSeconds')) : null;
        if (since !== null) {
            if (Number.isNaN(since)) throw badRequest(`parsing time "${q.get('sinceTime')}" as RFC 3339: invalid`);
            lines = lines.filter((x) => Date.parse(x.t) >= since);
        }
        if (q.get('tailLines') !== null) {
            const n = Number(q.get('tailLines'));
            if (!Number.isInteger(n) || n < 0) throw badRequest('tailLines must be a non-negative integer');
            lines = lines.slice(Math.max(0, lines.length - n));
        }
        let text = lines.map((x) => (q.get('timestamps') === 'true' ? `${x.t} ${x.line}` : x.line) + '\n').join('');
        if (q.get('limitBytes')) text = Buffer.from(text).subarray(0, Number(q.get('limitBytes'))).toString();
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.end(text);
        return 200;
    }
    // The envd process and its descendants, from /proc: CPU as nanocores over
    // the Pod's life so far, memory as the working set (RSS).
    function procTree(root) {
        const kids = new Map();
        for (const d of fs.readdirSync('/proc')) {
            if (!/^\d+$/.test(d)) continue;
            try {
                const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
                const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
                const ppid = Number(f[1]);
                if (!kids.has(ppid)) kids.set(ppid, []);
                kids.get(ppid).push({ pid: Number(d), utime: Number(f[11]), stime: Number(f[12]), start: Number(f[19]), rss: Number(f[21]) });
            } catch { /* gone */ }
        }
        const out = [];
        const walk = (pid) => { for (const k of kids.get(pid) ?? []) { out.push(k); walk(k.pid); } };
        walk(root);
        return out;
    }
    function podMetrics(ns, name) {
        const pod = store.get(keyOf(podRes, ns, name));
        if (!pod) throw new ApiError(404, 'NotFound', `podmetrics.metrics.k8s.io "${name}" not found`, { name, kind: 'pods', group: 'metrics.k8s.io' });
        const e = envds.get(pod.metadata.uid);
        const containers = [];
        if (e && e.proc.exitCode === null) {
            const self = (() => { try { const st = fs.readFileSync(`/proc/${e.proc.pid}/stat`, 'utf8'); const f = st.slice(st.lastIndexOf(')') + 2).split(' '); return { pid: e.proc.pid, utime: Number(f[11]), stime: Number(f[12]), rss: Number(f[21]) }; } catch { return null; } })();
            const ps = [...(self ? [self] : []), ...procTree(e.proc.pid)];
            // a rate, as metrics-server reports: CPU ticks (1/100 s) over the
            // last window, one sample per 10 s (as a scrape interval would)
            const ticks = ps.reduce((a, x) => a + x.utime + x.stime, 0);
            const now = Date.now();
            if (!e.cpuSample || now - e.cpuSample.t >= 10000) {
                const prev = e.cpuSample ?? { ticks: 0, t: e.startedAt ?? now - 1000 };
                e.cpuSample = { ticks, t: now, cores: Math.max(0, (ticks - prev.ticks) / 100) / Math.max(0.001, (now - prev.t) / 1000) };
            }
            const cores = e.cpuSample.cores;
            const rssKi = ps.reduce((a, x) => a + x.rss, 0) * 4;
            containers.push({ name: pod.spec.containers[0].name, usage: { cpu: `${Math.round(cores * 1e9)}n`, memory: `${rssKi}Ki` } });
        }
        return { kind: 'PodMetrics', apiVersion: 'metrics.k8s.io/v1beta1', metadata: { name, namespace: ns, creationTimestamp: nowTime(), labels: pod.metadata.labels ?? {} }, timestamp: nowTime(), window: '10s', containers };
    }

    async function handle(req, res, url, body) {
        const p = url.pathname;
        const q = url.searchParams;
        const fv = { mode: q.get('fieldValidation') ?? 'Warn', warnings: [] };
        const send = (code, obj, headers = {}) => {
            if (fv.warnings.length) res.setHeader('Warning', fv.warnings.map((w) => `299 - "unknown field \\"${w}\\""`));
            res.writeHead(code, { 'Content-Type': 'application/json', ...headers });
            res.end(JSON.stringify(obj));
            return code;
        };
        if (req.method === 'GET') {
            if (p === '/version') return send(200, { major: '1', minor: '32', gitVersion: 'v1.32.0-agentbox-test', platform: 'linux/amd64' });
            if (p === '/api') return send(200, { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: `127.0.0.1:${api.port}` }] });
            if (p === '/apis') return send(200, groupList());
            if (p === '/api/v1') return send(200, resourceList('v1'));
            const m = p.match(/^\/apis\/([^/]+)\/([^/]+)$/);
            if (m && RESOURCES.some((r) => r.apiVersion === `${m[1]}/${m[2]}`)) return send(200, resourceList(`${m[1]}/${m[2]}`));
            if (p.match(/^\/apis\/[^/]+$/)) {
                const g = groupList().groups.find((x) => x.name === p.split('/')[2]);
                if (g) return send(200, { kind: 'APIGroup', apiVersion: 'v1', ...g });
            }
            if (p === '/openapi/v3') return send(200, openapiIndex());
            if (p === '/openapi/v2') {
                // Older kubectl (Debian's 1.20) validates with v2 and asks for
                // protobuf: zero bytes are an empty, valid Document, so no kind
                // has a client-side schema and validation is left to us.
                if ((req.headers.accept ?? '').includes('protobuf')) {
                    res.writeHead(200, { 'Content-Type': 'application/com.github.proto-openapi.spec.v2.v1.0+protobuf' });
                    res.end();
                    return 200;
                }
                return send(200, { swagger: '2.0', info: { title: 'Kubernetes', version: 'v1.32.0' }, paths: {} });
            }
            const oa = p.match(/^\/openapi\/v3\/(?:api|apis)\/(.+)$/);
            if (oa && RESOURCES.some((r) => r.apiVersion === oa[1])) return send(200, openapiDoc(oa[1]));
            if (p === '/healthz' || p === '/readyz' || p === '/livez') {
                res.writeHead(200, { 'Content-Type': 'text/plain' });
                res.end('ok');
                return 200;
            }
        }
        if (req.method === 'GET') {
            const lm = p.match(/^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/log$/);
            if (lm) return podLog(res, lm[1], lm[2], q);
            const mm = p.match(/^\/apis\/metrics\.k8s\.io\/v1beta1\/namespaces\/([^/]+)\/pods\/([^/]+)$/);
            if (mm) return send(200, podMetrics(mm[1], mm[2]));
            const ml = p.match(/^\/apis\/metrics\.k8s\.io\/v1beta1\/namespaces\/([^/]+)\/pods$/);
            if (ml) {
                const match = parseLabelSelector(q.get('labelSelector'));
                const pods = [...store.values()].filter((x) => x.kind === 'Pod' && x.metadata.namespace === ml[1] && match(x.metadata.labels ?? {}) && envds.has(x.metadata.uid));
                return send(200, { kind: 'PodMetricsList', apiVersion: 'metrics.k8s.io/v1beta1', metadata: {}, items: pods.map((x) => podMetrics(ml[1], x.metadata.name)) });
            }
        }
        const rt = route(p);
        if (!rt) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
        const { r, ns, name, sub } = rt;
        const dryRun = q.get('dryRun') === 'All';
        let parsed;
        if (body.length) {
            try {
                parsed = JSON.parse(body.toString('utf8'));
            } catch (e) {
                throw badRequest(`error decoding the request body: ${e.message}`);
            }
        }
        if (!name) {
            if (req.method === 'GET') {
                const labels = parseLabelSelector(q.get('labelSelector'));
                const fields = parseFieldSelector(r, q.get('fieldSelector'));
                const match = (obj) => labels(obj.metadata.labels) && fields(obj);
                if (q.get('watch') === '1' || q.get('watch') === 'true') {
                    startWatch(req, res, r, ns, q, match);
                    return 200;
                }
                return send(200, listResponse(r, ns, q, match));
            }
            if (req.method === 'POST') {
                if (r.namespaced && !ns) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
                return send(201, create(r, ns, parsed, dryRun, fv));
            }
            throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        }
        const cur = lookup(r, ns, name);
        if (sub === 'scale') {
            if (req.method === 'GET') return send(200, scaleOf(cur));
            let want;
            if (req.method === 'PUT') want = parsed;
            else if (req.method === 'PATCH') want = applyPatch({ ...r, cr: true }, scaleOf(cur), req.headers['content-type'], parsed);
            else throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
            if (want?.metadata?.resourceVersion && want.metadata.resourceVersion !== cur.metadata.resourceVersion) throw conflict(r, name);
            const next = clone(cur);
            next.spec.replicas = want?.spec?.replicas;
            return send(200, scaleOf(update(r, cur, next, '', { dryRun })));
        }
        switch (req.method) {
            case 'GET':
                return send(200, cur);
            case 'PUT':
                return send(200, update(r, cur, parsed, sub, { requireRv: r.cr, dryRun, fv }));
            case 'PATCH': {
                const patched = applyPatch(r, cur, req.headers['content-type'], parsed);
                return send(200, update(r, cur, patched, sub, { dryRun, fv }));
            }
            case 'DELETE': {
                if (sub) throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
                const opts = { ...(isObj(parsed) ? parsed : {}), dryRun };
                if (q.has('gracePeriodSeconds')) opts.gracePeriodSeconds = Number(q.get('gracePeriodSeconds'));
                const out = del(r, cur, opts);
                if (out.gone && r.name !== 'pods')
                    return send(200, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', details: { ...detailsOf(r, name), uid: cur.metadata.uid } });
                return send(200, out.obj);
            }
            default:
                throw new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource');
        }
    }

    function listResponse(r, ns, q, match) {
        const want = q.get('resourceVersion');
        const matchMode = q.get('resourceVersionMatch');
        if (matchMode && !want) throw badRequest('resourceVersionMatch is forbidden unless resourceVersion is provided');
        if (matchMode === 'Exact' && want === '0') throw badRequest('resourceVersionMatch "exact" is forbidden for resourceVersion "0"');
        if (want && want !== '0' && Number(want) > rv)
            throw Object.assign(new ApiError(504, 'Timeout', `Too large resource version: ${want}, current: ${rv}`, { causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }], retryAfterSeconds: 1 }));
        // Only the current state is kept, so Exact works for the current version only.
        const exact = matchMode === 'Exact' || (want && want !== '0' && !matchMode && q.get('limit'));
        if (exact && Number(want) !== rv) throw new ApiError(410, 'Expired', `too old resource version: ${want} (${rv})`);
        let items;
        let listRv;
        let offset = 0;
        for (const [id, snap] of snapshots) if (snap.expires < Date.now()) snapshots.delete(id);
        const cont = q.get('continue');
        if (cont) {
            let tok;
            try {
                tok = JSON.parse(Buffer.from(cont, 'base64url').toString());
            } catch {
                throw badRequest('continue key is not valid');
            }
            const snap = snapshots.get(tok.id);
            if (!snap || snap.expires < Date.now())
                throw new ApiError(410, 'Expired', 'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.');
            ({ items, rv: listRv } = snap);
            offset = tok.offset;
        } else {
            items = list(r, ns).filter(match).map(clone);
            listRv = rv;
        }
        const limit = Number(q.get('limit') || 0);
        const meta = { resourceVersion: String(listRv) };
        let page = items.slice(offset);
        if (limit > 0 && page.length > limit) {
            page = page.slice(0, limit);
            let id = cont ? JSON.parse(Buffer.from(cont, 'base64url').toString()).id : null;
            if (!id) {
                id = randomUUID();
                snapshots.set(id, { items, rv: listRv, expires: Date.now() + (o.continueTtlMs ?? 300000) });
            }
            meta.continue = Buffer.from(JSON.stringify({ id, offset: offset + limit })).toString('base64url');
        }
        // built-in list items come without kind/apiVersion, as real servers send them (§3.2)
        if (!r.cr) page = page.map((x) => { const c = { ...x }; delete c.kind; delete c.apiVersion; return c; });
        return { kind: `${r.kind}List`, apiVersion: r.apiVersion, metadata: meta, items: page };
    }

    const server = http.createServer((req, res) => {
        const url = new URL(req.url, 'http://x');
        const chunks = [];
        let size = 0;
        let tooBig = false;
        req.on('data', (c) => {
            size += c.length;
            if (size > MAX_BODY) tooBig = true;
            else chunks.push(c);
        });
        req.on('end', async () => {
            const entry = { method: req.method, path: url.pathname, query: Object.fromEntries(url.searchParams), body: null, code: 0, contentType: req.headers['content-type'] ?? '' };
            requests.push(entry);
            const body = Buffer.concat(chunks);
            try {
                entry.body = body.length ? JSON.parse(body.toString()) : null;
            } catch {
                entry.body = body.toString();
            }
            const fail = (e) => {
                const code = e.code ?? 500;
                entry.code = code;
                if (res.headersSent) return void res.end();
                const headers = { 'Content-Type': 'application/json' };
                if (e.details?.retryAfterSeconds) headers['Retry-After'] = String(e.details.retryAfterSeconds);
                res.writeHead(code, headers);
                res.end(JSON.stringify(statusBody(code, e.reason ?? 'InternalError', e.message, e.details)));
            };
            try {
                // like system:public-info-viewer: version and health need no token
                // (kubectl's dispatcher asks /version before it sends credentials)
                const open = ['/healthz', '/readyz', '/livez', '/version'].includes(url.pathname);
                if (token !== null && !open) {
                    if (req.headers.authorization !== `Bearer ${token}`) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
                }
                if (tooBig) throw new ApiError(413, 'RequestEntityTooLarge', `the request body is too large: limit is ${MAX_BODY} bytes`);
                const inj = injections.find((i) => i.times !== 0 && (!i.method || i.method === req.method) && (!i.path || i.path.test(url.pathname + url.search)));
                if (inj) {
                    if (inj.times > 0) inj.times -= 1;
                    if (inj.delayMs) await new Promise((r) => setTimeout(r, inj.delayMs));
                    if (inj.reset) {
                        entry.code = -1;
                        return void req.socket.destroy();
                    }
                    if (inj.status) {
                        entry.code = inj.status;
                        const headers = inj.retryAfter !== undefined ? { 'Retry-After': String(inj.retryAfter) } : {};
                        if (inj.plain) {
                            res.writeHead(inj.status, { 'Content-Type': 'text/plain', ...headers });
                            return void res.end(inj.plain);
                        }
                        res.writeHead(inj.status, { 'Content-Type': 'application/json', ...headers });
                        return void res.end(JSON.stringify(statusBody(inj.status, inj.reason ?? 'InternalError', inj.message ?? `injected ${inj.status}`)));
                    }
                }
                entry.code = await handle(req, res, url, body);
            } catch (e) {
                if (!(e instanceof ApiError)) e.code = 500;
                fail(e);
            }
        });
    });
    server.keepAliveTimeout = 60000;
    let connections = 0; // kube-adopt: TCP connections accepted (the claim benchmark counts new ones per claim)
    server.on('connection', (s) => {
        connections++;
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
    });
    await new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(o.port, '127.0.0.1', resolve);
    });

    const api = {
        port: server.address().port,
        get url() {
            return `http://127.0.0.1:${api.port}`;
        },
        requests,
        get resourceVersion() {
            return String(rv);
        },
        // TCP connections accepted so far (kube-adopt: connection reuse per claim)
        get connections() {
            return connections;
        },
        setToken(t) {
            token = t;
        },
        // Forget all watch history: a watch from any earlier version gets 410.
        compact() {
            history.length = 0;
            compactedRv = rv;
        },
        // Fault injection: {method, path: RegExp over path+query, status, reason,
        // message, plain (text body), retryAfter, delayMs, reset, times (-1 = forever)}.
        inject(spec) {
            injections.push({ times: 1, ...spec });
        },
        clearInjections() {
            injections.length = 0;
        },
        // End every open watch stream (as a proxy or server restart would).
        dropWatches() {
            for (const w of [...watchers]) {
                w.res.socket?.destroy();
                w.end();
            }
        },
        options: o,
        // Direct access for tests (no HTTP): the stored object or undefined.
        peek(resource, ns, name) {
            const r = RESOURCES.find((x) => x.name === resource);
            return clone(store.get(keyOf(r, ns, name)));
        },
        // A kubeconfig for the real kubectl (and for our C client) in dir.
        kubeconfig(dir, { namespace = 'default' } = {}) {
            const file = path.join(dir, 'kubeconfig');
            const user = token !== null ? `    token: ${token}\n` : '    {}\n';
            fs.writeFileSync(file, `apiVersion: v1
kind: Config
current-context: test
clusters:
- name: test
  cluster:
    server: ${api.url}
    insecure-skip-tls-verify: true
users:
- name: test
  user:
${token !== null ? `    token: ${token}\n` : '    {}\n'}contexts:
- name: test
  context:
    cluster: test
    user: test
    namespace: ${namespace}
`);
            void user;
            return file;
        },
        // The process restarts (storage and watch history kept, as etcd
        // keeps them): every connection drops, nothing listens for downMs.
        async restart({ downMs = 0 } = {}) {
            for (const w of [...watchers]) {
                w.res.socket?.destroy();
                w.end();
            }
            await new Promise((resolve) => {
                server.close(() => resolve());
                for (const s of sockets) s.destroy();
            });
            if (downMs) await new Promise((r) => setTimeout(r, downMs));
            await new Promise((resolve, reject) => {
                server.once('error', reject);
                server.listen(api.port, '127.0.0.1', resolve);
            });
        },
        // The envd processes the kubelet runs: Pod uid → pid.
        envdPids() {
            return new Map([...envds].map(([uid, e]) => [uid, e.proc.pid]));
        },
        async close() {
            closed = true;
            await Promise.all([...envds.keys()].map((uid) => envdStop(uid)));
            await Promise.all([...podNets.keys()].map((uid) => podNetDown(uid)));
            for (const w of [...watchers]) w.end();
            for (const t of timers) clearTimeout(t);
            await new Promise((resolve) => {
                server.close(() => resolve());
                for (const s of sockets) s.destroy();
            });
        },
    };
    return api;
}
