package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// has reports whether any pixel of img is c.
func has(img image.Image, c color.RGBA) bool {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				return true
			}
		}
	}
	return false
}

func TestChartPlacesCurvesOnTheLogAxis(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handoff.png")
	rows := []s3Row{
		{peer: peerByID("pglease"), waiters: 1, lat: msDurs(3)},
		{peer: peerByID("etcd"), waiters: 8, lat: msDurs(10)},
		{peer: peerByID("ref50"), waiters: 8, oneClient: true, lat: msDurs(1)},
		{peer: peerByID("pglock"), waiters: 8},                  // no samples: no curve, no legend
		{peer: peerByID("pglock"), waiters: 8, oneClient: true}, // the same
	}
	if err := drawChart(path, rows); err != nil {
		t.Fatal(err)
	}
	img := readPNG(t, path)
	if got := img.Bounds().Size(); got != image.Pt(1890, 560) {
		t.Fatalf("size %v", got)
	}
	// A panel spans 520 px for 0.1 ms … 10 s (five decades) from x0 (70 for
	// one waiter, 700 for eight, 1330 for eight in one client); one sample is
	// a vertical step from 0 % (y 460) to 100 % (y 60) at its latency.
	at := func(x, y int) color.RGBA { return color.RGBAModel.Convert(img.At(x, y)).(color.RGBA) }
	for _, c := range []struct {
		id   string
		x, y int
	}{
		{"pglease", 224, 260}, // 3 ms: 70 + (log10(3)+1)/5·520
		{"etcd", 908, 300},    // 10 ms: 700 + 2/5·520
		{"ref50", 1434, 300},  // 1 ms: 1330 + 1/5·520
	} {
		if got := at(c.x, c.y); got != peerColor[c.id] {
			t.Errorf("%s at (%d,%d): %v, want %v", c.id, c.x, c.y, got, peerColor[c.id])
		}
		if got := at(c.x+10, c.y); got == peerColor[c.id] {
			t.Errorf("%s also at (%d,%d)", c.id, c.x+10, c.y)
		}
	}
	if has(img, peerColor["pglock"]) {
		t.Error("a peer without samples is drawn")
	}
}

func TestChartWithoutSamples(t *testing.T) {
	path := filepath.Join(t.TempDir(), "handoff.png")
	if err := drawChart(path, nil); err != nil {
		t.Fatal(err)
	}
	img := readPNG(t, path)
	for id, c := range peerColor {
		if has(img, c) {
			t.Errorf("%s drawn without samples", id)
		}
	}
	if err := drawChart(filepath.Join(t.TempDir(), "missing", "handoff.png"), nil); err == nil {
		t.Error("drawChart into a missing directory: no error")
	}
}
