package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// curveResults is the part of a peerbench --curve run the plots need.
type curveResults struct {
	Machine struct {
		Host        string  `json:"host"`
		Cores       int     `json:"cores"`
		LoopbackRTT float64 `json:"loopback_rtt_p50_us"`
		Fdatasync   float64 `json:"fdatasync_p50_us"`
	} `json:"machine"`
	Curves []curvePoint `json:"curves"`
}

// curvePoint is one point of one round (peerbench's CurvePoint).
type curvePoint struct {
	Curve     string  `json:"curve"`
	System    string  `json:"system"`
	X         float64 `json:"x"`
	Clients   int     `json:"clients"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P99       float64 `json:"p99_ms"`
}

// line is one system's series on one plot.
type line struct {
	System string
	XYs    plotter.XYs
}

// metrics: what a curve plot shows, by name.
var metrics = map[string]func(curvePoint) float64{
	"throughput": func(p curvePoint) float64 { return p.OpsPerSec },
	"p99":        func(p curvePoint) float64 { return p.P99 },
}

// series is, per system (in name order), the median over the rounds of
// metric at each x of curve, x increasing.
func series(ps []curvePoint, curve, metric string) ([]line, error) {
	f, ok := metrics[metric]
	if !ok {
		return nil, fmt.Errorf("unknown metric %q", metric)
	}
	byX := map[string]map[float64][]float64{}
	for _, p := range ps {
		if p.Curve != curve {
			continue
		}
		if byX[p.System] == nil {
			byX[p.System] = map[float64][]float64{}
		}
		byX[p.System][p.X] = append(byX[p.System][p.X], f(p))
	}
	var out []line
	for sys, vs := range byX {
		l := line{System: sys}
		for x, v := range vs {
			l.XYs = append(l.XYs, plotter.XY{X: x, Y: median(v)})
		}
		slices.SortFunc(l.XYs, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b line) int { return cmp.Compare(a.System, b.System) })
	return out, nil
}

// xTicks labels each measured x (1, 16, 1k, 10k, 1M, …).
func xTicks(ls []line) plot.ConstantTicks {
	var xs []float64
	for _, l := range ls {
		for _, xy := range l.XYs {
			if !slices.Contains(xs, xy.X) {
				xs = append(xs, xy.X)
			}
		}
	}
	slices.Sort(xs)
	var ts []plot.Tick
	for _, x := range xs {
		ts = append(ts, plot.Tick{Value: x, Label: shortNumber(x)})
	}
	return ts
}

// shortNumber writes 1000 as 1k and 1000000 as 1M.
func shortNumber(x float64) string {
	switch {
	case x >= 1e6 && int64(x)%1e6 == 0:
		return strconv.FormatInt(int64(x)/1e6, 10) + "M"
	case x >= 1e4 && int64(x)%1e3 == 0:
		return strconv.FormatInt(int64(x)/1e3, 10) + "k"
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

// readCurves reads the curve points of a peerbench --curve run.
func readCurves(in string) (curveResults, error) {
	var res curveResults
	b, err := os.ReadFile(in)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("%s: %w", in, err)
	}
	if len(res.Curves) == 0 {
		return res, fmt.Errorf("%s: no curve points (made by peerbench --curve?)", in)
	}
	return res, nil
}

// runCurves draws the plots of each curve of the --curve run in file in.
func runCurves(in, prefix string) error {
	res, err := readCurves(in)
	if err != nil {
		return err
	}
	floorMs := (res.Machine.Fdatasync + res.Machine.LoopbackRTT) / 1000
	on := fmt.Sprintf("%s (%d cores)", res.Machine.Host, res.Machine.Cores)
	drawn := 0
	for _, c := range []struct{ curve, xLabel, ops, op string }{
		{"clients", "clients, each locking and releasing its own lock", "Lock+release cycles", "Lock"},
		{"leases", fmt.Sprintf("live leases (%d clients locking and releasing)", clientsOf(res.Curves, "leases")), "Lock+release cycles", "Lock"},
		{"renewals", "renewal streams, 64 renewals in flight on each", "Renewals", "renewal"},
	} {
		for _, m := range []struct{ metric, title, yLabel string }{
			{"throughput", c.ops + "/s", "per second (log scale)"},
			{"p99", c.op + " p99", "ms (log scale)"},
		} {
			ls, err := series(res.Curves, c.curve, m.metric)
			if err != nil {
				return err
			}
			if len(ls) == 0 {
				continue
			}
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s against %s on %s", m.title, c.curve, on)
			p.X.Label.Text, p.Y.Label.Text = c.xLabel, m.yLabel
			p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, xTicks(ls)
			p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plainLogTicks{}
			p.Legend.Top, p.Legend.Left = true, true
			if err := addLines(p, ls); err != nil {
				return err
			}
			if m.metric == "p99" && floorMs > 0 {
				if err := addFloor(p, ls, floorMs); err != nil {
					return err
				}
			}
			if err := p.Save(8*vg.Inch, 5*vg.Inch, fmt.Sprintf("%s-%s-%s.png", prefix, c.curve, m.metric)); err != nil {
				return err
			}
			drawn++
		}
	}
	if drawn == 0 {
		return errors.New("no clients, leases or renewals curve in " + in)
	}
	return nil
}

// plainLogTicks are log-scale ticks at 1…9 times each power of ten from
// below lo to above hi, labelled plainly at 1, 2 and 5 (plot.LogTicks
// labels only the powers of ten, as 1e+01, and none below 1 when lo < 1).
type plainLogTicks struct{}

// Ticks returns the ticks between lo and hi.
func (plainLogTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m <= 9; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// clientsOf is the client count of curve's points (the first one's).
func clientsOf(ps []curvePoint, curve string) int {
	for _, p := range ps {
		if p.Curve == curve {
			return p.Clients
		}
	}
	return 0
}

// addLines adds one line with dots per system, in its colour.
func addLines(p *plot.Plot, ls []line) error {
	for _, l := range ls {
		for i := range l.XYs {
			l.XYs[i].Y = max(l.XYs[i].Y, 0.001) // a log scale has no 0
		}
		ln, dots, err := plotter.NewLinePoints(l.XYs)
		if err != nil {
			return err
		}
		c := colors[l.System]
		if c == nil {
			c = color.Black
		}
		ln.Color, dots.Color, dots.Shape = c, c, draw.CircleGlyph{}
		p.Add(ln, dots)
		p.Legend.Add(l.System, ln, dots)
	}
	return nil
}

// addFloor draws the machine's floor measured in the same run — one
// fdatasync plus one loopback round trip, below which no durable grant
// can come — as a dashed grey line across the plot.
func addFloor(p *plot.Plot, ls []line, ms float64) error {
	lo, hi := ls[0].XYs[0].X, ls[0].XYs[0].X
	for _, l := range ls {
		lo, hi = min(lo, l.XYs[0].X), max(hi, l.XYs[len(l.XYs)-1].X)
	}
	fl, err := plotter.NewLine(plotter.XYs{{X: lo, Y: ms}, {X: hi, Y: ms}})
	if err != nil {
		return err
	}
	fl.Color, fl.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(fl)
	p.Legend.Add(fmt.Sprintf("floor: fdatasync + loopback (%.2f ms)", ms), fl)
	return nil
}
