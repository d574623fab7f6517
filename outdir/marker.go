package outdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// MarkerName is the file Commit writes at the top level of every output
// folder: the mark --force looks for before it replaces a folder. A JSON
// file a user saved (a command's --json document) never counts; only
// this file, which no command prints, does.
const MarkerName = ".sparkconv-output"

// markerFormat is the marker's "format".
const markerFormat = "sparkconv-output/1"

// markerMaxBytes caps the marker read back (the real one is ~100 bytes).
const markerMaxBytes = 4096

// FixtureCommand is the command whose outputs are models (fixtures): a
// build's --force never replaces one, since a model is an input.
const FixtureCommand = "fixture"

// marker is the content of MarkerName: the format and the command that
// wrote the folder. It holds nothing that varies run to run (no time, no
// random id), so the same command still writes byte-identical folders.
type marker struct {
	Format  string `json:"format"`
	Command string `json:"command"`
}

var program = struct {
	sync.Mutex
	command string
}{command: "sparkconv"}

// SetCommand names the command whose outputs this process writes (the
// marker's "command"): sparkconv's main sets it to the subcommand's name.
func SetCommand(name string) {
	program.Lock()
	program.command = name
	program.Unlock()
}

// writeMarker writes MarkerName into dir (a folder being built).
func writeMarker(dir string) error {
	program.Lock()
	m := marker{Format: markerFormat, Command: program.command}
	program.Unlock()
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	p := filepath.Join(dir, MarkerName)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644&^Umask())
	if err != nil {
		return err
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p, err)
	}
	return f.Close() // syncTree fsyncs it with the folder
}

// readMarker reads dir's MarkerName: a regular file (not a link) holding
// a marker of this format.
func readMarker(dir string) (marker, error) {
	var m marker
	p := filepath.Join(dir, MarkerName)
	st, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return m, fmt.Errorf("it holds no %s marker, which sparkconv writes into every output folder it creates", MarkerName)
	case err != nil:
		return m, err
	case !st.Mode().IsRegular() || st.Size() > markerMaxBytes:
		return m, fmt.Errorf("its %s is not a marker sparkconv writes", MarkerName)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return m, err
	}
	if json.Unmarshal(data, &m) != nil || m.Format != markerFormat || m.Command == "" {
		return m, fmt.Errorf("its %s is not a marker sparkconv writes", MarkerName)
	}
	return m, nil
}

// SparkconvFolder is the Owner of output folders: a folder holding the
// marker Commit writes, from any command but FixtureCommand (a fixture is
// a model, which no command's --force replaces but fixture's own).
func SparkconvFolder(dir string) error {
	m, err := readMarker(dir)
	if err != nil {
		return err
	}
	if m.Command == FixtureCommand {
		return fmt.Errorf("its %s marker makes it a fixture: a model, which only %s --force replaces", MarkerName, FixtureCommand)
	}
	return nil
}

// FolderOf is the Owner of the folders command wrote (its marker names
// it).
func FolderOf(command string) Owner {
	return func(dir string) error {
		m, err := readMarker(dir)
		if err != nil {
			return err
		}
		if m.Command != command {
			return fmt.Errorf("its %s marker names the %s command, not %s", MarkerName, m.Command, command)
		}
		return nil
	}
}
