package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inboxhq/inbox/internal/pgtest"
)

// openapiModule is where the OpenAPI documents the vendored schemas were
// generated from come from (the package comment's command).
const openapiModule = "sigs.k8s.io/kubectl-validate@v0.0.4"

// TestVendoredSchemasAreGenerated regenerates the schemas from the pinned
// OpenAPI documents and compares them with deploy/k8s/schemas byte for byte,
// so the vendored files are what the generator makes of Kubernetes' own
// documents, and a change to either shows.
func TestVendoredSchemasAreGenerated(t *testing.T) {
	// One module zip (~7 MB) from the Go module proxy, cached after.
	out, err := exec.Command("go", "mod", "download", "-json", openapiModule).Output()
	if err != nil {
		if pgtest.InCI() {
			t.Fatalf("go mod download %s: %v", openapiModule, err)
		}
		t.Skipf("go mod download %s: %v (offline?)", openapiModule, err)
	}
	var mod struct{ Dir string }
	require.NoError(t, json.Unmarshal(out, &mod))
	dir := t.TempDir()
	require.NoError(t, run(filepath.Join(mod.Dir, "pkg/openapiclient/builtins/1.30"), dir))

	vendored := "../v1.30.0-standalone-strict"
	want, err := os.ReadDir(vendored)
	require.NoError(t, err)
	got, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, got, len(kinds))
	require.Len(t, want, len(got), "deploy/k8s/schemas has files the generator does not write")
	for _, f := range got {
		g, err := os.ReadFile(filepath.Join(dir, f.Name()))
		require.NoError(t, err)
		w, err := os.ReadFile(filepath.Join(vendored, f.Name()))
		require.NoError(t, err, "%s is not vendored: run the package comment's command", f.Name())
		require.Equal(t, string(g), string(w), "%s differs from what the generator writes", f.Name())
	}
}

func TestExpandRules(t *testing.T) {
	schemas := map[string]map[string]any{
		"Spec": {
			"description": "dropped",
			"properties": map[string]any{
				"count":   map[string]any{"type": "integer", "format": "int32", "default": 1},
				"port":    map[string]any{"x-kubernetes-int-or-string": true},
				"raw":     map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": map[string]any{"a": map[string]any{"type": "string"}}},
				"labels":  map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
				"ref":     map[string]any{"allOf": []any{map[string]any{"$ref": "#/components/schemas/Leaf"}}, "default": map[string]any{}},
				"maybe":   map[string]any{"type": "string", "nullable": true},
				"entries": map[string]any{"type": "array", "items": map[string]any{"$ref": "#/components/schemas/Leaf"}},
			},
			"required": []any{"count"},
		},
		"Leaf": {"properties": map[string]any{"name": map[string]any{"type": "string"}}},
	}
	e := expander{schemas: schemas}
	got, err := e.expand(map[string]any{"$ref": "#/components/schemas/Spec"}, "root")
	require.NoError(t, err)
	leaf := map[string]any{"properties": map[string]any{"name": map[string]any{"type": "string"}}, "additionalProperties": false}
	require.Equal(t, map[string]any{
		"properties": map[string]any{
			"count":   map[string]any{"type": "integer"},
			"port":    map[string]any{"oneOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}},
			"raw":     map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}},
			"labels":  map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
			"ref":     leaf,
			"maybe":   map[string]any{"type": []any{"string", "null"}},
			"entries": map[string]any{"type": "array", "items": leaf},
		},
		"required":             []any{"count"},
		"additionalProperties": false,
	}, got)

	for name, s := range map[string]map[string]any{
		"cycle":           {"properties": map[string]any{"self": map[string]any{"$ref": "#/components/schemas/Loop"}}},
		"unknown keyword": {"properties": map[string]any{"x": map[string]any{"type": "string", "x-kubernetes-validations": []any{}}}},
		"missing ref":     {"$ref": "#/components/schemas/Nowhere"},
		"rule beside ref": {"allOf": []any{map[string]any{"$ref": "#/components/schemas/Leaf"}}, "minProperties": 1},
	} {
		e := expander{schemas: map[string]map[string]any{"Loop": {"properties": map[string]any{"next": map[string]any{"$ref": "#/components/schemas/Loop"}}}, "Leaf": schemas["Leaf"]}}
		_, err := e.expand(s, name)
		require.Error(t, err, name)
	}
}
