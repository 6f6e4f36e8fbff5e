// Package deploy_test checks the deployment files without a container
// engine or a cluster: every manifest parses, and what they say about the
// service (ports, probe paths, image and command, configuration keys and
// files) agrees with the binary and its configuration loader.
package deploy_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/config"
)

// readYAML decodes every document of a YAML file.
func readYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// get walks a decoded YAML/JSON document by map keys and list indexes.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func strs(v any, path ...any) []string {
	var out []string
	for _, e := range list(v, path...) {
		out = append(out, e.(string))
	}
	return out
}

// knownEnv returns the environment variables the configuration loader
// reads, by asking it.
func knownEnv(t *testing.T) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	if _, err := config.Load(config.ServeCommand, nil, func(k string) string { seen[k] = true; return "" }, io.Discard); err != nil {
		t.Fatal(err)
	}
	return seen
}

// defaults is the configuration with no flags and no environment.
func defaults(t *testing.T) config.Config {
	t.Helper()
	c, err := config.Load(config.ServeCommand, nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return n
}

func TestEveryManifestParses(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			n++
			if docs := readYAML(t, path); len(docs) == 0 {
				t.Errorf("%s has no document", path)
			}
		case ".json":
			n++
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !json.Valid(b) {
				t.Errorf("%s is not valid JSON", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("found %d manifests, want the compose, Kubernetes, Prometheus and Grafana files", n)
	}
}

// dockerfile is what the test reads from deploy/Dockerfile.
type dockerfile struct {
	goVersion  string   // of the build stage's golang image
	build      string   // the go build line
	user       string   // of the final stage
	entrypoint []string // of the final stage
	cmd        []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d dockerfile
	stages := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stages++
			if m := regexp.MustCompile(`^golang:(\d+\.\d+)`).FindStringSubmatch(rest); m != nil {
				d.goVersion = m[1]
			}
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.build = rest
			}
		case "USER":
			d.user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT must be in exec form: %v", err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &d.cmd); err != nil {
				t.Fatalf("CMD must be in exec form: %v", err)
			}
		}
	}
	if stages < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a final one", stages)
	}
	return d
}

func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil || d.goVersion != string(m[1]) {
		t.Errorf("build stage uses Go %q, go.mod wants %s", d.goVersion, m[1])
	}
	if !strings.Contains(d.build, "CGO_ENABLED=0") || !strings.Contains(d.build, "./cmd/warmcache") {
		t.Errorf("build %q: want a static (CGO_ENABLED=0) build of ./cmd/warmcache", d.build)
	}
	uid, _, _ := strings.Cut(d.user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root user", d.user)
	}
	out := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(d.build)
	if len(d.entrypoint) != 1 || out == nil || filepath.Base(d.entrypoint[0]) != filepath.Base(out[1]) {
		t.Errorf("ENTRYPOINT %q does not run the built binary %v", d.entrypoint, out)
	}
	if len(d.cmd) == 0 || d.cmd[0] != "serve" {
		t.Errorf("CMD %q, want serve", d.cmd)
	}
}

// configRun is a container's command line and environment, ready for the
// configuration loader, with files that the container mounts copied to a
// temporary directory and the paths rewritten to point there.
type configRun struct {
	args []string
	env  map[string]string
}

