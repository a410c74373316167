package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/template"
	"time"
)

// -svg draws a run's timeline like the README's figure: one lane per node and
// per resource, the epoch each node held (its leader lease as it saw it) as a
// bar, the pause as a red bar across it, each election as a dashed line with
// its term, and every write as an arrow from the writer to the resource,
// ending in a green dot (accepted) or a red cross (refused). Elements carry
// class and data-* attributes (kind, term, lane), so a test — or a reader
// of the source — can find every event of the run in the picture.

// svgLayout is the geometry of the picture.
const (
	svgWidth   = 980
	svgLeft    = 120 // lane labels
	svgRight   = 30
	svgTop     = 64 // title and term labels
	svgLane    = 58 // lane height
	svgFooter  = 96 // axis and legend
	svgBarH    = 22
	svgMarkerR = 6
)

type svgLaneRow struct {
	Name, Label string
	Y, Mid, H   int
	Resource    bool
}

type svgBar struct {
	X, Y, W, H int
	Class      string
	Kind       string
	Term       uint64
	Lane       string
	Label      string
	LabelX     int
	LabelY     int
}

type svgMark struct {
	X, Y1, Y2 int // arrow from Y1 (writer) to Y2 (resource); Y1 == Y2 for marks on one lane
	Kind      string
	Term      uint64
	Lane, To  string
	Label     string
	LabelX    int
	LabelY    int
	Arrow     bool
	TimeMS    int64
}

type svgTerm struct {
	X    int
	Term uint64
	Y2   int
}

type svgTick struct {
	X     int
	Label string
}

type svgData struct {
	W, H       int
	Title      string
	Lanes      []svgLaneRow
	Bars       []svgBar
	Marks      []svgMark
	Terms      []svgTerm
	Ticks      []svgTick
	AxisY      int
	LegendY    int
	PlotL      int
	PlotR      int
	EndMS      int64
	LaneBottom int
}

// buildSVG computes the picture's geometry from a timeline.
func buildSVG(tl *timeline) svgData {
	lanes, labels, res, events, spans, end := tl.snapshot()
	if end <= 0 {
		end = time.Millisecond
	}
	// Actors (nodes, raft) first, then the resources, each group in order
	// of first mention.
	var ordered []string
	for _, pass := range []func(string) bool{
		func(l string) bool { return !res[l] },
		func(l string) bool { return res[l] },
	} {
		for _, l := range lanes {
			if pass(l) && !slices.Contains(ordered, l) {
				ordered = append(ordered, l)
			}
		}
	}
	d := svgData{W: svgWidth, Title: "scenario " + tl.title, PlotL: svgLeft, PlotR: svgWidth - svgRight, EndMS: end.Milliseconds()}
	laneY := map[string]int{}
	for i, l := range ordered {
		y := svgTop + i*svgLane
		label := labels[l]
		if label == "" {
			label = l
		}
		d.Lanes = append(d.Lanes, svgLaneRow{Name: l, Label: label, Y: y, Mid: y + svgLane/2, H: svgLane - 1, Resource: res[l]})
		laneY[l] = y + svgLane/2
	}
	d.LaneBottom = svgTop + len(ordered)*svgLane
	d.AxisY = d.LaneBottom + 8
	d.LegendY = d.AxisY + 62
	d.H = d.LaneBottom + svgFooter
	events = mergeRuns(events)
	// The x axis is ordinal, like a sequence diagram: every event and every
	// span boundary gets a column of its own, in time order, labelled with
	// its real time. Events a millisecond apart would otherwise sit on top
	// of each other, and the boot before the first election would take
	// half the picture.
	var instants []time.Duration
	for _, e := range events {
		instants = append(instants, e.At.Truncate(time.Millisecond))
	}
	for _, s := range spans {
		instants = append(instants, s.From.Truncate(time.Millisecond), s.To.Truncate(time.Millisecond))
	}
	slices.Sort(instants)
	instants = slices.Compact(instants)
	cols := len(instants) + 1
	colW := float64(svgWidth-svgLeft-svgRight) / float64(cols)
	x := func(t time.Duration) int {
		i, _ := slices.BinarySearch(instants, t.Truncate(time.Millisecond))
		return svgLeft + int(colW*(float64(i)+0.5))
	}
	// Events at the same instant share a column; shift later ones a little.
	seen := map[[2]int]int{}
	xOf := func(t time.Duration, y int) int {
		k := [2]int{x(t), y}
		n := seen[k]
		seen[k]++
		return k[0] + n*14
	}
	for _, s := range spans {
		y, ok := laneY[s.Lane]
		if !ok {
			continue
		}
		b := svgBar{X: x(s.From), W: max(2, x(s.To)-x(s.From)), H: svgBarH, Kind: s.Kind, Term: s.Term, Lane: s.Lane}
		switch s.Kind {
		case spanEpoch:
			b.Y, b.Class, b.Label = y-svgBarH/2, "epoch", s.Label
		case spanPause:
			b.Y, b.H, b.Class = y-svgBarH/2-4, svgBarH+8, "pause"
			b.Label = fmt.Sprintf("%s %dms", s.Label, (s.To - s.From).Milliseconds())
		default:
			continue
		}
		b.LabelX, b.LabelY = b.X+4, y+4
		if s.Kind == spanPause {
			b.LabelY = y - svgBarH/2 - 8
		}
		d.Bars = append(d.Bars, b)
	}
	for _, e := range events {
		y, ok := laneY[e.Lane]
		if !ok {
			continue
		}
		m := svgMark{X: xOf(e.At, y), Y1: y, Y2: y, Kind: e.Kind, Term: e.Term, Lane: e.Lane, To: e.To, Label: e.Label, TimeMS: e.At.Milliseconds()}
		if ty, ok := laneY[e.To]; ok && e.To != "" {
			m.Y2, m.Arrow = ty, true
		}
		m.LabelX, m.LabelY = m.X+7, m.Y2-8
		if e.Kind == evElected {
			d.Terms = append(d.Terms, svgTerm{X: m.X, Term: e.Term, Y2: d.LaneBottom})
			m.LabelY = y - 14
		}
		d.Marks = append(d.Marks, m)
	}
	for _, t := range instants {
		d.Ticks = append(d.Ticks, svgTick{X: x(t), Label: fmt.Sprintf("%dms", t.Milliseconds())})
	}
	return d
}

