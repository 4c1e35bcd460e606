package provider

import "strings"

// MinKeyBytes is the shortest HMAC key that WeakSecrets does not report:
// 128 bits. Providers generate far longer ones (Stripe: "whsec_" and 32
// characters; Standard Webhooks: 24 to 64 random bytes); a shorter key is
// nearly always a placeholder or a test value that reached production.
const MinKeyBytes = 16

// WeakSecrets returns, for each secret whose key material is shorter than
// MinKeyBytes, its 1-based position and key length in bytes. Key material is
// what the provider's HMAC uses, less any "whsec_" prefix (which every
// Stripe and Standard secret shares): for Standard Webhooks the decoded
// bytes. Secrets the verifier would refuse are skipped (New reports them).
// It never returns any part of a secret.
func WeakSecrets(provider string, secrets []string) (positions, lengths []int) {
	for i, s := range secrets {
		n := len(strings.TrimPrefix(s, standardSecretPrefix))
		if provider == Standard {
			k, err := standardKey(s)
			if err != nil {
				continue
			}
			n = len(k)
		}
		if n < MinKeyBytes {
			positions, lengths = append(positions, i+1), append(lengths, n)
		}
	}
	return positions, lengths
}
