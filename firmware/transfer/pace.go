package transfer

import "time"

// pacer is a token bucket: rate bytes per second, a burst of at most
// burst bytes. It does no I/O and reads no clock: callers pass now.
type pacer struct {
	rate   float64 // bytes per second; 0 for no cap
	burst  float64
	tokens float64
	last   time.Time
}

func newPacer(rate uint64, burst int, now time.Time) *pacer {
	return &pacer{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: now}
}

// take spends n bytes at now and returns how long to wait before sending
// them: 0 while the bucket holds them. A send larger than the burst
// waits until the bucket is full, then takes it into debt.
func (p *pacer) take(now time.Time, n int) time.Duration {
	if p.rate <= 0 {
		return 0
	}
	if el := now.Sub(p.last); el > 0 {
		p.tokens = min(p.burst, p.tokens+p.rate*el.Seconds())
		p.last = now
	}
	p.tokens -= float64(n)
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens / p.rate * float64(time.Second))
}