var svgTemplate = template.Must(template.New("svg").Funcs(template.FuncMap{
	"x":   xmlText,
	"add": func(a, b int) int { return a + b },
	"sub": func(a, b int) int { return a - b },
}).Parse(`<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11" data-end-ms="{{.EndMS}}">
<title>{{x .Title}}</title>
<defs>
<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f9e2e9"/><line x1="0" y1="0" x2="0" y2="6" stroke="#b3154f" stroke-width="2"/></pattern>
<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#5f5e55"/></marker>
</defs>
<rect x="0" y="0" width="{{.W}}" height="{{.H}}" fill="#faf9f5"/>
<text x="12" y="22" font-size="15" font-weight="bold" fill="#141413">{{x .Title}}</text>
<g class="lanes">
{{- range .Lanes}}
<g class="lane" data-lane="{{x .Name}}"><rect x="0" y="{{.Y}}" width="{{$.W}}" height="{{.H}}" fill="{{if .Resource}}#f1efe8{{else}}#faf9f5{{end}}"/><line x1="{{$.PlotL}}" y1="{{.Mid}}" x2="{{$.PlotR}}" y2="{{.Mid}}" stroke="#d8d6cc"/><text x="12" y="{{add .Mid 4}}" font-size="12" font-weight="bold" fill="#141413">{{x .Label}}</text></g>
{{- end}}
</g>
<g class="terms">
{{- range .Terms}}
<g class="term" data-term="{{.Term}}"><line x1="{{.X}}" y1="44" x2="{{.X}}" y2="{{.Y2}}" stroke="#2b6a24" stroke-dasharray="4 3"/><text x="{{add .X 3}}" y="56" fill="#2b6a24" font-weight="bold">term {{.Term}}</text></g>
{{- end}}
</g>
<g class="bars">
{{- range .Bars}}
<g class="{{.Class}}" data-kind="{{.Kind}}" data-term="{{.Term}}" data-lane="{{x .Lane}}">{{if eq .Class "pause"}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="url(#hatch)" stroke="#b3154f" stroke-dasharray="5 3" opacity="0.85"/><text x="{{.LabelX}}" y="{{.LabelY}}" fill="#b3154f" font-weight="bold">{{x .Label}}</text>{{else}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" rx="4" fill="#e2efd8" stroke="#2b6a24"/><text x="{{.LabelX}}" y="{{.LabelY}}" fill="#2b6a24">{{x .Label}}</text>{{end}}</g>
{{- end}}
</g>
<g class="events">
{{- range .Marks}}
<g class="{{.Kind}}" data-kind="{{.Kind}}" data-term="{{.Term}}" data-lane="{{x .Lane}}" data-to="{{x .To}}" data-t-ms="{{.TimeMS}}">
{{- if .Arrow}}<line x1="{{.X}}" y1="{{.Y1}}" x2="{{.X}}" y2="{{.Y2}}" stroke="{{if eq .Kind "read"}}#8a887c{{else}}#5f5e55{{end}}" {{if eq .Kind "read"}}stroke-dasharray="3 3" {{end}}marker-end="url(#arrow)"/>{{end}}
{{- if eq .Kind "accepted"}}<circle cx="{{.X}}" cy="{{.Y2}}" r="6" fill="#2b6a24"/>
{{- else if eq .Kind "refused"}}<g stroke="#b3154f" stroke-width="3"><line x1="{{sub .X 6}}" y1="{{sub .Y2 6}}" x2="{{add .X 6}}" y2="{{add .Y2 6}}"/><line x1="{{sub .X 6}}" y1="{{add .Y2 6}}" x2="{{add .X 6}}" y2="{{sub .Y2 6}}"/></g>
{{- else if eq .Kind "elected"}}<path d="M{{.X}},{{sub .Y1 8}} l8,8 l-8,8 l-8,-8 z" fill="#2b6a24"/>
{{- else if eq .Kind "stepdown"}}<line x1="{{.X}}" y1="{{sub .Y1 12}}" x2="{{.X}}" y2="{{add .Y1 12}}" stroke="#b0420c" stroke-width="3"/>
{{- else if eq .Kind "read"}}<circle cx="{{.X}}" cy="{{.Y1}}" r="3" fill="#8a887c"/>
{{- else}}<circle cx="{{.X}}" cy="{{.Y1}}" r="4" fill="#5f5e55"/>{{end}}<text x="{{.LabelX}}" y="{{.LabelY}}" transform="rotate(-30 {{.LabelX}} {{.LabelY}})" fill="{{if eq .Kind "refused"}}#b3154f{{else if eq .Kind "accepted"}}#2b6a24{{else}}#5f5e55{{end}}"{{if eq .Kind "refused"}} font-weight="bold"{{end}}>{{x .Label}}</text></g>
{{- end}}
</g>
<g class="axis"><line x1="{{.PlotL}}" y1="{{.AxisY}}" x2="{{.PlotR}}" y2="{{.AxisY}}" stroke="#5f5e55"/>
{{- range .Ticks}}<line x1="{{.X}}" y1="{{$.AxisY}}" x2="{{.X}}" y2="{{add $.AxisY 5}}" stroke="#5f5e55"/><text x="{{.X}}" y="{{add $.AxisY 14}}" text-anchor="end" font-size="9" fill="#5f5e55" transform="rotate(-45 {{.X}} {{add $.AxisY 14}})">{{x .Label}}</text>{{end}}</g>
<g class="legend" transform="translate({{.PlotL}},{{.LegendY}})">
<path d="M0,-8 l8,8 l-8,8 l-8,-8 z" fill="#2b6a24" transform="translate(8,0)"/><text x="22" y="4">elected (term)</text>
<rect x="120" y="-8" width="34" height="16" rx="4" fill="#e2efd8" stroke="#2b6a24"/><text x="160" y="4">epoch held (lease)</text>
<rect x="290" y="-9" width="34" height="18" fill="url(#hatch)" stroke="#b3154f"/><text x="330" y="4">pause</text>
<circle cx="398" cy="0" r="6" fill="#2b6a24"/><text x="410" y="4">write accepted</text>
<g stroke="#b3154f" stroke-width="3"><line x1="512" y1="-6" x2="524" y2="6"/><line x1="512" y1="6" x2="524" y2="-6"/></g><text x="532" y="4">write refused</text>
<line x1="630" y1="-8" x2="630" y2="8" stroke="#b0420c" stroke-width="3"/><text x="638" y="4">steps down</text>
</g>
</svg>
`))

