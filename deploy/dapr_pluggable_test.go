package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warmcache/warmcache/internal/config"
	"github.com/warmcache/warmcache/internal/warmcache"
)

// TestDaprPluggable checks deploy/dapr: the component YAMLs name the type
// of warmcache's socket and a component that warmcache serves, on a
// text-keyed, bytes, writable namespace; in Kubernetes the annotation
// names warmcache's container, which is a regular container that declares
// no socket volume of its own (the injector adds it), and the ConfigMap
// holds deploy/dapr/namespaces.yaml.
func TestDaprPluggable(t *testing.T) {
	dir := filepath.Join("dapr", "kubernetes")
	objs := map[string]map[string]any{}
	for _, res := range strs(readYAML(t, filepath.Join(dir, "kustomization.yaml"))[0], "resources") {
		for _, d := range readYAML(t, filepath.Join(dir, res)) {
			objs[str(d, "kind")+"/"+str(d, "metadata", "name")] = d
		}
	}
	local, err := os.ReadFile(filepath.Join("dapr", "namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inCluster := str(objs["ConfigMap/warmcache-dapr-state-namespaces"], "data", "namespaces.yaml")
	if want := string(local[strings.Index(string(local), "namespaces:"):]); inCluster != want {
		t.Errorf("the ConfigMap's namespaces.yaml differs from deploy/dapr/namespaces.yaml:\n%s\nwant:\n%s", inCluster, want)
	}

	dep := objs["Deployment/orders"]
	tmpl := get(dep, "spec", "template")
	ann := func(k string) string { return str(tmpl, "metadata", "annotations", k) }
	if ann("dapr.io/enabled") != "true" || ann("dapr.io/app-id") == "" {
		t.Errorf("the pod is not a Dapr application: annotations %v", get(tmpl, "metadata", "annotations"))
	}
	var wc any
	for _, c := range list(tmpl, "spec", "containers") {
		if str(c, "name") == ann("dapr.io/pluggable-components") {
			wc = c
		}
	}
	if wc == nil || !slices.Contains(strs(wc, "args"), "serve") {
		t.Fatalf("dapr.io/pluggable-components %q names no container of the pod that runs warmcache serve", ann("dapr.io/pluggable-components"))
	}
	for _, v := range list(tmpl, "spec", "volumes") {
		if strings.HasPrefix(str(v, "name"), "dapr-") {
			t.Errorf("volume %s is declared: Dapr's injector adds its own socket volumes", str(v, "name"))
		}
	}

	// warmcache's configuration, with the variable the injector sets.
	folder := ann("dapr.io/pluggable-components-sockets-folder")
	file := filepath.Join(t.TempDir(), "namespaces.yaml")
	if err := os.WriteFile(file, local, 0o600); err != nil {
		t.Fatal(err)
	}
	run := configRun{env: map[string]string{"DAPR_COMPONENT_SOCKETS_FOLDER": folder}}
	for _, e := range list(wc, "env") {
		run.env[str(e, "name")] = str(e, "value")
	}
	checkEnvNames(t, run.env)
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	base := readYAML(t, filepath.Join("kubernetes", "secret.yaml"))[0]
	// The base's keys.yaml holds a placeholder that must be replaced by a
	// hash; any hash does here.
	keysDoc := regexp.MustCompile(`REPLACE\S*`).ReplaceAllString(str(base, "stringData", "keys.yaml"), strings.Repeat("ab", 32))
	if err := os.WriteFile(keys, []byte(keysDoc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, a := range strs(wc, "args") {
		a = strings.Replace(a, "/etc/warmcache/config/namespaces.yaml", file, 1)
		run.args = append(run.args, strings.Replace(a, "/etc/warmcache/keys/keys.yaml", keys, 1))
	}
	cfg := run.load(t)
	if got := filepath.Dir(cfg.Dapr.SocketPath()); got != folder {
		t.Errorf("warmcache listens in %s, the injector's folder is %q", got, folder)
	}

	for _, path := range []string{filepath.Join("dapr", "components", "statestore.yaml"), filepath.Join(dir, "component.yaml")} {
		comp := readYAML(t, path)[0]
		if str(comp, "kind") != "Component" || str(comp, "spec", "type") != "state."+cfg.Dapr.SocketName {
			t.Errorf("%s: a %s of type %s; want a Component of type state.%s", path, str(comp, "kind"), str(comp, "spec", "type"), cfg.Dapr.SocketName)
		}
		name := str(comp, "metadata", "name")
		i := slices.IndexFunc(cfg.Dapr.Components, func(c config.DaprComponent) bool { return c.Name == name })
		if i < 0 {
			t.Errorf("%s: component %s is not among warmcache's --dapr-components %v", path, name, cfg.Dapr.Components)
			continue
		}
		namespace := cfg.Dapr.Components[i].Namespace
		for _, m := range list(comp, "spec", "metadata") {
			if str(m, "name") == "namespace" && str(m, "value") != namespace {
				t.Errorf("%s: metadata namespace %s; warmcache serves %s from %s", path, str(m, "value"), name, namespace)
			}
		}
		ns := slices.IndexFunc(cfg.Namespaces, func(n *warmcache.Namespace) bool { return n.Name == namespace })
		if ns < 0 {
			t.Fatalf("namespace %s is not declared", namespace)
		}
		if n := cfg.Namespaces[ns]; n.KeyType != warmcache.KeyText || n.Layout != warmcache.LayoutBytes || !n.Writable {
			t.Errorf("namespace %s: keys %s, layout %s, writable %v; want text keys, the bytes layout, writable", n.Name, n.KeyType, n.Layout, n.Writable)
		}
	}
}
