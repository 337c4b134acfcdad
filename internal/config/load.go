package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/switchyard/switchyard/internal/tomlpos"
)

// Source is where a Config comes from. Later sources override earlier
// ones: defaults, then the file, then the environment, then flags.
type Source struct {
	// Path is the TOML file; "" starts from the defaults alone.
	Path string
	// Env is the environment as os.Environ returns it; nil means the
	// process's own.
	Env []string
	// Flags are command-line settings, applied in order.
	Flags []Setting
}

// Setting is one flag's value for a key.
type Setting struct {
	Key   string // "section.key", e.g. "listen.proxy"
	Value string // as typed; lists are comma-separated
	Flag  string // the flag's name, for messages, e.g. "listen"
}

// Error is a configuration mistake: the key, and where the value came from.
type Error struct {
	File string // the config file, when the value came from it
	Line int    // its line, when known
	From string // "environment variable X" or "flag --x", when from there
	Key  string // "engine.alpha", "targets[2].rate"
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	}
	b.WriteString(e.Key)
	if e.From != "" {
		fmt.Fprintf(&b, " (%s)", e.From)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return oneLine(b.String())
}

// oneLine escapes the control characters a message may quote from the
// input (a key or value holding a newline), so it stays one log line.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// maxConfigFile bounds a config file; proxy lists go in routes.file.
const maxConfigFile = 4 << 20

// Load reads, overrides, resolves and validates a configuration. The first
// mistake found is returned as an *Error (a malformed proxy list as the
// route parser's "file:line: reason").
func Load(src Source) (*Config, error) {
	var data []byte
	if src.Path != "" {
		var err error
		if data, err = readRegular(src.Path, maxConfigFile); err != nil {
			return nil, fmt.Errorf("%s: %w", src.Path, err)
		}
	}
	return load(src, data)
}

// load is Load with the file's content read already.
func load(src Source, data []byte) (*Config, error) {
	c := Default()
	env := src.Env
	if env == nil {
		env = os.Environ()
	}
	l := &loader{c: &c, env: make(map[string]string, len(env))}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			l.env[k] = v
		}
	}
	if src.Path != "" {
		if err := l.decode(src.Path, data); err != nil {
			return nil, err
		}
	}
	if err := l.applyEnv(); err != nil {
		return nil, err
	}
	for _, s := range src.Flags {
		if err := l.set(s.Key, s.Value, "flag --"+s.Flag); err != nil {
			return nil, err
		}
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// loader holds what Load needs to name the origin of a bad value.
type loader struct {
	c     *Config
	env   map[string]string
	file  string         // as given; "" without a file
	lines *tomlpos.Index // where the file defines each key, once it decoded
	// fromFile are the keys the file set, so an error about a key the
	// environment or a flag did not override can cite its line.
	fromFile map[string]bool
	// overridden are the keys set by the environment or a flag, and by
	// which.
	overridden map[string]string
}

// decode reads the file's settings over the defaults.
func (l *loader) decode(path string, data []byte) error {
	l.file = path
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(l.c)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return &Error{File: path, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
		}
		// Type mismatches come as text: "toml: line N (last key "k"): msg".
		if m := decodeError.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return &Error{File: path, Line: line, Key: m[2], Msg: m[3]}
		}
		return errors.New(oneLine(path + ": " + strings.TrimPrefix(err.Error(), "toml: ")))
	}
	l.lines = tomlpos.Scan(data)
	l.fromFile = make(map[string]bool)
	for _, k := range md.Keys() {
		l.fromFile[keyPath(md, k)] = true
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		k := undecoded[0]
		if t := md.Type(k...); t == "Hash" || t == "ArrayHash" {
			// A table nothing reads: a misspelt [section] (its keys are
			// undecoded too, but the header is the mistake).
			_, line := l.lines.First(k)
			return &Error{File: path, Line: line, Key: k.String(), Msg: "unknown section"}
		}
		return l.errAt(keyPath(md, k), "unknown key")
	}
	l.warnLiteralSecrets()
	// Files named in the config file are relative to it.
	for _, f := range []*string{&l.c.Routes.File, &l.c.MITM.CACert, &l.c.MITM.CAKey, &l.c.MITM.UpstreamCA, &l.c.Pacing.LearnedFile} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(filepath.Dir(path), *f)
		}
	}
	if md.IsDefined("mitm", "state_dir") && !filepath.IsAbs(l.c.MITM.StateDir) {
		l.c.MITM.StateDir = filepath.Join(filepath.Dir(path), l.c.MITM.StateDir)
	}
	return nil
}

