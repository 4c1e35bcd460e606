// Package deploy_test checks the deployment files: the Kubernetes manifests
// (deploy/k8s, rendered with kustomize and validated by kubeconform, offline,
// against the Kubernetes API schemas vendored in deploy/k8s/schemas) and
// docker-compose.yml.
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/inboxhq/inbox/internal/config"
	"github.com/inboxhq/inbox/internal/pgtest"
)

// kubeVersion is the Kubernetes version the manifests are validated
// against: the oldest one they support (the preStop sleep action is 1.30's).
// deploy/k8s/schemas/v<kubeVersion>-standalone-strict holds its schemas,
// written by deploy/k8s/schemas/generate from Kubernetes' OpenAPI documents.
const kubeVersion = "1.30.0"

// kustomizations are the directories rendered and validated.
var kustomizations = []string{"k8s/base", "k8s/overlays/example"}

// tool finds name, or skips (fails under CI) with how to install it.
func tool(t *testing.T, name string) string {
	t.Helper()
	return pgtest.Tool(t, name, "run scripts/ensure-tools (make tools) to check the Kubernetes manifests")
}

// render runs kustomize build on dir (relative to deploy/).
func render(t *testing.T, dir string) []byte {
	t.Helper()
	bin := tool(t, "kustomize")
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "kustomize build %s:\n%s", dir, stderr.String())
	return out
}

// kubeconform validates file against the vendored schemas of kubeVersion,
// strictly (an unknown field or a duplicate key is an error), with no
// network: a kind without a schema there is an error too.
func kubeconform(t *testing.T, file string) ([]byte, error) {
	t.Helper()
	bin := tool(t, "kubeconform")
	return exec.Command(bin, "-strict", "-summary", "-kubernetes-version", kubeVersion,
		"-schema-location", "k8s/schemas", file).CombinedOutput()
}

// TestKubernetesManifestsValidate renders each kustomization and validates
// every object against the Kubernetes API's schemas of kubeVersion.
func TestKubernetesManifestsValidate(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations {
		f := filepath.Join(t.TempDir(), strings.ReplaceAll(dir, "/", "_")+".yaml")
		require.NoError(t, os.WriteFile(f, render(t, dir), 0o600))
		out, err := kubeconform(t, f)
		require.NoError(t, err, "kubeconform %s (rendered from deploy/%s):\n%s\n"+
			"(a kind with no schema: add it to deploy/k8s/schemas/generate's list and regenerate)", f, dir, out)
		require.Regexp(t, `Valid: [1-9][0-9]*, Invalid: 0, Errors: 0, Skipped: 0`, string(out))
	}
}

// TestKubernetesValidatorRejects: the validator run above does fail on a
// manifest the API server would reject (an unknown field, a string where an
// integer goes, a field of a later Kubernetes, a missing required field, a
// duplicate key, a kind with no schema), so its passing means something.
func TestKubernetesValidatorRejects(t *testing.T) {
	t.Parallel()
	deployment := func(container string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {a: b}}\n" +
			"  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [" + container + "]}\n"
	}
	for _, c := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {maxUnavailable: 1, selector: {}, bogus: 1}\n",
			"at '/spec': additional properties 'bogus' not allowed"},
		{"string for an integer", strings.Replace(deployment("{name: c, image: i}"), "spec:\n", "spec:\n  replicas: two\n", 1),
			"at '/spec/replicas': got string, want integer"},
		// 1.33's lifecycle.stopSignal, later than kubeVersion.
		{"later Kubernetes", deployment("{name: c, image: i, lifecycle: {stopSignal: SIGTERM}}"),
			"at '/spec/template/spec/containers/0/lifecycle': additional properties 'stopSignal' not allowed"},
		{"missing required", deployment("{image: i}"), "at '/spec/template/spec/containers/0': missing property 'name'"},
		{"int-or-string", "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec: {maxUnavailable: true, selector: {}}\n",
			"at '/spec/maxUnavailable'"},
		{"duplicate key", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x, name: y}\n", "already set in map"},
		{"no schema", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\n", "could not find schema for StatefulSet"},
	} {
		f := filepath.Join(t.TempDir(), "bad.yaml")
		require.NoError(t, os.WriteFile(f, []byte(c.doc), 0o600))
		out, err := kubeconform(t, f)
		require.Error(t, err, "%s: kubeconform accepted:\n%s\n%s", c.name, c.doc, out)
		require.Contains(t, string(out), c.want, "%s: kubeconform rejected it for another reason", c.name)
	}
}