// xmlText escapes s for XML text and attribute values.
func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// writeSVG renders the timeline.
func writeSVG(w io.Writer, tl *timeline) error {
	return svgTemplate.Execute(w, buildSVG(tl))
}

// writeSVGFile renders the timeline into path.
func writeSVGFile(path string, tl *timeline) error {
	var buf bytes.Buffer
	if err := writeSVG(&buf, tl); err != nil {
		return fmt.Errorf("-svg: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-svg: %w", err)
	}
	return nil
}

// mergeRuns folds runs of accepted writes by one writer under one term to one
// resource (a -write-every writer's steady stream) into one event labelled
// with their count, so the picture keeps to what changes.
func mergeRuns(events []event) []event {
	slices.SortStableFunc(events, func(a, b event) int { return int(a.At - b.At) })
	var out []event
	n := 1
	for i, e := range events {
		if i > 0 && e.Kind == evAccepted {
			p := &out[len(out)-1]
			if p.Kind == evAccepted && p.Lane == e.Lane && p.To == e.To && p.Term == e.Term && p.At != e.At && strings.HasPrefix(p.Label, "accepted") {
				n++
				p.Label = fmt.Sprintf("accepted ×%d t%d", n, e.Term)
				continue
			}
		}
		n = 1
		out = append(out, e)
	}
	return out
}
