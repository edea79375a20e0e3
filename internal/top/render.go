package top

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencehq/fence/client"
)

// Sort is an order of the table's rows.
type Sort string

// The orders of the rows; ties go by name.
const (
	ByHeld    Sort = "held"    // held longest first; locks not held (or held for an unknown time) last
	ByWaiters Sort = "waiters" // most waiters first
	ByName    Sort = "name"    // by name
	ByToken   Sort = "token"   // highest token (latest grant) first
)

// Sorts lists every order, the default first.
var Sorts = []Sort{ByHeld, ByWaiters, ByName, ByToken}

// ParseSort returns the order named s, or an error naming the valid ones.
func ParseSort(s string) (Sort, error) {
	if slices.Contains(Sorts, Sort(s)) {
		return Sort(s), nil
	}
	names := make([]string, len(Sorts))
	for i, o := range Sorts {
		names[i] = string(o)
	}
	return "", fmt.Errorf("unknown sort %q: use one of %s", s, strings.Join(names, ", "))
}

// Source says how a live view learns of changes.
type Source string

// The sources of a live view.
const (
	Once  Source = ""      // one snapshot: no grant rate, no source shown
	Watch Source = "watch" // a Watch stream, plus the interval
	Poll  Source = "poll"  // the interval only (the Watch was refused or ended)
)

// State is what one frame shows.
type State struct {
	Prefix string            // the locks shown are those whose names start with it
	Locks  []client.LockInfo // as read at Read, in any order
	Read   time.Time         // when Locks were read: their TTLs and hold times count from here
	// Members and Leader are the raft group as last read; MembersErr is set
	// when that read failed (the members are then not shown).
	Members    []client.Member
	MembersErr error
	// GrantRate is grants per second; negative while unknown.
	GrantRate float64
	Source    Source
	Interval  time.Duration // the refresh interval (live views)
	Err       error         // the last read's error: Locks are then from the read before
}

// View is how a frame is laid out.
type View struct {
	Width  int  // columns; 0: no limit (a line is as long as its cells)
	Height int  // lines; 0: no limit
	Rows   int  // at most this many lock rows; 0: as many as fit
	Sort   Sort // "" sorts by ByHeld
}

// The table's columns, in order.
var columns = []struct {
	title string
	right bool // right-aligned (numbers)
}{{"LOCK", false}, {"HOLDER", false}, {"TOKEN", true}, {"HELD FOR", true}, {"TTL LEFT", true}, {"WAITERS", true}, {"STATE", false}}

// Widths and spacing of the columns.
const (
	gap         = 2  // spaces between columns
	maxHolder   = 28 // a longer holder cell is shortened
	minNameCols = 8  // the name column never shrinks below this to fit the width
)

// Render returns the lines of one frame of s laid out by v, at now. It
// reads nothing but its arguments.
func Render(s State, v View, now time.Time) []string {
	elapsed := max(now.Sub(s.Read), 0)
	lines := []string{membersLine(s), summaryLine(s, v.Sort)}
	if s.Err != nil {
		lines = append(lines, "error: "+oneLine(s.Err.Error()))
	} else {
		lines = append(lines, "")
	}
	locks := sorted(s.Locks, v.Sort)
	rows := make([][]string, len(locks))
	for i, l := range locks {
		rows[i] = row(l, elapsed)
	}
	fit := len(rows)
	if v.Rows > 0 {
		fit = min(fit, v.Rows)
	}
	if v.Height > 0 {
		room := v.Height - len(lines) - 1 // less the column titles
		if fit > room || fit < len(rows) {
			fit = min(fit, room-1) // less the "more" line
		}
		fit = max(fit, 0)
	}
	lines = append(lines, table(rows[:fit], v.Width)...)
	switch {
	case len(locks) == 0 && s.Prefix != "":
		lines = append(lines, fmt.Sprintf("(no lock under %s is held, delayed or waited for)", show(s.Prefix)))
	case len(locks) == 0:
		lines = append(lines, "(no lock is held, delayed or waited for)")
	case fit < len(rows):
		lines = append(lines, fmt.Sprintf("... %d more", len(rows)-fit))
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(cut(l, v.Width), " ")
	}
	if v.Height > 0 && len(lines) > v.Height {
		lines = lines[:v.Height]
	}
	return lines
}

