package main

// This file holds the table of floors: how it is read from the docs, and
// which floor may use which.

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

const (
	beginMark = "<!-- layers:floors -->"
	endMark   = "<!-- /layers:floors -->"
	observers = "observers"
)

// floor is one row of the table: its name, and its rank (the index of its
// base name among the bases, ground first).
type floor struct {
	name string // e.g. "pipeline", "runners/lead"
	rank int
}

// base is the floor's name without its sibling part: "runners" for
// "runners/lead".
func (f floor) base() string {
	b, _, _ := strings.Cut(f.name, "/")
	return b
}

// mayUse reports whether a file of floor f may use a name of floor g.
func (f floor) mayUse(g floor) bool {
	switch {
	case f.name == g.name:
		return true
	case g.name == observers: // called by all
		return true
	case f.name == observers: // calling none, given plain values
		return g.rank == 0
	case f.base() == g.base(): // siblings share only lower floors
		return false
	}
	return g.rank < f.rank
}

var fileName = regexp.MustCompile("`([^`/]+\\.go)`")

// readFloors reads the marked table from r and returns each file's floor.
func readFloors(r io.Reader) (map[string]floor, error) {
	files := map[string]floor{}
	ranks := map[string]int{}
	in, seen := false, false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == beginMark:
			in, seen = true, true
			continue
		case line == endMark:
			in = false
			continue
		case !in || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|-") || strings.HasPrefix(line, "| Floor"):
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			return nil, fmt.Errorf("table line %d: want | floor | files | ...", n)
		}
		f := floor{name: strings.Trim(strings.TrimSpace(cells[1]), "`*")}
		if f.name == "" || strings.ContainsAny(f.name, " \t") {
			return nil, fmt.Errorf("table line %d: floor name %q", n, f.name)
		}
		rank, ok := ranks[f.base()]
		if !ok {
			rank = len(ranks)
			ranks[f.base()] = rank
		}
		f.rank = rank
		for _, m := range fileName.FindAllStringSubmatch(cells[2], -1) {
			if g, dup := files[m[1]]; dup {
				return nil, fmt.Errorf("table line %d: %s is on floors %s and %s", n, m[1], g.name, f.name)
			}
			files[m[1]] = f
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !seen || in {
		return nil, fmt.Errorf("no table between %q and %q", beginMark, endMark)
	}
	return files, nil
}
