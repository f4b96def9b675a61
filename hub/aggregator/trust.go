package aggregator

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The ConfigMap in which the hub publishes how to authenticate its
// clients and its front proxy, which extension API servers read
// (upstream's cluster authentication trust controller).
const (
	TrustNamespace = "kube-system"
	TrustName      = "extension-apiserver-authentication"
)

// Keys of the trust ConfigMap, as upstream's. The lists are JSON arrays
// of strings; the CAs are PEM bundles.
const (
	KeyClientCA          = "client-ca-file"
	KeyRequestHeaderCA   = "requestheader-client-ca-file"
	KeyAllowedNames      = "requestheader-allowed-names"
	KeyUsernameHeaders   = "requestheader-username-headers"
	KeyUIDHeaders        = "requestheader-uid-headers"
	KeyGroupHeaders      = "requestheader-group-headers"
	KeyExtraHeaderPrefix = "requestheader-extra-headers-prefix"
)

// maxTrustValue bounds one value of the trust ConfigMap the hub reads
// back: a ConfigMap holds at most 1MiB in all.
const maxTrustValue = 1 << 20

// trustRecheck is how often the ConfigMap is checked without a change of
// its own, as upstream's once a minute.
const trustRecheck = time.Minute

// Trust is what the hub publishes for extension API servers: who may
// present client certificates (ClientCA) and who may assert users in
// request headers, and in which.
type Trust struct {
	// ClientCA is the PEM bundle of the cluster CA.
	ClientCA []byte
	// RequestHeaderCA is the PEM bundle of the front-proxy CA; empty
	// publishes none of the requestheader keys.
	RequestHeaderCA []byte
	// AllowedNames are the common names a front-proxy certificate may
	// have.
	AllowedNames []string
	// UsernameHeaders, UIDHeaders, GroupHeaders and ExtraHeaderPrefixes
	// are the headers the front proxy sets.
	UsernameHeaders, UIDHeaders, GroupHeaders, ExtraHeaderPrefixes []string
}

// HubTrust is the Trust of a hub whose cluster CA is clientCA and whose
// front-proxy CA is frontProxyCA, front-proxy client commonName: the
// headers are the ones Proxy sets.
func HubTrust(clientCA, frontProxyCA []byte, commonName string) Trust {
	return Trust{
		ClientCA:            clientCA,
		RequestHeaderCA:     frontProxyCA,
		AllowedNames:        []string{commonName},
		UsernameHeaders:     []string{HeaderUser},
		UIDHeaders:          []string{HeaderUID},
		GroupHeaders:        []string{HeaderGroup},
		ExtraHeaderPrefixes: []string{HeaderExtraPrefix},
	}
}

// TrustData returns the data of the trust ConfigMap whose data is now
// have, once it holds want: as upstream's, what is there already stays
// (the other API servers of the cluster wrote it), lists gain what they
// lack, and CA bundles gain the missing certificates and lose those
// expired for five minutes before now. A value of have that cannot be
// read is an error, which the caller may answer by rewriting the
// ConfigMap from want alone. No I/O.
func TrustData(have map[string]string, want Trust, now time.Time) (map[string]string, error) {
	cur, err := parseTrust(have)
	if err != nil {
		return nil, err
	}
	clientCA, err := combineCAs(now, cur.ClientCA, want.ClientCA)
	if err != nil {
		return nil, err
	}
	data := map[string]string{}
	if len(clientCA) > 0 {
		data[KeyClientCA] = string(clientCA)
	}
	headerCA, err := combineCAs(now, cur.RequestHeaderCA, want.RequestHeaderCA)
	if err != nil {
		return nil, err
	}
	if len(headerCA) == 0 {
		return data, nil
	}
	data[KeyRequestHeaderCA] = string(headerCA)
	lists := []struct {
		key       string
		have, add []string
	}{
		{KeyAllowedNames, cur.AllowedNames, want.AllowedNames},
		{KeyUsernameHeaders, cur.UsernameHeaders, want.UsernameHeaders},
		{KeyUIDHeaders, cur.UIDHeaders, want.UIDHeaders},
		{KeyGroupHeaders, cur.GroupHeaders, want.GroupHeaders},
		{KeyExtraHeaderPrefix, cur.ExtraHeaderPrefixes, want.ExtraHeaderPrefixes},
	}
	for _, l := range lists {
		all := unionStrings(l.have, l.add)
		if l.key == KeyUIDHeaders && len(all) == 0 {
			continue // upstream writes no empty uid list
		}
		b, _ := json.Marshal(all) // strings always marshal
		data[l.key] = string(b)
	}
	return data, nil
}

// parseTrust reads the Trust in a trust ConfigMap's data.
func parseTrust(data map[string]string) (Trust, error) {
	var t Trust
	for k, v := range data {
		if len(v) > maxTrustValue {
			return Trust{}, fmt.Errorf("%s holds %d bytes, more than %d", k, len(v), maxTrustValue)
		}
	}
	lists := []struct {
		key string
		to  *[]string
	}{
		{KeyAllowedNames, &t.AllowedNames},
		{KeyUsernameHeaders, &t.UsernameHeaders},
		{KeyUIDHeaders, &t.UIDHeaders},
		{KeyGroupHeaders, &t.GroupHeaders},
		{KeyExtraHeaderPrefix, &t.ExtraHeaderPrefixes},
	}
	for _, l := range lists {
		v, ok := data[l.key]
		if !ok || v == "" {
			continue
		}
		if err := json.Unmarshal([]byte(v), l.to); err != nil {
			return Trust{}, fmt.Errorf("%s: %w", l.key, err)
		}
	}
	t.ClientCA = []byte(data[KeyClientCA])
	t.RequestHeaderCA = []byte(data[KeyRequestHeaderCA])
	return t, nil
}

