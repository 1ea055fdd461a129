package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFileName is the default http.token_file, beside the database.
const TokenFileName = "mcptrail.token"

// DefaultTokenFile is where the token lives when http.token_file is not set.
func DefaultTokenFile(databasePath string) string {
	return filepath.Join(filepath.Dir(databasePath), TokenFileName)
}

// minTokenLen keeps a configured token from being guessable by brute force.
const minTokenLen = 16

// CheckToken refuses a configured token too short to be a secret.
func CheckToken(token string) error {
	if token != "" && len(token) < minTokenLen {
		return fmt.Errorf("http.token has %d characters: use at least %d random ones (or leave it empty: serve then generates one into http.token_file)", len(token), minTokenLen)
	}
	return nil
}

// ReadToken reads the token from a file written by LoadOrCreateToken
// (http.token_file).
func ReadToken(path string) (string, error) { return ReadTokenFile(path, "http.token_file") }

// ReadTokenFile reads the token from a file written by LoadOrCreateTokenFile;
// key names the setting in errors.
func ReadTokenFile(path, key string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%s %s is empty", key, path)
	}
	if len(token) < minTokenLen {
		return "", fmt.Errorf("%s %s holds %d characters: put at least %d random ones in it (or remove it: serve then generates one)", key, path, len(token), minTokenLen)
	}
	return token, nil
}

// LoadOrCreateToken is LoadOrCreateTokenFile for http.token_file.
func LoadOrCreateToken(path string) (token string, created bool, err error) {
	return LoadOrCreateTokenFile(path, "http.token_file")
}

// LoadOrCreateTokenFile returns the token in path, generating it at first
// start: 32 random bytes in hex, in a file only its owner can read (0600).
// A file that others may read is refused rather than used. key names the
// setting in errors.
func LoadOrCreateTokenFile(path, key string) (token string, created bool, err error) {
	if st, err := os.Stat(path); err == nil {
		if st.Mode().Perm()&0o077 != 0 {
			return "", false, fmt.Errorf("%s %s has mode %v: others can read the token; chmod 600 it (or remove it to have a new one generated)", key, path, st.Mode().Perm())
		}
		token, err := ReadTokenFile(path, key)
		if err != nil {
			return "", false, err
		}
		return token, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("%s %s: %w", key, path, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", false, fmt.Errorf("generate a token for %s: %w", key, err)
	}
	token = hex.EncodeToString(raw[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("%s %s: %w", key, path, err)
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("%s %s: %w", key, path, err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("%s %s: %w", key, path, err)
	}
	return token, true, nil
}

// proofLabel and boundProofLabel separate the proofs' HMACs from each other
// and from any other use of the token: an HTTP hello's challenge can never
// be made to yield a shard's bound proof.
const (
	proofLabel      = "mcptrail api v1 http proof\x00"
	boundProofLabel = "mcptrail api v1 bound proof\x00"
)

// Proof is what a daemon holding token answers to a client's challenge on
// a connection it accepted at addr (its local address, host:port): an
// HMAC-SHA256 of the challenge and addr keyed with the token. A process
// squatting on http.listen cannot compute it, so the CLI never sends it
// the token; nor can it relay the challenge to a daemon that holds the
// token elsewhere (a shard, another port), whose proof names that
// daemon's address, not the one the CLI dialed.
func Proof(token string, challenge []byte, addr string) string {
	return tokenMAC(token, []byte(proofLabel), challenge, []byte{0}, []byte(addr))
}

// ProofFor is Proof bound to whom the client asked: the subject of a NATS
// shard's hello. A program that may answer on one shard's subject but lacks
// the token cannot pass off another shard's proof as its own by relaying the
// challenge: that proof names the other shard's subject.
func ProofFor(token string, challenge []byte, addressee string) string {
	return tokenMAC(token, []byte(boundProofLabel), challenge, []byte{0}, []byte(addressee))
}

// tokenMAC is the hex HMAC-SHA256, keyed with token, of parts in order.
func tokenMAC(token string, parts ...[]byte) string {
	m := hmac.New(sha256.New, []byte(token))
	for _, p := range parts {
		m.Write(p)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// checkProof compares in constant time.
func checkProof(token string, challenge []byte, addr, proof string) bool {
	want := Proof(token, challenge, addr)
	return hmac.Equal([]byte(want), []byte(proof))
}
