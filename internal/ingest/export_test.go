package ingest

// SurgeCalmKnown reports whether RunPressure's surge meter has learned its
// calm rate (surgeMeter): before, it finds no surge.
func (s *Server) SurgeCalmKnown() bool { return s.shed.calmKnown.Load() }
