// The Helm charts (helm/agentbox-agent, helm/agentbox-hub), rendered with our
// renderer tests/tools/helmrender (Helm is not packaged here: Go's
// text/template + sprig, built by this file into the build dir), checked
// object by object, applied with the real kubectl to the in-test API server
// (lib/kubeapi.mjs), and then run: agentbox-hub migrate / serve and
// agentbox-agent serve with exactly the command, args and environment the
// rendered Job and Deployments say (Secret references resolved from what the
// API server stored, Secret volumes written to a temp dir), checked through
// the probes the Deployments declare. No real cluster is involved.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';
import {
    buildDir, repoRoot, migrationsDir, tempDir, removeTempDir, run, startPostgres, psqlAt, spawnProc, waitFor, httpGet,
    freePort, hubBin, agentBin,
} from './lib/harness.mjs';
import { startKubeApi } from './lib/kubeapi.mjs';
import { envManifest } from './lib/sandboxes.mjs';

const KUBECTL = process.env.AGENTBOX_KUBECTL || '/usr/bin/kubectl';
const RENDER = path.join(buildDir(), 'helmrender');
const AGENT_CHART = path.join(repoRoot(), 'helm', 'agentbox-agent');
const HUB_CHART = path.join(repoRoot(), 'helm', 'agentbox-hub');
const NS = 'agentbox-system';
const HUB_SECRET = 'f'.repeat(16) + '0123456789abcdef0123456789abcdef';
const AGENT_REQUIRED = ['--set', 'agent.clusterId=eu-1', '--set', 'hub.url=wss://hub.example.com:7701', '--set', 'hub.joinToken=abxc_chart_test'];
const HUB_REQUIRED = ['--set', `hub.secret.value=${HUB_SECRET}`, '--set', 'database.url=postgres://agentbox:pw@db.example.com:5432/agentbox'];

const cleanups = [];
after(async () => {
    for (const fn of cleanups.reverse()) await fn();
});

// Builds the renderer from Debian's Go and sprig, offline, GOPATH mode.
before(async () => {
    const gocache = path.join(buildDir(), 'go-cache');
    fs.mkdirSync(gocache, { recursive: true });
    const r = await run('go', ['build', '-o', RENDER, '.'], {
        cwd: path.join(repoRoot(), 'tests', 'tools', 'helmrender'),
        env: {
            ...process.env, GO111MODULE: 'off', GOFLAGS: '', GOPROXY: 'off', GOCACHE: gocache,
            GOPATH: `${path.join(buildDir(), 'gopath')}:/usr/share/gocode`,
        },
        timeoutMs: 300000,
    });
    assert.equal(r.code, 0, `go build of tests/tools/helmrender failed (scripts/deps.sh installs golang-go and sprig):\n${r.stderr}`);
});

// Renders a chart; resolves {code, stdout, stderr, objs} (objs with --json).
async function render(chart, args = [], { name = 'ab', format = 'json' } = {}) {
    const a = ['--name', name, '--namespace', NS, ...(format === 'json' ? ['--json'] : format === 'notes' ? ['--notes'] : []), ...args, chart];
    const r = await run(RENDER, a);
    if (r.code === 0 && format === 'json') r.objs = JSON.parse(r.stdout).map((x) => ({ ...x.object, __source: x.source }));
    return r;
}
async function renderOk(chart, args, opts) {
    const r = await render(chart, args, opts);
    assert.equal(r.code, 0, `render ${path.basename(chart)} ${args.join(' ')}:\n${r.stderr}`);
    return r;
}
const find = (objs, kind, name) => objs.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
const all = (objs, kind) => objs.filter((o) => o.kind === kind);
const envOf = (c, name) => (c.env || []).find((e) => e.name === name);

// Every rule of the chart's Roles and ClusterRoles as "scope group resource" → sorted verbs.
function rbacTable(objs) {
    const t = {};
    for (const o of objs.filter((x) => x.kind === 'Role' || x.kind === 'ClusterRole')) {
        for (const rule of o.rules) {
            for (const g of rule.apiGroups) {
                for (const res of rule.resources) {
                    const key = `${o.kind === 'Role' ? `Role/${o.metadata.namespace}` : 'ClusterRole'} ${g || 'core'} ${res}`;
                    assert.ok(!t[key], `${key} granted twice`);
                    t[key] = [...rule.verbs].sort();
                }
            }
        }
    }
    return t;
}

function assertRestricted(podSpec, container, what) {
    const p = podSpec.securityContext;
    const c = container.securityContext;
    assert.equal(p.runAsNonRoot, true, `${what}: pod runAsNonRoot`);
    assert.ok(p.runAsUser > 0, `${what}: pod runAsUser non-root`);
    assert.equal(p.seccompProfile.type, 'RuntimeDefault', `${what}: seccomp`);
    assert.equal(c.allowPrivilegeEscalation, false, `${what}: allowPrivilegeEscalation`);
    assert.equal(c.readOnlyRootFilesystem, true, `${what}: readOnlyRootFilesystem`);
    assert.deepEqual(c.capabilities.drop, ['ALL'], `${what}: capabilities`);
    assert.ok(!c.capabilities.add, `${what}: no capability added`);
    assert.notEqual(c.privileged, true, `${what}: privileged`);
}

const secretRef = (c, name) => envOf(c, name)?.valueFrom?.secretKeyRef;

