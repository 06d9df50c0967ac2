package queue

import "testing"

func TestName(t *testing.T) {
	for row, want := range map[string]string{
		"job": "job", "job#0": "job", "job#12": "job", "a#b": "a#b", "job#": "job#",
		"#3": "#3", "x#1#2": "x#1", "job#-1": "job#-1", "job#99999999999": "job#99999999999",
	} {
		if got := Name(row); got != want {
			t.Errorf("Name(%q) = %q, want %q", row, got, want)
		}
	}
}
