// Package doccheck compiles every Go code block of README.md and docs/*.md,
// and checks the span catalogue of docs/tracing.md against the spans every
// module makes, so that the documentation cannot drift from the code.
package doccheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goBlocks returns the ```go blocks of a Markdown file.
func goBlocks(t *testing.T, path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

func TestDocsCodeBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every documented program")
	}
	root, _ := filepath.Abs("../..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))
	work, err := os.MkdirTemp(root, ".doccheck-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	n := 0
	for _, f := range files {
		for i, block := range goBlocks(t, f) {
			name := filepath.Base(f) + "#" + strconv.Itoa(i+1)
			if !strings.HasPrefix(block, "package ") {
				t.Errorf("%s: a go block must be a whole file starting with package (use ```text for fragments)", name)
				continue
			}
			dir := filepath.Join(work, "b"+strconv.Itoa(n))
			n++
			_ = os.MkdirAll(dir, 0o755)
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(block), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "vet", "./"+filepath.Base(work)+"/"+filepath.Base(dir))
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s does not compile:\n%s", name, out)
			}
		}
	}
	if n == 0 {
		t.Fatal("no go blocks found: the checker is broken")
	}
}
