package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// uiCredential reads a River UI credential from River's own riverui
// variable (RIVER_BASIC_AUTH_USER / _PASS) or this project's older name
// (RIVERUI_USER / _PASSWORD). Both set to different values is an error,
// which names the variables and never the values.
func uiCredential(getenv func(string) string, river, ours string) (string, error) {
	a, b := getenv(river), getenv(ours)
	if a != "" && b != "" && a != b {
		return "", fmt.Errorf("%s and %s are both set, to different values: set one", river, ours)
	}
	if a != "" {
		return a, nil
	}
	return b, nil
}

// MinUIPasswordLen is the shortest RIVERUI_PASSWORD the worker accepts.
const MinUIPasswordLen = 12

// checkUIPassword refuses a River UI password too weak for a surface that
// cancels and deletes jobs: shorter than MinUIPasswordLen characters, only
// white space, or one character repeated. The error never quotes it.
func checkUIPassword(p string) error {
	if p == "" {
		return errors.New("--riverui needs RIVER_BASIC_AUTH_PASS (or RIVERUI_PASSWORD) set (River UI can cancel and delete jobs)")
	}
	if utf8.RuneCountInString(p) < MinUIPasswordLen {
		return fmt.Errorf("RIVERUI_PASSWORD is too short: use at least %d characters (River UI can cancel and delete jobs)", MinUIPasswordLen)
	}
	if strings.TrimSpace(p) == "" {
		return errors.New("RIVERUI_PASSWORD is only white space")
	}
	first, _ := utf8.DecodeRuneInString(p)
	if strings.Trim(p, string(first)) == "" {
		return errors.New("RIVERUI_PASSWORD is one character repeated")
	}
	return nil
}

// Login throttling of the admin surface: failed logins per client address,
// and across all addresses (so many addresses cannot guess faster).
const (
	failuresPerClient = 5                // burst of failed logins from one address
	clientRefill      = 12 * time.Second // then one more per this long (5 a minute)
	failuresAll       = 50               // burst across all addresses
	allRefill         = time.Second      // then one more a second
	maxTracked        = 10000            // client addresses remembered
)

// guardUI puts h (River UI and the console) behind, in order: headers that
// forbid framing (X-Frame-Options, CSP frame-ancestors), same-origin protection for
// every state-changing request (net/http's CrossOriginProtection: a
// cross-site browser form or fetch is refused with 403 before it reaches
// authentication, so a browser's cached credentials cannot be replayed
// from another site), login throttling (429 with Retry-After once a client,
// or all clients together, failed too often; the password is then not even
// checked), and HTTP basic auth compared in constant time.
func guardUI(user, password string, h http.Handler, logger *slog.Logger) http.Handler {
	t := &loginThrottle{clients: map[string]*rate.Limiter{}, all: rate.NewLimiter(rate.Every(allRefill), failuresAll)}
	auth := basicAuth(user, password, h, t, logger)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger.Warn("admin: cross-origin request refused", "method", r.Method, "path", boundLog(r.URL.Path), "remote", r.RemoteAddr)
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	guarded := cop.Handler(auth)
	// Neither River UI nor the console may be framed by another page (a
	// framed page's own POSTs are same-origin: clickjacking).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		if w.Header().Get("Content-Security-Policy") == "" {
			w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		}
		guarded.ServeHTTP(w, r)
	})
}

// loginThrottle counts failed logins.
type loginThrottle struct {
	mu      sync.Mutex
	clients map[string]*rate.Limiter
	all     *rate.Limiter
}

func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// blocked reports whether the client (or everyone) has no failures left,
// and for how long.
func (t *loginThrottle) blocked(key string) (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if l, ok := t.clients[key]; ok && l.TokensAt(now) < 1 {
		return true, clientRefill
	}
	if t.all.TokensAt(now) < 1 {
		return true, allRefill
	}
	return false, 0
}

// fail records a failed login by key.
func (t *loginThrottle) fail(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.clients[key]
	if !ok {
		if len(t.clients) >= maxTracked {
			clear(t.clients) // bounded memory; the limit across all clients still holds
		}
		l = rate.NewLimiter(rate.Every(clientRefill), failuresPerClient)
		t.clients[key] = l
	}
	l.Allow()
	t.all.Allow()
}

// basicAuth guards h with HTTP basic authentication, comparing in constant
// time, throttled by t. River UI has no authentication of its own and can
// cancel and delete jobs.
func basicAuth(user, password string, h http.Handler, t *loginThrottle, logger *slog.Logger) http.Handler {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := clientKey(r)
		if blocked, wait := t.blocked(key); blocked {
			w.Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds())))
			http.Error(w, "too many failed logins; retry later", http.StatusTooManyRequests)
			return
		}
		u, p, ok := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotUser[:], wantUser[:])&subtle.ConstantTimeCompare(gotPass[:], wantPass[:]) != 1 {
			if ok { // a browser's first request carries no credentials: not a failure
				t.fail(key)
				logger.Warn("admin: failed login", "remote", r.RemoteAddr)
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="inbox admin", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// boundLog bounds a request string for a log line.
func boundLog(s string) string {
	const max = 200
	if len(s) > max {
		return strings.ToValidUTF8(s[:max], "") + "..."
	}
	return s
}

// loopback reports whether the bound address addr (host:port) is a loopback
// address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
