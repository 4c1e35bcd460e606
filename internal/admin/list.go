package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxhq/inbox/internal/cli"
	"github.com/inboxhq/inbox/internal/envelope"
)

// Summary is one envelope in a listing: everything but its body, payload,
// headers and result.
type Summary = envelope.Summary

// DefaultListLimit is List's page size when none is given.
const DefaultListLimit = 50

// MaxListLimit caps one page of List.
const MaxListLimit = 10000

// DefaultWindow is how far back List looks when the filter has no Since
// and names no envelope (ids, delivery id): the last 24 hours, or the 24
// hours before Until.
const DefaultWindow = 24 * time.Hour

// DefaultScanBudget is how many envelopes a search no index serves (a
// header value or a body containment in a day without the headers or body
// index, or a value too common for it) reads at most before it stops and
// says how far it got: about 1.3 s on the reference machine
// (docs/benchmarks.md, "Reads at size").
const DefaultScanBudget = 400_000

// scanChunk is about how many envelopes one statement of a bounded search
// reads: the budget is checked between chunks.
const scanChunk = 50_000

// ListRequest asks for one page of envelopes, newest (highest id) first.
type ListRequest struct {
	Filter Filter
	// ScanBudget bounds a search that no index serves (Filter.Headers, or
	// Filter.Contains without status failed, in the days without the
	// headers or body index or for a value too common for it): it reads
	// the window newest first, chunk by chunk, and stops before reading more
	// than about this many envelopes, saying how far back it got (Scan). 0
	// is DefaultScanBudget.
	ScanBudget int64
	// Limit is the page size: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
	// BeforeID is the cursor: only envelopes with a lower id. 0 starts at the
	// newest.
	BeforeID int64
	// CountUpTo, when positive, also counts the envelopes the filter selects
	// (every page's, not only this one), in the same snapshot, stopping at
	// CountUpTo: a bounded cost however many match.
	CountUpTo int
	// ByStatus, with CountUpTo, also counts the envelopes the filter
	// selects in each status (its own status aside), each at most
	// min(CountUpTo, MaxStatusCount): the console's status tabs. Filters no
	// index serves get none.
	ByStatus bool
}

// Validate checks r before anything is read: its filter, a limit of 0
// (the default) to MaxListLimit, a cursor that is not negative.
func (r ListRequest) Validate() error {
	if err := r.Filter.Validate(); err != nil {
		return err
	}
	if r.Limit < 0 || r.Limit > MaxListLimit {
		return fmt.Errorf("limit %d: want 1 to %d", r.Limit, MaxListLimit)
	}
	if r.BeforeID < 0 {
		return errors.New("before-id must be positive")
	}
	if r.CountUpTo < 0 {
		return fmt.Errorf("count-up-to %d must not be negative", r.CountUpTo)
	}
	if r.ScanBudget < 0 {
		return fmt.Errorf("scan budget %d must not be negative", r.ScanBudget)
	}
	return nil
}

