package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func msDurs(vs ...float64) durs {
	d := make(durs, len(vs))
	for i, v := range vs {
		d[i] = time.Duration(v * float64(time.Millisecond))
	}
	return d
}

func TestSortedCopies(t *testing.T) {
	d := msDurs(3, 1, 2)
	s := d.sorted()
	if !slices.Equal(s, msDurs(1, 2, 3)) {
		t.Errorf("sorted = %v", s)
	}
	if !slices.Equal(d, msDurs(3, 1, 2)) {
		t.Errorf("sorted changed its receiver: %v", d)
	}
	if got := durs(nil).sorted(); len(got) != 0 {
		t.Errorf("nil sorted = %v", got)
	}
}

func TestPctNearestRank(t *testing.T) {
	var hundred durs
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	ten := msDurs(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, c := range []struct {
		d    durs
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{durs{}, 99, 0},
		{msDurs(7), 0, 7 * time.Millisecond},
		{msDurs(7), 50, 7 * time.Millisecond},
		{msDurs(7), 100, 7 * time.Millisecond},
		{hundred, 0, time.Millisecond},
		{hundred, 7, 7 * time.Millisecond}, // 7/100·100 is 7.000000000000001
		{hundred, 50, 50 * time.Millisecond},
		{hundred, 90, 90 * time.Millisecond},
		{hundred, 99, 99 * time.Millisecond},
		{hundred, 99.5, 100 * time.Millisecond},
		{hundred, 100, 100 * time.Millisecond},
		{ten, 50, 5 * time.Millisecond},
		{ten, 51, 6 * time.Millisecond}, // rank ⌈5.1⌉ = 6
		{ten, 90, 9 * time.Millisecond},
		{ten, 95, 10 * time.Millisecond},
		{ten, 99, 10 * time.Millisecond},
		{msDurs(1, 2), 50, time.Millisecond},
		{msDurs(1, 2), 50.1, 2 * time.Millisecond},
	} {
		if got := c.d.pct(c.p); got != c.want {
			t.Errorf("pct(%v) of %d samples = %v, want %v", c.p, len(c.d), got, c.want)
		}
	}
}

func TestJain(t *testing.T) {
	for _, c := range []struct {
		counts []int64
		want   float64
	}{
		{nil, 0},
		{[]int64{0, 0, 0}, 0},
		{[]int64{5}, 1},
		{[]int64{4, 4, 4, 4}, 1},
		{[]int64{9, 0, 0}, 1.0 / 3},                   // one got everything: 1/n
		{append(make([]int64, 15), 100), 1.0 / 16},    // as the S2 text says
		{[]int64{1, 3}, 0.8},                          // 4² / (2·10)
		{[]int64{10, 20, 30}, 60 * 60 / (3 * 1400.0)}, // 3600 / 4200
		{[]int64{1 << 40, 1 << 40}, 1},                // no overflow in the squares
		{[]int64{2, 2, 0, 0}, 0.5},                    // half got equal shares
		{[]int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2}, 17.0 * 17 / (16 * 19)},
	} {
		if got := jain(c.counts); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("jain(%v) = %v, want %v", c.counts, got, c.want)
		}
	}
}

func TestFormats(t *testing.T) {
	for _, c := range []struct {
		name, got, want string
	}{
		{"ms 0", ms(0), "0"},
		{"ms 1µs", ms(time.Microsecond), "0.00"},
		{"ms 0.5", ms(500 * time.Microsecond), "0.50"},
		{"ms 2.34", ms(2340 * time.Microsecond), "2.3"},
		{"ms 10", ms(10 * time.Millisecond), "10"},
		{"ms 1234.4", ms(1234400 * time.Microsecond), "1234"},
		{"secs 0", secs(0), "0.0 ms"},
		{"secs 6.3 ms", secs(6300 * time.Microsecond), "6.3 ms"},
		{"secs 999 ms", secs(999 * time.Millisecond), "999.0 ms"},
		{"secs 1 s", secs(time.Second), "1.00 s"},
		{"secs 2.5 s", secs(2500 * time.Millisecond), "2.50 s"},
		{"secs -0.5 s", secs(-500 * time.Millisecond), "-500.0 ms"},
		{"secs -1.5 s", secs(-1500 * time.Millisecond), "-1.50 s"},
		{"ratio 2/1", ratio(2, 1), "2.00×"},
		{"ratio 1/4", ratio(1, 4), "0.25×"},
		{"ratio 25/2", ratio(25, 2), "12.5×"},
		{"ratio 300/2", ratio(300, 2), "150×"},
		{"ratio 0/1", ratio(0, 1), "–"},
		{"ratio 1/0", ratio(1, 0), "–"},
		{"ratio NaN/1", ratio(math.NaN(), 1), "–"},
		{"ratio 1/NaN", ratio(1, math.NaN()), "–"},
		{"num 0", num(0), "0"},
		{"num 0.05", num(0.05), "0.05"},
		{"num 9.876", num(9.876), "9.88"},
		{"num 12.34", num(12.34), "12.3"},
		{"num 100", num(100), "100"},
		{"num 1234.6", num(1234.6), "1235"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
}