// warnLiteralSecrets warns of each secret the file holds as is: whoever
// can read the file, or a copy of it in a repository or a backup, has it.
// A reference keeps the secret out of the file. A bcrypt hash is no
// secret, and what the environment or a flag sets is not in the file.
func (l *loader) warnLiteralSecrets() {
	warn := func(key string, s Secret, instead string) {
		if s.literal() && l.fromFile[wildIndex(key)] {
			l.c.Warnings = append(l.c.Warnings, fmt.Sprintf("%s:%d: %s is written in the file as is, where anyone who can read the file has it: use %s",
				l.file, l.line(key), strings.Replace(key, "[?]", "", 1), instead))
		}
	}
	warn("admin.token", l.c.Admin.Token, `"env:NAME" or "file:PATH", or set SWITCHYARD_ADMIN_TOKEN`)
	warn("cluster.secret", l.c.Cluster.Secret, `"env:NAME" or "file:PATH", or set SWITCHYARD_CLUSTER_SECRET`)
	for i, u := range l.c.Users {
		warn(fmt.Sprintf("users[%d].password", i+1), u.Password, `password_hash (htpasswd -nbB), "env:NAME" or "file:PATH"`)
	}
}

var decodeError = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// keyPath spells a decoded key as errors do: an array-of-tables element
// gets its 1-based index, "users[2].name".
func keyPath(md toml.MetaData, k toml.Key) string {
	if len(k) >= 2 && md.Type(k[0]) == "ArrayHash" {
		return fmt.Sprintf("%s[?].%s", k[0], strings.Join(k[1:], "."))
	}
	return k.String()
}

// errAt makes an Error for key, citing where its value came from: the
// environment or a flag that set it, else the file's line. A key of an
// array of tables may say "[?]" for "whichever element".
func (l *loader) errAt(key, msg string) *Error {
	e := &Error{Key: strings.Replace(key, "[?]", "", 1), Msg: msg}
	if from, ok := l.overridden[key]; ok {
		e.From = from
	} else if l.fromFile[wildIndex(key)] {
		e.File, e.Line = l.file, l.line(key)
	}
	return e
}

// wildIndex turns "users[2].name" into "users[?].name", the form the
// decoder's key list has.
func wildIndex(key string) string {
	open, close := strings.IndexByte(key, '['), strings.IndexByte(key, ']')
	if open < 0 || close < open {
		return key
	}
	return key[:open] + "[?]" + key[close+1:]
}

// line finds key's line in the file, 0 when it cannot. Keys name an
// element of an array of tables as messages do, counting from 1
// ("targets[2].rate"), or as "[?]", the first element that has the key.
func (l *loader) line(key string) int {
	head, rest, indexed := strings.Cut(key, "[")
	if !indexed {
		return l.lines.Line(key)
	}
	index, tail, _ := strings.Cut(rest, "]")
	if index == "?" {
		_, line := l.lines.First(strings.Split(head+tail, "."))
		return line
	}
	n, _ := strconv.Atoi(index)
	return l.lines.Line(fmt.Sprintf("%s[%d]%s", head, n-1, tail))
}

// toolVariables are the SWITCHYARD_ variables that are not settings, and
// that the gateway therefore leaves alone: the quick-start user list, and
// the ones the project's tests and benchmarks read, which a gateway they
// start may inherit.
var toolVariables = []string{"SWITCHYARD_USERS", "SWITCHYARD_SOAK", "SWITCHYARD_TEST_*", "SWITCHYARD_LIVEBENCH_*"}

// isToolVariable reports whether name is one of toolVariables.
func isToolVariable(name string) bool {
	for _, v := range toolVariables {
		if prefix, ok := strings.CutSuffix(v, "*"); ok && strings.HasPrefix(name, prefix) || name == v {
			return true
		}
	}
	return false
}

