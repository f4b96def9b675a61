package streams

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestReadResizes(t *testing.T) {
	var got []string
	err := readResizes(strings.NewReader(`{"Width":80,"Height":24}{"Width":120,"Height":40}`), func(w, h uint16) error {
		got = append(got, fmt.Sprintf("%dx%d", w, h))
		return nil
	})
	if len(got) != 2 || got[0] != "80x24" || got[1] != "120x40" || err == nil {
		t.Errorf("readResizes = %v, %v; want two sizes then the end", got, err)
	}
	endless := `{"Width":` + strings.Repeat("1", 1<<20)
	err = readResizes(strings.NewReader(endless), func(w, h uint16) error { return nil })
	if !errors.Is(err, errResizeTooLarge) {
		t.Errorf("readResizes of an endless value = %v, want errResizeTooLarge", err)
	}
}

// FuzzReadResizes checks that no input makes readResizes panic or buffer
// past its limit.
func FuzzReadResizes(f *testing.F) {
	f.Add(`{"Width":80,"Height":24}`)
	f.Add(`{"Width":70000}`)
	f.Add(`[1,2]{"Height":-1}`)
	f.Fuzz(func(t *testing.T, in string) {
		_ = readResizes(strings.NewReader(in), func(w, h uint16) error { return nil })
	})
}

// FuzzLogOptions checks that no query makes logOptions panic, and that
// what it accepts is valid.
func FuzzLogOptions(f *testing.F) {
	f.Add("follow=true&tailLines=10&sinceSeconds=5")
	f.Add("sinceTime=2026-12-06T06:00:00Z&limitBytes=0")
	f.Add("tailLines=-1&stream=Stdout")
	f.Fuzz(func(t *testing.T, q string) {
		vs, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		o, err := logOptions(vs)
		if err != nil {
			return
		}
		if (o.TailLines != nil && *o.TailLines < 0) || (o.LimitBytes != nil && *o.LimitBytes < 1) || (o.SinceSeconds != nil && *o.SinceSeconds < 1) {
			t.Errorf("logOptions(%q) accepted %+v", q, o)
		}
	})
}
