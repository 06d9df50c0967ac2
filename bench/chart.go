package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// peerColor gives every peer the same colour in every panel.
var peerColor = map[string]color.RGBA{
	"pglease":    {0xd6, 0x27, 0x28, 0xff},
	"pglease-ff": {0xff, 0x7f, 0x0e, 0xff},
	"ref":        {0x7f, 0x7f, 0x7f, 0xff},
	"ref50":      {0xbc, 0xbd, 0x22, 0xff},
	"advisory":   {0x2c, 0xa0, 0x2c, 0xff},
	"pglock":     {0x94, 0x67, 0xbd, 0xff},
	"redsync":    {0x8c, 0x56, 0x4b, 0xff},
	"redislock":  {0xe3, 0x77, 0xc2, 0xff},
	"etcd":       {0x1f, 0x77, 0xb4, 0xff},
}

type canvas struct{ img *image.RGBA }

func (c canvas) dot(x, y int, col color.RGBA, r int) {
	for dx := -r; dx <= r; dx++ {
		for dy := -r; dy <= r; dy++ {
			if image.Pt(x+dx, y+dy).In(c.img.Rect) {
				c.img.SetRGBA(x+dx, y+dy, col)
			}
		}
	}
}

func (c canvas) line(x0, y0, x1, y1 float64, col color.RGBA, r int) {
	n := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		c.dot(int(math.Round(x0+(x1-x0)*t)), int(math.Round(y0+(y1-y0)*t)), col, r)
	}
}

func (c canvas) text(x, y int, s string, col color.Color) {
	d := &font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(s string) int { return len(s) * 7 }

// chartPanels are the S3 cases of the chart, one panel each.
var chartPanels = []struct {
	waiters   int
	oneClient bool
	title     string
}{
	{1, false, "1 blocked waiter, a client each"},
	{8, false, "8 blocked waiters, a client each"},
	{8, true, "8 blocked waiters, all in one client"},
}

// drawChart renders the cumulative distribution of S3 hand-off latencies,
// one panel per case of chartPanels, log-scaled time axis.
func drawChart(path string, rows []s3Row) error {
	const (
		panelW, panelH = 520, 400
		left, top      = 70, 60
		gap            = 110
		W, H           = left + 3*panelW + 2*gap + 40, 560
		minExp, maxExp = -1.0, 4.0 // 0.1 ms … 10 s
	)
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	c := canvas{img}
	black := color.RGBA{0, 0, 0, 255}
	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	title := "pglease bench S3: hand-off latency (release -> acquired by a blocked waiter), cumulative distribution"
	c.text((W-textWidth(title))/2, 25, title, black)

	for pi, panel := range chartPanels {
		waiters := panel.waiters
		x0 := left + pi*(panelW+gap)
		y0 := top
		xOf := func(d time.Duration) float64 {
			ms := float64(d) / float64(time.Millisecond)
			e := math.Log10(math.Max(ms, math.Pow(10, minExp)))
			e = math.Min(e, maxExp)
			return float64(x0) + (e-minExp)/(maxExp-minExp)*panelW
		}
		yOf := func(f float64) float64 { return float64(y0) + (1-f)*panelH }
		// grid and axes
		for e := minExp; e <= maxExp; e++ {
			x := float64(x0) + (e-minExp)/(maxExp-minExp)*panelW
			c.line(x, float64(y0), x, float64(y0+panelH), grid, 0)
			lbl := map[float64]string{-1: "0.1ms", 0: "1ms", 1: "10ms", 2: "100ms", 3: "1s", 4: "10s"}[e]
			c.text(int(x)-textWidth(lbl)/2, y0+panelH+18, lbl, black)
		}
		for f := 0.0; f <= 1.0001; f += 0.25 {
			y := yOf(f)
			c.line(float64(x0), y, float64(x0+panelW), y, grid, 0)
			lbl := fmt.Sprintf("%.0f%%", f*100)
			c.text(x0-8-textWidth(lbl), int(y)+4, lbl, black)
		}
		c.line(float64(x0), float64(y0), float64(x0), float64(y0+panelH), black, 0)
		c.line(float64(x0), float64(y0+panelH), float64(x0+panelW), float64(y0+panelH), black, 0)
		c.text(x0+(panelW-textWidth(panel.title))/2, y0-10, panel.title, black)
		c.text(x0+(panelW-textWidth("latency (log scale)"))/2, y0+panelH+36, "latency (log scale)", black)
		// 5 ms / 25 ms target marks
		if waiters == 8 {
			for _, t := range []time.Duration{5 * time.Millisecond, 25 * time.Millisecond} {
				x := xOf(t)
				for y := y0; y < y0+panelH; y += 6 {
					c.line(x, float64(y), x, float64(y+2), color.RGBA{0x99, 0x99, 0x99, 0xff}, 0)
				}
			}
			c.text(int(xOf(5*time.Millisecond))+3, y0+panelH-8, "5ms", color.RGBA{0x66, 0x66, 0x66, 0xff})
			c.text(int(xOf(25*time.Millisecond))+3, y0+panelH-8, "25ms", color.RGBA{0x66, 0x66, 0x66, 0xff})
		}
		// curves (step CDF)
		for _, r := range rows {
			if r.waiters != waiters || r.oneClient != panel.oneClient || len(r.lat) == 0 {
				continue
			}
			col := peerColor[r.peer.id]
			n := float64(len(r.lat))
			px, py := xOf(r.lat[0]), yOf(0)
			for i, d := range r.lat {
				x := xOf(d)
				c.line(px, py, x, py, col, 1)
				y := yOf(float64(i+1) / n)
				c.line(x, py, x, y, col, 1)
				px, py = x, y
			}
			c.line(px, py, float64(x0+panelW), py, col, 1)
		}
	}
	// one legend for all panels, in peer order
	lx, ly := left, top+panelH+70
	for _, p := range peers {
		found := false
		for _, r := range rows {
			found = found || (r.peer == p && len(r.lat) > 0)
		}
		if !found {
			continue
		}
		if lx+40+textWidth(p.title) > W-20 {
			lx, ly = left, ly+18
		}
		c.line(float64(lx), float64(ly-4), float64(lx+22), float64(ly-4), peerColor[p.id], 1)
		c.text(lx+28, ly, p.title, black)
		lx += 28 + textWidth(p.title) + 30
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
