package pg

import (
	"net/url"
	"strings"
)

// redacted replaces every secret Redact hides.
const redacted = "xxxxx"

// secretKeys are the connection parameters whose values are secrets, in
// keyword/value strings and URL query parameters alike (libpq's and pgx's
// names; matched case-insensitively).
var secretKeys = map[string]bool{"password": true, "sslpassword": true}

// Redact returns databaseURL with every secret hidden, for logs and errors.
// It takes each form libpq and pgx accept: a URL (postgres:// or
// postgresql://) with a password in its userinfo or in a ?password= or
// ?sslpassword= query parameter, and a keyword/value string
// (host=... password=... or password='quoted \' value'), including a
// dbname that is itself a URL. It never fails: a string it cannot read is
// returned as a fixed placeholder, never in part. PGPASSWORD and the
// passfile are not part of the string and are left alone.
func Redact(databaseURL string) string {
	s := strings.TrimSpace(databaseURL)
	if s == "" {
		return ""
	}
	if isURL(s) {
		return redactURL(s)
	}
	return redactKeywords(s)
}

const unreadable = "(unreadable connection string, not shown)"

func isURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return unreadable
	}
	// A '#', '?' or '/' left unescaped in a password splits it into the
	// port and the fragment, query or path: refuse what that leaves.
	if u.Fragment != "" || u.Opaque != "" || strings.Contains(u.Path+u.RawPath+u.RawQuery, "@") {
		return unreadable
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return unreadable
		}
		for k, vs := range q {
			switch {
			case secretKeys[strings.ToLower(k)]:
				for i := range vs {
					vs[i] = redacted
				}
			case strings.EqualFold(k, "dbname"):
				for i := range vs {
					vs[i] = Redact(vs[i])
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// redactKeywords rewrites a keyword/value string with libpq's grammar:
// key = value pairs separated by white space, a value single-quoted (with
// \' and \\ escapes) or bare (up to white space, with backslash escapes).
// Anything it cannot parse makes the whole string unreadable.
func redactKeywords(s string) string {
	var out []string
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if key == "" || i == len(s) || s[i] != '=' {
			return unreadable
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					val.WriteByte(s[i+1])
					i += 2
					continue
				}
				if c == '\'' {
					closed = true
					i++
					break
				}
				val.WriteByte(c)
				i++
			}
			if !closed {
				return unreadable
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		v := val.String()
		switch {
		case secretKeys[strings.ToLower(key)]:
			v = redacted
		case strings.EqualFold(key, "dbname") && (isURL(v) || strings.Contains(v, "=")):
			v = Redact(v)
		}
		out = append(out, key+"="+quoteValue(v))
	}
	return strings.Join(out, " ")
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// quoteValue quotes v for a keyword/value string when it needs it.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\f\v'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
