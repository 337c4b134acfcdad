package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Secret is a value that must never be printed: a password or token. In a
// file it is written as a reference, "env:NAME" (an environment variable)
// or "file:PATH" (the file's content, trailing newline dropped), or, for
// quick tests only, literally. It marshals as its reference, or "***" when
// literal, so printing a Config cannot leak it.
type Secret struct {
	ref   string // as written: "env:NAME", "file:PATH" or the literal
	value string // resolved
}

// Value is the secret itself; "" when unset.
func (s Secret) Value() string { return s.value }

// IsSet reports whether a value was given.
func (s Secret) IsSet() bool { return s.ref != "" }

// literal reports whether s is written as the secret itself rather than
// a reference to it.
func (s Secret) literal() bool {
	return s.ref != "" && !strings.HasPrefix(s.ref, "env:") && !strings.HasPrefix(s.ref, "file:")
}

// LiteralSecret is a Secret given as is: from the environment, a flag or
// a program.
func LiteralSecret(v string) Secret { return Secret{ref: v, value: v} }

// UnmarshalText keeps the reference; resolve reads it.
func (s *Secret) UnmarshalText(b []byte) error {
	*s = Secret{ref: string(b)}
	return nil
}

// MarshalText prints the reference, never the secret.
func (s Secret) MarshalText() ([]byte, error) {
	switch {
	case s.ref == "":
		return []byte{}, nil
	case strings.HasPrefix(s.ref, "env:"), strings.HasPrefix(s.ref, "file:"):
		return []byte(s.ref), nil
	default:
		return []byte("***"), nil
	}
}

// String is MarshalText's, so %v and %s are safe too.
func (s Secret) String() string {
	b, _ := s.MarshalText()
	return string(b)
}

// resolve reads the referenced value. A reference to nothing is an error:
// a deployment that names a secret must have it.
func (s *Secret) resolve(env func(string) (string, bool)) error {
	switch {
	case s.ref == "":
		return nil
	case strings.HasPrefix(s.ref, "env:"):
		name := strings.TrimPrefix(s.ref, "env:")
		v, ok := env(name)
		if !ok || v == "" {
			return fmt.Errorf("environment variable %s is not set", name)
		}
		s.value = v
	case strings.HasPrefix(s.ref, "file:"):
		path := strings.TrimPrefix(s.ref, "file:")
		b, err := readRegular(path, maxSecretFile)
		if err != nil {
			// The error names the path, never the content.
			return fmt.Errorf("cannot read %s: %v", path, err)
		}
		s.value = strings.TrimRight(string(b), "\r\n")
		if s.value == "" {
			return fmt.Errorf("%s is empty", path)
		}
	default:
		s.value = s.ref
	}
	return nil
}

// maxSecretFile bounds a secret file: no password or token is longer.
const maxSecretFile = 64 << 10

// readRegular reads a regular file of at most limit bytes: a reference to
// a device such as /dev/zero, or a FIFO, must not hang start-up.
func readRegular(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, errReason(err)
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > limit:
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errReason(err)
	}
	return b, nil
}

// errReason is err without the path an *os.PathError repeats.
func errReason(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