// Scan says what a List read, so that an empty page can be told from a
// search that did not look far enough.
type Scan struct {
	// Since and Until are the window (zero: unbounded on that side).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// DefaultWindow says Since is DefaultWindow's, not the caller's.
	DefaultWindow bool `json:"default_window,omitempty"`
	// Keyed says the filter named its envelopes (ids, delivery id): they
	// were looked up by key, whatever the window.
	Keyed bool `json:"keyed,omitempty"`
	// Partitions and Envelopes are what the window holds: its partitions,
	// and their envelopes (from the counters, an estimate for a partly
	// covered partition).
	Partitions int   `json:"partitions"`
	Envelopes  int64 `json:"envelopes"`
	// Budget is set when the filter has no index (a body or header search):
	// the window was read newest first, about Searched envelopes of it, back
	// to SearchedFrom. Stopped says the budget ran out before the window's
	// start: the page holds what was found, and NextBeforeID goes on from
	// SearchedFrom.
	Budget   int64 `json:"budget,omitempty"`
	Searched int64 `json:"searched,omitempty"`
	// Indexed is about how many envelopes of the window a search read
	// through the headers or body index (Chunk.HeadersIndexed,
	// Chunk.BodyIndexed) rather than one by one,
	// back to SearchedFrom too; Matches is how many matches the indexes
	// gave (each read and checked, and a lookup's limit when it found more
	// and was given up on), which count against the budget with
	// Searched.
	Indexed      int64     `json:"indexed,omitempty"`
	Matches      int64     `json:"matches,omitempty"`
	SearchedFrom time.Time `json:"searched_from,omitzero"`
	Stopped      bool      `json:"stopped,omitempty"`
	// Elapsed is the time the reads took.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// ListResult is one page.
type ListResult struct {
	Envelopes []Summary `json:"envelopes"`
	// NextBeforeID is the cursor of the next page (ListRequest.BeforeID), or
	// nil on the last page.
	NextBeforeID *int64 `json:"next_before_id"`
	// Matched counts the envelopes the filter selects when
	// ListRequest.CountUpTo asked for it, at most CountUpTo; MatchedMore
	// says there are more. A bounded search counts what it found.
	Matched     int  `json:"matched,omitempty"`
	MatchedMore bool `json:"matched_more,omitempty"`
	// ByStatus counts the filter's envelopes per status when
	// ListRequest.ByStatus asked for it, in envelope.Statuses' order.
	ByStatus []StatusCount `json:"by_status,omitempty"`
	// Scan is what the page read.
	Scan Scan `json:"scan"`
}

// List returns one page of the envelopes f selects, newest first, in a
// read-only transaction: it changes nothing. Pages are stable under new
// arrivals: the cursor is an id, and ids only grow. Unless the filter names
// its envelopes, it reads a window (DefaultWindow unless given), which
// prunes to that window's partitions; a body or header search reads
// through the headers or body index where it can, and under ScanBudget
// otherwise.
func List(ctx context.Context, pool *pgxpool.Pool, req ListRequest) (ListResult, error) {
	if err := req.Validate(); err != nil {
		return ListResult{}, err
	}
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	if req.ScanBudget == 0 {
		req.ScanBudget = DefaultScanBudget
	}
	var res ListResult
	err := readOnly(ctx, pool, func(tx pgx.Tx, clock envelope.Clock) error {
		start := time.Now()
		defer func() { res.Scan.Elapsed = time.Since(start) }()
		sel, scan := listSelection(req.Filter, clock)
		res.Scan = scan
		if res.Scan.Keyed {
			sel, ok, err := keyedSelection(ctx, tx, sel)
			if err != nil {
				return err
			}
			if !ok { // no such delivery id: nothing, and every count 0
				res.Envelopes = []Summary{}
				if req.ByStatus {
					for _, st := range envelope.Statuses() {
						res.ByStatus = append(res.ByStatus, StatusCount{Status: st})
					}
				}
				return nil
			}
			return listPage(ctx, tx, sel, req, &res)
		}
		if !sel.Indexed() {
			return listBounded(ctx, tx, sel, req, &res)
		}
		chunks, err := envelope.PlanScan(ctx, tx, sel.Since, sel.Until, math.MaxInt64)
		if err != nil {
			return err
		}
		res.Scan.Partitions, res.Scan.Envelopes = summarize(chunks)
		return listPage(ctx, tx, sel, req, &res)
	})
	if err != nil {
		return ListResult{}, err
	}
	if len(res.Envelopes) > req.Limit {
		res.Envelopes = res.Envelopes[:req.Limit]
		next := res.Envelopes[req.Limit-1].ID
		res.NextBeforeID = &next
	}
	return res, nil
}

// listSelection is what List selects for f: unless f names its envelopes,
// a window (DefaultWindow ending at Until or now, unless Since is given)
// whose end is now when open, so that the partitions created ahead are not
// read (the snapshot shows nothing received after its now()). The Scan
// states the window as asked.
func listSelection(f Filter, clock envelope.Clock) (envelope.Selection, Scan) {
	var scan Scan
	scan.Keyed = len(f.IDs) > 0 || f.DeliveryID != ""
	if f.Since.IsZero() && !scan.Keyed {
		end := clock.Now
		if !f.Until.IsZero() {
			end = f.Until.Time(clock.Now)
		}
		f.Since = Bound{At: end.Add(-DefaultWindow)}
		scan.DefaultWindow = true
	}
	sel := f.selection(clock)
	scan.Since, scan.Until = sel.Since, sel.Until
	if sel.Until.IsZero() && !scan.Keyed {
		sel.Until = clock.Now.Add(time.Second)
	}
	return sel, scan
}

// keyedSelection is sel, which names its envelopes (ids, or a delivery id:
// a Filter has one or the other), with its delivery id's envelope ids
// (envelope_key's) as its IDs: constants, which the planner prunes to
// their partitions, where the delivery id's own condition (an InitPlan)
// prunes only as it runs, after every partition kept was planned and
// opened (88 ms at 30 days, 10 M envelopes, in a new session). ok is false
// when sel selects nothing.
func keyedSelection(ctx context.Context, tx pgx.Tx, sel envelope.Selection) (envelope.Selection, bool, error) {
	if sel.DeliveryID == "" {
		return sel, true, nil
	}
	ids, err := envelope.KeyIDs(ctx, tx, sel.DeliveryID)
	if err != nil {
		return sel, false, err
	}
	sel.IDs = ids
	return sel, len(ids) > 0, nil
}

// MaxStatusCount bounds each count of ListRequest.ByStatus: five of them
// per page must stay cheap, and "1000+" says enough on a tab.
const MaxStatusCount = 1000

// StatusCount is how many envelopes of a status a filter selects: N, at
// most min(ListRequest.CountUpTo, MaxStatusCount), and More when there are
// more.
type StatusCount struct {
	Status envelope.Status `json:"status"`
	N      int             `json:"n"`
	More   bool            `json:"more,omitempty"`
}

// listPage reads one page of sel in one statement (and its count, when
// asked), which an index or the window's partitions bound.
func listPage(ctx context.Context, tx pgx.Tx, sel envelope.Selection, req ListRequest, res *ListResult) error {
	if req.CountUpTo > 0 {
		n, err := envelope.CountUpTo(ctx, tx, sel, req.CountUpTo+1)
		if err != nil {
			return err
		}
		res.Matched, res.MatchedMore = min(n, req.CountUpTo), n > req.CountUpTo
		// Each status's count is one bounded count on the status index
		// (status, received_at) within the window.
		if req.ByStatus {
			limit := min(req.CountUpTo, MaxStatusCount)
			for _, st := range envelope.Statuses() {
				s := sel
				s.Status = st
				n, err := envelope.CountUpTo(ctx, tx, s, limit+1)
				if err != nil {
					return err
				}
				res.ByStatus = append(res.ByStatus, StatusCount{Status: st, N: min(n, limit), More: n > limit})
			}
		}
	}
	sel.BeforeID = req.BeforeID
	var err error
	res.Envelopes, err = envelope.Summaries(ctx, tx, sel, req.Limit+1, false)
	return err
}

// listBounded reads the window newest first, a chunk (a statement) at a
// time, until the page is full, the window is read, or the next chunk
// would take the envelopes read past the budget (the first chunk is
// always read). A header or body search reads the chunks of a partition
// that has the headers or body index (indexesFor) through it instead: the
// partition's matching ids once (at most a chunk's worth, maxDayMatches
// when nothing else narrows them, and what the budget has left: each
// match counts against it; more, and the value is common enough for the
// walk to find a page sooner), then each chunk's candidates by key. Its
// count is what it found.
func listBounded(ctx context.Context, tx pgx.Tx, sel envelope.Selection, req ListRequest, res *ListResult) error {
	// Chunks of an eighth of the budget at most: the budget is checked
	// between them.
	chunkRows := min(scanChunk, max(1, req.ScanBudget/8))
	if len(sel.Contains) > 0 {
		// Which days are indexed is read from the catalog (PlanScan), not
		// from the snapshot: a day's bodies dropped between that and the
		// lookup would read as "no match" while its failed envelopes keep
		// copies in their rows. Holding envelope_body (ACCESS SHARE: what
		// any read of it takes) makes envelope_body_drop wait until the
		// search ends (it gives up after its lock wait, and retries at the
		// next purge).
		if _, err := tx.Exec(ctx, `LOCK TABLE envelope_body IN ACCESS SHARE MODE`); err != nil {
			return fmt.Errorf("search bodies: %w", err)
		}
	}
	chunks, err := envelope.PlanScan(ctx, tx, sel.Since, sel.Until, chunkRows)
	if err != nil {
		return err
	}
	scan := &res.Scan
	scan.Partitions, scan.Envelopes = summarize(chunks)
	scan.Budget = req.ScanBudget
	res.Envelopes = []Summary{}
	matches := map[string]*indexMatches{}
	read := false
	// prefer is the index whose lookup last completed: tried first in the
	// next partition, so a header value common day after day costs one
	// lookup given up on, not one a day (each counts against the budget).
	prefer := ""
	for _, c := range chunks {
		if req.BeforeID != 0 && c.LowerID >= req.BeforeID {
			continue // above the cursor: an earlier page's
		}
		upper := c.UpperID
		if req.BeforeID != 0 {
			upper = min(upper, req.BeforeID)
		}
		var m *indexMatches
		if ixs := indexesFor(sel, c); len(ixs) > 0 {
			if len(ixs) == 2 && ixs[1] == prefer {
				ixs[0], ixs[1] = ixs[1], ixs[0]
			}
			if m = matches[c.Partition]; m == nil {
				m = &indexMatches{}
				lower, top := partitionRange(chunks, c.Partition)
				if req.BeforeID != 0 {
					top = min(top, req.BeforeID)
				}
				// Each match is a body read and checked, then an envelope
				// looked up: they count against the budget like the walk's
				// envelopes, and a partition with more than the budget has
				// left is walked (and stops there) instead, as is one with
				// more than maxDayMatches when nothing else narrows them.
				// A header value with too many matches there leaves the
				// body's index to try, when the search has a body field
				// too: the rarer of the two narrows it.
				for _, ix := range ixs {
					limit := min(chunkRows, req.ScanBudget-scan.Searched-scan.Matches)
					if onlyIndexed(sel, ix) {
						limit = min(limit, maxDayMatches)
					}
					if limit <= 0 {
						break
					}
					if ix == "headers" {
						m.ids, m.complete, err = envelope.HeaderMatches(ctx, tx, sel.Headers, lower, top, int(limit))
					} else {
						m.ids, m.complete, err = envelope.BodyMatches(ctx, tx, sel.Contains, lower, top, int(limit))
					}
					if err != nil {
						return err
					}
					if !m.complete {
						// Read and given up on: the limit's worth counts
						// against the budget all the same, so a partition's
						// failed lookups (up to one per index) cost what
						// they read.
						scan.Matches += limit
						continue
					}
					scan.Matches += int64(len(m.ids))
					prefer = ix
					break
				}
				matches[c.Partition] = m
			}
		}
		indexed := m != nil && m.complete
		if !indexed && read && scan.Searched+scan.Matches+c.Envelopes > req.ScanBudget {
			// The page is not full (a full one stops below): the next one
			// goes on from this chunk's top.
			scan.Stopped = true
			res.NextBeforeID = &upper
			break
		}
		var page []Summary
		if indexed {
			page, err = m.summaries(ctx, tx, sel, c.LowerID, upper, req.Limit+1-len(res.Envelopes))
			scan.Indexed += c.Envelopes
		} else {
			s := sel
			s.BeforeID = upper
			if c.LowerID != math.MinInt64 {
				s.AfterID = c.LowerID - 1
			}
			page, err = envelope.Summaries(ctx, tx, s, req.Limit+1-len(res.Envelopes), false)
			scan.Searched += c.Envelopes
		}
		if err != nil {
			return err
		}
		res.Envelopes = append(res.Envelopes, page...)
		read = true
		scan.SearchedFrom = c.From
		if len(res.Envelopes) > req.Limit {
			break
		}
	}
	if req.CountUpTo > 0 {
		res.Matched = min(len(res.Envelopes), req.CountUpTo)
		res.MatchedMore = len(res.Envelopes) > req.CountUpTo || scan.Stopped || len(res.Envelopes) > req.Limit
	}
	return nil
}

// indexesFor is the indexes a bounded search may read c's matches from,
// in the order it tries them (unless the other's lookup completed last,
// listBounded): the headers' when sel has headers and c has
// that index (it serves every day whose envelopes are kept), then the
// body's when sel has a containment and c has that one; none when c is
// walked.
func indexesFor(sel envelope.Selection, c envelope.Chunk) []string {
	var ixs []string
	if len(sel.Headers) > 0 && c.HeadersIndexed {
		ixs = append(ixs, "headers")
	}
	if len(sel.Contains) > 0 && c.BodyIndexed {
		ixs = append(ixs, "body")
	}
	return ixs
}

// indexMatches is what a partition's body or headers index gave a search:
// its matching ids, highest first, when complete.
type indexMatches struct {
	ids      []int64
	complete bool
}

// maxDayMatches is the most matches a search that selects by nothing but
// the indexed value (and its window) reads from a partition's index (a
// day's, by default): with more, the value is common enough there for the
// walk to find a page sooner (2,000 matches in a day of 330,000 envelopes
// is one in 165: a page of 50 within ~8,000 envelopes walked, where
// reading the index's matches costs about as much per match as walking 3-5
// envelopes; a common header value's 21,000 matches took 245 ms through
// the index at 10 M). With another filter (a source, a status...) the
// index's matches are candidates that filter may mostly reject, so the
// walk would not find a page sooner: the cap is the chunk's (or what the
// budget has left). The matches read before giving up count against the
// budget too.
const maxDayMatches = 2000

// onlyIndexed reports whether sel selects by nothing but its window and
// the value index ix reads ("headers" or "body"): then each of that
// index's matches is a match of sel.
func onlyIndexed(sel envelope.Selection, ix string) bool {
	rest := sel
	rest.Since, rest.Until, rest.LegacyUntil = time.Time{}, time.Time{}, time.Time{}
	rest.AfterID, rest.BeforeID, rest.MaxID = 0, 0, 0
	if ix == "headers" {
		rest.Headers = nil
	} else {
		rest.Contains = nil
	}
	where, _ := rest.Where()
	return where == "TRUE"
}

// candidateBatch is how many of a partition's matching ids one statement
// checks against the rest of the selection.
const candidateBatch = 1000

// summaries returns up to limit of the envelopes sel selects among m's ids
// in [lower, upper), newest first: the matching ids, a batch at a time,
// looked up by key with every condition of sel (the containment too:
// checked again on the body a reader sees).
func (m *indexMatches) summaries(ctx context.Context, tx pgx.Tx, sel envelope.Selection, lower, upper int64, limit int) ([]Summary, error) {
	// m.ids is highest first: those in [lower, upper) are a run of it.
	from, _ := slices.BinarySearchFunc(m.ids, upper, func(id, t int64) int { return cmp.Compare(t, id+1) })
	var out []Summary
	for i := from; i < len(m.ids) && m.ids[i] >= lower && len(out) < limit; {
		j := i
		for j < len(m.ids) && m.ids[j] >= lower && j-i < candidateBatch {
			j++
		}
		s := sel
		s.IDs = m.ids[i:j]
		page, err := envelope.Summaries(ctx, tx, s, limit-len(out), false)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		i = j
	}
	return out, nil
}

// partitionRange is the ids [lower, upper) the chunks of partition cover.
func partitionRange(chunks []envelope.Chunk, partition string) (lower, upper int64) {
	lower, upper = math.MaxInt64, math.MinInt64
	for _, c := range chunks {
		if c.Partition == partition {
			lower, upper = min(lower, c.LowerID), max(upper, c.UpperID)
		}
	}
	return lower, upper
}

// summarize counts the partitions of chunks and the envelopes they hold.
func summarize(chunks []envelope.Chunk) (partitions int, envelopes int64) {
	seen := map[string]bool{}
	for _, c := range chunks {
		if !seen[c.Partition] {
			seen[c.Partition] = true
			partitions++
		}
		envelopes += c.Envelopes
	}
	return partitions, envelopes
}

// readOnly runs fn in a read-only REPEATABLE READ transaction, so its
// queries see one snapshot and cannot write, and passes the database's
// clock (now() and what windows resolve against).
func readOnly(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx, clock envelope.Clock) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		clock, err := envelope.ReadClock(ctx, tx)
		if err != nil {
			return err
		}
		return fn(tx, clock)
	})
}

