// Command plot draws the lock latency of each system in a peerbench
// results file: p50 (solid) and p99 (dashed) of Lock at 1, 16 and 64
// clients, medians over the rounds, on a log scale.
//
//	go run ./cmd/plot results.json latency.png
//
// With --curves it draws the curves of a peerbench --curve run instead:
// throughput and p99 (of Lock, or of a renewal) against clients, live
// leases and renewal streams, one line per system (medians over the
// rounds), two PNG files per curve the run has: PREFIX-clients-throughput.png,
// PREFIX-clients-p99.png, and so for leases and renewals.
//
//	go run ./cmd/plot --curves results.json results/curves
package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// results is the part of peerbench's output the plot needs.
type results struct {
	Machine struct {
		Host  string `json:"host"`
		Cores int    `json:"cores"`
	} `json:"machine"`
	Runs map[string]map[string][]struct {
		Latency map[string]struct {
			P50 float64 `json:"p50_ms"`
			P99 float64 `json:"p99_ms"`
		} `json:"latency"`
	} `json:"runs"`
}

// points: clients → scenario name in peerbench.
var points = []struct {
	clients  float64
	scenario string
}{{1, "latency-1"}, {16, "latency-16"}, {64, "uncontended-64"}}

var colors = map[string]color.Color{
	"fence": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, "etcd": color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"redis": color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, "redis-fsync": color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"zookeeper": color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

func main() {
	args, draw := os.Args[1:], run
	if len(args) > 0 && (args[0] == "--curves" || args[0] == "-curves") {
		args, draw = args[1:], runCurves
	}
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: plot RESULTS.json OUT.png\n       plot --curves RESULTS.json PREFIX")
		os.Exit(2)
	}
	if err := draw(args[0], args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

func run(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Lock latency (fence, etcd: 3 nodes; Redis: 1) on %s (%d cores): p50 solid, p99 dashed", res.Machine.Host, res.Machine.Cores)
	p.X.Label.Text = "clients, each on its own lock"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{}
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 16, Label: "16"}, {Value: 64, Label: "64"}})
	p.Legend.Top, p.Legend.Left = true, true
	systems := make([]string, 0, len(res.Runs))
	for s := range res.Runs {
		systems = append(systems, s)
	}
	sort.Strings(systems)
	for _, sys := range systems {
		for _, q := range []string{"p50", "p99"} {
			var xys plotter.XYs
			for _, pt := range points {
				var v []float64
				for _, r := range res.Runs[sys][pt.scenario] {
					l := r.Latency["lock"]
					v = append(v, map[string]float64{"p50": l.P50, "p99": l.P99}[q])
				}
				if len(v) > 0 {
					xys = append(xys, plotter.XY{X: pt.clients, Y: max(median(v), 0.001)})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, dots, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			c := colors[sys]
			if c == nil {
				c = color.Black
			}
			line.Color, dots.Color, dots.Shape = c, c, draw.CircleGlyph{}
			if q == "p99" {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			} else {
				p.Legend.Add(sys, line, dots)
			}
			p.Add(line, dots)
		}
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, out)
}
