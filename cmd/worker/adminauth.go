package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"

	"github.com/inboxhq/inbox/internal/cli"
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
		return fmt.Errorf("the password of River UI and the console (RIVER_BASIC_AUTH_PASS or RIVERUI_PASSWORD) is too short: use at least %d characters (River UI can cancel and delete jobs, the console replays)", MinUIPasswordLen)
	}
	if strings.TrimSpace(p) == "" {
		return errors.New("the password of River UI and the console (RIVER_BASIC_AUTH_PASS or RIVERUI_PASSWORD) is only white space")
	}
	first, _ := utf8.DecodeRuneInString(p)
	if strings.Trim(p, string(first)) == "" {
		return errors.New("the password of River UI and the console (RIVER_BASIC_AUTH_PASS or RIVERUI_PASSWORD) is one character repeated")
	}
	return nil
}

// Login throttling of the admin surface: failed logins per client address,
// and across all addresses (so many addresses cannot guess faster).
const (
	failuresPerClient = 5           // burst of failed logins from one address
	failuresAll       = 50          // burst across all addresses
	allRefill         = time.Second // then one more a second
	maxTracked        = 10000       // client addresses remembered
)

// clientRefill: after its burst, one more failed login per this long from
// one address (5 a minute). A variable for the tests, whose bcrypt checks
// under the race detector on a loaded machine can take longer than it.
var clientRefill = 12 * time.Second

// guardUI puts h (River UI and the console) behind, in order: headers that
// forbid framing (X-Frame-Options, CSP frame-ancestors), same-origin protection for
// every state-changing request (net/http's CrossOriginProtection: a
// cross-site browser form or fetch is refused with 403 before it reaches
// authentication, so a browser's cached credentials cannot be replayed
// from another site), login throttling (429 with Retry-After once a client,
// or all clients together, failed too often; the password is then not even
// checked), and HTTP basic auth compared in constant time.
func guardUI(creds *credentials, h http.Handler, logger *slog.Logger) http.Handler {
	auth := basicAuth(creds, h, newLoginThrottle(), logger)
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger.Warn("admin: cross-origin request refused", "method", r.Method, "path", cli.Bound(r.URL.Path), "remote", r.RemoteAddr)
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	guarded := cop.Handler(auth)
	// Neither River UI nor the console may be framed by another page (a
	// framed page's own POSTs are same-origin: clickjacking).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'") // the console replaces it with its fuller one
		if strings.Contains(r.URL.Path, "/api/") {
			// River UI's JSON (jobs, their arguments and errors) is never
			// kept by a browser or a proxy; its static assets may be.
			w.Header().Set("Cache-Control", "no-store")
		}
		guarded.ServeHTTP(w, r)
	})
}

// loginThrottle counts failed logins. A credential check holds a slot of
// its client's budget and of everyone's from before it starts until its
// outcome is known (begin, then end): so however many guesses arrive at
// once, no more are checked than the budget has failures left, and a
// check that succeeds gives its slot back.
type loginThrottle struct {
	mu         sync.Mutex
	clients    map[string]*clientBudget
	all        *rate.Limiter
	pendingAll int
}

type clientBudget struct {
	lim     *rate.Limiter
	pending int
}

func newLoginThrottle() *loginThrottle {
	return &loginThrottle{clients: map[string]*clientBudget{}, all: rate.NewLimiter(rate.Every(allRefill), failuresAll)}
}

func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// begin takes a slot for a credential check by key and returns its budget: nil, and how long to
// wait, when the client (or everyone) has no failure left counting the
// checks in progress. Every budget returned must be given to end once.
func (t *loginThrottle) begin(key string) (*clientBudget, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	c, ok := t.clients[key]
	if !ok {
		if len(t.clients) >= maxTracked {
			// Bounded memory; the limit across all clients still holds.
			// Checks in progress keep the budget they began with (end is
			// given it).
			clear(t.clients)
		}
		c = &clientBudget{lim: rate.NewLimiter(rate.Every(clientRefill), failuresPerClient)}
		t.clients[key] = c
	}
	if c.lim.TokensAt(now)-float64(c.pending) < 1 {
		return nil, clientRefill
	}
	if t.all.TokensAt(now)-float64(t.pendingAll) < 1 {
		return nil, allRefill
	}
	c.pending++
	t.pendingAll++
	return c, 0
}

