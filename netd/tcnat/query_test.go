package tcnat

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

func queryTCX(ifindex int, at ebpf.AttachType) ([]ebpf.ProgramID, error) {
	r, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
	if err != nil {
		return nil, err
	}
	var ids []ebpf.ProgramID
	for _, p := range r.Programs {
		ids = append(ids, p.ID)
	}
	return ids, nil
}
