package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/migrations"
)

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("worker migrate", getenv, stderr)
	asJSON := fs.Bool("json", false, "print JSON (status)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	sub := ""
	if fs.NArg() > 0 {
		sub = fs.Arg(0)
	}
	if sub != "" && sub != "status" && sub != "up" {
		return usageError{fmt.Errorf("migrate: unknown subcommand %q (want status)", sub)}
	}
	pool, err := pg.Open(ctx, getenv("DATABASE_URL"), pg.Options{MaxConns: 2, ApplicationName: "inbox-migrate"})
	if err != nil {
		return err
	}
	defer pool.Close()
	if sub == "status" {
		st, err := migrations.List(ctx, pool)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE")
		for _, s := range st {
			state, at := "pending", "-"
			if s.Applied {
				state, at = "applied", s.AppliedAt
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Version, state, at, s.File)
		}
		return tw.Flush()
	}
	return migrations.Migrate(ctx, pool, stdout)
}