// membersLine is the frame's first line: the leader and the members.
func membersLine(s State) string {
	if s.MembersErr != nil {
		return "members: unknown (" + oneLine(s.MembersErr.Error()) + ")"
	}
	leader := "none"
	var ids, down []string
	for _, m := range s.Members {
		ids = append(ids, show(m.ID))
		if m.Leader {
			leader = show(m.ID)
		} else if !m.Active {
			down = append(down, show(m.ID))
		}
	}
	line := fmt.Sprintf("leader %s, %s: %s", leader, count(len(s.Members), "member"), strings.Join(ids, " "))
	if len(down) > 0 {
		line += " (unreachable: " + strings.Join(down, " ") + ")"
	}
	return line
}

// summaryLine is the frame's second line: counts, rate, and how it is made.
func summaryLine(s State, order Sort) string {
	held, waiting := 0, 0
	for _, l := range s.Locks {
		if _, ok := firstGrant(l); ok {
			held++
		}
		waiting += l.Waiters
	}
	line := fmt.Sprintf("%s, %d held, %d waiting", count(len(s.Locks), "lock"), held, waiting)
	if s.Source != Once {
		rate := "-"
		if s.GrantRate >= 0 {
			rate = strconv.FormatFloat(s.GrantRate, 'f', 1, 64)
		}
		line += ", " + rate + " grants/s"
	}
	if s.Prefix != "" {
		line += ", prefix " + show(s.Prefix)
	}
	line += ", sorted by " + string(cmp.Or(order, ByHeld))
	if s.Source != Once {
		line += fmt.Sprintf(" (%s, every %v)", s.Source, s.Interval)
	}
	return line
}

// count is "1 thing" or "N things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// sorted returns a copy of locks in order.
func sorted(locks []client.LockInfo, order Sort) []client.LockInfo {
	out := slices.Clone(locks)
	key := func(a, b client.LockInfo) int { return 0 }
	switch order {
	case ByHeld, "":
		key = func(a, b client.LockInfo) int { return cmp.Compare(heldFor(b), heldFor(a)) }
	case ByWaiters:
		key = func(a, b client.LockInfo) int { return cmp.Compare(b.Waiters, a.Waiters) }
	case ByToken:
		key = func(a, b client.LockInfo) int { return cmp.Compare(b.Token, a.Token) }
	}
	slices.SortStableFunc(out, func(a, b client.LockInfo) int {
		return cmp.Or(key(a, b), strings.Compare(a.Name, b.Name))
	})
	return out
}

// heldFor is how long l's first held grant has been held: 0 when free or
// unknown.
func heldFor(l client.LockInfo) time.Duration {
	g, _ := firstGrant(l)
	return g.HeldFor
}

// row is the cells of lock l, read elapsed ago.
func row(l client.LockInfo, elapsed time.Duration) []string {
	holder, token, held, ttl := "-", "-", "-", "-"
	if l.Token > 0 {
		token = strconv.FormatUint(l.Token, 10)
	}
	if g, ok := firstGrant(l); ok {
		token = strconv.FormatUint(g.Token, 10)
		holder = "#" + strconv.FormatUint(g.HolderLease, 10) + " " + show(g.HolderOwner)
		if n := activeGrants(l); n > 1 {
			holder += fmt.Sprintf(" (+%d)", n-1)
		}
		holder = shorten(holder, maxHolder)
		ttl = Duration(max(g.TTLLeft-elapsed, 0))
		if g.HeldFor > 0 {
			held = Duration(g.HeldFor + elapsed)
		}
	}
	return []string{show(l.Name), holder, token, held, ttl, strconv.Itoa(l.Waiters), state(l, elapsed)}
}

