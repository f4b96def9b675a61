package cgroups

// CPU conversions, with kubelet's constants.
const (
	MinShares     = 2      // cpu.shares for no request (the kernel's floor)
	MaxShares     = 262144 // the kernel's ceiling for cpu.shares
	SharesPerCPU  = 1024
	QuotaPeriod   = 100000 // cpu.cfs_period_us, 100ms
	MinQuota      = 1000   // the least cpu.cfs_quota_us kubelet sets, 1ms
	milliCPUToCPU = 1000
)

// MilliCPUToShares converts a CPU request in millicores to cpu.shares:
// 1024 a core, at least MinShares (also for no request) and at most
// MaxShares.
func MilliCPUToShares(milliCPU int64) uint64 {
	if milliCPU <= 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / milliCPUToCPU
	if shares < MinShares {
		return MinShares
	}
	if shares > MaxShares {
		return MaxShares
	}
	return uint64(shares)
}

// MilliCPUToQuota converts a CPU limit in millicores to a CFS quota over
// QuotaPeriod, both in microseconds: at least MinQuota; 0, 0 for no limit.
func MilliCPUToQuota(milliCPU int64) (quota, period int64) {
	if milliCPU <= 0 {
		return 0, 0
	}
	quota = milliCPU * QuotaPeriod / milliCPUToCPU
	if quota < MinQuota {
		quota = MinQuota
	}
	return quota, QuotaPeriod
}

// SharesToWeight converts cpu.shares (2 to 262144) to cgroup v2's
// cpu.weight (1 to 10000) by the linear map runc 1.1 and kubelet 1.33 use,
// so that a pod's weight and its containers' (set by runc) agree.
func SharesToWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	shares = min(max(shares, MinShares), MaxShares)
	return 1 + (shares-2)*9999/262142
}
