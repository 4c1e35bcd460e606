// Command rivergen writes one goose migration file per River schema version,
// taken from the River module this project depends on. Run it (go generate
// ./migrations) after upgrading River; a test fails while the files are stale.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/inboxhq/inbox/migrations"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files, err := migrations.RiverFiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rivergen:", err)
		os.Exit(1)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "rivergen:", err)
			os.Exit(1)
		}
	}
}