// applyEnv applies SWITCHYARD_<SECTION>_<KEY> for every settable key, and
// refuses any other SWITCHYARD_ variable, whether it names a section but
// no key of it or no section at all, unless it is one of toolVariables: a
// typo must not go unnoticed. SWITCHYARD_USERS is the quick-start user
// list.
func (l *loader) applyEnv() error {
	known := map[string]bool{}
	for _, key := range settableKeys() {
		name := EnvName(key)
		known[name] = true
		if v, ok := l.env[name]; ok {
			if err := l.set(key, v, "environment variable "+name); err != nil {
				return err
			}
		}
	}
	// SWITCHYARD_NODE_ID names the node (docs/design/013-cluster.md):
	// one config serves every node, each given its id in its
	// environment, so it wins over cluster.node_id from anywhere.
	known[nodeIDVariable] = true
	if v, ok := l.env[nodeIDVariable]; ok {
		if err := l.set("cluster.node_id", v, "environment variable "+nodeIDVariable); err != nil {
			return err
		}
	}
	var unknown []string
	for name := range l.env {
		if !known[name] && strings.HasPrefix(name, "SWITCHYARD_") && !isToolVariable(name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown) // the same one named every time
		name := unknown[0]
		msg := "no such setting (see switchyard.example.toml)"
		if !slices.ContainsFunc(sections(), func(section string) bool { return strings.HasPrefix(name, EnvName(section)+"_") }) {
			msg = "no such section (see switchyard.example.toml)"
		}
		return &Error{Key: strings.ToLower(strings.TrimPrefix(name, "SWITCHYARD_")), From: "environment variable " + name, Msg: msg}
	}
	if v, ok := l.env["SWITCHYARD_USERS"]; ok {
		users, err := parseEnvUsers(v)
		if err != nil {
			return err
		}
		l.c.Users = append(l.c.Users, users...)
	}
	return nil
}

// nodeIDVariable overrides cluster.node_id (and
// SWITCHYARD_CLUSTER_NODE_ID).
const nodeIDVariable = "SWITCHYARD_NODE_ID"

// EnvName is the variable that overrides key: "listen.proxy" is
// SWITCHYARD_LISTEN_PROXY.
func EnvName(key string) string {
	return "SWITCHYARD_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// sections are the tables whose keys the environment and flags may set.
func sections() []string {
	var out []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type.Kind() == reflect.Struct {
			out = append(out, f.Tag.Get("toml"))
		}
	}
	return out
}

// settableKeys are "section.key" for every scalar or list key of a section.
func settableKeys() []string {
	var out []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Type.Kind() != reflect.Struct {
			continue
		}
		for j := range sf.Type.NumField() {
			f := sf.Type.Field(j)
			if f.Type.Kind() == reflect.Map || f.Tag.Get("toml") == "-" {
				continue
			}
			out = append(out, sf.Tag.Get("toml")+"."+f.Tag.Get("toml"))
		}
	}
	return out
}

// set parses value into key, as the environment or a flag gives it.
func (l *loader) set(key, value, from string) error {
	section, name, _ := strings.Cut(key, ".")
	fail := func(msg string) error { return &Error{Key: key, From: from, Msg: msg} }
	s := fieldByTag(reflect.ValueOf(l.c).Elem(), section)
	if !s.IsValid() || s.Kind() != reflect.Struct {
		return fail("no such setting")
	}
	f := fieldByTag(s, name)
	if !f.IsValid() {
		return fail("no such setting")
	}
	if l.overridden == nil {
		l.overridden = make(map[string]string)
	}
	l.overridden[key] = from
	switch v := f.Addr().Interface().(type) {
	case *time.Duration:
		d, err := time.ParseDuration(value)
		if err != nil {
			return fail(fmt.Sprintf("%q is not a duration (e.g. 30s, 5m)", value))
		}
		f.SetInt(int64(d))
		return nil
	case *Secret:
		f.Set(reflect.ValueOf(LiteralSecret(value)))
		return nil
	case **bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fail(fmt.Sprintf("%q is not true or false", value))
		}
		f.Set(reflect.ValueOf(&b))
		return nil
	case encoding.TextUnmarshaler:
		if err := v.UnmarshalText([]byte(value)); err != nil {
			return fail(err.Error())
		}
		return nil
	case *[]string:
		var list []string
		for item := range strings.SplitSeq(value, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		f.Set(reflect.ValueOf(list))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(value)
	case reflect.Bool:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fail(fmt.Sprintf("%q is not true or false", value))
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return fail(fmt.Sprintf("%q is not an integer", value))
		}
		f.SetInt(n)
	case reflect.Float64:
		x, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return fail(fmt.Sprintf("%q is not a number", value))
		}
		f.SetFloat(x)
	default:
		return fail("cannot be set from " + from)
	}
	return nil
}

// fieldByTag is the field of struct v whose toml tag is name.
func fieldByTag(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("toml") == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}
