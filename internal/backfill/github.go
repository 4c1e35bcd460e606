package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// GitHubAPIURL is GitHub's REST API base URL.
const GitHubAPIURL = "https://api.github.com"

// GitHubClient lists a repository webhook's deliveries and asks for
// redeliveries. It is safe for concurrent use.
type GitHubClient struct {
	base   string
	token  string
	repo   string
	hookID int64
	http   *httpDoer
}

// NewGitHubClient returns a client for repo's ("owner/name") hook hookID at
// base (GitHubAPIURL when empty); a repo with no "/" names an organization,
// whose hooks are under /orgs/{org}/hooks.
func NewGitHubClient(base, token, repo string, hookID int64, opts ClientOptions) *GitHubClient {
	return &GitHubClient{
		base:   strings.TrimSuffix(cmp.Or(base, GitHubAPIURL), "/"),
		token:  token,
		repo:   repo,
		hookID: hookID,
		http:   newDoer(opts, token, decodeGitHubError),
	}
}

// GitHubDelivery is one attempt of GitHub's to deliver an event to the
// hook, as GET .../hooks/{hook_id}/deliveries lists it.
type GitHubDelivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	Redelivery  bool      `json:"redelivery"`
	Status      string    `json:"status"`
	StatusCode  int       `json:"status_code"`
	Event       string    `json:"event"`
	Action      *string   `json:"action"`
}

// OK reports whether the attempt was answered 2xx.
func (d GitHubDelivery) OK() bool { return d.StatusCode >= 200 && d.StatusCode < 300 }

func (c *GitHubClient) hookPath() string {
	owner, name, ok := strings.Cut(c.repo, "/")
	if !ok {
		return fmt.Sprintf("/orgs/%s/hooks/%d/deliveries", url.PathEscape(c.repo), c.hookID)
	}
	return fmt.Sprintf("/repos/%s/%s/hooks/%d/deliveries", url.PathEscape(owner), url.PathEscape(name), c.hookID)
}

func (c *GitHubClient) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "inbox-backfill")
	return req, nil
}

// ListDeliveries returns one page of the hook's deliveries, newest first,
// after cursor (empty: the first page), and the cursor of the next page
// (empty: none), taken from the Link header's rel="next". The next page is
// always asked of this client's base URL, so the token goes nowhere else.
func (c *GitHubClient) ListDeliveries(ctx context.Context, cursor string) ([]GitHubDelivery, string, error) {
	q := url.Values{}
	q.Set("per_page", "100")
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	u := c.base + c.hookPath() + "?" + q.Encode()
	h, body, err := c.http.do(ctx, func(ctx context.Context) (*http.Request, error) { return c.request(ctx, http.MethodGet, u) })
	if err != nil {
		return nil, "", fmt.Errorf("list GitHub hook deliveries: %w", err)
	}
	var page []GitHubDelivery
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, "", fmt.Errorf("list GitHub hook deliveries: the answer is not a list of deliveries")
	}
	return page, nextCursor(h.Values("Link")), nil
}

// Redeliver asks GitHub to deliver the delivery id again (POST
// .../deliveries/{id}/attempts, answered 202). The redelivery carries the
// same X-GitHub-Delivery GUID.
func (c *GitHubClient) Redeliver(ctx context.Context, id int64) error {
	u := c.base + c.hookPath() + "/" + strconv.FormatInt(id, 10) + "/attempts"
	_, _, err := c.http.do(ctx, func(ctx context.Context) (*http.Request, error) { return c.request(ctx, http.MethodPost, u) })
	if err != nil {
		return fmt.Errorf("redeliver GitHub delivery %d: %w", id, err)
	}
	return nil
}

// nextCursor returns the cursor query parameter of the Link header's
// rel="next" URL (empty when there is none).
func nextCursor(links []string) string {
	for _, header := range links {
		for link := range strings.SplitSeq(header, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(link), ";")
			if !ok || !strings.Contains(strings.ReplaceAll(params, " ", ""), `rel="next"`) {
				continue
			}
			u, err := url.Parse(strings.Trim(strings.TrimSpace(target), "<>"))
			if err != nil {
				continue
			}
			return u.Query().Get("cursor")
		}
	}
	return ""
}

func decodeGitHubError(status int, body []byte) *APIError {
	e := &APIError{Provider: "GitHub", Status: status}
	var b struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &b) == nil {
		e.Message = b.Message
	}
	return e
}
