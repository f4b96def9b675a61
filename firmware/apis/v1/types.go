package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a Release's status.
const (
	// ReleaseVerified is true when the hub checked the envelope's
	// signatures against its trusted keys. Nodes check again themselves.
	ReleaseVerified = "Verified"
	// ReleaseArtifactsStored is true when every artifact the manifest
	// lists is in the hub's content store.
	ReleaseArtifactsStored = "ArtifactsStored"
)

// Release is a signed release manifest uploaded to the hub, with a
// summary of its components. The artifacts themselves live in the hub's
// content store, addressed by their sha256, never in the API object.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Release struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ReleaseSpec   `json:"spec"`
	Status ReleaseStatus `json:"status,omitempty"`
}

// ReleaseSpec is what `outpost release create` uploads.
type ReleaseSpec struct {
	// Version is the manifest's semantic version, shown by kubectl; the
	// signed manifest is authoritative.
	Version string `json:"version"`
	// Envelope is the signed envelope (firmware/manifest) byte for byte,
	// at most manifest.MaxEnvelopeBytes; base64 in JSON.
	Envelope []byte `json:"envelope"`
	// Components summarises the manifest's components, by unique name,
	// for display and for the controller.
	Components []ReleaseComponent `json:"components,omitempty"`
}

// ReleaseComponent is the summary of one component of the manifest.
type ReleaseComponent struct {
	// Name is the component's name in the release, a DNS label.
	Name string `json:"name"`
	// Kind is "agent" or "file".
	Kind string `json:"kind"`
	// OS, Arch and Variant are the target platform (GOOS, GOARCH, GOARM);
	// empty means any.
	OS      string `json:"os,omitempty"`
	Arch    string `json:"arch,omitempty"`
	Variant string `json:"variant,omitempty"`
	// Size is the artifact's length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex sha256 of the artifact, its address in
	// the content store.
	SHA256 string `json:"sha256"`
}

// ReleaseStatus is what the hub found of a Release.
type ReleaseStatus struct {
	// ObservedGeneration is the generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are ReleaseVerified and ReleaseArtifactsStored.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// KeyIDs are the ids of the trusted keys whose signatures verified.
	KeyIDs []string `json:"keyIDs,omitempty"`
}

// ReleaseList is a list of Releases.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type ReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Release `json:"items"`
}

// FailureAction is what a Rollout does when its failure budget trips.
type FailureAction string

const (
	// FailurePause stops offering the release; nodes keep what they run.
	FailurePause FailureAction = "Pause"
	// FailureRevert stops offering the release and reverts the nodes
	// that took it.
	FailureRevert FailureAction = "Revert"
)

// Rollout offers a Release to the nodes it selects, wave by wave, each
// node watched for a health window, stopping when the failure budget
// trips. `kubectl patch rollout NAME --type=merge -p
// '{"spec":{"paused":true}}'` pauses it.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutSpec   `json:"spec"`
	Status RolloutStatus `json:"status,omitempty"`
}

// RolloutSpec is what a Rollout asks for.
type RolloutSpec struct {
	// Release is the name of the Release to roll out; required and
	// immutable.
	Release string `json:"release"`
	// NodeSelector selects nodes by label; nil selects every node.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Sites are topology.outpost.dev/site values the nodes must have one
	// of; empty means every site.
	Sites []string `json:"sites,omitempty"`
	// Waves are the cumulative targets, each a node count ("1") or a
	// percentage of the nodes ("5%"), as rollout.ParseWaves reads them;
	// the API server defaults them to ["100%"].
	Waves []string `json:"waves,omitempty"`
	// HealthWindow is how long an updated node must stay healthy; the
	// API server defaults it to 5m.
	HealthWindow *metav1.Duration `json:"healthWindow,omitempty"`
	// FailureBudget is when the rollout stops; the zero budget never
	// trips.
	FailureBudget FailureBudget `json:"failureBudget,omitempty"`
	// OnFailure is what happens when the budget trips; the API server
	// defaults it to Pause.
	OnFailure FailureAction `json:"onFailure,omitempty"`
	// MaintenanceWindows are when nodes may be offered the release, in
	// each node's site-local time; none means any time.
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
	// Paused stops offers, reverts and wave progress.
	Paused bool `json:"paused,omitempty"`
}

