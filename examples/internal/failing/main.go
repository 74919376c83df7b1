// Command failing is a stdio MCP server that fails before answering, for
// end-to-end tests: it writes each argument as a line to stderr, and with
// PRINT_TOKEN set the token it was handed ("auth failed for
// $MCP_ACCESS_TOKEN"), then exits with FAIL_STATUS (default 3).
package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	fmt.Fprintln(os.Stderr, "failing: starting")
	for _, l := range os.Args[1:] {
		fmt.Fprintln(os.Stderr, l)
	}
	if os.Getenv("PRINT_TOKEN") != "" {
		fmt.Fprintln(os.Stderr, "auth failed for "+os.Getenv("MCP_ACCESS_TOKEN"))
	}
	code := 3
	if s, err := strconv.Atoi(os.Getenv("FAIL_STATUS")); err == nil {
		code = s
	}
	os.Exit(code)
}