// object is the part of a Kubernetes object these tests read.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		// Deployment, Job
		Template podTemplate `yaml:"template"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		// Service
		Type          string            `yaml:"type"`
		ServiceSelect map[string]string `yaml:"-"`
		Ports         []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
			NodePort   int    `yaml:"nodePort"`
		} `yaml:"ports"`
		// HorizontalPodAutoscaler
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas int `yaml:"minReplicas"`
		MaxReplicas int `yaml:"maxReplicas"`
		// Ingress
		Rules []struct {
			HTTP struct {
				Paths []struct {
					Backend struct {
						Service struct {
							Name string `yaml:"name"`
							Port struct {
								Name   string `yaml:"name"`
								Number int    `yaml:"number"`
							} `yaml:"port"`
						} `yaml:"service"`
					} `yaml:"backend"`
				} `yaml:"paths"`
			} `yaml:"http"`
		} `yaml:"rules"`
	} `yaml:"spec"`
	raw map[string]any
}

type podTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		InitContainers []container `yaml:"initContainers"`
		Containers     []container `yaml:"containers"`
		Volumes        []struct {
			Name      string `yaml:"name"`
			ConfigMap struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
			ConfigMapKeyRef *struct{} `yaml:"configMapKeyRef"`
			FieldRef        *struct{} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		SecretRef    *struct{ Name string } `yaml:"secretRef"`
		ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

func (c container) env(name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func (c container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// objects renders dir and decodes its objects, keyed "Kind/name".
func objects(t *testing.T, dir string) map[string]*object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(render(t, dir)))
	objs := map[string]*object{}
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		o := &object{}
		require.NoError(t, n.Decode(o))
		require.NoError(t, n.Decode(&o.raw))
		if o.Kind == "Service" {
			var s struct {
				Spec struct {
					Selector map[string]string `yaml:"selector"`
				} `yaml:"spec"`
			}
			require.NoError(t, n.Decode(&s))
			o.Spec.ServiceSelect = s.Spec.Selector
		}
		key := o.Kind + "/" + o.Metadata.Name
		require.NotContains(t, objs, key, "deploy/%s renders %s twice", dir, key)
		objs[key] = o
	}
	return objs
}

func get(t *testing.T, objs map[string]*object, key string) *object {
	t.Helper()
	o, ok := objs[key]
	require.True(t, ok, "no %s among %v", key, keys(objs))
	return o
}

func keys(objs map[string]*object) []string {
	var ks []string
	for k := range objs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func only(t *testing.T, cs []container, name string) container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return container{}
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// secretName reports whether an environment variable's name says it holds a
// secret (or a URL that carries a password).
var secretName = regexp.MustCompile(`(?i)(SECRET|PASSWORD|PASS$|TOKEN|KEY$|DATABASE_URL)`)

// TestKubernetesManifestsShape checks what the schemas cannot: the
// properties docs/operations.md promises of the Kubernetes deployment.
func TestKubernetesManifestsShape(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			t.Parallel()
			objs := objects(t, dir)
			ingestDep := get(t, objs, "Deployment/inbox-ingest")
			workerDep := get(t, objs, "Deployment/inbox-worker")
			job := get(t, objs, "Job/inbox-migrate")

			ingest := only(t, ingestDep.Spec.Template.Spec.Containers, "ingest")
			worker := only(t, workerDep.Spec.Template.Spec.Containers, "worker")
			migrate := only(t, job.Spec.Template.Spec.Containers, "migrate")
			require.Equal(t, []string{"ingest"}, ingest.Command)
			// `worker run` explicitly: bare `worker` is not promised to process.
			require.Equal(t, []string{"worker", "run"}, worker.Command)
			require.Equal(t, []string{"worker", "migrate"}, migrate.Command)
			require.Equal(t, ingest.Image, worker.Image, "one image for every binary")
			require.Equal(t, ingest.Image, migrate.Image)

			// The migrations run before either starts: the Job, and in every
			// pod an init container running the same idempotent worker migrate
			// of the pod's own image (it applies nothing once the Job has, and
			// waits on goose's advisory lock while the Job runs).
			for _, d := range []*object{ingestDep, workerDep} {
				init := only(t, d.Spec.Template.Spec.InitContainers, "migrate")
				main := d.Spec.Template.Spec.Containers[0]
				require.Equal(t, []string{"worker", "migrate"}, init.Command, d.Metadata.Name)
				require.Equal(t, main.Image, init.Image, "%s: the init container migrates to the schema of the pod's own image", d.Metadata.Name)
				require.Len(t, d.Spec.Template.Spec.InitContainers, 1, d.Metadata.Name)
			}

			// Probes on the admin listener, which listens on the pod's
			// address at the port the container declares.
			for _, c := range []struct {
				c    container
				addr string
			}{{ingest, "INGEST_ADMIN_ADDR"}, {worker, "WORKER_ADMIN_ADDR"}} {
				require.NotNil(t, c.c.ReadinessProbe, c.c.Name)
				require.NotNil(t, c.c.LivenessProbe, c.c.Name)
				require.NotNil(t, c.c.ReadinessProbe.HTTPGet, c.c.Name)
				require.NotNil(t, c.c.LivenessProbe.HTTPGet, c.c.Name)
				require.Equal(t, "/readyz", c.c.ReadinessProbe.HTTPGet.Path, c.c.Name)
				// Liveness must not depend on the database: an outage would
				// restart every pod.
				require.Equal(t, "/healthz", c.c.LivenessProbe.HTTPGet.Path, c.c.Name)
				require.Equal(t, "admin", c.c.ReadinessProbe.HTTPGet.Port, c.c.Name)
				require.Equal(t, "admin", c.c.LivenessProbe.HTTPGet.Port, c.c.Name)
				addr, ok := c.c.env(c.addr)
				require.True(t, ok, "%s: %s unset (the default is loopback, which the kubelet cannot probe)", c.c.Name, c.addr)
				host, port, err := net.SplitHostPort(addr)
				require.NoError(t, err)
				require.NotEqual(t, "127.0.0.1", host, c.c.Name)
				require.Equal(t, port, fmt.Sprint(c.c.port("admin")), "%s: %s and the admin containerPort", c.c.Name, c.addr)
			}
			ingestAdmin := ingest.port("admin")
			workerAdmin := worker.port("admin")
			require.NotZero(t, ingest.port("http"))

			// HorizontalPodAutoscaler on ingest; PodDisruptionBudgets whose
			// selectors pick each Deployment's pods.
			hpa := get(t, objs, "HorizontalPodAutoscaler/inbox-ingest")
			require.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
			require.Equal(t, "inbox-ingest", hpa.Spec.ScaleTargetRef.Name)
			require.GreaterOrEqual(t, hpa.Spec.MinReplicas, 2, "one ingest is a single point of failure")
			require.Greater(t, hpa.Spec.MaxReplicas, hpa.Spec.MinReplicas)
			for _, d := range []*object{ingestDep, workerDep} {
				labels := d.Spec.Template.Metadata.Labels
				require.True(t, subset(d.Spec.Selector.MatchLabels, labels), d.Metadata.Name)
				n := 0
				for _, o := range objs {
					if o.Kind == "PodDisruptionBudget" && subset(o.Spec.Selector.MatchLabels, labels) {
						n++
					}
				}
				require.Equal(t, 1, n, "%s: PodDisruptionBudgets selecting its pods", d.Metadata.Name)
			}

			// The admin listener is never exposed: no Service other than
			// ClusterIP at all, none that selects a pod and reaches its admin
			// port except the in-cluster *-admin ones, and no Ingress to those.
			adminServices := map[string]bool{}
			for _, o := range objs {
				if o.Kind != "Service" {
					continue
				}
				require.Contains(t, []string{"", "ClusterIP"}, o.Spec.Type, "%s: only ClusterIP Services (publish ingest's http port with an Ingress or Gateway)", o.Metadata.Name)
				for _, p := range o.Spec.Ports {
					require.Zero(t, p.NodePort, o.Metadata.Name)
					admin := p.TargetPort == "admin" || p.TargetPort == ingestAdmin || p.TargetPort == workerAdmin ||
						p.TargetPort == nil && (p.Port == ingestAdmin || p.Port == workerAdmin)
					if admin {
						adminServices[o.Metadata.Name] = true
						require.True(t, strings.HasSuffix(o.Metadata.Name, "-admin"), "%s exposes an admin port next to other ports", o.Metadata.Name)
					}
				}
				if strings.HasSuffix(o.Metadata.Name, "-admin") {
					require.True(t, adminServices[o.Metadata.Name], o.Metadata.Name)
				}
			}
			require.NotEmpty(t, adminServices, "Prometheus needs the admin Services")
			for _, o := range objs {
				if o.Kind == "Ingress" {
					for _, r := range o.Spec.Rules {
						for _, p := range r.HTTP.Paths {
							require.False(t, adminServices[p.Backend.Service.Name], "Ingress %s routes to %s", o.Metadata.Name, p.Backend.Service.Name)
						}
					}
				}
			}
			svc := get(t, objs, "Service/inbox-ingest")
			require.True(t, subset(svc.Spec.ServiceSelect, ingestDep.Spec.Template.Metadata.Labels))

			// Secrets come from Secret objects: a secret-looking variable only
			// from a secretKeyRef, envFrom only from a Secret, no literal
			// value carrying a password, and no Secret object rendered (the
			// manifests never hold secrets).
			for _, o := range objs {
				require.NotEqual(t, "Secret", o.Kind, "%s: the manifests must not carry secrets", o.Metadata.Name)
				if o.Kind == "ConfigMap" {
					for k, v := range o.Data {
						require.NotRegexp(t, `whsec_[A-Za-z0-9+/=]{8,}|://[^/@\s]*:[^/@\s]*@`, v, "ConfigMap %s key %s holds a secret", o.Metadata.Name, k)
					}
				}
			}
			var all []container
			for _, o := range []*object{ingestDep, workerDep, job} {
				all = append(all, o.Spec.Template.Spec.InitContainers...)
				all = append(all, o.Spec.Template.Spec.Containers...)
			}
			for _, c := range all {
				_, hasURL := c.env("DATABASE_URL")
				require.True(t, hasURL, "%s: DATABASE_URL", c.Name)
				for _, e := range c.Env {
					require.NotRegexp(t, `://[^/@\s]*:[^/@\s]*@`, e.Value, "%s: %s carries a password", c.Name, e.Name)
					if secretName.MatchString(e.Name) {
						require.True(t, e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil, "%s: %s must come from a secretKeyRef", c.Name, e.Name)
					}
				}
				for _, ef := range c.EnvFrom {
					require.NotNil(t, ef.SecretRef, "%s: envFrom only from a Secret", c.Name)
				}
			}
			// Least privilege: the migrate credential (DDL) only in migrate
			// containers; ingest and worker each their own.
			ref := func(c container) string {
				for _, e := range c.Env {
					if e.Name == "DATABASE_URL" {
						return e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
					}
				}
				return ""
			}
			require.NotEqual(t, ref(ingest), ref(worker))
			require.NotEqual(t, ref(ingest), ref(migrate))
			require.NotEqual(t, ref(worker), ref(migrate))
			for _, c := range all {
				if c.Name != "migrate" {
					require.NotEqual(t, ref(migrate), ref(c), "%s has the migrate credential", c.Name)
				}
			}

			// The sources file the pods mount is a valid one (the overlay's).
			for _, d := range []*object{ingestDep, workerDep} {
				var cm string
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.ConfigMap.Name != "" {
						cm = v.ConfigMap.Name
					}
				}
				require.NotEmpty(t, cm, "%s mounts no sources ConfigMap", d.Metadata.Name)
				if dir == "k8s/base" {
					continue // the base leaves the ConfigMap to the overlay
				}
				o := get(t, objs, "ConfigMap/"+cm)
				src, ok := o.Data["sources.yaml"]
				require.True(t, ok, "ConfigMap %s has no sources.yaml", cm)
				f := filepath.Join(t.TempDir(), "sources.yaml")
				require.NoError(t, os.WriteFile(f, []byte(src), 0o600))
				_, err := config.Load(f, func(string) string { return "whsec_dGVzdC1zZWNyZXQtZm9yLXRoZS1sb2Fk" })
				require.NoError(t, err, "the sources file of ConfigMap %s", cm)
			}
		})
	}
}
