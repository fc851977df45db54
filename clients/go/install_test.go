package mutexd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mutexd/mutexd/clients/go/internal/testserver"
)

// block is the first fenced block of language lang after the line starting with marker
// in the document at path.
func block(t *testing.T, path, marker, lang string) string {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, marker) {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if lines[j] == "```"+lang {
				for k := j + 1; k < len(lines); k++ {
					if lines[k] == "```" {
						return strings.Join(lines[j+1:k], "\n") + "\n"
					}
				}
			}
		}
	}
	t.Fatalf("no %s block after %q in %s", lang, marker, path)
	return ""
}

// TestTheInstallCommandsOfTheDocumentation runs the install commands of docs/clients/go.md
// in a new module, offline, and builds its complete example there.
func TestTheInstallCommandsOfTheDocumentation(t *testing.T) {
	root := testserver.Root()
	doc := filepath.Join(root, "docs", "clients", "go.md")
	commands := strings.ReplaceAll(block(t, doc, "<!-- install-go:", "sh"), "/path/to/mutexd", root)
	example := block(t, doc, "<!-- example-go:", "go")
	dir := t.TempDir()
	gobin := filepath.Join(runtime.GOROOT(), "bin")
	env := []string{"PATH=" + gobin + string(os.PathListSeparator) + os.Getenv("PATH"), "GOPROXY=off", "GOFLAGS="}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(filepath.Join(gobin, "go"), "mod", "init", "example.com/report")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(example), 0o644); err != nil {
		t.Fatal(err)
	}
	run("bash", "-euo", "pipefail", "-c", commands)
	run(filepath.Join(gobin, "go"), "vet", "./...")
}