func (r configRun) load(t *testing.T) config.Config {
	t.Helper()
	if len(r.args) == 0 || r.args[0] != "serve" {
		t.Fatalf("command %q does not run serve", r.args)
	}
	c, err := config.Load(config.ServeCommand, r.args[1:], func(k string) string { return r.env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the configuration loader refuses %q with %v: %v", r.args, r.env, err)
	}
	if len(c.Args) != 0 {
		t.Fatalf("arguments left after the flags: %q", c.Args)
	}
	return c
}

// rewrite replaces each mounted path prefix in s by its copy.
func rewrite(s string, mounts map[string]string) string {
	for from, to := range mounts {
		if strings.HasPrefix(s, from) {
			return to + strings.TrimPrefix(s, from)
		}
		if i := strings.Index(s, "="+from); i >= 0 {
			return s[:i+1] + to + s[i+1+len(from):]
		}
	}
	return s
}

func checkEnvNames(t *testing.T, env map[string]string) {
	t.Helper()
	known := knownEnv(t)
	for k := range env {
		if strings.HasPrefix(k, "WARMCACHE_") && !known[k] {
			t.Errorf("environment variable %s is not read by the configuration loader", k)
		}
	}
}

// kube holds the Kubernetes objects by kind and name.
type kube map[string]map[string]any

func readKube(t *testing.T) kube {
	t.Helper()
	k := kube{}
	kust := readYAML(t, "kubernetes/kustomization.yaml")[0]
	for _, res := range strs(kust, "resources") {
		for _, d := range readYAML(t, filepath.Join("kubernetes", res)) {
			kind, name := str(d, "kind"), str(d, "metadata", "name")
			if k[kind] == nil {
				k[kind] = map[string]any{}
			}
			k[kind][name] = d
		}
	}
	files, _ := filepath.Glob("kubernetes/*.yaml")
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(strs(kust, "resources"), base) {
			t.Errorf("%s is not listed in kustomization.yaml", f)
		}
	}
	return k
}

// data returns the data (or stringData) of a ConfigMap or Secret.
func (k kube) data(t *testing.T, kind, name string) map[string]string {
	t.Helper()
	obj := k[kind][name]
	if obj == nil {
		t.Fatalf("no %s %q", kind, name)
	}
	out := map[string]string{}
	for _, field := range []string{"data", "stringData"} {
		m, _ := get(obj, field).(map[string]any)
		for key, v := range m {
			out[key], _ = v.(string)
		}
	}
	return out
}

func containers(pod any) map[string]any {
	out := map[string]any{}
	for _, field := range []string{"initContainers", "containers"} {
		for _, c := range list(pod, field) {
			out[str(c, "name")] = c
		}
	}
	return out
}