// firstGrant is l's first grant that is held (not in lock-delay), if any:
// the one its row shows.
func firstGrant(l client.LockInfo) (client.GrantInfo, bool) {
	for _, g := range l.Grants {
		if !g.Delayed {
			return g, true
		}
	}
	if len(l.Grants) == 0 && l.Held() { // a server older than grants
		return client.GrantInfo{HolderLease: l.HolderLease, HolderOwner: l.HolderOwner, Token: l.Token, TTLLeft: l.TTLLeft, HeldFor: l.HeldFor}, true
	}
	return client.GrantInfo{}, false
}

// activeGrants counts l's grants that are held (not in lock-delay).
func activeGrants(l client.LockInfo) int {
	n := 0
	for _, g := range l.Grants {
		if !g.Delayed {
			n++
		}
	}
	return n
}

// state is the STATE cell of l, read elapsed ago.
func state(l client.LockInfo, elapsed time.Duration) string {
	delayed := len(l.Grants) - activeGrants(l)
	switch {
	case l.Permits > 1:
		s := fmt.Sprintf("%d/%d permits", activeGrants(l), l.Permits)
		if delayed > 0 {
			s += fmt.Sprintf(", %d in lock-delay", delayed)
		}
		return s
	case len(l.Grants) > 0 && l.Grants[0].Shared:
		if n := activeGrants(l); n != 1 {
			return fmt.Sprintf("%d readers", n)
		}
		return "1 reader"
	case l.Held():
		return "held"
	case l.Delayed:
		return "lock-delay " + Duration(max(l.DelayLeft-elapsed, 0))
	case l.Waiters > 0:
		return "free, waited for"
	}
	return "free"
}

// table lays rows out under the column titles, fitting width (0: no
// limit) by shortening the name column down to minNameCols.
func table(rows [][]string, width int) []string {
	widths := make([]int, len(columns))
	for i, c := range columns {
		widths[i] = len(c.title)
	}
	for _, r := range rows {
		for i, cell := range r {
			widths[i] = max(widths[i], cols(cell))
		}
	}
	if width > 0 {
		others := 0
		for _, w := range widths[1:] {
			others += w + gap
		}
		widths[0] = max(min(widths[0], width-others), minNameCols)
	}
	titles := make([]string, len(columns))
	for i, c := range columns {
		titles[i] = c.title
	}
	lines := []string{layout(titles, widths)}
	for _, r := range rows {
		r = slices.Clone(r)
		r[0] = shorten(r[0], widths[0])
		lines = append(lines, layout(r, widths))
	}
	return lines
}

// layout pads cells to widths, aligned as their columns say.
func layout(cells []string, widths []int) string {
	var b strings.Builder
	for i, cell := range cells {
		if i > 0 {
			b.WriteString(strings.Repeat(" ", gap))
		}
		pad := strings.Repeat(" ", max(widths[i]-cols(cell), 0))
		if columns[i].right {
			b.WriteString(pad + cell)
		} else {
			b.WriteString(cell + pad)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// cols is how many columns s takes: its cells are ASCII but for the
// ellipsis of a shortened one.
func cols(s string) int { return utf8.RuneCountInString(s) }

// shorten fits s into n columns, cutting out its middle (a lock name's
// head says where it lives, its tail which it is).
func shorten(s string, n int) string {
	if cols(s) <= n {
		return s
	}
	if n < 2 {
		return string([]rune(s)[:max(n, 0)])
	}
	r := []rune(s)
	head := n / 2
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// cut shortens a line to width columns (0: no limit).
func cut(line string, width int) string {
	if width <= 0 || cols(line) <= width {
		return line
	}
	return string([]rune(line)[:width])
}

// show is s as a cell: as it is when it is printable ASCII, else quoted
// in ASCII.
func show(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// oneLine is an error message shown on one line, in ASCII.
func oneLine(msg string) string {
	q := strconv.QuoteToASCII(msg)
	return q[1 : len(q)-1]
}

// Duration formats d for a narrow column: tenths of a second below 10 s,
// then whole seconds, minutes and seconds, hours and minutes, days and
// hours (each cut, not rounded: a countdown never shows more than is left).
func Duration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%d.%ds", d/time.Second, d%time.Second/(100*time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	return fmt.Sprintf("%dd%02dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
}