// String says what s read, in a sentence for a page's footer: the window
// (and whether it is the default), its partitions and envelopes, the time
// taken; for a bounded search, how far back it got and, when it stopped,
// how to narrow or go on.
func (s Scan) String() string {
	var b strings.Builder
	ms := float64(s.Elapsed.Microseconds()) / 1000
	if s.Keyed {
		fmt.Fprintf(&b, "read by key (ids or delivery id) in %.1f ms", ms)
		return b.String()
	}
	until := "now"
	if !s.Until.IsZero() {
		until = s.Until.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(&b, "window %s to %s", s.Since.UTC().Format(time.RFC3339), until)
	if s.DefaultWindow {
		fmt.Fprintf(&b, " (the default: the last %d hours; --since to look further back)", int(DefaultWindow.Hours()))
	}
	fmt.Fprintf(&b, ": %s, ~%s", cli.Count(s.Partitions, "partition", "partitions"), cli.Count(s.Envelopes, "envelope", "envelopes"))
	if s.Budget > 0 {
		fmt.Fprintf(&b, "; body/header search read ~%d of them", s.Searched)
		if s.Indexed > 0 {
			fmt.Fprintf(&b, " one by one and ~%d through an index", s.Indexed)
		}
		if s.Matches > 0 {
			fmt.Fprintf(&b, " (%s read)", cli.Count(s.Matches, "index match", "index matches"))
		}
		if !s.SearchedFrom.IsZero() {
			fmt.Fprintf(&b, ", back to %s", s.SearchedFrom.UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintf(&b, ", in %.1f ms", ms)
	if s.Stopped {
		fmt.Fprintf(&b, "; stopped at the scan budget of %d envelopes: narrow with --source, --event-type, --status failed or a shorter window, or go on with the next page's --before-id", s.Budget)
	}
	return b.String()
}
