package provider

import (
	"errors"
	"fmt"
	"strings"
)

// MinKeyBytes is the least key material a configured secret may carry:
// 128 bits. Providers generate far longer ones (Stripe: "whsec_" and 32
// characters; Standard Webhooks: 24 to 64 random bytes); a shorter key is a
// placeholder or a test value, and can be recovered offline from one
// captured signature (a 1-byte secret was, in the issue-22 probe).
// MinKeyDistinct is the fewest distinct bytes it may have: a repeated
// pattern is guessed at once.
const (
	MinKeyBytes    = 16
	MinKeyDistinct = 8
)

// CheckKeyStrength refuses a secret too weak to keep forgers out: key
// material (what the provider's HMAC uses, less the public "whsec_" prefix;
// for Standard Webhooks the decoded bytes) that is empty, shorter than
// MinKeyBytes or with fewer than MinKeyDistinct distinct bytes. A secret the
// verifier refuses anyway (not base64) is New's to report: nil here. The
// error completes "secret N ..." and never quotes any part of the secret.
func CheckKeyStrength(provider, secret string) error {
	key := []byte(strings.TrimPrefix(secret, standardSecretPrefix))
	if provider == Standard {
		k, err := standardKey(secret)
		if err != nil {
			return nil
		}
		key = k
	}
	if len(key) == 0 {
		return errors.New("has no key after its whsec_ prefix: whsec_ alone signs with an empty, public key")
	}
	if len(key) < MinKeyBytes {
		return fmt.Errorf("has a %d-byte key: at least %d (use the secret the provider generated, or 32 random bytes)", len(key), MinKeyBytes)
	}
	distinct := map[byte]bool{}
	for _, b := range key {
		distinct[b] = true
	}
	if len(distinct) < MinKeyDistinct {
		return fmt.Errorf("has %d distinct characters: at least %d (a repeated pattern is guessed at once)", len(distinct), MinKeyDistinct)
	}
	return nil
}
