package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	yamlv3 "go.yaml.in/yaml/v3"
)

// The settings of fence serve come from its flags, $FENCE_<FLAG> (the flag's
// name in capitals, dashes as underscores: FENCE_GRPC_ADDR) and a YAML config
// file (--config or $FENCE_CONFIG; keys are the flag names: grpc-addr), in
// that order of precedence, over the defaults. Every serve flag can be set
// each way. The file is read with koanf (github.com/knadh/koanf/v2): a small,
// modular library with no global state, that keeps each source apart —
// unlike viper, whose single registry lowercases keys and merges sources so
// that where a value came from is lost, which --print-config must show.

// settingSource is where a setting's value came from.
type settingSource string

const (
	fromDefault settingSource = "default"
	fromFlag    settingSource = "flag"
)

// configFlags are serve's own flags about its configuration, which no
// source other than the command line sets.
var configFlags = []string{"config", "print-config", "help"}

// settings are the flags a config file or the environment may set: serve's
// own, and the root's that serve uses (its offline mark).
func settings(cmd *cobra.Command) []*pflag.Flag {
	var out []*pflag.Flag
	uses := strings.Split(cmd.Annotations[offlineUses], ",")
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		inherited := cmd.InheritedFlags().Lookup(f.Name) != nil
		if slices.Contains(configFlags, f.Name) || inherited && !slices.Contains(uses, f.Name) {
			return
		}
		out = append(out, f)
	})
	return out
}

// envName is the environment variable of a setting.
func envName(flag string) string {
	return "FENCE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyConfig fills every setting the command line did not set from the
// environment (lookup), then from the config file path ("" for none), and
// returns where each setting's value came from. It collects every problem
// (an unreadable file, a key that is no setting, a value a flag refuses)
// and returns them all at once.
func applyConfig(cmd *cobra.Command, path string, lookup func(string) (string, bool)) (map[string]settingSource, error) {
	var errs []error
	k := koanf.New(".")
	if path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			errs = append(errs, fmt.Errorf("config file %s: %w", path, err))
		}
	}
	all := settings(cmd)
	known := map[string]bool{}
	for _, f := range all {
		known[f.Name] = true
	}
	for _, key := range k.Keys() {
		if !known[key] {
			errs = append(errs, fmt.Errorf("config file %s: %q is not a setting of fence serve (the keys are its flag names: see 'fence serve --help')", path, key))
		}
	}
	from := map[string]settingSource{}
	for _, f := range all {
		from[f.Name] = fromDefault
		if f.Changed {
			from[f.Name] = fromFlag
			continue
		}
		if v, ok := lookup(envName(f.Name)); ok {
			if err := set(cmd.Flags(), f, v); err != nil {
				errs = append(errs, fmt.Errorf("$%s=%q: %w", envName(f.Name), v, err))
			}
			from[f.Name] = settingSource("env " + envName(f.Name))
			continue
		}
		if !k.Exists(f.Name) {
			continue
		}
		v, err := fileValue(k.Get(f.Name))
		if err == nil {
			err = set(cmd.Flags(), f, v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("config file %s: %s: %w", path, f.Name, err))
		}
		from[f.Name] = settingSource("file " + path)
	}
	return from, errors.Join(errs...)
}

// set sets flag f to v, or leaves its value as it was if v does not parse
// (pflag zeroes some values before it reports the error), so that the
// checks after it judge the other settings, not a zero left behind.
func set(fs *pflag.FlagSet, f *pflag.Flag, v string) error {
	before := f.Value.String()
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		old := sv.GetSlice()
		if v == "" {
			return sv.Replace(nil)
		}
		if err := fs.Set(f.Name, v); err != nil {
			_ = sv.Replace(old)
			return err
		}
		return nil
	}
	if err := fs.Set(f.Name, v); err != nil {
		_ = f.Value.Set(before)
		return err
	}
	return nil
}

// fileValue is a config file's value as the flag's text: a scalar as
// written, a list (join, bootstrap) joined with commas.
func fileValue(v any) (string, error) {
	switch v := v.(type) {
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := fileValue(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return "", errors.New("a value, not a section")
	case nil:
		return "", nil
	}
	return fmt.Sprint(v), nil
}

// printConfig writes the effective settings as a YAML config file, each
// with where its value came from.
func printConfig(w io.Writer, cmd *cobra.Command, from map[string]settingSource) error {
	for _, f := range settings(cmd) {
		if f.Deprecated != "" {
			continue
		}
		v := f.Value.String()
		switch sv, slice := f.Value.(pflag.SliceValue); {
		case slice:
			v = quoteYAML(strings.Join(sv.GetSlice(), ","))
		case !slices.Contains([]string{"bool", "int", "uint64"}, f.Value.Type()): // those print as YAML scalars of their type
			v = quoteYAML(v)
		}
		if _, err := fmt.Fprintf(w, "%s: %s  # %s\n", f.Name, v, from[f.Name]); err != nil {
			return err
		}
	}
	return nil
}

// quoteYAML is s as a YAML scalar that reads back as the string s.
func quoteYAML(s string) string {
	b, err := yamlv3.Marshal(s)
	if err != nil { // a string always marshals
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSpace(string(b))
}
