package report

import "testing"

func TestParseLoadAvg(t *testing.T) {
	got, err := parseLoadAvg([]byte("1.25 0.50 2.00 3/456 7890\n"))
	if err != nil || got != [3]float64{1.25, 0.5, 2} {
		t.Errorf("parseLoadAvg = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1 2", "1 x 3"} {
		if _, err := parseLoadAvg([]byte(bad)); err == nil {
			t.Errorf("parseLoadAvg(%q) = nil error", bad)
		}
	}
}
