package outdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"sparkconv/infile"
)

// Owner recognises an existing output that sparkconv itself wrote: nil
// when path is one, else an error saying what it is instead. --force
// replaces only what an Owner accepts.
type Owner func(path string) error

// markerMax caps the JSON file SparkconvJSON reads: every report
// sparkconv writes is far smaller.
const markerMax = 4 << 20

// SparkconvJSON is the Owner of a JSON file that names sparkconv as its
// writer (a build's sparkconv-report.json).
func SparkconvJSON(path string) error {
	data, err := infile.ReadFile(path, markerMax)
	if err != nil {
		return err
	}
	if !namesSparkconv(data) {
		return errors.New("a JSON object that does not name sparkconv as its writer")
	}
	return nil
}

// namesSparkconv reports whether data is a JSON object that names
// sparkconv as its writer.
func namesSparkconv(data []byte) bool {
	var doc map[string]json.RawMessage
	if json.Unmarshal(data, &doc) != nil {
		return false
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(doc[k], &s)
		return s
	}
	return str("tool") == "sparkconv" || str("producer") == "sparkconv" || strings.HasPrefix(str("format"), "sparkconv")
}

// AnyOwner accepts what any of owners accepts.
func AnyOwner(owners ...Owner) Owner {
	return func(path string) error {
		var errs []string
		for _, o := range owners {
			err := o(path)
			if err == nil {
				return nil
			}
			errs = append(errs, err.Error())
		}
		return errors.New(strings.Join(errs, "; "))
	}
}

// checkReplace refuses to replace target (which exists) unless it is of
// the kind wanted (a folder or a regular file, never a symbolic link or a
// device) and owner recognises it as sparkconv's.
func checkReplace(target string, wantDir bool, owner Owner) error {
	st, err := os.Lstat(target)
	if err != nil {
		return err
	}
	kind := ""
	switch m := st.Mode(); {
	case m&os.ModeSymlink != 0:
		kind = "a symbolic link"
	case wantDir && !m.IsDir():
		kind = "a file, not a folder"
	case !wantDir && m.IsDir():
		kind = "a folder, not a file"
	case !m.IsDir() && !m.IsRegular():
		kind = "not a regular file"
	}
	if kind == "" && owner == nil {
		kind = "not an output this command replaces"
	} else if kind == "" {
		if err := owner(target); err != nil {
			kind = "not written by sparkconv (" + err.Error() + ")"
		}
	}
	if kind != "" {
		return fmt.Errorf("%s exists and is %s; --force replaces only what sparkconv itself wrote: remove it yourself or choose another path", target, kind)
	}
	return nil
}
