package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/pg"
	"github.com/inboxhq/inbox/migrations"
)

const migrateUsage = `usage: worker migrate [status] [flags]

  worker migrate          apply every pending migration (safe to run twice)
  worker migrate status   list migration versions and whether each is applied

flags:
`

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return adminCommand[string, []migrations.Status]{
		name:       "migrate",
		usage:      migrateUsage,
		positional: true,
		jsonHelp:   "print JSON (status)",
		pool:       pg.Options{MaxConns: 2, ApplicationName: "inbox-migrate"},
		flags: func(*cli.Flags) func([]string) (string, error) {
			return func(pos []string) (string, error) {
				sub := ""
				if len(pos) > 0 {
					sub = pos[0]
				}
				if sub != "" && sub != "status" && sub != "up" {
					return "", fmt.Errorf("unknown subcommand %q (want status)", sub)
				}
				return sub, nil
			}
		},
		exec: func(ctx context.Context, pool *pgxpool.Pool, sub string) ([]migrations.Status, error) {
			if sub == "status" {
				return migrations.List(ctx, pool)
			}
			return nil, migrations.Migrate(ctx, pool, stdout) // it prints what it applies
		},
		json: func(sub string, st []migrations.Status) any {
			if sub != "status" {
				return nil
			}
			return st
		},
		text: func(w io.Writer, sub string, st []migrations.Status) error {
			if sub != "status" {
				return nil
			}
			tw := newTable(w)
			fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE")
			for _, s := range st {
				state, at := "pending", "-"
				if s.Applied {
					state, at = "applied", s.AppliedAt
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Version, state, at, s.File)
			}
			return tw.Flush()
		},
	}.run(ctx, args, getenv, stdout, stderr)
}
