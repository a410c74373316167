// Package objectstory holds, in its tests only, the paused-leader story of
// docs/DESIGN.md told against a real S3 server: leaders elected by package
// election write one object through objectfence, which itself
// must not import election (the one-way dependency rule), so the story
// lives here.
package objectstory
