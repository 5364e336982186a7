package diff

import "testing"

func TestUnified(t *testing.T) {
	a := "version = 2\n[plugins]\n  a = 1\n  b = 2\n  c = 3\n  d = 4\n  e = 5\n  f = 6\n  g = 7\n  h = 8\n  i = 9\n  j = 10\n"
	b := "version = 3\n[plugins]\n  a = 1\n  b = 2\n  c = 3\n  d = 4\n  e = 5\n  f = 6\n  g = 7\n  h = 8\n  i = 9\n  j = 11\n  k = 12\n"
	want := `--- base
+++ head
@@ -1,4 +1,4 @@
-version = 2
+version = 3
 [plugins]
   a = 1
   b = 2
@@ -9,4 +9,5 @@
   g = 7
   h = 8
   i = 9
-  j = 10
+  j = 11
+  k = 12
`
	if got := Unified(a, b, "base", "head"); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if Unified(a, a, "x", "y") != "" {
		t.Error("equal texts must give no diff")
	}
	if got := Unified("", "x\n", "a", "b"); got != "--- a\n+++ b\n@@ -0,0 +1 @@\n+x\n" {
		t.Errorf("from empty: %q", got)
	}
}
