package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cited matches the repository documents a comment may send readers to.
var cited = regexp.MustCompile(`docs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md|proxies\.example\.txt|switchyard\.example\.toml`)

// Comments cite documents in the repository, by a path that exists, and
// never the section numbers of a specification kept elsewhere (issue 16).
func TestCommentsCiteRepositoryDocuments(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	citations := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			if strings.Contains(comment, "SPEC §") {
				t.Errorf("%s:%d cites SPEC, a document outside the repository", path, i+1)
			}
			for _, doc := range cited.FindAllString(comment, -1) {
				citations++
				if _, err := os.Stat(filepath.Join(root, doc)); err != nil {
					t.Errorf("%s:%d cites %s, which does not exist", path, i+1, doc)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if citations < 20 {
		t.Fatalf("found %d citations: the walk missed the sources", citations)
	}
}