// FailureBudget trips at Count failed nodes, or when Percent of the
// sample failed, once the sample holds MinSample nodes. Zero Count or
// Percent disables that test.
type FailureBudget struct {
	Count     int32 `json:"count,omitempty"`
	Percent   int32 `json:"percent,omitempty"`
	MinSample int32 `json:"minSample,omitempty"`
}

// MaintenanceWindow is a daily window from Start to End ("HH:MM",
// 24-hour, site-local); an End before Start crosses midnight.
type MaintenanceWindow struct {
	// Days are the days the window opens on, "Mon" to "Sun"; none means
	// every day.
	Days  []string `json:"days,omitempty"`
	Start string   `json:"start"`
	End   string   `json:"end"`
}

// RolloutStatus is the progress of a Rollout.
type RolloutStatus struct {
	// ObservedGeneration is the generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Wave is the current wave, counted from 1; 0 before the first
	// starts.
	Wave int32 `json:"wave"`
	// Waves are the waves' progress, one per spec wave.
	Waves []WaveStatus `json:"waves,omitempty"`
	// Updated, Failed and Pending count the selected nodes that run the
	// release, that failed it, and that are still to take it.
	Updated int32 `json:"updated"`
	Failed  int32 `json:"failed"`
	Pending int32 `json:"pending"`
	// Nodes are the selected nodes' update state, by unique name.
	Nodes []NodeStatus `json:"nodes,omitempty"`
	// Planner is the wave planner's memory between reconciles.
	Planner *PlannerState `json:"planner,omitempty"`
	// Conditions are Progressing, Paused, BudgetExceeded and Complete.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WaveStatus is the progress of one wave; counts are of the nodes of
// this wave and the earlier ones.
type WaveStatus struct {
	// Target is the wave's cumulative target in nodes.
	Target     int32 `json:"target"`
	Nodes      int32 `json:"nodes"`
	Updated    int32 `json:"updated"`
	Healthy    int32 `json:"healthy"`
	Failed     int32 `json:"failed"`
	InProgress int32 `json:"inProgress"`
	Pending    int32 `json:"pending"`
	Offline    int32 `json:"offline"`
	// Started is when the wave started; nil until it does.
	Started *metav1.Time `json:"started,omitempty"`
}

// NodeStatus is one node's update state for the rollout's release.
type NodeStatus struct {
	Name string `json:"name"`
	// State is a rollout.NodeState: Idle, Offered, Downloading,
	// Installing, Trial, Updated, Failed or Reverted.
	State string `json:"state"`
	// Version is the version the node runs.
	Version string `json:"version,omitempty"`
	// Reason and Message say why the node is in State, such as a
	// manifest.Reason for a refusal.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Since is when the node entered State.
	Since metav1.Time `json:"since"`
}

// PlannerState mirrors rollout.Status: the planner's memory, kept in the
// Rollout's status and passed back to the next plan. Times are kept to
// the second, as metav1.Time is.
type PlannerState struct {
	// Wave is the index of the current wave, from 0.
	Wave int32 `json:"wave"`
	// WaveStarted[i] is when wave i started.
	WaveStarted []metav1.Time `json:"waveStarted,omitempty"`
	// Assigned maps each node to its wave's index.
	Assigned map[string]int32 `json:"assigned,omitempty"`
	// Tripped records that the failure budget tripped.
	Tripped bool `json:"tripped,omitempty"`
	// Complete records that the last wave was done.
	Complete bool `json:"complete,omitempty"`
	// Paused is spec.paused as of the last plan.
	Paused bool `json:"paused,omitempty"`
	// Failed are the nodes that counted as failed at the last plan.
	Failed []string `json:"failed,omitempty"`
	// Excused are the failed nodes a resume forgave.
	Excused []string `json:"excused,omitempty"`
}

// RolloutList is a list of Rollouts.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type RolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Rollout `json:"items"`
}
