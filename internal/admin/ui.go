package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The dashboard's assets: plain HTML, CSS and JavaScript, embedded so the
// binary serves them offline and nothing is fetched from elsewhere
// (docs/design/010-dashboard.md).
//
//go:embed ui
var uiFiles embed.FS

// dashboard serves the dashboard: index.html at / and the assets under
// /ui/. The content security policy lets the page load and call nothing
// but this listener, so a target's name or an event's reason shown in it
// cannot run as script even if it slipped past the page's escaping.
func dashboard() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		switch {
		case r.URL.Path == "/":
			h.Set("Cache-Control", "no-cache")
			http.ServeFileFS(w, r, sub, "index.html")
		case strings.HasSuffix(r.URL.Path, "/"):
			writeError(w, http.StatusNotFound, "no such endpoint") // no directory listings
		default:
			files.ServeHTTP(w, r)
		}
	})
}
