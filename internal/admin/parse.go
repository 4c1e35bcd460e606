package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/inboxhq/inbox/internal/envelope"
	"github.com/inboxhq/inbox/internal/labels"
)

// FilterInput is a Filter as an operator types it: the CLI's selection
// flags and the console's query parameters are both this, so both parse and
// reject exactly the same input.
type FilterInput struct {
	// IDStrings are envelope ids as typed: each may hold several, separated
	// by commas or spaces ("12", "12,13 14").
	IDStrings                                                  []string
	Source, Status, EventType, DeliveryID, Cause, Since, Until string
	// MaxID is Filter.MaxID as typed ("" for none).
	MaxID string
	// Contains are JSON objects; Fields are path=value (ParseField);
	// Headers are Name=value.
	Contains, Fields, Headers []string
}

// InputError is an operator's input that Parse refused: Field names the
// input (the CLI's flag and the console's parameter, without dashes).
type InputError struct {
	Field string
	Err   error
}

func (e *InputError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// Parse returns the validated Filter in. An error is an *InputError naming
// the field when one field is wrong, or Filter.Validate's.
func (in FilterInput) Parse() (Filter, error) {
	f := Filter{
		Source:     strings.TrimSpace(in.Source),
		Status:     envelope.Status(strings.TrimSpace(in.Status)),
		EventType:  strings.TrimSpace(in.EventType),
		DeliveryID: strings.TrimSpace(in.DeliveryID),
		Cause:      strings.TrimSpace(in.Cause),
	}
	for _, s := range in.IDStrings {
		ids, err := ParseIDs(s)
		if err != nil {
			return f, &InputError{"id", err}
		}
		f.IDs = append(f.IDs, ids...)
	}
	if f.Cause != "" && !labels.KnownCause(labels.Cause(f.Cause)) {
		return f, &InputError{"cause", fmt.Errorf("%q: want one of %s", f.Cause, CauseNames())}
	}
	for _, c := range in.Contains {
		if !json.Valid([]byte(c)) {
			return f, &InputError{"contains", fmt.Errorf(`%s: not valid JSON (quote it for the shell: '{"data":{"merchant_id":"m_1"}}')`, c)}
		}
		f.Contains = append(f.Contains, json.RawMessage(c))
	}
	for _, fl := range in.Fields {
		c, err := ParseField(fl)
		if err != nil {
			return f, &InputError{"field", err}
		}
		f.Contains = append(f.Contains, c)
	}
	for _, h := range in.Headers {
		name, value, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return f, &InputError{"header", fmt.Errorf("%q: want Name=value, such as X-GitHub-Event=push", h)}
		}
		if f.Headers == nil {
			f.Headers = map[string]string{}
		}
		f.Headers[strings.TrimSpace(name)] = value
	}
	if s := strings.TrimSpace(in.MaxID); s != "" {
		id, err := ParseID(s)
		if err != nil {
			return f, &InputError{"max-id", err}
		}
		f.MaxID = id
	}
	for name, v := range map[string]string{"source": f.Source, "event-type": f.EventType, "delivery-id": f.DeliveryID} {
		if err := checkText(v); err != nil {
			return f, &InputError{name, err}
		}
	}
	for _, h := range in.Headers {
		if err := checkText(h); err != nil {
			return f, &InputError{"header", err}
		}
	}
	for _, c := range f.Contains {
		if err := checkText(string(c)); err != nil || strings.Contains(string(c), `\u0000`) {
			return f, &InputError{"contains", errors.New("holds invalid UTF-8 or a NUL character, which no stored text can contain")}
		}
	}
	var err error
	if f.Since, err = ParseBound(in.Since); err != nil {
		return f, &InputError{"since", err}
	}
	if f.Until, err = ParseBound(in.Until); err != nil {
		return f, &InputError{"until", err}
	}
	return f, f.Validate()
}

// ParseID reads one envelope id, a positive integer; its error is the one
// every operator input (CLI argument, console parameter, max id) gets.
func ParseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, notID(s)
	}
	return id, nil
}

// ParseIDs reads the envelope ids of s, separated by commas or spaces
// ("12", "12,13 14").
func ParseIDs(s string) ([]int64, error) {
	var ids []int64
	for _, field := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		id, err := ParseID(field)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// notID is the error for s, which is not an envelope id.
func notID(s string) error {
	return fmt.Errorf("%q is not an envelope id (ids are integers and must be positive)", s)
}

// checkText refuses what PostgreSQL's text cannot hold, so that such input
// is the operator's error, not the database's: invalid UTF-8 and NUL.
func checkText(s string) error {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return errors.New("holds invalid UTF-8 or a NUL character, which no stored text can contain")
	}
	return nil
}

// CauseNames lists the known failure causes, comma-separated.
func CauseNames() string {
	names := make([]string, len(labels.Causes))
	for i, c := range labels.Causes {
		names[i] = string(c)
	}
	return strings.Join(names, ", ")
}