// end gives back the slot begin took for c, and counts a failure when
// failed. c is the budget begin returned, still counted (and its limiter
// still the address's when the map was cleared meanwhile: a failure after a
// clear counts on the budget the check began with and on everyone's).
func (t *loginThrottle) end(c *clientBudget, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pendingAll--
	c.pending = max(c.pending-1, 0)
	if failed {
		c.lim.Allow()
		t.all.Allow()
	}
}

// basicAuth guards h with HTTP basic authentication (creds), throttled by
// t. River UI has no authentication of its own and can cancel and delete
// jobs; the console replays.
//
// A login verified within the last verifiedFor (its name and password
// exactly) passes without a check and without the throttle: an operator who
// is signed in stays in while someone guesses, and each request keeps the
// login fresh. Any other request with credentials takes a throttle slot
// first, then is checked (bcrypt for --admin-users, one check at a time per
// process: a guessing storm costs at most one core and cannot starve the
// worker or /metrics).
func basicAuth(creds *credentials, h http.Handler, t *loginThrottle, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if ok && creds.verifiedRecently(u, p) {
			h.ServeHTTP(w, r)
			return
		}
		unauthorized := func() {
			w.Header().Set("WWW-Authenticate", `Basic realm="inbox admin", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
		}
		if !ok { // a browser's first request carries no credentials: not a failure
			unauthorized()
			return
		}
		budget, wait := t.begin(clientKey(r))
		if budget == nil {
			w.Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds())))
			http.Error(w, "too many failed logins; retry later", http.StatusTooManyRequests)
			return
		}
		good, err := creds.check(r.Context(), u, p)
		t.end(budget, err == nil && !good)
		switch {
		case err != nil: // the request ended while waiting for the check
			http.Error(w, "login check not done; retry", http.StatusServiceUnavailable)
		case !good:
			logger.Warn("admin: failed login", "remote", r.RemoteAddr)
			unauthorized()
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// credentials are who may sign in to River UI and the console: the one
// user of RIVER_BASIC_AUTH_USER/_PASS (compared in constant time), and
// each operator of an --admin-users file (bcrypt hashes, as htpasswd -B
// writes them), so that a replay records who did it.
type credentials struct {
	single        bool
	user, pass    [32]byte // sha256 of the single user's name and password
	users         map[string][]byte
	mu            sync.Mutex
	verified      map[[32]byte]time.Time // recent successful logins (keyed by cacheKey), until when
	key           []byte                 // cacheKey's HMAC key, random per process
	verifiedFor   time.Duration
	dummy         []byte // compared for an unknown user, so that it takes as long
	compareBcrypt func(hash, password []byte) error
	bcryptSlot    chan struct{} // one bcrypt comparison at a time per process
}

// maxUserName bounds an operator's name: "console:" + name is a replay's
// actor (admin.MaxActorLen).
const maxUserName = 192

// Bounds of the cache of verified bcrypt logins: basic auth sends the
// password with every request, and one bcrypt check costs tens of
// milliseconds of CPU.
const (
	verifiedFor = 5 * time.Minute
	maxVerified = 1000
)

// newCredentials returns the single user (when password is set) and the
// users of usersFile (when given).
func newCredentials(user, password, usersFile string) (*credentials, error) {
	c := &credentials{users: map[string][]byte{}, verified: map[[32]byte]time.Time{}, verifiedFor: verifiedFor,
		compareBcrypt: bcrypt.CompareHashAndPassword, key: make([]byte, 32), bcryptSlot: make(chan struct{}, 1)}
	if _, err := rand.Read(c.key); err != nil {
		return nil, err
	}
	if password != "" {
		c.single, c.user, c.pass = true, sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	}
	if usersFile != "" {
		users, err := readUsers(usersFile)
		if err != nil {
			return nil, err
		}
		c.users = users
		if _, both := users[user]; both && c.single {
			return nil, fmt.Errorf("--admin-users %s lists %q, the name of RIVER_BASIC_AUTH_USER (or RIVERUI_USER) too: one name, one password; rename one of them", usersFile, user)
		}
	}
	// An unknown user is compared against a hash as costly as the dearest
	// real one, so the answer's time does not tell which names exist.
	cost := bcrypt.DefaultCost
	for _, h := range c.users {
		if n, err := bcrypt.Cost(h); err == nil && n > cost {
			cost = n
		}
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("no such user"), cost)
	if err != nil {
		return nil, err
	}
	c.dummy = dummy
	return c, nil
}

// any reports whether anyone can sign in.
func (c *credentials) any() bool { return c.single || len(c.users) > 0 }

// check reports whether u and p sign in, and remembers a login that does
// (verifiedRecently). A bcrypt comparison waits for the process's one
// bcrypt slot; err is ctx's when it ended first (nothing was checked).
func (c *credentials) check(ctx context.Context, u, p string) (bool, error) {
	good := false
	if c.single {
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		good = subtle.ConstantTimeCompare(gotUser[:], c.user[:])&subtle.ConstantTimeCompare(gotPass[:], c.pass[:]) == 1
	}
	if !good && len(c.users) > 0 {
		select {
		case c.bcryptSlot <- struct{}{}:
		case <-ctx.Done():
			if c.single {
				// The single user's password was compared (and did not
				// match): that guess counts, whoever hung up.
				return false, nil
			}
			return false, ctx.Err()
		}
		hash, known := c.users[u]
		if !known {
			hash = c.dummy
		}
		good = c.compareBcrypt(hash, []byte(p)) == nil && known
		<-c.bcryptSlot
	}
	if good {
		c.remember(u, p)
	}
	return good, nil
}

// remember records u and p as verified until verifiedFor from now.
func (c *credentials) remember(u, p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.verified) >= maxVerified {
		clear(c.verified)
	}
	c.verified[c.cacheKey(u, p)] = time.Now().Add(c.verifiedFor)
}

// cacheKey is the verified-login cache's key for u and p: an HMAC under the
// process's random key over both, length-prefixed (no two pairs share one;
// the memory holds no plain hash of a password to attack).
func (c *credentials) cacheKey(u, p string) [32]byte {
	m := hmac.New(sha256.New, c.key)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(u)))
	m.Write(n[:])
	m.Write([]byte(u))
	m.Write([]byte(p))
	var k [32]byte
	copy(k[:], m.Sum(nil))
	return k
}

// verifiedRecently reports whether u and p signed in within verifiedFor
// of their last use, and keeps them signed in for verifiedFor more.
func (c *credentials) verifiedRecently(u, p string) bool {
	key := c.cacheKey(u, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.verified[key]
	now := time.Now()
	if !ok || !now.Before(until) {
		return false
	}
	c.verified[key] = now.Add(c.verifiedFor)
	return true
}

// MinBcryptCost is the cheapest bcrypt hash --admin-users accepts.
const MinBcryptCost = 10

// readUsers reads an --admin-users file: one "name:hash" a line, the hash
// bcrypt's ($2a$, $2b$ or $2y$: htpasswd -B -C 10 writes them); blank lines
// and lines starting with # are skipped. Errors name the line, never the
// hash.
func readUsers(path string) (map[string][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--admin-users: %w", err)
	}
	users := map[string][]byte{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hash, ok := strings.Cut(line, ":")
		switch {
		case !ok || name == "" || strings.TrimSpace(name) != name:
			return nil, fmt.Errorf("--admin-users %s line %d: want name:bcrypt-hash (htpasswd -B)", path, i+1)
		case !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") && !strings.HasPrefix(hash, "$2y$"):
			return nil, fmt.Errorf("--admin-users %s line %d (%s): not a bcrypt hash; only bcrypt is accepted (htpasswd -B)", path, i+1, name)
		}
		cost, err := bcrypt.Cost([]byte(hash))
		if err != nil {
			return nil, fmt.Errorf("--admin-users %s line %d (%s): not a valid bcrypt hash", path, i+1, name)
		}
		if cost < MinBcryptCost {
			return nil, fmt.Errorf("--admin-users %s line %d (%s): bcrypt cost %d is too cheap to guess against: at least %d (htpasswd -B -C %d)", path, i+1, name, cost, MinBcryptCost, MinBcryptCost)
		}
		if len(name) > maxUserName || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
			return nil, fmt.Errorf("--admin-users %s line %d: a name is at most %d printable characters without spaces", path, i+1, maxUserName)
		}
		if _, dup := users[name]; dup {
			return nil, fmt.Errorf("--admin-users %s line %d: %s is listed twice", path, i+1, name)
		}
		users[name] = []byte(hash)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("--admin-users %s: no user in it", path)
	}
	return users, nil
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
