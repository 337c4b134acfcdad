// Package browsertest drives the admin dashboard (internal/admin) in a real
// headless Chromium against a real gateway with fake upstream proxies on
// 127.0.0.1 (docs/design/010-dashboard.md). It holds tests only, so that
// chromedp is imported by no package the binary is built from.
package browsertest