// The engine parts themselves, on a chart made here: values merge (-f, null
// deletes, --set with lists and indexes, --set-string), include, tpl,
// required, toYaml/fromYaml/toJson, .Release, .Chart, .Capabilities, .Files,
// .Template, missing keys empty, documents sorted by kind, crds/ first.
test('renderer: values merge, include, tpl, required, toYaml/fromYaml/toJson, Release/Chart/Capabilities/Files', async () => {
    const dir = tempDir('agentbox-helm-engine-');
    cleanups.push(() => removeTempDir(dir));
    const chart = path.join(dir, 'demo');
    fs.mkdirSync(path.join(chart, 'templates'), { recursive: true });
    fs.mkdirSync(path.join(chart, 'crds'));
    fs.mkdirSync(path.join(chart, 'files'));
    fs.writeFileSync(path.join(chart, 'Chart.yaml'), 'apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: "4.5"\n');
    fs.writeFileSync(path.join(chart, 'values.yaml'), `name: base
nested: {keep: 1, drop: 2, deep: {a: x}}
list: [a, b]
greeting: "hello {{ .Release.Name }}"
`);
    fs.writeFileSync(path.join(chart, 'files', 'note.txt'), 'from a file');
    fs.writeFileSync(path.join(chart, 'crds', 'c.yaml'), 'apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: cs.example.com}\n');
    fs.writeFileSync(path.join(chart, 'templates', '_h.tpl'), '{{- define "demo.name" -}}{{ .Chart.Name }}-{{ .Release.Name }}{{- end -}}\n');
    fs.writeFileSync(path.join(chart, 'templates', 'cm.yaml'), `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "demo.name" . }}
  namespace: {{ .Release.Namespace }}
data:
  greeting: {{ tpl .Values.greeting . | quote }}
  nested: {{ toJson .Values.nested | quote }}
  list: {{ toJson .Values.list | quote }}
  str: {{ .Values.port | kindOf | quote }}
  missing: "{{ .Values.nothing }}"
  chart: "{{ .Chart.Name }}/{{ .Chart.Version }}/{{ .Chart.AppVersion }}"
  kube: "{{ .Capabilities.KubeVersion.Major }}.{{ .Capabilities.KubeVersion.Minor }} {{ .Capabilities.APIVersions.Has "policy/v1" }} {{ .Capabilities.APIVersions.Has "nope/v9" }}"
  file: {{ .Files.Get "files/note.txt" | quote }}
  template: {{ .Template.Name | quote }}
  roundtrip: {{ (fromYaml (toYaml .Values.nested)).deep.a | quote }}
  service: {{ .Release.Service | quote }}
`);
    fs.writeFileSync(path.join(chart, 'templates', 'sa.yaml'), 'apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ required "name is required" .Values.name }}\n');
    const vf = path.join(dir, 'over.yaml');
    fs.writeFileSync(vf, 'nested: {drop: null, added: 3}\nport: 8080\n');
    const r = await render(chart, ['-f', vf, '--set', 'list={x,y\\,z}', '--set', 'list[2]=w', '--set-string', 'port=8080', '--kube-version', '1.29.3'], { name: 'rel' });
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.objs.map((o) => `${o.kind}/${o.metadata.name}`), ['CustomResourceDefinition/cs.example.com', 'ServiceAccount/base', 'ConfigMap/demo-rel']);
    const d = find(r.objs, 'ConfigMap').data;
    assert.equal(d.greeting, 'hello rel');
    assert.deepEqual(JSON.parse(d.nested), { keep: 1, deep: { a: 'x' }, added: 3 });
    assert.deepEqual(JSON.parse(d.list), ['x', 'y,z', 'w']);
    assert.equal(d.str, 'string');
    assert.equal(d.missing, '');
    assert.equal(d.chart, 'demo/1.2.3/4.5');
    assert.equal(d.kube, '1.29 true false');
    assert.equal(d.file, 'from a file');
    assert.equal(d.template, 'demo/templates/cm.yaml');
    assert.equal(d.roundtrip, 'x');
    assert.equal(d.service, 'Helm');
    assert.equal(find(r.objs, 'ConfigMap').metadata.namespace, NS);
    const typed = await render(chart, ['--set', 'port=8080'], { name: 'rel' });
    assert.equal(find(typed.objs, 'ConfigMap').data.str, 'int64');
    const missing = await render(chart, ['--set', 'name=null']);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /execution error at \(demo\/templates\/sa\.yaml:4:\d+\): name is required/);
    // a template that renders invalid YAML is an error naming it
    fs.writeFileSync(path.join(chart, 'templates', 'bad.yaml'), 'kind: ConfigMap\nmetadata: {name: [unclosed\n');
    const bad = await render(chart, []);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /YAML parse error in demo\/templates\/bad\.yaml/);
});

