package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

type durs []time.Duration

func (d durs) sorted() durs {
	s := append(durs(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

// pct returns the p-th percentile (0–100) of sorted d (nearest rank).
func (d durs) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	// p·n first: exact for whole p, where p/100·n may land past an integer
	// (p 7 of 100 samples gave rank 8).
	i := int(math.Ceil(p*float64(len(d))/100)) - 1
	i = max(0, min(i, len(d)-1))
	return d[i]
}

// jain is Jain's fairness index of counts: 1 when all are equal, 1/n when
// one goroutine got everything.
func jain(counts []int64) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sq)
}

// ms formats a duration in milliseconds with sensible precision.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.2f", v)
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// secs formats d in seconds, or in milliseconds below a second (fast
// failover is a few milliseconds, which "0.00 s" would hide).
func secs(d time.Duration) string {
	if d > -time.Second && d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// ratio formats a/b as a factor, or "–" when either is zero or NaN.
func ratio(a, b float64) string {
	if b == 0 || a == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	return num(a/b) + "×"
}

// num formats v with two decimals below 10, one below 100 and none from
// 100 on.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
