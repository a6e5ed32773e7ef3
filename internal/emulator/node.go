package emulator

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RunNode runs a Node script that may require() the npm packages installed
// beside the emulators (aws-kinesis-agg, for one), feeding it stdin, and
// returns its standard output. The script runs in the install directory,
// with a one-minute timeout; a failure fails tb with the script's standard
// error. Like [Start], it skips the test under -short when the packages are
// not installed, and fails it otherwise.
func RunNode(tb testing.TB, script string, stdin []byte) []byte {
	tb.Helper()
	dir, err := installDir()
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules"))
	}
	if err == nil {
		_, err = exec.LookPath("node")
	}
	if err != nil {
		msg := fmt.Sprintf("emulator: the npm packages are not installed (%v); run `bash %s` (or set %s)", err, InstallScript, EnvDir)
		if Optional() {
			tb.Skip(msg)
		}
		tb.Fatal(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "-e", script)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("emulator: node script: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}