// unionStrings returns a's strings then b's not in a, each once.
func unionStrings(a, b []string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// combineCAs returns the PEM bundle of the certificates of a then b, each
// once, without those expired five minutes before now; nil when none is
// left.
func combineCAs(now time.Time, a, b []byte) ([]byte, error) {
	var out bytes.Buffer
	var seen [][]byte
	for _, bundle := range [][]byte{a, b} {
		certs, err := parseCerts(bundle)
		if err != nil {
			return nil, err
		}
		for _, c := range certs {
			if !c.NotAfter.After(now.Add(-5*time.Minute)) || containsBytes(seen, c.Raw) {
				continue
			}
			seen = append(seen, c.Raw)
			pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}) // a bytes.Buffer takes every write
		}
	}
	if out.Len() == 0 {
		return nil, nil
	}
	return out.Bytes(), nil
}

// containsBytes reports whether list holds b.
func containsBytes(list [][]byte, b []byte) bool {
	for _, x := range list {
		if bytes.Equal(x, b) {
			return true
		}
	}
	return false
}

// parseCerts parses the certificates of a PEM bundle; blocks of other
// types are skipped, as upstream's cert.ParseCertsPEM does, but a bundle
// with text and no certificate at all is an error.
func parseCerts(bundle []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := bytes.TrimSpace(bundle)
	for len(rest) > 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 && len(bytes.TrimSpace(bundle)) > 0 {
		return nil, fmt.Errorf("no PEM certificate in a bundle of %d bytes", len(bundle))
	}
	return certs, nil
}

// TrustPublisher keeps the trust ConfigMap holding its Trust, as
// upstream's cluster authentication trust controller: at start, when the
// ConfigMap changes or goes, and once a minute.
type TrustPublisher struct {
	want     Trust
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
	lister   corelisters.ConfigMapLister
	queue    workqueue.TypedRateLimitingInterface[string]
	now      func() time.Time
	log      *slog.Logger
}

// NewTrustPublisher returns a TrustPublisher of want through kc; it
// starts nothing. log is non-nil.
func NewTrustPublisher(kc kubernetes.Interface, want Trust, log *slog.Logger) (*TrustPublisher, error) {
	f := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(TrustNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", TrustName).String()
		}))
	inf := f.Core().V1().ConfigMaps()
	p := &TrustPublisher{
		want:     want,
		client:   kc,
		informer: inf.Informer(),
		lister:   inf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "cluster-authentication-trust"}),
		now: time.Now,
		log: log,
	}
	enqueue := func(any) { p.queue.Add(TrustName) }
	if _, err := p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// Run publishes until ctx ends, and returns once its goroutines have
// exited.
func (p *TrustPublisher) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.informer.RunWithContext(ctx)
	}()
	defer func() { <-done }()
	defer p.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced) {
		return nil // ctx ended
	}
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		for p.work(ctx) {
		}
	}()
	// The queue shuts before the worker is waited for: it ends then.
	defer func() {
		p.queue.ShutDown()
		<-worker
	}()
	t := time.NewTicker(trustRecheck)
	defer t.Stop()
	for {
		p.queue.Add(TrustName)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// work syncs the ConfigMap once it is queued; it reports false once the
// queue is shut.
func (p *TrustPublisher) work(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	if err := p.sync(ctx); err != nil {
		p.log.Warn("extension-apiserver-authentication not published; retrying", "err", err)
		p.queue.AddRateLimited(key)
		return true
	}
	p.queue.Forget(key)
	return true
}

// sync writes the ConfigMap when it lacks what the hub trusts. One that
// cannot be read is rewritten with the hub's trust alone.
func (p *TrustPublisher) sync(ctx context.Context) error {
	cm, err := p.lister.ConfigMaps(TrustNamespace).Get(TrustName)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: TrustNamespace, Name: TrustName}}
	case err != nil:
		return err
	}
	data, err := TrustData(cm.Data, p.want, p.now())
	if err != nil {
		p.log.Warn("extension-apiserver-authentication unreadable; rewriting it", "err", err)
		if data, err = TrustData(nil, p.want, p.now()); err != nil {
			return err
		}
	}
	if maps.Equal(data, cm.Data) {
		return nil
	}
	cms := p.client.CoreV1().ConfigMaps(TrustNamespace)
	next := cm.DeepCopy()
	next.Data = data
	if cm.ResourceVersion == "" {
		_, err = cms.Create(ctx, next, metav1.CreateOptions{})
	} else {
		_, err = cms.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write configmap %s/%s: %w", TrustNamespace, TrustName, err)
	}
	p.log.Info("published extension-apiserver-authentication")
	return nil
}
