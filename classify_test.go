package pglease

import (
	"context"
	"errors"
	"testing"
)

// TestClassify checks the loop's decision after a round for every kind of
// outcome: it is a pure function of its inputs.
func TestClassify(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	held := &HeldError{Holder: Info{Name: "n", Owner: "other"}}
	fatal := errors.New("permission denied")
	retryable := errRowBusy // retryable, not a redo
	lease := []*Lease{{}}

	type want struct {
		action action
		err    error // fail: errors.Is(err, this)
		last   error // otherwise: errors.Is(last, this)
	}
	for _, tc := range []struct {
		name    string
		ctx, bg context.Context
		r       roundResult
		waits   bool
		retries int
		last    error
		want    want
	}{
		{"acquired", live, live, roundResult{leases: lease}, true, 0, nil, want{action: done}},
		{"acquired, single attempt", live, live, roundResult{leases: lease}, false, 0, nil, want{action: done}},
		{"acquired though closed", live, ended, roundResult{leases: lease}, true, 0, nil, want{action: done}},
		{"refused: wait", live, live, roundResult{held: held}, true, 0, nil, want{action: wait, last: held}},
		{"refused: wait, after a failure", live, live, roundResult{held: held}, true, 3, ErrNotAcquired, want{action: wait, last: held}},
		{"refused: single attempt fails with the holder", live, live, roundResult{held: held}, false, 0, nil, want{action: fail, err: held}},
		{"context ended the attempt", ended, live, roundResult{err: context.Canceled}, true, 0, held, want{action: fail, err: held}},
		{"context ended the attempt: gave up", ended, live, roundResult{err: context.Canceled}, true, 0, nil, want{action: fail, err: context.Canceled}},
		{"context ended and closed", ended, ended, roundResult{err: context.Canceled}, true, 0, held, want{action: fail, err: held}},
		{"closed", live, ended, roundResult{err: retryable}, true, 0, nil, want{action: fail, err: ErrClosed}},
		{"closed, a redo", live, ended, roundResult{err: errLate}, true, 0, nil, want{action: fail, err: ErrClosed}},
		{"closed, ctx ended, another error", ended, ended, roundResult{err: retryable}, true, 0, nil, want{action: fail, err: retryable}},
		{"not retryable", live, live, roundResult{err: fatal}, true, 0, held, want{action: fail, err: fatal}},
		{"not retryable, single attempt", live, live, roundResult{err: fatal}, false, 0, nil, want{action: fail, err: fatal}},
		{"redo: retry now", live, live, roundResult{err: errOrphan}, true, 5, held, want{action: retryNow, last: held}},
		{"redo: single attempt, first retry", live, live, roundResult{err: errLate}, false, 0, nil, want{action: retryNow}},
		{"redo: single attempt, second retry", live, live, roundResult{err: errSessionGone}, false, 1, nil, want{action: retryNow}},
		{"redo: single attempt, third fails", live, live, roundResult{err: errLate}, false, 2, nil, want{action: fail, err: errLate}},
		{"retryable: back off, keeps the holder", live, live, roundResult{err: retryable}, true, 0, held, want{action: backOff, last: held}},
		{"retryable: back off, names the failure", live, live, roundResult{err: retryable}, true, 0, nil, want{action: backOff, last: retryable}},
		{"retryable: back off, not-acquired", live, live, roundResult{err: retryable}, true, 7, nil, want{action: backOff, last: ErrNotAcquired}},
		{"retryable: single attempt fails", live, live, roundResult{err: retryable}, false, 0, nil, want{action: fail, err: retryable}},
		{"context ended, another error: retried", ended, live, roundResult{err: retryable}, true, 0, nil, want{action: backOff, last: retryable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			got := classify(tc.ctx, tc.bg, &r, tc.waits, tc.retries, tc.last)
			if got.action != tc.want.action {
				t.Fatalf("action = %d, want %d (err %v)", got.action, tc.want.action, got.err)
			}
			switch {
			case tc.want.action == fail:
				if !errors.Is(got.err, tc.want.err) {
					t.Errorf("err = %v, want one matching %v", got.err, tc.want.err)
				}
			case tc.want.err == nil && got.err != nil:
				t.Errorf("err = %v, want none", got.err)
			}
			if tc.want.action != fail {
				if tc.want.last == nil {
					if got.last != nil {
						t.Errorf("last = %v, want none", got.last)
					}
				} else if !errors.Is(got.last, tc.want.last) {
					t.Errorf("last = %v, want one matching %v", got.last, tc.want.last)
				}
			}
		})
	}
}
