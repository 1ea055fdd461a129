package simulate

import "fmt"

// guest is a VM or container of the simulated cluster.
type guest struct {
	vmid int
	node string
}

// world is the simulated Proxmox cluster the agents work on. It is fixed per
// scenario (not per seed) so that planted ground truth can name real guests.
type world struct {
	nodes    []string
	vms      []guest
	cts      []guest
	runners  []guest // CI runner VMs
	template guest   // CI template that runners are cloned from
	storages []string
}

func newWorld(scenario string, nodes, vms, cts int) *world {
	r := newRNG(int64(len(scenario)), 0x3017d) // fixed: the cluster is part of the scenario
	w := &world{storages: []string{"local", "local-lvm", "ceph-vm", "nfs-backup"}}
	for i := 1; i <= nodes; i++ {
		w.nodes = append(w.nodes, fmt.Sprintf("pve%d", i))
	}
	for i := 0; i < vms; i++ {
		w.vms = append(w.vms, guest{vmid: 100 + i, node: pick(r, w.nodes)})
	}
	for i := 0; i < cts; i++ {
		w.cts = append(w.cts, guest{vmid: 200 + i, node: pick(r, w.nodes)})
	}
	for i := 0; i < 3; i++ {
		w.runners = append(w.runners, guest{vmid: 800 + i, node: w.nodes[i%len(w.nodes)]})
	}
	w.template = guest{vmid: 9000, node: w.nodes[0]}
	return w
}

// hotVM picks a VM with a skew: a few VMs get most of the attention.
func (w *world) hotVM(r *rng) guest { return w.vms[r.skewed(len(w.vms))] }

// otherNode returns a node other than n (for migrations).
func (w *world) otherNode(r *rng, n string) string {
	for {
		if o := pick(r, w.nodes); o != n || len(w.nodes) == 1 {
			return o
		}
	}
}
