package deploy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/auth"
	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestKubernetesDaprApp checks deploy/kubernetes/dapr-app: warmcache's
// command line loads, its Dapr listeners are on the pod's loopback where
// the application's Dapr SDK variables point, the store the application
// uses is a writable text-keyed namespace, and the application's token is
// a key allowed on it.
func TestKubernetesDaprApp(t *testing.T) {
	dir := filepath.Join("kubernetes", "dapr-app")
	objs := map[string]map[string]any{}
	for _, res := range strs(readYAML(t, filepath.Join(dir, "kustomization.yaml"))[0], "resources") {
		for _, d := range readYAML(t, filepath.Join(dir, res)) {
			objs[str(d, "kind")+"/"+str(d, "metadata", "name")] = d
		}
	}
	data := func(kind, name, key string) string {
		t.Helper()
		obj := objs[kind+"/"+name]
		for _, field := range []string{"data", "stringData"} {
			if v := str(obj, field, key); v != "" {
				return v
			}
		}
		t.Fatalf("%s %s has no key %q", kind, name, key)
		return ""
	}
	dep := objs["Deployment/orders-dapr"]
	if dep == nil {
		t.Fatal("no Deployment orders-dapr")
	}
	cs := containers(get(dep, "spec", "template", "spec"))
	wc, app := cs["warmcache"], cs["app"]
	if wc == nil || app == nil || cs["pgbouncer"] == nil {
		t.Fatalf("containers %v, want app, warmcache and pgbouncer", cs)
	}

	tmp := t.TempDir()
	files := map[string]string{
		"/etc/warmcache/config/namespaces.yaml": data("ConfigMap", "warmcache-dapr-namespaces", "namespaces.yaml"),
		"/etc/warmcache/keys/keys.yaml":         data("Secret", "warmcache-dapr-keys", "keys.yaml"),
	}
	run := configRun{env: map[string]string{}}
	for _, e := range list(wc, "env") {
		run.env[str(e, "name")] = str(e, "value")
	}
	checkEnvNames(t, run.env)
	for _, a := range strs(wc, "args") {
		for path, content := range files {
			if strings.HasSuffix(a, "="+path) {
				local := filepath.Join(tmp, filepath.Base(path))
				if err := os.WriteFile(local, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				a = strings.TrimSuffix(a, path) + local
			}
		}
		run.args = append(run.args, a)
	}
	cfg := run.load(t)

	appEnv := map[string]string{}
	for _, e := range list(app, "env") {
		appEnv[str(e, "name")] = str(e, "value")
		if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
			appEnv[str(e, "name")] = data("Secret", str(ref, "name"), str(ref, "key"))
		}
	}
	if cfg.Dapr.GRPCAddr == "" || appEnv["DAPR_GRPC_ENDPOINT"] != cfg.Dapr.GRPCAddr {
		t.Errorf("DAPR_GRPC_ENDPOINT %q, warmcache's --dapr-grpc-addr %q", appEnv["DAPR_GRPC_ENDPOINT"], cfg.Dapr.GRPCAddr)
	}
	if cfg.Dapr.HTTPAddr == "" || appEnv["DAPR_HTTP_ENDPOINT"] != "http://"+cfg.Dapr.HTTPAddr {
		t.Errorf("DAPR_HTTP_ENDPOINT %q, warmcache's --dapr-http-addr %q", appEnv["DAPR_HTTP_ENDPOINT"], cfg.Dapr.HTTPAddr)
	}
	for _, addr := range []string{cfg.Dapr.GRPCAddr, cfg.Dapr.HTTPAddr} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("Dapr listener %q is not on the pod's loopback", addr)
		}
	}

	var store *warmcache.Namespace
	for _, ns := range cfg.Namespaces {
		if ns.Name == "statestore" {
			store = ns
		}
	}
	if store == nil || store.KeyType != warmcache.KeyText || !store.Writable {
		t.Fatalf("namespace statestore = %+v, want a writable text-keyed namespace", store)
	}
	keys, err := config.ParseKeys([]byte(files["/etc/warmcache/keys/keys.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(appEnv["DAPR_API_TOKEN"]))
	found := false
	for _, k := range keys {
		if hex.EncodeToString(k.Hash[:]) == hex.EncodeToString(sum[:]) && k.Allows("statestore", auth.ScopeRead|auth.ScopeWrite) {
			found = true
		}
	}
	if !found {
		t.Error("DAPR_API_TOKEN is not a key with read and write on statestore")
	}
}
