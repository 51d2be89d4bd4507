package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/leasehold/leasehold/episodes"
	"github.com/leasehold/leasehold/inspect"
)

// Cancel and retry: a confirmation page (GET) that changes nothing, then
// the action (POST, CSRF-checked) through CancelEpisode or RequeueEpisode.

type confirmPage struct {
	page
	E      inspect.EpisodeDetail
	Action string // cancel or retry
	What   string // what the action does to this episode
	Error  string
}

func (h *Handler) confirm(w http.ResponseWriter, r *http.Request) {
	h.confirmPage(w, r, http.StatusOK, "")
}

func (h *Handler) confirmPage(w http.ResponseWriter, r *http.Request, status int, problem string) {
	action := r.PathValue("action")
	if action != "cancel" && action != "retry" {
		h.fail(w, r, http.StatusNotFound, "no such page")
		return
	}
	if h.cfg.ReadOnly {
		h.fail(w, r, http.StatusForbidden, "this dashboard is read-only: cancel and retry are turned off")
		return
	}
	id, err := episodeID(r)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err.Error())
		return
	}
	p, err := h.base(w, r, fmt.Sprintf("%s episode %d", strings.ToUpper(action[:1])+action[1:], id), "episodes")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	d, err := h.store.DashboardEpisode(r.Context(), id)
	if errors.Is(err, episodes.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no episode %d", id))
		return
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := confirmPage{page: p, E: d, Action: action, Error: problem}
	switch {
	case action == "cancel" && d.Claim != nil && d.Claim.Live:
		data.What = "Its holder holds a live lease: the cancel is recorded now, and the holder ends the episode canceled " +
			"within one heartbeat interval, with its own fenced write."
	case action == "cancel":
		data.What = "Nobody holds a live lease on it: it ends canceled at once, its open trigger request is closed and an expired grant is fenced out."
	default:
		data.What = fmt.Sprintf("It becomes available again as attempt %d, due at once, to any full node with a free slot for its actor.", d.Attempt()+1)
	}
	h.render(w, r, "confirm", status, data)
}

// maxFormBytes bounds an action's form: a token and nothing else.
const maxFormBytes = 4 << 10

func (h *Handler) act(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if action != "cancel" && action != "retry" {
		h.fail(w, r, http.StatusNotFound, "no such page")
		return
	}
	if h.cfg.ReadOnly {
		h.fail(w, r, http.StatusForbidden, "this dashboard is read-only: cancel and retry are turned off")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := h.csrf.check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, err.Error())
		return
	}
	id, err := episodeID(r)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err.Error())
		return
	}
	by := h.cfg.Operator(r)
	log := h.log.With(slog.String("action", action), slog.Int64("episode", id), slog.String("operator", by))
	var notice string
	switch action {
	case "cancel":
		detail, _ := json.Marshal(map[string]string{"reason": "canceled", "by": by})
		var res episodes.Canceled
		res, err = h.store.CancelEpisode(r.Context(), id, detail)
		notice = "canceled"
		if err == nil && !res.Ended {
			notice = "cancel-requested"
		}
	case "retry":
		_, err = h.store.RequeueEpisode(r.Context(), id, by)
		notice = "retried"
	}
	switch {
	case errors.Is(err, episodes.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no episode %d", id))
		return
	case errors.Is(err, episodes.ErrNotLive), errors.Is(err, episodes.ErrNotRetryable):
		log.InfoContext(r.Context(), "leasehold ui: action refused", slog.Any("error", err))
		h.confirmPage(w, r, http.StatusConflict, err.Error())
		return
	case err != nil:
		h.failErr(w, r, err)
		return
	}
	log.InfoContext(r.Context(), "leasehold ui: "+action, slog.String("result", notice))
	http.Redirect(w, r, fmt.Sprintf("%s/episodes/%d?notice=%s", h.cfg.Prefix, id, notice), http.StatusSeeOther)
}
