package server

import (
	"os"
	"time"

	"github.com/switchyard/switchyard/internal/pacefile"
)

// learnedSaveEvery is how often the pacing the sites taught is written to
// [pacing] learned_file, besides at shutdown: what a crash loses.
const learnedSaveEvery = 30 * time.Second

// restoreLearned starts the engine from the pacing saved in
// [pacing] learned_file, if any. A file that cannot be read is set aside
// as FILE.bad, for the operator to look at, and the gateway starts
// without it: the next save must not overwrite it.
func (s *Server) restoreLearned(now time.Time) {
	path := s.started.Pacing.LearnedFile
	if path == "" {
		return
	}
	saved, ok, err := pacefile.Load(path)
	if err != nil {
		s.log.Error("pacing.learned_file unreadable: starting without it", "err", err, "kept_as", path+".bad")
		if err := os.Rename(path, path+".bad"); err != nil {
			s.log.Error("pacing.learned_file not set aside", "err", err)
		}
		return
	}
	if !ok {
		return
	}
	n := s.engine.RestorePace(now, saved)
	s.log.Info("learned pacing restored", "file", path, "pairs", n, "saved_pairs", len(saved.Pairs), "targets", len(saved.Targets))
}

// saveLearned writes the pacing the sites taught to [pacing] learned_file.
func (s *Server) saveLearned(now time.Time) {
	path := s.started.Pacing.LearnedFile
	if path == "" {
		return
	}
	if err := pacefile.Save(path, s.engine.SavePace(now), now); err != nil {
		s.log.Error("pacing.learned_file not saved", "err", err)
	}
}