func TestKubernetes(t *testing.T) {
	k := readKube(t)
	dep := k["Deployment"]["orders"]
	if dep == nil {
		t.Fatal("no Deployment")
	}
	pod := get(dep, "spec", "template", "spec")
	cs := containers(pod)
	for _, name := range []string{"app", "warmcache", "pgbouncer"} {
		if cs[name] == nil {
			t.Fatalf("the pod has no %s container", name)
		}
	}
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("the pod does not require runAsNonRoot")
	}
	for name, c := range cs {
		for _, res := range []string{"requests", "limits"} {
			for _, r := range []string{"cpu", "memory"} {
				if get(c, "resources", res, r) == nil {
					t.Errorf("container %s has no %s.%s", name, res, r)
				}
			}
		}
		if get(c, "securityContext", "readOnlyRootFilesystem") != true || get(c, "securityContext", "allowPrivilegeEscalation") != false {
			t.Errorf("container %s: want a read-only root filesystem and no privilege escalation", name)
		}
		if name != "app" && str(c, "restartPolicy") != "Always" {
			t.Errorf("sidecar %s is not a native sidecar (restartPolicy: Always)", name)
		}
	}

	wc := cs["warmcache"]
	d := readDockerfile(t)
	if img := str(wc, "image"); !regexp.MustCompile(`/warmcache:[\w.-]+$`).MatchString(img) {
		t.Errorf("warmcache image %q, want .../warmcache:<tag>", img)
	}
	if cmd := strs(wc, "command"); cmd != nil && !slices.Equal(cmd, d.entrypoint) {
		t.Errorf("command %q overrides the image's entrypoint %q", cmd, d.entrypoint)
	}

	// The committed secrets are placeholders that must not work: a keys
	// file whose hash is a real SHA-256 would let whoever knows the
	// placeholder token in. For the checks below, a token made here takes
	// their place, as an operator's would.
	secret, _ := get(k["Secret"]["warmcache-secrets"], "stringData").(map[string]any)
	committedKeys, _ := secret["keys.yaml"].(string)
	if _, err := config.ParseKeys([]byte(committedKeys)); err == nil {
		t.Error("the committed keys.yaml loads: its placeholder hash is a working credential")
	}
	placeholder := regexp.MustCompile(`sha256: (\S+)`).FindStringSubmatch(committedKeys)
	if placeholder == nil || !strings.Contains(placeholder[1], "REPLACE") {
		t.Fatalf("keys.yaml has no sha256 placeholder that says to replace it: %q", committedKeys)
	}
	token := "operator-token-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	sum := sha256.Sum256([]byte(token))
	secret["keys.yaml"] = strings.Replace(committedKeys, placeholder[1], hex.EncodeToString(sum[:]), 1)
	secret["app-token"] = token

	// Volumes: their keys must exist in the ConfigMap or Secret, and their
	// files are copied where the container would see them.
	tmp := t.TempDir()
	volumes := map[string]any{}
	for _, v := range list(pod, "volumes") {
		volumes[str(v, "name")] = v
	}
	mountFiles := func(c any) (map[string]string, map[string]bool) {
		mounts, writable := map[string]string{}, map[string]bool{}
		for i, m := range list(c, "volumeMounts") {
			v := volumes[str(m, "name")]
			if v == nil {
				t.Fatalf("container %s mounts unknown volume %q", str(c, "name"), str(m, "name"))
			}
			dir := filepath.Join(tmp, str(c, "name"), strconv.Itoa(i))
			mountPath := str(m, "mountPath")
			var kind, name string
			switch {
			case get(v, "configMap") != nil:
				kind, name = "ConfigMap", str(v, "configMap", "name")
			case get(v, "secret") != nil:
				kind, name = "Secret", str(v, "secret", "secretName")
			case get(v, "emptyDir") != nil:
				writable[mountPath] = true
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			mounts[mountPath] = dir
			if kind == "" {
				continue
			}
			data := k.data(t, kind, name)
			items := list(v, strings.ToLower(kind[:1])+kind[1:], "items")
			for _, it := range items {
				key := str(it, "key")
				content, ok := data[key]
				if !ok {
					t.Fatalf("volume %s: %s %s has no key %q", str(v, "name"), kind, name, key)
				}
				if err := os.WriteFile(filepath.Join(dir, str(it, "path")), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if sub := str(m, "subPath"); sub != "" {
				mounts[mountPath] = filepath.Join(dir, sub)
			}
		}
		return mounts, writable
	}

	// Environment: names the loader reads, values from the Secret and
	// ConfigMap keys that exist.
	envOf := func(c any) map[string]string {
		env := map[string]string{}
		for _, e := range list(c, "env") {
			name := str(e, "name")
			switch {
			case get(e, "valueFrom", "secretKeyRef") != nil:
				ref := get(e, "valueFrom", "secretKeyRef")
				v, ok := k.data(t, "Secret", str(ref, "name"))[str(ref, "key")]
				if !ok {
					t.Fatalf("env %s: Secret %s has no key %q", name, str(ref, "name"), str(ref, "key"))
				}
				env[name] = v
			case get(e, "valueFrom", "configMapKeyRef") != nil:
				ref := get(e, "valueFrom", "configMapKeyRef")
				v, ok := k.data(t, "ConfigMap", str(ref, "name"))[str(ref, "key")]
				if !ok {
					t.Fatalf("env %s: ConfigMap %s has no key %q", name, str(ref, "name"), str(ref, "key"))
				}
				env[name] = v
			default:
				env[name] = str(e, "value")
			}
		}
		return env
	}

	mounts, writable := mountFiles(wc)
	run := configRun{env: envOf(wc)}
	checkEnvNames(t, run.env)
	for _, a := range strs(wc, "args") {
		run.args = append(run.args, rewrite(a, mounts))
	}
	cfg := run.load(t)
	def := defaults(t)

	// Ports and probes.
	httpPort := 0
	for _, p := range list(wc, "ports") {
		if str(p, "name") == "http" {
			httpPort = get(p, "containerPort").(int)
		}
	}
	if httpPort != port(t, def.HTTP.Addr) || port(t, cfg.HTTP.Addr) != httpPort {
		t.Errorf("http containerPort %d, --http-addr %s, default %s: want one port", httpPort, cfg.HTTP.Addr, def.HTTP.Addr)
	}
	if port(t, cfg.GRPC.Addr) != port(t, def.GRPC.Addr) {
		t.Errorf("--grpc-addr %s, default %s: want the default port", cfg.GRPC.Addr, def.GRPC.Addr)
	}
	// A listener on the pod's address carries API tokens over the cluster
	// network: it must serve TLS, and the probes and scrapes speak HTTPS.
	if host, _, _ := net.SplitHostPort(cfg.HTTP.Addr); host != "127.0.0.1" && host != "localhost" && host != "::1" && cfg.TLS.Cert == "" {
		t.Errorf("--http-addr %s is reachable from the network without TLS", cfg.HTTP.Addr)
	}
	tlsOn := cfg.TLS.Cert != ""
	if tlsOn && str(get(dep, "spec", "template", "metadata", "annotations"), "prometheus.io/scheme") != "https" {
		t.Error("REST serves TLS but Prometheus is not told to scrape https")
	}
	// The Go runtime must know the container's memory limit.
	if lim := run.env["GOMEMLIMIT"]; lim == "" {
		t.Error("no GOMEMLIMIT: the Go heap grows to the container's limit and the process is killed")
	} else if n, err := parseMiB(lim); err != nil || n >= 256 {
		t.Errorf("GOMEMLIMIT %q, want a size under the 256Mi limit", lim)
	}
	// Loads are spooled: the spool directory must be writable with a
	// read-only root filesystem.
	if cfg.Loads.SpoolDir == "" {
		t.Error("no --spool-dir, yet the root filesystem is read-only and loads spool to disk")
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/readyz"} {
		if got := str(wc, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %q, want %s", probe, got, path)
		}
		if tlsOn && str(wc, probe, "httpGet", "scheme") != "HTTPS" {
			t.Errorf("%s: REST serves TLS, want scheme HTTPS", probe)
		}
		if p := get(wc, probe, "httpGet", "port"); p != "http" && p != httpPort {
			t.Errorf("%s port %v, want the http port", probe, p)
		}
	}
	ann := get(dep, "spec", "template", "metadata", "annotations")
	if str(ann, "prometheus.io/port") != strconv.Itoa(httpPort) || str(ann, "prometheus.io/path") != "/metrics" {
		t.Errorf("prometheus annotations %v, want port %d and /metrics", ann, httpPort)
	}

	// Sockets on a shared, writable volume that the application mounts too.
	appMounts := map[string]bool{}
	for _, m := range list(cs["app"], "volumeMounts") {
		appMounts[str(m, "mountPath")] = true
	}
	for _, dir := range []string{cfg.Loads.SpoolDir} {
		ok := false
		for p, real := range mounts {
			if (dir == real || strings.HasPrefix(dir, real+"/")) && writable[p] {
				ok = true
			}
		}
		if dir != "" && !ok {
			t.Errorf("--spool-dir %s is not on a writable volume", dir)
		}
	}
	for _, sock := range []string{cfg.HTTP.Socket, cfg.GRPC.Socket} {
		var dir string
		for p, real := range mounts {
			if strings.HasPrefix(sock, real+"/") && writable[p] {
				dir = p
			}
		}
		if dir == "" || !appMounts[dir] {
			t.Errorf("socket %s is not on a writable volume that the app mounts", sock)
		}
	}

	// Keys: the application's token passes with write scope.
	if len(cfg.Access.Keys) == 0 {
		t.Fatal("no API keys, yet REST listens on the pod's address")
	}
	appEnv := envOf(cs["app"])
	checkToken(t, cfg.Access.Keys, appEnv["CACHE_TOKEN"], cfg.Namespaces[0].Name)

	// PgBouncer: transaction pooling on the address the DSN names.
	pgbMounts, _ := mountFiles(cs["pgbouncer"])
	pgbArgs := strs(cs["pgbouncer"], "args")
	ini := readINI(t, rewrite(pgbArgs[len(pgbArgs)-1], pgbMounts))
	checkPgBouncer(t, ini, cfg, "127.0.0.1")
	if _, ok := pgbMounts[ini["auth_file"]]; !ok {
		t.Errorf("auth_file %s is not mounted", ini["auth_file"])
	}
}

// checkToken checks that token authenticates against keys with read and
// write scope on namespace.
func checkToken(t *testing.T, keys []auth.Key, token, namespace string) {
	t.Helper()
	kr, err := auth.NewKeyring(keys, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := kr.Authenticate(token)
	if err != nil {
		t.Fatalf("the application's token does not authenticate: %v", err)
	}
	if err := p.Authorize(namespace, auth.ScopeRead|auth.ScopeWrite); err != nil {
		t.Fatalf("the application's key: %v", err)
	}
}

func readINI(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == ';' || line[0] == '#':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		case section == "pgbouncer":
			k, v, _ := strings.Cut(line, "=")
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

func checkPgBouncer(t *testing.T, ini map[string]string, cfg config.Config, host string) {
	t.Helper()
	if ini["pool_mode"] != "transaction" {
		t.Errorf("pool_mode %q, want transaction", ini["pool_mode"])
	}
	if cfg.Postgres.Pooler != "pgbouncer" {
		t.Errorf("--pg-pooler %q, want pgbouncer", cfg.Postgres.Pooler)
	}
	u, err := url.Parse(cfg.Postgres.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() != ini["listen_port"] || u.Hostname() != host {
		t.Errorf("DSN reaches %s, PgBouncer listens on %s:%s", u.Host, host, ini["listen_port"])
	}
	if ini["ignore_startup_parameters"] != "extra_float_digits" {
		t.Errorf("ignore_startup_parameters %q: pgx sends extra_float_digits", ini["ignore_startup_parameters"])
	}
}

func TestCompose(t *testing.T) {
	doc := readYAML(t, "compose.yaml")[0]
	svcs, _ := get(doc, "services").(map[string]any)
	for _, name := range []string{"postgres", "redis", "pgbouncer", "warmcache", "app"} {
		if svcs[name] == nil {
			t.Fatalf("compose.yaml has no %s service", name)
		}
	}
	wc := svcs["warmcache"]
	built := false
	for _, s := range svcs {
		if str(s, "build", "dockerfile") == "deploy/Dockerfile" && str(s, "build", "context") == ".." && str(s, "image") == str(wc, "image") {
			built = true
		}
	}
	if !built {
		t.Errorf("no service builds image %q from deploy/Dockerfile", str(wc, "image"))
	}
	if get(wc, "read_only") != true {
		t.Error("warmcache's root filesystem is not read-only")
	}
	if uid, _, _ := strings.Cut(str(wc, "user"), ":"); uid == "" || uid == "0" {
		t.Errorf("warmcache runs as %q, want a non-root user", str(wc, "user"))
	}

	mounts := map[string]string{}
	for _, v := range strs(wc, "volumes") {
		parts := strings.Split(v, ":")
		if _, err := os.Stat(parts[0]); err != nil {
			t.Fatalf("volume %s: %v", v, err)
		}
		mounts[parts[1]] = parts[0]
	}
	run := configRun{env: map[string]string{}}
	for k, v := range get(wc, "environment").(map[string]any) {
		run.env[k] = v.(string)
	}
	checkEnvNames(t, run.env)
	for _, a := range strs(wc, "command") {
		run.args = append(run.args, rewrite(a, mounts))
	}
	cfg := run.load(t)

	published := map[int]int{}
	for _, p := range strs(wc, "ports") {
		parts := strings.Split(p, ":")
		host, _ := strconv.Atoi(parts[len(parts)-2])
		container, _ := strconv.Atoi(parts[len(parts)-1])
		published[container] = host
	}
	def := defaults(t)
	for _, addr := range []struct{ got, def string }{{cfg.HTTP.Addr, def.HTTP.Addr}, {cfg.GRPC.Addr, def.GRPC.Addr}} {
		p := port(t, addr.got)
		if p != port(t, addr.def) || published[p] != p {
			t.Errorf("listens on %s (default %s), publishes %v: want the default ports, published as they are", addr.got, addr.def, published)
		}
	}

	ini := readINI(t, "pgbouncer/pgbouncer.ini")
	checkPgBouncer(t, ini, cfg, "pgbouncer")
	var pgbMounts []string
	for _, v := range strs(svcs["pgbouncer"], "volumes") {
		pgbMounts = append(pgbMounts, strings.Split(v, ":")[1])
	}
	if !slices.Contains(pgbMounts, ini["auth_file"]) {
		t.Errorf("auth_file %s is not mounted into pgbouncer (%v)", ini["auth_file"], pgbMounts)
	}

	appEnv := map[string]string{}
	for k, v := range get(svcs["app"], "environment").(map[string]any) {
		appEnv[k] = v.(string)
	}
	checkToken(t, cfg.Access.Keys, appEnv["WARMCACHE_TOKEN"], "widgets")
	if u, err := url.Parse(appEnv["WARMCACHE_URL"]); err != nil || u.Hostname() != "warmcache" || u.Port() != strconv.Itoa(port(t, cfg.HTTP.Addr)) {
		t.Errorf("the app calls %q, want warmcache on its HTTP port", appEnv["WARMCACHE_URL"])
	}

	// The demo tokens written next to the keys are the keys' tokens.
	b, err := os.ReadFile("compose/keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tokens := regexp.MustCompile(`# token: (\S+)`).FindAllStringSubmatch(string(b), -1)
	if len(tokens) != len(cfg.Access.Keys) {
		t.Fatalf("%d demo tokens for %d keys", len(tokens), len(cfg.Access.Keys))
	}
	kr, err := auth.NewKeyring(cfg.Access.Keys, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		if _, err := kr.Authenticate(tok[1]); err != nil {
			t.Errorf("demo token %q: %v", tok[1], err)
		}
	}
}

func TestPrometheus(t *testing.T) {
	def := defaults(t)
	httpPort := strconv.Itoa(port(t, def.HTTP.Addr))
	compose := readYAML(t, "prometheus/prometheus.yml")[0]
	job := get(compose, "scrape_configs", 0)
	if str(job, "metrics_path") != "/metrics" || !slices.Contains(strs(job, "static_configs", 0, "targets"), "warmcache:"+httpPort) {
		t.Errorf("compose scrape job %v, want warmcache:%s/metrics", job, httpPort)
	}
	kube := readYAML(t, "prometheus/kubernetes-scrape.yml")[0]
	job = get(kube, "scrape_configs", 0)
	keeps := false
	for _, r := range list(job, "relabel_configs") {
		if str(r, "action") == "keep" && slices.Contains(strs(r, "source_labels"), "__meta_kubernetes_pod_annotation_prometheus_io_scrape") {
			keeps = true
		}
	}
	if !keeps || str(job, "kubernetes_sd_configs", 0, "role") != "pod" {
		t.Errorf("kubernetes scrape job %v, want pod discovery keeping annotated pods", job)
	}
}

// metricNames returns the warmcache_ names that the service's code declares:
// the string literals of its non-test Go files.
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	metric := regexp.MustCompile(`^"warmcache_[a-z0-9_]+"$`)
	err := filepath.WalkDir("../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && metric.MatchString(lit.Value) {
				names[strings.Trim(lit.Value, `"`)] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/warmcache.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	known := metricNames(t)
	used := regexp.MustCompile(`warmcache_[a-z0-9_]+`)
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, strings.ToLower(p.Title))
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range used.FindAllString(tg.Expr, -1) {
				base := name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if trimmed, ok := strings.CutSuffix(name, suffix); ok && known[trimmed] {
						base = trimmed
					}
				}
				if !known[base] {
					t.Errorf("panel %q queries %s, which the service does not export", p.Title, name)
				}
			}
		}
	}
	all := strings.Join(titles, "|")
	for _, want := range []string{"hit ratio per tier", "latency", "warehouse queries", "error"} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel about %q among %q", want, titles)
		}
	}
}

// parseMiB reads a GOMEMLIMIT such as 200MiB as mebibytes.
func parseMiB(v string) (int64, error) {
	for suffix, mul := range map[string]float64{"GiB": 1024, "MiB": 1, "KiB": 1.0 / 1024} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			return int64(f * mul), err
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n >> 20, err
}