test('agent chart with the required values: CRDs first and kept, RBAC verbs exactly, restricted Pod, Secret refs, probes, Services', async () => {
    const { objs } = await renderOk(AGENT_CHART, AGENT_REQUIRED);

    // crds/ first, verbatim, annotated keep
    const crds = objs.slice(0, 3);
    assert.deepEqual(crds.map((o) => o.metadata.name).sort(),
        ['sandboxenvs.agents.navix.sh', 'sandboxpools.agents.navix.sh', 'sandboxtemplates.agents.navix.sh']);
    for (const c of crds) {
        assert.equal(c.kind, 'CustomResourceDefinition');
        assert.match(c.__source, /^agentbox-agent\/crds\//);
        assert.equal(c.metadata.annotations['helm.sh/resource-policy'], 'keep');
        assert.equal(c.spec.group, 'agents.navix.sh');
        assert.deepEqual(c.spec.versions.map((v) => [v.name, v.served, v.storage]), [['v1alpha1', true, true]]);
        assert.ok(c.spec.versions[0].subresources.status, `${c.metadata.name}: status subresource`);
        assert.deepEqual(c.spec.versions[0].schema.openAPIV3Schema.required, ['spec']);
    }
    assert.equal(all(objs, 'CustomResourceDefinition').length, 3, 'no CRD outside crds/');
    const pool = find(objs, 'CustomResourceDefinition', 'sandboxpools.agents.navix.sh').spec;
    assert.equal(pool.scope, 'Namespaced');
    assert.deepEqual(pool.versions[0].subresources.scale,
        { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.runningReplicas', labelSelectorPath: '.status.selector' });
    assert.deepEqual(pool.versions[0].schema.openAPIV3Schema.properties.spec.required, ['replicas']);
    assert.equal(find(objs, 'CustomResourceDefinition', 'sandboxtemplates.agents.navix.sh').spec.scope, 'Cluster');

    // RBAC: exactly what the runtime uses (§5.3 for pods, events, leases, the CRs and
    // their status, the ips-<env> pull Secrets written but never read): no secret
    // reads, no exec, no logs by default, no wildcard
    const crud = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'];
    assert.deepEqual(rbacTable(objs), {
        'ClusterRole agents.navix.sh sandboxtemplates': crud,
        'ClusterRole agents.navix.sh sandboxtemplates/status': ['get', 'patch', 'update'],
        'ClusterRole agents.navix.sh sandboxtemplates/finalizers': ['update'],
        'ClusterRole core pods': crud,
        'ClusterRole core events': ['create', 'patch'],
        'ClusterRole core secrets': ['create', 'delete', 'update'],
        'ClusterRole agents.navix.sh sandboxenvs': crud,
        'ClusterRole agents.navix.sh sandboxpools': crud,
        'ClusterRole agents.navix.sh sandboxenvs/status': ['get', 'patch', 'update'],
        'ClusterRole agents.navix.sh sandboxpools/status': ['get', 'patch', 'update'],
        'ClusterRole agents.navix.sh sandboxenvs/finalizers': ['update'],
        'ClusterRole agents.navix.sh sandboxpools/finalizers': ['update'],
        [`Role/${NS} coordination.k8s.io leases`]: ['create', 'get', 'update'],
    });
    const sa = find(objs, 'ServiceAccount');
    assert.equal(sa.metadata.namespace, NS);
    const bindings = [...all(objs, 'ClusterRoleBinding'), ...all(objs, 'RoleBinding')];
    assert.deepEqual(bindings.map((b) => `${b.kind}/${b.metadata.name}->${b.roleRef.kind}/${b.roleRef.name}`).sort(),
        ['ClusterRoleBinding/ab-templates->ClusterRole/ab-templates', 'RoleBinding/ab-leader->Role/ab-leader',
            'RoleBinding/ab-sandboxes->ClusterRole/ab-sandboxes']);
    for (const b of bindings) assert.deepEqual(b.subjects, [{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: NS }]);
    // sandbox rights only where the runtime works: its own namespace by default
    assert.equal(find(objs, 'RoleBinding', 'ab-sandboxes').metadata.namespace, NS);
    assert.equal(find(objs, 'Role', 'ab-leader').metadata.namespace, NS);

    // the Deployment
    const dep = find(objs, 'Deployment', 'ab');
    const pod = dep.spec.template.spec;
    assert.equal(pod.serviceAccountName, sa.metadata.name);
    assert.equal(pod.containers.length, 1);
    const c = pod.containers[0];
    assertRestricted(pod, c, 'agent');
    assert.deepEqual(c.command, ['/usr/bin/agentbox-agent', 'serve']);
    for (const a of ['--cluster-id=eu-1', '--runtime=kube', '--e2b-listen=:8090', '--data-listen=:8091', '--native-listen=:8080', '--metrics-listen=:8092'])
        assert.ok(c.args.includes(a), `agent args ${JSON.stringify(c.args)} lack ${a}`);
    assert.ok(!JSON.stringify(c.args).includes('abxc_') && !JSON.stringify(c.args).includes('hub.example.com'), 'no URL or token on the command line');
    assert.deepEqual(secretRef(c, 'AGENTBOX_HUB_URL'), { name: 'ab-hub', key: 'hubUrl' });
    assert.deepEqual(secretRef(c, 'AGENTBOX_JOIN_TOKEN'), { name: 'ab-hub', key: 'joinToken' });
    const secret = find(objs, 'Secret', 'ab-hub');
    assert.deepEqual(secret.stringData, { hubUrl: 'wss://hub.example.com:7701', joinToken: 'abxc_chart_test' });
    assert.match(dep.spec.template.metadata.annotations['checksum/secret'], /^[0-9a-f]{64}$/);
    const ports = Object.fromEntries(c.ports.map((p) => [p.name, p.containerPort]));
    assert.deepEqual(ports, { 'e2b-api': 8090, 'data-plane': 8091, 'native-api': 8080, metrics: 8092 });
    assert.deepEqual(c.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' });
    assert.deepEqual(c.readinessProbe.httpGet, { path: '/healthz', port: 'metrics' });
    // the read-only root: the state dir is a volume
    assert.ok(c.volumeMounts.some((m) => m.mountPath === '/var/lib/agentbox' && pod.volumes.find((v) => v.name === m.name).emptyDir));

    // four Services, fixed names, each selecting the Pods and targeting a declared port
    const svcs = all(objs, 'Service');
    assert.deepEqual(svcs.map((s) => s.metadata.name).sort(), ['agentbox-agent-metrics', 'agentbox-api', 'agentbox-data-plane', 'agentbox-e2b-api']);
    for (const s of svcs) {
        for (const [k, v] of Object.entries(s.spec.selector)) assert.equal(dep.spec.template.metadata.labels[k], v, `${s.metadata.name} selector ${k}`);
        for (const p of s.spec.ports) assert.ok(p.targetPort in ports, `${s.metadata.name} targets undeclared port ${p.targetPort}`);
    }
    assert.equal(find(objs, 'Service', 'agentbox-e2b-api').spec.ports[0].targetPort, 'e2b-api');
    assert.equal(find(objs, 'Service', 'agentbox-data-plane').spec.ports[0].targetPort, 'data-plane');
    for (const [k, v] of Object.entries(dep.spec.selector.matchLabels)) assert.equal(dep.spec.template.metadata.labels[k], v);

    // one replica: no PodDisruptionBudget (it would block every drain)
    assert.equal(dep.spec.replicas, 1);
    assert.equal(find(objs, 'PodDisruptionBudget'), undefined);
    const two = (await renderOk(AGENT_CHART, [...AGENT_REQUIRED, '--set', 'replicaCount=2'])).objs;
    assert.equal(find(two, 'Deployment').spec.replicas, 2);
    const pdb = find(two, 'PodDisruptionBudget', 'ab');
    assert.equal(pdb.spec.minAvailable, 1);
    assert.deepEqual(pdb.spec.selector.matchLabels, dep.spec.selector.matchLabels);
});

// --- the CRDs against the manifests the local runtime reads ------------------------------------

// Structural-schema validation as the API server does it for a CRD (the
// subset our CRDs use): defaults first, then type, required, enum, minimum,
// length, pattern, int-or-string; a field the schema does not declare (and no
// preserve-unknown-fields allows) is reported, because the server would
// prune it and the object would silently lose it.
function validateSchema(schema, v, at, errs) {
    if (v === undefined) return;
    if (schema['x-kubernetes-int-or-string']) {
        if (!(Number.isInteger(v) || typeof v === 'string')) errs.push(`${at}: must be an integer or a string`);
        return;
    }
    const t = schema.type;
    const isObject = v !== null && typeof v === 'object' && !Array.isArray(v);
    const ok = { object: isObject, array: Array.isArray(v), string: typeof v === 'string', integer: Number.isInteger(v), number: typeof v === 'number', boolean: typeof v === 'boolean' };
    if (t && !ok[t]) return void errs.push(`${at}: must be of type ${t}`);
    if (schema.enum && !schema.enum.includes(v)) errs.push(`${at}: Unsupported value ${JSON.stringify(v)}: supported values: ${schema.enum.join(', ')}`);
    if (schema.minimum !== undefined && typeof v === 'number' && v < schema.minimum) errs.push(`${at}: must be greater than or equal to ${schema.minimum}`);
    if (typeof v === 'string') {
        if (schema.maxLength !== undefined && v.length > schema.maxLength) errs.push(`${at}: longer than ${schema.maxLength}`);
        if (schema.minLength !== undefined && v.length < schema.minLength) errs.push(`${at}: shorter than ${schema.minLength}`);
        if (schema.pattern && !new RegExp(schema.pattern).test(v)) errs.push(`${at}: does not match ${schema.pattern}`);
    }
    if (Array.isArray(v) && schema.items) v.forEach((x, i) => validateSchema(schema.items, x, `${at}[${i}]`, errs));
    if (!isObject) return;
    for (const [k, ps] of Object.entries(schema.properties || {}))
        if (v[k] === undefined && ps.default !== undefined) v[k] = JSON.parse(JSON.stringify(ps.default));
    for (const r of schema.required || []) if (v[r] === undefined) errs.push(`${at}.${r}: Required value`);
    for (const [k, x] of Object.entries(v)) {
        const ps = schema.properties?.[k];
        if (ps) validateSchema(ps, x, `${at}.${k}`, errs);
        else if (schema.additionalProperties) validateSchema(schema.additionalProperties, x, `${at}.${k}`, errs);
        else if (schema.properties && !schema['x-kubernetes-preserve-unknown-fields']) errs.push(`${at}.${k}: unknown field (pruned by the API server)`);
    }
}

test('the chart\'s CRDs accept the manifests the local runtime reads (nothing pruned), default them, and refuse bad ones', async () => {
    const { objs } = await renderOk(AGENT_CHART, AGENT_REQUIRED);
    const schemas = {};
    for (const c of all(objs, 'CustomResourceDefinition')) schemas[c.spec.names.kind] = c.spec.versions[0].schema.openAPIV3Schema;
    const check = (obj) => {
        const errs = [];
        assert.ok(schemas[obj.kind], `no CRD for ${obj.kind}`);
        validateSchema(schemas[obj.kind], obj, obj.kind, errs);
        return errs;
    };
    const dir = tempDir('agentbox-helm-crd-');
    cleanups.push(() => removeTempDir(dir));
    const samples = path.join(dir, 'samples.yaml');
    fs.writeFileSync(samples, `${envManifest('plain', ['alpha'], { idleTimeout: '10m' })}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata: {name: e2b-envd}
spec:
  version: 0.0.1
  idleImage: ghcr.io/scitix/agent-sandbox-idle:0.0.10
  visibility: {rules: [{team: t1, users: [u1]}]}
  runtimes:
  - {name: envd, port: 49983, protocol: TCP, readinessProbe: {httpGet: {port: 49983, path: /health}}}
  template:
    spec:
      automountServiceAccountToken: false
      containers: [{name: sandbox, image: ghcr.io/scitix/agent-sandbox-envd:0.9.0-2}]
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: e2b, namespace: default}
spec:
  templateRef: {name: e2b-envd}
  mode: WarmPool
  autoscaling:
    groups: [{name: 1c2gi, enabled: true, minReplicas: 0, maxReplicas: 4}]
  overrides: {gateway: {enabled: true}, updateStrategy: {maxUnavailable: "20%"}}
  clusters:
  - clusterID: alpha
    members:
    - name: e2b-1c2gi
      config:
        scalingGroup: 1c2gi
        inlineResources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
      spec: {replicas: 2}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxPool
metadata: {name: e2b-1c2gi, namespace: default}
spec:
  replicas: 2
  templateName: e2b-envd
  maxUnavailable: 1
  defaultStartupTimeout: 2m
  idleImage: ghcr.io/scitix/agent-sandbox-idle:0.0.10
  template:
    spec:
      containers: [{name: sandbox, image: ghcr.io/scitix/agent-sandbox-envd:0.9.0-2}]
`);
    const conv = await run(RENDER, ['--to-json', ...['template.yaml', 'demo.yaml'].map((f) => path.join(repoRoot(), 'scripts', 'quickstart-manifests', f)), samples]);
    assert.equal(conv.code, 0, conv.stderr);
    const docs = JSON.parse(conv.stdout);
    assert.equal(docs.length, 6);
    for (const d of docs) assert.deepEqual(check(d), [], `${d.kind} ${d.metadata.name}`);
    // the server's defaults, as the CRDs declare them
    const plain = docs.find((d) => d.metadata.name === 'plain');
    assert.equal(plain.spec.mode, 'WarmPool');
    const group = docs.find((d) => d.metadata.name === 'e2b').spec.autoscaling.groups[0];
    assert.deepEqual(group.scaleUpPolicy, { mode: 'Default', cooldownSeconds: 30, idleThresholdSeconds: 30, idleZeroQuietWindowSeconds: 300, saturationCooldownSeconds: 60 });
    assert.deepEqual(group.scaleDownPolicy, { idleTimeoutSeconds: 300, stabilizationSeconds: 60, protectionWindowSeconds: 10 });
    const pool = docs.find((d) => d.kind === 'SandboxPool');
    assert.equal(pool.spec.podCreationImagePolicy, 'IdleImage');
    assert.equal(docs.find((d) => d.metadata.name === 'envd').spec.runtimes[0].protocol, 'TCP');

    // and what they refuse, naming the field
    const bad = [
        [{ kind: 'SandboxPool', metadata: { name: 'p' }, spec: { templateName: 'x' } }, /SandboxPool\.spec\.replicas: Required value/],
        [{ kind: 'SandboxPool', metadata: { name: 'p' }, spec: { replicas: -1 } }, /spec\.replicas: must be greater than or equal to 0/],
        [{ kind: 'SandboxPool', metadata: { name: 'p' }, spec: { replicas: 1, podCreationImagePolicy: 'Latest' } }, /podCreationImagePolicy: Unsupported value "Latest"/],
        [{ kind: 'SandboxEnv', metadata: { name: 'e' }, spec: { mode: 'WarmPool' } }, /SandboxEnv\.spec\.templateRef: Required value/],
        [{ kind: 'SandboxEnv', metadata: { name: 'e' }, spec: { templateRef: { name: 't' }, mode: 'Batch' } }, /spec\.mode: Unsupported value "Batch"/],
        [{ kind: 'SandboxEnv', metadata: { name: 'e' }, spec: { templateRef: { name: 't' }, clusters: [{ members: [] }] } }, /spec\.clusters\[0\]\.clusterID: Required value/],
        [{ kind: 'SandboxTemplate', metadata: { name: 't' }, spec: { runtimes: [{ port: 1 }] } }, /spec\.runtimes\[0\]\.name: Required value/],
        [{ kind: 'SandboxTemplate', metadata: { name: 't' }, spec: { idelImage: 'typo' } }, /spec\.idelImage: unknown field/],
        [{ kind: 'SandboxTemplate', metadata: { name: 't' } }, /SandboxTemplate\.spec: Required value/],
    ];
    for (const [obj, re] of bad) assert.match(check(obj).join('; '), re, JSON.stringify(obj));
});

test('agent chart with representative values: existing Secret, per-namespace RoleBindings, hub CA, values file, standalone', async () => {
    const dir = tempDir('agentbox-helm-values-');
    cleanups.push(() => removeTempDir(dir));
    const vf = path.join(dir, 'values.yaml');
    fs.writeFileSync(vf, `agent:
  clusterId: us-2
  dataDomain: sbx.example.com
  extraArgs: ["--tunnel-ping-interval=5s"]
  egressImage: registry.example.com/agentbox-egress:9.9.9
  egressResolver: 10.96.0.10
hub:
  existingSecret: agent-hub-creds
  urlKey: url
  joinTokenKey: token
  caSecret: hub-ca
rbac:
  sandboxNamespaces: [team-a, team-b]
  podLogs: true
  podMetrics: true
image:
  repository: registry.example.com/agentbox-agent
  tag: "9.9.9"
`);
    const { objs } = await renderOk(AGENT_CHART, ['-f', vf, '--set', 'agent.logLevel=debug']);
    assert.equal(find(objs, 'Secret'), undefined, 'an existing Secret: the chart creates none');
    const dep = find(objs, 'Deployment');
    const c = dep.spec.template.spec.containers[0];
    assert.equal(c.image, 'registry.example.com/agentbox-agent:9.9.9');
    assert.deepEqual(secretRef(c, 'AGENTBOX_HUB_URL'), { name: 'agent-hub-creds', key: 'url' });
    assert.deepEqual(secretRef(c, 'AGENTBOX_JOIN_TOKEN'), { name: 'agent-hub-creds', key: 'token' });
    assert.equal(dep.spec.template.metadata.annotations['checksum/secret'], undefined);
    for (const a of ['--cluster-id=us-2', '--data-domain=sbx.example.com', '--hub-ca=/etc/agentbox/hub-ca/ca.crt', '--log-level=debug', '--tunnel-ping-interval=5s',
        '--egress-image=registry.example.com/agentbox-egress:9.9.9', '--egress-resolver=10.96.0.10'])
        assert.ok(c.args.includes(a), `args ${JSON.stringify(c.args)} lack ${a}`);
    const ca = dep.spec.template.spec.volumes.find((v) => v.name === 'hub-ca');
    assert.equal(ca.secret.secretName, 'hub-ca');
    assert.ok(c.volumeMounts.some((m) => m.name === 'hub-ca' && m.mountPath === '/etc/agentbox/hub-ca' && m.readOnly));

    // sandbox rights only in the named namespaces: RoleBindings of the ClusterRole, no cluster-wide binding
    const rbs = all(objs, 'RoleBinding').filter((b) => b.roleRef.name === 'ab-sandboxes');
    assert.deepEqual(rbs.map((b) => b.metadata.namespace).sort(), ['team-a', 'team-b']);
    for (const b of rbs) assert.equal(b.roleRef.kind, 'ClusterRole');
    assert.deepEqual(all(objs, 'ClusterRoleBinding').map((b) => b.metadata.name), ['ab-templates']);
    assert.deepEqual(rbacTable(objs)['ClusterRole core pods/log'], ['get']);
    assert.deepEqual(rbacTable(objs)['ClusterRole metrics.k8s.io pods'], ['get']);

    // one other namespace for the runtime: --namespace and the RoleBinding there; or cluster-wide
    const other = (await renderOk(AGENT_CHART, [...AGENT_REQUIRED, '--set', 'agent.namespace=sandboxes'])).objs;
    assert.ok(find(other, 'Deployment').spec.template.spec.containers[0].args.includes('--namespace=sandboxes'));
    assert.deepEqual(all(other, 'RoleBinding').map((b) => `${b.metadata.name}@${b.metadata.namespace}`).sort(), [`ab-leader@${NS}`, 'ab-sandboxes@sandboxes']);
    const wide = (await renderOk(AGENT_CHART, [...AGENT_REQUIRED, '--set', 'rbac.clusterWide=true'])).objs;
    assert.deepEqual(all(wide, 'ClusterRoleBinding').map((b) => b.metadata.name).sort(), ['ab-sandboxes', 'ab-templates']);
    assert.deepEqual(all(wide, 'RoleBinding').map((b) => b.metadata.name), ['ab-leader']);
    const plain = find((await renderOk(AGENT_CHART, AGENT_REQUIRED)).objs, 'Deployment').spec.template.spec.containers[0].args;
    assert.ok(!plain.some((a) => a.startsWith('--namespace')), 'no --namespace unless asked (the default is the service account\'s)');

    // standalone: no Secret, no hub environment
    const solo = (await renderOk(AGENT_CHART, ['--set', 'agent.clusterId=solo', '--set', 'hub.enabled=false'])).objs;
    assert.equal(find(solo, 'Secret'), undefined);
    const sc = find(solo, 'Deployment').spec.template.spec.containers[0];
    assert.equal(envOf(sc, 'AGENTBOX_HUB_URL'), undefined);
    assert.equal(envOf(sc, 'AGENTBOX_JOIN_TOKEN'), undefined);

    // NOTES.txt: rendered apart, naming the Services the SDK points at
    const notes = await renderOk(AGENT_CHART, AGENT_REQUIRED, { format: 'notes' });
    assert.match(notes.stdout, /E2B_API_URL=http:\/\/agentbox-e2b-api\.agentbox-system\.svc\.cluster\.local/);
    assert.match(notes.stdout, /E2B_DOMAIN=agentbox-data-plane\.agentbox-system\.svc\.cluster\.local/);
    assert.match(notes.stdout, /cluster eu-1/);
    const yaml = await renderOk(AGENT_CHART, AGENT_REQUIRED, { format: 'yaml' });
    assert.ok(!yaml.stdout.includes('E2B_API_URL='), 'NOTES.txt is not part of the manifests');
});

test('required values missing: the renderer fails with the chart\'s message', async () => {
    const cases = [
        [AGENT_CHART, [], /execution error at \(agentbox-agent\/templates\/[^)]+\): agent\.clusterId is required/],
        [AGENT_CHART, ['--set', 'agent.clusterId=EU_1', '--set', 'hub.enabled=false'], /agent\.clusterId "EU_1" is not a DNS label/],
        [AGENT_CHART, ['--set', 'agent.clusterId=eu-1'], /hub\.url is required \(or hub\.existingSecret, or hub\.enabled=false/],
        [AGENT_CHART, ['--set', 'agent.clusterId=eu-1', '--set', 'hub.url=wss://h:7701'], /hub\.joinToken is required/],
        [HUB_CHART, ['--set', 'database.url=postgres://a@b/c'], /hub\.secret\.value is required/],
        [HUB_CHART, ['--set', 'hub.secret.value=short', '--set', 'database.url=postgres://a@b/c'], /hub\.secret\.value is 5 bytes: the hub secret needs at least 32/],
        [HUB_CHART, ['--set', `hub.secret.value=${HUB_SECRET}`], /database\.url is required \(or database\.existingSecret, or postgresql\.enabled=true/],
        [HUB_CHART, [...HUB_REQUIRED, '--set', 'postgresql.enabled=true'], /postgresql\.password is required/],
        [HUB_CHART, [...HUB_REQUIRED, '--set', 'ingress.enabled=true'], /ingress\.host is required/],
    ];
    for (const [chart, args, re] of cases) {
        const r = await render(chart, args);
        assert.notEqual(r.code, 0, `${path.basename(chart)} ${args.join(' ')} rendered:\n${r.stdout.slice(0, 300)}`);
        assert.match(r.stderr, re, `${path.basename(chart)} ${args.join(' ')}`);
        assert.equal(r.stdout, '', 'nothing rendered on failure');
    }
});

test('hub chart: migration hook Job, Secrets by reference, restricted Pod, probes; trial PostgreSQL and Ingress', async () => {
    const { objs } = await renderOk(HUB_CHART, HUB_REQUIRED, { name: 'hub' });
    const job = find(objs, 'Job', 'hub-migrate');
    assert.equal(job.metadata.annotations['helm.sh/hook'], 'pre-install,pre-upgrade');
    assert.equal(job.metadata.annotations['helm.sh/hook-delete-policy'], 'before-hook-creation,hook-succeeded');
    const jc = job.spec.template.spec.containers[0];
    assert.deepEqual(jc.command, ['/usr/bin/agentbox-hub', 'migrate']);
    assert.deepEqual(jc.args, ['--migrations-dir=/usr/share/agentbox/migrations']);
    assert.deepEqual(secretRef(jc, 'AGENTBOX_DATABASE_URL'), { name: 'hub-database', key: 'databaseUrl' });
    assert.equal(job.spec.template.spec.restartPolicy, 'Never');
    assertRestricted(job.spec.template.spec, jc, 'migrate');
    // the Job's Secret exists before it: a hook with a lower weight
    const dbs = find(objs, 'Secret', 'hub-database');
    assert.equal(dbs.metadata.annotations['helm.sh/hook'], 'pre-install,pre-upgrade');
    assert.ok(Number(dbs.metadata.annotations['helm.sh/hook-weight']) < Number(job.metadata.annotations['helm.sh/hook-weight']));
    assert.equal(dbs.stringData.databaseUrl, 'postgres://agentbox:pw@db.example.com:5432/agentbox');
    const hs = find(objs, 'Secret', 'hub-secret');
    assert.equal(hs.stringData.hubSecret, HUB_SECRET);
    assert.equal(hs.metadata.annotations['helm.sh/resource-policy'], 'keep');

    const dep = find(objs, 'Deployment', 'hub');
    const pod = dep.spec.template.spec;
    const c = pod.containers[0];
    assertRestricted(pod, c, 'hub');
    assert.equal(pod.automountServiceAccountToken, false);
    assert.deepEqual(c.command, ['/usr/bin/agentbox-hub', 'serve']);
    for (const a of ['--listen=:7700', '--tunnel-listen=:7701', '--metrics-listen=:7702', '--hub-secret-file=/etc/agentbox/secret/hub-secret'])
        assert.ok(c.args.includes(a), `hub args ${JSON.stringify(c.args)} lack ${a}`);
    assert.ok(!JSON.stringify(c).includes(HUB_SECRET) && !JSON.stringify(c).includes('pw@'), 'no secret in the container spec');
    assert.deepEqual(secretRef(c, 'AGENTBOX_DATABASE_URL'), { name: 'hub-database', key: 'databaseUrl' });
    const vol = pod.volumes.find((v) => v.name === c.volumeMounts.find((m) => m.mountPath === '/etc/agentbox/secret').name);
    assert.deepEqual(vol.secret.items, [{ key: 'hubSecret', path: 'hub-secret' }]);
    assert.equal(vol.secret.secretName, 'hub-secret');
    assert.deepEqual(c.livenessProbe.httpGet, { path: '/healthz', port: 'http' });
    assert.deepEqual(c.readinessProbe.httpGet, { path: '/readyz', port: 'http' });
    assert.deepEqual(Object.fromEntries(c.ports.map((p) => [p.name, p.containerPort])), { http: 7700, tunnel: 7701, metrics: 7702 });
    const svc = find(objs, 'Service', 'hub');
    assert.deepEqual(svc.spec.ports.map((p) => [p.name, p.port, p.targetPort]), [['http', 80, 'http'], ['tunnel', 7701, 'tunnel'], ['metrics', 7702, 'metrics']]);
    assert.equal(find(objs, 'Ingress'), undefined);
    assert.equal(find(objs, 'StatefulSet'), undefined);

    // existing Secrets: the chart renders none and references them
    const ext = (await renderOk(HUB_CHART, ['--set', 'hub.secret.existingSecret=mine', '--set', 'database.existingSecret=mydb', '--set', 'database.urlKey=url'], { name: 'hub' })).objs;
    assert.equal(all(ext, 'Secret').length, 0);
    const ec = find(ext, 'Deployment').spec.template.spec;
    assert.deepEqual(secretRef(ec.containers[0], 'AGENTBOX_DATABASE_URL'), { name: 'mydb', key: 'url' });
    assert.equal(ec.volumes.find((v) => v.name === 'hub-secret').secret.secretName, 'mine');

    // the trial database: a StatefulSet, the URL pointing at it, the migration after it exists
    const trial = (await renderOk(HUB_CHART, ['--set', `hub.secret.value=${HUB_SECRET}`, '--set', 'postgresql.enabled=true',
        '--set', 'postgresql.password=p@ss:w', '--set', 'postgresql.adminPassword=root', '--set', 'ingress.enabled=true',
        '--set', 'ingress.host=hub.example.com', '--set', 'ingress.className=nginx', '--set', 'tunnelTls.secretName=hub-tls'], { name: 'hub' })).objs;
    const sts = find(trial, 'StatefulSet', 'hub-postgresql');
    assert.equal(sts.spec.replicas, 1);
    assert.equal(sts.spec.template.spec.securityContext.runAsNonRoot, true);
    assert.equal(find(trial, 'Service', 'hub-postgresql').spec.clusterIP, 'None');
    assert.equal(find(trial, 'Secret', 'hub-database').stringData.databaseUrl, 'postgres://agentbox:p%40ss%3Aw@hub-postgresql:5432/agentbox?sslmode=disable');
    assert.equal(find(trial, 'Job').metadata.annotations['helm.sh/hook'], 'post-install,pre-upgrade');
    assert.match(find(trial, 'ConfigMap', 'hub-postgresql-init').data['10-agentbox.sh'], /CREATE ROLE "agentbox" LOGIN/);
    const ing = find(trial, 'Ingress', 'hub');
    assert.equal(ing.spec.ingressClassName, 'nginx');
    assert.equal(ing.spec.rules[0].host, 'hub.example.com');
    assert.deepEqual(ing.spec.rules[0].http.paths[0].backend.service, { name: 'hub', port: { name: 'http' } });
    const tc = find(trial, 'Deployment').spec.template.spec.containers[0];
    assert.ok(tc.args.includes('--tls-cert=/etc/agentbox/tls/tls.crt') && tc.args.includes('--tls-key=/etc/agentbox/tls/tls.key'));

    const notes = await renderOk(HUB_CHART, HUB_REQUIRED, { name: 'hub', format: 'notes' });
    assert.match(notes.stdout, /ws:\/\/hub\.agentbox-system\.svc\.cluster\.local:7701/);
    assert.match(notes.stdout, /cluster add <cluster-id>/);
});

// --- apply and run ---------------------------------------------------------------------------

function kubectl(kc, args) {
    return new Promise((resolve) => {
        execFile(KUBECTL, ['--kubeconfig', kc, ...args], { timeout: 60000, env: { ...process.env, HOME: path.dirname(kc) } }, (err, stdout, stderr) =>
            resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }));
    });
}

// The container's environment as the kubelet would give it: values, Secret
// keys read from the API server, the downward API fields.
function resolveEnv(api, ns, c, podName) {
    const env = {};
    for (const e of c.env || []) {
        if (e.value !== undefined) env[e.name] = e.value;
        else if (e.valueFrom?.secretKeyRef) {
            const { name, key } = e.valueFrom.secretKeyRef;
            const s = api.peek('secrets', ns, name);
            assert.ok(s, `env ${e.name}: Secret ${ns}/${name} was not applied`);
            assert.ok(s.data?.[key] !== undefined, `env ${e.name}: Secret ${name} has no key ${key}`);
            env[e.name] = Buffer.from(s.data[key], 'base64').toString();
        } else if (e.valueFrom?.fieldRef) {
            env[e.name] = { 'metadata.name': podName, 'metadata.namespace': ns }[e.valueFrom.fieldRef.fieldPath];
        } else assert.fail(`env ${e.name}: unsupported source ${JSON.stringify(e.valueFrom)}`);
    }
    return env;
}

// Secret volumes written into dir as the kubelet mounts them; returns
// [mountPath, hostDir] pairs for the args that name files under a mount.
function mountSecrets(api, ns, pod, c, dir) {
    const maps = [];
    for (const m of c.volumeMounts || []) {
        const v = pod.volumes.find((x) => x.name === m.name);
        if (!v.secret) continue;
        const s = api.peek('secrets', ns, v.secret.secretName);
        assert.ok(s, `volume ${v.name}: Secret ${v.secret.secretName} was not applied`);
        const host = path.join(dir, v.name);
        fs.mkdirSync(host, { recursive: true });
        const items = v.secret.items || Object.keys(s.data).map((k) => ({ key: k, path: k }));
        for (const it of items) fs.writeFileSync(path.join(host, it.path), Buffer.from(s.data[it.key], 'base64'), { mode: 0o400 });
        maps.push([m.mountPath, host]);
    }
    return maps;
}
const remap = (args, maps) => args.map((a) => maps.reduce((x, [from, to]) => x.split(from + '/').join(to + '/'), a));

function probeUrl(c, probe) {
    const port = c.ports.find((p) => p.name === probe.httpGet.port)?.containerPort ?? probe.httpGet.port;
    return `http://127.0.0.1:${port}${probe.httpGet.path}`;
}

test('rendered charts apply with kubectl; the hub and the agent run with what the rendered Job and Deployments say (tunnel over TLS from Secrets)', async () => {
    const dir = tempDir('agentbox-helm-run-');
    cleanups.push(() => removeTempDir(dir));
    const api = await startKubeApi();
    cleanups.push(() => api.close());
    const kc = api.kubeconfig(dir, { namespace: NS });

    // A database owned by a login role that is not a superuser, as the chart's values say.
    const pg = await startPostgres();
    cleanups.push(() => pg.cleanup());
    await psqlAt(pg.url, "CREATE ROLE helm_owner LOGIN NOSUPERUSER PASSWORD 'helm-pw'");
    await psqlAt(pg.url, 'CREATE DATABASE helm_hub OWNER helm_owner');
    const dbUrl = new URL(pg.url);
    dbUrl.username = 'helm_owner';
    dbUrl.password = 'helm-pw';
    dbUrl.pathname = '/helm_hub';

    // The tunnel's TLS as an operator would set it up: a kubernetes.io/tls Secret
    // for the hub, the CA in a Secret for the agent (made with kubectl).
    const f = (n) => path.join(dir, n);
    for (const args of [
        ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=helm test CA', '-keyout', f('ca.key'), '-out', f('ca.pem')],
        ['req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', f('hub.key'), '-out', f('hub.csr')],
    ]) assert.equal((await run('openssl', args)).code, 0);
    fs.writeFileSync(f('ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
    const signed = await run('openssl', ['x509', '-req', '-in', f('hub.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-days', '1', '-extfile', f('ext.cnf'), '-out', f('hub.pem')]);
    assert.equal(signed.code, 0, signed.stderr);
    // (kubectl create sends built-in kinds as protobuf, which the in-test
    // server does not speak: made client-side, then applied as JSON)
    for (const [file, args] of [['tls-secret.yaml', ['tls', 'hub-tunnel-tls', `--cert=${f('hub.pem')}`, `--key=${f('hub.key')}`]],
        ['ca-secret.yaml', ['generic', 'hub-ca', `--from-file=ca.crt=${f('ca.pem')}`]]]) {
        const made = await kubectl(kc, ['create', 'secret', ...args, '--dry-run=client', '-o', 'yaml']);
        assert.equal(made.code, 0, made.stderr);
        fs.writeFileSync(f(file), made.stdout);
        const applied = await kubectl(kc, ['apply', '-f', f(file)]);
        assert.equal(applied.code, 0, applied.stderr);
    }
    assert.equal(api.peek('secrets', NS, 'hub-tunnel-tls').type, 'kubernetes.io/tls');

    // --- the hub ---
    const [http, tunnel, metrics] = [await freePort(), await freePort(), await freePort()];
    const hubYaml = await renderOk(HUB_CHART, ['--set', `hub.secret.value=${HUB_SECRET}`, '--set', `database.url=${dbUrl}`,
        '--set', 'tunnelTls.secretName=hub-tunnel-tls',
        '--set', `binary=${hubBin()}`, '--set', `migrations.dir=${migrationsDir()}`, '--set', 'hub.logJson=false',
        '--set', `ports.http=${http}`, '--set', `ports.tunnel=${tunnel}`, '--set', `ports.metrics=${metrics}`], { name: 'hub', format: 'yaml' });
    const hubFile = path.join(dir, 'hub.yaml');
    fs.writeFileSync(hubFile, hubYaml.stdout);
    const ha = await kubectl(kc, ['apply', '-f', hubFile]);
    assert.equal(ha.code, 0, ha.stderr);
    for (const line of ['secret/hub-secret created', 'secret/hub-database created', 'deployment.apps/hub created', 'job.batch/hub-migrate created', 'service/hub created'])
        assert.ok(ha.stdout.includes(line), `kubectl apply: no "${line}" in\n${ha.stdout}`);
    const again = await kubectl(kc, ['apply', '-f', hubFile]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /deployment\.apps\/hub unchanged/);

    const job = api.peek('jobs', NS, 'hub-migrate');
    assert.equal(job.metadata.annotations['helm.sh/hook'], 'pre-install,pre-upgrade');
    const jc = job.spec.template.spec.containers[0];
    const m = await run(jc.command[0], [...jc.command.slice(1), ...jc.args], { env: { PATH: process.env.PATH, ...resolveEnv(api, NS, jc) } });
    assert.equal(m.code, 0, `migration Job: ${m.stderr}`);

    const hubDep = api.peek('deployments', NS, 'hub');
    const hpod = hubDep.spec.template.spec;
    const hc = hpod.containers[0];
    const hubMaps = mountSecrets(api, NS, hpod, hc, path.join(dir, 'hub-volumes'));
    assert.deepEqual(hubMaps.map(([m]) => m).sort(), ['/etc/agentbox/secret', '/etc/agentbox/tls']);
    const hubProc = spawnProc('helm-hub', hc.command[0], remap([...hc.command.slice(1), ...hc.args], hubMaps),
        { PATH: process.env.PATH, ...resolveEnv(api, NS, hc, 'hub-0') }, { logDir: dir });
    cleanups.push(() => hubProc.stop());
    for (const probe of [hc.livenessProbe, hc.readinessProbe]) {
        await waitFor(async () => {
            if (!hubProc.running()) throw new Error(`hub exited (${hubProc.exitCode}):\n${hubProc.logs()}`);
            return (await httpGet(probeUrl(hc, probe), { timeoutMs: 1000 })).status === 200;
        }, { timeoutMs: 15000, what: `hub probe ${probe.httpGet.path}\n${hubProc.logs()}` });
    }

    // --- an agent for cluster eu-1, joined with a token the hub made ---
    const add = await run(hubBin(), ['cluster', 'add', 'eu-1'], { env: { ...process.env, DATABASE_URL: dbUrl.toString() } });
    assert.equal(add.code, 0, add.stderr);
    const token = add.stdout.trim().split('\n').pop().trim();
    const [e2b, data, native, am] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const state = path.join(dir, 'agent-state');
    const agentYaml = await renderOk(AGENT_CHART, ['--set', 'agent.clusterId=eu-1', '--set', `hub.url=wss://localhost:${tunnel}`, '--set', 'hub.caSecret=hub-ca',
        '--set', `hub.joinToken=${token}`, '--set', `command={${agentBin()},serve}`, '--set', 'agent.runtime=local',
        '--set', `stateDir=${state}`, '--set', 'agent.logJson=false', '--set', 'replicaCount=2',
        '--set', `ports.e2b=${e2b}`, '--set', `ports.data=${data}`, '--set', `ports.native=${native}`, '--set', `ports.metrics=${am}`], { format: 'yaml' });
    const agentFile = path.join(dir, 'agent.yaml');
    fs.writeFileSync(agentFile, agentYaml.stdout);
    const aa = await kubectl(kc, ['apply', '-f', agentFile]);
    assert.equal(aa.code, 0, aa.stderr);
    for (const line of ['customresourcedefinition.apiextensions.k8s.io/sandboxpools.agents.navix.sh created', 'clusterrole.rbac.authorization.k8s.io/ab-sandboxes created',
        'role.rbac.authorization.k8s.io/ab-leader created', 'poddisruptionbudget.policy/ab created', 'service/agentbox-e2b-api created', 'deployment.apps/ab created'])
        assert.ok(aa.stdout.includes(line), `kubectl apply: no "${line}" in\n${aa.stdout}`);
    // stored as applied: the CRDs the runtime needs, the Lease rights, the Secret as data
    assert.equal(api.peek('customresourcedefinitions', '', 'sandboxenvs.agents.navix.sh').spec.names.kind, 'SandboxEnv');
    assert.deepEqual(api.peek('roles', NS, 'ab-leader').rules, [{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] }]);
    const hubSecretObj = api.peek('secrets', NS, 'ab-hub');
    assert.equal(hubSecretObj.stringData, undefined);
    assert.equal(Buffer.from(hubSecretObj.data.joinToken, 'base64').toString(), token);
    const got = await kubectl(kc, ['get', 'deploy', 'ab', '-o', 'jsonpath={.spec.replicas}']);
    assert.equal(got.stdout, '2');

    const dep = api.peek('deployments', NS, 'ab');
    const pod = dep.spec.template.spec;
    const c = pod.containers[0];
    fs.mkdirSync(state, { recursive: true });
    const agentMaps = mountSecrets(api, NS, pod, c, path.join(dir, 'agent-volumes'));
    assert.deepEqual(agentMaps.map(([m]) => m), ['/etc/agentbox/hub-ca']);
    const agentProc = spawnProc('helm-agent', c.command[0], remap([...c.command.slice(1), ...c.args], agentMaps),
        { PATH: process.env.PATH, ...resolveEnv(api, NS, c, 'ab-6d9f7c-2xq8p') }, { logDir: dir });
    cleanups.push(() => agentProc.stop());
    for (const probe of [c.livenessProbe, c.readinessProbe]) {
        await waitFor(async () => {
            if (!agentProc.running()) throw new Error(`agent exited (${agentProc.exitCode}):\n${agentProc.logs()}`);
            return (await httpGet(probeUrl(c, probe), { timeoutMs: 1000 })).status === 200;
        }, { timeoutMs: 15000, what: `agent probe ${probe.httpGet.path}\n${agentProc.logs()}` });
    }
    // the E2B API answers on its declared port, and the tunnel (URL and token from the
    // Secret, wss:// verified with the CA from the other Secret) is up
    const e2bPort = c.ports.find((p) => p.name === 'e2b-api').containerPort;
    assert.equal((await httpGet(`http://127.0.0.1:${e2bPort}/healthz`)).status, 200);
    await waitFor(async () => {
        const l = await run(hubBin(), ['cluster', 'list', '--json'], { env: { ...process.env, DATABASE_URL: dbUrl.toString() } });
        const list = JSON.parse(l.stdout);
        const arr = Array.isArray(list) ? list : list.clusters;
        return arr.find((x) => x.id === 'eu-1')?.online === true;
    }, { timeoutMs: 15000, what: `cluster eu-1 online on the hub\nagent:\n${agentProc.logs()}\nhub:\n${hubProc.logs()}` });
});
