package findings_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/leasehold/leasehold/claims"
	"github.com/leasehold/leasehold/findings"
)

// fakeStore is a test double of findings.Store: one active finding per key
// per env, the env taken from the episode. It does not fence (the
// conformance suite proves that against real databases); it records what it
// was sent so the tests can check the API's defaults and validation.
type fakeStore struct {
	mu       sync.Mutex
	envs     map[int64]string // episode id -> env
	rows     []findings.Finding
	calls    int
	lastTok  claims.Token
	lastEp   int64
	lastData []byte
	lastQ    findings.Query
	err      error // returned by every call when set
}

func newFakeStore(episodeEnvs map[int64]string) *fakeStore {
	return &fakeStore{envs: episodeEnvs}
}

func (s *fakeStore) record(t claims.Token, ep int64) error {
	s.calls++
	s.lastTok, s.lastEp = t, ep
	return s.err
}

func (s *fakeStore) active(env, key string) *findings.Finding {
	for i := range s.rows {
		if r := &s.rows[i]; r.Env == env && r.Key == key && r.Status == findings.StatusActive {
			return r
		}
	}
	return nil
}

func (s *fakeStore) RaiseFinding(_ context.Context, t claims.Token, ep int64, r findings.Raise) (findings.Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastData = r.Data
	if err := s.record(t, ep); err != nil {
		return findings.Finding{}, err
	}
	env := s.envs[ep]
	if f := s.active(env, r.Key); f != nil {
		f.Class, f.Severity, f.Summary, f.Data = r.Class, r.Severity, r.Summary, r.Data
		f.UpdatedByEpisode = ep
		f.RaiseCount++
		return *f, nil
	}
	s.rows = append(s.rows, findings.Finding{
		ID: int64(len(s.rows) + 1), Key: r.Key, Env: env, Status: findings.StatusActive, Class: r.Class,
		Severity: r.Severity, Summary: r.Summary, Data: r.Data, RaisedByEpisode: ep, UpdatedByEpisode: ep, RaiseCount: 1,
	})
	return s.rows[len(s.rows)-1], nil
}

func (s *fakeStore) UpdateFinding(_ context.Context, t claims.Token, ep int64, key string, u findings.Update) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastData = u.Data
	if err := s.record(t, ep); err != nil {
		return false, err
	}
	f := s.active(s.envs[ep], key)
	if f == nil {
		return false, nil
	}
	f.Severity, f.Summary, f.Data, f.UpdatedByEpisode = u.Severity, u.Summary, u.Data, ep
	return true, nil
}

func (s *fakeStore) ClearFinding(_ context.Context, t claims.Token, ep int64, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.record(t, ep); err != nil {
		return false, err
	}
	f := s.active(s.envs[ep], key)
	if f == nil {
		return false, nil
	}
	f.Status = findings.StatusCleared
	return true, nil
}

func (s *fakeStore) ActiveFindings(_ context.Context, q findings.Query) ([]findings.Finding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.lastQ = q
	if s.err != nil {
		return nil, s.err
	}
	var out []findings.Finding
	for _, r := range s.rows {
		if r.Status != findings.StatusActive || r.Env != q.Env ||
			(q.Class != "" && r.Class != q.Class) || (q.ActorID != "" && r.ActorID != q.ActorID) ||
			(q.Key != "" && r.Key != q.Key) {
			continue
		}
		if len(out) == q.Limit {
			break
		}
		out = append(out, r)
	}
	return out, nil
}

// run is a findings.Holder, as *runner.Run is.
type run struct {
	id  int64
	tok claims.Token
}

func (r run) EpisodeID() int64    { return r.id }
func (r run) Token() claims.Token { return r.tok }

func newRun(id int64) run {
	return run{id: id, tok: claims.Token{Key: fmt.Sprintf("episode:%d", id), Owner: "node-a", Fence: 1}}
}
