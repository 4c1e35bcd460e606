package migrations

import (
	"io/fs"
	"strings"
	"testing"
)

// The River files are generated from the River module in go.mod; after a
// River upgrade this fails until `go generate ./migrations` is run.
func TestRiverMigrationsMatchTheRiverModule(t *testing.T) {
	t.Parallel()
	want, err := RiverFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 6 {
		t.Fatalf("River has %d migrations, expected at least 6", len(want))
	}
	for name, body := range want {
		got, err := fs.ReadFile(files, name)
		if err != nil {
			t.Errorf("%s is missing: run go generate ./migrations", name)
			continue
		}
		if string(got) != body {
			t.Errorf("%s differs from River's migration: run go generate ./migrations", name)
		}
		if strings.Contains(string(got), riverSchemaMarker) {
			t.Errorf("%s still carries River's schema marker", name)
		}
	}
	entries, err := fs.Glob(files, "*_river_*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%d River files embedded, River has %d versions", len(entries), len(want))
	}
}
