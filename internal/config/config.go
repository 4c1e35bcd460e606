// Package config loads the sources file: which webhook sources exist, their
// provider, secrets and limits. ${VAR} in any value expands from the
// environment, so secrets stay out of the file. It must not import other
// packages of this module except provider.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inboxhq/inbox/internal/provider"
)

// DefaultMaxBodyBytes is the body limit of a source that sets none (1 MiB).
const DefaultMaxBodyBytes int64 = 1 << 20

// Config is the parsed sources file.
type Config struct {
	Sources map[string]*Source `yaml:"sources"`
}

// Source is one configured webhook endpoint, served at POST /webhooks/{Name}.
type Source struct {
	Name     string   `yaml:"-"`
	Provider string   `yaml:"provider"`
	Secrets  []string `yaml:"secrets"`
	// Tolerance bounds the age (and future skew) of a signed timestamp.
	Tolerance time.Duration `yaml:"tolerance"`
	// MaxBodyBytes overrides DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxAttempts is how many times processing is tried before the envelope
	// fails; 0 means the worker's default.
	MaxAttempts int `yaml:"max_attempts"`
}

var (
	sourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	varRef     = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// Load reads and validates the sources file at path. getenv resolves ${VAR}
// references (os.Getenv when nil); a reference to an unset or empty variable
// is an error naming the variable, never its value.
func Load(path string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(b, getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse is Load on bytes.
func Parse(b []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	if err := expand(&root, getenv); err != nil {
		return nil, err
	}
	// Decode the expanded tree strictly, so a misspelt key is an error.
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("re-encode YAML: %w", err)
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if len(cfg.Sources) == 0 {
		return nil, errors.New("no sources configured")
	}
	for _, name := range cfg.Names() {
		s := cfg.Sources[name]
		if s == nil {
			return nil, fmt.Errorf("source %q: empty definition", name)
		}
		s.Name = name
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
	}
	return &cfg, nil
}

// Names returns the source names, sorted.
func (c *Config) Names() []string {
	names := make([]string, 0, len(c.Sources))
	for n := range c.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *Source) validate() error {
	if !sourceName.MatchString(s.Name) {
		return errors.New("name must be 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit")
	}
	if s.Tolerance < 0 {
		return errors.New("tolerance must not be negative")
	}
	if s.MaxBodyBytes < 0 {
		return errors.New("max_body_bytes must not be negative")
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.MaxAttempts < 0 {
		return errors.New("max_attempts must not be negative")
	}
	// provider.New checks the provider name and the secrets.
	if _, err := s.Verifier(); err != nil {
		return err
	}
	return nil
}

// Verifier builds the source's signature verifier.
func (s *Source) Verifier() (provider.Verifier, error) {
	return provider.New(provider.Config{Provider: s.Provider, Secrets: s.Secrets, Tolerance: s.Tolerance})
}

func expand(n *yaml.Node, getenv func(string) string) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing []string
		n.Value = varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v := getenv(name)
			if v == "" {
				missing = append(missing, name)
			}
			return v
		})
		if len(missing) > 0 {
			return fmt.Errorf("line %d: environment variable %s is not set", n.Line, strings.Join(missing, ", "))
		}
		// An expanded value is data, never YAML syntax: keep it a string.
		if n.Tag == "" || n.Tag == "!!str" || n.Style != 0 {
			n.Style = yaml.DoubleQuotedStyle
		}
	}
	for _, c := range n.Content {
		if err := expand(c, getenv); err != nil {
			return err
		}
	}
	return nil
}
