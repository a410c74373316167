// Package mdcheck holds only a test: every Markdown file of the repository
// has balanced code fences, and no closing fence carries text (a forge
// would then render the rest of the file as code).
package mdcheck
