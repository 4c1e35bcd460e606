// Command worker processes envelopes (the default subcommand) and holds the
// admin subcommands:
//
//	worker run [flags]          process envelopes until SIGTERM
//	worker migrate [status]     apply the schema (safe to run twice) / list versions
//	worker replay ...           re-process envelopes, recorded in envelope_replay
//	worker envelopes list|show  inspect envelopes
//	worker envelopes resolve    close failed envelopes, recorded in envelope_resolution
//	worker stats                counts, oldest pending, failures, duplicates
//	worker purge [--dry-run]    retention: drop old bodies, delete old tombstones
//	worker backfill ...         recover events the provider never delivered
//
// Every admin subcommand (all but run) is an adminCommand (command.go): its
// flags, turned into the library's request and checked by the library's own
// validation (a usage error, exit status 2), one pool, the library's call,
// JSON (--json) or text.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/pg"
)

func main() { cli.Main("worker", run, exitCode) }

// exitCode is 2 for a bad command line (cli.UsageError, the one usage
// error type of every binary), else 1.
func exitCode(err error) int {
	if errors.As(err, new(cli.UsageError)) {
		return 2
	}
	return 1
}

const usage = `usage: worker [command] [flags]

commands:
  run                 process envelopes until SIGTERM
  migrate             apply every pending migration (safe to run twice)
  migrate status      list migration versions and whether each is applied
  replay              re-process envelopes, by id or by filter, with a recorded reason
  envelopes list      list envelopes (filters, newest first, paging)
  envelopes show ID   one envelope with its attempts, replays, conflicts and ledger postings
  envelopes resolve   close failed envelopes no replay can fix, with a recorded reason (unresolve: undo)
  stats               counts by source and status, oldest pending, failures, duplicates
  purge               apply retention now (--dry-run shows what it would do)
  backfill            recover events the provider never delivered, from its own log (Stripe, GitHub)

Run 'worker COMMAND -h' for a command's flags, 'worker --version' for the build.
Every command reads DATABASE_URL.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// Envelopes carry strings a sender chose (delivery ids, headers, bodies):
	// nothing reaches the terminal or a log unescaped.
	stdout, stderr = cli.Safe(stdout), cli.Safe(stderr)
	if len(args) == 0 {
		// Not "run": a bare worker typed to see what it does must not
		// start processing someone's envelopes.
		fmt.Fprint(stderr, usage)
		return cli.UsageError{Err: errors.New("no command given (worker run processes envelopes)")}
	}
	cmd := "run" // flags with no command are run's (as before commands existed)
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	err := runCommand(ctx, cmd, args, getenv, stdout, stderr)
	return pg.ExplainSchema(err, getenv("DATABASE_URL"))
}

func runCommand(ctx context.Context, cmd string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	switch cmd {
	case "run":
		return runWorker(ctx, args, getenv, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, args, getenv, stdout, stderr)
	case "replay":
		return runReplay(ctx, args, getenv, stdout, stderr)
	case "envelopes":
		return runEnvelopes(ctx, args, getenv, stdout, stderr)
	case "stats":
		return runStats(ctx, args, getenv, stdout, stderr)
	case "purge":
		return runPurge(ctx, args, getenv, stdout, stderr)
	case "backfill":
		return runBackfill(ctx, args, getenv, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return cli.UsageError{Err: fmt.Errorf("unknown command %q", cmd)}
	}
}
