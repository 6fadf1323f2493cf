// helmrender renders a Helm 3 chart the way `helm template` does, for the
// tests: Helm is not packaged on the machines this project is built on, so
// this implements the parts of Helm's engine our charts use, over Go's
// text/template and the sprig function library (Debian's
// golang-github-masterminds-sprig-dev), built offline in GOPATH mode.
//
//	helmrender [--name R] [--namespace NS] [-f values.yaml]... [--set k=v]...
//	           [--set-string k=v]... [--kube-version 1.30] [--notes] [--json] CHART_DIR
//
// Implemented: values.yaml + -f files (deep merge, null deletes) + --set /
// --set-string (a.b=c, a.b[0]=x, {x,y} lists, comma-separated, typed like
// Helm's strvals); every template parsed into one set named
// <chart>/templates/<file> (so `include` of partials and of
// (print $.Template.BasePath "/x.yaml") work); `include`, `tpl`, `required`,
// `fail`, `toYaml`, `fromYaml`, `toJson`, `fromJson`, `lookup` (always
// empty, as in `helm template`); .Release, .Chart, .Capabilities
// (KubeVersion, APIVersions.Has), .Template, .Files.Get; missing keys
// render empty; crds/ emitted first, verbatim; then templates' documents
// sorted in Helm's install order by kind; NOTES.txt only with --notes;
// --json prints [{source, object}] instead of the YAML stream.
// `helmrender --to-json FILE...` only converts YAML documents to JSON.
// Every rendered document must parse as YAML.
//
// Not implemented: subcharts/dependencies, library charts, schema
// validation (values.schema.json), --set-file, post-renderers.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig" // GOPATH mode: no /v3 (Debian installs it unversioned)
	"github.com/ghodss/yaml"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type chartMeta struct {
	APIVersion  string `json:"apiVersion"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	Description string `json:"description"`
	Type        string `json:"type"`
}

type release struct {
	Name      string
	Namespace string
	Service   string
	Revision  int
	IsInstall bool
	IsUpgrade bool
}

type apiVersions []string

// Has reports whether the simulated cluster serves a group/version (or a
// group/version/Kind), like Helm's Capabilities.APIVersions.Has.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type kubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k kubeVersion) String() string { return k.Version }

type capabilities struct {
	KubeVersion kubeVersion
	APIVersions apiVersions
	HelmVersion map[string]string
}

type files struct{ root string }

// Get returns a chart file's contents, "" when absent (Helm's .Files.Get).
func (f files) Get(name string) string {
	b, err := os.ReadFile(filepath.Join(f.root, filepath.FromSlash(name)))
	if err != nil {
		return ""
	}
	return string(b)
}

type tmplInfo struct {
	Name     string
	BasePath string
}

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "Error: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	var valueFiles, sets, setStrings multiFlag
	name, ns, kube := "release-name", "default", "1.30.0"
	notes, asJSON := false, false
	var chartDir string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if strings.Contains(a, "=") && strings.HasPrefix(a, "--") {
				return a[strings.Index(a, "=")+1:]
			}
			if i+1 >= len(args) {
				die("flag %s needs a value", a)
			}
			i++
			return args[i]
		}
		flag := a
		if strings.HasPrefix(a, "--") && strings.Contains(a, "=") {
			flag = a[:strings.Index(a, "=")]
		}
		switch flag {
		case "-f", "--values":
			valueFiles.Set(next())
		case "--set":
			sets.Set(next())
		case "--set-string":
			setStrings.Set(next())
		case "--name":
			name = next()
		case "-n", "--namespace":
			ns = next()
		case "--kube-version":
			kube = strings.TrimPrefix(next(), "v")
		case "--notes":
			notes = true
		case "--json":
			asJSON = true
		case "--to-json":
			// not Helm: YAML files (multi-document) → one JSON array, for
			// tests that have no YAML parser
			toJSON(args[i+1:])
			return
		case "-h", "--help":
			fmt.Println("usage: helmrender [--name R] [--namespace NS] [-f FILE]... [--set k=v]... [--set-string k=v]... [--kube-version V] [--notes] CHART_DIR")
			return
		default:
			if strings.HasPrefix(a, "-") {
				die("unknown flag %s", a)
			}
			if chartDir != "" {
				die("one chart directory only (got %s and %s)", chartDir, a)
			}
			chartDir = a
		}
	}
	if chartDir == "" {
		die("no chart directory given")
	}

	var meta chartMeta
	cb, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		die("%v", err)
	}
	if err := yaml.Unmarshal(cb, &meta); err != nil {
		die("Chart.yaml: %v", err)
	}
	if meta.APIVersion != "v2" {
		die("Chart.yaml: apiVersion %q: only Helm 3 charts (v2) are rendered", meta.APIVersion)
	}
	if meta.Name == "" || meta.Version == "" {
		die("Chart.yaml: name and version are required")
	}

	values := map[string]interface{}{}
	if b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml")); err == nil {
		if err := yaml.Unmarshal(b, &values); err != nil {
			die("values.yaml: %v", err)
		}
		if values == nil {
			values = map[string]interface{}{}
		}
	}
	for _, f := range valueFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			die("%v", err)
		}
		var over map[string]interface{}
		if err := yaml.Unmarshal(b, &over); err != nil {
			die("%s: %v", f, err)
		}
		values = mergeValues(values, over)
	}
	for _, s := range sets {
		if err := parseSet(values, s, false); err != nil {
			die("failed parsing --set data: %v", err)
		}
	}
	for _, s := range setStrings {
		if err := parseSet(values, s, true); err != nil {
			die("failed parsing --set-string data: %v", err)
		}
	}
	dropNulls(values)

	kv := strings.SplitN(kube, ".", 3)
	if len(kv) < 2 {
		die("--kube-version %q: want MAJOR.MINOR[.PATCH]", kube)
	}
	caps := capabilities{
		KubeVersion: kubeVersion{Version: "v" + kube, Major: kv[0], Minor: kv[1], GitVersion: "v" + kube},
		APIVersions: apiVersions{"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
			"networking.k8s.io/v1", "coordination.k8s.io/v1", "apiextensions.k8s.io/v1",
			"events.k8s.io/v1", "agents.navix.sh/v1alpha1"},
		HelmVersion: map[string]string{"Version": "v3.14.0"},
	}
	top := map[string]interface{}{
		"Values":       values,
		"Release":      release{Name: name, Namespace: ns, Service: "Helm", Revision: 1, IsInstall: true},
		"Chart":        meta,
		"Capabilities": caps,
		"Files":        files{root: chartDir},
	}

	out, notesText, err := render(chartDir, meta.Name, top)
	if err != nil {
		die("%s", cleanError(err))
	}
	if notes {
		fmt.Print(notesText)
		return
	}
	if asJSON {
		// one array of {source, object}, for tests with no YAML parser
		var list []map[string]interface{}
		for _, d := range out {
			var obj map[string]interface{}
			if err := yaml.Unmarshal([]byte(d.text), &obj); err != nil {
				die("%s: %v", d.source, err)
			}
			list = append(list, map[string]interface{}{"source": d.source, "object": obj})
		}
		b, err := json.MarshalIndent(list, "", "  ")
		if err != nil {
			die("%v", err)
		}
		fmt.Println(string(b))
		return
	}
	for _, d := range out {
		fmt.Printf("---\n# Source: %s\n%s\n", d.source, strings.TrimSpace(d.text))
	}
}

func toJSON(files []string) {
	var list []interface{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			die("%v", err)
		}
		for _, d := range splitDocs(string(b)) {
			var obj interface{}
			if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
				die("%s: %v", f, err)
			}
			if obj != nil {
				list = append(list, obj)
			}
		}
	}
	out, err := json.Marshal(list)
	if err != nil {
		die("%v", err)
	}
	fmt.Println(string(out))
}

type doc struct {
	source, kind, text string
}

// render parses every file under templates/ into one set and executes each
// non-partial; returns the manifest stream and the rendered NOTES.txt.
func render(chartDir, chartName string, top map[string]interface{}) ([]doc, string, error) {
	var names []string
	tdir := filepath.Join(chartDir, "templates")
	err := filepath.Walk(tdir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			rel, _ := filepath.Rel(chartDir, p)
			names = append(names, path.Join(chartName, filepath.ToSlash(rel)))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, "", err
	}
	sort.Strings(names)

	root := template.New("gotpl")
	root.Option("missingkey=zero")
	includeDepth := 0
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = func(v interface{}) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	funcs["fromYaml"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if includeDepth > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includeDepth++
		defer func() { includeDepth-- }()
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %v", text, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error calling tpl: %v", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	root.Funcs(funcs)

	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(chartDir, filepath.FromSlash(strings.TrimPrefix(n, chartName+"/"))))
		if err != nil {
			return nil, "", err
		}
		if _, err := root.New(n).Parse(string(b)); err != nil {
			return nil, "", fmt.Errorf("parse error in %s: %v", n, err)
		}
	}

	var docs []doc
	notes := ""
	for _, n := range names {
		base := path.Base(n)
		if strings.HasPrefix(base, "_") {
			continue
		}
		data := map[string]interface{}{}
		for k, v := range top {
			data[k] = v
		}
		data["Template"] = tmplInfo{Name: n, BasePath: path.Join(chartName, "templates")}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, n, data); err != nil {
			return nil, "", fmt.Errorf("%v", err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if base == "NOTES.txt" {
			notes = text
			continue
		}
		for _, d := range splitDocs(text) {
			var obj map[string]interface{}
			if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
				return nil, "", fmt.Errorf("YAML parse error in %s: %v\n%s", n, err, d)
			}
			if obj == nil {
				continue
			}
			kind, _ := obj["kind"].(string)
			if kind == "" {
				return nil, "", fmt.Errorf("%s: a document without kind:\n%s", n, d)
			}
			docs = append(docs, doc{source: n, kind: kind, text: d})
		}
	}
	sort.SliceStable(docs, func(i, j int) bool { return kindRank(docs[i].kind) < kindRank(docs[j].kind) })

	var out []doc
	crds, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	sort.Strings(crds)
	for _, c := range crds {
		b, err := os.ReadFile(c)
		if err != nil {
			return nil, "", err
		}
		for _, d := range splitDocs(string(b)) {
			out = append(out, doc{source: path.Join(chartName, "crds", filepath.Base(c)), kind: "CustomResourceDefinition", text: d})
		}
	}
	return append(out, docs...), notes, nil
}

var (
	execAt  = regexp.MustCompile(`template: ([^:\s]+:\d+:\d+): executing`)
	execMsg = regexp.MustCompile(`error calling (?:required|fail): (.*)$`)
)

// cleanError words a required/fail failure as Helm does: "execution error
// at (<template>:<line>:<col>): <message>", with the innermost template
// and the message the chart gave.
func cleanError(err error) string {
	s := err.Error()
	msg := execMsg.FindStringSubmatch(s)
	at := execAt.FindAllStringSubmatch(s, -1)
	if msg == nil || at == nil {
		return s
	}
	return fmt.Sprintf("execution error at (%s): %s", at[len(at)-1][1], msg[1])
}

// splitDocs splits a YAML stream on '---' lines and drops documents that
// hold only comments and blank lines.
func splitDocs(s string) []string {
	var docs []string
	var cur []string
	flush := func() {
		d := strings.Join(cur, "\n")
		cur = nil
		for _, l := range strings.Split(d, "\n") {
			t := strings.TrimSpace(l)
			if t != "" && !strings.HasPrefix(t, "#") {
				docs = append(docs, d)
				return
			}
		}
	}
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimRight(l, " \t") == "---" || strings.HasPrefix(l, "--- ") {
			flush()
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return docs
}

// Helm's InstallOrder (pkg/releaseutil/kind_sorter.go), the kinds our
// charts and their users render; unknown kinds go last.
var installOrder = []string{"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap",
	"StorageClass", "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
	"ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
	"RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService"}

func kindRank(k string) int {
	for i, x := range installOrder {
		if x == k {
			return i
		}
	}
	return len(installOrder)
}

// mergeValues merges src into dst the way Helm coalesces -f files: maps
// merge key by key, anything else replaces, an explicit null deletes.
func mergeValues(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			dst[k] = nil
			continue
		}
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

func dropNulls(m map[string]interface{}) {
	for k, v := range m {
		if v == nil {
			delete(m, k)
		} else if sm, ok := v.(map[string]interface{}); ok {
			dropNulls(sm)
		}
	}
}

// parseSet applies one --set argument: comma-separated key=value pairs,
// keys with dots and [index], values typed (int, bool, null) unless
// asString; {a,b} is a list; a backslash escapes ',' '.' '=' '{'.
func parseSet(values map[string]interface{}, arg string, asString bool) error {
	for _, pair := range splitEscaped(arg, ',', true) {
		if pair == "" {
			continue
		}
		eq := indexUnescaped(pair, '=')
		if eq < 0 {
			return fmt.Errorf("key %q has no value", pair)
		}
		key, raw := pair[:eq], pair[eq+1:]
		var val interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			var list []interface{}
			for _, item := range splitEscaped(raw[1:len(raw)-1], ',', false) {
				list = append(list, typed(unescape(item), asString))
			}
			val = list
		} else {
			val = typed(unescape(raw), asString)
		}
		if err := setPath(values, splitEscaped(key, '.', false), val); err != nil {
			return fmt.Errorf("%s: %v", key, err)
		}
	}
	return nil
}

func typed(s string, asString bool) interface{} {
	if asString {
		return s
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && (s == "0" || !strings.HasPrefix(s, "0")) {
		return n
	}
	return s
}

func setPath(m map[string]interface{}, keys []string, val interface{}) error {
	k := unescape(keys[0])
	idx := -1
	if open := strings.Index(k, "["); open >= 0 && strings.HasSuffix(k, "]") {
		n, err := strconv.Atoi(k[open+1 : len(k)-1])
		if err != nil || n < 0 || n > 65536 {
			return fmt.Errorf("bad list index in %q", k)
		}
		idx, k = n, k[:open]
	}
	if k == "" {
		return fmt.Errorf("empty key")
	}
	if idx < 0 {
		if len(keys) == 1 {
			m[k] = val
			return nil
		}
		child, ok := m[k].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
			m[k] = child
		}
		return setPath(child, keys[1:], val)
	}
	list, _ := m[k].([]interface{})
	for len(list) <= idx {
		list = append(list, nil)
	}
	if len(keys) == 1 {
		list[idx] = val
	} else {
		child, ok := list[idx].(map[string]interface{})
		if !ok {
			child = map[string]interface{}{}
		}
		if err := setPath(child, keys[1:], val); err != nil {
			return err
		}
		list[idx] = child
	}
	m[k] = list
	return nil
}

// splitEscaped splits on sep outside backslash escapes (and, when braces,
// outside {...}); escapes are kept for a later unescape.
func splitEscaped(s string, sep byte, braces bool) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case braces && s[i] == '{':
			depth++
		case braces && s[i] == '}':
			depth--
		case s[i] == sep && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func indexUnescaped(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
		} else if s[i] == c {
			return i
		}
	}
	return -1
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
