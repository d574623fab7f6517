// Package orttest owns the one rule for tests that need ONNX Runtime: load
// the library found by ortrun.FindORTLib, or skip with instructions when
// it is absent -- unless $SPARKCONV_REQUIRE_ORT is set (CI), where a missing
// library fails the test instead.
package orttest

import (
	"os"
	"testing"

	"sparkconv/ortrun"
)

// RequireEnv names the variable that turns a missing library into a failure.
const RequireEnv = "SPARKCONV_REQUIRE_ORT"

// Init loads ONNX Runtime for the test or skips it.
func Init(tb testing.TB) {
	tb.Helper()
	lib, err := ortrun.FindORTLib("")
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("%s is set and ONNX Runtime is missing: %v", RequireEnv, err)
		}
		tb.Skipf("skipping: %v", err)
	}
	if err := ortrun.Init(lib); err != nil {
		tb.Fatal(err)
	}
}
